/* grammar.c - the grammar parser and compiler (see grammar.h).
 *
 * Text -> syntax tree -> one NFA per rule (Thompson construction: every
 * state has class edges, call edges to other rules and epsilon edges).
 * Groups and repetitions stay inside their rule's NFA instead of becoming
 * helper rules, so that a loop such as the body of a JSON string is one
 * position of one rule: the mask cache can then answer most tokens from
 * that position alone (see "masks" below).
 *
 * The text comes from HTTP requests, so everything is bounded: the text
 * size, nesting of parentheses, repetition counts, states and closure
 * sizes. Errors name line:column. Undefined rules, a missing root and
 * left recursion (also through rules that can match nothing) are
 * refused, which is what keeps the matcher's closures finite. */
#include "grammar.h"

#include <pthread.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "../core/utf8.h"
#include "../tok/tok.h"

#define MAX_TEXT ((size_t)8 << 20)  /* bytes of grammar text */
#define MAX_NEST 64		    /* parentheses inside each other */
#define MAX_REPEAT 10000	    /* m and n of x{m,n} */
#define MAX_STATES 400000	    /* NFA states of a grammar */
#define MAX_CLOSURE (8 << 20)	    /* closure list entries in all */
#define MAX_NODES (4 << 20)	    /* syntax tree nodes */
#define MAX_RULES 100000	    /* rules of a grammar */
#define MAX_POSTFIX 4		    /* operators after one item, as in x*? */
#define MAX_CLOSURE_WORK (64 << 20) /* states visited computing closures */
#define MAX_VISITS 65536	    /* closure visits of one step past the fast path */
#define MAX_WALK_WORK (64 << 20)    /* stack steps of one mask's walks */
#define MAX_DEPTH 512		    /* frames of one stack */
#define MAX_STACKS 1024		    /* live stacks (parses) at one point */
/* Cache walkers of one grammar, i.e. threads computing entries at once
 * (a test build may lower it, to exercise the wait for one). */
#ifndef MAX_WALKERS
#define MAX_WALKERS 64
#endif

enum { E_EPS, E_CLASS, E_CALL }; /* edge kinds, in the order edges are grouped */

/* A set of code points: sorted disjoint ranges in g->ranges, and a
 * bitmap of its ASCII part for the common case. */
struct gclass {
	int32_t off, n;	   /* ranges g->ranges[off .. off + 2n) as (lo, hi) */
	uint32_t ascii[4]; /* bit c set when c < 128 is in the class */
};

struct gedge {
	int32_t from; /* source state */
	int32_t kind; /* E_* */
	int32_t arg;  /* class (E_CLASS) or rule (E_CALL) */
	int32_t to;   /* target state; for E_CALL the state to return to */
};

struct gstate {
	int32_t edge_off, n_edges; /* g->edges[edge_off ..), E_EPS then E_CLASS then E_CALL */
	int32_t n_class, n_call;   /* how many class and call edges */
	int32_t clo_off, n_clo; /* g->clo[clo_off ..): the useful states of its epsilon closure */
	int32_t rule;		/* the rule the state belongs to */
	uint8_t final;		/* the rule's end */
};

struct grule {
	int32_t start;	  /* start state */
	uint8_t nullable; /* can match the empty string */
};

/* What a stack whose top is one state does with each token, as far as
 * that rule alone decides: acc, the tokens certainly allowed; ctx, the
 * tokens (sorted positions) that reach the end of the rule and so depend
 * on the frames below; every other token is rejected. */
struct gcache {
	uint32_t *acc; /* bitset over token ids */
	int32_t *ctx;  /* sorted positions, increasing */
	int64_t n_ctx; /* entries of ctx */
};

struct gwalk;

struct atlas_grammar {
	const struct atlas_grammar_vocab *v; /* the vocabulary masks are for */
	struct grule *rules;		     /* rules by id */
	int32_t n_rules, cap_rules;
	int32_t root;	       /* the rule "root" */
	struct gstate *states; /* NFA states of all rules */
	int32_t n_states, cap_states;
	struct gedge *edges; /* edges grouped by source state */
	int32_t n_edges, cap_edges;
	struct gclass *classes; /* character classes */
	int32_t n_classes, cap_classes;
	uint32_t *ranges; /* the classes' ranges */
	int32_t n_ranges, cap_ranges;
	int32_t *clo; /* closure lists (see gstate) */
	int32_t n_clo;
	uint32_t *follow; /* per rule, 8 words: bytes that may follow it */
	/* The mask cache (see "the mask cache" below): entries of different
	 * states are computed at once by different threads; mu is held only
	 * to claim a state or a walker, never during a computation. */
	struct gcache **cache; /* per state, NULL until first needed; set once,
				* atomically (release), and read without mu */
	pthread_mutex_t mu;    /* guards busy, idle, n_idle, n_walkers */
	pthread_cond_t cv;     /* broadcast when a state's computation ends
				* or a walker comes back */
	bool mu_ok;	       /* mu and cv were initialized */
	uint8_t *busy;	       /* per state: some thread is computing its entry */
	struct gwalk **idle;   /* cache walkers not in use, [MAX_WALKERS] */
	int32_t n_idle;	       /* entries of idle */
	int32_t n_walkers;     /* cache walkers that exist (idle or in use) */
	int extra_refs;	       /* references beyond the first (atomic) */
};

static int grammar_cache_init(struct atlas_grammar *g);

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

