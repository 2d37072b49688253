/* jinja_parse.c - tokens to an AST, with Jinja2's grammar and operator
 * precedence (lowest first): inline if, or, and, not, comparisons,
 * + -, ~, * / // %, **, unary - +, then postfix (.attr, [item], call)
 * followed by filters and tests. Everything the evaluator cannot run is
 * refused here, so a template that loads only fails at render time on
 * bad data. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "jinja_internal.h"

struct parser {
	struct jarena *a;   /* node storage */
	struct jtok *t;	    /* tokens */
	size_t n;	    /* token count (last is EOF) */
	size_t i;	    /* current token */
	int depth;	    /* open blocks and brackets: the parser's recursion */
};

/* A growable node list, copied into the arena when done. */
struct nvec {
	struct jnode **v; /* nodes (malloc'd) */
	size_t n, cap;	  /* used, allocated */
};

static int nvec_push(struct nvec *nv, struct jnode *x)
{
	if (nv->n == nv->cap) {
		size_t cap = nv->cap ? 2 * nv->cap : 8;
		struct jnode **v = realloc(nv->v, cap * sizeof(*v));
		if (!v)
			return atlas_error(ATLAS_ENOMEM, "out of memory parsing the chat template");
		nv->v = v;
		nv->cap = cap;
	}
	nv->v[nv->n++] = x;
	return 0;
}

static struct jnode **nvec_done(struct parser *P, struct nvec *nv, size_t *n)
{
	struct jnode **v = jarena_alloc(P->a, (nv->n + 1) * sizeof(*v));
	if (v && nv->n)
		memcpy(v, nv->v, nv->n * sizeof(*v));
	*n = nv->n;
	free(nv->v);
	nv->v = NULL;
	nv->n = nv->cap = 0;
	return v;
}

static struct jtok *cur(struct parser *P)
{
	return &P->t[P->i];
}

static bool is_op(struct parser *P, const char *op)
{
	return cur(P)->kind == JT_OP && !strcmp(cur(P)->s, op);
}

static bool is_name(struct parser *P, const char *name)
{
	return cur(P)->kind == JT_NAME && !strcmp(cur(P)->s, name);
}

static const char *tok_desc(const struct jtok *t)
{
	switch (t->kind) {
	case JT_TEXT: return "template text";
	case JT_VAR_BEGIN: return "'{{'";
	case JT_VAR_END: return "'}}'";
	case JT_BLOCK_BEGIN: return "'{%'";
	case JT_BLOCK_END: return "'%}'";
	case JT_STRING: return "a string";
	case JT_INT:
	case JT_FLOAT: return "a number";
	case JT_EOF: return "the end of the template";
	default: return t->s;
	}
}

static int syntax(struct parser *P, const char *what)
{
	return atlas_error(ATLAS_EFORMAT, "chat template line %d: syntax error: expected %s, got %s%s%s",
			   cur(P)->line, what, cur(P)->kind == JT_NAME || cur(P)->kind == JT_OP ? "'" : "",
			   tok_desc(cur(P)), cur(P)->kind == JT_NAME || cur(P)->kind == JT_OP ? "'" : "");
}

static int expect_op(struct parser *P, const char *op)
{
	if (!is_op(P, op)) {
		char what[16];
		snprintf(what, sizeof(what), "'%s'", op);
		return syntax(P, what);
	}
	P->i++;
	return 0;
}

/* One level deeper (a block, a bracket, a unary operator): refused past
 * the limit, so no template can overflow the parser's stack. */
static int enter(struct parser *P)
{
	if (++P->depth > ATLAS_JINJA_MAX_PARSE_DEPTH)
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "chat template line %d: template nested too deeply (blocks, "
				   "brackets and chained operators: more than %d levels)",
				   cur(P)->line, ATLAS_JINJA_MAX_PARSE_DEPTH);
	return 0;
}

/* A chained operator (a + b + c, x.a.b, x | f | g) nests the tree one
 * level deeper without recursing here, but the evaluator will recurse:
 * count it as a level until the chain ends (*n levels, given back by
 * leave_chain). */
static int chain(struct parser *P, int *n)
{
	(*n)++;
	return enter(P);
}

static struct jnode *leave_chain(struct parser *P, int n, struct jnode *x)
{
	P->depth -= n;
	return x;
}

