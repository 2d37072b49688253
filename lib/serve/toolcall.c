/* toolcall.c - the streaming parser of toolcall.h.
 *
 * Every decision is made one byte at a time by a state machine, and a
 * byte's effect depends only on the bytes before it, never on where the
 * pieces were cut: that is what makes any split give the same events.
 * Text events are gathered in one pending buffer and handed out when the
 * kind changes, before a CALL or CALL_END, and at the end of each feed.
 *
 * Two layers: the reasoning layer (rstep) splits <think>...</think> off
 * and passes the rest, byte by byte, to the tool layer (tstep), which
 * finds the markers of the format and parses the calls.
 *
 * Failure rules, the same for streamed and one-shot input:
 *   - a marker whose text goes wrong before its CALL was emitted is given
 *     back whole as content (the text since the last commit point: the
 *     marker, or for a later call of a mistral array the text after the
 *     previous call), and parsing resumes as text at the offending byte;
 *   - after CALL, a JSON format ends the call with CALL_END when its
 *     arguments value was complete, else leaves it unended (the ARGS
 *     given are an unfinished JSON text; atlas_toolparse_call_complete
 *     says false) and resumes as text at the offending byte;
 *     qwen3_coder closes the object of the parameters complete so far
 *     (CALL_END) and gives back the unfinished parameter's text as
 *     content. */
#include "toolcall.h"

#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"

/* ---- state ------------------------------------------------------------- */

struct tc_buf {
	char *p;    /* bytes, NUL-terminated when allocated */
	size_t n;   /* used */
	size_t cap; /* allocated */
};

struct tc_call {
	char id[40];   /* call_ + 24 alphanumerics, or 9 (mistral) */
	char *name;    /* malloc'd */
	bool complete; /* CALL_END was emitted */
};

enum { RS_OUT, RS_START, RS_IN, RS_AFTER };

/* Tool layer states. T: after <tool_call>; Q: qwen3_coder XML; H: the
 * closing tag; W: the {"name", "arguments"} object walker; M: mistral;
 * L: llama3_json. */
enum {
	TS_TEXT,
	TS_LIT,
	TS_T_OPEN,
	TS_H_CLOSE,
	TS_Q_NAME,
	TS_Q_SEP,
	TS_Q_ALT,
	TS_Q_PNAME,
	TS_Q_VAL,
	TS_W_KEY1,
	TS_W_KEY,
	TS_W_KEYSTR,
	TS_W_COLON,
	TS_W_VAL0,
	TS_W_VAL,
	TS_W_AFTER,
	TS_M_OPEN,
	TS_M_NAME,
	TS_M_NALT,
	TS_M_CID,
	TS_M_ARGS0,
	TS_M_ARGS,
	TS_M_ARR,
	TS_M_ARR_AFTER,
	TS_M_ARR_NEXT,
	TS_L_START,
	TS_L_PT,
	TS_L_SEP,
};

struct atlas_toolparse {
	enum atlas_toolfmt fmt;
	struct json_object *tools; /* borrowed: the request's tools, for parameter types */
	uint64_t rng;		   /* splitmix64 state for the ids */
	int rst;		   /* reasoning layer: RS_* */
	struct tc_buf rhold; /* RS_START: whitespace + part of <think>; RS_IN: part of </think> */
	int st;		     /* tool layer: TS_* */
	bool lead;	     /* no text yet since the start or the last call: hold whitespace */
	struct tc_buf hold;  /* TS_TEXT: what may begin a marker */
	struct tc_buf ws;    /* whitespace held while lead */
	struct tc_buf raw;   /* text of the current marker since its last commit point */
	struct atlas_json_scan js; /* the JSON key or value being scanned */
	const char *lit;	   /* TS_LIT: the literal expected */
	size_t lit_i;		   /* TS_LIT: bytes of it matched */
	int lit_next;		   /* TS_LIT: the state after it (TS_TEXT: the call is over) */
	int wkey;		   /* walker: K_* of the value being scanned */
	int wctx;		   /* walker: what follows the object (TS_H_CLOSE, ...) */
	struct tc_buf key;	   /* a key, a name, a literal being matched */
	struct tc_buf val;	   /* the name's JSON text; a qwen3_coder value */
	struct tc_buf ahold;	   /* arguments seen before the call began */
	struct tc_buf fname;	   /* the wrapper object's function name */
	bool have_name;		   /* the wrapper object's name came */
	bool args_seen;		   /* its arguments value began */
	bool args_done;		   /* its arguments value is complete */
	bool in_call;		   /* CALL emitted, CALL_END not */
	bool xml;		   /* the call is qwen3_coder XML (we write its JSON) */
	int nparams;		   /* xml: parameters written */
	struct tc_call *calls;	   /* every CALL so far */
	int ncalls, calls_cap;
	struct tc_buf pend;		  /* text of one kind not yet handed out */
	enum atlas_toolev_kind pend_kind; /* its event kind */
	int pend_index;			  /* its call index (ARGS) */
	atlas_toolev_fn fn;		  /* this feed's callback */
	void *ud;
	int stop;   /* the callback's non-zero return */
	bool nomem; /* an allocation failed */
};

