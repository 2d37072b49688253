/* jinja_eval.c - run a parsed template: scopes, statements, operators,
 * calls of macros and global functions, and the public entry points
 * (parse, render, free). Python's rules decide every operator's result
 * and error, since Jinja2 delegates to Python. */
#include <json.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/error.h"
#include "jinja_internal.h"

/* A scope: the root holds globals and top-level sets; each loop
 * iteration and macro call opens one. */
struct jframe {
	struct jval *vars;     /* JV_DICT of names */
	struct jframe *parent; /* enclosing scope, NULL for the root */
};

enum { EXEC_BREAK = 1, EXEC_CONTINUE = 2 };

struct jval *atlas_jinja_fail(const struct jnode *at, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	atlas_error(ATLAS_EINVAL, "chat template line %d: %s", at ? at->line : 0, msg);
	return NULL;
}

/* An undefined value that remembers why, for the error when it is used. */
static struct jval *undef(struct jrender *r, const char *fmt, const char *name, size_t len)
{
	char msg[256];
	snprintf(msg, sizeof(msg), fmt, (int)len, name);
	struct jval *v = jv_strz(r->a, msg);
	if (v)
		v->t = JV_UNDEF;
	return v;
}

static struct jval *undef_error(const struct jnode *at, const struct jval *v)
{
	return atlas_jinja_fail(at, "%s", v->s.len ? v->s.s : "value is undefined");
}

static struct jframe *frame_new(struct jrender *r, struct jframe *parent)
{
	struct jframe *f = jarena_alloc(r->a, sizeof(*f));
	/* a namespace-like dict: a scope is not a value, so no nesting depth */
	if (!f || !(f->vars = jv_dict(r->a, JV_NS))) {
		atlas_error(ATLAS_ENOMEM, "out of memory rendering the chat template");
		return NULL;
	}
	f->parent = parent;
	return f;
}

static struct jval *lookup(struct jrender *r, struct jframe *f, const char *name, size_t len)
{
	for (; f; f = f->parent) {
		if (jbudget_steps(r->bud, 1 + (int64_t)(f->vars->d.n / 16)))
			return NULL;
		struct jval *v = jv_dict_get(f->vars, name, len);
		if (v)
			return v;
	}
	return undef(r, "'%.*s' is undefined", name, len);
}

static int set_var(struct jrender *r, struct jframe *f, const char *name, struct jval *v)
{
	return jv_dict_set(r->a, f->vars, name, strlen(name), v);
}

/* --- items and slices ----------------------------------------------------- */

/* The code point at byte offset `off`, as a string. */
static struct jval *char_at(struct jrender *r, const struct jval *s, size_t off)
{
	size_t end = jv_utf8_forward(s->s.s, s->s.len, off, 1);
	return jv_str(r->a, s->s.s + off, end - off);
}

/* Code points in a string, the count charged to the budget. */
static int64_t str_count(struct jrender *r, const struct jval *s)
{
	jbudget_scan(r->bud, s->s.len);
	return (int64_t)jv_utf8_count(s->s.s, s->s.len);
}

static struct jval *dict_get(struct jrender *r, const struct jval *d, const char *k, size_t klen)
{
	if (jbudget_steps(r->bud, 1 + (int64_t)(d->d.n / 16)))
		return NULL;
	return jv_dict_get(d, k, klen);
}

static struct jval *getitem(struct jrender *r, const struct jnode *at, struct jval *obj,
			    struct jval *key)
{
	if (obj->t == JV_UNDEF)
		return undef_error(at, obj);
	if ((obj->t == JV_LIST || obj->t == JV_STR) && (key->t == JV_INT || key->t == JV_BOOL)) {
		int64_t n = obj->t == JV_LIST ? (int64_t)obj->l.n : str_count(r, obj);
		int64_t i = key->t == JV_INT ? key->i : key->b;
		if (i < 0)
			i += n;
		if (i < 0 || i >= n)
			return undef(r, "%.*s", "list index out of range", 24);
		if (obj->t == JV_LIST)
			return obj->l.v[i];
		return char_at(r, obj, jv_utf8_offset(obj->s.s, obj->s.len, (size_t)i));
	}
	if (key->t == JV_STR) {
		if (obj->t == JV_DICT || obj->t == JV_NS) {
			struct jval *v = dict_get(r, obj, key->s.s, key->s.len);
			if (v || r->bud->over)
				return v;
		}
		return atlas_jinja_getattr(r, obj, key->s.s, key->s.len);
	}
	return undef(r, "%.*s", "no such item", 12);
}

static bool to_index(const struct jval *v, int64_t *i)
{
	if (v->t == JV_INT) {
		*i = v->i;
		return true;
	}
	if (v->t == JV_BOOL) {
		*i = v->b;
		return true;
	}
	return false;
}

/* Python slice semantics over n items: the indices it selects. Strings
 * are walked code point by code point from one index to the next, so a
 * slice costs time linear in the string. */