static struct jnode *node(struct parser *P, enum jnode_kind k, int line)
{
	struct jnode *x = jarena_alloc(P->a, sizeof(*x));
	if (!x) {
		atlas_error(ATLAS_ENOMEM, "out of memory parsing the chat template");
		return NULL;
	}
	x->kind = k;
	x->line = line;
	return x;
}

static struct jnode *binary(struct parser *P, enum jnode_kind k, int op, struct jnode *l,
			    struct jnode *r)
{
	if (!l || !r)
		return NULL;
	struct jnode *x = node(P, k, l->line);
	if (x) {
		x->op = op;
		x->a = l;
		x->b = r;
	}
	return x;
}

static struct jnode *parse_expr(struct parser *P);
static struct jnode *parse_or(struct parser *P);
static struct jnode *parse_unary(struct parser *P, bool with_filter);

/* Call arguments after '(' : positional, then name=value. */
static int parse_args(struct parser *P, struct jnode *x)
{
	struct nvec pos = {0}, kwv = {0};
	const char *kw[64];
	size_t nkw = 0;
	int rc = expect_op(P, "(");
	while (!rc && !is_op(P, ")")) {
		if (pos.n + kwv.n > 0 && (rc = expect_op(P, ",")))
			break;
		if (is_op(P, ")"))
			break;
		if (cur(P)->kind == JT_NAME && P->t[P->i + 1].kind == JT_OP &&
		    !strcmp(P->t[P->i + 1].s, "=")) {
			if (nkw == 64) {
				rc = atlas_error(ATLAS_EUNSUPPORTED,
						 "chat template line %d: too many arguments", cur(P)->line);
				break;
			}
			kw[nkw++] = cur(P)->s;
			P->i += 2;
			struct jnode *v = parse_expr(P);
			rc = v ? nvec_push(&kwv, v) : -1;
		} else {
			if (kwv.n) {
				rc = atlas_error(ATLAS_EFORMAT,
						 "chat template line %d: positional argument after keyword argument",
						 cur(P)->line);
				break;
			}
			struct jnode *v = parse_expr(P);
			rc = v ? nvec_push(&pos, v) : -1;
		}
	}
	if (!rc)
		rc = expect_op(P, ")");
	x->args = nvec_done(P, &pos, &x->nargs);
	x->kwv = nvec_done(P, &kwv, &x->nkw);
	x->kw = jarena_alloc(P->a, (nkw + 1) * sizeof(char *));
	if (x->kw && nkw)
		memcpy(x->kw, kw, nkw * sizeof(char *));
	if (!rc && (!x->args || !x->kwv || !x->kw))
		rc = atlas_error(ATLAS_ENOMEM, "out of memory parsing the chat template");
	return rc < 0 ? rc : 0;
}

static struct jnode *parse_list(struct parser *P, enum jnode_kind k, const char *close,
				struct jnode *first, int line)
{
	struct jnode *x = node(P, k, line);
	struct nvec items = {0};
	if (!x || (first && nvec_push(&items, first)))
		return NULL;
	while (!is_op(P, close)) {
		if (items.n && expect_op(P, ","))
			goto fail;
		if (is_op(P, close))
			break;
		struct jnode *v = parse_expr(P);
		if (!v || nvec_push(&items, v))
			goto fail;
	}
	P->i++;
	x->args = nvec_done(P, &items, &x->nargs);
	return x->args ? x : NULL;
fail:
	free(items.v);
	return NULL;
}

static struct jnode *parse_dict(struct parser *P, int line)
{
	struct jnode *x = node(P, JN_DICT, line);
	struct nvec keys = {0}, vals = {0};
	if (!x)
		return NULL;
	while (!is_op(P, "}")) {
		if (keys.n && expect_op(P, ","))
			goto fail;
		if (is_op(P, "}"))
			break;
		struct jnode *k = parse_expr(P);
		if (!k || expect_op(P, ":"))
			goto fail;
		struct jnode *v = parse_expr(P);
		if (!v || nvec_push(&keys, k) || nvec_push(&vals, v))
			goto fail;
	}
	P->i++;
	x->keys = nvec_done(P, &keys, &x->nkw);
	x->kwv = nvec_done(P, &vals, &x->nkw);
	return x->keys && x->kwv ? x : NULL;
fail:
	free(keys.v);
	free(vals.v);
	return NULL;
}

static struct jnode *literal(struct parser *P, struct jval *v, int line)
{
	struct jnode *x = node(P, JN_LIT, line);
	if (x)
		x->lit = v;
	if (x && !v) {
		atlas_error(ATLAS_ENOMEM, "out of memory parsing the chat template");
		return NULL;
	}
	return x;
}