static int tc_step_call(struct atlas_toolparse *p, char c);
static void tc_finish_call(struct atlas_toolparse *p);

/* ---- byte buffers ------------------------------------------------------ */

static void buf_put(struct tc_buf *b, const char *s, size_t n, bool *nomem)
{
	if (!n)
		return;
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 64;
		while (cap < b->n + n + 1)
			cap *= 2;
		char *q = realloc(b->p, cap);
		if (!q) {
			*nomem = true;
			return;
		}
		b->p = q;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = '\0';
}

static void buf_shift(struct tc_buf *b, size_t k)
{
	memmove(b->p, b->p + k, b->n - k);
	b->n -= k;
	b->p[b->n] = '\0';
}

static bool is_ws(unsigned char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static bool all_ws(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!is_ws((unsigned char)s[i]))
			return false;
	return true;
}

/* Is s[0..n) a prefix of the literal `lit`? */
static bool is_prefix(const char *s, size_t n, const char *lit)
{
	return n <= strlen(lit) && !memcmp(s, lit, n);
}

/* ---- events ------------------------------------------------------------ */

static void flush(struct atlas_toolparse *p)
{
	if (!p->pend.n)
		return;
	struct atlas_toolev ev = {
	    .kind = p->pend_kind, .index = p->pend_index, .text = p->pend.p, .len = p->pend.n};
	if (!p->stop && p->fn)
		p->stop = p->fn(p->ud, &ev);
	p->pend.n = 0;
}

static void emit_text(struct atlas_toolparse *p, enum atlas_toolev_kind kind, const char *s,
		      size_t n)
{
	int index = kind == ATLAS_TOOLEV_ARGS ? p->ncalls - 1 : 0;
	if (!n)
		return;
	if (p->pend.n && (p->pend_kind != kind || p->pend_index != index))
		flush(p);
	p->pend_kind = kind;
	p->pend_index = index;
	buf_put(&p->pend, s, n, &p->nomem);
}

static void content(struct atlas_toolparse *p, const char *s, size_t n)
{
	emit_text(p, ATLAS_TOOLEV_CONTENT, s, n);
}

static void args(struct atlas_toolparse *p, const char *s, size_t n)
{
	emit_text(p, ATLAS_TOOLEV_ARGS, s, n);
}

static uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* The id of the next call: call_ + 24 alphanumerics, or 9 for mistral
 * (its template refuses any other length). */
static void make_id(struct atlas_toolparse *p, char *out)
{
	static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
	int n = p->fmt == ATLAS_TOOLFMT_MISTRAL ? 9 : 24;
	char *o = out;
	if (p->fmt != ATLAS_TOOLFMT_MISTRAL)
		o = stpcpy(o, "call_");
	for (int i = 0; i < n; i++)
		*o++ = al[splitmix(&p->rng) % 62];
	*o = '\0';
}

/* A call begins: name is known. The raw text so far is committed. */
static void emit_call(struct atlas_toolparse *p, const char *name)
{
	if (p->ncalls == p->calls_cap) {
		int cap = p->calls_cap ? 2 * p->calls_cap : 4;
		struct tc_call *c = realloc(p->calls, (size_t)cap * sizeof(*c));
		if (!c) {
			p->nomem = true;
			return;
		}
		p->calls = c;
		p->calls_cap = cap;
	}
	struct tc_call *c = &p->calls[p->ncalls];
	memset(c, 0, sizeof(*c));
	make_id(p, c->id);
	c->name = strdup(name);
	if (!c->name) {
		p->nomem = true;
		return;
	}
	p->ncalls++;
	p->in_call = true;
	p->raw.n = 0;
	flush(p);
	struct atlas_toolev ev = {
	    .kind = ATLAS_TOOLEV_CALL, .index = p->ncalls - 1, .id = c->id, .name = c->name};
	if (!p->stop && p->fn)
		p->stop = p->fn(p->ud, &ev);
}

static void emit_call_end(struct atlas_toolparse *p)
{
	flush(p);
	p->calls[p->ncalls - 1].complete = true;
	p->in_call = false;
	struct atlas_toolev ev = {.kind = ATLAS_TOOLEV_CALL_END, .index = p->ncalls - 1};
	if (!p->stop && p->fn)
		p->stop = p->fn(p->ud, &ev);
}