static struct jval *slice(struct jrender *r, const struct jnode *at, struct jval *obj,
			  struct jval *lo, struct jval *hi, struct jval *st)
{
	int64_t step = 1, start, stop;
	if (obj->t == JV_UNDEF)
		return undef_error(at, obj);
	if (obj->t != JV_LIST && obj->t != JV_STR)
		return atlas_jinja_fail(at, "'%s' object is not subscriptable", jv_type_name(obj));
	int64_t n = obj->t == JV_LIST ? (int64_t)obj->l.n : str_count(r, obj);
	if (st && st->t != JV_NONE && !to_index(st, &step))
		return atlas_jinja_fail(at, "slice indices must be integers or None");
	if (step == 0)
		return atlas_jinja_fail(at, "slice step cannot be zero");
	bool have_lo = lo && lo->t != JV_NONE, have_hi = hi && hi->t != JV_NONE;
	if ((have_lo && !to_index(lo, &start)) || (have_hi && !to_index(hi, &stop)))
		return atlas_jinja_fail(at, "slice indices must be integers or None");
	if (!have_lo)
		start = step > 0 ? 0 : n - 1;
	else if (start < 0)
		start = start + n < 0 ? (step > 0 ? 0 : -1) : start + n;
	else if (start >= n)
		start = step > 0 ? n : n - 1;
	if (!have_hi)
		stop = step > 0 ? n : -1;
	else if (stop < 0)
		stop = stop + n < 0 ? (step > 0 ? 0 : -1) : stop + n;
	else if (stop >= n)
		stop = step > 0 ? n : n - 1;
	struct jval *out = obj->t == JV_LIST ? jv_list(r->a) : NULL;
	struct jbuf b = JBUF(r->bud);
	const char *s = obj->s.s;
	size_t len = obj->s.len, off = 0;
	/* |step| as unsigned: -INT64_MIN does not fit an int64_t */
	uint64_t ustep = step > 0 ? (uint64_t)step : -(uint64_t)step;
	if (!out && start >= 0 && start < n)
		off = jv_utf8_offset(s, len, (size_t)start);
	for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
		if (out) {
			if (jv_list_push(r->a, out, obj->l.v[i]))
				return NULL;
		} else {
			size_t end = jv_utf8_forward(s, len, off, 1);
			if (jbuf_put(&b, s + off, end - off)) {
				jbuf_release(&b);
				return NULL;
			}
		}
		/* the next index, or the end when it would pass the bounds */
		if (step > 0 ? (uint64_t)(stop - i) <= ustep : (uint64_t)(i - stop) <= ustep)
			break;
		i += step;
		if (!out)
			off = step > 0 ? jv_utf8_forward(s, len, off, ustep)
				       : jv_utf8_back(s, off, ustep);
	}
	if (!out) {
		out = jv_str(r->a, b.p ? b.p : "", b.n);
		jbuf_release(&b);
	}
	return out;
}

/* --- operators ------------------------------------------------------------- */

static bool is_num(const struct jval *v)
{
	return v->t == JV_INT || v->t == JV_FLOAT || v->t == JV_BOOL;
}

static double num(const struct jval *v)
{
	return v->t == JV_FLOAT ? v->f : v->t == JV_INT ? (double)v->i : v->b;
}

/* The integer of an int or bool (0 for a float: only read for ints). */
static int64_t inum(const struct jval *v)
{
	return v->t == JV_INT ? v->i : v->t == JV_BOOL ? v->b : 0;
}

static struct jval *concat(struct jrender *r, struct jval *a, struct jval *b)
{
	struct jbuf buf = JBUF(r->bud);
	if (jv_write_str(&buf, a) || jv_write_str(&buf, b)) {
		jbuf_release(&buf);
		return NULL;
	}
	struct jval *v = jv_str(r->a, buf.p ? buf.p : "", buf.n);
	jbuf_release(&buf);
	return v;
}

static const char *const op_sym[] = {"+", "-", "*", "/", "//", "%", "**", "~"};

/* Python's int operators on int64_t: a result Python would make a big
 * integer is an error here, never a wrapped value. */
static struct jval *int_op(struct jrender *r, const struct jnode *at, int op, int64_t i, int64_t j)
{
	int64_t v = 0;
	bool ovf = false;
	switch (op) {
	case JOP_ADD:
		ovf = __builtin_add_overflow(i, j, &v);
		break;
	case JOP_SUB:
		ovf = __builtin_sub_overflow(i, j, &v);
		break;
	case JOP_MUL:
		ovf = __builtin_mul_overflow(i, j, &v);
		break;
	case JOP_FLOORDIV:
	case JOP_MOD:
		if (j == 0)
			return atlas_jinja_fail(at, "integer division or modulo by zero");
		if (j == -1) { /* INT64_MIN / -1 traps in C */
			if (op == JOP_MOD)
				v = 0;
			else
				ovf = __builtin_sub_overflow((int64_t)0, i, &v);
			break;
		}
		int64_t q = i / j, m = i % j;
		if (m != 0 && ((m < 0) != (j < 0))) { /* Python rounds toward -inf */
			q--;
			m += j;
		}
		v = op == JOP_MOD ? m : q;
		break;
	case JOP_POW: { /* j >= 0: by squaring, so 1 ** (10 ** 18) is quick */
		int64_t base = i;
		v = 1;
		for (int64_t e = j; e > 0 && !ovf; e >>= 1) {
			if (e & 1)
				ovf = __builtin_mul_overflow(v, base, &v);
			if (e > 1 && !ovf)
				ovf = __builtin_mul_overflow(base, base, &base);
		}
		break;
	}
	}
	if (ovf)
		return atlas_jinja_fail(at, "integer overflow in '%s'", op_sym[op]);
	return jv_int(r->a, v);
}

/* s * n (or n * s): one buffer of the final size, refused by the budget
 * before it is allocated when too long. */
