/* tok_load.c - read tokenizer.json (and tokenizer_config.json) into a
 * struct atlas_tok, refusing by name whatever Atlas does not implement.
 *
 * This file reads the model (BPE: vocab, merges in either spelling,
 * byte_fallback, unk_token, fuse_unk, ignore_merges), the added tokens,
 * the post-processor (null, ByteLevel, TemplateProcessing, or a
 * Sequence of them) and tokenizer_config.json; pipeline.c reads the
 * normalizer, pre-tokenizer and decoder. */
#include "tok_internal.h"

#include "../core/error.h"

#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Refuse with "tokenizer.json in 'DIR': <what>". */
static int bad(const char *dir, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad(const char *dir, int code, const char *fmt, ...)
{
	char msg[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return atlas_error(code, "tokenizer.json in '%s': %s", dir, msg);
}

static json_object *get(json_object *o, const char *key)
{
	json_object *v = NULL;
	if (!o || !json_object_is_type(o, json_type_object) ||
	    !json_object_object_get_ex(o, key, &v))
		return NULL;
	return v;
}

/* The "type" of a component, "" when absent. */
static const char *type_of(json_object *o)
{
	json_object *t = get(o, "type");
	return t && json_object_is_type(t, json_type_string) ? json_object_get_string(t) : "";
}

static bool get_bool(json_object *o, const char *key, bool dflt)
{
	json_object *v = get(o, key);
	return v && json_object_is_type(v, json_type_boolean) ? json_object_get_boolean(v) : dflt;
}

int atlas_tok_arena_add(struct atlas_tok *tok, const char *s, size_t len, struct tok_str *out)
{
	if (tok->arena_len + len > tok->arena_cap || !tok->arena) { /* "" first: still allocate */
		size_t cap = tok->arena_cap ? tok->arena_cap : 1 << 20;
		while (cap < tok->arena_len + len)
			cap *= 2;
		if (cap > UINT32_MAX)
			return atlas_error(ATLAS_ERANGE, "tokenizer strings exceed 4 GiB");
		char *a = realloc(tok->arena, cap);
		if (!a)
			return atlas_error(ATLAS_ENOMEM, "out of memory loading the tokenizer");
		tok->arena = a;
		tok->arena_cap = cap;
	}
	if (len)
		memcpy(tok->arena + tok->arena_len, s, len);
	out->off = (uint32_t)tok->arena_len;
	out->len = (uint32_t)len;
	tok->arena_len += len;
	return 0;
}

static int load_vocab(struct atlas_tok *tok, const char *dir, json_object *vocab,
		      json_object *added)
{
	if (!vocab || !json_object_is_type(vocab, json_type_object))
		return bad(dir, ATLAS_EFORMAT, "model.vocab is missing or not an object");
	int64_t maxid = -1;
	size_t nadded = added && json_object_is_type(added, json_type_array)
			    ? json_object_array_length(added)
			    : 0;
	json_object_object_foreach(vocab, key, val)
	{
		int64_t id = json_object_get_int64(val);
		(void)key;
		if (!json_object_is_type(val, json_type_int) || id < 0 || id > INT32_MAX - 1)
			return bad(dir, ATLAS_EFORMAT, "model.vocab['%s'] is not a valid id", key);
		if (id > maxid)
			maxid = id;
	}
	for (size_t i = 0; i < nadded; i++) {
		json_object *a = json_object_array_get_idx(added, i);
		json_object *idv = get(a, "id"), *cv = get(a, "content");
		int64_t id = idv ? json_object_get_int64(idv) : -1;
		if (!idv || !json_object_is_type(idv, json_type_int) || id < 0 ||
		    id > INT32_MAX - 1 || !cv || !json_object_is_type(cv, json_type_string))
			return bad(dir, ATLAS_EFORMAT,
				   "added_tokens[%zu] lacks a valid id or content", i);
		if (id > maxid)
			maxid = id;
	}
	/* The id arrays are sized by the largest id: an id far beyond the
	 * number of entries would make a tiny file allocate gigabytes. Real
	 * vocabularies are dense (a few unused ids at most). */
	int64_t entries = (int64_t)json_object_object_length(vocab) + (int64_t)nadded;
	int64_t limit = 2 * entries + 1024;
	if (maxid >= limit) {
		json_object_object_foreach(vocab, k3, v3)
		{
			if (json_object_get_int64(v3) == maxid)
				return bad(dir, ATLAS_EFORMAT,
					   "model.vocab['%.60s'] has id %lld, far beyond the %lld "
					   "tokens of the file (ids must be below %lld)",
					   k3, (long long)maxid, (long long)entries,
					   (long long)limit);
		}
		for (size_t i = 0; i < nadded; i++)
			if (json_object_get_int64(get(json_object_array_get_idx(added, i), "id")) ==
			    maxid)
				return bad(
				    dir, ATLAS_EFORMAT,
				    "added_tokens[%zu] has id %lld, far beyond the %lld tokens "
				    "of the file (ids must be below %lld)",
				    i, (long long)maxid, (long long)entries, (long long)limit);
	}
	tok->nvocab = maxid + 1;
	tok->piece = calloc((size_t)tok->nvocab + 1, sizeof(*tok->piece));
	tok->token = calloc((size_t)tok->nvocab + 1, sizeof(*tok->token));
	tok->flags = calloc((size_t)tok->nvocab + 1, 1);
	tok->added = calloc(nadded + 1, sizeof(*tok->added));
	if (!tok->piece || !tok->token || !tok->flags || !tok->added)
		return atlas_error(ATLAS_ENOMEM, "out of memory loading the tokenizer");
	int rc = atlas_tok_map_build(tok, (size_t)json_object_object_length(vocab));
	if (rc)
		return rc;
	json_object_object_foreach(vocab, k2, v2)
	{
		int32_t id = (int32_t)json_object_get_int64(v2);
		size_t len = strlen(k2);
		struct tok_str skey;
		if ((rc = atlas_tok_arena_add(tok, k2, len, &skey)))
			return rc;
		atlas_tok_map_put(tok, skey, id);
		tok->token[id] = skey;
		tok->flags[id] |= TOK_F_PRESENT;
	}
	for (size_t i = 0; i < nadded; i++) {
		json_object *a = json_object_array_get_idx(added, i);
		json_object *cv = get(a, "content");
		struct tok_added *t = &tok->added[tok->nadded++];
		t->id = (int32_t)json_object_get_int64(get(a, "id"));
		t->special = get_bool(a, "special", false);
		t->single_word = get_bool(a, "single_word", false);
		t->lstrip = get_bool(a, "lstrip", false);
		t->rstrip = get_bool(a, "rstrip", false);
		/* Hugging Face's default: special tokens match raw text */
		t->normalized = get_bool(a, "normalized", !t->special);
		tok->has_normalized_added |= t->normalized;
		size_t len = (size_t)json_object_get_string_len(cv);
		if ((rc = atlas_tok_arena_add(tok, json_object_get_string(cv), len, &t->content)))
			return rc;
		tok->token[t->id] = t->content;
		tok->flags[t->id] |= TOK_F_PRESENT | TOK_F_ADDED | (t->special ? TOK_F_SPECIAL : 0);
	}
	return 0;
}

/* One merge, "a b" or ["a", "b"]. */
static int merge_parts(json_object *m, const char **a, size_t *alen, const char **b, size_t *blen)
{
	if (json_object_is_type(m, json_type_string)) {
		const char *s = json_object_get_string(m);
		const char *sp = strchr(s, ' ');
		if (!sp || sp == s || !sp[1])
			return -1;
		*a = s;
		*alen = (size_t)(sp - s);
		*b = sp + 1;
		*blen = strlen(sp + 1);
		return 0;
	}
	if (json_object_is_type(m, json_type_array) && json_object_array_length(m) == 2) {
		json_object *x = json_object_array_get_idx(m, 0);
		json_object *y = json_object_array_get_idx(m, 1);
		if (!json_object_is_type(x, json_type_string) ||
		    !json_object_is_type(y, json_type_string))
			return -1;
		*a = json_object_get_string(x);
		*alen = (size_t)json_object_get_string_len(x);
		*b = json_object_get_string(y);
		*blen = (size_t)json_object_get_string_len(y);
		return 0;
	}
	return -1;
}

static int load_merges(struct atlas_tok *tok, const char *dir, json_object *merges)
{
	if (!merges || !json_object_is_type(merges, json_type_array))
		return bad(dir, ATLAS_EFORMAT, "model.merges is missing or not a list");
	size_t n = json_object_array_length(merges);
	int rc = atlas_tok_merges_build(tok, n);
	char *cat = NULL;
	size_t catcap = 0;
	if (rc)
		return rc;
	for (size_t i = 0; i < n; i++) {
		const char *a, *b;
		size_t alen, blen;
		if (merge_parts(json_object_array_get_idx(merges, i), &a, &alen, &b, &blen)) {
			free(cat);
			return bad(dir, ATLAS_EFORMAT, "model.merges[%zu] is not \"a b\" or [a, b]",
				   i);
		}
		if (alen + blen > catcap) {
			catcap = 2 * (alen + blen);
			free(cat);
			if (!(cat = malloc(catcap)))
				return atlas_error(ATLAS_ENOMEM,
						   "out of memory loading the tokenizer");
		}
		memcpy(cat, a, alen);
		memcpy(cat + alen, b, blen);
		int32_t ia = atlas_tok_map_get(tok, a, alen);
		int32_t ib = atlas_tok_map_get(tok, b, blen);
		int32_t ir = atlas_tok_map_get(tok, cat, alen + blen);
		/* as Hugging Face tokenizers does: a merge must name tokens of
		 * the vocabulary, and so must its result */
		if (ia < 0 || ib < 0 || ir < 0) {
			const char *what = ia < 0 ? a : ib < 0 ? b : cat;
			int wl = (int)(ia < 0 ? alen : ib < 0 ? blen : alen + blen);
			rc = bad(dir, ATLAS_EFORMAT,
				 "model.merges[%zu] names '%.*s', which is not in the vocabulary", i,
				 wl > 60 ? 60 : wl, what);
			free(cat);
			return rc;
		}
		atlas_tok_merges_put(tok, ia, ib, (int32_t)i, ir);
	}
	free(cat);
	return 0;
}

static int load_model(struct atlas_tok *tok, const char *dir, json_object *root)
{
	json_object *model = get(root, "model");
	const char *type = type_of(model);
	if (!model)
		return bad(dir, ATLAS_EFORMAT, "'model' is missing");
	if (*type && strcmp(type, "BPE"))
		return bad(dir, ATLAS_EUNSUPPORTED,
			   "model type '%s' is not supported (supported: BPE)", type);
	tok->byte_fallback = get_bool(model, "byte_fallback", false);
	tok->fuse_unk = get_bool(model, "fuse_unk", false);
	json_object *dropout = get(model, "dropout");
	if (dropout && json_object_get_double(dropout) != 0.0)
		return bad(dir, ATLAS_EUNSUPPORTED, "model.dropout is not supported");
	const char *affix[] = {"continuing_subword_prefix", "end_of_word_suffix"};
	for (int i = 0; i < 2; i++) {
		json_object *v = get(model, affix[i]);
		if (v && json_object_is_type(v, json_type_string) &&
		    json_object_get_string_len(v) > 0)
			return bad(dir, ATLAS_EUNSUPPORTED, "model.%s '%s' is not supported",
				   affix[i], json_object_get_string(v));
	}
	tok->ignore_merges = get_bool(model, "ignore_merges", false);
	int rc = load_vocab(tok, dir, get(model, "vocab"), get(root, "added_tokens"));
	if (rc)
		return rc;
	json_object *unk = get(model, "unk_token");
	tok->unk = -1;
	if (unk && json_object_is_type(unk, json_type_string) &&
	    (tok->unk = atlas_tok_map_get(tok, json_object_get_string(unk),
					  (size_t)json_object_get_string_len(unk))) < 0)
		return bad(dir, ATLAS_EFORMAT, "model.unk_token '%s' is not in the vocabulary",
			   json_object_get_string(unk));
	for (int b = 0; b < 256; b++) {
		char name[8];
		snprintf(name, sizeof(name), "<0x%02X>", b);
		tok->fallback_id[b] = atlas_tok_map_get(tok, name, 6);
	}
	return load_merges(tok, dir, get(model, "merges"));
}

/* The one-symbol token of each byte: its GPT-2 alphabet symbol for a
 * byte-level vocabulary, else the ASCII character itself (bytes >= 0x80
 * are no character on their own there). */
static void set_byte_ids(struct atlas_tok *tok)
{
	for (int b = 0; b < 256; b++) {
		char sym[2];
		uint32_t cp = tok->byte_level ? atlas_tok_byte_cp((uint8_t)b) : (uint32_t)b;
		size_t n = 1;
		if (!tok->byte_level && b >= 0x80) {
			tok->byte_id[b] = -1;
			continue;
		}
		if (cp < 0x80) {
			sym[0] = (char)cp;
		} else {
			sym[0] = (char)(0xc0 | cp >> 6);
			sym[1] = (char)(0x80 | (cp & 0x3f));
			n = 2;
		}
		tok->byte_id[b] = atlas_tok_map_get(tok, sym, n);
	}
}

/* The ids of a template SpecialToken: post_processor.special_tokens
 * lists them; fall back to the token's own id. */
static int template_ids(struct atlas_tok *tok, const char *dir, json_object *pp, const char *name,
			int32_t *ids, int *n)
{
	json_object *ent = get(get(pp, "special_tokens"), name);
	json_object *list = get(ent, "ids");
	if (list && !json_object_is_type(list, json_type_array))
		return bad(dir, ATLAS_EFORMAT, "post_processor special_tokens['%s'].ids is not a list",
			   name);
	size_t len = list ? json_object_array_length(list) : 0;
	if (!list) {
		int32_t id = atlas_tok_lookup(tok, name);
		if (id < 0)
			return bad(dir, ATLAS_EFORMAT,
				   "post_processor special token '%s' is not in the vocabulary",
				   name);
		if (*n >= TOK_MAX_TEMPLATE)
			return bad(dir, ATLAS_EUNSUPPORTED, "post_processor template is too long");
		ids[(*n)++] = id;
		return 0;
	}
	for (size_t i = 0; i < len; i++) {
		int64_t id = json_object_get_int64(json_object_array_get_idx(list, i));
		if (id < 0 || id >= tok->nvocab)
			return bad(
			    dir, ATLAS_EFORMAT,
			    "post_processor special token '%s' has id %lld outside the vocabulary",
			    name, (long long)id);
		if (*n >= TOK_MAX_TEMPLATE)
			return bad(dir, ATLAS_EUNSUPPORTED, "post_processor template is too long");
		ids[(*n)++] = (int32_t)id;
	}
	return 0;
}

static int load_postproc(struct atlas_tok *tok, const char *dir, json_object *pp)
{
	const char *type = type_of(pp);
	if (!pp || json_object_is_type(pp, json_type_null) || !strcmp(type, "ByteLevel"))
		return 0;
	if (!strcmp(type, "Sequence")) {
		json_object *list = get(pp, "processors");
		if (list && !json_object_is_type(list, json_type_array))
			return bad(dir, ATLAS_EFORMAT, "post_processor.processors is not a list");
		size_t n = list ? json_object_array_length(list) : 0;
		for (size_t i = 0; i < n; i++) {
			int rc = load_postproc(tok, dir, json_object_array_get_idx(list, i));
			if (rc)
				return rc;
		}
		return 0;
	}
	if (strcmp(type, "TemplateProcessing"))
		return bad(dir, ATLAS_EUNSUPPORTED,
			   "post_processor '%s' is not supported (supported: ByteLevel, "
			   "TemplateProcessing)",
			   type);
	json_object *single = get(pp, "single");
	if (single && !json_object_is_type(single, json_type_array))
		return bad(dir, ATLAS_EFORMAT, "post_processor.single is not a list");
	size_t n = single ? json_object_array_length(single) : 0;
	bool seen_a = false;
	for (size_t i = 0; i < n; i++) {
		json_object *item = json_object_array_get_idx(single, i);
		json_object *sp = get(item, "SpecialToken"), *seq = get(item, "Sequence");
		if (seq) {
			json_object *id = get(seq, "id");
			if (seen_a || !id || strcmp(json_object_get_string(id), "A"))
				return bad(dir, ATLAS_EUNSUPPORTED,
					   "post_processor single template must hold $A once");
			seen_a = true;
			continue;
		}
		json_object *name = get(sp, "id");
		if (!name)
			return bad(dir, ATLAS_EFORMAT, "post_processor single[%zu] is malformed",
				   i);
		int rc = seen_a ? template_ids(tok, dir, pp, json_object_get_string(name),
					       tok->suffix_ids, &tok->nsuffix)
				: template_ids(tok, dir, pp, json_object_get_string(name),
					       tok->prefix_ids, &tok->nprefix);
		if (rc)
			return rc;
	}
	return 0;
}

/* bos_token / eos_token: a string or {"content": ...}. */
static int32_t config_token(const struct atlas_tok *tok, json_object *cfg, const char *key)
{
	json_object *v = get(cfg, key);
	if (v && json_object_is_type(v, json_type_object))
		v = get(v, "content");
	if (!v || !json_object_is_type(v, json_type_string))
		return -1;
	return atlas_tok_lookup(tok, json_object_get_string(v));
}

static bool has_id(const int32_t *ids, int n, int32_t id)
{
	for (int i = 0; i < n; i++)
		if (ids[i] == id)
			return true;
	return false;
}

static int load_config(struct atlas_tok *tok, const char *dir)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/tokenizer_config.json", dir);
	tok->bos = tok->nprefix > 0 ? tok->prefix_ids[0] : -1;
	tok->eos = -1;
	if (access(path, F_OK))
		return 0;
	json_object *cfg = json_object_from_file(path);
	if (!cfg)
		return atlas_error(ATLAS_EFORMAT, "cannot parse '%s': %s", path,
				   json_util_get_last_err());
	if (get(cfg, "bos_token"))
		tok->bos = config_token(tok, cfg, "bos_token");
	tok->eos = config_token(tok, cfg, "eos_token");
	if (get_bool(cfg, "add_bos_token", false) && tok->bos >= 0 &&
	    !has_id(tok->prefix_ids, tok->nprefix, tok->bos)) {
		if (tok->nprefix == TOK_MAX_TEMPLATE) {
			json_object_put(cfg);
			return atlas_error(ATLAS_EUNSUPPORTED, "'%s': too many prefix tokens",
					   path);
		}
		memmove(tok->prefix_ids + 1, tok->prefix_ids,
			(size_t)tok->nprefix * sizeof(int32_t));
		tok->prefix_ids[0] = tok->bos;
		tok->nprefix++;
	}
	if (get_bool(cfg, "add_eos_token", false) && tok->eos >= 0 &&
	    !has_id(tok->suffix_ids, tok->nsuffix, tok->eos)) {
		if (tok->nsuffix == TOK_MAX_TEMPLATE) {
			json_object_put(cfg);
			return atlas_error(ATLAS_EUNSUPPORTED, "'%s': too many suffix tokens",
					   path);
		}
		tok->suffix_ids[tok->nsuffix++] = tok->eos;
	}
	int rc = atlas_chat_tmpl_load(cfg, path, &tok->chat); /* chat.c */
	json_object_put(cfg);
	return rc;
}

static int load_all(struct atlas_tok *tok, const char *dir, json_object *root)
{
	int rc = load_model(tok, dir, root);
	if (!rc)
		rc = atlas_tok_load_normalizer(tok, dir, get(root, "normalizer"));
	if (!rc)
		rc = atlas_tok_load_pretok(tok, dir, get(root, "pre_tokenizer"));
	if (!rc)
		set_byte_ids(tok);
	if (!rc)
		rc = load_postproc(tok, dir, get(root, "post_processor"));
	if (!rc) {
		json_object *d = get(root, "decoder");
		if (!d || json_object_is_type(d, json_type_null))
			rc = bad(dir, ATLAS_EUNSUPPORTED,
				 "decoder 'null' is not supported (tokens would be joined by spaces)");
		else
			rc = atlas_tok_load_decoder(tok, dir, d);
	}
	if (!rc)
		rc = atlas_tok_added_index(tok);
	if (!rc)
		rc = load_config(tok, dir);
	return rc;
}

struct atlas_tok *atlas_tok_load(const char *dir)
{
	char path[4096];
	if (!dir) {
		atlas_error(ATLAS_EINVAL, "no tokenizer directory given");
		return NULL;
	}
	snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
	if (access(path, R_OK)) {
		atlas_error(ATLAS_ENOTFOUND, "cannot open '%s'", path);
		return NULL;
	}
	json_object *root = json_object_from_file(path);
	if (!root) {
		atlas_error(ATLAS_EFORMAT, "cannot parse '%s': %s", path, json_util_get_last_err());
		return NULL;
	}
	struct atlas_tok *tok = calloc(1, sizeof(*tok));
	if (!tok) {
		json_object_put(root);
		atlas_error(ATLAS_ENOMEM, "out of memory loading the tokenizer");
		return NULL;
	}
	tok->bos = tok->eos = -1;
	int rc = load_all(tok, dir, root);
	json_object_put(root);
	if (rc) {
		atlas_tok_free(tok);
		return NULL;
	}
	return tok;
}

void atlas_tok_free(struct atlas_tok *tok)
{
	if (!tok)
		return;
	for (int k = 0; k < tok->nstage; k++)
		pcre2_code_free(tok->stage[k].re);
	for (int k = 0; k < tok->nnorm; k++)
		pcre2_code_free(tok->norm[k].re);
	free(tok->arena);
	free(tok->piece);
	free(tok->piece0);
	free(tok->token);
	free(tok->flags);
	free(tok->vocab.slots);
	free(tok->merges.slots);
	free(tok->added);
	free(tok->added_order);
	atlas_chat_tmpl_free(tok->chat);
	free(tok);
}