static struct jnode *parse_primary(struct parser *P)
{
	struct jtok *t = cur(P);
	int line = t->line;
	switch (t->kind) {
	case JT_NAME:
		P->i++;
		if (!strcmp(t->s, "true") || !strcmp(t->s, "True"))
			return literal(P, &jv_true, line);
		if (!strcmp(t->s, "false") || !strcmp(t->s, "False"))
			return literal(P, &jv_false, line);
		if (!strcmp(t->s, "none") || !strcmp(t->s, "None"))
			return literal(P, &jv_none, line);
		struct jnode *x = node(P, JN_NAME, line);
		if (x) {
			x->s = t->s;
			x->len = t->len;
		}
		return x;
	case JT_STRING: {
		/* adjacent literals concatenate, as in Python */
		struct jbuf b = {0};
		while (cur(P)->kind == JT_STRING) {
			if (jbuf_put(&b, cur(P)->s, cur(P)->len)) {
				free(b.p);
				return NULL;
			}
			P->i++;
		}
		struct jnode *s = literal(P, jv_str(P->a, b.p ? b.p : "", b.n), line);
		free(b.p);
		return s;
	}
	case JT_INT:
		P->i++;
		return literal(P, jv_int(P->a, t->i), line);
	case JT_FLOAT:
		P->i++;
		return literal(P, jv_float(P->a, t->f), line);
	case JT_OP:
		if (is_op(P, "(")) {
			P->i++;
			if (is_op(P, ")"))
				return parse_list(P, JN_TUPLE, ")", NULL, line);
			struct jnode *e = parse_expr(P);
			if (!e)
				return NULL;
			if (is_op(P, ","))
				return parse_list(P, JN_TUPLE, ")", e, line);
			return expect_op(P, ")") ? NULL : e;
		}
		if (is_op(P, "[")) {
			P->i++;
			return parse_list(P, JN_LIST, "]", NULL, line);
		}
		if (is_op(P, "{")) {
			P->i++;
			return parse_dict(P, line);
		}
		break;
	default:
		break;
	}
	syntax(P, "an expression");
	return NULL;
}

static struct jnode *parse_subscript(struct parser *P, struct jnode *obj)
{
	int line = cur(P)->line;
	struct jnode *part[3] = {NULL, NULL, NULL};
	int k = 0;
	P->i++; /* [ */
	for (;;) {
		if (!is_op(P, ":") && !is_op(P, "]") && !(part[k] = parse_expr(P)))
			return NULL;
		if (is_op(P, ":") && k < 2) {
			P->i++;
			k++;
			continue;
		}
		break;
	}
	if (expect_op(P, "]"))
		return NULL;
	struct jnode *x = node(P, k ? JN_SLICE : JN_ITEM, line);
	if (!x)
		return NULL;
	if (!k && !part[0]) {
		atlas_error(ATLAS_EFORMAT, "chat template line %d: syntax error: empty subscript", line);
		return NULL;
	}
	x->a = obj;
	x->b = part[0];
	x->c = part[1];
	x->d = part[2];
	return x;
}

static struct jnode *parse_postfix(struct parser *P, struct jnode *x)
{
	int levels = 0;
	while (x) {
		int line = cur(P)->line;
		if ((is_op(P, ".") || is_op(P, "[") || is_op(P, "(")) && chain(P, &levels))
			return NULL;
		if (is_op(P, ".")) {
			P->i++;
			struct jtok *t = cur(P);
			if (t->kind == JT_INT) {
				struct jnode *it = node(P, JN_ITEM, line);
				if (!it)
					return NULL;
				it->a = x;
				it->b = literal(P, jv_int(P->a, t->i), line);
				x = it->b ? it : NULL;
			} else if (t->kind == JT_NAME) {
				struct jnode *at = node(P, JN_ATTR, line);
				if (!at)
					return NULL;
				at->a = x;
				at->s = t->s;
				at->len = t->len;
				x = at;
			} else {
				syntax(P, "an attribute name");
				return NULL;
			}
			P->i++;
		} else if (is_op(P, "[")) {
			x = parse_subscript(P, x);
		} else if (is_op(P, "(")) {
			struct jnode *c = node(P, JN_CALL, line);
			if (!c || parse_args(P, c))
				return NULL;
			c->a = x;
			x = c;
		} else {
			break;
		}
	}
	return leave_chain(P, levels, x);
}