static struct jval *repeat_str(struct jrender *r, const struct jval *s, int64_t n)
{
	struct jbuf b = JBUF(r->bud);
	if (jbuf_repeat(&b, s->s.s, s->s.len, n > 0 ? (size_t)n : 0)) {
		jbuf_release(&b);
		return NULL;
	}
	struct jval *v = jv_str(r->a, b.p, b.n);
	jbuf_release(&b);
	return v;
}

/* l * n: the item count is charged before anything is built. */
static struct jval *repeat_list(struct jrender *r, const struct jval *l, int64_t n)
{
	struct jval *out = jv_list(r->a);
	if (!out || n <= 0 || !l->l.n)
		return out;
	if ((uint64_t)n > (uint64_t)INT64_MAX / l->l.n ||
	    jbudget_steps(r->bud, n * (int64_t)l->l.n)) {
		jbudget_fail(r->bud, JOVER_STEPS);
		return NULL;
	}
	for (int64_t k = 0; k < n; k++)
		for (size_t i = 0; i < l->l.n; i++)
			if (jv_list_push(r->a, out, l->l.v[i]))
				return NULL;
	return out;
}

static struct jval *binop(struct jrender *r, const struct jnode *at, int op, struct jval *a,
			  struct jval *b)
{
	if (op == JOP_CONCAT)
		return concat(r, a, b);
	if (a->t == JV_UNDEF)
		return undef_error(at, a);
	if (b->t == JV_UNDEF)
		return undef_error(at, b);
	if (is_num(a) && is_num(b)) {
		bool flt = a->t == JV_FLOAT || b->t == JV_FLOAT;
		double x = num(a), y = num(b);
		int64_t i = inum(a), j = inum(b);
		switch (op) {
		case JOP_ADD:
			return flt ? jv_float(r->a, x + y) : int_op(r, at, op, i, j);
		case JOP_SUB:
			return flt ? jv_float(r->a, x - y) : int_op(r, at, op, i, j);
		case JOP_MUL:
			return flt ? jv_float(r->a, x * y) : int_op(r, at, op, i, j);
		case JOP_DIV:
			if (y == 0)
				return atlas_jinja_fail(at, "division by zero");
			return jv_float(r->a, x / y);
		case JOP_FLOORDIV:
		case JOP_MOD:
			if (!flt)
				return int_op(r, at, op, i, j);
			if (y == 0)
				return atlas_jinja_fail(at, "float %s by zero",
							op == JOP_MOD ? "modulo"
								      : "floor division");
			double m = fmod(x, y);
			if (m != 0 && ((m < 0) != (y < 0)))
				m += y;
			return jv_float(r->a, op == JOP_MOD ? m : floor(x / y));
		case JOP_POW:
			if (!flt && j >= 0)
				return int_op(r, at, op, i, j);
			if (x == 0 && y < 0)
				return atlas_jinja_fail(at,
							"0.0 cannot be raised to a negative power");
			return jv_float(r->a, pow(x, y));
		}
	}
	if (op == JOP_ADD && a->t == JV_STR && b->t == JV_STR)
		return concat(r, a, b);
	if (op == JOP_ADD && a->t == JV_LIST && b->t == JV_LIST) {
		struct jval *l = jv_list(r->a);
		for (size_t k = 0; l && k < a->l.n + b->l.n; k++)
			if (jv_list_push(r->a, l, k < a->l.n ? a->l.v[k] : b->l.v[k - a->l.n]))
				return NULL;
		return l;
	}
	if (op == JOP_MUL && (b->t == JV_STR || b->t == JV_LIST) &&
	    (a->t == JV_INT || a->t == JV_BOOL)) {
		struct jval *t = a; /* n * seq is seq * n */
		a = b;
		b = t;
	}
	if (op == JOP_MUL && (a->t == JV_STR || a->t == JV_LIST) &&
	    (b->t == JV_INT || b->t == JV_BOOL))
		return a->t == JV_STR ? repeat_str(r, a, inum(b)) : repeat_list(r, a, inum(b));
	if (op == JOP_ADD && a->t == JV_STR)
		return atlas_jinja_fail(at, "can only concatenate str (not \"%s\") to str",
					jv_type_name(b));
	if (op == JOP_ADD && a->t == JV_LIST)
		return atlas_jinja_fail(at, "can only concatenate list (not \"%s\") to list",
					jv_type_name(b));
	return atlas_jinja_fail(at, "unsupported operand type(s) for %s: '%s' and '%s'", op_sym[op],
				jv_type_name(a), jv_type_name(b));
}

/* <, <=, >, >=: -1, 0, 1 in *c, or an error. */
static int order(struct jrender *r, const struct jnode *at, const struct jval *a,
		 const struct jval *b, int op, int *c)
{
	static const char *const sym[] = {"==", "!=", "<", "<=", ">", ">="};
	if (is_num(a) && is_num(b)) {
		double x = num(a), y = num(b);
		*c = x < y ? -1 : x > y;
		return 0;
	}
	if (a->t == JV_STR && b->t == JV_STR) {
		size_t n = a->s.len < b->s.len ? a->s.len : b->s.len;
		if (jbudget_scan(r->bud, n))
			return ATLAS_EINVAL;
		int m = memcmp(a->s.s, b->s.s, n);
		*c = m ? (m < 0 ? -1 : 1) : (a->s.len < b->s.len ? -1 : a->s.len > b->s.len);
		return 0;
	}
	if (a->t == JV_LIST && b->t == JV_LIST) {
		for (size_t i = 0; i < a->l.n && i < b->l.n; i++) {
			if (jv_equal(r->bud, a->l.v[i], b->l.v[i]))
				continue;
			if (r->bud->over)
				return ATLAS_EINVAL;
			return order(r, at, a->l.v[i], b->l.v[i], op, c);
		}
		*c = a->l.n < b->l.n ? -1 : a->l.n > b->l.n;
		return 0;
	}
	if (a->t == JV_UNDEF || b->t == JV_UNDEF) {
		undef_error(at, a->t == JV_UNDEF ? a : b);
		return ATLAS_EINVAL;
	}
	atlas_jinja_fail(at, "'%s' not supported between instances of '%s' and '%s'", sym[op],
			 jv_type_name(a), jv_type_name(b));
	return ATLAS_EINVAL;
}