/* ---- the tool layer: text between calls ------------------------------- */

static const char *marker(const struct atlas_toolparse *p)
{
	switch (p->fmt) {
	case ATLAS_TOOLFMT_HERMES:
	case ATLAS_TOOLFMT_QWEN3_CODER:
		return "<tool_call>";
	case ATLAS_TOOLFMT_MISTRAL:
		return "[TOOL_CALLS]";
	default:
		return NULL;
	}
}

/* One byte of plain text. Whitespace at the start of the message and
 * after a call is held (p->ws) and dropped when a marker or the end
 * follows, so a message of calls alone has no content. */
static void text_byte(struct atlas_toolparse *p, char c)
{
	if (p->lead && p->fmt != ATLAS_TOOLFMT_NONE && is_ws((unsigned char)c)) {
		buf_put(&p->ws, &c, 1, &p->nomem);
		return;
	}
	if (p->ws.n) {
		content(p, p->ws.p, p->ws.n);
		p->ws.n = 0;
	}
	p->lead = false;
	content(p, &c, 1);
}

/* Give back held text (not a marker after all) as content. */
static void text_hold_flush(struct atlas_toolparse *p)
{
	for (size_t i = 0; i < p->hold.n; i++)
		text_byte(p, p->hold.p[i]);
	p->hold.n = 0;
}

static int st_text(struct atlas_toolparse *p, char c)
{
	const char *m = marker(p);
	if (!m) {
		text_byte(p, c);
		return 1;
	}
	buf_put(&p->hold, &c, 1, &p->nomem);
	while (p->hold.n && !is_prefix(p->hold.p, p->hold.n, m)) {
		text_byte(p, p->hold.p[0]);
		buf_shift(&p->hold, 1);
	}
	if (p->hold.n != strlen(m))
		return 1;
	/* a marker: the held whitespace before it goes */
	p->ws.n = 0;
	p->raw.n = 0;
	buf_put(&p->raw, p->hold.p, p->hold.n, &p->nomem);
	p->hold.n = 0;
	p->st = p->fmt == ATLAS_TOOLFMT_MISTRAL ? TS_M_OPEN : TS_T_OPEN;
	return 1;
}

/* Something went wrong inside a marker (see the top of the file); the
 * byte that showed it is parsed again as text. */
static int tc_fail(struct atlas_toolparse *p)
{
	if (p->in_call) {
		if (p->xml) {
			args(p, "}", 1);
			emit_call_end(p);
		} else {
			if (p->args_done)
				emit_call_end(p);
			p->raw.n = 0; /* the wrapper around ARGS already given */
		}
		p->in_call = false;
	}
	if (p->raw.n)
		p->lead = false;
	for (size_t i = 0; i < p->raw.n; i++)
		text_byte(p, p->raw.p[i]);
	p->raw.n = 0;
	p->hold.n = 0;
	p->st = TS_TEXT;
	return 0;
}

/* Consume byte c inside a marker: it is part of the raw text. */
static int tc_eat(struct atlas_toolparse *p, char c)
{
	buf_put(&p->raw, &c, 1, &p->nomem);
	return 1;
}

/* After a call: back to text, whitespace held. */
static void tc_after_call(struct atlas_toolparse *p)
{
	p->st = TS_TEXT;
	p->lead = true;
	p->raw.n = 0;
}

/* ---- JSON text we write (qwen3_coder) ---------------------------------- */

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	char q[6] = "\"";
	size_t k = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : 2;
	if (k > n)
		return 0;
	memcpy(q + 1, s, k);
	q[k + 1] = '"';
	return atlas_json_valid(q, k + 2) ? k : 0;
}

/* s[0..n) as a JSON string; bytes that are not UTF-8 become U+FFFD. */
static void put_json_string(struct atlas_toolparse *p, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	struct tc_buf *b = &p->ahold; /* unused by XML calls: scratch */

	b->n = 0;
	buf_put(b, "\"", 1, &p->nomem);
	for (size_t i = 0; i < n;) {
		unsigned char c = (unsigned char)s[i];
		char e[8] = {'\\', 0};
		size_t k;
		if (c == '"' || c == '\\') {
			e[1] = (char)c;
			buf_put(b, e, 2, &p->nomem);
		} else if (c < 0x20) {
			const char *sh = strchr("\b\f\n\r\t", c);
			if (c && sh) {
				e[1] = "bfnrt"[sh - "\b\f\n\r\t"];
				buf_put(b, e, 2, &p->nomem);
			} else {
				memcpy(e + 1, "u00", 3);
				e[4] = hex[c >> 4];
				e[5] = hex[c & 15];
				buf_put(b, e, 6, &p->nomem);
			}
		} else if (c < 0x80) {
			buf_put(b, (const char *)&s[i], 1, &p->nomem);
		} else if ((k = utf8_seq((const unsigned char *)s + i, n - i))) {
			buf_put(b, s + i, k, &p->nomem);
			i += k;
			continue;
		} else {
			buf_put(b, "\\ufffd", 6, &p->nomem);
		}
		i++;
	}
	buf_put(b, "\"", 1, &p->nomem);
	args(p, b->p, b->n);
	b->n = 0;
}

