/* grammar_parse.c - grammar text to automaton (see grammar.h): the
 * lexer and parser, the rule compiler and the analyses the matcher
 * relies on (nullable rules, left recursion, closures, follow sets).
 *
 * Text -> syntax tree -> one NFA per rule (Thompson construction: every
 * state has class edges, call edges to other rules and epsilon edges).
 * Groups and repetitions stay inside their rule's NFA instead of becoming
 * helper rules, so that a loop such as the body of a JSON string is one
 * position of one rule: the mask cache can then answer most tokens from
 * that position alone (see grammar_match.c).
 *
 * The text comes from HTTP requests, so everything is bounded: the text
 * size, nesting of parentheses, repetition counts, states and closure
 * sizes. Errors name line:column. Undefined rules, a missing root and
 * left recursion (also through rules that can match nothing) are
 * refused, which is what keeps the matcher's closures finite. */
#include "grammar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "../core/utf8.h"
#include "grammar_internal.h"

#define MAX_TEXT ((size_t)8 << 20)  /* bytes of grammar text */
#define MAX_NEST 64		    /* parentheses inside each other */
#define MAX_REPEAT 10000	    /* m and n of x{m,n} */
#define MAX_STATES 400000	    /* NFA states of a grammar */
#define MAX_CLOSURE (8 << 20)	    /* closure list entries in all */
#define MAX_NODES (4 << 20)	    /* syntax tree nodes */
#define MAX_RULES 100000	    /* rules of a grammar */
#define MAX_POSTFIX 4		    /* operators after one item, as in x*? */
#define MAX_CLOSURE_WORK (64 << 20) /* states visited computing closures */

enum { N_CLASS, N_REF, N_SEQ, N_ALT, N_REP };

/* A syntax tree node; children form a list through `next`. */
struct gnode {
	int kind;     /* N_* */
	int32_t a;    /* class id (N_CLASS), rule id (N_REF), min (N_REP) */
	int32_t b;    /* max (N_REP, -1: unbounded) */
	int32_t kid;  /* first child, -1 if none */
	int32_t last; /* last child (for appending), -1 if none */
	int32_t next; /* next sibling, -1 if none */
	size_t pos;   /* text offset, for messages */
};

struct parser {
	const char *s;	     /* the text */
	size_t len;	     /* its length */
	size_t i;	     /* current offset */
	struct gnode *nodes; /* the tree */
	int32_t n_nodes, cap_nodes;
	struct grammar_build *gb; /* rules and classes being built */
	int32_t *body;		  /* per rule: its tree, -1 if not defined yet */
};

/* Temporary rule names and where they were defined or first used. */
struct grammar_build {
	struct atlas_grammar *g;
	char **names;	 /* per rule: malloc'd name */
	size_t *def_pos; /* per rule: definition offset, (size_t)-1 if none */
	size_t *use_pos; /* per rule: first reference offset */
	int32_t cap_rules;
	int32_t *hash;	/* open addressing over names: rule id, -1 if empty */
	int32_t n_hash; /* slots (a power of two, more than twice the rules) */
};

static void line_col(const char *s, size_t pos, int *line, int *col)
{
	*line = 1;
	*col = 1;
	for (size_t k = 0; k < pos; k++) {
		if (s[k] == '\n') {
			++*line;
			*col = 1;
		} else {
			++*col;
		}
	}
}

static int perr(struct parser *p, size_t pos, const char *msg)
{
	int line, col;
	line_col(p->s, pos < p->len ? pos : p->len, &line, &col);
	return atlas_error(ATLAS_EINVAL, "grammar %d:%d: %s", line, col, msg);
}

/* ---- classes ---- */

/* Remove U+D800..U+DFFF from sorted disjoint ranges r[m] (which have
 * room for one more range); returns the new count. */
static int drop_surrogates(uint32_t *r, int m)
{
	for (int a = 0; a < m; a++) {
		uint32_t lo = r[2 * a], hi = r[2 * a + 1];
		if (hi < 0xd800 || lo > 0xdfff)
			continue;
		if (lo < 0xd800 && hi > 0xdfff) {
			memmove(r + 2 * a + 2, r + 2 * a, sizeof(uint32_t) * (size_t)(2 * (m - a)));
			r[2 * a + 1] = 0xd7ff;
			r[2 * a + 2] = 0xe000;
			return m + 1;
		}
		if (lo < 0xd800)
			r[2 * a + 1] = 0xd7ff;
		else if (hi > 0xdfff)
			r[2 * a] = 0xe000;
		else
			r[2 * a] = 1, r[2 * a + 1] = 0; /* empty: dropped below */
	}
	int k = 0;
	for (int a = 0; a < m; a++)
		if (r[2 * a] <= r[2 * a + 1]) {
			r[2 * k] = r[2 * a];
			r[2 * k + 1] = r[2 * a + 1];
			k++;
		}
	return k;
}

/* Sort ranges r[n] by lo and merge them; returns the new count. */
static int merge_ranges(uint32_t *r, int n)
{
	for (int a = 1; a < n; a++)
		for (int b = a; b > 0 && r[2 * b] < r[2 * b - 2]; b--) {
			uint32_t lo = r[2 * b], hi = r[2 * b + 1];
			r[2 * b] = r[2 * b - 2];
			r[2 * b + 1] = r[2 * b - 1];
			r[2 * b - 2] = lo;
			r[2 * b - 1] = hi;
		}
	int m = 0;
	for (int a = 0; a < n; a++) {
		if (r[2 * a] > r[2 * a + 1])
			continue;
		if (m && r[2 * a] <= r[2 * m - 1] + 1) {
			if (r[2 * a + 1] > r[2 * m - 1])
				r[2 * m - 1] = r[2 * a + 1];
		} else {
			r[2 * m] = r[2 * a];
			r[2 * m + 1] = r[2 * a + 1];
			m++;
		}
	}
	return m;
}

