/* grammar_regex.c - regular expressions to grammar text (see grammar.h),
 * and the text buffer the converters share (grammar_internal.h).
 *
 * A regex is parsed by recursive descent and written out at once as one
 * GBNF expression: literals become "..." items, classes [...] items (their
 * ranges are computed, so negation and \d \w \s inside classes work), and
 * groups ( ... ); quantifiers carry over unchanged, lazy ones matching the
 * same strings. What a grammar cannot express is refused with a message:
 * backreferences, lookaround, word boundaries and anchors anywhere but at
 * the two ends. For a JSON schema's "pattern" the same expression is
 * written for the inside of a JSON string, so '"', '\' and control
 * characters appear in their escaped forms. */
#include "grammar.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "../core/utf8.h"
#include "grammar_internal.h"

#define MAX_OUT ((size_t)4 << 20) /* bytes of grammar text a converter may write */
#define MAX_NEST 64		  /* groups inside each other */
#define MAX_RANGES 4096		  /* ranges of one class */

void gbuf_add(struct gbuf *b, const char *s, size_t n)
{
	if (b->err)
		return;
	if (b->n + n + 1 > MAX_OUT) {
		b->err = ATLAS_EINVAL;
		return;
	}
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 1024;
		while (cap < b->n + n + 1)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p) {
			b->err = ATLAS_ENOMEM;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = '\0';
}

void gbuf_puts(struct gbuf *b, const char *s)
{
	gbuf_add(b, s, strlen(s));
}

void gbuf_printf(struct gbuf *b, const char *fmt, ...)
{
	char tmp[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(tmp))
		b->err = b->err ? b->err : ATLAS_EINVAL;
	else
		gbuf_add(b, tmp, (size_t)n);
}

void gbuf_cp(struct gbuf *b, uint32_t cp)
{
	char tmp[16];
	if (cp == '"' || cp == '\\' || cp == ']' || cp == '[' || cp == '-' || cp == '^') {
		tmp[0] = '\\';
		tmp[1] = (char)cp;
		gbuf_add(b, tmp, 2);
	} else if (cp < 0x20 || cp == 0x7f) {
		snprintf(tmp, sizeof(tmp), "\\x%02X", (unsigned)cp);
		gbuf_puts(b, tmp);
	} else if (cp < 0x80) {
		tmp[0] = (char)cp;
		gbuf_add(b, tmp, 1);
	} else {
		snprintf(tmp, sizeof(tmp), "\\U%08X", (unsigned)cp);
		gbuf_puts(b, tmp);
	}
}

void gbuf_literal(struct gbuf *b, const char *s, size_t n)
{
	gbuf_add(b, "\"", 1);
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		int k = atlas_utf8_decode((const unsigned char *)s + i, n - i, &cp);
		if (!k) { /* not UTF-8: the grammar cannot hold it */
			b->err = b->err ? b->err : ATLAS_EINVAL;
			return;
		}
		gbuf_cp(b, cp);
		i += (size_t)k;
	}
	gbuf_add(b, "\"", 1);
}

/* ---- the regex parser ---- */

struct rx {
	const char *s;	/* the regex */
	size_t i, n;	/* position, length */
	struct gbuf *b; /* output */
	bool json;	/* write the inside of a JSON string */
};

static int rerr(struct rx *r, const char *msg)
{
	return atlas_error(ATLAS_EINVAL, "regex at offset %zu: %s", r->i, msg);
}

/* A set of code points under construction. */
struct cset {
	uint32_t r[2 * MAX_RANGES + 8]; /* (lo, hi) pairs */
	int n;				/* pairs used */
};

static int cset_add(struct rx *r, struct cset *c, uint32_t lo, uint32_t hi)
{
	if (c->n >= MAX_RANGES)
		return rerr(r, "character class too large");
	c->r[2 * c->n] = lo;
	c->r[2 * c->n + 1] = hi;
	c->n++;
	return 0;
}