/* `a in b`: 1, 0, or < 0 on error. */
static int contains(struct jrender *r, const struct jnode *at, const struct jval *a,
		    const struct jval *b)
{
	switch (b->t) {
	case JV_UNDEF: return 0;
	case JV_STR:
		if (a->t != JV_STR) {
			atlas_jinja_fail(at, "'in <string>' requires string as left operand, not %s",
					 jv_type_name(a));
			return ATLAS_EINVAL;
		}
		if (jbudget_scan(r->bud, b->s.len))
			return ATLAS_EINVAL;
		return memmem(b->s.s, b->s.len, a->s.s, a->s.len) != NULL || a->s.len == 0;
	case JV_LIST:
		for (size_t i = 0; i < b->l.n; i++)
			if (jv_equal(r->bud, a, b->l.v[i]))
				return 1;
		return r->bud->over ? ATLAS_EINVAL : 0;
	case JV_DICT:
	case JV_NS:
		if (a->t != JV_STR)
			return 0;
		return dict_get(r, b, a->s.s, a->s.len) ? 1 : r->bud->over ? ATLAS_EINVAL : 0;
	default:
		atlas_jinja_fail(at, "argument of type '%s' is not iterable", jv_type_name(b));
		return ATLAS_EINVAL;
	}
}

static struct jval *compare(struct jrender *r, struct jframe *f, const struct jnode *n)
{
	struct jval *a = atlas_jinja_eval(r, f, n->a);
	for (size_t i = 0; a && i < n->nargs; i++) {
		struct jval *b = atlas_jinja_eval(r, f, n->args[i]);
		if (!b)
			return NULL;
		int op = n->cmp_ops[i], ok, c;
		if (op == JCMP_EQ || op == JCMP_NE) {
			ok = jv_equal(r->bud, a, b) == (op == JCMP_EQ);
			if (r->bud->over)
				return NULL;
		} else if (op == JCMP_IN || op == JCMP_NOTIN) {
			int in = contains(r, n, a, b);
			if (in < 0)
				return NULL;
			ok = in == (op == JCMP_IN);
		} else {
			if (order(r, n, a, b, op, &c))
				return NULL;
			ok = op == JCMP_LT ? c < 0 : op == JCMP_LE ? c <= 0 : op == JCMP_GT ? c > 0 : c >= 0;
		}
		if (!ok)
			return &jv_false;
		a = b;
	}
	return a ? &jv_true : NULL;
}

/* --- calls -------------------------------------------------------------------- */

static int exec_body(struct jrender *r, struct jframe *f, struct jnode *const *body, size_t n);

static struct jval *call_macro(struct jrender *r, const struct jnode *at, const struct jnode *m,
			       struct jval **args, size_t nargs, const char **kw,
			       struct jval **kwv, size_t nkw)
{
	if (r->macros >= 64)
		return atlas_jinja_fail(at, "macro calls nested too deeply");
	if (nargs > m->nnames)
		return atlas_jinja_fail(at, "macro '%s' takes not more than %zu argument(s)", m->s,
					m->nnames);
	struct jframe *f = frame_new(r, r->root);
	if (!f)
		return NULL;
	for (size_t i = 0; i < m->nnames; i++) {
		struct jval *v = i < nargs ? args[i] : NULL;
		for (size_t k = 0; !v && k < nkw; k++)
			if (!strcmp(kw[k], m->names[i]))
				v = kwv[k];
		if (!v && m->kwv[i] && !(v = atlas_jinja_eval(r, f, m->kwv[i])))
			return NULL;
		if (set_var(r, f, m->names[i], v ? v : undef(r, "'%.*s' is undefined", m->names[i],
								strlen(m->names[i]))))
			return NULL;
	}
	for (size_t k = 0; k < nkw; k++) {
		bool known = false;
		for (size_t i = 0; i < m->nnames; i++)
			known |= !strcmp(kw[k], m->names[i]);
		if (!known)
			return atlas_jinja_fail(at, "macro '%s' takes no keyword argument '%s'", m->s,
						kw[k]);
	}
	struct jbuf out = JBUF(r->bud), *saved = r->out;
	r->out = &out;
	r->macros++;
	int rc = exec_body(r, f, m->body, m->nbody);
	r->macros--;
	r->out = saved;
	struct jval *v = rc < 0 ? NULL : jv_str(r->a, out.p ? out.p : "", out.n);
	jbuf_release(&out);
	return v;
}

