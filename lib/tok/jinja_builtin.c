/* jinja_builtin.c - Jinja2's filters and tests and the Python methods
 * templates call on strings, dicts and lists, with the results and
 * errors Python gives (tojson is transformers' own: json.dumps with
 * ensure_ascii=False). The parser asks atlas_jinja_has_filter/has_test
 * so an unknown name is a load-time error. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "jinja_internal.h"

/* Arguments, evaluated: positional and keyword. */
struct jargs {
	struct jval **v;  /* positional */
	size_t n;	  /* count */
	const char **kw;  /* keyword names */
	struct jval **kv; /* keyword values */
	size_t nkw;	  /* count */
};

/* Argument `i` or keyword `name`, else NULL. */
static struct jval *arg(const struct jargs *a, size_t i, const char *name)
{
	if (i < a->n)
		return a->v[i];
	for (size_t k = 0; name && k < a->nkw; k++)
		if (!strcmp(a->kw[k], name))
			return a->kv[k];
	return NULL;
}

static const struct jval *need_str(const struct jnode *at, const struct jval *v, const char *what)
{
	if (v->t == JV_UNDEF)
		return atlas_jinja_fail(at, "%s", v->s.len ? v->s.s : "value is undefined");
	if (v->t != JV_STR)
		return atlas_jinja_fail(at, "%s expects a string, got %s", what, jv_type_name(v));
	return v;
}

