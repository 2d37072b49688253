/* grammar_schema.c - JSON schemas to grammar text (see grammar.h).
 *
 * Each schema becomes one expression; objects, arrays, $ref targets and
 * the shared pieces (string, number, any value) become rules named
 * <prefix><something>. Whitespace is written inline (WS),
 * rather than as a rule: a token such as ` "name` then stays inside one
 * rule, which is what lets the mask cache decide it (grammar_match.c).
 *
 * What is exact and what is not:
 *   - properties keep the schema's order; optional ones may be left out;
 *     without additionalProperties an object with "properties" allows no
 *     other keys (true or a schema allows any others, whose names are not
 *     checked against the declared ones);
 *   - integer minimum/maximum: exact (as digit-range alternatives);
 *     number minimum/maximum: only the sign;
 *   - string pattern is matched against the whole string (as if
 *     anchored), min/maxLength count characters (escapes count as one),
 *     and a maxLength above LEN_MAX is treated as no maximum; pattern
 *     with min/maxLength keeps only the pattern;
 *   - prefixItems without items is a tuple (no further items);
 *   - number digits are bounded (19 before the point, 20 after, 4 in the
 *     exponent) and objects/arrays of "any" JSON nest at most ANY_DEPTH
 *     deep, so that every value ends. */
#include "grammar.h"

#include <json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "grammar_internal.h"

/* whitespace between JSON tokens: none, one space, or a newline and an
 * indentation (pretty-printed JSON); bounded, so that a model cannot spend
 * its tokens on it */
#define WS "( \" \" | \"\\n\" [ \\t]{0,16} )?"
#define MAX_NEST 64	     /* schemas inside each other */
#define LEN_MAX 2000	     /* largest maxLength enforced */
#define ANY_DEPTH 20	     /* nesting of "any JSON value" */
#define MAX_REP 9999	     /* largest repetition count written */

/* A JSON string's character, escapes included. */
#define JCHAR "( [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} ) )"

static const char *const known[] = {
    "type",	 "properties", "required", "additionalProperties",
    "enum",	 "const",      "items",	   "prefixItems",
    "minItems",	 "maxItems",   "anyOf",	   "oneOf",
    "allOf",	 "$ref",       "$defs",	   "definitions",
    "minLength", "maxLength",  "pattern",  "format",
    "minimum",	 "maximum",    "title",	   "description",
    "default",	 "examples",   "$schema",  "$id",
    "$comment",	 NULL,
};

struct refmap {
	json_object *target; /* a schema reached by $ref */
	int rule;	     /* its rule number */
};

struct sctx {
	struct gbuf out;     /* rules written so far */
	const char *prefix;  /* rule name prefix */
	json_object *root;   /* the whole schema, for $ref */
	const char **bad;    /* where to name an unsupported keyword */
	int n_rules;	     /* rules numbered so far */
	struct refmap *refs; /* $ref targets with their rules */
	int n_refs, cap_refs;
	json_object **made; /* merged schemas (allOf) to release */
	int n_made, cap_made;
	bool any, string, number, integer; /* shared rules needed */
};

static _Thread_local char bad_name[64];

static int refuse(struct sctx *c, const char *kw, int code, const char *what)
{
	if (c->bad) {
		const char *st = NULL;
		for (int k = 0; known[k]; k++)
			if (!strcmp(known[k], kw))
				st = known[k];
		if (!st) {
			snprintf(bad_name, sizeof(bad_name), "%s", kw);
			st = bad_name;
		}
		*c->bad = st;
	}
	if (code == ATLAS_EUNSUPPORTED && !what)
		return atlas_error(code, "unsupported JSON schema keyword '%s'", kw);
	return atlas_error(code, "JSON schema '%s': %s", kw, what ? what : "unsupported");
}

static int value_expr(struct sctx *c, json_object *s, struct gbuf *e, int depth);

/* Write rule `<prefix>s<no> ::= body`. */
static void put_rule(struct sctx *c, int no, const struct gbuf *body)
{
	gbuf_printf(&c->out, "%ss%d ::= ", c->prefix, no);
	gbuf_add(&c->out, body->p ? body->p : "", body->n);
	gbuf_puts(&c->out, "\n");
	if (body->err && !c->out.err)
		c->out.err = body->err;
}

static int json_literal(struct gbuf *e, json_object *v)
{
	const char *t = json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN |
							      JSON_C_TO_STRING_NOSLASHESCAPE);
	gbuf_literal(e, t, strlen(t));
	return 0;
}

/* ---- numbers ---- */

static bool num(json_object *s, const char *key, double *v)
{
	json_object *x;
	if (!json_object_object_get_ex(s, key, &x))
		return false;
	*v = json_object_get_double(x);
	return true;
}

