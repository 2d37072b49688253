/* pretok.c - pre-tokenization: the Split / ByteLevel regex stages, run
 * with PCRE2, cut a text segment into pieces that BPE encodes one by one.
 *
 * Each stage splits every piece of the previous stage: Split (with each
 * of Hugging Face's behaviours and invert), ByteLevel (optional prefix
 * space, then GPT-2's regex), Metaspace (' ' to a replacement character,
 * prepend scheme, split before each replacement); Digits, Punctuation,
 * Whitespace and WhitespaceSplit are loaded as Split stages. The patterns are compiled
 * with PCRE2_MATCH_INVALID_UTF, so bytes that are not UTF-8 never match
 * and stay in the gaps instead of failing the match. Match data is made
 * per call: compiled patterns are shared read-only between threads. */
#include "tok_internal.h"

#include "../core/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* GPT-2's pattern, which ByteLevel uses when use_regex is true. */
const char atlas_tok_gpt2_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* Unicode White_Space, which is what \s means to Oniguruma (the regex
 * engine of Hugging Face's tokenizers). PCRE2's \s also takes U+180E,
 * so patterns are rewritten to use this list instead. */
#define WHITE_SPACE                                                                                \
	"\\t-\\r\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}"                                 \
	"\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"

/* Copy `pattern` with \s and \S spelled as explicit classes; a \S
 * inside a character class has no such spelling and stays as it is.
 * Returns a malloc'd string or NULL. */
static char *rewrite_spaces(const char *pattern)
{
	size_t len = strlen(pattern), w = 0;
	char *out = malloc(len * (sizeof(WHITE_SPACE) + 4) + 1);
	bool in_class = false;
	if (!out)
		return NULL;
	for (size_t i = 0; i < len; i++) {
		char c = pattern[i];
		if (c == '\\' && i + 1 < len) {
			char e = pattern[i + 1];
			const char *rep = NULL;
			if (e == 's')
				rep = in_class ? WHITE_SPACE : "[" WHITE_SPACE "]";
			else if (e == 'S' && !in_class)
				rep = "[^" WHITE_SPACE "]";
			if (rep) {
				w += (size_t)sprintf(out + w, "%s", rep);
			} else {
				out[w++] = c;
				out[w++] = e;
			}
			i++;
			continue;
		}
		if (!in_class && c == '[') {
			in_class = true;
			out[w++] = c;
			/* A ']' right after '[' or '[^' is a literal member. */
			if (i + 1 < len && pattern[i + 1] == '^')
				out[w++] = pattern[++i];
			if (i + 1 < len && pattern[i + 1] == ']')
				out[w++] = pattern[++i];
			continue;
		}
		if (in_class && c == '[' && i + 1 < len && pattern[i + 1] == ':') {
			/* A POSIX class such as [:alpha:] inside a class. */
			const char *end = strstr(pattern + i + 2, ":]");
			size_t n = end ? (size_t)(end - (pattern + i)) + 2 : 1;
			memcpy(out + w, pattern + i, n);
			w += n;
			i += n - 1;
			continue;
		}
		if (in_class && c == ']')
			in_class = false;
		out[w++] = c;
	}
	out[w] = '\0';
	return out;
}

pcre2_code *atlas_tok_regex(const char *pattern, bool literal, const char *what)
{
	int err;
	PCRE2_SIZE off;
	uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
	if (literal) /* PCRE2_LITERAL refuses PCRE2_UCP, which it has no use for */
		opts = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | PCRE2_LITERAL;
	char *pat = literal ? NULL : rewrite_spaces(pattern);
	if (!literal && !pat) {
		atlas_error(ATLAS_ENOMEM, "out of memory compiling a regex");
		return NULL;
	}
	pcre2_code *re = pcre2_compile((PCRE2_SPTR)(pat ? pat : pattern), PCRE2_ZERO_TERMINATED,
				       opts, &err, &off, NULL);
	free(pat);
	if (!re) {
		PCRE2_UCHAR msg[256];
		pcre2_get_error_message(err, msg, sizeof(msg));
		atlas_error(ATLAS_EUNSUPPORTED, "%s: cannot compile regex '%s' at offset %zu: %s",
			    what, pattern, (size_t)off, (char *)msg);
		return NULL;
	}
	/* JIT is an optimisation: without it matching still works. */
	pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
	return re;
}

int atlas_tok_stage_add(struct atlas_tok *tok, const struct tok_stage *st)
{
	if (tok->nstage == TOK_MAX_STAGES) {
		pcre2_code_free(st->re);
		return atlas_error(ATLAS_EUNSUPPORTED, "more than %d pre-tokenizer stages",
				   TOK_MAX_STAGES);
	}
	tok->stage[tok->nstage++] = *st;
	return 0;
}

/* Per-call state of one segment's pre-tokenization. */
struct pretok {
	const struct atlas_tok *tok;	      /* the tokenizer */
	struct tok_bpe_scratch *sc;	      /* BPE scratch */
	struct tok_ids *out;		      /* where ids go */
	pcre2_match_data *md[TOK_MAX_STAGES]; /* match data per stage */
};

static int run_stage(struct pretok *p, int k, const char *s, size_t len, bool first);

/* Match with JIT when it was compiled; fall back to the interpreter when
 * the JIT stack runs out (huge whitespace runs) rather than fail. */
static int match(const pcre2_code *re, const char *s, size_t len, size_t at, pcre2_match_data *md)
{
	int rc = pcre2_match(re, (PCRE2_SPTR)s, len, at, 0, md, NULL);
	if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
		rc = pcre2_match(re, (PCRE2_SPTR)s, len, at, PCRE2_NO_JIT, md, NULL);
	return rc;
}

/* One span of a split: a match of the pattern or a gap between two. */
struct span {
	size_t start, end; /* byte range */
	bool delim;	   /* a delimiter (a match, or a gap when inverted) */
};

/* Find the next non-empty match at or after *at: 1 and its range, 0 when
 * there is none, or a negative ATLAS_E*. */
static int next_match(struct pretok *p, int k, const char *s, size_t len, size_t *at, size_t *ms,
		      size_t *me)
{
	const struct tok_stage *st = &p->tok->stage[k];
	while (*at < len) {
		int m = match(st->re, s, len, *at, p->md[k]);
		if (m == PCRE2_ERROR_NOMATCH)
			return 0;
		if (m < 0) {
			PCRE2_UCHAR msg[256];
			pcre2_get_error_message(m, msg, sizeof(msg));
			return atlas_error(ATLAS_EINVAL, "pre-tokenizer regex failed: %s",
					   (char *)msg);
		}
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(p->md[k]);
		if (ov[1] == ov[0]) {
			/* An empty match makes no piece; step over one character
			 * (or one invalid byte) and search again. */
			uint32_t cp;
			int n = atlas_utf8_decode((const unsigned char *)s + ov[1], len - ov[1], &cp);
			*at = ov[1] + (n ? (size_t)n : 1);
			continue;
		}
		*ms = ov[0];
		*me = *at = ov[1];
		return 1;
	}
	return 0;
}

/* Isolated (the hot path of every byte-level tokenizer): matches and gaps
 * go down as they come, with nothing collected. */
static int split_isolated(struct pretok *p, int k, const char *s, size_t len, bool first)
{
	size_t at = 0, gap = 0, ms, me;
	int rc;
	while ((rc = next_match(p, k, s, len, &at, &ms, &me)) == 1) {
		if (ms > gap && (rc = run_stage(p, k + 1, s + gap, ms - gap, first && gap == 0)))
			return rc;
		if ((rc = run_stage(p, k + 1, s + ms, me - ms, first && ms == 0)))
			return rc;
		gap = me;
	}
	if (rc < 0)
		return rc;
	if (gap < len)
		return run_stage(p, k + 1, s + gap, len - gap, first && gap == 0);
	return 0;
}

/* Every other behaviour: collect the spans, merge them as Hugging Face's
 * NormalizedString::split does, and send the pieces down. */
static int split_general(struct pretok *p, int k, const char *s, size_t len, bool first)
{
	const struct tok_stage *st = &p->tok->stage[k];
	struct span *sp = NULL;
	size_t n = 0, cap = 0, at = 0, gap = 0, ms, me;
	int rc;
	for (;;) {
		rc = next_match(p, k, s, len, &at, &ms, &me);
		if (rc < 0)
			goto out;
		size_t need = n + 2;
		if (need > cap) {
			cap = cap ? 2 * cap : 16;
			struct span *g = realloc(sp, cap * sizeof(*sp));
			if (!g) {
				rc = atlas_error(ATLAS_ENOMEM, "out of memory pre-tokenizing");
				goto out;
			}
			sp = g;
		}
		size_t gend = rc ? ms : len;
		if (gend > gap)
			sp[n++] = (struct span){gap, gend, st->invert};
		if (!rc)
			break;
		sp[n++] = (struct span){ms, me, !st->invert};
		gap = me;
	}
	/* Merge in place: w pieces written, prev = the last span was a delimiter. */
	size_t w = 0;
	bool prev = false;
	if (st->behavior == TOK_B_NEXT) {
		/* Fold from the right: a delimiter joins the piece after it. */
		size_t r = n;
		for (size_t i = n; i-- > 0;) {
			struct span c = sp[i];
			if (c.delim && !prev && r < n)
				sp[r].start = c.start;
			else
				sp[--r] = c;
			prev = c.delim;
		}
		memmove(sp, sp + r, (n - r) * sizeof(*sp));
		w = n - r;
	} else {
		for (size_t i = 0; i < n; i++) {
			struct span c = sp[i];
			if (st->behavior == TOK_B_REMOVED) {
				if (!c.delim)
					sp[w++] = c;
				continue;
			}
			bool join = st->behavior == TOK_B_PREVIOUS	 ? c.delim && !prev
				    : st->behavior == TOK_B_CONTIGUOUS ? c.delim == prev
								       : false;
			if (join && w > 0)
				sp[w - 1].end = c.end;
			else
				sp[w++] = c;
			prev = c.delim;
		}
	}
	for (size_t i = 0; i < w && !rc; i++)
		rc = run_stage(p, k + 1, s + sp[i].start, sp[i].end - sp[i].start,
			       first && sp[i].start == 0);
out:
	free(sp);
	return rc < 0 ? rc : 0;
}

/* Metaspace: every ' ' becomes the replacement, which is also prepended
 * as prepend_scheme says; the result goes on to the split (if any). */
static int metaspace(struct pretok *p, int k, const char *s, size_t len, bool first)
{
	const struct tok_stage *st = &p->tok->stage[k];
	const char *r = p->tok->arena + st->repl.off;
	size_t rl = st->repl.len, spaces = 0, w = 0;
	for (size_t i = 0; i < len; i++)
		spaces += s[i] == ' ';
	char *buf = malloc(len + (spaces + 1) * rl + 1);
	if (!buf)
		return atlas_error(ATLAS_ENOMEM, "out of memory pre-tokenizing");
	bool starts = len >= rl && !memcmp(s, r, rl);
	if (!(len > 0 && s[0] == ' ') && !starts &&
	    (st->prepend == TOK_P_ALWAYS || (st->prepend == TOK_P_FIRST && first))) {
		memcpy(buf, r, rl);
		w = rl;
	}
	for (size_t i = 0; i < len; i++) {
		if (s[i] == ' ') {
			memcpy(buf + w, r, rl);
			w += rl;
		} else {
			buf[w++] = s[i];
		}
	}
	int rc = st->re ? split_general(p, k, buf, w, first) : run_stage(p, k + 1, buf, w, first);
	free(buf);
	return rc;
}

static int run_stage(struct pretok *p, int k, const char *s, size_t len, bool first)
{
	if (len == 0)
		return 0;
	if (k == p->tok->nstage)
		return atlas_tok_bpe(p->tok, p->sc, s, len, p->out);
	const struct tok_stage *st = &p->tok->stage[k];
	if (st->metaspace)
		return metaspace(p, k, s, len, first);
	if (st->prefix_space && s[0] != ' ') {
		char *buf = malloc(len + 1);
		if (!buf)
			return atlas_error(ATLAS_ENOMEM, "out of memory pre-tokenizing");
		buf[0] = ' ';
		memcpy(buf + 1, s, len);
		int rc = st->re ? split_isolated(p, k, buf, len + 1, first)
				: run_stage(p, k + 1, buf, len + 1, first);
		free(buf);
		return rc;
	}
	if (!st->re)
		return run_stage(p, k + 1, s, len, first);
	if (st->behavior == TOK_B_ISOLATED)
		return split_isolated(p, k, s, len, first);
	return split_general(p, k, s, len, first);
}

int atlas_tok_encode_segment(const struct atlas_tok *tok, struct tok_bpe_scratch *sc, const char *s,
			     size_t len, bool first, struct tok_ids *out)
{
	struct pretok p = {.tok = tok, .sc = sc, .out = out};
	int rc = 0;
	for (int k = 0; k < tok->nstage; k++) {
		if (tok->stage[k].re &&
		    !(p.md[k] = pcre2_match_data_create_from_pattern(tok->stage[k].re, NULL))) {
			rc = atlas_error(ATLAS_ENOMEM, "out of memory encoding text");
			goto out;
		}
	}
	rc = run_stage(&p, 0, s, len, first);
out:
	for (int k = 0; k < tok->nstage; k++)
		pcre2_match_data_free(p.md[k]);
	return rc;
}