/* What the tool's schema says of parameter `pname` of the current call:
 * bit 0 a string type, bit 1 another type, bit 2 boolean; 0 unknown. */
static int param_types(const struct atlas_toolparse *p, const char *pname)
{
	struct json_object *fnobj, *name, *params, *props, *prop, *type;
	const char *fname = p->calls[p->ncalls - 1].name;
	size_t n =
	    json_object_is_type(p->tools, json_type_array) ? json_object_array_length(p->tools) : 0;

	for (size_t i = 0; i < n; i++) {
		struct json_object *t = json_object_array_get_idx(p->tools, i);
		if (!json_object_object_get_ex(t, "function", &fnobj) ||
		    !json_object_object_get_ex(fnobj, "name", &name) ||
		    !json_object_is_type(name, json_type_string) ||
		    strcmp(json_object_get_string(name), fname))
			continue;
		if (!json_object_object_get_ex(fnobj, "parameters", &params) ||
		    !json_object_object_get_ex(params, "properties", &props) ||
		    !json_object_object_get_ex(props, pname, &prop) ||
		    !json_object_object_get_ex(prop, "type", &type))
			return 0;
		int bits = 0;
		size_t m =
		    json_object_is_type(type, json_type_array) ? json_object_array_length(type) : 1;
		for (size_t k = 0; k < m; k++) {
			struct json_object *ty = json_object_is_type(type, json_type_array)
						     ? json_object_array_get_idx(type, k)
						     : type;
			const char *s = json_object_get_string(ty);
			if (!s)
				continue;
			bits |= !strcmp(s, "string") ? 1 : !strcmp(s, "boolean") ? 6 : 2;
		}
		return bits;
	}
	return 0;
}

/* A complete qwen3_coder parameter (name in key, value in val): one
 * member of the object, streamed. The template writes the value between
 * newlines; those are not part of it. */
static void param_done(struct atlas_toolparse *p)
{
	const char *v = p->val.p ? p->val.p : "";
	size_t n = p->val.n, b = 0, e;
	int types;

	if (n && v[0] == '\n')
		v++, n--;
	if (n && v[n - 1] == '\n')
		n--;
	args(p, ", ", p->nparams++ ? 2 : 0);
	put_json_string(p, p->key.p ? p->key.p : "", p->key.n);
	args(p, ": ", 2);
	types = param_types(p, p->key.p ? p->key.p : "");
	for (e = n; e > 0 && is_ws((unsigned char)v[e - 1]); e--)
		;
	while (b < e && is_ws((unsigned char)v[b]))
		b++;
	if (types != 1 && atlas_json_valid(v + b, e - b)) {
		args(p, v + b, e - b);
	} else if ((types & 4) && e - b == 4 && !strncasecmp(v + b, "true", 4)) {
		args(p, "true", 4);
	} else if ((types & 4) && e - b == 5 && !strncasecmp(v + b, "false", 5)) {
		args(p, "false", 5);
	} else {
		put_json_string(p, v, n);
	}
}

/* ---- the call state machine --------------------------------------------- */

enum { K_OTHER, K_NAME, K_ARGS };

static bool is_digit(unsigned char c)
{
	return c >= '0' && c <= '9';
}

static bool name_char(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '_' ||
	       c == '-' || c == '.';
}

static bool ends_with(const struct tc_buf *b, const char *lit)
{
	size_t n = strlen(lit);
	return b->n >= n && !memcmp(b->p + b->n - n, lit, n);
}

static int expect_lit(struct atlas_toolparse *p, char c, const char *lit, int next)
{
	p->lit = lit;
	p->lit_i = 1;
	p->lit_next = next;
	p->st = TS_LIT;
	return tc_eat(p, c);
}

/* A {"name": ..., "arguments": ...} object begins (its '{' is eaten);
 * `ctx` is the state after it. */
static int walk_begin(struct atlas_toolparse *p, char c, int ctx)
{
	p->have_name = p->args_seen = p->args_done = false;
	p->xml = false;
	p->ahold.n = 0;
	p->wctx = ctx;
	p->st = TS_W_KEY1;
	return tc_eat(p, c);
}

/* The name value (JSON text in val) ended: it must be a non-empty
 * string. */