/* Digit strings a..b of the same length n (a <= b): the classic split
 * into a's tail up to 9..9, whole middle digits, and 0..0 up to b's tail. */
static void same_len(struct gbuf *e, const char *a, const char *b, int n)
{
	if (n == 0) {
		gbuf_puts(e, "\"\"");
		return;
	}
	if (a[0] == b[0]) {
		gbuf_printf(e, "\"%c\" ", a[0]);
		same_len(e, a + 1, b + 1, n - 1);
		return;
	}
	char nines[24], zeros[24];
	memset(nines, '9', (size_t)n - 1);
	memset(zeros, '0', (size_t)n - 1);
	nines[n - 1] = zeros[n - 1] = '\0';
	bool a0 = !strcmp(a + 1, zeros), b9 = !strcmp(b + 1, nines);
	char d0 = a0 ? a[0] : (char)(a[0] + 1), d1 = b9 ? b[0] : (char)(b[0] - 1);
	const char *sep = "";
	gbuf_puts(e, "( ");
	if (!a0) {
		gbuf_printf(e, "\"%c\" ( ", a[0]);
		same_len(e, a + 1, nines, n - 1);
		gbuf_puts(e, " )");
		sep = " | ";
	}
	if (d0 <= d1) {
		gbuf_printf(e, "%s[%c-%c]", sep, d0, d1);
		if (n > 1)
			gbuf_printf(e, " [0-9]{%d}", n - 1);
		sep = " | ";
	}
	if (!b9) {
		gbuf_printf(e, "%s\"%c\" ( ", sep, b[0]);
		same_len(e, zeros, b + 1, n - 1);
		gbuf_puts(e, " )");
	}
	gbuf_puts(e, " )");
}

/* Decimal integers a..b without leading zeros (b < 0: no maximum; at most
 * 19 digits), as alternatives after *sep. */
static void uint_range(struct gbuf *e, uint64_t a, int64_t b, const char **sep)
{
	char sa[24], sb[24];
	int la = snprintf(sa, sizeof(sa), "%llu", (unsigned long long)a);
	int lb = b < 0 ? 19 : snprintf(sb, sizeof(sb), "%lld", (long long)b);
	for (int n = la; n <= lb; n++) {
		char lo[24], hi[24];
		if (n == la)
			memcpy(lo, sa, sizeof(sa));
		else
			snprintf(lo, sizeof(lo), "1%0*d", n - 1, 0);
		if (b < 0 && n > la) { /* every longer length at once */
			gbuf_printf(e, "%s[1-9] [0-9]{%d,18}", *sep, n - 1);
			*sep = " | ";
			return;
		}
		if (b >= 0 && n == lb) {
			memcpy(hi, sb, sizeof(sb));
		} else {
			memset(hi, '9', (size_t)n);
			hi[n] = '\0';
		}
		gbuf_puts(e, *sep);
		same_len(e, lo, hi, n);
		*sep = " | ";
	}
}

/* Integers in [minimum, maximum], exactly (bounds past 10^18 count as
 * none). */
static void integer_expr(struct sctx *c, json_object *s, struct gbuf *e)
{
	double lo = -INFINITY, hi = INFINITY;
	num(s, "minimum", &lo);
	num(s, "maximum", &hi);
	double a = ceil(lo), b = floor(hi);
	bool has_a = a >= -1e18 && a <= 1e18, has_b = b >= -1e18 && b <= 1e18;
	if (!has_a && !has_b) {
		c->integer = true;
		gbuf_printf(e, "%sinteger", c->prefix);
		return;
	}
	if ((has_a && has_b && b < a) || (!has_a && a > 0) || (!has_b && b < 0)) {
		gbuf_puts(e, "[]"); /* nothing fits */
		return;
	}
	const char *sep = "";
	gbuf_puts(e, "( ");
	if (!has_a || a < 0) { /* negatives: magnitudes max(1, -b) .. -a */
		uint64_t m0 = has_b && b < 0 ? (uint64_t)-b : 1;
		gbuf_puts(e, "\"-\" ( ");
		uint_range(e, m0, has_a ? (int64_t)-a : -1, &sep);
		gbuf_puts(e, " )");
		sep = " | ";
	}
	if (!has_b || b >= 0)
		uint_range(e, has_a && a > 0 ? (uint64_t)a : 0, has_b ? (int64_t)b : -1, &sep);
	gbuf_puts(e, " )");
}