static struct jnode *parse_filters(struct parser *P, struct jnode *x)
{
	int levels = 0;
	while (x) {
		int line = cur(P)->line;
		if ((is_op(P, "|") || is_name(P, "is")) && chain(P, &levels))
			return NULL;
		if (is_op(P, "|")) {
			P->i++;
			if (cur(P)->kind != JT_NAME) {
				syntax(P, "a filter name");
				return NULL;
			}
			if (!atlas_jinja_has_filter(cur(P)->s)) {
				atlas_error(ATLAS_EUNSUPPORTED, "chat template line %d: unknown filter '%s'",
					    line, cur(P)->s);
				return NULL;
			}
			struct jnode *f = node(P, JN_FILTER, line);
			if (!f)
				return NULL;
			f->s = cur(P)->s;
			f->a = x;
			P->i++;
			if (is_op(P, "(") && parse_args(P, f))
				return NULL;
			if (!f->args) {
				f->args = jarena_alloc(P->a, sizeof(*f->args));
				f->kw = jarena_alloc(P->a, sizeof(*f->kw));
				f->kwv = jarena_alloc(P->a, sizeof(*f->kwv));
			}
			x = f;
		} else if (is_name(P, "is")) {
			P->i++;
			struct jnode *t = node(P, JN_TEST, line);
			if (!t)
				return NULL;
			if (is_name(P, "not")) {
				t->op = 1;
				P->i++;
			}
			struct jtok *nt = cur(P);
			if (nt->kind != JT_NAME && !(nt->kind == JT_OP && (!strcmp(nt->s, "==") ||
				!strcmp(nt->s, "!=") || !strcmp(nt->s, "<") || !strcmp(nt->s, ">")))) {
				syntax(P, "a test name");
				return NULL;
			}
			t->s = nt->s;
			if (!strcmp(t->s, "none") || !strcmp(t->s, "None"))
				t->s = "none";
			else if (!strcmp(t->s, "true") || !strcmp(t->s, "True"))
				t->s = "true";
			else if (!strcmp(t->s, "false") || !strcmp(t->s, "False"))
				t->s = "false";
			if (!atlas_jinja_has_test(t->s)) {
				atlas_error(ATLAS_EUNSUPPORTED, "chat template line %d: unknown test '%s'",
					    line, nt->s);
				return NULL;
			}
			t->a = x;
			P->i++;
			struct jtok *n1 = cur(P);
			if (is_op(P, "(")) {
				if (parse_args(P, t))
					return NULL;
			} else if ((n1->kind == JT_NAME && strcmp(n1->s, "else") &&
				    strcmp(n1->s, "or") && strcmp(n1->s, "and") &&
				    strcmp(n1->s, "if") && strcmp(n1->s, "in") && strcmp(n1->s, "is") &&
				    strcmp(n1->s, "not") && strcmp(n1->s, "recursive")) ||
				   n1->kind == JT_STRING || n1->kind == JT_INT || n1->kind == JT_FLOAT ||
				   is_op(P, "[") || is_op(P, "{")) {
				struct jnode *arg = parse_postfix(P, parse_primary(P));
				if (!arg)
					return NULL;
				t->args = jarena_alloc(P->a, 2 * sizeof(*t->args));
				if (!t->args)
					return NULL;
				t->args[0] = arg;
				t->nargs = 1;
			}
			x = t;
		} else if (is_op(P, "(")) {
			x = parse_postfix(P, x);
		} else {
			break;
		}
	}
	return leave_chain(P, levels, x);
}

static struct jnode *parse_unary(struct parser *P, bool with_filter)
{
	int line = cur(P)->line;
	struct jnode *x;
	if (is_op(P, "-") || is_op(P, "+")) {
		bool neg = is_op(P, "-");
		P->i++;
		if (enter(P))
			return NULL;
		struct jnode *inner = parse_unary(P, false);
		P->depth--;
		if (!inner)
			return NULL;
		x = node(P, neg ? JN_NEG : JN_POS, line);
		if (x)
			x->a = inner;
	} else {
		x = parse_primary(P);
	}
	x = parse_postfix(P, x);
	return with_filter ? parse_filters(P, x) : x;
}

static struct jnode *parse_pow(struct parser *P)
{
	struct jnode *x = parse_unary(P, true);
	int levels = 0;
	while (x && is_op(P, "**")) {
		P->i++;
		if (chain(P, &levels))
			return NULL;
		x = binary(P, JN_BINOP, JOP_POW, x, parse_unary(P, true));
	}
	return leave_chain(P, levels, x);
}

