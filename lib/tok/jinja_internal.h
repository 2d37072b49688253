/* jinja_internal.h - what the files of the Jinja interpreter share: the
 * arena, tokens (jinja_lex.c), the AST (jinja_parse.c), values
 * (jinja_value.c), the evaluator (jinja_eval.c) and the filters, tests
 * and methods (jinja_builtin.c). */
#ifndef ATLAS_TOK_JINJA_INTERNAL_H
#define ATLAS_TOK_JINJA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jinja.h"

/* --- budget: what one render may still spend (struct atlas_jinja_limits).
 * Every allocation, buffer write and long search of a render charges it;
 * the first limit passed sets the message and `over`, after which every
 * charge fails, so the render unwinds with that message. */
enum { JOVER_STEPS = 1, JOVER_OUTPUT, JOVER_MEMORY, JOVER_EVAL_DEPTH, JOVER_VALUE_DEPTH };

struct jbudget {
	int64_t steps;		       /* steps taken */
	size_t mem;		       /* bytes held: arena chunks and live buffers */
	struct atlas_jinja_limits lim; /* the limits, defaults filled in */
	int line;		       /* template line being evaluated, for messages */
	int over;		       /* 0, or the JOVER_* limit that was passed */
	int over_line;		       /* the line where it was passed */
};
/* Charge `n` steps: 0, or ATLAS_EINVAL once any limit is passed. b may be NULL. */
int jbudget_steps(struct jbudget *b, int64_t n);
/* Charge a search or copy of `bytes` bytes (one step per 64). */
int jbudget_scan(struct jbudget *b, size_t bytes);
/* Record a passed limit (JOVER_*) and set its message; returns ATLAS_EINVAL. */
int jbudget_fail(struct jbudget *b, int what);

/* --- arena: every AST node, token and render-time value lives in one,
 * freed all at once (the template's at atlas_jinja_free, a render's at its
 * end), so the evaluator never tracks ownership. A render's arena charges
 * its budget; the template's has none. */
struct jarena {
	struct jchunk *head;	/* newest chunk first */
	struct jbudget *budget; /* charged by every allocation, or NULL */
};
void *jarena_alloc(struct jarena *a, size_t n); /* zeroed; NULL when out of memory or budget */
char *jarena_strdup(struct jarena *a, const char *s, size_t n); /* NUL-terminated copy */
void jarena_free(struct jarena *a);

/* A growable byte buffer (malloc'd); appends are amortised O(1). */
struct jbuf {
	char *p;		/* bytes */
	size_t n;		/* used */
	size_t cap;		/* allocated */
	struct jbudget *budget; /* limits n to max_output and charges writes, or NULL */
};
#define JBUF(bud) ((struct jbuf){.budget = (bud)})
int jbuf_put(struct jbuf *b, const char *s,
	     size_t n); /* 0, ATLAS_ENOMEM or ATLAS_EINVAL (budget) */
/* Append `n` copies of s[0..len): one allocation, linear time. */
int jbuf_repeat(struct jbuf *b, const char *s, size_t len, size_t n);
void jbuf_release(struct jbuf *b); /* free the bytes (and give them back to the budget) */

/* --- tokens ------------------------------------------------------------ */
enum jtok_kind {
	JT_TEXT,	/* template data outside tags */
	JT_VAR_BEGIN,	/* {{ */
	JT_VAR_END,	/* }} */
	JT_BLOCK_BEGIN, /* {% */
	JT_BLOCK_END,	/* %} */
	JT_NAME,	/* identifier or keyword */
	JT_STRING,	/* string literal, unescaped */
	JT_INT,		/* integer literal */
	JT_FLOAT,	/* float literal */
	JT_OP,		/* operator or punctuation, in s */
	JT_EOF,		/* end of the template */
};

struct jtok {
	enum jtok_kind kind; /* what it is */
	int line;	     /* 1-based source line where it starts */
	const char *s;	     /* text (TEXT, NAME, STRING, OP), NUL-terminated */
	size_t len;	     /* bytes in s */
	int64_t i;	     /* value of INT */
	double f;	     /* value of FLOAT */
};

/* Split the template into tokens, applying the whitespace rules. Sets
 * *toks (in the arena) and *n; errors name the line. */
int atlas_jinja_lex(struct jarena *a, const char *src, size_t len, struct jtok **toks, size_t *n);

/* --- values ------------------------------------------------------------ */
enum jtype {
	JV_UNDEF,  /* undefined (renders empty, iterates empty, false) */
	JV_NONE,   /* None */
	JV_BOOL,   /* True / False */
	JV_INT,	   /* int */
	JV_FLOAT,  /* float */
	JV_STR,	   /* str, UTF-8 */
	JV_LIST,   /* list or tuple */
	JV_DICT,   /* dict, insertion-ordered */
	JV_NS,	   /* namespace(): a dict whose attributes may be set */
	JV_MACRO,  /* a {% macro %} */
	JV_FUNC,   /* a global function (raise_exception, namespace, ...) */
	JV_METHOD, /* a bound method: self.name */
};