static bool is_space(unsigned char c)
{
	return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

/* Python str.strip family: `chars` NULL strips whitespace. */
static struct jval *strip(struct jrender *r, const struct jval *s, const struct jval *chars,
			  bool left, bool right)
{
	const char *p = s->s.s;
	size_t b = 0, e = s->s.len;
	bool set[256]; /* the bytes to strip */
	bool use_chars = chars && chars->t == JV_STR;
	for (int c = 0; c < 256; c++)
		set[c] = !use_chars && is_space((unsigned char)c);
	for (size_t i = 0; use_chars && i < chars->s.len; i++)
		set[(unsigned char)chars->s.s[i]] = true;
	if (jbudget_scan(r->bud, s->s.len + (use_chars ? chars->s.len : 0)))
		return NULL;
	while (left && b < e && set[(unsigned char)p[b]])
		b++;
	while (right && e > b && set[(unsigned char)p[e - 1]])
		e--;
	return jv_str(r->a, p + b, e - b);
}

static struct jval *case_map(struct jrender *r, const struct jval *s, int mode)
{
	struct jval *v = jv_str(r->a, s->s.s, s->s.len);
	if (!v)
		return NULL;
	char *p = (char *)v->s.s;
	bool start = true;
	for (size_t i = 0; i < v->s.len; i++) {
		unsigned char c = (unsigned char)p[i];
		switch (mode) {
		case 0: p[i] = (char)toupper(c); break;
		case 1: p[i] = (char)tolower(c); break;
		case 2: p[i] = (char)(i == 0 ? toupper(c) : tolower(c)); break; /* capitalize */
		default:							/* title */
			p[i] = (char)(start ? toupper(c) : tolower(c));
			start = !isalpha(c) && c < 0x80;
		}
	}
	return v;
}

static struct jval *replace(struct jrender *r, const struct jnode *at, const struct jval *s,
			    const struct jval *old, const struct jval *new, const struct jval *count)
{
	if (!need_str(at, old, "replace") || !need_str(at, new, "replace"))
		return NULL;
	if (!old->s.len)
		return atlas_jinja_fail(at, "replace with an empty string is not supported");
	int64_t max = count && count->t == JV_INT ? count->i : -1;
	struct jbuf b = JBUF(r->bud);
	size_t i = 0;
	int rc = jbudget_scan(r->bud, s->s.len);
	while (!rc && i <= s->s.len) {
		const char *hit = max != 0 ? memmem(s->s.s + i, s->s.len - i, old->s.s, old->s.len) : NULL;
		if (!hit) {
			rc = jbuf_put(&b, s->s.s + i, s->s.len - i);
			break;
		}
		rc = jbuf_put(&b, s->s.s + i, (size_t)(hit - s->s.s) - i);
		if (!rc)
			rc = jbuf_put(&b, new->s.s, new->s.len);
		i = (size_t)(hit - s->s.s) + old->s.len;
		max--;
	}
	struct jval *v = rc ? NULL : jv_str(r->a, b.p ? b.p : "", b.n);
	jbuf_release(&b);
	return v;
}

/* Python str.split / rsplit. */
static struct jval *split(struct jrender *r, const struct jnode *at, const struct jval *s,
			  const struct jval *sep, const struct jval *maxsplit, bool from_right)
{
	struct jval *l = jv_list(r->a);
	int64_t max = maxsplit && maxsplit->t == JV_INT ? maxsplit->i : -1;
	const char *p = s->s.s;
	size_t n = s->s.len;
	if (!l || jbudget_scan(r->bud, n))
		return NULL;
	if (sep && sep->t != JV_NONE) {
		if (!need_str(at, sep, "split"))
			return NULL;
		if (!sep->s.len)
			return atlas_jinja_fail(at, "empty separator");
		/* rsplit with maxsplit keeps the first cuts inside the first piece:
		 * count the cuts first and skip that many */
		size_t nc = 0, skip = 0;
		for (size_t i = 0; from_right && max >= 0 && i + sep->s.len <= n; nc++) {
			const char *h = memmem(p + i, n - i, sep->s.s, sep->s.len);
			if (!h)
				break;
			i = (size_t)(h - p) + sep->s.len;
		}
		if (from_right && max >= 0 && (uint64_t)max < nc)
			skip = nc - (size_t)max;
		size_t start = 0, i = 0;
		for (size_t k = 0; i + sep->s.len <= n && (max < 0 || k < skip + (uint64_t)max);
		     k++) {
			const char *h = memmem(p + i, n - i, sep->s.s, sep->s.len);
			if (!h)
				break;
			i = (size_t)(h - p) + sep->s.len;
			if (k < skip)
				continue;
			if (jv_list_push(r->a, l, jv_str(r->a, p + start, (size_t)(h - p) - start)))
				return NULL;
			start = i;
		}
		if (jv_list_push(r->a, l, jv_str(r->a, p + start, n - start)))
			return NULL;
		return l;
	}
	/* whitespace runs; leading/trailing whitespace yields no empty items */
	size_t i = 0;
	while (i < n) {
		while (i < n && is_space((unsigned char)p[i]))
			i++;
		if (i >= n)
			break;
		size_t j = i;
		if (max == 0) {
			j = n;
			while (j > i && is_space((unsigned char)p[j - 1]))
				j--;
		} else {
			while (j < n && !is_space((unsigned char)p[j]))
				j++;
		}
		if (jv_list_push(r->a, l, jv_str(r->a, p + i, j - i)))
			return NULL;
		if (max > 0)
			max--;
		i = j;
	}
	return l;
}

static int affix(struct jrender *r, const struct jnode *at, const struct jval *s,
		 const struct jval *x, bool end)
{
	if (jbudget_steps(r->bud, 1))
		return -1;
	if (x->t == JV_LIST) {
		for (size_t i = 0; i < x->l.n; i++) {
			int m = affix(r, at, s, x->l.v[i], end);
			if (m)
				return m;
		}
		return 0;
	}
	if (x->t != JV_STR) {
		atlas_jinja_fail(at, "%s first arg must be str or a tuple of str, not %s",
				 end ? "endswith" : "startswith", jv_type_name(x));
		return -1;
	}
	if (x->s.len > s->s.len)
		return 0;
	if (jbudget_scan(r->bud, x->s.len))
		return -1;
	return !memcmp(s->s.s + (end ? s->s.len - x->s.len : 0), x->s.s, x->s.len);
}

static struct jval *length(struct jrender *r, const struct jnode *at, const struct jval *v)
{
	switch (v->t) {
	case JV_UNDEF: return jv_int(r->a, 0);
	case JV_STR:
		if (jbudget_scan(r->bud, v->s.len))
			return NULL;
		return jv_int(r->a, (int64_t)jv_utf8_count(v->s.s, v->s.len));
	case JV_LIST: return jv_int(r->a, (int64_t)v->l.n);
	case JV_DICT:
	case JV_NS: return jv_int(r->a, (int64_t)v->d.n);
	default: return atlas_jinja_fail(at, "object of type '%s' has no len()", jv_type_name(v));
	}
}

/* list(v): the items a loop would see. */
static struct jval *as_list(struct jrender *r, const struct jnode *at, const struct jval *v)
{
	struct jval *l = jv_list(r->a);
	if (!l)
		return NULL;
	switch (v->t) {
	case JV_UNDEF: return l;
	case JV_LIST:
		for (size_t i = 0; i < v->l.n; i++)
			if (jv_list_push(r->a, l, v->l.v[i]))
				return NULL;
		return l;
	case JV_DICT:
	case JV_NS:
		for (size_t i = 0; i < v->d.n; i++)
			if (jv_list_push(r->a, l, jv_str(r->a, v->d.e[i].k, v->d.e[i].klen)))
				return NULL;
		return l;
	case JV_STR:
		for (size_t o = jv_utf8_offset(v->s.s, v->s.len, 0), e; o < v->s.len; o = e) {
			e = jv_utf8_forward(v->s.s, v->s.len, o, 1);
			if (jv_list_push(r->a, l, jv_str(r->a, v->s.s + o, e - o)))
				return NULL;
		}
		return l;
	default: return atlas_jinja_fail(at, "'%s' object is not iterable", jv_type_name(v));
	}
}

static struct jval *pairs(struct jrender *r, const struct jnode *at, const struct jval *v)
{
	struct jval *l = jv_list(r->a);
	if (!l)
		return NULL;
	if (v->t == JV_UNDEF)
		return l;
	if (v->t != JV_DICT && v->t != JV_NS)
		return atlas_jinja_fail(at, "can only get item pairs from a mapping");
	for (size_t i = 0; i < v->d.n; i++) {
		struct jval *p = jv_list(r->a);
		if (p)
			p->l.tuple = true;
		if (!p || jv_list_push(r->a, p, jv_str(r->a, v->d.e[i].k, v->d.e[i].klen)) ||
		    jv_list_push(r->a, p, v->d.e[i].v) || jv_list_push(r->a, l, p))
			return NULL;
	}
	return l;
}

/* Attribute path "a.b" of an item, as selectattr/map(attribute=) use it. */
static struct jval *attr_path(struct jrender *r, struct jval *v, const struct jval *path)
{
	const char *p = path->s.s, *end = p + path->s.len;
	while (v && p < end) {
		const char *dot = memchr(p, '.', (size_t)(end - p));
		size_t n = dot ? (size_t)(dot - p) : (size_t)(end - p);
		if (v->t == JV_LIST && n > 0 && isdigit((unsigned char)*p)) {
			size_t i = (size_t)strtoull(p, NULL, 10);
			v = i < v->l.n ? v->l.v[i] : &jv_undef;
		} else if (v->t == JV_UNDEF) {
			return v;
		} else {
			v = atlas_jinja_getattr(r, v, p, n);
		}
		p += n + (dot != NULL);
	}
	return v;
}

static struct jval *apply_filter(struct jrender *r, const struct jnode *at, const char *name,
				 struct jval *v, struct jargs *a);

/* select / reject / selectattr / rejectattr */
static struct jval *select_items(struct jrender *r, const struct jnode *at, struct jval *v,
				 struct jargs *a, bool by_attr, bool keep)
{
	struct jval *items = as_list(r, at, v), *out = jv_list(r->a);
	size_t t0 = by_attr ? 1 : 0;
	struct jval *attr = by_attr ? arg(a, 0, NULL) : NULL;
	struct jval *test = arg(a, t0, NULL);
	if (!items || !out)
		return NULL;
	if (by_attr && (!attr || attr->t != JV_STR))
		return atlas_jinja_fail(at, "selectattr needs an attribute name");
	if (test && test->t != JV_STR)
		return atlas_jinja_fail(at, "the test name must be a string");
	if (test && !atlas_jinja_has_test(test->s.s))
		return atlas_jinja_fail(at, "unknown test '%s'", test->s.s);
	for (size_t i = 0; i < items->l.n; i++) {
		if (jbudget_steps(r->bud, 1))
			return NULL;
		struct jval *x = by_attr ? attr_path(r, items->l.v[i], attr) : items->l.v[i];
		int ok;
		if (!x)
			return NULL;
		if (test)
			ok = atlas_jinja_test(r, at, test->s.s, x, a->v + t0 + 1,
					      a->n > t0 + 1 ? a->n - t0 - 1 : 0);
		else
			ok = jv_truthy(x);
		if (ok < 0)
			return NULL;
		if ((ok != 0) == keep && jv_list_push(r->a, out, items->l.v[i]))
			return NULL;
	}
	return out;
}

static struct jval *map_items(struct jrender *r, const struct jnode *at, struct jval *v,
			      struct jargs *a)
{
	struct jval *items = as_list(r, at, v), *out = jv_list(r->a);
	struct jval *attr = arg(a, SIZE_MAX, "attribute"), *dflt = arg(a, SIZE_MAX, "default");
	if (!items || !out)
		return NULL;
	for (size_t i = 0; i < items->l.n; i++) {
		struct jval *x;
		if (jbudget_steps(r->bud, 1))
			return NULL;
		if (attr) {
			if (attr->t != JV_STR)
				return atlas_jinja_fail(at, "map attribute must be a string");
			x = attr_path(r, items->l.v[i], attr);
			if (x && x->t == JV_UNDEF && dflt)
				x = dflt;
		} else {
			struct jval *fname = arg(a, 0, NULL);
			if (!fname || fname->t != JV_STR || !atlas_jinja_has_filter(fname->s.s))
				return atlas_jinja_fail(at, "map needs a filter name or attribute=");
			struct jargs rest = {a->v + 1, a->n - 1, a->kw, a->kv, a->nkw};
			/* map('map', 'map', ...) recurses once per argument */
			if (r->depth >= ATLAS_JINJA_MAX_EVAL_DEPTH) {
				jbudget_fail(r->bud, JOVER_EVAL_DEPTH);
				return NULL;
			}
			r->depth++;
			x = apply_filter(r, at, fname->s.s, items->l.v[i], &rest);
			r->depth--;
		}
		if (!x || jv_list_push(r->a, out, x))
			return NULL;
	}
	return out;
}

/* <0 / 0 / >0 ordering for sort; strings case-folded unless case_sensitive. */
static int sort_cmp(struct jbudget *bud, const struct jval *x, const struct jval *y, bool cs)
{
	jbudget_steps(bud, 1); /* the sort loops check the budget */
	if (x->t == JV_STR && y->t == JV_STR) {
		size_t n = x->s.len < y->s.len ? x->s.len : y->s.len;
		for (size_t i = 0; i < n; i++) {
			int a = (unsigned char)x->s.s[i], b = (unsigned char)y->s.s[i];
			if (!cs) {
				a = tolower(a);
				b = tolower(b);
			}
			if (a != b) {
				jbudget_scan(bud, i);
				return a - b;
			}
		}
		jbudget_scan(bud, n);
		return (x->s.len > y->s.len) - (x->s.len < y->s.len);
	}
	double a = x->t == JV_FLOAT ? x->f : x->t == JV_INT ? (double)x->i : x->t == JV_BOOL ? x->b : 0;
	double b = y->t == JV_FLOAT ? y->f : y->t == JV_INT ? (double)y->i : y->t == JV_BOOL ? y->b : 0;
	return (a > b) - (a < b);
}

/* One item of a sort and its key. */
struct sort_item {
	struct jval *v;	  /* the item */
	struct jval *key; /* what is compared: the item or its attribute */
};

/* Stable merge sort of it[0..n) (tmp: n more), O(n log n) comparisons. */
static void merge_sort(struct jbudget *bud, struct sort_item *it, struct sort_item *tmp, size_t n,
		       bool desc, bool cs)
{
	if (n < 2 || bud->over)
		return;
	size_t h = n / 2;
	merge_sort(bud, it, tmp, h, desc, cs);
	merge_sort(bud, it + h, tmp, n - h, desc, cs);
	size_t i = 0, j = h, k = 0;
	while (i < h && j < n) {
		int c = sort_cmp(bud, it[i].key, it[j].key, cs);
		/* the right item goes first only when strictly before: stable */
		tmp[k++] = (desc ? c < 0 : c > 0) ? it[j++] : it[i++];
	}
	while (i < h)
		tmp[k++] = it[i++];
	while (j < n)
		tmp[k++] = it[j++];
	memcpy(it, tmp, n * sizeof(*it));
}

static struct jval *sort_items(struct jrender *r, const struct jnode *at, struct jval *v,
			       struct jargs *a)
{
	struct jval *l = as_list(r, at, v);
	struct jval *rev = arg(a, 0, "reverse"), *cs = arg(a, 1, "case_sensitive");
	struct jval *attr = arg(a, 2, "attribute");
	if (!l)
		return NULL;
	if (attr && attr->t != JV_STR)
		return atlas_jinja_fail(at, "sort attribute must be a string");
	bool desc = rev && jv_truthy(rev), sens = cs && jv_truthy(cs);
	size_t n = l->l.n;
	struct sort_item *it = jarena_alloc(r->a, (2 * n + 1) * sizeof(*it));
	if (!it)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		it[i].v = l->l.v[i];
		if (!(it[i].key = attr ? attr_path(r, it[i].v, attr) : it[i].v))
			return NULL;
	}
	merge_sort(r->bud, it, it + n, n, desc, sens);
	if (r->bud->over)
		return NULL;
	for (size_t i = 0; i < n; i++)
		l->l.v[i] = it[i].v;
	return l;
}

