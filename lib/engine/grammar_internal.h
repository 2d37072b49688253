/* grammar_internal.h - what the grammar's files share (see grammar.h).
 *
 * grammar_schema.c and grammar_regex.c: a growable text buffer that
 * remembers its first failure (so the converters can emit text without
 * checking every append), the GBNF spelling of code points, and the
 * regex-to-expression converter that a JSON schema's "pattern" reuses.
 *
 * grammar_parse.c and grammar_match.c: the compiled automaton's layout
 * (struct atlas_grammar), which the first builds and the second walks. */
#ifndef ATLAS_ENGINE_GRAMMAR_INTERNAL_H
#define ATLAS_ENGINE_GRAMMAR_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

struct gbuf {
	char *p;    /* the text, NUL-terminated while not failed */
	size_t n;   /* bytes used */
	size_t cap; /* bytes allocated */
	int err;    /* first failure (ATLAS_ENOMEM, or a limit), 0 if none */
};

/* Appends; on failure they set b->err and do nothing more. */
void gbuf_add(struct gbuf *b, const char *s, size_t n);
void gbuf_puts(struct gbuf *b, const char *s);
void gbuf_printf(struct gbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Code point cp as it may appear inside a GBNF "literal" or [class]. */
void gbuf_cp(struct gbuf *b, uint32_t cp);
/* Bytes s[n] as a GBNF "literal" (quotes included). */
void gbuf_literal(struct gbuf *b, const char *s, size_t n);

/* Append to b a GBNF expression (no rule definition, may be wrapped in
 * parentheses) matching exactly the strings of regex `re`. With
 * json_string, the strings are matched as the inside of a JSON string
 * literal: '"', '\\' and control characters are matched in their escaped
 * forms. 0, or an ATLAS_E* code with a message. */
int atlas_regex_expr(struct gbuf *b, const char *re, bool json_string);

/* ---- the compiled automaton ----
 *
 * What grammar_parse.c builds from the text and grammar_match.c walks:
 * one NFA per rule, all states in one array, edges grouped by state. */

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

struct gcache; /* a state's mask cache entry (grammar_match.c) */
struct gwalk;  /* a walker over bytes (grammar_match.c) */

#define GRAMMAR_MAX_SPECIAL 8 /* special tokens a grammar may allow by text */

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
	/* The mask cache (see "the mask cache" in grammar_match.c): entries of different
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
	/* special tokens allowed wherever the grammar accepts their text
	 * (atlas_grammar_allow_special: a tool-call marker that is one) */
	int n_special;
	int32_t special_id[GRAMMAR_MAX_SPECIAL];
	char *special_text[GRAMMAR_MAX_SPECIAL];
	int32_t special_len[GRAMMAR_MAX_SPECIAL];
};

/* Set up g's mask cache once the automaton is built (grammar_match.c).
 * 0, or ATLAS_ENOMEM with a message. */
int grammar_cache_init(struct atlas_grammar *g);

/* p grown to hold `need` elements of elem bytes (capacity *cap, doubled
 * as needed): the new pointer, or NULL (p untouched) when out of memory. */
/* A hex digit's value, or -1. */
static inline int grammar_hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
		return (c | 0x20) - 'a' + 10;
	return -1;
}

/* The one-letter control escapes the grammar text and regexes share
 * (\n \t \r \f \v \0): true with the code point in *cp. */
static inline bool grammar_control_escape(char e, uint32_t *cp)
{
	static const char from[] = "ntrfv0", to[] = "\n\t\r\f\v";
	for (int i = 0; i < 6; i++)
		if (e == from[i]) {
			*cp = i < 5 ? (uint32_t)(unsigned char)to[i] : 0;
			return true;
		}
	return false;
}

static inline void *grow(void *p, int32_t *cap, int32_t need, size_t elem)
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

#endif