static struct jval *call_func(struct jrender *r, const struct jnode *at, int fn,
			      struct jval **args, size_t nargs, const char **kw,
			      struct jval **kwv, size_t nkw)
{
	struct jbuf b = JBUF(r->bud);
	struct jval *v;
	switch (fn) {
	case JF_RAISE:
		if (nargs > 0 && jv_write_str(&b, args[0])) {
			jbuf_release(&b);
			return NULL;
		}
		atlas_error(ATLAS_EINVAL, "chat template: %.*s", b.n > 4000 ? 4000 : (int)b.n,
			    b.p ? b.p : "");
		jbuf_release(&b);
		return NULL;
	case JF_NAMESPACE:
	case JF_DICT:
		if (!(v = jv_dict(r->a, fn == JF_NAMESPACE ? JV_NS : JV_DICT)))
			return NULL;
		for (size_t i = 0; i < nargs; i++) {
			if (args[i]->t != JV_DICT)
				return atlas_jinja_fail(at, "%s() takes keyword arguments or a dict",
							fn == JF_DICT ? "dict" : "namespace");
			for (size_t k = 0; k < args[i]->d.n; k++)
				if (jv_dict_set(r->a, v, args[i]->d.e[k].k, args[i]->d.e[k].klen,
						args[i]->d.e[k].v))
					return NULL;
		}
		for (size_t k = 0; k < nkw; k++)
			if (jv_dict_set(r->a, v, kw[k], strlen(kw[k]), kwv[k]))
				return NULL;
		return v;
	case JF_RANGE: {
		int64_t a[3] = {0, 0, 1};
		if (nargs < 1 || nargs > 3)
			return atlas_jinja_fail(at, "range expected 1 to 3 arguments, got %zu", nargs);
		for (size_t i = 0; i < nargs; i++)
			if (!to_index(args[i], &a[nargs == 1 ? 1 : i]))
				return atlas_jinja_fail(at, "range() arguments must be integers");
		if (a[2] == 0)
			return atlas_jinja_fail(at, "range() arg 3 must not be zero");
		if (!(v = jv_list(r->a)))
			return NULL;
		/* the length, in unsigned arithmetic (no overflow), charged up front */
		bool up = a[2] > 0;
		uint64_t span =
		    up ? (uint64_t)a[1] - (uint64_t)a[0] : (uint64_t)a[0] - (uint64_t)a[1];
		uint64_t step = up ? (uint64_t)a[2] : -(uint64_t)a[2];
		uint64_t count = (up ? a[0] < a[1] : a[0] > a[1]) ? (span - 1) / step + 1 : 0;
		if (count > (uint64_t)INT64_MAX || jbudget_steps(r->bud, (int64_t)count)) {
			jbudget_fail(r->bud, JOVER_STEPS);
			return NULL;
		}
		for (uint64_t k = 0; k < count; k++)
			if (jv_list_push(
				r->a, v,
				jv_int(r->a, (int64_t)((uint64_t)a[0] + k * (uint64_t)a[2]))))
				return NULL;
		return v;
	}
	case JF_STRFTIME: {
		char out[256];
		time_t now = time(NULL);
		struct tm tm;
		if (nargs != 1 || args[0]->t != JV_STR)
			return atlas_jinja_fail(at, "strftime_now() takes one format string");
		localtime_r(&now, &tm);
		size_t n = strftime(out, sizeof(out), args[0]->s.s, &tm);
		return jv_str(r->a, out, n);
	}
	}
	return atlas_jinja_fail(at, "unknown function");
}

struct jval *atlas_jinja_call(struct jrender *r, const struct jnode *at, struct jval *fn,
			      struct jval **args, size_t nargs, const char **kw, struct jval **kwv,
			      size_t nkw)
{
	switch (fn->t) {
	case JV_MACRO: return call_macro(r, at, fn->macro, args, nargs, kw, kwv, nkw);
	case JV_FUNC: return call_func(r, at, fn->fn, args, nargs, kw, kwv, nkw);
	case JV_METHOD:
		return atlas_jinja_method(r, at, fn->m.self, fn->m.name, args, nargs, kw, kwv, nkw);
	case JV_UNDEF: return undef_error(at, fn);
	default: return atlas_jinja_fail(at, "'%s' object is not callable", jv_type_name(fn));
	}
}

/* Evaluate a node's positional and keyword arguments. */
static int eval_args(struct jrender *r, struct jframe *f, const struct jnode *n,
		     struct jval ***args, struct jval ***kwv)
{
	*args = jarena_alloc(r->a, (n->nargs + 1) * sizeof(**args));
	*kwv = jarena_alloc(r->a, (n->nkw + 1) * sizeof(**kwv));
	if (!*args || !*kwv)
		return atlas_error(ATLAS_ENOMEM, "out of memory rendering the chat template");
	for (size_t i = 0; i < n->nargs; i++)
		if (!((*args)[i] = atlas_jinja_eval(r, f, n->args[i])))
			return ATLAS_EINVAL;
	for (size_t i = 0; i < n->nkw; i++)
		if (!((*kwv)[i] = atlas_jinja_eval(r, f, n->kwv[i])))
			return ATLAS_EINVAL;
	return 0;
}

static struct jval *eval_call(struct jrender *r, struct jframe *f, const struct jnode *n)
{
	struct jval *fn = atlas_jinja_eval(r, f, n->a);
	struct jval **args, **kwv;
	if (!fn || eval_args(r, f, n, &args, &kwv))
		return NULL;
	return atlas_jinja_call(r, n, fn, args, n->nargs, n->kw, kwv, n->nkw);
}

/* --- expressions ---------------------------------------------------------- */