static void number_expr(struct sctx *c, json_object *s, struct gbuf *e)
{
	double lo = -INFINITY, hi = INFINITY;
	num(s, "minimum", &lo);
	num(s, "maximum", &hi);
	const char *body = "( \"0\" | [1-9] [0-9]{0,18} ) ( \".\" [0-9]{1,20} )? "
			   "( [eE] [-+]? [0-9]{1,4} )?";
	if (lo >= 0)
		gbuf_printf(e, "(%s)", body);
	else if (hi < 0)
		gbuf_printf(e, "(\"-\" %s)", body);
	else if (hi <= 0)
		gbuf_printf(e, "(\"-\" %s | \"0\" (\".\" \"0\"{1,20})?)", body);
	else {
		c->number = true;
		gbuf_printf(e, "%snumber", c->prefix);
	}
}

/* ---- strings ---- */

static const char *format_expr(const char *f)
{
	static const char date[] = "[0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" "
				   "( \"0\" [1-9] | [12] [0-9] | \"3\" [01] )";
	static const char time[] = "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" "
				   "( [0-5] [0-9] | \"60\" ) ( \".\" [0-9]{1,9} )? "
				   "( [zZ] | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )";
	static const char datetime[] =
	    "[0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" "
	    "( \"0\" [1-9] | [12] [0-9] | \"3\" [01] ) [tT] "
	    "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" "
	    "( [0-5] [0-9] | \"60\" ) ( \".\" [0-9]{1,9} )? "
	    "( [zZ] | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )";
	static const char uuid[] = "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" "
				   "[0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12}";
	static const char email[] = "[a-zA-Z0-9._%+-]{1,64} \"@\" [a-zA-Z0-9-]{1,63} "
				    "( \".\" [a-zA-Z0-9-]{1,63} ){1,8}";
	static const char ipv4[] =
	    "( \"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | "
	    "[1-9] [0-9] | [0-9] ) ( \".\" ( \"25\" [0-5] | \"2\" [0-4] [0-9] | "
	    "\"1\" [0-9] [0-9] | [1-9] [0-9] | [0-9] ) ){3}";
	if (!strcmp(f, "date"))
		return date;
	if (!strcmp(f, "time"))
		return time;
	if (!strcmp(f, "date-time"))
		return datetime;
	if (!strcmp(f, "uuid"))
		return uuid;
	if (!strcmp(f, "email"))
		return email;
	if (!strcmp(f, "ipv4"))
		return ipv4;
	return NULL;
}

static int string_expr(struct sctx *c, json_object *s, struct gbuf *e)
{
	json_object *x;
	if (json_object_object_get_ex(s, "pattern", &x)) {
		if (!json_object_is_type(x, json_type_string))
			return refuse(c, "pattern", ATLAS_EINVAL, "not a string");
		gbuf_puts(e, "( \"\\\"\" ");
		int rc = atlas_regex_expr(e, json_object_get_string(x), true);
		if (rc) {
			if (c->bad)
				*c->bad = "pattern";
			return rc;
		}
		gbuf_puts(e, " \"\\\"\" )");
		return 0;
	}
	if (json_object_object_get_ex(s, "format", &x)) {
		const char *f = json_object_get_string(x);
		const char *fx = f ? format_expr(f) : NULL;
		if (!fx) {
			if (c->bad)
				*c->bad = "format";
			return atlas_error(ATLAS_EUNSUPPORTED,
					   "unsupported JSON schema format '%s'", f ? f : "");
		}
		gbuf_printf(e, "( \"\\\"\" %s \"\\\"\" )", fx);
		return 0;
	}
	double lo = 0, hi = -1;
	bool has_lo = num(s, "minLength", &lo), has_hi = num(s, "maxLength", &hi);
	if (!has_lo && !has_hi) {
		c->string = true;
		gbuf_printf(e, "%sstring", c->prefix);
		return 0;
	}
	if (lo < 0 || lo > LEN_MAX)
		return refuse(c, "minLength", ATLAS_EINVAL, "out of range");
	if (has_hi && hi < lo)
		return refuse(c, "maxLength", ATLAS_EINVAL, "below minLength");
	if (has_hi && hi <= LEN_MAX)
		gbuf_printf(e, "( \"\\\"\" %s{%.0f,%.0f} \"\\\"\" )", JCHAR, lo, hi);
	else
		gbuf_printf(e, "( \"\\\"\" %s{%.0f,} \"\\\"\" )", JCHAR, lo);
	return 0;
}

/* ---- objects ---- */

struct prop {
	const char *key;  /* property name */
	json_object *sch; /* its schema */
	bool req;	  /* required */
};

static bool is_required(json_object *req, const char *key)
{
	for (size_t k = 0; req && k < json_object_array_length(req); k++) {
		const char *r = json_object_get_string(json_object_array_get_idx(req, k));
		if (r && !strcmp(r, key))
			return true;
	}
	return false;
}

