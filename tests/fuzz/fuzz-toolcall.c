/* fuzz-toolcall.c - libFuzzer entry point for the streaming tool-call
 * and reasoning parser (lib/serve/toolcall.c).
 *
 * An input is a header of two bytes, then the model output. Byte 0
 * picks the format (% 5), reasoning (bit 3) and start_in_reasoning (bit
 * 4); byte 1 seeds the random piece sizes. The output is parsed in one
 * piece, byte by byte, and in random pieces of 1 to 32 bytes: the three
 * must give the same content, reasoning and calls (names, ids, concatenated
 * arguments, ends), the events must come in order, and the arguments of
 * every ended call must be strict JSON, ids well formed. Any difference
 * aborts. See README. */
#include <json-c/json.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/serve/toolcall.h"

#define MAXCALLS 64

struct text {
	char *p;
	size_t n;
};

struct result {
	struct text content, reasoning;
	int ncalls;
	char name[MAXCALLS][64];
	char id[MAXCALLS][40];
	struct text args[MAXCALLS];
	bool ended[MAXCALLS];
};

static int fmt; /* of the input being run */

/* call_ + 24 alphanumerics; mistral: 9 alphanumerics. */
static bool good_id(const char *id)
{
	size_t n = fmt == ATLAS_TOOLFMT_MISTRAL ? 9 : 24;
	if (fmt != ATLAS_TOOLFMT_MISTRAL) {
		if (strncmp(id, "call_", 5))
			return false;
		id += 5;
	}
	for (size_t i = 0; i < n; i++)
		if (!((id[i] >= 'a' && id[i] <= 'z') || (id[i] >= 'A' && id[i] <= 'Z') ||
		      (id[i] >= '0' && id[i] <= '9')))
			return false;
	return id[n] == '\0';
}

static void put(struct text *t, const char *s, size_t n)
{
	if (!n)
		return;
	t->p = realloc(t->p, t->n + n);
	if (!t->p)
		abort();
	memcpy(t->p + t->n, s, n);
	t->n += n;
}

static int on_event(void *ud, const struct atlas_toolev *ev)
{
	struct result *r = ud;
	int i = ev->index;

	switch (ev->kind) {
	case ATLAS_TOOLEV_CONTENT:
		put(&r->content, ev->text, ev->len);
		break;
	case ATLAS_TOOLEV_REASONING:
		put(&r->reasoning, ev->text, ev->len);
		break;
	case ATLAS_TOOLEV_CALL:
		if (i != r->ncalls || !ev->name || !ev->id || !*ev->name || !good_id(ev->id))
			abort();
		if (i < MAXCALLS) {
			strncpy(r->name[i], ev->name, sizeof(r->name[i]) - 1);
			strncpy(r->id[i], ev->id, sizeof(r->id[i]) - 1);
		}
		r->ncalls++;
		break;
	case ATLAS_TOOLEV_ARGS:
		if (i != r->ncalls - 1 || (i < MAXCALLS && r->ended[i]))
			abort();
		if (i < MAXCALLS)
			put(&r->args[i], ev->text, ev->len);
		break;
	case ATLAS_TOOLEV_CALL_END:
		if (i != r->ncalls - 1 || (i < MAXCALLS && r->ended[i]))
			abort();
		if (i < MAXCALLS)
			r->ended[i] = true;
		break;
	}
	return 0;
}

static void result_free(struct result *r)
{
	free(r->content.p);
	free(r->reasoning.p);
	for (int i = 0; i < MAXCALLS; i++)
		free(r->args[i].p);
}

static bool same_text(const struct text *a, const struct text *b)
{
	return a->n == b->n && (!a->n || !memcmp(a->p, b->p, a->n));
}

static void check_same(const struct result *a, const struct result *b)
{
	if (!same_text(&a->content, &b->content) || !same_text(&a->reasoning, &b->reasoning) ||
	    a->ncalls != b->ncalls)
		abort();
	for (int i = 0; i < a->ncalls && i < MAXCALLS; i++)
		if (strcmp(a->name[i], b->name[i]) || strcmp(a->id[i], b->id[i]) ||
		    a->ended[i] != b->ended[i] || !same_text(&a->args[i], &b->args[i]))
			abort();
}

/* An ended call's arguments are one strict JSON text (inside [ ] for
 * json-c, which cannot tell where a bare top-level number ends). */
static void check_json(const struct result *r)
{
	for (int i = 0; i < r->ncalls && i < MAXCALLS; i++) {
		struct text t = {0};
		if (!r->ended[i])
			continue;
		put(&t, "[", 1);
		put(&t, r->args[i].p, r->args[i].n);
		put(&t, "]", 1);
		struct json_tokener *tk = json_tokener_new();
		json_tokener_set_flags(tk, JSON_TOKENER_STRICT);
		struct json_object *o = json_tokener_parse_ex(tk, t.p, (int)t.n);
		if (!o || json_tokener_get_error(tk) != json_tokener_success ||
		    json_tokener_get_parse_end(tk) != t.n)
			abort();
		json_object_put(o);
		json_tokener_free(tk);
		free(t.p);
	}
}

static struct json_object *tools;

/* mode 0: one piece; 1: byte by byte; 2: random pieces. */
static void run(const uint8_t *data, size_t size, int mode, struct result *r)
{
	uint8_t h = data[0];
	uint32_t x = 0x9e3779b9u ^ data[1];
	const char *t = (const char *)data + 2;
	size_t n = size - 2, at = 0;
	struct atlas_toolparse *p;

	fmt = h % 5;
	p = atlas_toolparse_new((enum atlas_toolfmt)fmt, h & 8, h & 16, tools, 1234);
	if (!p)
		abort();
	memset(r, 0, sizeof(*r));
	while (at < n) {
		size_t k = n - at;
		if (mode == 1) {
			k = 1;
		} else if (mode == 2) {
			x = x * 1664525u + 1013904223u;
			k = 1 + (x >> 16) % 32;
			k = k > n - at ? n - at : k;
		}
		if (atlas_toolparse_feed(p, t + at, k, on_event, r))
			abort();
		at += k;
	}
	if (atlas_toolparse_finish(p, on_event, r))
		abort();
	if (atlas_toolparse_ncalls(p) != r->ncalls)
		abort();
	for (int i = 0; i < r->ncalls && i < MAXCALLS; i++)
		if (atlas_toolparse_call_complete(p, i) != r->ended[i])
			abort();
	atlas_toolparse_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct result a, b, c;

	if (size < 2)
		return 0;
	if (!tools)
		tools = json_tokener_parse(
		    "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
		    "{\"type\": \"object\", \"properties\": {\"s\": {\"type\": \"string\"}, "
		    "\"n\": {\"type\": \"integer\"}, \"b\": {\"type\": \"boolean\"}}}}}]");
	run(data, size, 0, &a);
	run(data, size, 1, &b);
	run(data, size, 2, &c);
	check_same(&a, &b);
	check_same(&a, &c);
	check_json(&a);
	result_free(&a);
	result_free(&b);
	result_free(&c);
	return 0;
}