static bool walk_name(struct atlas_toolparse *p)
{
	struct json_object *o = json_tokener_parse(p->val.p ? p->val.p : "");
	const char *s = json_object_get_string(o);
	bool ok = json_object_is_type(o, json_type_string) && s && *s;
	if (ok) {
		p->have_name = true;
		p->fname.n = 0;
		buf_put(&p->fname, s, strlen(s), &p->nomem);
	}
	json_object_put(o);
	return ok;
}

/* The call begins once its name is known and its arguments begin (or
 * were complete before the name, or the object closes without them):
 * a comma missing after the name is still an error before the call. */
static void walk_call(struct atlas_toolparse *p)
{
	emit_call(p, p->fname.p);
	args(p, p->ahold.p, p->ahold.n);
	p->ahold.n = 0;
}

/* The wrapper object closed. */
static int walk_done(struct atlas_toolparse *p)
{
	if (!p->have_name)
		return tc_fail(p);
	if (!p->in_call)
		walk_call(p);
	if (!p->args_seen)
		args(p, "{}", 2);
	emit_call_end(p);
	p->raw.n = 0;
	if (p->wctx == TS_TEXT)
		tc_after_call(p);
	else
		p->st = p->wctx;
	return 1;
}

static int walk_value(struct atlas_toolparse *p, char c)
{
	int r = atlas_json_scan_byte(&p->js, (unsigned char)c);
	if (r == ATLAS_JSON_ERR)
		return tc_fail(p);
	if (r != ATLAS_JSON_BACK) {
		if (p->wkey == K_ARGS && p->in_call)
			args(p, &c, 1);
		else if (p->wkey == K_ARGS)
			buf_put(&p->ahold, &c, 1, &p->nomem);
		else if (p->wkey == K_NAME)
			buf_put(&p->val, &c, 1, &p->nomem);
		tc_eat(p, c);
	}
	if (r == ATLAS_JSON_MORE)
		return 1;
	p->st = TS_W_AFTER;
	if (p->wkey == K_ARGS)
		p->args_done = true;
	if (p->wkey == K_NAME && !walk_name(p))
		tc_fail(p); /* a closing quote is in raw: given back with the rest */
	else if (p->wkey == K_NAME && p->args_seen)
		walk_call(p);
	return r == ATLAS_JSON_DONE;
}

static int walk_step(struct atlas_toolparse *p, char c)
{
	int r;
	switch (p->st) {
	case TS_W_KEY1:
	case TS_W_KEY:
		if (is_ws((unsigned char)c))
			return tc_eat(p, c);
		if (c == '}' && p->st == TS_W_KEY1)
			return walk_done(p);
		if (c != '"')
			return tc_fail(p);
		atlas_json_scan_init(&p->js);
		atlas_json_scan_byte(&p->js, '"');
		p->key.n = 0;
		buf_put(&p->key, &c, 1, &p->nomem);
		p->st = TS_W_KEYSTR;
		return tc_eat(p, c);
	case TS_W_KEYSTR:
		r = atlas_json_scan_byte(&p->js, (unsigned char)c);
		if (r == ATLAS_JSON_ERR)
			return tc_fail(p);
		buf_put(&p->key, &c, 1, &p->nomem);
		if (r == ATLAS_JSON_DONE) {
			const char *k = p->key.p;
			p->wkey = K_OTHER;
			if (!strcmp(k, "\"name\"") && !p->have_name)
				p->wkey = K_NAME;
			else if ((!strcmp(k, "\"arguments\"") || !strcmp(k, "\"parameters\"")) &&
				 !p->args_seen)
				p->wkey = K_ARGS;
			p->st = TS_W_COLON;
		}
		return tc_eat(p, c);
	case TS_W_COLON:
		if (is_ws((unsigned char)c))
			return tc_eat(p, c);
		if (c != ':')
			return tc_fail(p);
		p->st = TS_W_VAL0;
		return tc_eat(p, c);
	case TS_W_VAL0:
		if (is_ws((unsigned char)c))
			return tc_eat(p, c);
		atlas_json_scan_init(&p->js);
		p->val.n = 0;
		if (p->wkey == K_ARGS) {
			p->args_seen = true;
			if (p->have_name)
				walk_call(p);
		}
		p->st = TS_W_VAL;
		return 0;
	case TS_W_VAL:
		return walk_value(p, c);
	default: /* TS_W_AFTER */
		if (is_ws((unsigned char)c))
			return tc_eat(p, c);
		if (c == ',') {
			p->st = TS_W_KEY;
			return tc_eat(p, c);
		}
		r = c == '}' ? walk_done(p) : tc_fail(p);
		return r;
	}
}