/* "key" ws ":" ws value ws, as rule <prefix>s<no>. */
static int kv_rule(struct sctx *c, const char *key, json_object *sch, int depth)
{
	struct gbuf e = {0};
	int no = c->n_rules++;
	if (key) {
		json_object *k = json_object_new_string(key);
		if (!k)
			return atlas_error(ATLAS_ENOMEM, "out of memory");
		json_literal(&e, k);
		json_object_put(k);
	} else {
		c->string = true;
		gbuf_printf(&e, "%sstring", c->prefix);
	}
	gbuf_puts(&e, " " WS " \":\" " WS " ");
	int rc = value_expr(c, sch, &e, depth + 1);
	gbuf_puts(&e, " " WS);
	if (!rc)
		put_rule(c, no, &e);
	free(e.p);
	return rc ? rc : no;
}

/* Rules s_i (items i.. with no comma before the first) and c_i (items
 * i.., each after a comma): required items must appear, optional ones may
 * not, in order; extra (a rule number or -1) may follow any number of
 * times. The object's rule is "{" ws s_0 "}". */
static int object_rule(struct sctx *c, const struct prop *p, int n, int extra, const int *kv)
{
	int base = c->n_rules;
	c->n_rules += 2 * (n + 1);
	int no = c->n_rules++;
	const char *px = c->prefix;
	for (int i = n; i >= 0; i--) {
		int si = base + 2 * i, ci = si + 1;
		if (i == n && extra >= 0) {
			gbuf_printf(&c->out, "%ss%d ::= ( %ss%d ( \",\" " WS " %ss%d )* )?\n", px,
				    si, px, extra, px, extra);
			gbuf_printf(&c->out, "%ss%d ::= ( \",\" " WS " %ss%d )*\n", px, ci, px,
				    extra);
		} else if (i == n) {
			gbuf_printf(&c->out, "%ss%d ::= \"\"\n%ss%d ::= \"\"\n", px, si, px, ci);
		} else if (p[i].req) {
			gbuf_printf(&c->out, "%ss%d ::= %ss%d %ss%d\n", px, si, px, kv[i], px,
				    ci + 2);
			gbuf_printf(&c->out, "%ss%d ::= \",\" " WS " %ss%d %ss%d\n", px, ci, px,
				    kv[i], px, ci + 2);
		} else {
			gbuf_printf(&c->out, "%ss%d ::= %ss%d %ss%d | %ss%d\n", px, si, px, kv[i],
				    px, ci + 2, px, si + 2);
			gbuf_printf(&c->out, "%ss%d ::= ( \",\" " WS " %ss%d )? %ss%d\n", px, ci,
				    px, kv[i], px, ci + 2);
		}
	}
	gbuf_printf(&c->out, "%ss%d ::= \"{\" " WS " %ss%d \"}\"\n", px, no, px, base);
	return no;
}

static int object_expr(struct sctx *c, json_object *s, struct gbuf *e, int depth)
{
	json_object *props = NULL, *req = NULL, *add = NULL;
	json_object_object_get_ex(s, "properties", &props);
	json_object_object_get_ex(s, "required", &req);
	json_object_object_get_ex(s, "additionalProperties", &add);
	if (props && !json_object_is_type(props, json_type_object))
		return refuse(c, "properties", ATLAS_EINVAL, "not an object");
	if (req && !json_object_is_type(req, json_type_array))
		return refuse(c, "required", ATLAS_EINVAL, "not an array");
	int n = props ? json_object_object_length(props) : 0;
	struct prop *p = calloc((size_t)n + 1, sizeof(*p));
	int *kv = calloc((size_t)n + 1, sizeof(int));
	int rc = p && kv ? 0 : atlas_error(ATLAS_ENOMEM, "out of memory");
	int k = 0;
	if (!rc && props) {
		json_object_object_foreach(props, key, val)
		{
			p[k] = (struct prop){key, val, is_required(req, key)};
			if ((kv[k] = kv_rule(c, key, val, depth)) < 0) {
				rc = kv[k];
				break;
			}
			k++;
		}
	}
	int extra = -1;
	bool allow = props ? false : true;
	if (!rc && add) {
		if (json_object_is_type(add, json_type_boolean))
			allow = json_object_get_boolean(add);
		else if (json_object_is_type(add, json_type_object))
			allow = true;
		else
			rc = refuse(c, "additionalProperties", ATLAS_EINVAL, "not a schema");
	}
	if (!rc && allow) {
		json_object *any = add && json_object_is_type(add, json_type_object) ? add : NULL;
		extra = kv_rule(c, NULL, any, depth);
		if (extra < 0)
			rc = extra;
	}
	if (!rc)
		gbuf_printf(e, "%ss%d", c->prefix, object_rule(c, p, n, extra, kv));
	free(p);
	free(kv);
	return rc;
}

