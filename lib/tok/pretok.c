/* pretok.c - pre-tokenization: the Split / ByteLevel regex stages, run
 * with PCRE2, cut a text segment into pieces that BPE encodes one by one.
 *
 * Each stage splits every piece of the previous stage with "Isolated"
 * behaviour: matches and the gaps between them both become pieces, so
 * every input byte lands in exactly one piece. The patterns are compiled
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

int atlas_tok_stage_compile(struct atlas_tok *tok, const char *pattern, bool literal,
			    bool prefix_space, const char *what)
{
	if (tok->nstage == TOK_MAX_STAGES)
		return atlas_error(ATLAS_EUNSUPPORTED, "more than %d pre-tokenizer stages",
				   TOK_MAX_STAGES);
	struct tok_stage *st = &tok->stage[tok->nstage];
	st->re = NULL;
	st->prefix_space = prefix_space;
	if (pattern) {
		int err;
		PCRE2_SIZE off;
		uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
		if (literal)
			opts |= PCRE2_LITERAL;
		char *pat = literal ? NULL : rewrite_spaces(pattern);
		if (!literal && !pat)
			return atlas_error(ATLAS_ENOMEM, "out of memory compiling a regex");
		st->re = pcre2_compile((PCRE2_SPTR)(pat ? pat : pattern), PCRE2_ZERO_TERMINATED,
				       opts, &err, &off, NULL);
		free(pat);
		if (!st->re) {
			PCRE2_UCHAR msg[256];
			pcre2_get_error_message(err, msg, sizeof(msg));
			return atlas_error(ATLAS_EUNSUPPORTED,
					   "%s: cannot compile regex '%s' at offset %zu: %s", what,
					   pattern, (size_t)off, (char *)msg);
		}
		/* JIT is an optimisation: without it matching still works. */
		pcre2_jit_compile(st->re, PCRE2_JIT_COMPLETE);
	}
	tok->nstage++;
	return 0;
}

/* Per-call state of one segment's pre-tokenization. */
struct pretok {
	const struct atlas_tok *tok;	      /* the tokenizer */
	struct tok_bpe_scratch *sc;	      /* BPE scratch */
	struct tok_ids *out;		      /* where ids go */
	pcre2_match_data *md[TOK_MAX_STAGES]; /* match data per stage */
	char *buf;			      /* room for " " + piece (prefix space) */
};

static int run_stage(struct pretok *p, int k, const char *s, size_t len);

/* Match with JIT when it was compiled; fall back to the interpreter when
 * the JIT stack runs out (huge whitespace runs) rather than fail. */
static int match(const pcre2_code *re, const char *s, size_t len, size_t at, pcre2_match_data *md)
{
	int rc = pcre2_match(re, (PCRE2_SPTR)s, len, at, 0, md, NULL);
	if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
		rc = pcre2_match(re, (PCRE2_SPTR)s, len, at, PCRE2_NO_JIT, md, NULL);
	return rc;
}

static int split_stage(struct pretok *p, int k, const char *s, size_t len)
{
	const struct tok_stage *st = &p->tok->stage[k];
	size_t at = 0, gap = 0;
	int rc;
	while (at < len) {
		int m = match(st->re, s, len, at, p->md[k]);
		if (m == PCRE2_ERROR_NOMATCH)
			break;
		if (m < 0) {
			PCRE2_UCHAR msg[256];
			pcre2_get_error_message(m, msg, sizeof(msg));
			return atlas_error(ATLAS_EINVAL, "pre-tokenizer regex failed: %s",
					   (char *)msg);
		}
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(p->md[k]);
		size_t ms = ov[0], me = ov[1];
		if (me == ms) {
			/* An empty match makes no piece; step over one character
			 * (or one invalid byte) and search again. */
			uint32_t cp;
			int n = atlas_tok_utf8((const unsigned char *)s + me, len - me, &cp);
			at = me + (n ? (size_t)n : 1);
			continue;
		}
		if (ms > gap && (rc = run_stage(p, k + 1, s + gap, ms - gap)))
			return rc;
		if ((rc = run_stage(p, k + 1, s + ms, me - ms)))
			return rc;
		at = gap = me;
	}
	if (gap < len)
		return run_stage(p, k + 1, s + gap, len - gap);
	return 0;
}

static int run_stage(struct pretok *p, int k, const char *s, size_t len)
{
	if (k == p->tok->nstage)
		return atlas_tok_bpe(p->tok, p->sc, s, len, p->out);
	const struct tok_stage *st = &p->tok->stage[k];
	if (st->prefix_space && (len == 0 || s[0] != ' ')) {
		/* buf holds the whole segment plus one byte; the pieces of a
		 * segment never overlap, and only one stage prepends. */
		p->buf[0] = ' ';
		memcpy(p->buf + 1, s, len);
		s = p->buf;
		len++;
	}
	if (!st->re)
		return run_stage(p, k + 1, s, len);
	return split_stage(p, k, s, len);
}

int atlas_tok_encode_segment(const struct atlas_tok *tok, struct tok_bpe_scratch *sc, const char *s,
			     size_t len, struct tok_ids *out)
{
	struct pretok p = {.tok = tok, .sc = sc, .out = out};
	int rc = 0;
	for (int k = 0; k < tok->nstage; k++) {
		if (tok->stage[k].prefix_space && !p.buf && !(p.buf = malloc(len + 1)))
			return atlas_error(ATLAS_ENOMEM, "out of memory encoding text");
		if (tok->stage[k].re &&
		    !(p.md[k] = pcre2_match_data_create_from_pattern(tok->stage[k].re, NULL))) {
			rc = atlas_error(ATLAS_ENOMEM, "out of memory encoding text");
			goto out;
		}
	}
	rc = run_stage(&p, 0, s, len);
out:
	for (int k = 0; k < tok->nstage; k++)
		pcre2_match_data_free(p.md[k]);
	free(p.buf);
	return rc;
}