/* After <tool_call>, the closing tag, and literals. */
static int tag_step(struct atlas_toolparse *p, char c)
{
	switch (p->st) {
	case TS_LIT:
		if (c != p->lit[p->lit_i])
			return tc_fail(p);
		tc_eat(p, c);
		if (p->lit[++p->lit_i])
			return 1;
		p->key.n = 0;
		if (p->lit_next == TS_TEXT)
			tc_after_call(p);
		else
			p->st = p->lit_next;
		return 1;
	case TS_T_OPEN:
		if (is_ws((unsigned char)c))
			return tc_eat(p, c);
		if (c == '{')
			return walk_begin(p, c, TS_H_CLOSE);
		if (c == '<')
			return expect_lit(p, c, "<function=", TS_Q_NAME);
		return tc_fail(p);
	default: /* TS_H_CLOSE */
		if (is_ws((unsigned char)c))
			return tc_eat(p, c);
		if (c == '<')
			return expect_lit(p, c, "</tool_call>", TS_TEXT);
		return tc_fail(p);
	}
}

/* qwen3_coder: <function=NAME> (<parameter=P>VALUE</parameter>)* </function> */
static int xml_step(struct atlas_toolparse *p, char c)
{
	switch (p->st) {
	case TS_Q_NAME:
	case TS_Q_PNAME:
		if (c == '>' && p->key.n) {
			if (p->st == TS_Q_PNAME) {
				p->val.n = 0;
				p->st = TS_Q_VAL;
				return tc_eat(p, c);
			}
			p->xml = true;
			p->nparams = 0;
			emit_call(p, p->key.p);
			args(p, "{", 1);
			p->st = TS_Q_SEP;
			return 1;
		}
		if ((unsigned char)c < 0x20 || c == '<' || c == '>' || p->key.n >= 256)
			return tc_fail(p); /* names are one line of text */
		buf_put(&p->key, &c, 1, &p->nomem);
		return tc_eat(p, c);
	case TS_Q_SEP:
		if (is_ws((unsigned char)c))
			return tc_eat(p, c);
		p->key.n = 0;
		p->st = TS_Q_ALT;
		return 0;
	case TS_Q_ALT:
		buf_put(&p->key, &c, 1, &p->nomem);
		if (!strcmp(p->key.p, "<parameter=")) {
			p->key.n = 0;
			p->st = TS_Q_PNAME;
		} else if (!strcmp(p->key.p, "</function>")) {
			args(p, "}", 1);
			emit_call_end(p);
			p->raw.n = 0;
			p->st = TS_H_CLOSE;
			return 1;
		} else if (!is_prefix(p->key.p, p->key.n, "<parameter=") &&
			   !is_prefix(p->key.p, p->key.n, "</function>")) {
			return tc_fail(p);
		}
		return tc_eat(p, c);
	default: /* TS_Q_VAL */
		buf_put(&p->val, &c, 1, &p->nomem);
		tc_eat(p, c);
		if (ends_with(&p->val, "</parameter>")) {
			p->val.n -= 12;
			param_done(p);
			p->raw.n = 0;
			p->st = TS_Q_SEP;
		} else if (ends_with(&p->val, "</function>")) {
			p->val.n -= 11;
			param_done(p);
			args(p, "}", 1);
			emit_call_end(p);
			p->raw.n = 0;
			p->st = TS_H_CLOSE;
		}
		return 1;
	}
}

/* mistral: [TOOL_CALLS] then [{...}, ...], or NAME[ARGS]{...} (with an
 * optional [CALL_ID]ID before [ARGS]), or one {...}. */