static struct jval *join(struct jrender *r, const struct jnode *at, struct jval *v, struct jargs *a)
{
	struct jval *items = as_list(r, at, v);
	struct jval *sep = arg(a, 0, "d"), *attr = arg(a, 1, "attribute");
	struct jbuf b = JBUF(r->bud);
	int rc = 0;
	if (!items)
		return NULL;
	for (size_t i = 0; !rc && i < items->l.n; i++) {
		struct jval *x = attr ? attr_path(r, items->l.v[i], attr) : items->l.v[i];
		if (!x || jbudget_steps(r->bud, 1)) {
			jbuf_release(&b);
			return NULL;
		}
		if (i && sep)
			rc = jv_write_str(&b, sep);
		if (!rc)
			rc = jv_write_str(&b, x);
	}
	struct jval *s = rc ? NULL : jv_str(r->a, b.p ? b.p : "", b.n);
	jbuf_release(&b);
	return s;
}

static struct jval *tojson(struct jrender *r, const struct jnode *at, struct jval *v,
			   struct jargs *a)
{
	struct jval *ind = arg(a, 1, "indent");
	struct jbuf b = JBUF(r->bud);
	if (!ind && a->n == 1 && a->v[0]->t == JV_INT)
		ind = a->v[0]; /* tojson(2) */
	/* an indent past the output limit fails on writing anyway */
	int indent = ind && ind->t == JV_INT ? (ind->i > 1 << 20 ? 1 << 20 : (int)ind->i) : -1;
	if (ind && ind->t == JV_INT && ind->i < 0)
		indent = -1;
	if (jv_write_json(&b, v, indent, 0)) {
		jbuf_release(&b);
		return r->bud->over ? NULL : atlas_jinja_fail(at, "tojson: %s", atlas_errmsg());
	}
	struct jval *s = jv_str(r->a, b.p ? b.p : "", b.n);
	jbuf_release(&b);
	return s;
}