/* The complement of sorted disjoint ranges r[m] into t (room for m + 1
 * ranges); returns its count. */
static int negate_ranges(const uint32_t *r, int m, uint32_t *t)
{
	uint32_t next = 0;
	int k = 0;
	for (int a = 0; a < m; a++) {
		if (r[2 * a] > next) {
			t[2 * k] = next;
			t[2 * k + 1] = r[2 * a] - 1;
			k++;
		}
		next = r[2 * a + 1] + 1;
	}
	if (next <= 0x10ffff) {
		t[2 * k] = next;
		t[2 * k + 1] = 0x10ffff;
		k++;
	}
	return k;
}

/* Add a class from ranges r[n] of (lo, hi) pairs (any order, may
 * overlap); negate complements it. Surrogates are never in a class.
 * Returns the class id or -1 (out of memory). */
static int32_t add_class(struct atlas_grammar *g, const uint32_t *r, int n, bool negate)
{
	uint32_t *t = malloc(sizeof(uint32_t) * (size_t)(2 * n + 6));
	uint32_t *u = malloc(sizeof(uint32_t) * (size_t)(2 * n + 6));
	int32_t id = -1;
	if (!t || !u)
		goto out;
	memcpy(t, r, sizeof(uint32_t) * (size_t)(2 * n));
	int m = merge_ranges(t, n);
	if (negate) {
		m = negate_ranges(t, m, u);
		memcpy(t, u, sizeof(uint32_t) * (size_t)(2 * m));
	}
	m = drop_surrogates(t, m);
	uint32_t *nr = grow(g->ranges, &g->cap_ranges, g->n_ranges + 2 * m, sizeof(uint32_t));
	if (nr)
		g->ranges = nr;
	struct gclass *nc = grow(g->classes, &g->cap_classes, g->n_classes + 1, sizeof(*nc));
	if (nc)
		g->classes = nc;
	if (!nr || !nc)
		goto out;
	struct gclass *c = &g->classes[g->n_classes];
	memset(c, 0, sizeof(*c));
	c->off = g->n_ranges;
	c->n = m;
	for (int a = 0; a < m; a++) {
		g->ranges[g->n_ranges++] = t[2 * a];
		g->ranges[g->n_ranges++] = t[2 * a + 1];
		for (uint32_t x = t[2 * a]; x <= t[2 * a + 1] && x < 128; x++)
			c->ascii[x >> 5] |= 1u << (x & 31);
	}
	id = g->n_classes++;
out:
	free(t);
	free(u);
	return id;
}

/* ---- the parser ---- */

static int32_t new_node(struct parser *p, int kind, size_t pos)
{
	if (p->n_nodes >= MAX_NODES)
		return -1;
	struct gnode *n = grow(p->nodes, &p->cap_nodes, p->n_nodes + 1, sizeof(*n));
	if (!n)
		return -1;
	p->nodes = n;
	n[p->n_nodes] = (struct gnode){.kind = kind, .kid = -1, .last = -1, .next = -1, .pos = pos};
	return p->n_nodes++;
}

static void add_kid(struct parser *p, int32_t parent, int32_t kid)
{
	struct gnode *n = &p->nodes[parent];
	if (n->last < 0)
		n->kid = kid;
	else
		p->nodes[n->last].next = kid;
	n->last = kid;
}

/* Skip spaces, tabs, comments and (when nl) newlines. */
static void skip_ws(struct parser *p, bool nl)
{
	while (p->i < p->len) {
		char c = p->s[p->i];
		if (c == ' ' || c == '\t' || c == '\r' || (nl && c == '\n')) {
			p->i++;
		} else if (c == '#') {
			while (p->i < p->len && p->s[p->i] != '\n')
				p->i++;
		} else {
			break;
		}
	}
}

static bool is_name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || c == '-';
}