static struct jnode *parse_math2(struct parser *P)
{
	struct jnode *x = parse_pow(P);
	int levels = 0;
	for (;;) {
		int op = is_op(P, "*") ? JOP_MUL : is_op(P, "/") ? JOP_DIV
			 : is_op(P, "//") ? JOP_FLOORDIV : is_op(P, "%") ? JOP_MOD : -1;
		if (!x || op < 0)
			return leave_chain(P, levels, x);
		P->i++;
		if (chain(P, &levels))
			return NULL;
		x = binary(P, JN_BINOP, op, x, parse_pow(P));
	}
}

static struct jnode *parse_concat(struct parser *P)
{
	struct jnode *x = parse_math2(P);
	int levels = 0;
	while (x && is_op(P, "~")) {
		P->i++;
		if (chain(P, &levels))
			return NULL;
		x = binary(P, JN_BINOP, JOP_CONCAT, x, parse_math2(P));
	}
	return leave_chain(P, levels, x);
}

static struct jnode *parse_math1(struct parser *P)
{
	struct jnode *x = parse_concat(P);
	int levels = 0;
	for (;;) {
		int op = is_op(P, "+") ? JOP_ADD : is_op(P, "-") ? JOP_SUB : -1;
		if (!x || op < 0)
			return leave_chain(P, levels, x);
		P->i++;
		if (chain(P, &levels))
			return NULL;
		x = binary(P, JN_BINOP, op, x, parse_concat(P));
	}
}

static struct jnode *parse_compare(struct parser *P)
{
	struct jnode *x = parse_math1(P);
	struct nvec rest = {0};
	int ops[32], nops = 0;
	while (x) {
		int op = is_op(P, "==") ? JCMP_EQ : is_op(P, "!=") ? JCMP_NE
			 : is_op(P, "<") ? JCMP_LT : is_op(P, "<=") ? JCMP_LE
			 : is_op(P, ">") ? JCMP_GT : is_op(P, ">=") ? JCMP_GE
			 : is_name(P, "in") ? JCMP_IN : -1;
		if (op < 0 && is_name(P, "not") && P->t[P->i + 1].kind == JT_NAME &&
		    !strcmp(P->t[P->i + 1].s, "in")) {
			op = JCMP_NOTIN;
			P->i++;
		}
		if (op < 0 || nops == 32)
			break;
		P->i++;
		struct jnode *r = parse_math1(P);
		if (!r || nvec_push(&rest, r)) {
			free(rest.v);
			return NULL;
		}
		ops[nops++] = op;
	}
	if (!x || !nops)
		return x;
	struct jnode *c = node(P, JN_COMPARE, x->line);
	if (!c)
		return NULL;
	c->a = x;
	c->args = nvec_done(P, &rest, &c->nargs);
	c->cmp_ops = jarena_alloc(P->a, (size_t)nops * sizeof(int));
	if (!c->args || !c->cmp_ops)
		return NULL;
	memcpy(c->cmp_ops, ops, (size_t)nops * sizeof(int));
	return c;
}

static struct jnode *parse_not(struct parser *P)
{
	if (is_name(P, "not")) {
		int line = cur(P)->line;
		P->i++;
		if (enter(P))
			return NULL;
		struct jnode *inner = parse_not(P);
		P->depth--;
		struct jnode *x = inner ? node(P, JN_NOT, line) : NULL;
		if (x)
			x->a = inner;
		return x;
	}
	return parse_compare(P);
}

static struct jnode *parse_and(struct parser *P)
{
	struct jnode *x = parse_not(P);
	int levels = 0;
	while (x && is_name(P, "and")) {
		P->i++;
		if (chain(P, &levels))
			return NULL;
		x = binary(P, JN_AND, 0, x, parse_not(P));
	}
	return leave_chain(P, levels, x);
}

static struct jnode *parse_or(struct parser *P)
{
	struct jnode *x = parse_and(P);
	int levels = 0;
	while (x && is_name(P, "or")) {
		P->i++;
		if (chain(P, &levels))
			return NULL;
		x = binary(P, JN_OR, 0, x, parse_and(P));
	}
	return leave_chain(P, levels, x);
}

static struct jnode *parse_cond(struct parser *P);