static int mistral_step(struct atlas_toolparse *p, char c)
{
	int r;
	switch (p->st) {
	case TS_M_OPEN:
		if (is_ws((unsigned char)c))
			return tc_eat(p, c);
		if (c == '[') {
			p->st = TS_M_ARR;
			return tc_eat(p, c);
		}
		if (c == '{')
			return walk_begin(p, c, TS_TEXT);
		if (!name_char((unsigned char)c))
			return tc_fail(p);
		p->key.n = 0;
		p->st = TS_M_NAME;
		return 0;
	case TS_M_NAME:
	case TS_M_CID:
		if (c == '[' && (p->key.n || p->st == TS_M_CID)) {
			p->val.n = 0;
			buf_put(&p->val, &c, 1, &p->nomem);
			p->st = TS_M_NALT;
			return tc_eat(p, c);
		}
		if (!name_char((unsigned char)c) || p->key.n >= 256)
			return tc_fail(p);
		if (p->st == TS_M_NAME)
			buf_put(&p->key, &c, 1, &p->nomem);
		return tc_eat(p, c);
	case TS_M_NALT:
		buf_put(&p->val, &c, 1, &p->nomem);
		if (!strcmp(p->val.p, "[ARGS]")) {
			p->xml = false;
			p->args_done = false;
			emit_call(p, p->key.p);
			p->st = TS_M_ARGS0;
			return 1;
		}
		if (!strcmp(p->val.p, "[CALL_ID]")) {
			p->st = TS_M_CID;
			return tc_eat(p, c);
		}
		if (!is_prefix(p->val.p, p->val.n, "[ARGS]") &&
		    !is_prefix(p->val.p, p->val.n, "[CALL_ID]"))
			return tc_fail(p);
		return tc_eat(p, c);
	case TS_M_ARGS0:
		if (is_ws((unsigned char)c))
			return 1;
		atlas_json_scan_init(&p->js);
		p->st = TS_M_ARGS;
		return 0;
	case TS_M_ARGS:
		r = atlas_json_scan_byte(&p->js, (unsigned char)c);
		if (r == ATLAS_JSON_ERR)
			return tc_fail(p);
		if (r != ATLAS_JSON_BACK)
			args(p, &c, 1);
		if (r == ATLAS_JSON_MORE)
			return 1;
		p->args_done = true;
		emit_call_end(p);
		tc_after_call(p);
		return r == ATLAS_JSON_DONE;
	case TS_M_ARR:
	case TS_M_ARR_NEXT:
		if (is_ws((unsigned char)c))
			return tc_eat(p, c);
		if (c == '{')
			return walk_begin(p, c, TS_M_ARR_AFTER);
		return tc_fail(p);
	default: /* TS_M_ARR_AFTER */
		if (is_ws((unsigned char)c))
			return tc_eat(p, c);
		if (c == ',') {
			p->st = TS_M_ARR_NEXT;
			return tc_eat(p, c);
		}
		if (c == ']') {
			tc_after_call(p);
			return 1;
		}
		return tc_fail(p);
	}
}

/* llama3_json: only at the start, an optional <|python_tag|>, then
 * objects separated by ';'. */
static int llama3_step(struct atlas_toolparse *p, char c)
{
	if (is_ws((unsigned char)c) || (c == ';' && p->st == TS_L_SEP))
		return tc_eat(p, c);
	if (c == '{')
		return walk_begin(p, c, TS_L_SEP);
	if (c == '<' && p->st == TS_L_START)
		return expect_lit(p, c, "<|python_tag|>", TS_L_PT);
	return tc_fail(p);
}

static int tc_step_call(struct atlas_toolparse *p, char c)
{
	switch (p->st) {
	case TS_LIT:
	case TS_T_OPEN:
	case TS_H_CLOSE:
		return tag_step(p, c);
	case TS_Q_NAME:
	case TS_Q_SEP:
	case TS_Q_ALT:
	case TS_Q_PNAME:
	case TS_Q_VAL:
		return xml_step(p, c);
	case TS_L_START:
	case TS_L_PT:
	case TS_L_SEP:
		return llama3_step(p, c);
	case TS_M_OPEN:
	case TS_M_NAME:
	case TS_M_NALT:
	case TS_M_CID:
	case TS_M_ARGS0:
	case TS_M_ARGS:
	case TS_M_ARR:
	case TS_M_ARR_AFTER:
	case TS_M_ARR_NEXT:
		return mistral_step(p, c);
	default:
		return walk_step(p, c);
	}
}

/* The output ended inside a marker (see toolcall.h: a call whose JSON is
 * complete is a call; what follows a complete call, whitespace or a
 * closing tag cut short, is dropped; other held text is content). */
static void tc_finish_call(struct atlas_toolparse *p)
{
	bool after = p->st == TS_H_CLOSE || p->st == TS_M_ARR_AFTER || p->st == TS_M_ARR_NEXT ||
		     p->st == TS_L_SEP || (p->st == TS_LIT && p->lit_next == TS_TEXT);
	if (p->in_call && p->xml) {
		args(p, "}", 1);
		emit_call_end(p);
	} else if (p->in_call) {
		if ((p->st == TS_W_VAL && p->wkey == K_ARGS) || p->st == TS_M_ARGS)
			if (atlas_json_scan_finish(&p->js))
				p->args_done = true;
		if (p->args_done) {
			if (p->st == TS_M_ARGS || p->st == TS_M_ARGS0)
				args(p, "", 0);
			emit_call_end(p);
		}
		p->raw.n = 0;
	} else if (after) {
		p->raw.n = 0;
	}
	p->in_call = false;
	if (!all_ws(p->raw.p, p->raw.n)) {
		p->lead = false;
		for (size_t i = 0; i < p->raw.n; i++)
			text_byte(p, p->raw.p[i]);
	}
	p->raw.n = 0;
	p->st = TS_TEXT;
}

/* ---- public ------------------------------------------------------------ */