static void *grow(void *p, int32_t *cap, int32_t need, size_t elem)
{
	if (need <= *cap)
		return p;
	int32_t c = *cap ? *cap : 16;
	while (c < need)
		c *= 2;
	void *q = realloc(p, (size_t)c * elem);
	if (q)
		*cap = c;
	return q;
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

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
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
	int digits = 0;
	switch (c) {
	case 'n':
		*cp = '\n';
		return 0;
	case 't':
		*cp = '\t';
		return 0;
	case 'r':
		*cp = '\r';
		return 0;
	case 'f':
		*cp = '\f';
		return 0;
	case 'v':
		*cp = '\v';
		return 0;
	case '0':
		*cp = 0;
		return 0;
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
		int h = p->i < p->len ? hexval(p->s[p->i]) : -1;
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

/* ---- the vocabulary ---- */

/* Tokens sorted by their bytes, so that a walk over them shares the work
 * on common prefixes (rolling back to the common prefix of neighbours). */
struct atlas_grammar_vocab {
	int64_t n_vocab; /* ids 0 .. n_vocab - 1 (masks cover them all) */
	int64_t n_words; /* mask words */
	int64_t n;	 /* tokens that can be allowed (text, not special, not EOS) */
	int32_t *id;	 /* per sorted position: the token id */
	int64_t *off;	 /* per sorted position: its bytes in `bytes` */
	int32_t *len;	 /* per sorted position: its length */
	char *bytes;	 /* the tokens' bytes, in sorted order */
	int32_t *pos;	 /* per id: sorted position, -1 if never allowed as text */
	int32_t *eos;	 /* end-of-sequence ids */
	int n_eos;	 /* entries of eos */
};

struct tokref {
	const char *p; /* bytes (owned by the tokenizer) */
	int32_t len;   /* byte count */
	int32_t id;    /* token id */
};

static int cmp_tokref(const void *a, const void *b)
{
	const struct tokref *x = a, *y = b;
	int32_t n = x->len < y->len ? x->len : y->len;
	int c = memcmp(x->p, y->p, (size_t)n);
	if (c)
		return c;
	return x->len < y->len ? -1 : x->len > y->len;
}

static bool is_eos(const struct atlas_grammar_vocab *v, int32_t id)
{
	for (int k = 0; k < v->n_eos; k++)
		if (v->eos[k] == id)
			return true;
	return false;
}

struct atlas_grammar_vocab *atlas_grammar_vocab_new(const struct atlas_tok *tok, int64_t n_vocab,
						    const int32_t *eos, int n_eos)
{
	int64_t nt = atlas_tok_vocab_size(tok);
	struct atlas_grammar_vocab *v = calloc(1, sizeof(*v));
	struct tokref *t = calloc((size_t)nt + 1, sizeof(*t));
	if (!v || !t || n_eos < 0 || nt > INT32_MAX)
		goto fail;
	v->n_vocab = n_vocab > nt ? n_vocab : nt;
	v->n_words = (v->n_vocab + 31) / 32;
	v->eos = malloc(sizeof(int32_t) * (size_t)(n_eos + 1));
	v->pos = malloc(sizeof(int32_t) * (size_t)v->n_vocab);
	if (!v->eos || !v->pos)
		goto fail;
	memcpy(v->eos, eos, sizeof(int32_t) * (size_t)n_eos);
	v->n_eos = n_eos;
	int64_t total = 0;
	for (int32_t id = 0; id < nt; id++) {
		size_t len = 0;
		const char *p = atlas_tok_piece(tok, id, &len);
		if (!p || !len || len > 4096 || atlas_tok_is_special(tok, id) || is_eos(v, id))
			continue;
		t[v->n++] = (struct tokref){.p = p, .len = (int32_t)len, .id = id};
		total += (int64_t)len;
	}
	qsort(t, (size_t)v->n, sizeof(*t), cmp_tokref);
	v->id = malloc(sizeof(int32_t) * (size_t)(v->n + 1));
	v->off = malloc(sizeof(int64_t) * (size_t)(v->n + 1));
	v->len = malloc(sizeof(int32_t) * (size_t)(v->n + 1));
	v->bytes = malloc((size_t)total + 1);
	if (!v->id || !v->off || !v->len || !v->bytes)
		goto fail;
	for (int64_t k = 0; k < v->n_vocab; k++)
		v->pos[k] = -1;
	total = 0;
	for (int64_t k = 0; k < v->n; k++) {
		v->id[k] = t[k].id;
		v->off[k] = total;
		v->len[k] = t[k].len;
		v->pos[t[k].id] = (int32_t)k;
		memcpy(v->bytes + total, t[k].p, (size_t)t[k].len);
		total += t[k].len;
	}
	free(t);
	return v;
fail:
	free(t);
	atlas_grammar_vocab_free(v);
	atlas_error(ATLAS_ENOMEM, "out of memory");
	return NULL;
}

void atlas_grammar_vocab_free(struct atlas_grammar_vocab *v)
{
	if (!v)
		return;
	free(v->id), free(v->off), free(v->len), free(v->bytes), free(v->pos), free(v->eos);
	free(v);
}

int64_t atlas_grammar_vocab_size(const struct atlas_grammar_vocab *v)
{
	return v->n_vocab;
}

int64_t atlas_grammar_mask_words(const struct atlas_grammar_vocab *v)
{
	return v->n_words;
}

/* ---- stacks ----
 *
 * A stack is (top state, parent frame): the top is where the innermost
 * rule is, the frames below are return states. Frames are hash-consed
 * nodes in a pool, so equal stacks are equal pairs (duplicates are cheap
 * to drop) and stacks share their bottoms. A walk appends nodes and
 * rolls the pool back (truncate) when it backs up; newer nodes are always
 * at the head of their hash chains, which is what makes that possible. */

struct gframe {
	int32_t state;	/* the state to return to */
	int32_t parent; /* the frame below, -1 at the bottom */
	int32_t depth;	/* frames from the bottom, this one included */
	int32_t hnext;	/* next frame in its hash chain */
};

struct gpool {
	struct gframe *f; /* frames */
	int32_t n, cap;	  /* used, allocated */
	int32_t *bucket;  /* hash chain heads, -1 if empty */
	int32_t nb;	  /* buckets (a power of two) */
};

static uint32_t frame_hash(int32_t state, int32_t parent, int32_t nb)
{
	uint32_t h = (uint32_t)state * 0x9e3779b1u ^ (uint32_t)parent * 0x85ebca77u;
	return (h ^ (h >> 15)) & (uint32_t)(nb - 1);
}

static int pool_rehash(struct gpool *p, int32_t nb)
{
	int32_t *b = malloc(sizeof(int32_t) * (size_t)nb);
	if (!b)
		return -1;
	free(p->bucket);
	p->bucket = b;
	p->nb = nb;
	for (int32_t k = 0; k < nb; k++)
		b[k] = -1;
	for (int32_t k = 0; k < p->n; k++) {
		uint32_t h = frame_hash(p->f[k].state, p->f[k].parent, nb);
		p->f[k].hnext = b[h];
		b[h] = k;
	}
	return 0;
}

/* The frame (state, parent): found or added. -1 past MAX_DEPTH or out
 * of memory. */
static int32_t pool_push(struct gpool *p, int32_t state, int32_t parent)
{
	int32_t depth = parent < 0 ? 1 : p->f[parent].depth + 1;
	if (depth > MAX_DEPTH)
		return -1;
	if (!p->nb && pool_rehash(p, 1024))
		return -1;
	uint32_t h = frame_hash(state, parent, p->nb);
	for (int32_t k = p->bucket[h]; k >= 0; k = p->f[k].hnext)
		if (p->f[k].state == state && p->f[k].parent == parent)
			return k;
	if (p->n == INT32_MAX / 2)
		return -1;
	struct gframe *f = grow(p->f, &p->cap, p->n + 1, sizeof(*f));
	if (!f)
		return -1;
	p->f = f;
	f[p->n] = (struct gframe){
	    .state = state, .parent = parent, .depth = depth, .hnext = p->bucket[h]};
	p->bucket[h] = p->n++;
	if (p->n > 2 * p->nb)
		pool_rehash(p, 2 * p->nb); /* on failure the chains just stay long */
	return p->n - 1;
}

static void pool_truncate(struct gpool *p, int32_t mark)
{
	while (p->n > mark) {
		struct gframe *f = &p->f[--p->n];
		p->bucket[frame_hash(f->state, f->parent, p->nb)] = f->hnext;
	}
}

static void pool_release(struct gpool *p)
{
	free(p->f);
	free(p->bucket);
	memset(p, 0, sizeof(*p));
}

/* ---- walking bytes ----
 *
 * A level is the set of stacks after some bytes: entries (top, parent),
 * the partial UTF-8 character they share (boundaries depend only on the
 * bytes), and whether some parse popped its bottom frame (for a real
 * stack: the grammar can end; for a cache walk: the token reaches the end
 * of the rule). Levels are stacked: level k + 1 is built from level k and
 * one byte, and backing up to level k drops what came after it. */

struct gentry {
	int32_t top;	/* state: its class edges consume the next character */
	int32_t parent; /* frame below, -1 for none */
};

struct glevel {
	int64_t off;	/* first entry in the walker's ent */
	int32_t n;	/* entries */
	uint32_t acc;	/* bits of the partial character so far */
	uint8_t rem;	/* continuation bytes it still needs (0: at a boundary) */
	uint8_t len;	/* its total length */
	uint8_t bottom; /* some parse popped the bottom frame */
	uint8_t anyb;	/* a cache walk: some earlier level had a bottom that the
			 * byte after it may follow (see struct gwalk's follow) */
	int32_t pmark;	/* pool size when the level was complete */
	int32_t set;	/* a cache walk: its interned stack set, -1 if none */
};

/* Cache walks memoize transitions: a level's stacks (interned as a set;
 * frames are hash-consed and never dropped during cache walks, so equal
 * sets are equal arrays) and a byte give the next level's set. Inside a
 * JSON string every character leads back to the same set, so most steps
 * of a cache walk become a table lookup. */
struct gset {
	int64_t off;	/* entries in the memo's ent */
	int32_t n;	/* how many */
	uint32_t acc;	/* partial character, as in struct glevel */
	uint8_t rem;	/* continuation bytes it needs */
	uint8_t len;	/* its length */
	uint8_t bottom; /* some parse popped the bottom frame */
	int32_t *next;	/* per byte: next set, -1 unknown, -2 none (NULL: all unknown) */
};

struct gmemo {
	struct gentry *ent; /* entries of all sets */
	int64_t n_ent, cap_ent;
	struct gset *sets; /* interned sets */
	int32_t n_sets, cap_sets;
	int32_t *hash; /* open addressing over sets: set id, -1 if empty */
	int32_t n_hash;
};

struct gwalk {
	const struct atlas_grammar *g; /* the grammar */
	struct gpool pool;	       /* frames */
	struct gentry *ent;	       /* entries of all levels */
	int64_t cap_ent;
	struct glevel *lv; /* levels */
	int32_t cap_lv;
	uint32_t stamp;	    /* current step, for the marks below */
	uint32_t *vstamp;   /* per state: step of its last closure visit */
	int32_t *vpar;	    /* per state: parent of that visit */
	uint32_t *estamp;   /* per state: step it last became an entry top */
	int32_t *epar;	    /* per state: parent of that entry */
	struct gentry *vis; /* other closure visits of this step */
	int32_t n_vis, cap_vis;
	const uint32_t *follow; /* a cache walk: the bytes that may follow the rule
				 * of its bottom frame (a token that leaves the rule
				 * with another byte depends on the context) */
	bool overflow;		/* a level passed MAX_STACKS */
	bool oom;		/* an allocation failed */
	int64_t work;		/* stack steps since the walk began */
	struct gmemo *memo;	/* cache walks: the transition memo, else NULL */
};

static int walk_init(struct gwalk *w, const struct atlas_grammar *g)
{
	memset(w, 0, sizeof(*w));
	w->g = g;
	size_t ns = (size_t)g->n_states + 1;
	w->vstamp = calloc(ns, sizeof(uint32_t));
	w->vpar = calloc(ns, sizeof(int32_t));
	w->estamp = calloc(ns, sizeof(uint32_t));
	w->epar = calloc(ns, sizeof(int32_t));
	w->cap_lv = 64;
	w->lv = calloc((size_t)w->cap_lv, sizeof(*w->lv));
	w->cap_ent = 256;
	w->ent = malloc(sizeof(*w->ent) * (size_t)w->cap_ent);
	if (!w->vstamp || !w->vpar || !w->estamp || !w->epar || !w->lv || !w->ent)
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	return 0;
}

static void walk_release(struct gwalk *w)
{
	pool_release(&w->pool);
	free(w->ent), free(w->lv), free(w->vstamp), free(w->vpar), free(w->estamp);
	free(w->epar), free(w->vis);
	memset(w, 0, sizeof(*w));
}

/* Has this step already expanded (s, parent)? Marks it if not. */
static bool visited(struct gwalk *w, int32_t s, int32_t parent)
{
	if (w->vstamp[s] != w->stamp) {
		w->vstamp[s] = w->stamp;
		w->vpar[s] = parent;
		return false;
	}
	if (w->vpar[s] == parent)
		return true;
	for (int32_t k = 0; k < w->n_vis; k++)
		if (w->vis[k].top == s && w->vis[k].parent == parent)
			return true;
	if (w->n_vis >= MAX_VISITS) {
		w->overflow = true; /* as if too ambiguous */
		return true;
	}
	struct gentry *v = grow(w->vis, &w->cap_vis, w->n_vis + 1, sizeof(*v));
	if (!v) {
		w->oom = true;
		return true;
	}
	w->vis = v;
	v[w->n_vis++] = (struct gentry){s, parent};
	return false;
}

static void add_entry(struct gwalk *w, struct glevel *L, int32_t top, int32_t parent)
{
	if (w->estamp[top] == w->stamp) {
		if (w->epar[top] == parent)
			return;
		for (int32_t k = 0; k < L->n; k++)
			if (w->ent[L->off + k].top == top && w->ent[L->off + k].parent == parent)
				return;
	} else {
		w->estamp[top] = w->stamp;
		w->epar[top] = parent;
	}
	if (L->n >= MAX_STACKS) {
		w->overflow = true;
		return;
	}
	if (L->off + L->n >= w->cap_ent) {
		struct gentry *e = realloc(w->ent, sizeof(*e) * (size_t)w->cap_ent * 2);
		if (!e) {
			w->oom = true;
			return;
		}
		w->ent = e;
		w->cap_ent *= 2;
	}
	w->ent[L->off + L->n++] = (struct gentry){top, parent};
}

/* Add to L every stack reached from (s, parent) without consuming. */
static void closure(struct gwalk *w, struct glevel *L, int32_t s, int32_t parent)
{
	const struct atlas_grammar *g = w->g;
	if (visited(w, s, parent))
		return;
	const struct gstate *st = &g->states[s];
	for (int32_t k = st->clo_off; k < st->clo_off + st->n_clo; k++) {
		int32_t x = g->clo[k];
		const struct gstate *xs = &g->states[x];
		if (xs->n_class)
			add_entry(w, L, x, parent);
		const struct gedge *e = &g->edges[xs->edge_off + xs->n_edges - xs->n_call];
		for (int32_t c = 0; c < xs->n_call; c++) {
			int32_t f = pool_push(&w->pool, e[c].to, parent);
			if (f >= 0)
				closure(w, L, g->rules[e[c].arg].start, f);
		}
		if (xs->final) {
			if (parent < 0) {
				L->bottom = 1;
			} else {
				struct gframe fr = w->pool.f[parent];
				closure(w, L, fr.state, fr.parent);
			}
		}
	}
}

static bool class_has(const struct atlas_grammar *g, int32_t c, uint32_t cp)
{
	const struct gclass *k = &g->classes[c];
	if (cp < 128)
		return k->ascii[cp >> 5] >> (cp & 31) & 1;
	const uint32_t *r = g->ranges + k->off;
	int32_t lo = 0, hi = k->n - 1;
	while (lo <= hi) {
		int32_t mid = (lo + hi) / 2;
		if (cp < r[2 * mid])
			hi = mid - 1;
		else if (cp > r[2 * mid + 1])
			lo = mid + 1;
		else
			return true;
	}
	return false;
}

/* Does class c hold some code point in [a, b]? */
static bool class_meets(const struct atlas_grammar *g, int32_t c, uint32_t a, uint32_t b)
{
	const struct gclass *k = &g->classes[c];
	const uint32_t *r = g->ranges + k->off;
	for (int32_t i = 0; i < k->n; i++)
		if (r[2 * i + 1] >= a)
			return r[2 * i] <= b;
	return false;
}

static struct glevel *level(struct gwalk *w, int32_t k)
{
	if (k >= w->cap_lv) {
		struct glevel *l = realloc(w->lv, sizeof(*l) * (size_t)w->cap_lv * 2);
		if (!l) {
			w->oom = true;
			return NULL;
		}
		w->lv = l;
		w->cap_lv *= 2;
	}
	return &w->lv[k];
}

static void new_step(struct gwalk *w)
{
	w->n_vis = 0;
	if (++w->stamp == 0) { /* wrapped: forget old marks */
		memset(w->vstamp, 0, sizeof(uint32_t) * (size_t)w->g->n_states);
		memset(w->estamp, 0, sizeof(uint32_t) * (size_t)w->g->n_states);
		w->stamp = 1;
	}
}

static const uint32_t cp_min[5] = {0, 0, 0x80, 0x800, 0x10000};

/* In a cache walk: does byte b, after level L, leave the rule for a
 * context that could take it? */
static bool leaves(const struct gwalk *w, const struct glevel *L, unsigned char b)
{
	return L->bottom && w->follow && (w->follow[b >> 5] >> (b & 31) & 1);
}

#define MEMO_SETS 8192 /* interned sets before the memo starts over */

static void memo_clear(struct gmemo *m)
{
	for (int32_t k = 0; k < m->n_sets; k++)
		free(m->sets[k].next);
	m->n_sets = 0;
	m->n_ent = 0;
	for (int32_t k = 0; k < m->n_hash; k++)
		m->hash[k] = -1;
}

static void memo_free(struct gmemo *m)
{
	if (!m)
		return;
	memo_clear(m);
	free(m->ent), free(m->sets), free(m->hash);
	free(m);
}

static uint32_t set_hash(const struct gentry *e, int32_t n, const struct glevel *L)
{
	uint32_t h = 2166136261u ^ L->acc ^ (uint32_t)L->rem << 24 ^ (uint32_t)L->len << 26 ^
		     (uint32_t)L->bottom << 28;
	for (int32_t k = 0; k < n; k++)
		h = (h ^ (uint32_t)e[k].top) * 16777619u ^ (uint32_t)e[k].parent * 0x9e3779b1u;
	return h ^ (h >> 15);
}

/* The id of level L's set in the memo (added if new), -1 when full. */
static int32_t memo_intern(struct gwalk *w, const struct glevel *L)
{
	struct gmemo *m = w->memo;
	const struct gentry *e = w->ent + L->off;
	if (m->n_sets >= MEMO_SETS || !m->hash)
		return -1;
	uint32_t h = set_hash(e, L->n, L) & (uint32_t)(m->n_hash - 1);
	for (; m->hash[h] >= 0; h = (h + 1) & (uint32_t)(m->n_hash - 1)) {
		const struct gset *t = &m->sets[m->hash[h]];
		if (t->n == L->n && t->acc == L->acc && t->rem == L->rem && t->len == L->len &&
		    t->bottom == L->bottom &&
		    !memcmp(m->ent + t->off, e, sizeof(*e) * (size_t)L->n))
			return m->hash[h];
	}
	if (m->n_ent + L->n > m->cap_ent) {
		int64_t cap = m->cap_ent ? m->cap_ent : 1024;
		while (cap < m->n_ent + L->n)
			cap *= 2;
		struct gentry *ne = realloc(m->ent, sizeof(*ne) * (size_t)cap);
		if (!ne)
			return -1;
		m->ent = ne;
		m->cap_ent = cap;
	}
	struct gset *ns = grow(m->sets, &m->cap_sets, m->n_sets + 1, sizeof(*ns));
	if (!ns)
		return -1;
	m->sets = ns;
	memcpy(m->ent + m->n_ent, e, sizeof(*e) * (size_t)L->n);
	ns[m->n_sets] = (struct gset){.off = m->n_ent,
				      .n = L->n,
				      .acc = L->acc,
				      .rem = L->rem,
				      .len = L->len,
				      .bottom = L->bottom};
	m->n_ent += L->n;
	m->hash[h] = m->n_sets;
	return m->n_sets++;
}

static struct gmemo *memo_new(void)
{
	struct gmemo *m = calloc(1, sizeof(*m));
	if (m)
		m->hash = malloc(sizeof(int32_t) * 2 * MEMO_SETS);
	if (!m || !m->hash) {
		memo_free(m);
		return NULL;
	}
	m->n_hash = 2 * MEMO_SETS;
	for (int32_t k = 0; k < m->n_hash; k++)
		m->hash[k] = -1;
	return m;
}

static bool step_compute(struct gwalk *w, int32_t k, unsigned char b);

/* Level k + 1 from level k and byte b. False when no parse takes b (or
 * the level overflowed, which counts as not taking it). */
static bool step(struct gwalk *w, int32_t k, unsigned char b)
{
	struct gmemo *m = w->memo;
	if (!m)
		return step_compute(w, k, b);
	int32_t sid = w->lv[k].set;
	int32_t nx = sid >= 0 && m->sets[sid].next ? m->sets[sid].next[b] : -1;
	if (nx == -2) {
		w->work++;
		return false;
	}
	if (nx >= 0) {
		const struct gset *t = &m->sets[nx];
		struct glevel *N = level(w, k + 1);
		struct glevel *L = &w->lv[k];
		int64_t off = L->off + L->n;
		if (N && off + t->n > w->cap_ent) {
			int64_t cap = 2 * (off + t->n);
			struct gentry *e = realloc(w->ent, sizeof(*e) * (size_t)cap);
			if (e) {
				w->ent = e;
				w->cap_ent = cap;
			}
		}
		if (!N || off + t->n > w->cap_ent) {
			w->oom = true;
			return false;
		}
		L = &w->lv[k];
		*N = (struct glevel){.off = off,
				     .n = t->n,
				     .acc = t->acc,
				     .rem = t->rem,
				     .len = t->len,
				     .bottom = t->bottom,
				     .pmark = w->pool.n,
				     .set = nx};
		N->anyb = L->anyb | leaves(w, L, b);
		memcpy(w->ent + off, m->ent + t->off, sizeof(*w->ent) * (size_t)t->n);
		w->work++;
		return true;
	}
	bool ok = step_compute(w, k, b);
	if (w->oom || w->overflow)
		return ok;
	int32_t to = -2;
	if (ok)
		to = w->lv[k + 1].set = memo_intern(w, &w->lv[k + 1]);
	if (sid >= 0 && to != -1) {
		struct gset *t = &m->sets[sid];
		if (!t->next && (t->next = malloc(sizeof(int32_t) * 256)))
			for (int i = 0; i < 256; i++)
				t->next[i] = -1;
		if (t->next)
			t->next[b] = to;
	}
	return ok;
}

static bool step_compute(struct gwalk *w, int32_t k, unsigned char b)
{
	const struct atlas_grammar *g = w->g;
	struct glevel *N = level(w, k + 1);
	if (!N)
		return false;
	struct glevel *L = &w->lv[k];
	*N = (struct glevel){.off = L->off + L->n};
	N->anyb = L->anyb | leaves(w, L, b);
	w->work += L->n + 1;
	new_step(w);
	w->overflow = false;
	uint32_t cp;
	if (L->rem == 0 && b < 0x80) {
		cp = b;
	} else {
		if (L->rem == 0) {
			int n = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : 2;
			if (b < 0xc2 || b > 0xf4)
				return false;
			N->acc = b & (0x7fu >> n);
			N->rem = (uint8_t)(n - 1);
			N->len = (uint8_t)n;
		} else {
			if ((b & 0xc0) != 0x80)
				return false;
			N->acc = L->acc << 6 | (b & 0x3f);
			N->rem = L->rem - 1;
			N->len = L->len;
		}
		if (N->rem) {
			uint32_t lo = N->acc << (6 * N->rem), hi = lo | ((1u << (6 * N->rem)) - 1);
			if (lo < cp_min[N->len])
				lo = cp_min[N->len];
			if (hi > 0x10ffff)
				hi = 0x10ffff;
			if (lo > hi)
				return false;
			for (int32_t e = 0; e < L->n; e++) {
				const struct gentry *en = &w->ent[L->off + e];
				const struct gstate *s = &g->states[en->top];
				const struct gedge *ed =
				    &g->edges[s->edge_off + s->n_edges - s->n_call - s->n_class];
				for (int32_t c = 0; c < s->n_class; c++)
					if (class_meets(g, ed[c].arg, lo, hi)) {
						add_entry(w, N, en->top, en->parent);
						break;
					}
			}
			N->pmark = w->pool.n;
			return N->n > 0 && !w->overflow && !w->oom;
		}
		cp = N->acc;
		N->acc = 0;
		N->len = 0;
		if (cp < cp_min[L->len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false;
	}
	for (int32_t e = 0; e < L->n; e++) {
		struct gentry en = w->ent[L->off + e];
		const struct gstate *s = &g->states[en.top];
		const struct gedge *ed =
		    &g->edges[s->edge_off + s->n_edges - s->n_call - s->n_class];
		for (int32_t c = 0; c < s->n_class; c++)
			if (class_has(g, ed[c].arg, cp))
				closure(w, N, ed[c].to, en.parent);
		L = &w->lv[k]; /* (entries may have moved; levels do not) */
	}
	N->pmark = w->pool.n;
	return (N->n > 0 || N->bottom) && !w->overflow && !w->oom;
}

/* Level `base` from a start state: its closure. */
static void level_start(struct gwalk *w, int32_t base, int64_t off, int32_t s, int32_t parent)
{
	struct glevel *L = level(w, base);
	if (!L) {
		w->oom = true;
		return;
	}
	*L = (struct glevel){.off = off, .set = -1};
	new_step(w);
	w->overflow = false;
	closure(w, L, s, parent);
	L->pmark = w->pool.n;
	L->anyb = 0;
}

enum { WALK_CACHE, WALK_FULL };

/* Back the pool up to mark, except in cache walks (their memo refers to
 * frames by id; hash-consing bounds the pool anyway). */
static void walk_truncate(struct gwalk *w, int32_t mark)
{
	if (!w->memo)
		pool_truncate(&w->pool, mark);
}

/* Walk the tokens at sorted positions list[n] (all tokens when list is
 * NULL) from level `base`. WALK_FULL: set the bit of each token that the
 * level takes whole (skipping tokens whose bit is already set). WALK_CACHE
 * (base's parent frame is the bottom of a one-rule stack): accepted
 * tokens into bits, tokens that reach the rule's end appended to ctx. */
static int walk(struct gwalk *w, int32_t base, const int32_t *list, int64_t n, int mode,
		uint32_t *bits, int32_t **ctx, int64_t *n_ctx)
{
	const struct atlas_grammar_vocab *v = w->g->v;
	int64_t cap_ctx = 0;
	const unsigned char *pb = NULL;
	int32_t plen = 0, have = 0, dead = -1;
	if (!list)
		n = v->n;
	w->work = 0;
	for (int64_t i = 0; i < n; i++) {
		int32_t k = list ? list[i] : (int32_t)i, id = v->id[k];
		if (mode == WALK_FULL && bits[id >> 5] >> (id & 31) & 1)
			continue;
		const unsigned char *tb = (const unsigned char *)v->bytes + v->off[k];
		int32_t tl = v->len[k], l = 0, lim = tl < plen ? tl : plen;
		while (l < lim && tb[l] == pb[l])
			l++;
		bool acc = false, dep;
		if (dead >= 0 && l > dead) {
			dep = w->lv[base + dead].anyb || leaves(w, &w->lv[base + dead], tb[dead]);
		} else {
			if (l < have) {
				have = l;
				walk_truncate(w, w->lv[base + have].pmark);
			}
			dead = -1;
			while (have < tl && step(w, base + have, tb[have]))
				have++;
			if (have < tl) {
				dead = have;
				walk_truncate(w, w->lv[base + have].pmark);
			}
			acc = have == tl;
			dep = have < tl &&
			      (w->lv[base + have].anyb || leaves(w, &w->lv[base + have], tb[have]));
			pb = tb;
			plen = tl;
		}
		if (w->oom)
			return atlas_error(ATLAS_ENOMEM, "out of memory");
		if (w->work > MAX_WALK_WORK) {
			walk_truncate(w, w->lv[base].pmark);
			return atlas_error(ATLAS_EINVAL,
					   "grammar too ambiguous to compute a token mask");
		}
		if (acc) {
			bits[id >> 5] |= 1u << (id & 31);
		} else if (mode == WALK_CACHE && dep) {
			if (*n_ctx == cap_ctx) {
				cap_ctx = cap_ctx ? 2 * cap_ctx : 256;
				int32_t *c = realloc(*ctx, sizeof(int32_t) * (size_t)cap_ctx);
				if (!c)
					return atlas_error(ATLAS_ENOMEM, "out of memory");
				*ctx = c;
			}
			(*ctx)[(*n_ctx)++] = k;
		}
	}
	walk_truncate(w, w->lv[base].pmark);
	return 0;
}

/* Level `base` holding the one stack (top, parent) at a boundary. */
static void level_one(struct gwalk *w, int32_t base, int64_t off, int32_t top, int32_t parent)
{
	struct glevel *L = level(w, base);
	if (L && off >= w->cap_ent) {
		struct gentry *e = realloc(w->ent, sizeof(*e) * (size_t)(off + 1) * 2);
		if (e) {
			w->ent = e;
			w->cap_ent = (off + 1) * 2;
		}
	}
	if (!L || off >= w->cap_ent) {
		w->oom = true;
		return;
	}
	*L = (struct glevel){.off = off, .n = 1, .pmark = w->pool.n, .set = -1};
	w->ent[off] = (struct gentry){top, parent};
}

/* ---- the mask cache ----
 *
 * An entry is a pure function of the grammar, the vocabulary and its
 * state, so any thread may compute it. Concurrency: a thread that needs
 * an absent entry claims its state (busy[s], under mu), takes a cache
 * walker from the grammar's pool, drops mu, walks the vocabulary, and
 * under mu again publishes the entry (an atomic release store that
 * lock-free readers pair with an acquire load), returns the walker and
 * wakes the waiters. A thread that finds the state busy waits on cv
 * instead of computing it twice (the requests of a batch often reach the
 * same state in the same step); if the computation failed, a waiter
 * computes it itself, so that every failing call leaves its own message
 * on its own thread. States that differ are computed in parallel.
 *
 * Walkers are not shared: each has its own frame pool and its own
 * transition memo, whose sets name that pool's frames by id (sharing the
 * memo would mean sharing the pool, under a lock taken on every step).
 * A memo only saves work (a hit gives the level the walk would compute),
 * so an entry comes out the same whichever walker computes it; only the
 * work a walk counts against MAX_WALK_WORK depends on how warm the memo
 * is, as it already did on the order in which states were reached.
 *
 * The pool holds walkers between computations: a new walker is made only
 * when none is idle, so there are never more than the threads that ever
 * computed at once, and at most MAX_WALKERS (past that a thread waits for
 * one to come back). A walker costs 16 bytes per state plus its memo (at
 * most MEMO_SETS sets); all are freed with the grammar. */

static int grammar_cache_init(struct atlas_grammar *g)
{
	g->cache = calloc((size_t)g->n_states + 1, sizeof(*g->cache));
	g->busy = calloc((size_t)g->n_states + 1, 1);
	g->idle = calloc(MAX_WALKERS, sizeof(*g->idle));
	if (!g->cache || !g->busy || !g->idle)
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	if (pthread_mutex_init(&g->mu, NULL))
		return atlas_error(ATLAS_ENOMEM, "cannot create a mutex");
	if (pthread_cond_init(&g->cv, NULL)) {
		pthread_mutex_destroy(&g->mu);
		return atlas_error(ATLAS_ENOMEM, "cannot create a condition variable");
	}
	g->mu_ok = true;
	return 0;
}

static void cache_free(struct gcache *c)
{
	if (c) {
		free(c->acc);
		free(c->ctx);
		free(c);
	}
}

static void cache_walker_free(struct gwalk *w)
{
	if (w) {
		memo_free(w->memo);
		walk_release(w);
		free(w);
	}
}

/* A cache walker for the calling thread: an idle one, else a new one
 * while fewer than MAX_WALKERS exist, else the next one returned. Called
 * with g->mu held (it may wait, and it drops mu while allocating).
 * NULL with a message when out of memory. */
static struct gwalk *walker_take(struct atlas_grammar *g)
{
	while (!g->n_idle && g->n_walkers >= MAX_WALKERS)
		pthread_cond_wait(&g->cv, &g->mu);
	if (g->n_idle)
		return g->idle[--g->n_idle];
	g->n_walkers++; /* the slot is ours while we allocate */
	pthread_mutex_unlock(&g->mu);
	struct gwalk *w = malloc(sizeof(*w));
	if (!w)
		atlas_error(ATLAS_ENOMEM, "out of memory");
	else if (walk_init(w, g))
		cache_walker_free(w), w = NULL;
	pthread_mutex_lock(&g->mu);
	if (!w) {
		g->n_walkers--;
		pthread_cond_broadcast(&g->cv); /* a thread may wait for the slot */
	}
	return w;
}

/* State s's entry, computed with walker w (owned by the calling thread
 * for the time of the call; its memo is kept for the next state). NULL
 * with a message when out of memory or past the work limit. */
static struct gcache *cache_compute(struct atlas_grammar *g, struct gwalk *w, int32_t s)
{
	struct gcache *c = calloc(1, sizeof(*c));
	if (c)
		c->acc = calloc((size_t)g->v->n_words, sizeof(uint32_t));
	w->oom = false;
	w->follow = g->follow + 8 * (size_t)g->states[s].rule;
	if (!w->memo)
		w->memo = memo_new(); /* (without one the walk is just slower) */
	if (w->memo && (w->memo->n_sets >= MEMO_SETS || w->pool.n > (1 << 20)))
		memo_clear(w->memo);
	if (!w->memo || !w->memo->n_sets)
		pool_truncate(&w->pool, 0);
	level_one(w, 0, 0, s, -1);
	if (w->memo && !w->oom)
		w->lv[0].set = memo_intern(w, &w->lv[0]);
	if (!c || !c->acc || w->oom) {
		cache_free(c);
		atlas_error(ATLAS_ENOMEM, "out of memory");
		return NULL;
	}
	if (walk(w, 0, NULL, 0, WALK_CACHE, c->acc, &c->ctx, &c->n_ctx)) {
		cache_free(c);
		return NULL;
	}
	return c;
}

/* The cache entry of state s, computed on first use (see above for who
 * computes it). NULL with a message when out of memory or past the work
 * limit. Readers without the lock see either NULL or a finished entry. */
static struct gcache *cache_get(const struct atlas_grammar *cg, int32_t s)
{
	struct atlas_grammar *g = (struct atlas_grammar *)cg; /* the cache is mutable */
	struct gcache *c = __atomic_load_n(&g->cache[s], __ATOMIC_ACQUIRE);
	if (c)
		return c;
	pthread_mutex_lock(&g->mu);
	while (!(c = __atomic_load_n(&g->cache[s], __ATOMIC_RELAXED)) && g->busy[s])
		pthread_cond_wait(&g->cv, &g->mu);
	if (c) {
		pthread_mutex_unlock(&g->mu);
		return c;
	}
	g->busy[s] = 1;
	struct gwalk *w = walker_take(g);
	pthread_mutex_unlock(&g->mu);
	if (w)
		c = cache_compute(g, w, s);
	pthread_mutex_lock(&g->mu);
	if (w)
		g->idle[g->n_idle++] = w;
	if (c)
		__atomic_store_n(&g->cache[s], c, __ATOMIC_RELEASE);
	g->busy[s] = 0;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
	return c;
}

struct atlas_grammar *atlas_grammar_ref(struct atlas_grammar *g)
{
	__atomic_add_fetch(&g->extra_refs, 1, __ATOMIC_RELAXED);
	return g;
}

/* With the last reference no matcher runs, so every walker is idle. */
void atlas_grammar_free(struct atlas_grammar *g)
{
	if (!g)
		return;
	if (__atomic_sub_fetch(&g->extra_refs, 1, __ATOMIC_ACQ_REL) >= 0)
		return; /* others still hold it */
	for (int32_t s = 0; g->cache && s < g->n_states; s++)
		cache_free(g->cache[s]);
	for (int32_t k = 0; k < g->n_idle; k++)
		cache_walker_free(g->idle[k]);
	if (g->mu_ok) {
		pthread_cond_destroy(&g->cv);
		pthread_mutex_destroy(&g->mu);
	}
	free(g->cache), free(g->busy), free(g->idle), free(g->rules), free(g->states);
	free(g->edges), free(g->classes), free(g->ranges), free(g->clo), free(g->follow);
	free(g);
}

/* ---- the matcher ----
 *
 * Its position is level 0 of its walker; accepting bytes builds levels
 * 1.. and moves the last one down. Frames no stack uses any more are
 * collected when the pool has grown enough. */

struct atlas_grammar_matcher {
	const struct atlas_grammar *g; /* the grammar */
	struct gwalk w;		       /* level 0: the current stacks */
	bool finished;		       /* an EOS id was accepted */
	int32_t gc_at;		       /* pool size that triggers a collection */
};

struct atlas_grammar_matcher *atlas_grammar_matcher_new(const struct atlas_grammar *g)
{
	struct atlas_grammar_matcher *m = calloc(1, sizeof(*m));
	if (!m || walk_init(&m->w, g)) {
		if (m)
			walk_release(&m->w);
		free(m);
		atlas_error(ATLAS_ENOMEM, "out of memory");
		return NULL;
	}
	m->g = g;
	m->gc_at = 1 << 16;
	level_start(&m->w, 0, 0, g->rules[g->root].start, -1);
	if (m->w.oom || m->w.overflow) {
		atlas_error(m->w.oom ? ATLAS_ENOMEM : ATLAS_EINVAL,
			    "grammar too ambiguous at its start (more than %d parses)", MAX_STACKS);
		atlas_grammar_matcher_free(m);
		return NULL;
	}
	return m;
}

struct atlas_grammar_matcher *atlas_grammar_matcher_copy(const struct atlas_grammar_matcher *m)
{
	struct atlas_grammar_matcher *c = atlas_grammar_matcher_new(m->g);
	if (!c)
		return NULL;
	const struct gpool *p = &m->w.pool;
	const struct glevel *L = &m->w.lv[0];
	struct gframe *f = malloc(sizeof(*f) * (size_t)(p->n + 1));
	struct gentry *e = malloc(sizeof(*e) * (size_t)(L->n + 1));
	if (!f || !e) {
		free(f);
		free(e);
		atlas_grammar_matcher_free(c);
		atlas_error(ATLAS_ENOMEM, "out of memory");
		return NULL;
	}
	if (p->n)
		memcpy(f, p->f, sizeof(*f) * (size_t)p->n);
	memcpy(e, m->w.ent + L->off, sizeof(*e) * (size_t)L->n);
	free(c->w.pool.f);
	c->w.pool.f = f;
	c->w.pool.n = c->w.pool.cap = p->n;
	pool_rehash(&c->w.pool, p->nb ? p->nb : 1024);
	free(c->w.ent);
	c->w.ent = e;
	c->w.cap_ent = L->n + 1;
	c->w.lv[0] = *L;
	c->w.lv[0].off = 0;
	c->finished = m->finished;
	c->gc_at = m->gc_at;
	return c;
}

void atlas_grammar_matcher_free(struct atlas_grammar_matcher *m)
{
	if (!m)
		return;
	walk_release(&m->w);
	free(m);
}

/* Keep only the frames level 0 reaches (parents precede children, so
 * one pass in order renumbers them). */
static void collect(struct atlas_grammar_matcher *m)
{
	struct gpool *p = &m->w.pool;
	struct glevel *L = &m->w.lv[0];
	int32_t *map = malloc(sizeof(int32_t) * (size_t)(p->n + 1));
	if (!map)
		return;
	for (int32_t k = 0; k < p->n; k++)
		map[k] = -1;
	for (int32_t e = 0; e < L->n; e++)
		for (int32_t x = m->w.ent[L->off + e].parent; x >= 0 && map[x] == -1;
		     x = p->f[x].parent)
			map[x] = -2;
	int32_t j = 0;
	for (int32_t k = 0; k < p->n; k++) {
		if (map[k] != -2)
			continue;
		p->f[j] = p->f[k];
		if (p->f[j].parent >= 0)
			p->f[j].parent = map[p->f[j].parent];
		map[k] = j++;
	}
	for (int32_t e = 0; e < L->n; e++) {
		struct gentry *en = &m->w.ent[L->off + e];
		if (en->parent >= 0)
			en->parent = map[en->parent];
	}
	p->n = j;
	pool_rehash(p, p->nb);
	L->pmark = j;
	m->gc_at = j * 4 > (1 << 16) ? j * 4 : 1 << 16;
	free(map);
}

int atlas_grammar_accept_bytes(struct atlas_grammar_matcher *m, const char *s, size_t n)
{
	struct gwalk *w = &m->w;
	if (m->finished)
		return atlas_error(ATLAS_EINVAL, "grammar: the output has already ended");
	if (n > INT32_MAX / 2)
		return atlas_error(ATLAS_EINVAL, "grammar: too many bytes");
	w->oom = false;
	int32_t k = 0;
	while ((size_t)k < n && step(w, k, (unsigned char)s[k]))
		k++;
	if ((size_t)k < n) {
		bool amb = w->overflow;
		pool_truncate(&w->pool, w->lv[0].pmark);
		if (w->oom)
			return atlas_error(ATLAS_ENOMEM, "out of memory");
		if (amb)
			return atlas_error(ATLAS_EINVAL,
					   "grammar too ambiguous (more than %d parses)",
					   MAX_STACKS);
		return atlas_error(ATLAS_EINVAL, "grammar: byte %d of the text does not fit", k);
	}
	if (!n)
		return 0;
	struct glevel top = w->lv[k];
	memmove(w->ent, w->ent + top.off, sizeof(*w->ent) * (size_t)top.n);
	top.off = 0;
	top.anyb = 0;
	w->lv[0] = top;
	if (w->pool.n > m->gc_at)
		collect(m);
	return 0;
}

int atlas_grammar_accept(struct atlas_grammar_matcher *m, int32_t id)
{
	const struct atlas_grammar_vocab *v = m->g->v;
	if (id < 0 || id >= v->n_vocab)
		return atlas_error(ATLAS_EINVAL, "grammar: token %d outside the vocabulary",
				   (int)id);
	if (is_eos(v, id)) {
		if (!atlas_grammar_can_end(m))
			return atlas_error(ATLAS_EINVAL, "grammar: the output cannot end here");
		m->finished = true;
		return 0;
	}
	int32_t k = v->pos[id];
	if (k < 0)
		return atlas_error(ATLAS_EINVAL, "grammar: token %d is never allowed", (int)id);
	return atlas_grammar_accept_bytes(m, v->bytes + v->off[k], (size_t)v->len[k]);
}

bool atlas_grammar_can_end(const struct atlas_grammar_matcher *m)
{
	return m->finished || (m->w.lv[0].bottom && m->w.lv[0].rem == 0);
}

bool atlas_grammar_must_end(const struct atlas_grammar_matcher *m)
{
	return m->finished || (atlas_grammar_can_end(m) && m->w.lv[0].n == 0);
}

static int64_t popcount_mask(const uint32_t *mask, int64_t words)
{
	int64_t n = 0;
	for (int64_t k = 0; k < words; k++)
		n += __builtin_popcount(mask[k]);
	return n;
}

/* Tokens that the stacks of level 0 take: per stack, the cached answer
 * of its top and a walk over the tokens the cache left open. */
int64_t atlas_grammar_fill_mask(struct atlas_grammar_matcher *m, uint32_t *mask)
{
	const struct atlas_grammar_vocab *v = m->g->v;
	struct gwalk *w = &m->w;
	memset(mask, 0, sizeof(uint32_t) * (size_t)v->n_words);
	if (m->finished)
		return 0;
	struct glevel L0 = w->lv[0];
	int rc = 0;
	w->oom = false;
	if (L0.rem) { /* inside a character: no cache for that */
		rc = walk(w, 0, NULL, 0, WALK_FULL, mask, NULL, NULL);
	} else {
		for (int32_t e = 0; e < L0.n && !rc; e++) {
			struct gentry en = w->ent[L0.off + e];
			struct gcache *c = cache_get(m->g, en.top);
			if (!c)
				return ATLAS_EINVAL; /* (the message says why) */
			for (int64_t k = 0; k < v->n_words; k++)
				mask[k] |= c->acc[k];
			if (!c->n_ctx)
				continue;
			level_one(w, 1, L0.n, en.top, en.parent);
			rc = w->oom ? atlas_error(ATLAS_ENOMEM, "out of memory")
				    : walk(w, 1, c->ctx, c->n_ctx, WALK_FULL, mask, NULL, NULL);
		}
	}
	if (rc)
		return rc;
	if (atlas_grammar_can_end(m))
		for (int k = 0; k < v->n_eos; k++)
			if (v->eos[k] >= 0 && v->eos[k] < v->n_vocab)
				mask[v->eos[k] >> 5] |= 1u << (v->eos[k] & 31);
	return popcount_mask(mask, v->n_words);
}