struct jkv;
struct jnode;

struct jval {
	enum jtype t; /* type */
	int depth;    /* LIST / DICT: 1 + the deepest item's depth; else 0 */
	union {
		bool b;	   /* BOOL */
		int64_t i; /* INT */
		double f;  /* FLOAT */
		struct {
			const char *s; /* bytes, NUL-terminated */
			size_t len;    /* length in bytes */
		} s;		       /* STR; also UNDEF: the name, for messages */
		struct {
			struct jval **v; /* items */
			size_t n;	 /* count */
			size_t cap;	 /* allocated */
			bool tuple;	 /* a tuple: repr() writes (a, b) */
		} l;			 /* LIST */
		struct {
			struct jkv *e; /* entries in insertion order */
			size_t n;      /* count */
			size_t cap;    /* allocated */
		} d;		       /* DICT, NS */
		const struct jnode *macro; /* MACRO */
		int fn;			   /* FUNC: JF_* */
		struct {
			struct jval *self; /* the object */
			const char *name;  /* method name */
		} m;			   /* METHOD */
	};
};

struct jkv {
	const char *k;	/* key (string keys only), NUL-terminated */
	size_t klen;	/* key length */
	struct jval *v; /* value */
};

enum { JF_RAISE, JF_NAMESPACE, JF_RANGE, JF_STRFTIME, JF_DICT };

/* Shared constants (never written). */
extern struct jval jv_undef, jv_none, jv_true, jv_false;

struct jval *jv_str(struct jarena *a, const char *s, size_t len); /* copies s */
struct jval *jv_strz(struct jarena *a, const char *s);
struct jval *jv_int(struct jarena *a, int64_t i);
struct jval *jv_float(struct jarena *a, double f);
struct jval *jv_list(struct jarena *a);
struct jval *jv_dict(struct jarena *a, enum jtype t);
int jv_list_push(struct jarena *a, struct jval *l, struct jval *v);
int jv_dict_set(struct jarena *a, struct jval *d, const char *k, size_t klen, struct jval *v);
struct jval *jv_dict_get(const struct jval *d, const char *k, size_t klen); /* NULL if absent */
/* A copy of JSON value j; NULL (message set) when out of budget or
 * nested deeper than ATLAS_JINJA_MAX_VALUE_DEPTH. */
struct jval *jv_from_json(struct jarena *a, struct json_object *j);

bool jv_truthy(const struct jval *v);
/* Python ==; charges its work to b (may be NULL) and never fails itself:
 * callers in loops check the budget. */
bool jv_equal(struct jbudget *bud, const struct jval *a, const struct jval *b);
const char *jv_type_name(const struct jval *v); /* Python's name: 'str', 'NoneType' */
/* Python str(v) / repr(v) appended to b. */
int jv_write_str(struct jbuf *b, const struct jval *v);
int jv_write_repr(struct jbuf *b, const struct jval *v);
/* json.dumps(v, ensure_ascii=False, indent=indent (<0: None)). */
int jv_write_json(struct jbuf *b, const struct jval *v, int indent, int depth);
/* str(v) as a value (v itself when already a string). */
struct jval *jv_to_str(struct jarena *a, const struct jval *v);
/* Number of code points in a UTF-8 string; byte offset of code point i
 * (a code point starts at each byte that is not a continuation byte). */
size_t jv_utf8_count(const char *s, size_t len);
size_t jv_utf8_offset(const char *s, size_t len, size_t i);
/* Offset of the code point `k` after / before the one at `off` (clamped
 * to len / to the first code point): walks stay linear in the string. */
size_t jv_utf8_forward(const char *s, size_t len, size_t off, uint64_t k);
size_t jv_utf8_back(const char *s, size_t off, uint64_t k);