struct atlas_toolparse *atlas_toolparse_new(enum atlas_toolfmt fmt, bool reasoning,
					    bool start_in_reasoning, struct json_object *tools,
					    uint64_t seed)
{
	struct atlas_toolparse *p = calloc(1, sizeof(*p));
	if (!p) {
		atlas_error(ATLAS_ENOMEM, "out of memory");
		return NULL;
	}
	p->fmt = fmt;
	p->tools = tools;
	p->rng = seed;
	p->rst = !reasoning ? RS_OUT : start_in_reasoning ? RS_IN : RS_START;
	p->st = fmt == ATLAS_TOOLFMT_LLAMA3_JSON ? TS_L_START : TS_TEXT;
	p->lead = true;
	return p;
}

void atlas_toolparse_free(struct atlas_toolparse *p)
{
	if (!p)
		return;
	for (int i = 0; i < p->ncalls; i++)
		free(p->calls[i].name);
	free(p->calls);
	struct tc_buf *bufs[] = {&p->rhold, &p->hold,  &p->ws,	  &p->raw, &p->key,
				 &p->val,   &p->ahold, &p->fname, &p->pend};
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
		free(bufs[i]->p);
	free(p);
}

int atlas_toolparse_ncalls(const struct atlas_toolparse *p)
{
	return p->ncalls;
}

bool atlas_toolparse_call_complete(const struct atlas_toolparse *p, int index)
{
	return index >= 0 && index < p->ncalls && p->calls[index].complete;
}

/* One byte for the tool layer. */
static void tool_byte(struct atlas_toolparse *p, char c)
{
	int guard = 0;
	while (!(p->st == TS_TEXT ? st_text(p, c) : tc_step_call(p, c)))
		if (++guard > 8)
			break; /* cannot happen: every re-run lands on a consuming state */
}

/* ---- the reasoning layer ----------------------------------------------- */

static void reasoning(struct atlas_toolparse *p, const char *s, size_t n)
{
	emit_text(p, ATLAS_TOOLEV_REASONING, s, n);
}

static void rstep(struct atlas_toolparse *p, char c)
{
	size_t k;

	switch (p->rst) {
	case RS_OUT:
		tool_byte(p, c);
		return;
	case RS_AFTER:
		/* the newlines Qwen3 writes after </think> are no content */
		if (is_ws((unsigned char)c))
			return;
		p->rst = RS_OUT;
		tool_byte(p, c);
		return;
	case RS_START:
		buf_put(&p->rhold, &c, 1, &p->nomem);
		for (k = 0; k < p->rhold.n && is_ws((unsigned char)p->rhold.p[k]); k++)
			;
		if (is_prefix(p->rhold.p + k, p->rhold.n - k, "<think>")) {
			if (p->rhold.n - k == 7) {
				p->rhold.n = 0;
				p->rst = RS_IN;
			}
			return;
		}
		p->rst = RS_OUT;
		for (k = 0; k < p->rhold.n; k++)
			tool_byte(p, p->rhold.p[k]);
		p->rhold.n = 0;
		return;
	case RS_IN:
		buf_put(&p->rhold, &c, 1, &p->nomem);
		while (p->rhold.n && !is_prefix(p->rhold.p, p->rhold.n, "</think>")) {
			reasoning(p, p->rhold.p, 1);
			buf_shift(&p->rhold, 1);
		}
		if (p->rhold.n == 8) {
			p->rhold.n = 0;
			p->rst = RS_AFTER;
		}
		return;
	}
}

int atlas_toolparse_feed(struct atlas_toolparse *p, const char *s, size_t n, atlas_toolev_fn fn,
			 void *ud)
{
	p->fn = fn;
	p->ud = ud;
	for (size_t i = 0; i < n && !p->stop && !p->nomem; i++)
		rstep(p, s[i]);
	flush(p);
	if (p->nomem)
		return atlas_error(ATLAS_ENOMEM, "out of memory parsing tool calls");
	return p->stop;
}

int atlas_toolparse_finish(struct atlas_toolparse *p, atlas_toolev_fn fn, void *ud)
{
	p->fn = fn;
	p->ud = ud;
	if (p->rst == RS_IN) {
		reasoning(p, p->rhold.p, p->rhold.n);
	} else if (p->rst == RS_START) {
		p->rst = RS_OUT;
		for (size_t k = 0; k < p->rhold.n; k++)
			tool_byte(p, p->rhold.p[k]);
	}
	p->rhold.n = 0;
	if (p->st == TS_TEXT) {
		text_hold_flush(p);
	} else {
		tc_finish_call(p);
		if (p->st == TS_TEXT)
			text_hold_flush(p);
	}
	p->ws.n = 0;
	flush(p);
	if (p->nomem)
		return atlas_error(ATLAS_ENOMEM, "out of memory parsing tool calls");
	return p->stop;
}