/* ---- arrays ---- */

static int count(struct sctx *c, json_object *s, const char *key, long *v)
{
	json_object *x;
	if (!json_object_object_get_ex(s, key, &x))
		return 0;
	if (!json_object_is_type(x, json_type_int) || json_object_get_int64(x) < 0)
		return refuse(c, key, ATLAS_EINVAL, "not a non-negative integer");
	int64_t n = json_object_get_int64(x);
	*v = n > MAX_REP ? -1 : (long)n;
	if (*v < 0 && !strcmp(key, "minItems"))
		return refuse(c, key, ATLAS_EINVAL, "too large");
	return 0;
}

/* Items from index i of a tuple of k prefix rules pre[], then `item`
 * (-1: none) repeated; lo items at least, hi at most (-1: no limit). */
static void array_items(struct sctx *c, struct gbuf *e, const int *pre, int k, int i, int item,
			long lo, long hi, bool first)
{
	const char *px = c->prefix, *comma = first ? "" : "\",\" " WS " ";
	if (i < k && (hi < 0 || i < hi)) {
		bool opt = i >= lo;
		gbuf_printf(e, "%s%s%ss%d " WS " ", opt ? "( " : "", comma, px, pre[i]);
		array_items(c, e, pre, k, i + 1, item, lo, hi, false);
		gbuf_puts(e, opt ? ")? " : "");
		return;
	}
	if (item < 0 || (hi >= 0 && hi <= i))
		return;
	long a = lo > i ? lo - i : 0, b = hi < 0 ? -1 : hi - i;
	char rep[48];
	if (first) { /* item ( , item ){a-1, b-1}, optional when a == 0 */
		long a1 = a > 0 ? a - 1 : 0;
		if (b < 0)
			snprintf(rep, sizeof(rep), "{%ld,}", a1);
		else
			snprintf(rep, sizeof(rep), "{%ld,%ld}", a1, b - 1);
		gbuf_printf(e, "( %ss%d " WS " ( \",\" " WS " %ss%d " WS " )%s )%s ", px, item, px,
			    item, rep, a ? "" : "?");
		return;
	}
	if (b < 0)
		snprintf(rep, sizeof(rep), "{%ld,}", a);
	else
		snprintf(rep, sizeof(rep), "{%ld,%ld}", a, b);
	gbuf_printf(e, "( \",\" " WS " %ss%d " WS " )%s ", px, item, rep);
}

/* A rule <prefix>s<no> ::= schema s (for array elements). */
static int sub_rule(struct sctx *c, json_object *s, int depth)
{
	struct gbuf e = {0};
	int no = c->n_rules++;
	int rc = value_expr(c, s, &e, depth + 1);
	if (!rc)
		put_rule(c, no, &e);
	free(e.p);
	return rc ? rc : no;
}

static int array_expr(struct sctx *c, json_object *s, struct gbuf *e, int depth)
{
	json_object *items = NULL, *prefix = NULL;
	long lo = 0, hi = -1;
	int rc = count(c, s, "minItems", &lo);
	if (!rc)
		rc = count(c, s, "maxItems", &hi);
	if (rc)
		return rc;
	if (hi >= 0 && lo > hi)
		return refuse(c, "maxItems", ATLAS_EINVAL, "below minItems");
	json_object_object_get_ex(s, "items", &items);
	json_object_object_get_ex(s, "prefixItems", &prefix);
	if (prefix && !json_object_is_type(prefix, json_type_array))
		return refuse(c, "prefixItems", ATLAS_EINVAL, "not an array");
	int k = prefix ? (int)json_object_array_length(prefix) : 0;
	int *pre = calloc((size_t)k + 1, sizeof(int));
	if (!pre)
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	for (int i = 0; i < k && !rc; i++)
		if ((pre[i] = sub_rule(c, json_object_array_get_idx(prefix, i), depth)) < 0)
			rc = pre[i];
	int item = -1;
	if (!rc && items && json_object_is_type(items, json_type_boolean) &&
	    !json_object_get_boolean(items))
		item = -1;
	else if (!rc && (items || !prefix) && (item = sub_rule(c, items, depth)) < 0)
		rc = item;
	if (!rc) {
		int no = c->n_rules++;
		struct gbuf body = {0};
		gbuf_puts(&body, "\"[\" " WS " ");
		array_items(c, &body, pre, k, 0, item, lo, hi, true);
		gbuf_puts(&body, "\"]\"");
		put_rule(c, no, &body);
		free(body.p);
		gbuf_printf(e, "%ss%d", c->prefix, no);
	}
	free(pre);
	return rc;
}