/* Sort and merge; with neg, complement too. */
static void cset_norm(struct cset *c, bool neg)
{
	for (int a = 1; a < c->n; a++)
		for (int b = a; b > 0 && c->r[2 * b] < c->r[2 * b - 2]; b--) {
			uint32_t lo = c->r[2 * b], hi = c->r[2 * b + 1];
			c->r[2 * b] = c->r[2 * b - 2];
			c->r[2 * b + 1] = c->r[2 * b - 1];
			c->r[2 * b - 2] = lo;
			c->r[2 * b - 1] = hi;
		}
	int m = 0;
	for (int a = 0; a < c->n; a++) {
		if (m && c->r[2 * a] <= c->r[2 * m - 1] + 1) {
			if (c->r[2 * a + 1] > c->r[2 * m - 1])
				c->r[2 * m - 1] = c->r[2 * a + 1];
		} else {
			c->r[2 * m] = c->r[2 * a];
			c->r[2 * m + 1] = c->r[2 * a + 1];
			m++;
		}
	}
	c->n = m;
	if (!neg)
		return;
	uint32_t next = 0;
	int k = 0;
	static _Thread_local uint32_t t[2 * MAX_RANGES + 8];
	for (int a = 0; a < m; a++) {
		if (c->r[2 * a] > next) {
			t[2 * k] = next;
			t[2 * k + 1] = c->r[2 * a] - 1;
			k++;
		}
		next = c->r[2 * a + 1] + 1;
	}
	if (next <= 0x10ffff) {
		t[2 * k] = next;
		t[2 * k + 1] = 0x10ffff;
		k++;
	}
	memcpy(c->r, t, sizeof(uint32_t) * (size_t)(2 * k));
	c->n = k;
}

static bool cset_has(const struct cset *c, uint32_t cp)
{
	for (int a = 0; a < c->n; a++)
		if (cp >= c->r[2 * a] && cp <= c->r[2 * a + 1])
			return true;
	return false;
}

/* \d \w \s and their negations into c (which is not normalized). */
static int add_shorthand(struct rx *r, struct cset *c, char e)
{
	struct cset *t = malloc(sizeof(*t));
	int rc = 0;
	if (!t)
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	t->n = 0;
	char lc = (char)(e | 0x20);
	if (lc == 'd') {
		rc = cset_add(r, t, '0', '9');
	} else if (lc == 'w') {
		rc = cset_add(r, t, '0', '9') || cset_add(r, t, 'a', 'z') ||
		     cset_add(r, t, 'A', 'Z') || cset_add(r, t, '_', '_');
	} else {
		rc = cset_add(r, t, '\t', '\r') || cset_add(r, t, ' ', ' ');
	}
	if (!rc) {
		cset_norm(t, e != lc);
		for (int a = 0; a < t->n && !rc; a++)
			rc = cset_add(r, c, t->r[2 * a], t->r[2 * a + 1]);
	}
	free(t);
	return rc;
}

/* One escape after '\' (r->i is past the backslash): a code point into
 * *cp, or a shorthand class added to c (then *cp = UINT32_MAX). */