static struct jval *indent(struct jrender *r, struct jval *v, struct jargs *a)
{
	struct jval *w = arg(a, 0, "width"), *first = arg(a, 1, "first"), *blank = arg(a, 2, "blank");
	struct jval *s = jv_to_str(r->a, v);
	struct jbuf pad = JBUF(r->bud), b = JBUF(r->bud);
	int rc = 0;
	if (!s)
		return NULL;
	if (w && w->t == JV_STR)
		rc = jbuf_put(&pad, w->s.s, w->s.len);
	else /* a width that is no int is 4, as before */
		rc = jbuf_repeat(&pad, " ", 1,
				 w && w->t == JV_INT ? (w->i > 0 ? (size_t)w->i : 0) : 4);
	size_t i = 0;
	bool firstline = true;
	while (!rc && i <= s->s.len) {
		const char *nl = memchr(s->s.s + i, '\n', s->s.len - i);
		size_t e = nl ? (size_t)(nl - s->s.s) : s->s.len;
		bool empty = e == i;
		if ((!firstline || (first && jv_truthy(first))) && (!empty || (blank && jv_truthy(blank))))
			rc = jbuf_put(&b, pad.p ? pad.p : "", pad.n);
		if (!rc)
			rc = jbuf_put(&b, s->s.s + i, e - i + (nl != NULL));
		firstline = false;
		if (!nl)
			break;
		i = e + 1;
	}
	struct jval *out = rc ? NULL : jv_str(r->a, b.p ? b.p : "", b.n);
	jbuf_release(&pad);
	jbuf_release(&b);
	return out;
}

/* int(x) of a float: NaN is no number (the default); past int64_t, an
 * error where Python would make a big integer. */
static struct jval *float_to_int(struct jrender *r, const struct jnode *at, double x,
				 struct jval *d)
{
	if (isnan(x))
		return d ? d : jv_int(r->a, 0);
	if (!(x >= -9223372036854775808.0 && x < 9223372036854775808.0)) /* [-2^63, 2^63) */
		return atlas_jinja_fail(at, "integer overflow in 'int'");
	return jv_int(r->a, (int64_t)x);
}