/* ---- $ref, allOf, the dispatcher ---- */

static json_object *resolve(struct sctx *c, const char *ref)
{
	if (ref[0] != '#')
		return NULL;
	json_object *cur = c->root;
	const char *p = ref + 1;
	while (*p == '/' && cur) {
		p++;
		char seg[256];
		size_t n = 0;
		while (*p && *p != '/' && n + 1 < sizeof(seg)) {
			if (p[0] == '~' && (p[1] == '0' || p[1] == '1')) {
				seg[n++] = p[1] == '0' ? '~' : '/';
				p += 2;
			} else {
				seg[n++] = *p++;
			}
		}
		seg[n] = '\0';
		json_object *next = NULL;
		if (json_object_is_type(cur, json_type_array))
			next = json_object_array_get_idx(cur, (size_t)atol(seg));
		else if (!json_object_object_get_ex(cur, seg, &next))
			next = NULL;
		cur = next;
	}
	return *p ? NULL : cur;
}

static int ref_expr(struct sctx *c, json_object *refv, struct gbuf *e, int depth)
{
	const char *ref = json_object_get_string(refv);
	json_object *t = ref ? resolve(c, ref) : NULL;
	if (!t) {
		if (c->bad)
			*c->bad = "$ref";
		return atlas_error(ref && ref[0] == '#' ? ATLAS_EINVAL : ATLAS_EUNSUPPORTED,
				   "JSON schema $ref '%s' cannot be resolved", ref ? ref : "");
	}
	for (int k = 0; k < c->n_refs; k++)
		if (c->refs[k].target == t) {
			gbuf_printf(e, "%ss%d", c->prefix, c->refs[k].rule);
			return 0;
		}
	if (c->n_refs == c->cap_refs) {
		int cap = c->cap_refs ? 2 * c->cap_refs : 8;
		struct refmap *r = realloc(c->refs, sizeof(*r) * (size_t)cap);
		if (!r)
			return atlas_error(ATLAS_ENOMEM, "out of memory");
		c->refs = r;
		c->cap_refs = cap;
	}
	int no = c->n_rules++;
	c->refs[c->n_refs++] = (struct refmap){t, no};
	struct gbuf body = {0};
	int rc = value_expr(c, t, &body, depth + 1);
	if (!rc)
		put_rule(c, no, &body);
	free(body.p);
	if (!rc)
		gbuf_printf(e, "%ss%d", c->prefix, no);
	return rc;
}

/* allOf: one schema with the keywords of all (properties and required
 * merged, others overridden by later ones). */
static int merge_all(struct sctx *c, json_object *s, json_object *all, json_object **out)
{
	json_object *m = json_object_new_object(), *props = json_object_new_object();
	json_object *req = json_object_new_array();
	if (!m || !props || !req || c->n_made + 1 > 1024) {
		json_object_put(m), json_object_put(props), json_object_put(req);
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	}
	size_t n = json_object_array_length(all);
	for (size_t k = 0; k <= n; k++) {
		json_object *x = k < n ? json_object_array_get_idx(all, k) : s, *r;
		for (int hop = 0; hop < 16 && json_object_object_get_ex(x, "$ref", &r); hop++) {
			json_object *t = resolve(c, json_object_get_string(r));
			if (!t)
				break;
			x = t;
		}
		if (!json_object_is_type(x, json_type_object)) {
			json_object_put(m), json_object_put(props), json_object_put(req);
			return refuse(c, "allOf", ATLAS_EUNSUPPORTED,
				      "only object schemas are supported");
		}
		json_object_object_foreach(x, key, val)
		{
			if (!strcmp(key, "allOf") || !strcmp(key, "$ref"))
				continue;
			if (!strcmp(key, "properties") &&
			    json_object_is_type(val, json_type_object)) {
				json_object_object_foreach(val, pk, pv)
				    json_object_object_add(props, pk, json_object_get(pv));
			} else if (!strcmp(key, "required") &&
				   json_object_is_type(val, json_type_array)) {
				for (size_t i = 0; i < json_object_array_length(val); i++)
					json_object_array_add(
					    req,
					    json_object_get(json_object_array_get_idx(val, i)));
			} else {
				json_object_object_add(m, key, json_object_get(val));
			}
		}
	}
	if (json_object_object_length(props))
		json_object_object_add(m, "properties", props);
	else
		json_object_put(props);
	if (json_object_array_length(req))
		json_object_object_add(m, "required", req);
	else
		json_object_put(req);
	if (c->n_made == c->cap_made) {
		int cap = c->cap_made ? 2 * c->cap_made : 8;
		json_object **q = realloc(c->made, sizeof(*q) * (size_t)cap);
		if (!q) {
			json_object_put(m);
			return atlas_error(ATLAS_ENOMEM, "out of memory");
		}
		c->made = q;
		c->cap_made = cap;
	}
	c->made[c->n_made++] = m;
	*out = m;
	return 0;
}