static int parse_escape(struct rx *r, struct cset *c, uint32_t *cp)
{
	if (r->i >= r->n)
		return rerr(r, "trailing backslash");
	char e = r->s[r->i++];
	*cp = UINT32_MAX;
	if (grammar_control_escape(e, cp))
		return 0;
	switch (e) {
	case 'd':
	case 'D':
	case 'w':
	case 'W':
	case 's':
	case 'S':
		return add_shorthand(r, c, e);
	case 'b':
	case 'B':
		return rerr(r, "word boundaries are not supported");
	case 'x':
	case 'u': {
		int digits = e == 'x' ? 2 : 4;
		bool brace = r->i < r->n && r->s[r->i] == '{';
		uint32_t v = 0;
		int k = 0;
		if (brace)
			r->i++;
		for (; r->i < r->n && (brace || k < digits) && grammar_hexval(r->s[r->i]) >= 0 && k < 8;
		     k++)
			v = v * 16 + (uint32_t)grammar_hexval(r->s[r->i++]);
		if (brace && (r->i >= r->n || r->s[r->i++] != '}'))
			return rerr(r, "bad \\x{...} escape");
		if (!k || (!brace && k != digits) || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
			return rerr(r, "bad hex escape");
		*cp = v;
		return 0;
	}
	default:
		if (e >= '1' && e <= '9')
			return rerr(r, "backreferences are not supported");
		if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z'))
			return rerr(r, "unknown escape");
		*cp = (unsigned char)e;
		if ((unsigned char)e >= 0x80)
			return rerr(r, "escaped non-ASCII byte");
		return 0;
	}
}

static int next_cp(struct rx *r, uint32_t *cp)
{
	int k = atlas_utf8_decode((const unsigned char *)r->s + r->i, r->n - r->i, cp);
	if (!k)
		return rerr(r, "invalid UTF-8");
	r->i += (size_t)k;
	return 0;
}

/* The JSON-escaped spelling of a code point that needs one, or NULL. */
static const char *json_escape(uint32_t cp, char *tmp, size_t size)
{
	switch (cp) {
	case '"':
		return "\\\\\\\"";
	case '\\':
		return "\\\\\\\\";
	case '\n':
		return "\\\\n";
	case '\t':
		return "\\\\t";
	case '\r':
		return "\\\\r";
	case '\b':
		return "\\\\b";
	case '\f':
		return "\\\\f";
	}
	if (cp < 0x20) {
		snprintf(tmp, size, "\\\\u%04X", (unsigned)cp);
		return tmp;
	}
	return NULL;
}

static void emit_ranges(struct gbuf *b, const struct cset *c)
{
	gbuf_puts(b, "[");
	for (int a = 0; a < c->n; a++) {
		gbuf_cp(b, c->r[2 * a]);
		if (c->r[2 * a + 1] != c->r[2 * a]) {
			gbuf_puts(b, "-");
			gbuf_cp(b, c->r[2 * a + 1]);
		}
	}
	gbuf_puts(b, "]");
}

/* A normalized set as one grammar item. */
static void emit_set(struct rx *r, struct cset *c)
{
	struct gbuf *b = r->b;
	if (!r->json) {
		emit_ranges(b, c);
		return;
	}
	/* the escaped ones become alternatives; the rest stays a class */
	uint32_t esc[40];
	int ne = 0, nctl = 0;
	for (uint32_t cp = 0; cp < 0x20; cp++)
		if (cset_has(c, cp))
			nctl++;
	for (uint32_t cp = 0; cp < 0x20; cp++)
		if (cset_has(c, cp) && (nctl <= 6 || json_escape(cp, NULL, 0)))
			esc[ne++] = cp;
	if (cset_has(c, '"'))
		esc[ne++] = '"';
	if (cset_has(c, '\\'))
		esc[ne++] = '\\';
	struct cset *rest = malloc(sizeof(*rest));
	if (!rest) {
		b->err = ATLAS_ENOMEM;
		return;
	}
	rest->n = 0;
	for (int a = 0; a < c->n; a++) {
		uint32_t lo = c->r[2 * a], hi = c->r[2 * a + 1];
		for (uint32_t x = lo; x <= hi;) { /* split around 0-1F, '"', '\' */
			if (x < 0x20 || x == '"' || x == '\\') {
				x++;
				continue;
			}
			uint32_t e = hi;
			if (x < '"' && e >= '"')
				e = '"' - 1;
			else if (x < '\\' && e >= '\\')
				e = '\\' - 1;
			rest->r[2 * rest->n] = x;
			rest->r[2 * rest->n + 1] = e;
			rest->n++;
			if (e == 0x10ffff)
				break;
			x = e + 1;
		}
	}
	if (!ne) {
		emit_ranges(b, rest);
		free(rest);
		return;
	}
	gbuf_puts(b, "(");
	const char *sep = "";
	if (rest->n) {
		emit_ranges(b, rest);
		sep = " | ";
	}
	for (int k = 0; k < ne; k++) {
		char tmp[16];
		gbuf_printf(b, "%s\"%s\"", sep, json_escape(esc[k], tmp, sizeof(tmp)));
		sep = " | ";
	}
	if (nctl > 6)
		gbuf_printf(b, "%s\"\\\\u00\" [01] [0-9a-fA-F]", sep);
	gbuf_puts(b, ")");
	free(rest);
}

static int parse_class(struct rx *r)
{
	struct cset *c = malloc(sizeof(*c));
	if (!c)
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	c->n = 0;
	bool neg = false;
	int rc = 0;
	r->i++; /* '[' */
	if (r->i < r->n && r->s[r->i] == '^') {
		neg = true;
		r->i++;
	}
	for (bool first = true;; first = false) {
		if (r->i >= r->n) {
			rc = rerr(r, "unterminated character class");
			break;
		}
		if (r->s[r->i] == ']' && !first) {
			r->i++;
			break;
		}
		uint32_t lo = 0, hi = 0;
		if (r->s[r->i] == '\\') {
			r->i++;
			if ((rc = parse_escape(r, c, &lo)))
				break;
			if (lo == UINT32_MAX)
				continue;
		} else if (r->s[r->i] == '[' && r->i + 1 < r->n && r->s[r->i + 1] == ':') {
			rc = rerr(r, "POSIX classes are not supported");
			break;
		} else if ((rc = next_cp(r, &lo))) {
			break;
		}
		hi = lo;
		if (r->i + 1 < r->n && r->s[r->i] == '-' && r->s[r->i + 1] != ']') {
			r->i++;
			if (r->s[r->i] == '\\') {
				r->i++;
				if ((rc = parse_escape(r, c, &hi)))
					break;
				if (hi == UINT32_MAX) {
					rc = rerr(r, "bad range in character class");
					break;
				}
			} else if ((rc = next_cp(r, &hi))) {
				break;
			}
			if (hi < lo) {
				rc = rerr(r, "reversed range in character class");
				break;
			}
		}
		if ((rc = cset_add(r, c, lo, hi)))
			break;
	}
	if (!rc) {
		cset_norm(c, neg);
		emit_set(r, c);
	}
	free(c);
	return rc;
}

/* One code point as a grammar item. */
static void emit_cp(struct rx *r, uint32_t cp)
{
	char tmp[16];
	const char *e = r->json ? json_escape(cp, tmp, sizeof(tmp)) : NULL;
	if (e) {
		gbuf_printf(r->b, "\"%s\"", e);
		return;
	}
	gbuf_puts(r->b, "\"");
	gbuf_cp(r->b, cp);
	gbuf_puts(r->b, "\"");
}

static int parse_alt(struct rx *r, int depth);

static int parse_group(struct rx *r, int depth)
{
	if (depth >= MAX_NEST)
		return rerr(r, "groups nested too deeply");
	r->i++; /* '(' */
	if (r->i < r->n && r->s[r->i] == '?') {
		const char *q = r->s + r->i + 1;
		size_t left = r->n - r->i - 1;
		if (left >= 1 && q[0] == ':') {
			r->i += 2;
		} else if (left >= 2 && (q[0] == 'P' || q[0] == '<') &&
			   q[0 + (q[0] == 'P')] == '<' && (q[1] != '=' && q[1] != '!')) {
			const char *e = memchr(q, '>', left);
			if (!e)
				return rerr(r, "bad group name");
			r->i += (size_t)(e - q) + 2;
		} else if (left >= 1 && (q[0] == '=' || q[0] == '!' || q[0] == '<')) {
			return rerr(r, "lookaround is not supported");
		} else {
			return rerr(r, "unsupported group syntax");
		}
	}
	gbuf_puts(r->b, "(");
	int rc = parse_alt(r, depth + 1);
	if (rc)
		return rc;
	if (r->i >= r->n || r->s[r->i] != ')')
		return rerr(r, "unclosed '('");
	r->i++;
	gbuf_puts(r->b, ")");
	return 0;
}

static int parse_count(struct rx *r, long *v)
{
	*v = 0;
	size_t at = r->i;
	while (r->i < r->n && r->s[r->i] >= '0' && r->s[r->i] <= '9') {
		*v = *v * 10 + (r->s[r->i++] - '0');
		if (*v > 10000)
			return rerr(r, "repetition count too large");
	}
	return r->i == at ? rerr(r, "expected a number") : 0;
}

static int parse_quant(struct rx *r)
{
	while (r->i < r->n) {
		char c = r->s[r->i];
		if (c == '*' || c == '+' || c == '?') {
			gbuf_add(r->b, &c, 1);
			r->i++;
		} else if (c == '{') {
			long m, n;
			size_t at = r->i++;
			int rc = parse_count(r, &m);
			if (rc)
				return rc;
			n = m;
			if (r->i < r->n && r->s[r->i] == ',') {
				r->i++;
				n = -1;
				if (r->i < r->n && r->s[r->i] != '}' && (rc = parse_count(r, &n)))
					return rc;
			}
			if (r->i >= r->n || r->s[r->i] != '}')
				return rerr(r, "expected '}'");
			r->i++;
			if (n >= 0 && n < m) {
				r->i = at;
				return rerr(r, "repetition maximum below minimum");
			}
			if (n < 0)
				gbuf_printf(r->b, "{%ld,}", m);
			else
				gbuf_printf(r->b, "{%ld,%ld}", m, n);
		} else {
			return 0;
		}
		if (r->i < r->n && r->s[r->i] == '?')
			r->i++; /* lazy: same strings */
		else if (r->i < r->n && r->s[r->i] == '+')
			return rerr(r, "possessive quantifiers are not supported");
	}
	return 0;
}

static int parse_atom(struct rx *r, int depth)
{
	char c = r->s[r->i];
	int rc = 0;
	if (c == '(') {
		rc = parse_group(r, depth);
	} else if (c == '[') {
		rc = parse_class(r);
	} else if (c == '.') {
		struct cset *dot = malloc(sizeof(*dot));
		if (!dot)
			return atlas_error(ATLAS_ENOMEM, "out of memory");
		dot->n = 1;
		dot->r[0] = dot->r[1] = '\n';
		r->i++;
		cset_norm(dot, true);
		emit_set(r, dot);
		free(dot);
	} else if (c == '*' || c == '+' || c == '?' || c == '{') {
		return rerr(r, "quantifier without anything to repeat");
	} else if (c == '^' || c == '$') {
		return rerr(r, "anchors are only supported at the start and end");
	} else if (c == '\\') {
		struct cset *s = malloc(sizeof(*s));
		uint32_t cp;
		if (!s)
			return atlas_error(ATLAS_ENOMEM, "out of memory");
		s->n = 0;
		r->i++;
		rc = parse_escape(r, s, &cp);
		if (!rc && cp == UINT32_MAX) {
			cset_norm(s, false);
			emit_set(r, s);
		} else if (!rc) {
			emit_cp(r, cp);
		}
		free(s);
	} else {
		uint32_t cp;
		if (!(rc = next_cp(r, &cp)))
			emit_cp(r, cp);
	}
	return rc ? rc : parse_quant(r);
}

static int parse_alt(struct rx *r, int depth)
{
	for (;;) {
		gbuf_puts(r->b, "(");
		while (r->i < r->n && r->s[r->i] != '|' && r->s[r->i] != ')') {
			gbuf_puts(r->b, " ");
			int rc = parse_atom(r, depth);
			if (rc)
				return rc;
		}
		gbuf_puts(r->b, " )");
		if (r->i < r->n && r->s[r->i] == '|') {
			r->i++;
			gbuf_puts(r->b, " | ");
			continue;
		}
		return 0;
	}
}

int atlas_regex_expr(struct gbuf *b, const char *re, bool json_string)
{
	size_t n = strlen(re);
	struct rx r = {.s = re, .n = n, .b = b, .json = json_string};
	if (n && re[0] == '^')
		r.i = 1;
	if (n > r.i && re[n - 1] == '$' && !(n >= 2 && re[n - 2] == '\\'))
		r.n = n - 1;
	gbuf_puts(b, "(");
	int rc = parse_alt(&r, 0);
	if (!rc && r.i < r.n)
		rc = rerr(&r, "unmatched ')'");
	gbuf_puts(b, ")");
	if (!rc && b->err)
		rc = atlas_error(b->err, "regex too large");
	return rc;
}

char *atlas_regex_grammar(const char *re, const char *prefix)
{
	struct gbuf b = {0};
	if (!re || !prefix) {
		atlas_error(ATLAS_EINVAL, "regex: no pattern");
		return NULL;
	}
	gbuf_printf(&b, "%sroot ::= ", prefix);
	if (atlas_regex_expr(&b, re, false)) {
		free(b.p);
		return NULL;
	}
	gbuf_puts(&b, "\n");
	if (b.err) {
		atlas_error(b.err, "regex too large");
		free(b.p);
		return NULL;
	}
	return b.p;
}