static struct jval *to_int(struct jrender *r, const struct jnode *at, struct jval *v,
			   struct jargs *a, bool flt)
{
	struct jval *d = arg(a, 0, "default");
	switch (v->t) {
	case JV_INT: return flt ? jv_float(r->a, (double)v->i) : v;
	case JV_BOOL: return flt ? jv_float(r->a, v->b) : jv_int(r->a, v->b);
	case JV_FLOAT:
		return flt ? v : float_to_int(r, at, v->f, d);
	case JV_STR: {
		char *end;
		if (jbudget_scan(r->bud, v->s.len))
			return NULL;
		double x = strtod(v->s.s, &end);
		if (end != v->s.s) {
			while (is_space((unsigned char)*end))
				end++;
			if (!*end)
				return flt ? jv_float(r->a, x) : float_to_int(r, at, x, d);
		}
		break;
	}
	default: break;
	}
	return d ? d : flt ? jv_float(r->a, 0) : jv_int(r->a, 0);
}

static struct jval *apply_filter(struct jrender *r, const struct jnode *at, const char *name,
				 struct jval *v, struct jargs *a)
{
	struct jval *s;
	if (!strcmp(name, "tojson"))
		return tojson(r, at, v, a);
	if (!strcmp(name, "trim"))
		return (s = jv_to_str(r->a, v)) ? strip(r, s, arg(a, 0, "chars"), true, true) : NULL;
	if (!strcmp(name, "length") || !strcmp(name, "count"))
		return length(r, at, v);
	if (!strcmp(name, "join"))
		return join(r, at, v, a);
	if (!strcmp(name, "selectattr") || !strcmp(name, "rejectattr"))
		return select_items(r, at, v, a, true, name[0] == 's');
	if (!strcmp(name, "select") || !strcmp(name, "reject"))
		return select_items(r, at, v, a, false, name[0] == 's');
	if (!strcmp(name, "map"))
		return map_items(r, at, v, a);
	if (!strcmp(name, "items"))
		return pairs(r, at, v);
	if (!strcmp(name, "dictsort")) {
		struct jargs none = {0};
		struct jval *p = pairs(r, at, v);
		struct jval path = {.t = JV_STR, .s = {"0", 1}};
		struct jval *args[] = {&jv_false, &jv_false, &path};
		none.v = args;
		none.n = 3;
		return p ? sort_items(r, at, p, &none) : NULL;
	}
	if (!strcmp(name, "list"))
		return as_list(r, at, v);
	if (!strcmp(name, "first") || !strcmp(name, "last")) {
		struct jval *l = as_list(r, at, v);
		if (!l)
			return NULL;
		if (!l->l.n)
			return &jv_undef;
		return l->l.v[name[0] == 'f' ? 0 : l->l.n - 1];
	}
	if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "capitalize") ||
	    !strcmp(name, "title"))
		return (s = jv_to_str(r->a, v))
			       ? case_map(r, s, name[0] == 'u' ? 0 : name[0] == 'l' ? 1 : name[0] == 'c' ? 2 : 3)
			       : NULL;
	if (!strcmp(name, "replace")) {
		struct jval *o = arg(a, 0, "old"), *n = arg(a, 1, "new");
		if (!o || !n)
			return atlas_jinja_fail(at, "replace needs two arguments");
		return (s = jv_to_str(r->a, v)) ? replace(r, at, s, o, n, arg(a, 2, "count")) : NULL;
	}
	if (!strcmp(name, "default") || !strcmp(name, "d")) {
		struct jval *d = arg(a, 0, "default_value"), *b = arg(a, 1, "boolean");
		bool use = v->t == JV_UNDEF || (b && jv_truthy(b) && !jv_truthy(v));
		return use ? (d ? d : jv_str(r->a, "", 0)) : v;
	}
	if (!strcmp(name, "string"))
		return jv_to_str(r->a, v);
	if (!strcmp(name, "int") || !strcmp(name, "float"))
		return to_int(r, at, v, a, name[0] == 'f');
	if (!strcmp(name, "safe"))
		return v;
	if (!strcmp(name, "abs")) {
		if (v->t == JV_INT && v->i == INT64_MIN)
			return atlas_jinja_fail(at, "integer overflow in 'abs'");
		if (v->t == JV_INT)
			return jv_int(r->a, v->i < 0 ? -v->i : v->i);
		if (v->t == JV_FLOAT)
			return jv_float(r->a, fabs(v->f));
		return atlas_jinja_fail(at, "bad operand type for abs(): '%s'", jv_type_name(v));
	}
	if (!strcmp(name, "unique")) {
		struct jval *l = as_list(r, at, v), *out = jv_list(r->a);
		if (!l || !out)
			return NULL;
		for (size_t i = 0; i < l->l.n; i++) {
			bool seen = false;
			for (size_t j = 0; j < out->l.n && !seen; j++)
				seen = l->l.v[i]->t == JV_STR && out->l.v[j]->t == JV_STR
					   ? sort_cmp(r->bud, l->l.v[i], out->l.v[j], false) == 0
					   : jv_equal(r->bud, l->l.v[i], out->l.v[j]);
			if (r->bud->over || (!seen && jv_list_push(r->a, out, l->l.v[i])))
				return NULL;
		}
		return out;
	}
	if (!strcmp(name, "reverse")) {
		struct jval *l = as_list(r, at, v);
		if (!l)
			return NULL;
		for (size_t i = 0; i < l->l.n / 2; i++) {
			struct jval *t = l->l.v[i];
			l->l.v[i] = l->l.v[l->l.n - 1 - i];
			l->l.v[l->l.n - 1 - i] = t;
		}
		if (v->t != JV_STR)
			return l;
		struct jargs none = {0};
		return join(r, at, l, &none);
	}
	if (!strcmp(name, "sort"))
		return sort_items(r, at, v, a);
	if (!strcmp(name, "indent"))
		return indent(r, v, a);
	if (!strcmp(name, "attr")) {
		struct jval *n = arg(a, 0, NULL);
		if (!n || n->t != JV_STR)
			return atlas_jinja_fail(at, "attr needs a name");
		return atlas_jinja_getattr(r, v, n->s.s, n->s.len);
	}
	if (!strcmp(name, "sum")) {
		struct jval *l = as_list(r, at, v), *acc = arg(a, 1, "start");
		struct jval *attr = arg(a, 0, "attribute");
		int64_t i = 0;
		double f = acc && acc->t == JV_FLOAT ? acc->f : 0;
		bool flt = acc && acc->t == JV_FLOAT;
		if (acc && acc->t == JV_INT)
			i = acc->i;
		for (size_t k = 0; l && k < l->l.n; k++) {
			struct jval *x = attr ? attr_path(r, l->l.v[k], attr) : l->l.v[k];
			if (!x || jbudget_steps(r->bud, 1))
				return NULL;
			if (x->t == JV_FLOAT) {
				flt = true;
				f += x->f;
			} else if (x->t == JV_INT || x->t == JV_BOOL) {
				if (__builtin_add_overflow(i, x->t == JV_INT ? x->i : x->b, &i))
					return atlas_jinja_fail(at, "integer overflow in 'sum'");
			} else {
				return atlas_jinja_fail(at, "sum of non-numbers");
			}
		}
		return l ? (flt ? jv_float(r->a, f + (double)i) : jv_int(r->a, i)) : NULL;
	}
	return atlas_jinja_fail(at, "unknown filter '%s'", name);
}