static int any_expr(struct sctx *c, struct gbuf *e)
{
	c->any = true;
	gbuf_printf(e, "%sany0", c->prefix);
	return 0;
}

static int type_expr(struct sctx *c, json_object *s, const char *t, struct gbuf *e, int depth)
{
	if (!strcmp(t, "null"))
		gbuf_puts(e, "\"null\"");
	else if (!strcmp(t, "boolean"))
		gbuf_puts(e, "(\"true\" | \"false\")");
	else if (!strcmp(t, "integer"))
		integer_expr(c, s, e);
	else if (!strcmp(t, "number"))
		number_expr(c, s, e);
	else if (!strcmp(t, "string"))
		return string_expr(c, s, e);
	else if (!strcmp(t, "object"))
		return object_expr(c, s, e, depth);
	else if (!strcmp(t, "array"))
		return array_expr(c, s, e, depth);
	else
		return refuse(c, "type", ATLAS_EINVAL, "unknown type");
	return 0;
}

static bool has(json_object *s, const char *k)
{
	return json_object_object_get_ex(s, k, NULL);
}

/* The type a schema without "type" means, from its keywords (NULL: any). */
static const char *implied_type(json_object *s)
{
	if (has(s, "properties") || has(s, "additionalProperties") || has(s, "required"))
		return "object";
	if (has(s, "items") || has(s, "prefixItems") || has(s, "minItems") || has(s, "maxItems"))
		return "array";
	if (has(s, "minLength") || has(s, "maxLength") || has(s, "pattern") || has(s, "format"))
		return "string";
	if (has(s, "minimum") || has(s, "maximum"))
		return "number";
	return NULL;
}

static int alternatives(struct sctx *c, json_object *list, const char *kw, struct gbuf *e,
			int depth)
{
	if (!json_object_is_type(list, json_type_array) || !json_object_array_length(list))
		return refuse(c, kw, ATLAS_EINVAL, "not a non-empty array");
	gbuf_puts(e, "(");
	for (size_t k = 0; k < json_object_array_length(list); k++) {
		gbuf_puts(e, k ? " | " : " ");
		int rc = value_expr(c, json_object_array_get_idx(list, k), e, depth + 1);
		if (rc)
			return rc;
	}
	gbuf_puts(e, " )");
	return 0;
}

static int check_keywords(struct sctx *c, json_object *s)
{
	json_object_object_foreach(s, key, val)
	{
		(void)val;
		bool ok = false;
		for (int k = 0; known[k] && !ok; k++)
			ok = !strcmp(known[k], key);
		if (!ok)
			return refuse(c, key, ATLAS_EUNSUPPORTED, NULL);
	}
	return 0;
}

static int value_expr(struct sctx *c, json_object *s, struct gbuf *e, int depth)
{
	json_object *x;
	if (depth > MAX_NEST)
		return atlas_error(ATLAS_EINVAL, "JSON schema nested too deeply");
	if (!s || (json_object_is_type(s, json_type_boolean) && json_object_get_boolean(s)))
		return any_expr(c, e);
	if (json_object_is_type(s, json_type_boolean))
		return atlas_error(ATLAS_EINVAL, "JSON schema false matches nothing");
	if (!json_object_is_type(s, json_type_object))
		return atlas_error(ATLAS_EINVAL, "JSON schema is not an object");
	int rc = check_keywords(c, s);
	if (rc)
		return rc;
	if (json_object_object_get_ex(s, "$ref", &x))
		return ref_expr(c, x, e, depth);
	if (json_object_object_get_ex(s, "allOf", &x)) {
		json_object *m = NULL;
		if (!json_object_is_type(x, json_type_array))
			return refuse(c, "allOf", ATLAS_EINVAL, "not an array");
		return (rc = merge_all(c, s, x, &m)) ? rc : value_expr(c, m, e, depth + 1);
	}
	if (json_object_object_get_ex(s, "const", &x))
		return json_literal(e, x);
	if (json_object_object_get_ex(s, "enum", &x)) {
		if (!json_object_is_type(x, json_type_array) || !json_object_array_length(x))
			return refuse(c, "enum", ATLAS_EINVAL, "not a non-empty array");
		gbuf_puts(e, "(");
		for (size_t k = 0; k < json_object_array_length(x); k++) {
			gbuf_puts(e, k ? " | " : " ");
			json_literal(e, json_object_array_get_idx(x, k));
		}
		gbuf_puts(e, " )");
		return 0;
	}
	if (json_object_object_get_ex(s, "anyOf", &x))
		return alternatives(c, x, "anyOf", e, depth);
	if (json_object_object_get_ex(s, "oneOf", &x))
		return alternatives(c, x, "oneOf", e, depth);
	if (!json_object_object_get_ex(s, "type", &x)) {
		const char *t = implied_type(s);
		return t ? type_expr(c, s, t, e, depth) : any_expr(c, e);
	}
	if (json_object_is_type(x, json_type_string))
		return type_expr(c, s, json_object_get_string(x), e, depth);
	if (!json_object_is_type(x, json_type_array) || !json_object_array_length(x))
		return refuse(c, "type", ATLAS_EINVAL, "not a string or a non-empty array");
	gbuf_puts(e, "(");
	for (size_t k = 0; k < json_object_array_length(x); k++) {
		const char *t = json_object_get_string(json_object_array_get_idx(x, k));
		gbuf_puts(e, k ? " | " : " ");
		if ((rc = type_expr(c, s, t ? t : "", e, depth)))
			return rc;
	}
	gbuf_puts(e, " )");
	return 0;
}