/* Every evaluation and statement passes here: one step, one level. */
static int enter(struct jrender *r, const struct jnode *n)
{
	r->bud->line = n->line;
	if (r->depth >= ATLAS_JINJA_MAX_EVAL_DEPTH)
		return jbudget_fail(r->bud, JOVER_EVAL_DEPTH);
	if (jbudget_steps(r->bud, 1))
		return ATLAS_EINVAL;
	r->depth++;
	return 0;
}

static struct jval *eval_node(struct jrender *r, struct jframe *f, const struct jnode *n);

struct jval *atlas_jinja_eval(struct jrender *r, struct jframe *f, const struct jnode *n)
{
	if (enter(r, n))
		return NULL;
	struct jval *v = eval_node(r, f, n);
	r->depth--;
	return v;
}

static struct jval *eval_node(struct jrender *r, struct jframe *f, const struct jnode *n)
{
	struct jval *a, *b, *v;
	switch (n->kind) {
	case JN_LIT: return n->lit;
	case JN_NAME: return lookup(r, f, n->s, n->len);
	case JN_ATTR:
		if (!(a = atlas_jinja_eval(r, f, n->a)))
			return NULL;
		if (a->t == JV_UNDEF)
			return undef_error(n, a);
		return atlas_jinja_getattr(r, a, n->s, n->len);
	case JN_ITEM:
		if (!(a = atlas_jinja_eval(r, f, n->a)) || !(b = atlas_jinja_eval(r, f, n->b)))
			return NULL;
		return getitem(r, n, a, b);
	case JN_SLICE: {
		struct jval *p[3] = {NULL, NULL, NULL};
		const struct jnode *pn[3] = {n->b, n->c, n->d};
		if (!(a = atlas_jinja_eval(r, f, n->a)))
			return NULL;
		for (int i = 0; i < 3; i++)
			if (pn[i] && !(p[i] = atlas_jinja_eval(r, f, pn[i])))
				return NULL;
		return slice(r, n, a, p[0], p[1], p[2]);
	}
	case JN_CALL: return eval_call(r, f, n);
	case JN_FILTER:
		if (!(a = atlas_jinja_eval(r, f, n->a)))
			return NULL;
		return atlas_jinja_filter(r, f, n, a);
	case JN_TEST: {
		struct jval **args, **kwv;
		if (!(a = atlas_jinja_eval(r, f, n->a)) || eval_args(r, f, n, &args, &kwv))
			return NULL;
		int t = atlas_jinja_test(r, n, n->s, a, args, n->nargs);
		if (t < 0)
			return NULL;
		return (t != 0) != (n->op != 0) ? &jv_true : &jv_false;
	}
	case JN_NOT:
		if (!(a = atlas_jinja_eval(r, f, n->a)))
			return NULL;
		return jv_truthy(a) ? &jv_false : &jv_true;
	case JN_NEG:
	case JN_POS:
		if (!(a = atlas_jinja_eval(r, f, n->a)))
			return NULL;
		if (a->t == JV_UNDEF)
			return undef_error(n, a);
		if (!is_num(a))
			return atlas_jinja_fail(n, "bad operand type for unary %s: '%s'",
						n->kind == JN_NEG ? "-" : "+", jv_type_name(a));
		if (n->kind == JN_POS)
			return a->t == JV_BOOL ? jv_int(r->a, a->b) : a;
		if (a->t == JV_FLOAT)
			return jv_float(r->a, -a->f);
		if (inum(a) == INT64_MIN)
			return atlas_jinja_fail(n, "integer overflow in unary '-'");
		return jv_int(r->a, -inum(a));
	case JN_BINOP:
		if (!(a = atlas_jinja_eval(r, f, n->a)) || !(b = atlas_jinja_eval(r, f, n->b)))
			return NULL;
		return binop(r, n, n->op, a, b);
	case JN_AND:
		if (!(a = atlas_jinja_eval(r, f, n->a)))
			return NULL;
		return jv_truthy(a) ? atlas_jinja_eval(r, f, n->b) : a;
	case JN_OR:
		if (!(a = atlas_jinja_eval(r, f, n->a)))
			return NULL;
		return jv_truthy(a) ? a : atlas_jinja_eval(r, f, n->b);
	case JN_COND:
		if (!(a = atlas_jinja_eval(r, f, n->a)))
			return NULL;
		if (jv_truthy(a))
			return atlas_jinja_eval(r, f, n->b);
		return n->c ? atlas_jinja_eval(r, f, n->c) : &jv_undef;
	case JN_COMPARE: return compare(r, f, n);
	case JN_LIST:
	case JN_TUPLE:
		if (!(v = jv_list(r->a)))
			return NULL;
		v->l.tuple = n->kind == JN_TUPLE;
		for (size_t i = 0; i < n->nargs; i++)
			if (!(a = atlas_jinja_eval(r, f, n->args[i])) || jv_list_push(r->a, v, a))
				return NULL;
		return v;
	case JN_DICT:
		if (!(v = jv_dict(r->a, JV_DICT)))
			return NULL;
		for (size_t i = 0; i < n->nkw; i++) {
			if (!(a = atlas_jinja_eval(r, f, n->keys[i])) ||
			    !(b = atlas_jinja_eval(r, f, n->kwv[i])))
				return NULL;
			if (a->t != JV_STR)
				return atlas_jinja_fail(n, "dict keys must be strings, not %s",
							jv_type_name(a));
			if (jv_dict_set(r->a, v, a->s.s, a->s.len, b))
				return NULL;
		}
		return v;
	default:
		return atlas_jinja_fail(n, "statement used as an expression");
	}
}

/* --- statements ---------------------------------------------------------- */