/* Every bracket, argument and `else` branch comes through here. */
static struct jnode *parse_expr(struct parser *P)
{
	if (enter(P))
		return NULL;
	struct jnode *x = parse_cond(P);
	P->depth--;
	return x;
}

/* x if cond [else y] */
static struct jnode *parse_cond(struct parser *P)
{
	struct jnode *x = parse_or(P);
	int levels = 0;
	while (x && is_name(P, "if")) {
		P->i++;
		if (chain(P, &levels))
			return NULL;
		struct jnode *c = node(P, JN_COND, x->line);
		if (!c || !(c->a = parse_or(P)))
			return NULL;
		c->b = x;
		if (is_name(P, "else")) {
			P->i++;
			if (!(c->c = parse_expr(P)))
				return NULL;
		}
		x = c;
	}
	return leave_chain(P, levels, x);
}

/* --- statements ---------------------------------------------------------- */

static int parse_body(struct parser *P, const char *const *stops, struct nvec *out,
		      const char **stopped);

static int block_end(struct parser *P)
{
	if (cur(P)->kind != JT_BLOCK_END)
		return syntax(P, "'%}'");
	P->i++;
	return 0;
}

/* Names separated by commas (for / set targets). */
static int parse_targets(struct parser *P, struct jnode *x)
{
	const char *names[16];
	size_t n = 0;
	do {
		if (n && is_op(P, ","))
			P->i++;
		if (cur(P)->kind != JT_NAME || n == 16)
			return syntax(P, "a variable name");
		names[n++] = cur(P)->s;
		P->i++;
	} while (is_op(P, ","));
	x->names = jarena_alloc(P->a, n * sizeof(char *));
	if (!x->names)
		return atlas_error(ATLAS_ENOMEM, "out of memory parsing the chat template");
	memcpy(x->names, names, n * sizeof(char *));
	x->nnames = n;
	return 0;
}

static int parse_stmt_body(struct parser *P, struct jnode *x, const char *const *stops,
			   const char **stopped)
{
	struct nvec body = {0};
	int rc = parse_body(P, stops, &body, stopped);
	x->body = nvec_done(P, &body, &x->nbody);
	return rc;
}

static struct jnode *parse_if(struct parser *P, int line)
{
	static const char *const stops[] = {"elif", "else", "endif", NULL};
	struct jnode *x = node(P, JN_IF, line);
	const char *stopped;
	if (!x || !(x->a = parse_expr(P)) || block_end(P) || parse_stmt_body(P, x, stops, &stopped))
		return NULL;
	if (!strcmp(stopped, "elif")) {
		if (enter(P)) /* each elif nests one if deeper */
			return NULL;
		struct jnode *e = parse_if(P, cur(P)->line);
		P->depth--;
		if (!e)
			return NULL;
		x->orelse = jarena_alloc(P->a, sizeof(*x->orelse));
		if (!x->orelse)
			return NULL;
		x->orelse[0] = e;
		x->norelse = 1;
		return x; /* the nested if consumed endif */
	}
	if (!strcmp(stopped, "else")) {
		static const char *const end[] = {"endif", NULL};
		struct nvec els = {0};
		if (block_end(P) || parse_body(P, end, &els, &stopped)) {
			free(els.v);
			return NULL;
		}
		x->orelse = nvec_done(P, &els, &x->norelse);
	}
	return block_end(P) ? NULL : x;
}

static struct jnode *parse_for(struct parser *P, int line)
{
	static const char *const stops[] = {"else", "endfor", NULL};
	struct jnode *x = node(P, JN_FOR, line);
	const char *stopped;
	if (!x || parse_targets(P, x))
		return NULL;
	if (!is_name(P, "in")) {
		syntax(P, "'in'");
		return NULL;
	}
	P->i++;
	if (!(x->a = parse_or(P)))
		return NULL;
	if (is_name(P, "if")) {
		P->i++;
		if (!(x->b = parse_or(P)))
			return NULL;
	}
	if (is_name(P, "recursive")) {
		atlas_error(ATLAS_EUNSUPPORTED, "chat template line %d: recursive loops are not supported",
			    cur(P)->line);
		return NULL;
	}
	if (block_end(P) || parse_stmt_body(P, x, stops, &stopped))
		return NULL;
	if (!strcmp(stopped, "else")) {
		static const char *const end[] = {"endfor", NULL};
		struct nvec els = {0};
		if (block_end(P) || parse_body(P, end, &els, &stopped)) {
			free(els.v);
			return NULL;
		}
		x->orelse = nvec_done(P, &els, &x->norelse);
	}
	return block_end(P) ? NULL : x;
}

