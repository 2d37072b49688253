/* agent.c - what agents send: tools and tool_choice, structured output
 * (response_format, and the grammar and regex extensions), and the
 * switches of reasoning models (chat_template_kwargs, enable_thinking,
 * reasoning_effort). A request is checked here before anything is
 * submitted: a bad tool, schema or choice is a 400 naming the field.
 *
 * Constraints become one grammar (lib/engine/grammar.h) the sampler masks
 * by: tool_choice "required" or a named function gives the model's own
 * tool-call syntax with arguments that match the tool's schema
 * (atlas_toolfmt_grammar); response_format a JSON schema or any JSON
 * object; "grammar" a grammar text; "regex" a regular expression. At most
 * one per request. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "../engine/grammar.h"
#include "serve_internal.h"
#include "toolcall.h"

/* Compiled grammars by their text: agents send the same tools and schemas
 * request after request, and a grammar's mask cache (grammar.h) is what
 * makes its masks cheap, so a grammar is compiled once and shared (they
 * are reference-counted and thread-safe). The least recently used of
 * GRAMMARS_MAX is dropped for a new one. */
#define GRAMMARS_MAX 64

struct serve_grammars {
	pthread_mutex_t mu;
	struct {
		char *text;                 /* the grammar text (owned) */
		size_t len;                 /* its bytes */
		struct atlas_grammar *g;    /* the table's reference */
		uint64_t used;              /* last use (tick) */
	} e[GRAMMARS_MAX];
	uint64_t tick;
};

static struct atlas_grammar *lookup(struct serve_grammars *t, const char *text, size_t len)
{
	for (int i = 0; i < GRAMMARS_MAX; i++)
		if (t->e[i].g && t->e[i].len == len && !memcmp(t->e[i].text, text, len)) {
			t->e[i].used = ++t->tick;
			return atlas_grammar_ref(t->e[i].g);
		}
	return NULL;
}

/* The markers of the server's tool-call syntax that the tokenizer has as
 * special tokens become tokens the grammar may use where it spells them
 * (a real model writes [TOOL_CALLS] as its one token, never as "[", "TOOL"
 * ...). The set depends only on the server, so a grammar's text still
 * identifies it in the table. */
static int allow_markers(struct atlas_server *s, struct atlas_grammar *g)
{
	static const char *const markers[] = {"[TOOL_CALLS]", "[ARGS]", "[CALL_ID]",
					      "<|python_tag|>", "<tool_call>", "</tool_call>"};
	if (s->toolfmt == ATLAS_TOOLFMT_NONE)
		return 0;
	for (size_t i = 0; i < sizeof(markers) / sizeof(markers[0]); i++) {
		int32_t id = atlas_tok_lookup(s->tok, markers[i]);
		if (id >= 0 && atlas_tok_is_special(s->tok, id) &&
		    atlas_grammar_allow_special(g, id, markers[i], strlen(markers[i])))
			return -1;
	}
	return 0;
}

/* The compiled grammar of `text` (a new reference), from the table or
 * compiled now; NULL with a message. */
static struct atlas_grammar *grammar_for(struct atlas_server *s, const char *text)
{
	size_t len = strlen(text);
	struct serve_grammars *t = s->grammars;
	struct atlas_grammar *g;
	pthread_mutex_lock(&t->mu);
	g = lookup(t, text, len);
	pthread_mutex_unlock(&t->mu);
	if (g)
		return g;
	/* compiled outside the lock: two requests may race to compile the
	 * same text, and the second simply replaces nothing */
	if (!(g = atlas_grammar_compile(text, len, s->gvocab)))
		return NULL;
	if (allow_markers(s, g)) {
		atlas_grammar_free(g);
		return NULL;
	}
	char *copy = malloc(len + 1);
	if (!copy)
		return g; /* unshared, still usable */
	memcpy(copy, text, len + 1);
	pthread_mutex_lock(&t->mu);
	struct atlas_grammar *other = lookup(t, text, len);
	if (other) {
		pthread_mutex_unlock(&t->mu);
		free(copy);
		atlas_grammar_free(g);
		return other;
	}
	int v = 0;
	for (int i = 1; i < GRAMMARS_MAX; i++)
		if (!t->e[i].g || (t->e[v].g && t->e[i].used < t->e[v].used))
			v = i;
	struct atlas_grammar *old = t->e[v].g;
	free(t->e[v].text);
	t->e[v].text = copy;
	t->e[v].len = len;
	t->e[v].g = atlas_grammar_ref(g);
	t->e[v].used = ++t->tick;
	pthread_mutex_unlock(&t->mu);
	if (old)
		atlas_grammar_free(old); /* requests using it hold their own */
	return g;
}