static int assign(struct jrender *r, struct jframe *f, const struct jnode *n, struct jval *v)
{
	if (n->nnames == 1)
		return set_var(r, f, n->names[0], v);
	if (v->t != JV_LIST || v->l.n != n->nnames) {
		atlas_jinja_fail(n, "cannot unpack %s into %zu names", jv_type_name(v), n->nnames);
		return ATLAS_EINVAL;
	}
	for (size_t i = 0; i < n->nnames; i++)
		if (set_var(r, f, n->names[i], v->l.v[i]))
			return ATLAS_ENOMEM;
	return 0;
}

/* The items a for loop walks. */
static struct jval *iterable(struct jrender *r, const struct jnode *at, struct jval *v)
{
	struct jval *l;
	switch (v->t) {
	case JV_UNDEF: return jv_list(r->a);
	case JV_LIST: return v;
	case JV_DICT:
	case JV_NS:
		if (!(l = jv_list(r->a)))
			return NULL;
		for (size_t i = 0; i < v->d.n; i++)
			if (jv_list_push(r->a, l, jv_str(r->a, v->d.e[i].k, v->d.e[i].klen)))
				return NULL;
		return l;
	case JV_STR:
		if (!(l = jv_list(r->a)))
			return NULL;
		for (size_t off = jv_utf8_offset(v->s.s, v->s.len, 0); off < v->s.len;
		     off = jv_utf8_forward(v->s.s, v->s.len, off, 1))
			if (jv_list_push(r->a, l, char_at(r, v, off)))
				return NULL;
		return l;
	default:
		return atlas_jinja_fail(at, "'%s' object is not iterable", jv_type_name(v));
	}
}

static int loop_var(struct jrender *r, struct jframe *f, struct jval *items, size_t i)
{
	struct jval *loop = jv_dict(r->a, JV_DICT);
	size_t n = items->l.n;
	if (!loop)
		return ATLAS_ENOMEM;
	struct {
		const char *k;
		struct jval *v;
	} fields[] = {
		{"index", jv_int(r->a, (int64_t)i + 1)},
		{"index0", jv_int(r->a, (int64_t)i)},
		{"revindex", jv_int(r->a, (int64_t)(n - i))},
		{"revindex0", jv_int(r->a, (int64_t)(n - i - 1))},
		{"first", i == 0 ? &jv_true : &jv_false},
		{"last", i + 1 == n ? &jv_true : &jv_false},
		{"length", jv_int(r->a, (int64_t)n)},
		{"previtem", i > 0 ? items->l.v[i - 1] : &jv_undef},
		{"nextitem", i + 1 < n ? items->l.v[i + 1] : &jv_undef},
		{"depth", jv_int(r->a, 1)},
		{"depth0", jv_int(r->a, 0)},
	};
	for (size_t k = 0; k < sizeof(fields) / sizeof(fields[0]); k++)
		if (!fields[k].v || jv_dict_set(r->a, loop, fields[k].k, strlen(fields[k].k), fields[k].v))
			return ATLAS_ENOMEM;
	return set_var(r, f, "loop", loop);
}

static int exec_for(struct jrender *r, struct jframe *f, const struct jnode *n)
{
	struct jval *seq = atlas_jinja_eval(r, f, n->a), *items;
	if (!seq || !(items = iterable(r, n, seq)))
		return ATLAS_EINVAL;
	if (n->b) { /* `for x in y if cond`: filter first, so loop.* count what runs */
		struct jval *kept = jv_list(r->a);
		if (!kept)
			return ATLAS_ENOMEM;
		for (size_t i = 0; i < items->l.n; i++) {
			struct jframe *tf = frame_new(r, f);
			struct jval *c;
			if (!tf || assign(r, tf, n, items->l.v[i]) || !(c = atlas_jinja_eval(r, tf, n->b)))
				return ATLAS_EINVAL;
			if (jv_truthy(c) && jv_list_push(r->a, kept, items->l.v[i]))
				return ATLAS_ENOMEM;
		}
		items = kept;
	}
	for (size_t i = 0; i < items->l.n; i++) {
		struct jframe *lf = frame_new(r, f);
		if (jbudget_steps(r->bud, 1) || !lf || loop_var(r, lf, items, i) ||
		    assign(r, lf, n, items->l.v[i]))
			return ATLAS_EINVAL;
		int rc = exec_body(r, lf, n->body, n->nbody);
		if (rc < 0)
			return rc;
		if (rc == EXEC_BREAK)
			break;
	}
	if (!items->l.n && n->norelse)
		return exec_body(r, f, n->orelse, n->norelse);
	return 0;
}

static int exec_node(struct jrender *r, struct jframe *f, const struct jnode *n);

static int exec_stmt(struct jrender *r, struct jframe *f, const struct jnode *n)
{
	int rc = enter(r, n);
	if (rc)
		return rc;
	rc = exec_node(r, f, n);
	r->depth--;
	return rc;
}