static struct jnode *parse_set(struct parser *P, int line)
{
	struct jnode *x = node(P, JN_SET, line);
	if (!x)
		return NULL;
	if (cur(P)->kind == JT_NAME && P->t[P->i + 1].kind == JT_OP && !strcmp(P->t[P->i + 1].s, ".")) {
		x->kind = JN_SETATTR;
		x->names = jarena_alloc(P->a, sizeof(char *));
		if (!x->names)
			return NULL;
		x->names[0] = cur(P)->s;
		x->nnames = 1;
		P->i += 2;
		if (cur(P)->kind != JT_NAME) {
			syntax(P, "an attribute name");
			return NULL;
		}
		x->s = cur(P)->s;
		x->len = cur(P)->len;
		P->i++;
	} else if (parse_targets(P, x)) {
		return NULL;
	}
	if (is_op(P, "=")) {
		P->i++;
		if (!(x->a = parse_expr(P)))
			return NULL;
		if (is_op(P, ",")) { /* set a, b = x, y */
			struct nvec items = {0};
			struct jnode *tup = node(P, JN_TUPLE, line);
			if (!tup || nvec_push(&items, x->a))
				return NULL;
			while (is_op(P, ",")) {
				P->i++;
				struct jnode *v = parse_expr(P);
				if (!v || nvec_push(&items, v)) {
					free(items.v);
					return NULL;
				}
			}
			tup->args = nvec_done(P, &items, &tup->nargs);
			x->a = tup;
		}
		return block_end(P) ? NULL : x;
	}
	if (x->kind != JN_SET || x->nnames != 1) {
		syntax(P, "'='");
		return NULL;
	}
	static const char *const stops[] = {"endset", NULL};
	const char *stopped;
	x->kind = JN_SETBLOCK;
	if (block_end(P) || parse_stmt_body(P, x, stops, &stopped) || block_end(P))
		return NULL;
	return x;
}

static struct jnode *parse_macro(struct parser *P, int line)
{
	static const char *const stops[] = {"endmacro", NULL};
	struct jnode *x = node(P, JN_MACRO, line);
	const char *stopped;
	if (!x)
		return NULL;
	if (cur(P)->kind != JT_NAME) {
		syntax(P, "a macro name");
		return NULL;
	}
	x->s = cur(P)->s;
	P->i++;
	/* parameters: names with optional defaults, parsed as call args */
	struct jnode params = {0};
	if (parse_args(P, &params))
		return NULL;
	size_t n = params.nargs + params.nkw;
	x->names = jarena_alloc(P->a, (n + 1) * sizeof(char *));
	x->kwv = jarena_alloc(P->a, (n + 1) * sizeof(struct jnode *));
	if (!x->names || !x->kwv)
		return NULL;
	for (size_t i = 0; i < params.nargs; i++) {
		if (params.args[i]->kind != JN_NAME) {
			atlas_error(ATLAS_EFORMAT, "chat template line %d: bad macro parameter", line);
			return NULL;
		}
		x->names[i] = params.args[i]->s;
	}
	for (size_t i = 0; i < params.nkw; i++) {
		x->names[params.nargs + i] = params.kw[i];
		x->kwv[params.nargs + i] = params.kwv[i];
	}
	x->nnames = n;
	if (block_end(P) || parse_stmt_body(P, x, stops, &stopped) || block_end(P))
		return NULL;
	return x;
}

static struct jnode *parse_stmt(struct parser *P)
{
	struct jtok *t = cur(P);
	int line = t->line;
	if (t->kind != JT_NAME) {
		syntax(P, "a statement name");
		return NULL;
	}
	P->i++;
	if (!strcmp(t->s, "if"))
		return parse_if(P, line);
	if (!strcmp(t->s, "for"))
		return parse_for(P, line);
	if (!strcmp(t->s, "set"))
		return parse_set(P, line);
	if (!strcmp(t->s, "macro"))
		return parse_macro(P, line);
	if (!strcmp(t->s, "break") || !strcmp(t->s, "continue")) {
		struct jnode *x = node(P, t->s[0] == 'b' ? JN_BREAK : JN_CONTINUE, line);
		return x && !block_end(P) ? x : NULL;
	}
	if (!strcmp(t->s, "generation")) {
		/* transformers' {% generation %} marks assistant text; it renders as is */
		static const char *const stops[] = {"endgeneration", NULL};
		const char *stopped;
		struct jnode *x = node(P, JN_IF, line);
		if (!x || !(x->a = literal(P, &jv_true, line)) || block_end(P) ||
		    parse_stmt_body(P, x, stops, &stopped) || block_end(P))
			return NULL;
		return x;
	}
	static const char *const known[] = {"include", "import", "from", "extends", "block",
		"call", "filter", "raw", "with", "autoescape", "do", "trans", NULL};
	for (int i = 0; known[i]; i++)
		if (!strcmp(t->s, known[i])) {
			atlas_error(ATLAS_EUNSUPPORTED,
				    "chat template line %d: the '%s' statement is not supported", line,
				    t->s);
			return NULL;
		}
	atlas_error(ATLAS_EFORMAT, "chat template line %d: unknown statement '%s'", line, t->s);
	return NULL;
}