/* One (possibly escaped) code point of a literal or class into *cp. */
static int parse_char(struct parser *p, uint32_t *cp)
{
	size_t at = p->i;
	if (p->i >= p->len)
		return perr(p, at, "unexpected end of grammar");
	unsigned char c = (unsigned char)p->s[p->i];
	if (c != '\\') {
		int n = atlas_utf8_decode((const unsigned char *)p->s + p->i, p->len - p->i, cp);
		if (!n)
			return perr(p, at, "invalid UTF-8");
		p->i += (size_t)n;
		return 0;
	}
	if (++p->i >= p->len)
		return perr(p, at, "unexpected end of grammar");
	c = (unsigned char)p->s[p->i++];
	if (grammar_control_escape((char)c, cp))
		return 0;
	int digits = 0;
	switch (c) {
	case 'x':
		digits = 2;
		break;
	case 'u':
		digits = 4;
		break;
	case 'U':
		digits = 8;
		break;
	case '\\':
	case '"':
	case '\'':
	case '[':
	case ']':
	case '-':
	case '^':
	case '/':
	case '.':
	case '(':
	case ')':
	case '|':
	case '*':
	case '+':
	case '?':
	case '{':
	case '}':
	case ' ':
		*cp = c;
		return 0;
	default:
		return perr(p, at, "unknown escape");
	}
	uint32_t v = 0;
	for (int k = 0; k < digits; k++) {
		int h = p->i < p->len ? grammar_hexval(p->s[p->i]) : -1;
		if (h < 0)
			return perr(p, at, "bad hex escape");
		v = v * 16 + (uint32_t)h;
		p->i++;
	}
	if (v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
		return perr(p, at, "escape is not a Unicode scalar value");
	*cp = v;
	return 0;
}

static int32_t class_node(struct parser *p, uint32_t *r, int n, bool neg, size_t pos)
{
	int32_t c = add_class(p->gb->g, r, n, neg);
	int32_t k = c < 0 ? -1 : new_node(p, N_CLASS, pos);
	if (k >= 0)
		p->nodes[k].a = c;
	return k;
}

static int parse_literal(struct parser *p, int32_t *out)
{
	size_t at = p->i++;
	int32_t seq = new_node(p, N_SEQ, at);
	if (seq < 0)
		return atlas_error(ATLAS_ENOMEM, "grammar too large");
	for (;;) {
		if (p->i >= p->len || p->s[p->i] == '\n')
			return perr(p, at, "unterminated literal");
		if (p->s[p->i] == '"') {
			p->i++;
			break;
		}
		size_t cpos = p->i;
		uint32_t r[2];
		int rc = parse_char(p, &r[0]);
		if (rc)
			return rc;
		r[1] = r[0];
		int32_t k = class_node(p, r, 1, false, cpos);
		if (k < 0)
			return atlas_error(ATLAS_ENOMEM, "grammar too large");
		add_kid(p, seq, k);
	}
	*out = seq;
	return 0;
}

static int parse_class(struct parser *p, int32_t *out)
{
	size_t at = p->i++;
	bool neg = false;
	if (p->i < p->len && p->s[p->i] == '^') {
		neg = true;
		p->i++;
	}
	uint32_t *r = NULL;
	int32_t n = 0, cap = 0;
	int rc = 0;
	for (;;) {
		if (p->i >= p->len) {
			rc = perr(p, at, "unterminated character class");
			break;
		}
		if (p->s[p->i] == ']') {
			p->i++;
			break;
		}
		uint32_t lo, hi;
		if ((rc = parse_char(p, &lo)))
			break;
		hi = lo;
		if (p->i + 1 < p->len && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
			p->i++;
			size_t hpos = p->i;
			if ((rc = parse_char(p, &hi)))
				break;
			if (hi < lo) {
				rc = perr(p, hpos, "reversed range in character class");
				break;
			}
		}
		if (n >= 4096) {
			rc = perr(p, at, "character class too long");
			break;
		}
		uint32_t *q = grow(r, &cap, 2 * n + 2, sizeof(uint32_t));
		if (!q) {
			rc = atlas_error(ATLAS_ENOMEM, "out of memory");
			break;
		}
		r = q;
		r[2 * n] = lo;
		r[2 * n + 1] = hi;
		n++;
	}
	if (!rc) {
		uint32_t none[2];
		*out = class_node(p, r ? r : none, n, neg, at);
		if (*out < 0)
			rc = atlas_error(ATLAS_ENOMEM, "grammar too large");
	}
	free(r);
	return rc;
}

static uint32_t name_hash(const char *s, size_t n)
{
	uint32_t h = 2166136261u;
	for (size_t k = 0; k < n; k++)
		h = (h ^ (unsigned char)s[k]) * 16777619u;
	return h;
}

static int name_rehash(struct grammar_build *gb, int32_t n)
{
	int32_t *t = malloc(sizeof(int32_t) * (size_t)n);
	if (!t)
		return -1;
	for (int32_t k = 0; k < n; k++)
		t[k] = -1;
	for (int32_t r = 0; r < gb->g->n_rules; r++) {
		uint32_t h = name_hash(gb->names[r], strlen(gb->names[r])) & (uint32_t)(n - 1);
		while (t[h] >= 0)
			h = (h + 1) & (uint32_t)(n - 1);
		t[h] = r;
	}
	free(gb->hash);
	gb->hash = t;
	gb->n_hash = n;
	return 0;
}

/* Rule id of `name` (len bytes), created on first sight; -1 past
 * MAX_RULES or out of memory. */
static int32_t rule_id(struct parser *p, const char *name, size_t len, size_t pos)
{
	struct grammar_build *gb = p->gb;
	struct atlas_grammar *g = gb->g;
	if (g->n_rules >= MAX_RULES)
		return -1;
	if (2 * (g->n_rules + 1) > gb->n_hash && name_rehash(gb, gb->n_hash ? 2 * gb->n_hash : 256))
		return -1;
	uint32_t h = name_hash(name, len) & (uint32_t)(gb->n_hash - 1);
	for (; gb->hash[h] >= 0; h = (h + 1) & (uint32_t)(gb->n_hash - 1)) {
		const char *nm = gb->names[gb->hash[h]];
		if (strlen(nm) == len && !memcmp(nm, name, len))
			return gb->hash[h];
	}
	int32_t need = g->n_rules + 1, c1 = gb->cap_rules, c2 = gb->cap_rules, c3 = gb->cap_rules;
	int32_t c4 = gb->cap_rules, c5 = g->cap_rules;
	char **nm = grow(gb->names, &c1, need, sizeof(char *));
	if (nm)
		gb->names = nm;
	size_t *dp = grow(gb->def_pos, &c2, need, sizeof(size_t));
	if (dp)
		gb->def_pos = dp;
	size_t *up = grow(gb->use_pos, &c3, need, sizeof(size_t));
	if (up)
		gb->use_pos = up;
	int32_t *bd = grow(p->body, &c4, need, sizeof(int32_t));
	if (bd)
		p->body = bd;
	struct grule *rl = grow(g->rules, &c5, need, sizeof(struct grule));
	if (rl)
		g->rules = rl;
	if (!nm || !dp || !up || !bd || !rl || c1 != c2 || c2 != c3 || c3 != c4)
		return -1;
	gb->cap_rules = c1;
	g->cap_rules = c5;
	char *s = strndup(name, len);
	if (!s)
		return -1;
	gb->names[g->n_rules] = s;
	gb->hash[h] = g->n_rules;
	gb->def_pos[g->n_rules] = (size_t)-1;
	gb->use_pos[g->n_rules] = pos;
	p->body[g->n_rules] = -1;
	memset(&g->rules[g->n_rules], 0, sizeof(struct grule));
	return g->n_rules++;
}

static int parse_alt(struct parser *p, int depth, int32_t *out);

static int parse_uint(struct parser *p, int32_t *v)
{
	size_t at = p->i;
	int64_t x = 0;
	if (p->i >= p->len || p->s[p->i] < '0' || p->s[p->i] > '9')
		return perr(p, at, "expected a number");
	while (p->i < p->len && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
		x = x * 10 + (p->s[p->i++] - '0');
		if (x > MAX_REPEAT)
			return perr(p, at, "repetition count too large");
	}
	*v = (int32_t)x;
	return 0;
}

/* {m} {m,} {m,n} after the item; p->i is past the '{'. */
static int parse_braces(struct parser *p, size_t at, int32_t *m, int32_t *n)
{
	int rc;
	skip_ws(p, false);
	if ((rc = parse_uint(p, m)))
		return rc;
	skip_ws(p, false);
	*n = *m;
	if (p->i < p->len && p->s[p->i] == ',') {
		p->i++;
		skip_ws(p, false);
		*n = -1;
		if (p->i < p->len && p->s[p->i] != '}' && (rc = parse_uint(p, n)))
			return rc;
		skip_ws(p, false);
	}
	if (p->i >= p->len || p->s[p->i] != '}')
		return perr(p, p->i, "expected '}'");
	p->i++;
	if (*n >= 0 && *n < *m)
		return perr(p, at, "repetition maximum below minimum");
	return 0;
}

static int parse_postfix(struct parser *p, int32_t *item)
{
	for (int ops = 0; p->i < p->len; ops++) {
		char c = p->s[p->i];
		size_t at = p->i;
		int32_t m, n;
		if (c == '*') {
			m = 0, n = -1;
		} else if (c == '+') {
			m = 1, n = -1;
		} else if (c == '?') {
			m = 0, n = 1;
		} else if (c == '{') {
			p->i++;
			int rc = parse_braces(p, at, &m, &n);
			if (rc)
				return rc;
			p->i--;
		} else {
			return 0;
		}
		if (ops == MAX_POSTFIX)
			return perr(p, at, "too many repetition operators in a row");
		p->i++;
		int32_t r = new_node(p, N_REP, at);
		if (r < 0)
			return atlas_error(ATLAS_ENOMEM, "grammar too large");
		p->nodes[r].a = m;
		p->nodes[r].b = n;
		add_kid(p, r, *item);
		*item = r;
	}
	return 0;
}

static int parse_item(struct parser *p, int depth, int32_t *out)
{
	size_t at = p->i;
	char c = p->s[p->i];
	int rc = 0;
	if (c == '"') {
		rc = parse_literal(p, out);
	} else if (c == '[') {
		rc = parse_class(p, out);
	} else if (c == '.') {
		uint32_t r[4] = {0, 0xd7ff, 0xe000, 0x10ffff};
		p->i++;
		if ((*out = class_node(p, r, 2, false, at)) < 0)
			rc = atlas_error(ATLAS_ENOMEM, "grammar too large");
	} else if (c == '(') {
		if (depth >= MAX_NEST)
			return perr(p, at, "parentheses nested too deeply");
		p->i++;
		if ((rc = parse_alt(p, depth + 1, out)))
			return rc;
		skip_ws(p, true);
		if (p->i >= p->len || p->s[p->i] != ')')
			return perr(p, at, "unclosed '('");
		p->i++;
	} else if (is_name_char(c)) {
		size_t e = p->i;
		while (e < p->len && is_name_char(p->s[e]))
			e++;
		int32_t r = rule_id(p, p->s + p->i, e - p->i, at);
		int32_t k = r < 0 ? -1 : new_node(p, N_REF, at);
		if (k < 0)
			return atlas_error(ATLAS_ENOMEM, "grammar too large");
		p->nodes[k].a = r;
		p->i = e;
		*out = k;
	} else {
		return perr(p, at, "expected a literal, class, rule name or '('");
	}
	if (rc)
		return rc;
	return parse_postfix(p, out);
}

/* A sequence: items up to '|', ')' or (at depth 0) the end of the line. */
static int parse_seq(struct parser *p, int depth, int32_t *out)
{
	int32_t seq = new_node(p, N_SEQ, p->i);
	if (seq < 0)
		return atlas_error(ATLAS_ENOMEM, "grammar too large");
	for (;;) {
		skip_ws(p, depth > 0);
		if (p->i >= p->len)
			break;
		char c = p->s[p->i];
		if (c == '|' || c == ')' || c == '\n')
			break;
		int32_t item = -1;
		int rc = parse_item(p, depth, &item);
		if (rc)
			return rc;
		add_kid(p, seq, item);
	}
	*out = seq;
	return 0;
}

static int parse_alt(struct parser *p, int depth, int32_t *out)
{
	int32_t alt = new_node(p, N_ALT, p->i);
	if (alt < 0)
		return atlas_error(ATLAS_ENOMEM, "grammar too large");
	for (;;) {
		int32_t seq = -1;
		int rc = parse_seq(p, depth, &seq);
		if (rc)
			return rc;
		add_kid(p, alt, seq);
		if (p->i < p->len && p->s[p->i] == '|') {
			p->i++;
			skip_ws(p, true);
			continue;
		}
		break;
	}
	*out = alt;
	return 0;
}

static int parse_rules(struct parser *p)
{
	for (;;) {
		skip_ws(p, true);
		if (p->i >= p->len)
			return 0;
		size_t at = p->i, e = p->i;
		while (e < p->len && is_name_char(p->s[e]))
			e++;
		if (e == at)
			return perr(p, at, "expected a rule name");
		int32_t r = rule_id(p, p->s + at, e - at, at);
		if (r < 0)
			return atlas_error(ATLAS_EINVAL, "grammar too large (rules)");
		if (p->gb->def_pos[r] != (size_t)-1)
			return perr(p, at, "rule defined twice");
		p->gb->def_pos[r] = at;
		p->i = e;
		skip_ws(p, false);
		if (p->len - p->i < 3 || memcmp(p->s + p->i, "::=", 3))
			return perr(p, p->i, "expected '::='");
		p->i += 3;
		skip_ws(p, true);
		int32_t body = -1; /* (p->body may move while parsing) */
		int rc = parse_alt(p, 0, &body);
		if (rc)
			return rc;
		p->body[r] = body;
		if (p->i < p->len && p->s[p->i] == ')')
			return perr(p, p->i, "unmatched ')'");
	}
}

/* ---- NFA construction ---- */

struct frag {
	int32_t start, end;
};

static int32_t new_state(struct atlas_grammar *g, int32_t rule)
{
	if (g->n_states >= MAX_STATES)
		return -1;
	struct gstate *s = grow(g->states, &g->cap_states, g->n_states + 1, sizeof(*s));
	if (!s)
		return -1;
	g->states = s;
	memset(&s[g->n_states], 0, sizeof(*s));
	s[g->n_states].rule = rule;
	return g->n_states++;
}

/* Edges are collected unsorted (from, kind, arg, to) and grouped by
 * state at the end. */
static int add_edge(struct atlas_grammar *g, int32_t from, int kind, int32_t arg, int32_t to)
{
	struct gedge *e = grow(g->edges, &g->cap_edges, g->n_edges + 1, sizeof(*e));
	if (!e)
		return -1;
	g->edges = e;
	e[g->n_edges++] = (struct gedge){.from = from, .kind = kind, .arg = arg, .to = to};
	return 0;
}

static int build(struct parser *p, int32_t n, int32_t rule, struct frag *f);

static int build_rep(struct parser *p, struct gnode *n, int32_t rule, struct frag *f)
{
	struct atlas_grammar *g = p->gb->g;
	int32_t m = n->a, mx = n->b;
	int32_t cur = new_state(g, rule);
	if (cur < 0)
		return -1;
	f->start = cur;
	for (int32_t k = 0; k < m; k++) {
		struct frag x;
		if (build(p, n->kid, rule, &x) || add_edge(g, cur, E_EPS, 0, x.start))
			return -1;
		cur = x.end;
	}
	int32_t end = new_state(g, rule);
	if (end < 0 || add_edge(g, cur, E_EPS, 0, end))
		return -1;
	if (mx < 0) {
		struct frag x;
		if (build(p, n->kid, rule, &x) || add_edge(g, cur, E_EPS, 0, x.start) ||
		    add_edge(g, x.end, E_EPS, 0, cur))
			return -1;
	} else {
		for (int32_t k = m; k < mx; k++) {
			struct frag x;
			if (build(p, n->kid, rule, &x) || add_edge(g, cur, E_EPS, 0, x.start) ||
			    add_edge(g, x.end, E_EPS, 0, end))
				return -1;
			cur = x.end;
		}
	}
	f->end = end;
	return 0;
}

/* Thompson fragment of tree node n; -1 on a limit or out of memory. */
static int build(struct parser *p, int32_t ni, int32_t rule, struct frag *f)
{
	struct atlas_grammar *g = p->gb->g;
	struct gnode *n = &p->nodes[ni];
	if (n->kind == N_REP)
		return build_rep(p, n, rule, f);
	f->start = new_state(g, rule);
	f->end = n->kind == N_SEQ ? f->start : new_state(g, rule);
	if (f->start < 0 || f->end < 0)
		return -1;
	if (n->kind == N_CLASS)
		return add_edge(g, f->start, E_CLASS, n->a, f->end);
	if (n->kind == N_REF)
		return add_edge(g, f->start, E_CALL, n->a, f->end);
	for (int32_t k = n->kid; k >= 0; k = p->nodes[k].next) {
		struct frag x;
		if (build(p, k, rule, &x))
			return -1;
		if (n->kind == N_SEQ) {
			if (add_edge(g, f->end, E_EPS, 0, x.start))
				return -1;
			f->end = x.end;
		} else if (add_edge(g, f->start, E_EPS, 0, x.start) ||
			   add_edge(g, x.end, E_EPS, 0, f->end)) {
			return -1;
		}
	}
	return 0;
}

static int cmp_edge(const void *a, const void *b)
{
	const struct gedge *x = a, *y = b;
	if (x->from != y->from)
		return x->from < y->from ? -1 : 1;
	if (x->kind != y->kind)
		return x->kind < y->kind ? -1 : 1;
	return 0;
}

/* Group edges by state; count each state's class and call edges. */
static void index_edges(struct atlas_grammar *g)
{
	qsort(g->edges, (size_t)g->n_edges, sizeof(*g->edges), cmp_edge);
	for (int32_t k = g->n_edges - 1; k >= 0; k--) {
		struct gstate *s = &g->states[g->edges[k].from];
		s->edge_off = k;
		s->n_edges++;
		if (g->edges[k].kind == E_CLASS)
			s->n_class++;
		else if (g->edges[k].kind == E_CALL)
			s->n_call++;
	}
}

/* ---- analyses ---- */

/* The calls rule r can make before consuming anything (into calls,
 * counted in *n_calls): a DFS over epsilon edges and calls of nullable
 * rules. */
static void left_calls(struct atlas_grammar *g, int32_t r, const uint8_t *nullable, int32_t *stk,
		       uint32_t *seen, uint32_t stamp, int32_t *calls, int32_t *n_calls)
{
	int32_t n = 0;
	stk[n++] = g->rules[r].start;
	seen[g->rules[r].start] = stamp;
	while (n) {
		struct gstate *s = &g->states[stk[--n]];
		for (int32_t e = s->edge_off; e < s->edge_off + s->n_edges; e++) {
			struct gedge *d = &g->edges[e];
			if (d->kind == E_CLASS)
				continue;
			if (d->kind == E_CALL) {
				calls[(*n_calls)++] = d->arg;
				if (!nullable[d->arg])
					continue;
			}
			if (seen[d->to] != stamp) {
				seen[d->to] = stamp;
				stk[n++] = d->to;
			}
		}
	}
}

/* Working state of find_nullable. */
struct nullwork {
	uint8_t *seen;	/* per state: visited */
	int32_t *stk;	/* DFS stack */
	int32_t *wto;	/* waiting entries: the state after a blocked call */
	int32_t *wnext; /* next waiting entry of the same callee */
	int32_t *whead; /* per rule: first entry waiting for it, -1 if none */
	int32_t n_wait; /* entries used */
	int32_t *queue; /* rules found nullable, not yet propagated */
	int32_t n_queue;
};

static void null_dfs(struct atlas_grammar *g, uint8_t *nullable, struct nullwork *w, int32_t from)
{
	int32_t n = 0;
	if (w->seen[from])
		return;
	w->seen[from] = 1;
	w->stk[n++] = from;
	while (n) {
		struct gstate *s = &g->states[w->stk[--n]];
		if (s->final && !nullable[s->rule]) {
			nullable[s->rule] = 1;
			w->queue[w->n_queue++] = s->rule;
		}
		for (int32_t e = s->edge_off; e < s->edge_off + s->n_edges; e++) {
			struct gedge *d = &g->edges[e];
			if (d->kind == E_CLASS || w->seen[d->to])
				continue;
			if (d->kind == E_CALL && !nullable[d->arg]) {
				w->wto[w->n_wait] = d->to;
				w->wnext[w->n_wait] = w->whead[d->arg];
				w->whead[d->arg] = w->n_wait++;
				continue;
			}
			w->seen[d->to] = 1;
			w->stk[n++] = d->to;
		}
	}
}

/* Rules that can match the empty string: one DFS per rule from its start,
 * resumed at a blocked call when the callee turns out nullable, so each
 * state is visited once. */
static int find_nullable(struct atlas_grammar *g, uint8_t *nullable)
{
	struct nullwork w = {0};
	size_t ns = (size_t)g->n_states + 1, ne = (size_t)g->n_edges + 1;
	w.seen = calloc(ns, 1);
	w.stk = malloc(sizeof(int32_t) * (ns + ne));
	w.wto = malloc(sizeof(int32_t) * ne);
	w.wnext = malloc(sizeof(int32_t) * ne);
	w.whead = malloc(sizeof(int32_t) * ((size_t)g->n_rules + 1));
	w.queue = malloc(sizeof(int32_t) * ((size_t)g->n_rules + 1));
	int rc = 0;
	if (!w.seen || !w.stk || !w.wto || !w.wnext || !w.whead || !w.queue) {
		rc = atlas_error(ATLAS_ENOMEM, "out of memory");
		goto out;
	}
	for (int32_t r = 0; r < g->n_rules; r++)
		w.whead[r] = -1;
	for (int32_t r = 0; r < g->n_rules; r++)
		null_dfs(g, nullable, &w, g->rules[r].start);
	while (w.n_queue) {
		int32_t q = w.queue[--w.n_queue];
		for (int32_t k = w.whead[q]; k >= 0; k = w.wnext[k])
			null_dfs(g, nullable, &w, w.wto[k]);
		w.whead[q] = -1;
	}
out:
	free(w.seen), free(w.stk), free(w.wto), free(w.wnext), free(w.whead), free(w.queue);
	return rc;
}

/* Nullable rules, then a cycle search over "calls without consuming". */
static int check_left_recursion(struct atlas_grammar *g, struct grammar_build *gb, const char *text)
{
	int32_t nr = g->n_rules, ns = g->n_states;
	int rc = 0;
	uint8_t *nullable = calloc((size_t)nr, 1);
	int32_t *stk = malloc(sizeof(int32_t) * (size_t)(ns + g->n_edges + 1));
	uint32_t *seen = calloc((size_t)ns, sizeof(uint32_t));
	int32_t *lc_off = calloc((size_t)nr + 1, sizeof(int32_t));
	int32_t *lc = malloc(sizeof(int32_t) * (size_t)(g->n_edges + 1));
	uint8_t *color = calloc((size_t)nr, 1);
	int32_t *path = malloc(sizeof(int32_t) * (size_t)(nr + 1));
	int32_t *iter = malloc(sizeof(int32_t) * (size_t)(nr + 1));
	uint32_t stamp = 0;
	if (!nullable || !stk || !seen || !lc_off || !lc || !color || !path || !iter) {
		rc = atlas_error(ATLAS_ENOMEM, "out of memory");
		goto out;
	}
	if ((rc = find_nullable(g, nullable)))
		goto out;
	for (int32_t r = 0; r < nr; r++) {
		g->rules[r].nullable = nullable[r];
		int32_t n = lc_off[r];
		left_calls(g, r, nullable, stk, seen, ++stamp, lc, &n);
		lc_off[r + 1] = n;
	}
	/* iterative DFS: color 1 on the path, 2 done */
	for (int32_t root = 0; root < nr && !rc; root++) {
		if (color[root])
			continue;
		int32_t depth = 0;
		path[0] = root;
		iter[0] = lc_off[root];
		color[root] = 1;
		while (depth >= 0) {
			int32_t r = path[depth];
			if (iter[depth] == lc_off[r + 1]) {
				color[r] = 2;
				depth--;
				continue;
			}
			int32_t c = lc[iter[depth]++];
			if (color[c] == 1) {
				int line, col;
				line_col(text, gb->def_pos[c], &line, &col);
				rc = atlas_error(ATLAS_EINVAL,
						 "grammar %d:%d: left recursion in rule '%s'", line,
						 col, gb->names[c]);
				break;
			}
			if (!color[c]) {
				color[c] = 1;
				path[++depth] = c;
				iter[depth] = lc_off[c];
			}
		}
	}
out:
	free(nullable), free(stk), free(seen), free(lc_off), free(lc), free(color), free(path);
	free(iter);
	return rc;
}

/* Per state, the states its epsilon closure (inside its rule) reaches
 * that do something: have class or call edges, or are final. */
static int closures(struct atlas_grammar *g)
{
	int32_t ns = g->n_states, cap = 0;
	int32_t *stk = malloc(sizeof(int32_t) * (size_t)(ns + g->n_edges + 1));
	uint32_t *seen = calloc((size_t)ns, sizeof(uint32_t));
	int rc = 0;
	if (!stk || !seen) {
		rc = atlas_error(ATLAS_ENOMEM, "out of memory");
		goto out;
	}
	int64_t work = 0;
	for (int32_t s0 = 0; s0 < ns && !rc; s0++) {
		int32_t n = 0;
		stk[n++] = s0;
		seen[s0] = (uint32_t)s0 + 1;
		g->states[s0].clo_off = g->n_clo;
		while (n) {
			int32_t x = stk[--n];
			struct gstate *s = &g->states[x];
			if (++work > MAX_CLOSURE_WORK) {
				rc = atlas_error(ATLAS_EINVAL, "grammar too large (closures)");
				break;
			}
			if (s->n_class || s->n_call || s->final) {
				if (g->n_clo >= MAX_CLOSURE) {
					rc = atlas_error(ATLAS_EINVAL,
							 "grammar too large (closures)");
					break;
				}
				int32_t *c = grow(g->clo, &cap, g->n_clo + 1, sizeof(int32_t));
				if (!c) {
					rc = atlas_error(ATLAS_ENOMEM, "out of memory");
					break;
				}
				g->clo = c;
				g->clo[g->n_clo++] = x;
			}
			for (int32_t e = s->edge_off; e < s->edge_off + s->n_edges; e++)
				if (g->edges[e].kind == E_EPS &&
				    seen[g->edges[e].to] != (uint32_t)s0 + 1) {
					seen[g->edges[e].to] = (uint32_t)s0 + 1;
					stk[n++] = g->edges[e].to;
				}
		}
		g->states[s0].n_clo = g->n_clo - g->states[s0].clo_off;
	}
out:
	free(stk);
	free(seen);
	return rc;
}

/* ---- what may follow a rule ----
 *
 * For the mask cache: a token that completes the cached state's rule and
 * goes on with byte b depends on the frames below only when b can follow
 * that rule somewhere; otherwise it is rejected outright. So the bytes
 * that can begin a rule (first) and follow it (follow) are computed, as
 * sets of UTF-8 lead bytes, by fixpoints. A fixpoint that does not settle
 * in time leaves every set full, which only costs speed. */

static void add_leads(uint32_t *set, uint32_t lo, uint32_t hi)
{
	static const uint32_t top[4] = {0x7f, 0x7ff, 0xffff, 0x10ffff};
	for (int n = 0; n < 4 && lo <= hi; n++) {
		if (lo > top[n])
			continue;
		uint32_t h = hi < top[n] ? hi : top[n];
		uint32_t a = n == 0   ? lo
			     : n == 1 ? 0xc0 | lo >> 6
			     : n == 2 ? 0xe0 | lo >> 12
				      : 0xf0 | lo >> 18;
		uint32_t b = n == 0   ? h
			     : n == 1 ? 0xc0 | h >> 6
			     : n == 2 ? 0xe0 | h >> 12
				      : 0xf0 | h >> 18;
		for (uint32_t x = a; x <= b; x++)
			set[x >> 5] |= 1u << (x & 31);
		lo = h + 1;
	}
}

/* Bytes that can come first from state s0 on (epsilon edges, calls, and
 * past nullable calls) into set; returns whether the rule's end is
 * reachable without consuming. first[] are the rules' first sets so far. */
static bool first_from(const struct atlas_grammar *g, int32_t s0, const uint32_t *first,
		       uint32_t *set, int32_t *stk, uint32_t *seen, uint32_t stamp, int64_t *work)
{
	int32_t n = 0;
	bool end = false;
	stk[n++] = s0;
	seen[s0] = stamp;
	while (n) {
		const struct gstate *s = &g->states[stk[--n]];
		end |= s->final;
		for (int32_t e = s->edge_off; e < s->edge_off + s->n_edges; e++) {
			const struct gedge *d = &g->edges[e];
			++*work;
			if (d->kind == E_CLASS) {
				const struct gclass *c = &g->classes[d->arg];
				for (int32_t i = 0; i < c->n; i++)
					add_leads(set, g->ranges[c->off + 2 * i],
						  g->ranges[c->off + 2 * i + 1]);
				continue;
			}
			if (d->kind == E_CALL) {
				for (int i = 0; i < 8; i++)
					set[i] |= first[8 * d->arg + i];
				if (!g->rules[d->arg].nullable)
					continue;
			}
			if (seen[d->to] != stamp) {
				seen[d->to] = stamp;
				stk[n++] = d->to;
			}
		}
	}
	return end;
}

static bool set_or(uint32_t *dst, const uint32_t *src)
{
	bool changed = false;
	for (int i = 0; i < 8; i++) {
		changed |= (src[i] & ~dst[i]) != 0;
		dst[i] |= src[i];
	}
	return changed;
}

static int follow_sets(struct atlas_grammar *g)
{
	int32_t nr = g->n_rules, ns = g->n_states;
	uint32_t *first = calloc((size_t)nr * 8, sizeof(uint32_t));
	g->follow = calloc((size_t)nr * 8, sizeof(uint32_t));
	int32_t *stk = malloc(sizeof(int32_t) * (size_t)(ns + g->n_edges + 1));
	uint32_t *seen = calloc((size_t)ns, sizeof(uint32_t));
	uint32_t *fs = NULL; /* per call edge: its first set, word 8 = can end */
	uint32_t stamp = 0;
	int64_t work = 0;
	bool settled = false;
	if (!first || !g->follow || !stk || !seen)
		goto out;
	for (int it = 0; it < 32 && !settled && work < MAX_CLOSURE_WORK; it++) {
		settled = true;
		for (int32_t r = 0; r < nr; r++) {
			uint32_t set[8] = {0};
			first_from(g, g->rules[r].start, first, set, stk, seen, ++stamp, &work);
			if (set_or(first + 8 * r, set))
				settled = false;
		}
	}
	if (!settled || !(fs = calloc((size_t)g->n_edges * 9 + 1, sizeof(uint32_t))))
		goto out;
	for (int32_t e = 0; e < g->n_edges && work < MAX_CLOSURE_WORK; e++)
		if (g->edges[e].kind == E_CALL)
			fs[9 * e + 8] = first_from(g, g->edges[e].to, first, fs + 9 * e, stk, seen,
						   ++stamp, &work);
	settled = work < MAX_CLOSURE_WORK;
	for (int it = 0; it < 64 && settled; it++) {
		bool changed = false;
		for (int32_t e = 0; e < g->n_edges; e++) {
			const struct gedge *d = &g->edges[e];
			if (d->kind != E_CALL)
				continue;
			changed |= set_or(g->follow + 8 * d->arg, fs + 9 * e);
			if (fs[9 * e + 8])
				changed |= set_or(g->follow + 8 * d->arg,
						  g->follow + 8 * g->states[d->from].rule);
		}
		if (!changed)
			break;
		settled = it < 63;
	}
out:
	if (g->follow && (!settled || !fs))
		memset(g->follow, 0xff, sizeof(uint32_t) * 8 * (size_t)nr);
	free(first), free(stk), free(seen), free(fs);
	return g->follow ? 0 : atlas_error(ATLAS_ENOMEM, "out of memory");
}

static int compile_rules(struct parser *p, const char *text)
{
	struct grammar_build *gb = p->gb;
	struct atlas_grammar *g = gb->g;
	int32_t root = -1;
	for (int32_t r = 0; r < g->n_rules; r++) {
		if (gb->def_pos[r] == (size_t)-1) {
			char msg[160];
			snprintf(msg, sizeof(msg), "undefined rule '%.120s'", gb->names[r]);
			return perr(p, gb->use_pos[r], msg);
		}
		if (!strcmp(gb->names[r], "root"))
			root = r;
	}
	if (root < 0)
		return atlas_error(ATLAS_EINVAL, "grammar has no rule 'root'");
	g->root = root;
	for (int32_t r = 0; r < g->n_rules; r++) {
		struct frag f;
		if (build(p, p->body[r], r, &f))
			return atlas_error(ATLAS_EINVAL, "grammar too large (more than %d states)",
					   MAX_STATES);
		g->rules[r].start = f.start;
		g->states[f.end].final = 1;
	}
	index_edges(g);
	int rc = check_left_recursion(g, gb, text);
	if (!rc)
		rc = closures(g);
	return rc ? rc : follow_sets(g);
}

struct atlas_grammar *atlas_grammar_compile(const char *text, size_t len,
					    const struct atlas_grammar_vocab *v)
{
	if (!text || !v) {
		atlas_error(ATLAS_EINVAL, "grammar: no text or vocabulary");
		return NULL;
	}
	if (len > MAX_TEXT) {
		atlas_error(ATLAS_EINVAL, "grammar too large (%zu bytes)", len);
		return NULL;
	}
	struct atlas_grammar *g = calloc(1, sizeof(*g));
	struct grammar_build gb = {.g = g};
	struct parser p = {.s = text, .len = len, .gb = &gb};
	int rc = g ? 0 : atlas_error(ATLAS_ENOMEM, "out of memory");
	if (!rc) {
		g->v = v;
		rc = parse_rules(&p);
	}
	if (!rc)
		rc = compile_rules(&p, text);
	if (!rc)
		rc = grammar_cache_init(g);
	for (int32_t r = 0; g && r < g->n_rules; r++)
		free(gb.names[r]);
	free(gb.names), free(gb.def_pos), free(gb.use_pos), free(p.body), free(p.nodes);
	free(gb.hash);
	if (rc) {
		atlas_grammar_free(g);
		return NULL;
	}
	return g;
}