/* ---- shared rules ---- */

static void shared_rules(struct sctx *c)
{
	const char *px = c->prefix;
	struct gbuf *o = &c->out;
	if (c->any) {
		c->string = c->number = true;
		for (int d = 0; d <= ANY_DEPTH; d++) {
			gbuf_printf(
			    o, "%sany%d ::= %sstring | %snumber | \"true\" | \"false\" | \"null\"",
			    px, d, px, px);
			if (d == ANY_DEPTH) {
				gbuf_puts(o, "\n");
				continue;
			}
			gbuf_printf(o, " | %sobj%d | %sarr%d\n", px, d, px, d);
			gbuf_printf(o,
				    "%sobj%d ::= \"{\" " WS " ( %sstring " WS " \":\" " WS
				    " %sany%d " WS " ( \",\" " WS " %sstring " WS " \":\" " WS
				    " %sany%d " WS " )* )? \"}\"\n",
				    px, d, px, px, d + 1, px, px, d + 1);
			gbuf_printf(o,
				    "%sarr%d ::= \"[\" " WS " ( %sany%d " WS " ( \",\" " WS
				    " %sany%d " WS " )* )? \"]\"\n",
				    px, d, px, d + 1, px, d + 1);
		}
	}
	if (c->string)
		gbuf_printf(o, "%sstring ::= \"\\\"\" %s* \"\\\"\"\n", px, JCHAR);
	if (c->number)
		gbuf_printf(o,
			    "%snumber ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,18} ) "
			    "( \".\" [0-9]{1,20} )? ( [eE] [-+]? [0-9]{1,4} )?\n",
			    px);
	if (c->integer)
		gbuf_printf(o, "%sinteger ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,18} )\n", px);
}

static bool good_prefix(const char *p)
{
	for (; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '_' || *p == '-'))
			return false;
	return true;
}

static char *finish(struct sctx *c, int rc)
{
	for (int k = 0; k < c->n_made; k++)
		json_object_put(c->made[k]);
	free(c->made);
	free(c->refs);
	if (!rc && c->out.err)
		rc = atlas_error(c->out.err, "JSON schema grammar too large");
	if (rc) {
		free(c->out.p);
		return NULL;
	}
	return c->out.p;
}

char *atlas_json_schema_grammar(struct json_object *schema, const char *prefix, const char **bad)
{
	struct sctx c = {.prefix = prefix ? prefix : "", .root = schema, .bad = bad};
	if (bad)
		*bad = NULL;
	if (!good_prefix(c.prefix)) {
		atlas_error(ATLAS_EINVAL, "bad grammar rule prefix '%s'", c.prefix);
		return NULL;
	}
	struct gbuf e = {0};
	int rc = value_expr(&c, schema, &e, 0);
	if (!rc) {
		gbuf_printf(&c.out, "%sroot ::= ", c.prefix);
		gbuf_add(&c.out, e.p ? e.p : "", e.n);
		gbuf_puts(&c.out, "\n");
		if (e.err && !c.out.err)
			c.out.err = e.err;
		shared_rules(&c);
	}
	free(e.p);
	return finish(&c, rc);
}

char *atlas_json_object_grammar(const char *prefix)
{
	struct sctx c = {.prefix = prefix ? prefix : ""};
	if (!good_prefix(c.prefix)) {
		atlas_error(ATLAS_EINVAL, "bad grammar rule prefix '%s'", c.prefix);
		return NULL;
	}
	c.any = true;
	gbuf_printf(&c.out, "%sroot ::= %sobj0\n", c.prefix, c.prefix);
	shared_rules(&c);
	return finish(&c, 0);
}