/* --- AST --------------------------------------------------------------- */
enum jnode_kind {
	/* statements */
	JN_TEXT,     /* literal output: s */
	JN_OUTPUT,   /* {{ a }} */
	JN_IF,	     /* if a: body else: orelse (elif nests) */
	JN_FOR,	     /* for names in a [if b]: body else: orelse */
	JN_SET,	     /* set names = a */
	JN_SETATTR,  /* set name.s = a (namespace) */
	JN_SETBLOCK, /* set name %}body{% endset */
	JN_MACRO,    /* macro name(args) body */
	JN_BREAK,    /* break */
	JN_CONTINUE, /* continue */
	/* expressions */
	JN_LIT,	    /* constant: lit */
	JN_NAME,    /* variable s */
	JN_ATTR,    /* a.s */
	JN_ITEM,    /* a[b] */
	JN_SLICE,   /* a[b:c:d] (NULL parts omitted) */
	JN_CALL,    /* a(args, kw) */
	JN_FILTER,  /* a | s(args, kw) */
	JN_TEST,    /* a is [not] s(args) ; op = negated */
	JN_NOT,	    /* not a */
	JN_NEG,	    /* -a */
	JN_POS,	    /* +a */
	JN_BINOP,   /* a op b: op is one of JOP_* */
	JN_AND,	    /* a and b */
	JN_OR,	    /* a or b */
	JN_COND,    /* b if a else c */
	JN_COMPARE, /* a op1 args[0] op2 args[1]... (ops in cmp_ops) */
	JN_LIST,    /* [args] */
	JN_TUPLE,   /* (args) */
	JN_DICT,    /* {kw names: values given as expressions in args} */
};

enum { JOP_ADD, JOP_SUB, JOP_MUL, JOP_DIV, JOP_FLOORDIV, JOP_MOD, JOP_POW, JOP_CONCAT };
enum { JCMP_EQ, JCMP_NE, JCMP_LT, JCMP_LE, JCMP_GT, JCMP_GE, JCMP_IN, JCMP_NOTIN };

struct jnode {
	enum jnode_kind kind; /* what it is */
	int line;	      /* template line, for messages */
	int op;		      /* JOP_*, negation flag of TEST, loop "recursive" unused */
	const char *s;	      /* name / attribute / filter / test / text */
	size_t len;	      /* bytes in s */
	struct jval *lit;     /* LIT value (template arena) */
	struct jnode *a, *b, *c, *d; /* operands, see the kinds */
	struct jnode **args;	     /* positional args, list items, compare operands */
	size_t nargs;		     /* count of args */
	const char **kw;	     /* keyword names (CALL/FILTER/MACRO/DICT keys as exprs: NULL) */
	struct jnode **kwv;	     /* keyword values (or MACRO defaults, NULL = none) */
	size_t nkw;		     /* count of kw */
	struct jnode **keys;	     /* DICT keys */
	int *cmp_ops;		     /* COMPARE operators */
	const char **names;	     /* FOR/SET targets */
	size_t nnames;		     /* count of names */
	struct jnode **body;	     /* statements */
	size_t nbody;		     /* count of body */
	struct jnode **orelse;	     /* else statements */
	size_t norelse;		     /* count of orelse */
};

struct atlas_jinja {
	struct jarena arena; /* nodes, tokens, literals */
	struct jnode **body; /* top-level statements */
	size_t nbody;	     /* count */
};

/* Parse tokens into t->body (jinja_parse.c). */
int atlas_jinja_parse_tokens(struct atlas_jinja *t, struct jtok *toks, size_t n);

/* --- evaluation -------------------------------------------------------- */
struct jframe;
struct jrender {
	struct jarena *a;      /* render arena */
	struct jbudget *bud;   /* the render's budget (also a->budget) */
	struct jframe *root;   /* globals and top-level variables */
	struct jbuf *out;      /* current output (block set / macro swap it) */
	int macros;	       /* macro call depth, to stop runaway recursion */
	int depth;	       /* nested evaluations (expressions, statements) */
};

/* Evaluate an expression; NULL on error with the message set. */
struct jval *atlas_jinja_eval(struct jrender *r, struct jframe *f, const struct jnode *n);
/* Call a macro / global function / method with evaluated arguments. */
struct jval *atlas_jinja_call(struct jrender *r, const struct jnode *at, struct jval *fn,
			      struct jval **args, size_t nargs, const char **kw, struct jval **kwv,
			      size_t nkw);
/* Filters and tests (jinja_builtin.c): NULL / negative on error. */
struct jval *atlas_jinja_filter(struct jrender *r, struct jframe *f, const struct jnode *n,
				struct jval *v);
int atlas_jinja_test(struct jrender *r, const struct jnode *at, const char *name,
		     struct jval *v, struct jval **args, size_t nargs); /* 1, 0 or < 0 */
bool atlas_jinja_has_filter(const char *name);
bool atlas_jinja_has_test(const char *name);
/* Attribute of a value (dict key, method, loop field); undefined if none. */
struct jval *atlas_jinja_getattr(struct jrender *r, struct jval *v, const char *name, size_t len);
struct jval *atlas_jinja_method(struct jrender *r, const struct jnode *at, struct jval *self,
				const char *name, struct jval **args, size_t nargs,
				const char **kw, struct jval **kwv, size_t nkw);
/* A runtime error at node `at`: sets the message and returns NULL. */
struct jval *atlas_jinja_fail(const struct jnode *at, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif
