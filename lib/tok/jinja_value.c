/* jinja_value.c - template values with Python semantics: the arena they
 * live in, conversion from JSON, truth and equality, and the three ways
 * a value becomes text (str(), repr(), and json.dumps as transformers'
 * tojson calls it: ensure_ascii=False, separators ", " and ": "). */
#include <json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "jinja_internal.h"

struct jchunk {
	struct jchunk *next; /* older chunk */
	size_t used, cap;    /* bytes of data used / allocated */
	max_align_t data[];  /* the memory handed out */
};

/* --- budget ------------------------------------------------------------ */

static void budget_message(const struct jbudget *b)
{
	switch (b->over) {
	case JOVER_STEPS:
		atlas_error(ATLAS_EINVAL,
			    "chat template line %d: template render exceeded %lld steps",
			    b->over_line, (long long)b->lim.max_steps);
		break;
	case JOVER_OUTPUT:
		atlas_error(ATLAS_EINVAL,
			    "chat template line %d: template render exceeded %zu output bytes "
			    "(the output or one string)",
			    b->over_line, b->lim.max_output);
		break;
	case JOVER_MEMORY:
		atlas_error(ATLAS_EINVAL,
			    "chat template line %d: template render exceeded %zu bytes of memory",
			    b->over_line, b->lim.max_memory);
		break;
	case JOVER_EVAL_DEPTH:
		atlas_error(ATLAS_EINVAL,
			    "chat template line %d: expressions and blocks nested too deeply "
			    "(more than %d levels while rendering)",
			    b->over_line, ATLAS_JINJA_MAX_EVAL_DEPTH);
		break;
	default:
		atlas_error(ATLAS_EINVAL,
			    "chat template line %d: values nested too deeply (lists or dicts more "
			    "than %d levels deep)",
			    b->over_line, ATLAS_JINJA_MAX_VALUE_DEPTH);
	}
}

int jbudget_fail(struct jbudget *b, int what)
{
	if (!b->over) {
		b->over = what;
		b->over_line = b->line;
	}
	budget_message(b); /* the first limit passed names the failure */
	return ATLAS_EINVAL;
}

int jbudget_steps(struct jbudget *b, int64_t n)
{
	if (!b)
		return 0;
	if (b->over)
		return ATLAS_EINVAL;
	if (n < 0 || n > b->lim.max_steps - b->steps) {
		b->steps = b->lim.max_steps;
		return jbudget_fail(b, JOVER_STEPS);
	}
	b->steps += n;
	return 0;
}

int jbudget_scan(struct jbudget *b, size_t bytes)
{
	return jbudget_steps(b, (int64_t)(bytes / 64));
}

/* --- arena ----------------------------------------------------------------- */

void *jarena_alloc(struct jarena *a, size_t n)
{
	struct jbudget *bud = a->budget;
	if (n > SIZE_MAX / 4)
		return NULL;
	n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
	if (bud && jbudget_steps(bud, 1 + (int64_t)(n / 64)))
		return NULL;
	struct jchunk *c = a->head;
	if (!c || c->cap - c->used < n) {
		/* a large block gets a chunk of its own, behind the current one,
		 * so the space left in that one is not wasted */
		bool own = n > 16384;
		size_t cap = own ? n : 65536;
		if (bud && sizeof(*c) + cap > bud->lim.max_memory - bud->mem) {
			jbudget_fail(bud, JOVER_MEMORY);
			return NULL;
		}
		c = malloc(sizeof(*c) + cap);
		if (!c)
			return NULL;
		if (bud)
			bud->mem += sizeof(*c) + cap;
		c->used = 0;
		c->cap = cap;
		if (own && a->head) {
			c->next = a->head->next;
			a->head->next = c;
		} else {
			c->next = a->head;
			a->head = c;
		}
	}
	void *p = (char *)c->data + c->used;
	c->used += n;
	memset(p, 0, n);
	return p;
}

char *jarena_strdup(struct jarena *a, const char *s, size_t n)
{
	char *p = jarena_alloc(a, n + 1);
	if (p) {
		if (n)
			memcpy(p, s, n);
		p[n] = '\0';
	}
	return p;
}

void jarena_free(struct jarena *a)
{
	struct jchunk *c = a->head;
	while (c) {
		struct jchunk *next = c->next;
		free(c);
		c = next;
	}
	a->head = NULL;
}

/* --- buffers ------------------------------------------------------------- */

/* Room for `need` bytes: capacity doubles (amortised O(1) appends), but
 * never past what the budget allows one string. */
static int jbuf_grow(struct jbuf *b, size_t need)
{
	struct jbudget *bud = b->budget;
	size_t cap = b->cap ? b->cap : 256;
	while (cap < need)
		cap = cap > SIZE_MAX / 2 ? need : 2 * cap;
	if (bud && cap > bud->lim.max_output + 1)
		cap = need > bud->lim.max_output + 1 ? need : bud->lim.max_output + 1;
	if (bud && cap - b->cap > bud->lim.max_memory - bud->mem)
		return jbudget_fail(bud, JOVER_MEMORY);
	char *p = realloc(b->p, cap);
	if (!p)
		return atlas_error(ATLAS_ENOMEM, "out of memory rendering the chat template");
	if (bud)
		bud->mem += cap - b->cap;
	b->p = p;
	b->cap = cap;
	return 0;
}

/* May `n` more bytes be written? Charges them (one step per 64). */
static int jbuf_charge(struct jbuf *b, size_t n)
{
	struct jbudget *bud = b->budget;
	if (!bud)
		return n > SIZE_MAX / 2 - b->n ? atlas_error(ATLAS_ENOMEM, "string too long") : 0;
	if (bud->over)
		return ATLAS_EINVAL;
	if (n > bud->lim.max_output - b->n)
		return jbudget_fail(bud, JOVER_OUTPUT);
	return jbudget_steps(bud, (int64_t)((b->n + n) / 64 - b->n / 64));
}

int jbuf_put(struct jbuf *b, const char *s, size_t n)
{
	int rc = jbuf_charge(b, n);
	if (rc)
		return rc;
	if (b->n + n + 1 > b->cap && (rc = jbuf_grow(b, b->n + n + 1)))
		return rc;
	if (n)
		memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = '\0';
	return 0;
}

int jbuf_repeat(struct jbuf *b, const char *s, size_t len, size_t n)
{
	if (!len || !n)
		return jbuf_put(b, "", 0);
	size_t total = len * n;
	if (n > SIZE_MAX / 2 / len) /* more than any budget: the charge below refuses it */
		total = SIZE_MAX / 2;
	int rc = jbuf_charge(b, total);
	if (rc)
		return rc;
	if (b->n + total + 1 > b->cap && (rc = jbuf_grow(b, b->n + total + 1)))
		return rc;
	char *at = b->p + b->n;
	memcpy(at, s, len);
	for (size_t done = len; done < total;) { /* double what is there */
		size_t k = done < total - done ? done : total - done;
		memcpy(at + done, at, k);
		done += k;
	}
	b->n += total;
	b->p[b->n] = '\0';
	return 0;
}

void jbuf_release(struct jbuf *b)
{
	if (b->budget)
		b->budget->mem -= b->cap;
	free(b->p);
	b->p = NULL;
	b->n = b->cap = 0;
}

static int jbuf_puts(struct jbuf *b, const char *s)
{
	return jbuf_put(b, s, strlen(s));
}

struct jval jv_undef = {.t = JV_UNDEF, .s = {"", 0}};
struct jval jv_none = {.t = JV_NONE};
struct jval jv_true = {.t = JV_BOOL, .b = true};
struct jval jv_false = {.t = JV_BOOL, .b = false};

static struct jval *newval(struct jarena *a, enum jtype t)
{
	struct jval *v = jarena_alloc(a, sizeof(*v));
	if (v)
		v->t = t;
	else
		atlas_error(ATLAS_ENOMEM, "out of memory rendering the chat template");
	return v;
}

struct jval *jv_str(struct jarena *a, const char *s, size_t len)
{
	if (a->budget && len > a->budget->lim.max_output) {
		jbudget_fail(a->budget, JOVER_OUTPUT);
		return NULL;
	}
	struct jval *v = newval(a, JV_STR);
	if (v && !(v->s.s = jarena_strdup(a, s, len)))
		return NULL;
	if (v)
		v->s.len = len;
	return v;
}

struct jval *jv_strz(struct jarena *a, const char *s)
{
	return jv_str(a, s, strlen(s));
}

struct jval *jv_int(struct jarena *a, int64_t i)
{
	struct jval *v = newval(a, JV_INT);
	if (v)
		v->i = i;
	return v;
}

struct jval *jv_float(struct jarena *a, double f)
{
	struct jval *v = newval(a, JV_FLOAT);
	if (v)
		v->f = f;
	return v;
}

struct jval *jv_list(struct jarena *a)
{
	return newval(a, JV_LIST);
}

struct jval *jv_dict(struct jarena *a, enum jtype t)
{
	return newval(a, t);
}

/* A container gets `v`: refuse nesting past the limit (the recursive
 * walkers, repr / tojson / ==, rely on it). */
static int nest(struct jarena *a, struct jval *c, const struct jval *v)
{
	if (v->depth < c->depth)
		return 0;
	if (v->depth >= ATLAS_JINJA_MAX_VALUE_DEPTH) {
		if (a->budget)
			return jbudget_fail(a->budget, JOVER_VALUE_DEPTH);
		return atlas_error(ATLAS_EINVAL, "values nested too deeply");
	}
	c->depth = v->depth + 1;
	return 0;
}

int jv_list_push(struct jarena *a, struct jval *l, struct jval *v)
{
	if (!v) /* a failed constructor's result: its message is set */
		return ATLAS_EINVAL;
	if (nest(a, l, v) || jbudget_steps(a->budget, 1))
		return ATLAS_EINVAL;
	if (l->l.n == l->l.cap) {
		size_t cap = l->l.cap ? 2 * l->l.cap : 8;
		struct jval **nv = jarena_alloc(a, cap * sizeof(*nv));
		if (!nv)
			return atlas_error(ATLAS_ENOMEM, "out of memory rendering the chat template");
		if (l->l.n)
			memcpy(nv, l->l.v, l->l.n * sizeof(*nv));
		l->l.v = nv;
		l->l.cap = cap;
	}
	l->l.v[l->l.n++] = v;
	return 0;
}

struct jval *jv_dict_get(const struct jval *d, const char *k, size_t klen)
{
	for (size_t i = 0; i < d->d.n; i++)
		if (d->d.e[i].klen == klen && !memcmp(d->d.e[i].k, k, klen))
			return d->d.e[i].v;
	return NULL;
}

/* Append an entry whose key is known to be new. */
static int dict_append(struct jarena *a, struct jval *d, const char *k, size_t klen, struct jval *v)
{
	if (d->t == JV_DICT && nest(a, d, v))
		return ATLAS_EINVAL;
	if (d->d.n == d->d.cap) {
		size_t cap = d->d.cap ? 2 * d->d.cap : 8;
		struct jkv *ne = jarena_alloc(a, cap * sizeof(*ne));
		if (!ne)
			return atlas_error(ATLAS_ENOMEM, "out of memory rendering the chat template");
		if (d->d.n)
			memcpy(ne, d->d.e, d->d.n * sizeof(*ne));
		d->d.e = ne;
		d->d.cap = cap;
	}
	struct jkv *e = &d->d.e[d->d.n];
	if (!(e->k = jarena_strdup(a, k, klen)))
		return atlas_error(ATLAS_ENOMEM, "out of memory rendering the chat template");
	e->klen = klen;
	e->v = v;
	d->d.n++;
	return 0;
}

int jv_dict_set(struct jarena *a, struct jval *d, const char *k, size_t klen, struct jval *v)
{
	if (!v)
		return ATLAS_EINVAL;
	if (jbudget_steps(a->budget, 1 + (int64_t)(d->d.n / 16)))
		return ATLAS_EINVAL;
	for (size_t i = 0; i < d->d.n; i++)
		if (d->d.e[i].klen == klen && !memcmp(d->d.e[i].k, k, klen)) {
			if (d->t == JV_DICT && nest(a, d, v))
				return ATLAS_EINVAL;
			d->d.e[i].v = v;
			return 0;
		}
	return dict_append(a, d, k, klen, v);
}

static struct jval *from_json(struct jarena *a, struct json_object *j, int depth)
{
	struct jval *v;
	if (depth > ATLAS_JINJA_MAX_VALUE_DEPTH) {
		if (a->budget)
			jbudget_fail(a->budget, JOVER_VALUE_DEPTH);
		return NULL;
	}
	switch (json_object_get_type(j)) {
	case json_type_null:
		return &jv_none;
	case json_type_boolean:
		return json_object_get_boolean(j) ? &jv_true : &jv_false;
	case json_type_int:
		return jv_int(a, json_object_get_int64(j));
	case json_type_double:
		return jv_float(a, json_object_get_double(j));
	case json_type_string:
		return jv_str(a, json_object_get_string(j), (size_t)json_object_get_string_len(j));
	case json_type_array:
		if (!(v = jv_list(a)))
			return NULL;
		for (size_t i = 0; i < json_object_array_length(j); i++) {
			struct jval *x = from_json(a, json_object_array_get_idx(j, i), depth + 1);
			if (!x || jv_list_push(a, v, x))
				return NULL;
		}
		return v;
	case json_type_object:
		if (!(v = jv_dict(a, JV_DICT)))
			return NULL;
		/* json-c keys are unique: append without searching (linear time) */
		json_object_object_foreach(j, key, val) {
			struct jval *x = from_json(a, val, depth + 1);
			if (!x || dict_append(a, v, key, strlen(key), x))
				return NULL;
		}
		return v;
	}
	return &jv_none;
}

struct jval *jv_from_json(struct jarena *a, struct json_object *j)
{
	return from_json(a, j, 0);
}

bool jv_truthy(const struct jval *v)
{
	switch (v->t) {
	case JV_UNDEF:
	case JV_NONE: return false;
	case JV_BOOL: return v->b;
	case JV_INT: return v->i != 0;
	case JV_FLOAT: return v->f != 0;
	case JV_STR: return v->s.len > 0;
	case JV_LIST: return v->l.n > 0;
	case JV_DICT: return v->d.n > 0;
	default: return true;
	}
}

static bool is_num(const struct jval *v)
{
	return v->t == JV_INT || v->t == JV_FLOAT || v->t == JV_BOOL;
}

static double num(const struct jval *v)
{
	return v->t == JV_FLOAT ? v->f : v->t == JV_INT ? (double)v->i : v->b;
}

bool jv_equal(struct jbudget *bud, const struct jval *a, const struct jval *b)
{
	if (jbudget_steps(bud, 1))
		return false; /* the caller sees the budget is spent */
	if (is_num(a) && is_num(b)) {
		if (a->t != JV_FLOAT && b->t != JV_FLOAT)
			return (a->t == JV_INT ? a->i : a->b) == (b->t == JV_INT ? b->i : b->b);
		return num(a) == num(b);
	}
	if (a->t != b->t)
		return false;
	switch (a->t) {
	case JV_UNDEF:
	case JV_NONE: return true;
	case JV_STR:
		if (a->s.len != b->s.len)
			return false;
		jbudget_scan(bud, a->s.len);
		return !memcmp(a->s.s, b->s.s, a->s.len);
	case JV_LIST:
		if (a->l.n != b->l.n)
			return false;
		for (size_t i = 0; i < a->l.n; i++)
			if (!jv_equal(bud, a->l.v[i], b->l.v[i]))
				return false;
		return true;
	case JV_DICT:
		if (a->d.n != b->d.n)
			return false;
		for (size_t i = 0; i < a->d.n; i++) {
			jbudget_steps(bud, 1 + (int64_t)(b->d.n / 16));
			struct jval *o = jv_dict_get(b, a->d.e[i].k, a->d.e[i].klen);
			if (!o || !jv_equal(bud, a->d.e[i].v, o))
				return false;
		}
		return true;
	default: return a == b;
	}
}

const char *jv_type_name(const struct jval *v)
{
	static const char *const names[] = {"Undefined", "NoneType", "bool", "int", "float", "str",
		"list", "dict", "Namespace", "Macro", "function", "method"};
	return names[v->t];
}

/* Python's float repr: the shortest digits that read back the same,
 * exponent form below 1e-4 and from 1e16. */
static void fmt_float(char *out, size_t cap, double f)
{
	if (isnan(f)) {
		snprintf(out, cap, "nan");
		return;
	}
	if (isinf(f)) {
		snprintf(out, cap, f < 0 ? "-inf" : "inf");
		return;
	}
	char tmp[40];
	for (int prec = 1; prec <= 17; prec++) {
		snprintf(tmp, sizeof(tmp), "%.*e", prec - 1, f);
		if (strtod(tmp, NULL) == f)
			break;
	}
	/* tmp = [-]d[.ddd]e[+-]XX */
	char digits[24];
	int nd = 0, exp;
	const char *p = tmp;
	bool neg = *p == '-';
	if (neg)
		p++;
	for (; *p && *p != 'e'; p++)
		if (*p != '.')
			digits[nd++] = *p;
	exp = atoi(p + 1);
	while (nd > 1 && digits[nd - 1] == '0')
		nd--;
	size_t k = 0;
	if (neg)
		out[k++] = '-';
	if (exp >= -4 && exp < 16) {
		if (exp < 0) {
			out[k++] = '0';
			out[k++] = '.';
			for (int i = 0; i < -exp - 1; i++)
				out[k++] = '0';
			for (int i = 0; i < nd; i++)
				out[k++] = digits[i];
		} else {
			for (int i = 0; i <= exp; i++)
				out[k++] = i < nd ? digits[i] : '0';
			out[k++] = '.';
			if (nd > exp + 1)
				for (int i = exp + 1; i < nd; i++)
					out[k++] = digits[i];
			else
				out[k++] = '0';
		}
		out[k] = '\0';
	} else {
		out[k++] = digits[0];
		if (nd > 1) {
			out[k++] = '.';
			for (int i = 1; i < nd; i++)
				out[k++] = digits[i];
		}
		snprintf(out + k, cap - k, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
	}
}

static int write_repr_str(struct jbuf *b, const char *s, size_t len)
{
	bool has_sq = memchr(s, '\'', len) != NULL, has_dq = memchr(s, '"', len) != NULL;
	char q = has_sq && !has_dq ? '"' : '\'';
	int rc = jbuf_put(b, &q, 1);
	for (size_t i = 0; !rc && i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		char esc[8];
		if (c == '\\' || c == (unsigned char)q) {
			esc[0] = '\\';
			esc[1] = (char)c;
			rc = jbuf_put(b, esc, 2);
		} else if (c == '\n') {
			rc = jbuf_puts(b, "\\n");
		} else if (c == '\r') {
			rc = jbuf_puts(b, "\\r");
		} else if (c == '\t') {
			rc = jbuf_puts(b, "\\t");
		} else if (c < 0x20 || c == 0x7f) {
			snprintf(esc, sizeof(esc), "\\x%02x", c);
			rc = jbuf_puts(b, esc);
		} else {
			rc = jbuf_put(b, (const char *)&c, 1);
		}
	}
	return rc ? rc : jbuf_put(b, &q, 1);
}

static int write_num(struct jbuf *b, const struct jval *v, bool json)
{
	char tmp[48];
	if (v->t == JV_INT) {
		snprintf(tmp, sizeof(tmp), "%lld", (long long)v->i);
	} else {
		fmt_float(tmp, sizeof(tmp), v->f);
		if (json && isnan(v->f))
			snprintf(tmp, sizeof(tmp), "NaN");
		else if (json && isinf(v->f))
			snprintf(tmp, sizeof(tmp), v->f < 0 ? "-Infinity" : "Infinity");
	}
	return jbuf_puts(b, tmp);
}

int jv_write_repr(struct jbuf *b, const struct jval *v)
{
	int rc = 0;
	switch (v->t) {
	case JV_STR:
		return write_repr_str(b, v->s.s, v->s.len);
	case JV_LIST:
		rc = jbuf_puts(b, v->l.tuple ? "(" : "[");
		for (size_t i = 0; !rc && i < v->l.n; i++) {
			if (i)
				rc = jbuf_puts(b, ", ");
			if (!rc)
				rc = jv_write_repr(b, v->l.v[i]);
		}
		if (!rc && v->l.tuple && v->l.n == 1)
			rc = jbuf_puts(b, ",");
		return rc ? rc : jbuf_puts(b, v->l.tuple ? ")" : "]");
	case JV_DICT:
		rc = jbuf_puts(b, "{");
		for (size_t i = 0; !rc && i < v->d.n; i++) {
			if (i)
				rc = jbuf_puts(b, ", ");
			if (!rc)
				rc = write_repr_str(b, v->d.e[i].k, v->d.e[i].klen);
			if (!rc)
				rc = jbuf_puts(b, ": ");
			if (!rc)
				rc = jv_write_repr(b, v->d.e[i].v);
		}
		return rc ? rc : jbuf_puts(b, "}");
	default:
		return jv_write_str(b, v);
	}
}

int jv_write_str(struct jbuf *b, const struct jval *v)
{
	switch (v->t) {
	case JV_UNDEF: return 0;
	case JV_NONE: return jbuf_puts(b, "None");
	case JV_BOOL: return jbuf_puts(b, v->b ? "True" : "False");
	case JV_INT:
	case JV_FLOAT: return write_num(b, v, false);
	case JV_STR: return jbuf_put(b, v->s.s, v->s.len);
	case JV_LIST:
	case JV_DICT: return jv_write_repr(b, v);
	case JV_NS: return jbuf_puts(b, "<Namespace>");
	case JV_MACRO: return jbuf_puts(b, "<Macro>");
	default: return jbuf_puts(b, "<function>");
	}
}

static int write_json_str(struct jbuf *b, const char *s, size_t len)
{
	int rc = jbuf_puts(b, "\"");
	size_t run = 0; /* bytes copied as they are, flushed at each escape */
	for (size_t i = 0; !rc && i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		const char *e = NULL;
		char tmp[8];
		switch (c) {
		case '"': e = "\\\""; break;
		case '\\': e = "\\\\"; break;
		case '\n': e = "\\n"; break;
		case '\r': e = "\\r"; break;
		case '\t': e = "\\t"; break;
		case '\b': e = "\\b"; break;
		case '\f': e = "\\f"; break;
		default:
			if (c < 0x20) {
				snprintf(tmp, sizeof(tmp), "\\u%04x", c);
				e = tmp;
			}
		}
		if (!e)
			continue;
		rc = jbuf_put(b, s + run, i - run);
		if (!rc)
			rc = jbuf_puts(b, e);
		run = i + 1;
	}
	if (!rc)
		rc = jbuf_put(b, s + run, len - run);
	return rc ? rc : jbuf_puts(b, "\"");
}

static int newline_indent(struct jbuf *b, int indent, int depth)
{
	int rc = jbuf_puts(b, "\n");
	return rc ? rc : jbuf_repeat(b, " ", 1, (size_t)indent * (size_t)depth);
}

int jv_write_json(struct jbuf *b, const struct jval *v, int indent, int depth)
{
	int rc = 0;
	const char *sep = indent >= 0 ? "," : ", ";
	switch (v->t) {
	case JV_NONE: return jbuf_puts(b, "null");
	case JV_BOOL: return jbuf_puts(b, v->b ? "true" : "false");
	case JV_INT:
	case JV_FLOAT: return write_num(b, v, true);
	case JV_STR: return write_json_str(b, v->s.s, v->s.len);
	case JV_LIST:
		if (!v->l.n)
			return jbuf_puts(b, "[]");
		rc = jbuf_puts(b, "[");
		for (size_t i = 0; !rc && i < v->l.n; i++) {
			if (i)
				rc = jbuf_puts(b, sep);
			if (!rc && indent >= 0)
				rc = newline_indent(b, indent, depth + 1);
			if (!rc)
				rc = jv_write_json(b, v->l.v[i], indent, depth + 1);
		}
		if (!rc && indent >= 0)
			rc = newline_indent(b, indent, depth);
		return rc ? rc : jbuf_puts(b, "]");
	case JV_DICT:
		if (!v->d.n)
			return jbuf_puts(b, "{}");
		rc = jbuf_puts(b, "{");
		for (size_t i = 0; !rc && i < v->d.n; i++) {
			if (i)
				rc = jbuf_puts(b, sep);
			if (!rc && indent >= 0)
				rc = newline_indent(b, indent, depth + 1);
			if (!rc)
				rc = write_json_str(b, v->d.e[i].k, v->d.e[i].klen);
			if (!rc)
				rc = jbuf_puts(b, ": ");
			if (!rc)
				rc = jv_write_json(b, v->d.e[i].v, indent, depth + 1);
		}
		if (!rc && indent >= 0)
			rc = newline_indent(b, indent, depth);
		return rc ? rc : jbuf_puts(b, "}");
	default:
		return atlas_error(ATLAS_EINVAL, "Object of type %s is not JSON serializable",
				   jv_type_name(v));
	}
}

struct jval *jv_to_str(struct jarena *a, const struct jval *v)
{
	if (v->t == JV_STR)
		return (struct jval *)v;
	struct jbuf b = JBUF(a->budget);
	if (jv_write_str(&b, v)) {
		jbuf_release(&b);
		return NULL;
	}
	struct jval *s = jv_str(a, b.p ? b.p : "", b.n);
	jbuf_release(&b);
	return s;
}

size_t jv_utf8_count(const char *s, size_t len)
{
	size_t n = 0;
	for (size_t i = 0; i < len; i++)
		n += ((unsigned char)s[i] & 0xc0) != 0x80;
	return n;
}

size_t jv_utf8_offset(const char *s, size_t len, size_t i)
{
	size_t k = 0;
	for (size_t pos = 0; pos < len; pos++) {
		if (((unsigned char)s[pos] & 0xc0) != 0x80) {
			if (k == i)
				return pos;
			k++;
		}
	}
	return len;
}

static bool is_cont(char c)
{
	return ((unsigned char)c & 0xc0) == 0x80;
}

size_t jv_utf8_forward(const char *s, size_t len, size_t off, uint64_t k)
{
	for (; k > 0 && off < len; k--)
		do
			off++;
		while (off < len && is_cont(s[off]));
	return off;
}

size_t jv_utf8_back(const char *s, size_t off, uint64_t k)
{
	for (; k > 0; k--) {
		size_t p = off;
		while (p > 0 && is_cont(s[--p]))
			;
		if (is_cont(s[p]) || p == off)
			break; /* no code point before `off` */
		off = p;
	}
	return off;
}