static const char *const filters[] = {"tojson", "trim", "length", "count", "join", "selectattr",
	"rejectattr", "select", "reject", "map", "items", "dictsort", "list", "first", "last",
	"upper", "lower", "capitalize", "title", "replace", "default", "d", "string", "int",
	"float", "safe", "abs", "unique", "reverse", "sort", "indent", "attr", "sum", NULL};

bool atlas_jinja_has_filter(const char *name)
{
	for (int i = 0; filters[i]; i++)
		if (!strcmp(filters[i], name))
			return true;
	return false;
}

struct jval *atlas_jinja_filter(struct jrender *r, struct jframe *f, const struct jnode *n,
				struct jval *v)
{
	struct jargs a = {.n = n->nargs, .kw = n->kw, .nkw = n->nkw};
	a.v = jarena_alloc(r->a, (n->nargs + 1) * sizeof(*a.v));
	a.kv = jarena_alloc(r->a, (n->nkw + 1) * sizeof(*a.kv));
	if (!a.v || !a.kv)
		return atlas_jinja_fail(n, "out of memory");
	for (size_t i = 0; i < n->nargs; i++)
		if (!(a.v[i] = atlas_jinja_eval(r, f, n->args[i])))
			return NULL;
	for (size_t i = 0; i < n->nkw; i++)
		if (!(a.kv[i] = atlas_jinja_eval(r, f, n->kwv[i])))
			return NULL;
	return apply_filter(r, n, n->s, v, &a);
}

/* --- tests ------------------------------------------------------------------ */

static const char *const tests[] = {"defined", "undefined", "none", "string", "mapping",
	"iterable", "number", "integer", "float", "sequence", "boolean", "false", "true",
	"callable", "equalto", "eq", "==", "ne", "!=", "lt", "<", "gt", ">", "in", "odd", "even",
	"divisibleby", "sameas", "lower", "upper", NULL};

bool atlas_jinja_has_test(const char *name)
{
	for (int i = 0; tests[i]; i++)
		if (!strcmp(tests[i], name))
			return true;
	return false;
}

