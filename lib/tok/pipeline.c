/* pipeline.c - load the normalizer, pre-tokenizer and decoder sections
 * of tokenizer.json into the tokenizer's steps, refusing by name every
 * component (or option of one) that Atlas does not implement.
 *
 * Decoders are turned into per-id pieces here: every supported decoder
 * step before Fuse (Replace, ByteFallback, ByteLevel, Metaspace, Strip)
 * acts on one token at a time, so the bytes of each token are computed
 * once at load and decoding is concatenation. What depends on position
 * (Metaspace dropping the replacement in the first token, Strip after
 * Fuse trimming the whole text) is kept as flags for decode.c. */
#include "tok_internal.h"

#include "../core/error.h"

#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

static json_object *get(json_object *o, const char *key)
{
	json_object *v = NULL;
	if (!o || !json_object_is_type(o, json_type_object) ||
	    !json_object_object_get_ex(o, key, &v))
		return NULL;
	return v;
}

static const char *type_of(json_object *o)
{
	json_object *t = get(o, "type");
	return t && json_object_is_type(t, json_type_string) ? json_object_get_string(t) : "";
}

static const char *get_str(json_object *o, const char *key)
{
	json_object *v = get(o, key);
	return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

static bool get_bool(json_object *o, const char *key, bool dflt)
{
	json_object *v = get(o, key);
	return v && json_object_is_type(v, json_type_boolean) ? json_object_get_boolean(v) : dflt;
}

static int bad(const char *dir, int code, const char *what, const char *name)
{
	return atlas_error(code, "tokenizer.json in '%s': %s '%s' is not supported", dir, what,
			   name);
}

static int list_of(json_object *o, const char *key, const char *dir, json_object **list)
{
	*list = get(o, key);
	if (!*list || !json_object_is_type(*list, json_type_array))
		return atlas_error(ATLAS_EFORMAT, "tokenizer.json in '%s': %s Sequence has no '%s' list",
				   dir, type_of(o), key);
	return 0;
}

static int add_str(struct atlas_tok *tok, const char *s, struct tok_str *out)
{
	return atlas_tok_arena_add(tok, s, strlen(s), out);
}

/* ---- normalizers ---- */

static int add_norm(struct atlas_tok *tok, const char *dir, struct tok_norm *n)
{
	if (tok->nnorm == TOK_MAX_NORMS) {
		pcre2_code_free(n->re);
		return atlas_error(ATLAS_EUNSUPPORTED, "tokenizer.json in '%s': more than %d normalizers",
				   dir, TOK_MAX_NORMS);
	}
	tok->norm[tok->nnorm++] = *n;
	return 0;
}

int atlas_tok_load_normalizer(struct atlas_tok *tok, const char *dir, void *json)
{
	json_object *n = json;
	if (!n || json_object_is_type(n, json_type_null))
		return 0;
	const char *type = type_of(n);
	struct tok_norm step = {0};
	int rc;
	if (!strcmp(type, "Sequence")) {
		json_object *list;
		if ((rc = list_of(n, "normalizers", dir, &list)))
			return rc;
		for (size_t i = 0; i < json_object_array_length(list); i++)
			if ((rc = atlas_tok_load_normalizer(tok, dir, json_object_array_get_idx(list, i))))
				return rc;
		return 0;
	}
	if (!strcmp(type, "NFC") || !strcmp(type, "NFKC")) {
		step.kind = type[2] == 'C' ? TOK_N_NFC : TOK_N_NFKC;
		return add_norm(tok, dir, &step);
	}
	if (!strcmp(type, "Prepend")) {
		const char *p = get_str(n, "prepend");
		if (!p)
			return atlas_error(ATLAS_EFORMAT, "tokenizer.json in '%s': Prepend has no 'prepend'", dir);
		step.kind = TOK_N_PREPEND;
		if ((rc = add_str(tok, p, &step.content)))
			return rc;
		return add_norm(tok, dir, &step);
	}
	if (!strcmp(type, "Replace")) {
		json_object *pat = get(n, "pattern");
		const char *str = get_str(pat, "String"), *re = get_str(pat, "Regex");
		const char *content = get_str(n, "content");
		if ((!str && !re) || !content)
			return atlas_error(ATLAS_EFORMAT,
					   "tokenizer.json in '%s': Replace needs a pattern and a content", dir);
		step.kind = TOK_N_REPLACE;
		if (str && !*str)
			return bad(dir, ATLAS_EUNSUPPORTED, "normalizer Replace with pattern", "");
		if (str && (rc = add_str(tok, str, &step.pattern)))
			return rc;
		if ((rc = add_str(tok, content, &step.content)))
			return rc;
		if (re && !(step.re = atlas_tok_regex(re, false, "Replace normalizer")))
			return atlas_error_wrap(ATLAS_EUNSUPPORTED, "tokenizer.json in '%s'", dir);
		return add_norm(tok, dir, &step);
	}
	return bad(dir, ATLAS_EUNSUPPORTED, "normalizer",
		   *type ? type : "(no type)");
}

/* ---- pre-tokenizers ---- */

static int behavior_of(const char *b)
{
	static const char *names[] = {"Isolated", "Removed", "MergedWithPrevious", "MergedWithNext",
				      "Contiguous"};
	for (int i = 0; i < 5; i++)
		if (b && !strcmp(b, names[i]))
			return i;
	return -1;
}

static int regex_stage(struct atlas_tok *tok, const char *dir, const char *pattern, bool literal,
		       int behavior, bool invert, const char *what)
{
	struct tok_stage st = {.behavior = behavior, .invert = invert};
	if (!(st.re = atlas_tok_regex(pattern, literal, what)))
		return atlas_error_wrap(ATLAS_EUNSUPPORTED, "tokenizer.json in '%s'", dir);
	return atlas_tok_stage_add(tok, &st);
}

static int load_one_pretok(struct atlas_tok *tok, const char *dir, json_object *p, bool last)
{
	const char *t = type_of(p);
	if (!strcmp(t, "Split")) {
		json_object *pat = get(p, "pattern");
		const char *re = get_str(pat, "Regex"), *str = get_str(pat, "String");
		const char *b = get_str(p, "behavior");
		int beh = behavior_of(b);
		if (beh < 0)
			return bad(dir, ATLAS_EUNSUPPORTED, "Split behavior", b ? b : "(none)");
		if (!re && !str)
			return atlas_error(ATLAS_EFORMAT,
					   "tokenizer.json in '%s': Split pattern is neither Regex nor String", dir);
		return regex_stage(tok, dir, re ? re : str, !re, beh, get_bool(p, "invert", false),
				   "Split pre-tokenizer");
	}
	if (!strcmp(t, "ByteLevel")) {
		struct tok_stage st = {.prefix_space = get_bool(p, "add_prefix_space", true)};
		if (!last)
			return atlas_error(ATLAS_EUNSUPPORTED,
					   "tokenizer.json in '%s': pre_tokenizer ByteLevel must come last", dir);
		if (get_bool(p, "use_regex", true) &&
		    !(st.re = atlas_tok_regex(atlas_tok_gpt2_regex, false, "ByteLevel")))
			return atlas_error_wrap(ATLAS_EUNSUPPORTED, "tokenizer.json in '%s'", dir);
		tok->byte_level = true;
		return atlas_tok_stage_add(tok, &st);
	}
	if (!strcmp(t, "Metaspace")) {
		const char *r = get_str(p, "replacement"), *scheme = get_str(p, "prepend_scheme");
		struct tok_stage st = {.metaspace = true, .behavior = TOK_B_NEXT};
		int rc;
		if (!scheme) /* older files: add_prefix_space */
			scheme = get_bool(p, "add_prefix_space", true) ? "always" : "never";
		st.prepend = !strcmp(scheme, "always") ? TOK_P_ALWAYS
			     : !strcmp(scheme, "first") ? TOK_P_FIRST
			     : !strcmp(scheme, "never") ? TOK_P_NEVER : -1;
		if (st.prepend < 0)
			return bad(dir, ATLAS_EUNSUPPORTED, "Metaspace prepend_scheme", scheme);
		if ((rc = add_str(tok, r ? r : "\xe2\x96\x81", &st.repl)))
			return rc;
		if (get_bool(p, "split", true) &&
		    !(st.re = atlas_tok_regex(r ? r : "\xe2\x96\x81", true, "Metaspace")))
			return atlas_error_wrap(ATLAS_EUNSUPPORTED, "tokenizer.json in '%s'", dir);
		return atlas_tok_stage_add(tok, &st);
	}
	if (!strcmp(t, "Digits"))
		return regex_stage(tok, dir, get_bool(p, "individual_digits", false) ? "\\p{N}" : "\\p{N}+",
				   false, TOK_B_ISOLATED, false, "Digits");
	if (!strcmp(t, "Punctuation")) {
		const char *b = get_str(p, "behavior");
		int beh = b ? behavior_of(b) : TOK_B_ISOLATED;
		if (beh < 0)
			return bad(dir, ATLAS_EUNSUPPORTED, "Punctuation behavior", b);
		return regex_stage(tok, dir, "\\p{P}", false, beh, false, "Punctuation");
	}
	if (!strcmp(t, "WhitespaceSplit"))
		return regex_stage(tok, dir, "\\s+", false, TOK_B_REMOVED, false, "WhitespaceSplit");
	if (!strcmp(t, "Whitespace"))
		return regex_stage(tok, dir, "\\w+|[^\\w\\s]+", false, TOK_B_REMOVED, true, "Whitespace");
	return bad(dir, ATLAS_EUNSUPPORTED, "pre_tokenizer", *t ? t : "(no type)");
}

int atlas_tok_load_pretok(struct atlas_tok *tok, const char *dir, void *json)
{
	json_object *p = json;
	if (!p || json_object_is_type(p, json_type_null))
		return 0;
	if (strcmp(type_of(p), "Sequence"))
		return load_one_pretok(tok, dir, p, true);
	json_object *list;
	int rc = list_of(p, "pretokenizers", dir, &list);
	size_t n = rc ? 0 : json_object_array_length(list);
	for (size_t i = 0; i < n && !rc; i++) {
		json_object *s = json_object_array_get_idx(list, i);
		if (!strcmp(type_of(s), "Sequence"))
			return bad(dir, ATLAS_EUNSUPPORTED, "pre_tokenizer", "Sequence inside Sequence");
		rc = load_one_pretok(tok, dir, s, i + 1 == n);
	}
	return rc;
}

/* ---- decoders ---- */

/* A growable byte buffer for building pieces. */
struct buf {
	char *p;    /* bytes */
	size_t n;   /* used */
	size_t cap; /* allocated */
};

static int buf_put(struct buf *b, const void *s, size_t n)
{
	if (b->n + n + 1 > b->cap) {
		size_t cap = (b->n + n + 1) * 2;
		char *p = realloc(b->p, cap);
		if (!p)
			return atlas_error(ATLAS_ENOMEM, "out of memory loading the tokenizer");
		b->p = p;
		b->cap = cap;
	}
	if (n) /* s may be NULL for an empty piece */
		memcpy(b->p + b->n, s, n);
	b->n += n;
	return 0;
}

/* One per-token decoder step. */
enum dec_kind { D_REPLACE, D_BYTEFALLBACK, D_BYTELEVEL, D_METASPACE, D_STRIP };
struct dec_step {
	int kind;	  /* enum dec_kind */
	const char *a;	  /* Replace pattern / Metaspace replacement / Strip content */
	const char *b;	  /* Replace content */
	int start, stop;  /* Strip counts */
	bool first;	  /* Metaspace: this is the first token and prepend_scheme != never */
};

/* Apply one step to token bytes in, writing out. */
static int dec_apply(const struct dec_step *d, const char *in, size_t len, struct buf *out)
{
	int rc = 0;
	out->n = 0;
	if (d->kind == D_REPLACE || d->kind == D_METASPACE) {
		const char *pat = d->a, *rep = d->kind == D_REPLACE ? d->b : (d->first ? "" : " ");
		size_t pl = strlen(pat), rl = strlen(rep);
		for (size_t i = 0; i < len && !rc;) {
			if (pl && i + pl <= len && !memcmp(in + i, pat, pl)) {
				rc = buf_put(out, rep, rl);
				i += pl;
			} else {
				rc = buf_put(out, in + i++, 1);
			}
		}
		return rc;
	}
	if (d->kind == D_BYTEFALLBACK) {
		int v = atlas_tok_fallback_byte(in, len);
		if (v >= 0) {
			unsigned char c = (unsigned char)v;
			return buf_put(out, &c, 1);
		}
		return buf_put(out, in, len);
	}
	if (d->kind == D_BYTELEVEL) {
		for (size_t i = 0; i < len;) {
			uint32_t cp;
			int n = atlas_utf8_decode((const unsigned char *)in + i, len - i, &cp);
			int b = n ? atlas_tok_cp_byte(cp) : -1;
			if (b < 0) {
				out->n = 0;
				return buf_put(out, in, len);
			}
			unsigned char c = (unsigned char)b;
			if ((rc = buf_put(out, &c, 1)))
				return rc;
			i += (size_t)n;
		}
		return 0;
	}
	/* Strip: content is one character; drop up to start of them on the
	 * left and stop on the right. */
	size_t cl = strlen(d->a), s = 0, e = len;
	for (int k = 0; k < d->start && s + cl <= e && !memcmp(in + s, d->a, cl); k++)
		s += cl;
	for (int k = 0; k < d->stop && e >= s + cl && !memcmp(in + e - cl, d->a, cl); k++)
		e -= cl;
	return buf_put(out, in + s, e - s);
}

/* Collect the decoder steps (flattening Sequence) into d[*n]. */
static int dec_collect(struct atlas_tok *tok, const char *dir, json_object *o, struct dec_step *d,
		       int *n, bool *fused)
{
	const char *t = type_of(o);
	int rc;
	if (!strcmp(t, "Sequence")) {
		json_object *list;
		if ((rc = list_of(o, "decoders", dir, &list)))
			return rc;
		for (size_t i = 0; i < json_object_array_length(list); i++)
			if ((rc = dec_collect(tok, dir, json_object_array_get_idx(list, i), d, n, fused)))
				return rc;
		return 0;
	}
	if (*n == 16)
		return atlas_error(ATLAS_EUNSUPPORTED, "tokenizer.json in '%s': too many decoders", dir);
	struct dec_step *s = &d[*n];
	memset(s, 0, sizeof(*s));
	if (!strcmp(t, "Fuse")) {
		*fused = true;
		return 0;
	}
	if (!strcmp(t, "Strip")) {
		const char *c = get_str(o, "content");
		json_object *a = get(o, "start"), *b = get(o, "stop");
		if (!c || strlen(c) != 1)
			return bad(dir, ATLAS_EUNSUPPORTED, "decoder Strip content", c ? c : "(none)");
		s->kind = D_STRIP;
		s->a = c;
		s->start = a ? json_object_get_int(a) : 0;
		s->stop = b ? json_object_get_int(b) : 0;
		if (*fused) {
			/* After Fuse there is one string: trim the whole text. */
			tok->strip_char = c[0];
			tok->strip_start = s->start;
			tok->strip_stop = s->stop;
			return 0;
		}
	} else if (!strcmp(t, "Replace")) {
		json_object *pat = get(o, "pattern");
		s->kind = D_REPLACE;
		s->a = get_str(pat, "String");
		s->b = get_str(o, "content");
		if (!s->a || !*s->a || !s->b)
			return bad(dir, ATLAS_EUNSUPPORTED, "decoder Replace pattern",
				   get_str(pat, "Regex") ? "Regex" : "(none)");
		if (*fused && strlen(s->a) > 1 && strcmp(s->a, "\xe2\x96\x81"))
			return bad(dir, ATLAS_EUNSUPPORTED, "decoder Replace after Fuse of", s->a);
	} else if (!strcmp(t, "ByteFallback")) {
		s->kind = D_BYTEFALLBACK;
	} else if (!strcmp(t, "ByteLevel")) {
		s->kind = D_BYTELEVEL;
	} else if (!strcmp(t, "Metaspace")) {
		const char *scheme = get_str(o, "prepend_scheme");
		s->kind = D_METASPACE;
		s->a = get_str(o, "replacement");
		if (!s->a)
			s->a = "\xe2\x96\x81";
		s->first = scheme ? strcmp(scheme, "never") != 0 : get_bool(o, "add_prefix_space", true);
	} else {
		return bad(dir, ATLAS_EUNSUPPORTED, "decoder", *t ? t : "(no type)");
	}
	if (*fused && s->kind != D_REPLACE && s->kind != D_METASPACE)
		return bad(dir, ATLAS_EUNSUPPORTED, "decoder after Fuse", t);
	(*n)++;
	return 0;
}

/* Run the steps over one token; `first`: as the first token of a decode. */
static int dec_piece(const struct dec_step *d, int n, bool first, const char *tokstr, size_t len,
		     struct buf *a, struct buf *b)
{
	int rc;
	a->n = 0;
	if ((rc = buf_put(a, tokstr, len)))
		return rc;
	for (int i = 0; i < n; i++) {
		struct dec_step s = d[i];
		if (s.kind == D_METASPACE)
			s.first = s.first && first;
		if ((rc = dec_apply(&s, a->p, a->n, b)))
			return rc;
		struct buf t = *a;
		*a = *b;
		*b = t;
	}
	return 0;
}

int atlas_tok_load_decoder(struct atlas_tok *tok, const char *dir, void *json)
{
	struct dec_step d[16];
	int n = 0, rc = 0;
	bool fused = false, meta_first = false;
	if (json && !json_object_is_type(json, json_type_null) &&
	    (rc = dec_collect(tok, dir, json, d, &n, &fused)))
		return rc;
	for (int i = 0; i < n; i++)
		meta_first |= d[i].kind == D_METASPACE && d[i].first;
	if (meta_first && !(tok->piece0 = calloc((size_t)tok->nvocab + 1, sizeof(*tok->piece0))))
		return atlas_error(ATLAS_ENOMEM, "out of memory loading the tokenizer");
	struct buf a = {0}, b = {0};
	for (int64_t id = 0; id < tok->nvocab && !rc; id++) {
		if (!(tok->flags[id] & TOK_F_PRESENT))
			continue;
		const char *s = tok->arena + tok->token[id].off;
		size_t len = tok->token[id].len;
		for (int pass = 0; pass < 1 + meta_first && !rc; pass++) {
			/* The arena may move while adding: copy the token first. */
			struct buf in = {0};
			rc = buf_put(&in, s, len);
			if (!rc)
				rc = dec_piece(d, n, pass == 1, in.p, len, &a, &b);
			free(in.p);
			if (!rc)
				rc = atlas_tok_arena_add(tok, a.p ? a.p : "", a.n,
							 pass ? &tok->piece0[id] : &tok->piece[id]);
			s = tok->arena + tok->token[id].off;
		}
	}
	free(a.p);
	free(b.p);
	return rc;
}