/* Statements until a block tag named in `stops` (left at its name, with
 * *stopped set) or, with stops NULL, the end of the template. */
static int parse_body_in(struct parser *P, const char *const *stops, struct nvec *out,
			 const char **stopped);

static int parse_body(struct parser *P, const char *const *stops, struct nvec *out,
		      const char **stopped)
{
	int rc = enter(P);
	if (!rc)
		rc = parse_body_in(P, stops, out, stopped);
	P->depth--;
	return rc;
}

static int parse_body_in(struct parser *P, const char *const *stops, struct nvec *out,
			 const char **stopped)
{
	int open_line = cur(P)->line;
	for (;;) {
		struct jtok *t = cur(P);
		struct jnode *x = NULL;
		if (t->kind == JT_EOF) {
			if (!stops)
				return 0;
			const char *end = stops[0];
			for (int i = 0; stops[i]; i++)
				if (!strncmp(stops[i], "end", 3))
					end = stops[i];
			return atlas_error(ATLAS_EFORMAT,
					   "chat template line %d: syntax error: missing '%s' for the block opened near line %d",
					   t->line, end, open_line);
		}
		if (t->kind == JT_TEXT) {
			if ((x = node(P, JN_TEXT, t->line))) {
				x->s = t->s;
				x->len = t->len;
			}
			P->i++;
		} else if (t->kind == JT_VAR_BEGIN) {
			P->i++;
			if ((x = node(P, JN_OUTPUT, t->line)) && (x->a = parse_expr(P))) {
				if (cur(P)->kind != JT_VAR_END) {
					syntax(P, "'}}'");
					return ATLAS_EFORMAT;
				}
				P->i++;
			} else {
				return -1;
			}
		} else if (t->kind == JT_BLOCK_BEGIN) {
			struct jtok *name = &P->t[P->i + 1];
			for (int i = 0; stops && i < 8 && stops[i]; i++)
				if (name->kind == JT_NAME && !strcmp(name->s, stops[i])) {
					P->i += 2;
					*stopped = stops[i];
					return 0;
				}
			if (name->kind == JT_NAME && (!strncmp(name->s, "end", 3) ||
						      !strcmp(name->s, "elif") || !strcmp(name->s, "else")))
				return atlas_error(ATLAS_EFORMAT,
						   "chat template line %d: syntax error: unexpected '%s'",
						   name->line, name->s);
			P->i++;
			if (!(x = parse_stmt(P)))
				return -1;
		} else {
			return syntax(P, "template text or a tag");
		}
		if (!x || nvec_push(out, x))
			return ATLAS_ENOMEM;
	}
}

int atlas_jinja_parse_tokens(struct atlas_jinja *t, struct jtok *toks, size_t n)
{
	struct parser P = {.a = &t->arena, .t = toks, .n = n};
	struct nvec body = {0};
	int rc = parse_body(&P, NULL, &body, NULL);
	if (rc) {
		free(body.v);
		/* NULL-returning parse functions lose the code: recover it */
		const char *m = atlas_errmsg();
		if (strstr(m, "out of memory"))
			return ATLAS_ENOMEM;
		if (strstr(m, "not supported") || strstr(m, "unknown filter") ||
		    strstr(m, "unknown test") || strstr(m, "too many") ||
		    strstr(m, "nested too deeply"))
			return ATLAS_EUNSUPPORTED;
		return ATLAS_EFORMAT;
	}
	t->body = nvec_done(&P, &body, &t->nbody);
	return t->body ? 0 : atlas_error(ATLAS_ENOMEM, "out of memory parsing the chat template");
}