int atlas_jinja_test(struct jrender *r, const struct jnode *at, const char *name,
		     struct jval *v, struct jval **args, size_t nargs)
{
	enum jtype t = v->t;
	struct jval *x = nargs ? args[0] : NULL;
	if (!strcmp(name, "defined"))
		return t != JV_UNDEF;
	if (!strcmp(name, "undefined"))
		return t == JV_UNDEF;
	if (!strcmp(name, "none"))
		return t == JV_NONE;
	if (!strcmp(name, "string"))
		return t == JV_STR;
	if (!strcmp(name, "mapping"))
		return t == JV_DICT;
	if (!strcmp(name, "iterable"))
		return t == JV_STR || t == JV_LIST || t == JV_DICT || t == JV_UNDEF;
	if (!strcmp(name, "sequence"))
		return t == JV_STR || t == JV_LIST || t == JV_DICT || t == JV_UNDEF;
	if (!strcmp(name, "number"))
		return t == JV_INT || t == JV_FLOAT || t == JV_BOOL;
	if (!strcmp(name, "integer"))
		return t == JV_INT;
	if (!strcmp(name, "float"))
		return t == JV_FLOAT;
	if (!strcmp(name, "boolean"))
		return t == JV_BOOL;
	if (!strcmp(name, "false"))
		return t == JV_BOOL && !v->b;
	if (!strcmp(name, "true"))
		return t == JV_BOOL && v->b;
	if (!strcmp(name, "callable"))
		return t == JV_MACRO || t == JV_FUNC || t == JV_METHOD;
	if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
		if (t != JV_STR)
			return 0;
		if (jbudget_scan(r->bud, v->s.len))
			return ATLAS_EINVAL;
		bool any = false;
		for (size_t i = 0; i < v->s.len; i++) {
			unsigned char c = (unsigned char)v->s.s[i];
			if (name[0] == 'l' ? isupper(c) : islower(c))
				return 0;
			any |= isalpha(c) != 0;
		}
		return any;
	}
	if (!strcmp(name, "odd") || !strcmp(name, "even") || !strcmp(name, "divisibleby")) {
		if (t != JV_INT || (name[0] == 'd' && (!x || x->t != JV_INT || x->i == 0))) {
			atlas_jinja_fail(at, "test '%s' needs integers", name);
			return ATLAS_EINVAL;
		}
		if (name[0] == 'd') /* x == -1 first: INT64_MIN % -1 traps in C */
			return x->i == -1 || v->i % x->i == 0;
		return (v->i % 2 != 0) == (name[0] == 'o');
	}
	if (!x) {
		atlas_jinja_fail(at, "test '%s' needs an argument", name);
		return ATLAS_EINVAL;
	}
	if (!strcmp(name, "equalto") || !strcmp(name, "eq") || !strcmp(name, "==") ||
	    !strcmp(name, "ne") || !strcmp(name, "!=")) {
		bool eq = jv_equal(r->bud, v, x);
		if (r->bud->over)
			return ATLAS_EINVAL;
		return eq == (name[0] == 'e' || name[0] == '=');
	}
	if (!strcmp(name, "sameas"))
		return v == x || (t == x->t && (t == JV_NONE || (t == JV_BOOL && v->b == x->b)));
	if (!strcmp(name, "in")) {
		if (x->t == JV_LIST) {
			for (size_t i = 0; i < x->l.n; i++)
				if (jv_equal(r->bud, v, x->l.v[i]))
					return 1;
			return r->bud->over ? ATLAS_EINVAL : 0;
		}
		if (x->t == JV_STR && t == JV_STR) {
			if (jbudget_scan(r->bud, x->s.len))
				return ATLAS_EINVAL;
			return memmem(x->s.s, x->s.len, v->s.s, v->s.len) != NULL || !v->s.len;
		}
		if (x->t == JV_DICT && t == JV_STR) {
			if (jbudget_steps(r->bud, 1 + (int64_t)(x->d.n / 16)))
				return ATLAS_EINVAL;
			return jv_dict_get(x, v->s.s, v->s.len) != NULL;
		}
		return 0;
	}
	/* lt / gt: numbers and strings */
	bool lt = name[0] == 'l' || name[0] == '<';
	if ((t == JV_INT || t == JV_FLOAT) && (x->t == JV_INT || x->t == JV_FLOAT)) {
		double p = t == JV_INT ? (double)v->i : v->f, q = x->t == JV_INT ? (double)x->i : x->f;
		return lt ? p < q : p > q;
	}
	if (t == JV_STR && x->t == JV_STR) {
		if (jbudget_scan(r->bud, v->s.len < x->s.len ? v->s.len : x->s.len))
			return ATLAS_EINVAL;
		int c = strcmp(v->s.s, x->s.s);
		return lt ? c < 0 : c > 0;
	}
	atlas_jinja_fail(at, "test '%s' cannot compare %s and %s", name, jv_type_name(v),
			 jv_type_name(x));
	return ATLAS_EINVAL;
}

/* --- attributes and methods --------------------------------------------- */

static const char *const str_methods[] = {"startswith", "endswith", "split", "rsplit", "strip",
	"lstrip", "rstrip", "replace", "upper", "lower", "title", "capitalize", "find", "count",
	"join", "isdigit", "isalpha", "isspace", "splitlines", NULL};
static const char *const dict_methods[] = {"get", "items", "keys", "values", NULL};
static const char *const list_methods[] = {"index", "count", "append", "pop", "insert",
	"extend", "remove", "clear", "sort", "reverse", NULL};

static const char *find_name(const char *const *names, const char *s, size_t len)
{
	for (int i = 0; names[i]; i++)
		if (strlen(names[i]) == len && !memcmp(names[i], s, len))
			return names[i];
	return NULL;
}

struct jval *atlas_jinja_getattr(struct jrender *r, struct jval *v, const char *name, size_t len)
{
	const char *m = NULL;
	if (v->t == JV_STR)
		m = find_name(str_methods, name, len);
	else if (v->t == JV_DICT)
		m = find_name(dict_methods, name, len);
	else if (v->t == JV_LIST)
		m = find_name(list_methods, name, len);
	if (m) {
		struct jval *b = jv_dict(r->a, JV_METHOD);
		if (b) {
			b->m.self = v;
			b->m.name = m;
		}
		return b;
	}
	if (v->t == JV_DICT || v->t == JV_NS) {
		if (jbudget_steps(r->bud, 1 + (int64_t)(v->d.n / 16)))
			return NULL;
		struct jval *x = jv_dict_get(v, name, len);
		if (x)
			return x;
	}
	char msg[200];
	snprintf(msg, sizeof(msg), "'%s object' has no attribute '%.*s'",
		 v->t == JV_DICT ? "dict" : v->t == JV_NONE ? "None" : jv_type_name(v), (int)len, name);
	struct jval *u = jv_strz(r->a, msg);
	if (u)
		u->t = JV_UNDEF;
	return u;
}