void serve_grammars_free(struct atlas_server *s)
{
	struct serve_grammars *t = s->grammars;
	if (!t)
		return;
	for (int i = 0; i < GRAMMARS_MAX; i++) {
		if (t->e[i].g)
			atlas_grammar_free(t->e[i].g);
		free(t->e[i].text);
	}
	pthread_mutex_destroy(&t->mu);
	free(t);
	s->grammars = NULL;
}

int serve_grammars_init(struct atlas_server *s)
{
	if (s->grammars)
		return 0;
	if (!(s->grammars = calloc(1, sizeof(*s->grammars))))
		return -1;
	pthread_mutex_init(&s->grammars->mu, NULL);
	return 0;
}

void serve_agent_free(struct serve_agent *a)
{
	json_object_put(a->tools);
	a->tools = NULL;
	if (a->grammar)
		atlas_grammar_free(a->grammar);
	a->grammar = NULL;
}

/* 'tools': a list of {"type": "function", "function": {"name", ...}}. */
static int check_tools(json_object *tools, struct serve_err *e)
{
	if (!json_object_is_type(tools, json_type_array))
		return serve_err_set(e, 400, "tools", "invalid_type", "'tools' must be a list");
	size_t n = json_object_array_length(tools);
	for (size_t i = 0; i < n; i++) {
		json_object *t = json_object_array_get_idx(tools, i), *type, *fn, *name, *params;
		if (!json_object_is_type(t, json_type_object))
			return serve_err_set(e, 400, "tools", "invalid_type",
					     "'tools[%zu]' must be an object", i);
		if (json_object_object_get_ex(t, "type", &type) &&
		    (!json_object_is_type(type, json_type_string) ||
		     strcmp(json_object_get_string(type), "function")))
			return serve_err_set(e, 400, "tools", "invalid_value",
					     "'tools[%zu].type' must be \"function\"", i);
		if (!json_object_object_get_ex(t, "function", &fn) ||
		    !json_object_is_type(fn, json_type_object))
			return serve_err_set(e, 400, "tools", "invalid_type",
					     "'tools[%zu].function' must be an object", i);
		if (!json_object_object_get_ex(fn, "name", &name) ||
		    !json_object_is_type(name, json_type_string) || !json_object_get_string_len(name))
			return serve_err_set(e, 400, "tools", "invalid_type",
					     "'tools[%zu].function.name' must be a non-empty string", i);
		for (const char *p = json_object_get_string(name); *p; p++)
			if (!(*p == '_' || *p == '-' || *p == '.' || (*p >= '0' && *p <= '9') ||
			      (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
				return serve_err_set(e, 400, "tools", "invalid_value",
						     "'tools[%zu].function.name' may hold only letters, "
						     "digits, '_', '-' and '.'", i);
		if (json_object_object_get_ex(fn, "parameters", &params) && params &&
		    !json_object_is_type(params, json_type_object))
			return serve_err_set(e, 400, "tools", "invalid_type",
					     "'tools[%zu].function.parameters' must be an object "
					     "(a JSON schema)", i);
	}
	return 0;
}

static bool has_tool(json_object *tools, const char *name)
{
	for (size_t i = 0; tools && i < json_object_array_length(tools); i++) {
		json_object *fn, *nm;
		if (json_object_object_get_ex(json_object_array_get_idx(tools, i), "function", &fn) &&
		    json_object_object_get_ex(fn, "name", &nm) &&
		    !strcmp(json_object_get_string(nm), name))
			return true;
	}
	return false;
}

enum choice { CHOICE_NONE, CHOICE_AUTO, CHOICE_REQUIRED, CHOICE_NAMED };

/* 'tool_choice': "none", "auto", "required", or {"type": "function",
 * "function": {"name": N}}; *name is set for the last. */
static int parse_choice(json_object *b, json_object *tools, enum choice *out, const char **name,
			struct serve_err *e)
{
	json_object *tc;
	*out = tools ? CHOICE_AUTO : CHOICE_NONE;
	*name = NULL;
	if (!json_object_object_get_ex(b, "tool_choice", &tc) || !tc)
		return 0;
	if (json_object_is_type(tc, json_type_string)) {
		const char *v = json_object_get_string(tc);
		if (!strcmp(v, "none"))
			*out = CHOICE_NONE;
		else if (!strcmp(v, "auto"))
			*out = tools ? CHOICE_AUTO : CHOICE_NONE;
		else if (!strcmp(v, "required"))
			*out = CHOICE_REQUIRED;
		else
			return serve_err_set(e, 400, "tool_choice", "invalid_value",
					     "'tool_choice' must be \"none\", \"auto\", \"required\" or "
					     "{\"type\": \"function\", \"function\": {\"name\": ...}}, not \"%s\"",
					     v);
	} else if (json_object_is_type(tc, json_type_object)) {
		json_object *fn, *nm;
		if (!json_object_object_get_ex(tc, "function", &fn) ||
		    !json_object_object_get_ex(fn, "name", &nm) ||
		    !json_object_is_type(nm, json_type_string))
			return serve_err_set(e, 400, "tool_choice", "invalid_value",
					     "'tool_choice' as an object must be {\"type\": \"function\", "
					     "\"function\": {\"name\": ...}}");
		*out = CHOICE_NAMED;
		*name = json_object_get_string(nm);
	} else {
		return serve_err_set(e, 400, "tool_choice", "invalid_type",
				     "'tool_choice' must be a string or an object");
	}
	if ((*out == CHOICE_REQUIRED || *out == CHOICE_NAMED) && !tools)
		return serve_err_set(e, 400, "tool_choice", "invalid_value",
				     "'tool_choice' asks for a tool call but 'tools' is empty or missing");
	if (*out == CHOICE_NAMED && !has_tool(tools, *name))
		return serve_err_set(e, 400, "tool_choice", "invalid_value",
				     "'tool_choice' names function '%s', which is not in 'tools'", *name);
	return 0;
}

/* Assistant turns as templates expect them: content null (a turn with
 * only tool calls) becomes "", and each call's arguments, a JSON string
 * in the OpenAI shape, the object it holds. */
static int fix_messages(json_object *b, struct serve_err *e)
{
	json_object *msgs;
	if (!json_object_object_get_ex(b, "messages", &msgs) ||
	    !json_object_is_type(msgs, json_type_array))
		return 0; /* check_messages reports it */
	for (size_t i = 0; i < json_object_array_length(msgs); i++) {
		json_object *m = json_object_array_get_idx(msgs, i), *content, *calls;
		if (!json_object_is_type(m, json_type_object))
			continue;
		if (json_object_object_get_ex(m, "content", &content) && !content)
			json_object_object_add(m, "content", json_object_new_string(""));
		if (!json_object_object_get_ex(m, "tool_calls", &calls) || !calls)
			continue;
		if (!json_object_is_type(calls, json_type_array))
			return serve_err_set(e, 400, "messages", "invalid_type",
					     "'messages[%zu].tool_calls' must be a list", i);
		for (size_t k = 0; k < json_object_array_length(calls); k++) {
			json_object *c = json_object_array_get_idx(calls, k), *fn, *args;
			if (!json_object_is_type(c, json_type_object) ||
			    !json_object_object_get_ex(c, "function", &fn) ||
			    !json_object_is_type(fn, json_type_object))
				return serve_err_set(e, 400, "messages", "invalid_type",
						     "'messages[%zu].tool_calls[%zu]' must be "
						     "{\"type\": \"function\", \"function\": {...}}", i, k);
			if (!json_object_object_get_ex(fn, "arguments", &args) ||
			    !json_object_is_type(args, json_type_string))
				continue;
			json_object *obj = json_tokener_parse(json_object_get_string(args));
			if (obj && json_object_is_type(obj, json_type_object))
				json_object_object_add(fn, "arguments", obj);
			else
				json_object_put(obj);
		}
	}
	return 0;
}

/* chat_template_kwargs, enable_thinking and reasoning_effort become
 * variables of the template (keys of b). */
static int template_vars(json_object *b, struct serve_err *e)
{
	json_object *kw, *v;
	if (json_object_object_get_ex(b, "chat_template_kwargs", &kw) && kw) {
		if (!json_object_is_type(kw, json_type_object))
			return serve_err_set(e, 400, "chat_template_kwargs", "invalid_type",
					     "'chat_template_kwargs' must be an object");
		json_object_object_foreach(kw, key, val) {
			if (!strcmp(key, "messages") || !strcmp(key, "tools"))
				return serve_err_set(e, 400, "chat_template_kwargs", "invalid_value",
						     "'chat_template_kwargs' may not set '%s'", key);
			json_object_object_add(b, key, json_object_get(val));
		}
	}
	if (json_object_object_get_ex(b, "enable_thinking", &v) && v &&
	    !json_object_is_type(v, json_type_boolean))
		return serve_err_set(e, 400, "enable_thinking", "invalid_type",
				     "'enable_thinking' must be a boolean");
	if (json_object_object_get_ex(b, "reasoning_effort", &v) && v) {
		static const char *const ok[] = {"none", "minimal", "low", "medium", "high"};
		const char *s = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : "";
		size_t i = 0;
		while (i < 5 && strcmp(s, ok[i]))
			i++;
		if (i == 5)
			return serve_err_set(e, 400, "reasoning_effort", "invalid_value",
					     "'reasoning_effort' must be one of none, minimal, low, medium, high");
		if (!strcmp(s, "none") && !json_object_object_get_ex(b, "enable_thinking", NULL))
			json_object_object_add(b, "enable_thinking", json_object_new_boolean(0));
	}
	return 0;
}

/* The grammar text of response_format, or NULL (none asked, or e set:
 * *rc = -1). */
static char *format_grammar(json_object *b, int *rc, struct serve_err *e)
{
	json_object *rf, *type, *js, *schema;
	*rc = 0;
	if (!json_object_object_get_ex(b, "response_format", &rf) || !rf)
		return NULL;
	if (!json_object_is_type(rf, json_type_object) ||
	    !json_object_object_get_ex(rf, "type", &type) ||
	    !json_object_is_type(type, json_type_string)) {
		*rc = serve_err_set(e, 400, "response_format", "invalid_type",
				    "'response_format' must be an object with a 'type'");
		return NULL;
	}
	const char *t = json_object_get_string(type);
	if (!strcmp(t, "text"))
		return NULL;
	if (!strcmp(t, "json_object"))
		return atlas_json_object_grammar("");
	if (strcmp(t, "json_schema")) {
		*rc = serve_err_set(e, 400, "response_format", "invalid_value",
				    "'response_format.type' must be \"text\", \"json_object\" or "
				    "\"json_schema\", not \"%s\"", t);
		return NULL;
	}
	if (!json_object_object_get_ex(rf, "json_schema", &js) ||
	    !json_object_is_type(js, json_type_object) ||
	    !json_object_object_get_ex(js, "schema", &schema) ||
	    !(json_object_is_type(schema, json_type_object) ||
	      json_object_is_type(schema, json_type_boolean))) {
		*rc = serve_err_set(e, 400, "response_format", "invalid_value",
				    "'response_format.json_schema.schema' must be a JSON schema object");
		return NULL;
	}
	const char *bad = NULL;
	char *g = atlas_json_schema_grammar(schema, "", &bad);
	if (!g)
		*rc = serve_err_set(e, 400, "response_format", bad ? "unsupported_schema" : "invalid_schema",
				    "'response_format.json_schema.schema': %s", atlas_errmsg());
	return g;
}

/* A string extension field ("grammar", "regex"), or NULL. */
static int get_str(json_object *b, const char *k, const char **out, struct serve_err *e)
{
	json_object *v;
	*out = NULL;
	if (!json_object_object_get_ex(b, k, &v) || !v)
		return 0;
	if (!json_object_is_type(v, json_type_string))
		return serve_err_set(e, 400, k, "invalid_type", "'%s' must be a string", k);
	*out = json_object_get_string(v);
	return 0;
}

/* The one constraint of the request as grammar text (NULL: none), with
 * the field it came from in *field. */
static char *constraint(json_object *b, struct serve_gen *g,
			enum choice ch, const char *name, bool parallel, const char **field,
			int *rc, struct serve_err *e)
{
	const char *gtext, *re;
	char *text = NULL;
	int n = 0;
	*rc = 0;
	*field = NULL;
	if ((*rc = get_str(b, "grammar", &gtext, e)) || (*rc = get_str(b, "regex", &re, e)))
		return NULL;
	json_object *rf, *type;
	bool fmt = json_object_object_get_ex(b, "response_format", &rf) && rf &&
		   !(json_object_object_get_ex(rf, "type", &type) &&
		     json_object_is_type(type, json_type_string) &&
		     !strcmp(json_object_get_string(type), "text"));
	bool tool = ch == CHOICE_REQUIRED || ch == CHOICE_NAMED;
	n = (gtext != NULL) + (re != NULL) + fmt + tool;
	if (n > 1) {
		*rc = serve_err_set(e, 400, NULL, "invalid_value",
				    "only one of 'response_format', 'grammar', 'regex' and a required "
				    "'tool_choice' may constrain a request");
		return NULL;
	}
	if (tool) {
		*field = "tool_choice";
		if (g->ag.fmt == ATLAS_TOOLFMT_NONE) {
			*rc = serve_err_set(e, 400, "tool_choice", "invalid_value",
					    "the model's tool-call syntax is unknown, so a tool call "
					    "cannot be required (start atlas-serve with --tool-parser)");
			return NULL;
		}
		text = atlas_toolfmt_grammar(g->ag.fmt, g->ag.tools, name, parallel);
		if (!text)
			*rc = serve_err_set(e, 400, "tools", "invalid_value", "%s", atlas_errmsg());
		return text;
	}
	if (fmt) {
		*field = "response_format";
		return format_grammar(b, rc, e);
	}
	if (gtext) {
		*field = "grammar";
		if (!(text = strdup(gtext)))
			*rc = serve_err_set(e, 500, NULL, NULL, "out of memory");
		return text;
	}
	if (re) {
		*field = "regex";
		if (!(text = atlas_regex_grammar(re, "")))
			*rc = serve_err_set(e, 400, "regex", "invalid_value", "'regex': %s",
					    atlas_errmsg());
		return text;
	}
	return NULL;
}

int serve_agent_parse(struct atlas_server *s, json_object *b, int kind, struct serve_gen *g,
		      struct serve_err *e)
{
	json_object *tools = NULL, *v;
	if (kind == JOB_COMPLETION) {
		/* no tools, no template: the constraint fields only */
	} else if (json_object_object_get_ex(b, "tools", &tools) && tools) {
		if (check_tools(tools, e))
			return -1;
		if (!json_object_array_length(tools))
			tools = NULL;
	} else {
		tools = NULL;
	}
	enum choice ch;
	const char *name;
	if (parse_choice(b, tools, &ch, &name, e))
		return -1;
	bool parallel = true;
	if (json_object_object_get_ex(b, "parallel_tool_calls", &v) && v) {
		if (!json_object_is_type(v, json_type_boolean))
			return serve_err_set(e, 400, "parallel_tool_calls", "invalid_type",
					     "'parallel_tool_calls' must be a boolean");
		parallel = json_object_get_boolean(v);
	}
	if (kind != JOB_COMPLETION && (fix_messages(b, e) || template_vars(b, e)))
		return -1;
	if (tools && ch != CHOICE_NONE) {
		g->ag.fmt = s->toolfmt;
		g->ag.tools = json_object_get(tools);
	}
	g->ag.reasoning = s->reasoning && kind != JOB_COMPLETION;
	const char *field;
	int rc;
	char *text = constraint(b, g, ch, name, parallel, &field, &rc, e);
	if (rc)
		return -1;
	if (!text)
		return 0;
	if (!s->gvocab || !s->grammars) {
		free(text);
		return serve_err_set(e, 400, field, "invalid_value",
				     "grammar-constrained output needs the model's tokenizer");
	}
	g->ag.grammar = grammar_for(s, text);
	free(text);
	if (!g->ag.grammar)
		return serve_err_set(e, 400, field, "invalid_value", "'%s': %s", field,
				     atlas_errmsg());
	return 0;
}

void serve_agent_apply(struct atlas_server *s, struct serve_gen *g)
{
	struct atlas_gen_params *gen = &g->sp.gen;
	gen->grammar = g->ag.grammar;
	gen->reasoning = g->ag.reasoning && s->think_start >= 0 && s->think_end >= 0;
	gen->start_in_reasoning = g->ag.start_in_reasoning;
	gen->think_start = s->think_start;
	gen->think_end = s->think_end;
	gen->reasoning_budget = g->ag.reasoning_budget > 0 ? g->ag.reasoning_budget
							   : s->p.reasoning_budget;
}