static int exec_node(struct jrender *r, struct jframe *f, const struct jnode *n)
{
	struct jval *v;
	switch (n->kind) {
	case JN_TEXT: return jbuf_put(r->out, n->s, n->len);
	case JN_OUTPUT:
		if (!(v = atlas_jinja_eval(r, f, n->a)))
			return ATLAS_EINVAL;
		return jv_write_str(r->out, v);
	case JN_IF:
		if (!(v = atlas_jinja_eval(r, f, n->a)))
			return ATLAS_EINVAL;
		if (jv_truthy(v))
			return exec_body(r, f, n->body, n->nbody);
		return exec_body(r, f, n->orelse, n->norelse);
	case JN_FOR: return exec_for(r, f, n);
	case JN_SET:
		if (!(v = atlas_jinja_eval(r, f, n->a)))
			return ATLAS_EINVAL;
		return assign(r, f, n, v);
	case JN_SETATTR: {
		struct jval *ns = lookup(r, f, n->names[0], strlen(n->names[0]));
		if (!ns)
			return ATLAS_ENOMEM;
		if (ns->t != JV_NS) {
			atlas_jinja_fail(n, "cannot assign attribute on non-namespace object");
			return ATLAS_EINVAL;
		}
		if (!(v = atlas_jinja_eval(r, f, n->a)))
			return ATLAS_EINVAL;
		return jv_dict_set(r->a, ns, n->s, n->len, v);
	}
	case JN_SETBLOCK: {
		struct jbuf out = JBUF(r->bud), *saved = r->out;
		r->out = &out;
		int rc = exec_body(r, f, n->body, n->nbody);
		r->out = saved;
		v = rc < 0 ? NULL : jv_str(r->a, out.p ? out.p : "", out.n);
		jbuf_release(&out);
		return v ? set_var(r, f, n->names[0], v) : ATLAS_EINVAL;
	}
	case JN_MACRO:
		if (!(v = jv_dict(r->a, JV_MACRO)))
			return ATLAS_ENOMEM;
		v->macro = n;
		return set_var(r, f, n->s, v);
	case JN_BREAK: return EXEC_BREAK;
	case JN_CONTINUE: return EXEC_CONTINUE;
	default:
		atlas_jinja_fail(n, "expression used as a statement");
		return ATLAS_EINVAL;
	}
}

static int exec_body(struct jrender *r, struct jframe *f, struct jnode *const *body, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int rc = exec_stmt(r, f, body[i]);
		if (rc)
			return rc;
	}
	return 0;
}

/* --- entry points ---------------------------------------------------------- */

int atlas_jinja_parse(const char *src, size_t len, struct atlas_jinja **out)
{
	struct atlas_jinja *t = calloc(1, sizeof(*t));
	struct jtok *toks;
	size_t n;
	if (!t)
		return atlas_error(ATLAS_ENOMEM, "out of memory parsing the chat template");
	int rc = atlas_jinja_lex(&t->arena, src, len, &toks, &n);
	if (!rc)
		rc = atlas_jinja_parse_tokens(t, toks, n);
	if (rc) {
		atlas_jinja_free(t);
		return rc;
	}
	*out = t;
	return 0;
}

void atlas_jinja_free(struct atlas_jinja *t)
{
	if (!t)
		return;
	jarena_free(&t->arena);
	free(t);
}

struct atlas_jinja_limits atlas_jinja_default_limits(void)
{
	return (struct atlas_jinja_limits){
	    .max_steps = 10 * 1000 * 1000,
	    .max_output = (size_t)64 << 20,
	    .max_memory = (size_t)512 << 20,
	};
}

int atlas_jinja_render(const struct atlas_jinja *t, struct json_object *vars, char **out,
		       size_t *len)
{
	return atlas_jinja_render_limited(t, vars, NULL, out, len);
}

int atlas_jinja_render_limited(const struct atlas_jinja *t, struct json_object *vars,
			       const struct atlas_jinja_limits *lim, char **out, size_t *len)
{
	struct jbudget bud = {.lim = atlas_jinja_default_limits()};
	if (lim && lim->max_steps > 0)
		bud.lim.max_steps = lim->max_steps;
	if (lim && lim->max_output > 0)
		bud.lim.max_output = lim->max_output;
	if (lim && lim->max_memory > 0)
		bud.lim.max_memory = lim->max_memory;
	struct jarena a = {.budget = &bud};
	struct jbuf buf = JBUF(&bud);
	struct jrender r = {.a = &a, .bud = &bud, .out = &buf};
	static const struct {
		const char *name;
		int fn;
	} globals[] = {{"raise_exception", JF_RAISE}, {"namespace", JF_NAMESPACE},
		       {"range", JF_RANGE}, {"strftime_now", JF_STRFTIME}, {"dict", JF_DICT}};
	int rc = ATLAS_ENOMEM;
	if (!(r.root = frame_new(&r, NULL)))
		goto done;
	for (size_t i = 0; i < sizeof(globals) / sizeof(globals[0]); i++) {
		struct jval *g = jv_dict(&a, JV_FUNC);
		if (!g)
			goto done;
		g->fn = globals[i].fn;
		if (set_var(&r, r.root, globals[i].name, g))
			goto done;
	}
	if (vars) {
		json_object_object_foreach(vars, key, val) {
			struct jval *v = jv_from_json(&a, val);
			if (!v || set_var(&r, r.root, key, v))
				goto done;
		}
	}
	rc = exec_body(&r, r.root, t->body, t->nbody);
	if (rc > 0)
		rc = 0; /* break / continue outside a loop end nothing */
	if (!rc && jbuf_put(&buf, "", 0))
		rc = ATLAS_ENOMEM;
done:
	jarena_free(&a);
	if (bud.over) /* the limit passed, whatever was reported on the way out */
		rc = jbudget_fail(&bud, bud.over);
	if (rc) {
		free(buf.p);
		return rc == ATLAS_ENOMEM ? rc : ATLAS_EINVAL;
	}
	*out = buf.p;
	*len = buf.n;
	return 0;
}