static struct jval *str_method(struct jrender *r, const struct jnode *at, struct jval *s,
			       const char *name, struct jargs *a)
{
	struct jval *x = arg(a, 0, NULL);
	if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
		if (!x)
			return atlas_jinja_fail(at, "%s() takes at least 1 argument", name);
		int m = affix(r, at, s, x, name[0] == 'e');
		return m < 0 ? NULL : m ? &jv_true : &jv_false;
	}
	if (!strcmp(name, "split") || !strcmp(name, "rsplit"))
		return split(r, at, s, arg(a, 0, "sep"), arg(a, 1, "maxsplit"), name[0] == 'r');
	if (!strcmp(name, "strip"))
		return strip(r, s, x, true, true);
	if (!strcmp(name, "lstrip"))
		return strip(r, s, x, true, false);
	if (!strcmp(name, "rstrip"))
		return strip(r, s, x, false, true);
	if (!strcmp(name, "replace")) {
		if (a->n < 2)
			return atlas_jinja_fail(at, "replace() takes at least 2 arguments");
		return replace(r, at, s, a->v[0], a->v[1], arg(a, 2, "count"));
	}
	if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "capitalize") ||
	    !strcmp(name, "title"))
		return case_map(r, s, name[0] == 'u' ? 0 : name[0] == 'l' ? 1 : name[0] == 'c' ? 2 : 3);
	if (!strcmp(name, "find") || !strcmp(name, "count")) {
		if (!x || !need_str(at, x, name))
			return x ? NULL : atlas_jinja_fail(at, "%s() takes 1 argument", name);
		if (jbudget_scan(r->bud, s->s.len))
			return NULL;
		if (name[0] == 'f') {
			const char *h = memmem(s->s.s, s->s.len, x->s.s, x->s.len);
			return jv_int(r->a, h ? (int64_t)jv_utf8_count(s->s.s, (size_t)(h - s->s.s)) : -1);
		}
		int64_t c = 0;
		for (size_t i = 0; x->s.len && i + x->s.len <= s->s.len;) {
			const char *h = memmem(s->s.s + i, s->s.len - i, x->s.s, x->s.len);
			if (!h)
				break;
			c++;
			i = (size_t)(h - s->s.s) + x->s.len;
		}
		return jv_int(r->a, c);
	}
	if (!strcmp(name, "join")) {
		struct jargs sep = {.v = &s, .n = 1};
		return x ? join(r, at, x, &sep) : atlas_jinja_fail(at, "join() takes 1 argument");
	}
	if (!strcmp(name, "splitlines")) {
		struct jval nl = {.t = JV_STR, .s = {"\n", 1}};
		struct jval *l = split(r, at, s, &nl, NULL, false);
		if (l && l->l.n && !l->l.v[l->l.n - 1]->s.len)
			l->l.n--;
		return l;
	}
	bool all = s->s.len > 0;
	if (jbudget_scan(r->bud, s->s.len))
		return NULL;
	for (size_t i = 0; i < s->s.len; i++) {
		unsigned char c = (unsigned char)s->s.s[i];
		all &= name[2] == 'd' ? isdigit(c) != 0 : name[2] == 'a' ? isalpha(c) != 0
									: is_space(c);
	}
	return all ? &jv_true : &jv_false;
}

struct jval *atlas_jinja_method(struct jrender *r, const struct jnode *at, struct jval *self,
				const char *name, struct jval **args, size_t nargs,
				const char **kw, struct jval **kwv, size_t nkw)
{
	struct jargs a = {args, nargs, kw, kwv, nkw};
	if (self->t == JV_STR)
		return str_method(r, at, self, name, &a);
	if (self->t == JV_DICT) {
		if (!strcmp(name, "get")) {
			struct jval *k = arg(&a, 0, NULL), *d = arg(&a, 1, NULL);
			if (!k)
				return atlas_jinja_fail(at, "get expected at least 1 argument");
			if (jbudget_steps(r->bud, 1 + (int64_t)(self->d.n / 16)))
				return NULL;
			struct jval *v = k->t == JV_STR ? jv_dict_get(self, k->s.s, k->s.len) : NULL;
			return v ? v : d ? d : &jv_none;
		}
		if (!strcmp(name, "items"))
			return pairs(r, at, self);
		struct jval *l = jv_list(r->a);
		for (size_t i = 0; l && i < self->d.n; i++)
			if (jv_list_push(r->a, l, name[0] == 'k'
						  ? jv_str(r->a, self->d.e[i].k, self->d.e[i].klen)
						  : self->d.e[i].v))
				return NULL;
		return l;
	}
	if (self->t == JV_LIST && (!strcmp(name, "index") || !strcmp(name, "count"))) {
		struct jval *x = arg(&a, 0, NULL);
		int64_t c = 0;
		if (!x)
			return atlas_jinja_fail(at, "%s() takes exactly one argument", name);
		for (size_t i = 0; i < self->l.n; i++)
			if (jv_equal(r->bud, self->l.v[i], x)) {
				if (name[0] == 'i')
					return jv_int(r->a, (int64_t)i);
				c++;
			}
		if (r->bud->over)
			return NULL;
		if (name[0] == 'i')
			return atlas_jinja_fail(at, "value is not in list");
		return jv_int(r->a, c);
	}
	return atlas_jinja_fail(at, "access to attribute '%s' of '%s' object is unsafe", name,
				jv_type_name(self));
}
