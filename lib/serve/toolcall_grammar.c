/* toolcall_grammar.c - the grammar (lib/engine/grammar.h syntax) of
 * output that is only tool calls, for tool_choice "required" or a named
 * function: the markers of the format written exactly as the parser of
 * toolcall.c reads them, with each tool's "parameters" schema compiled by
 * atlas_json_schema_grammar under its own prefix ("t0-", "t1-", ...), so
 * that the schemas of several tools share one grammar. Our own rules
 * (root, call, xml-text, toolN...) stay out of those prefixes.
 *
 * Markers that are special tokens in the model's vocabulary (mistral's
 * [TOOL_CALLS]) can only be spelled with ordinary tokens under a grammar
 * (the matcher never allows a special token); the parser reads the same
 * bytes either way. */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "../engine/grammar.h"
#include "toolcall.h"

/* One tool of the request, validated. */
struct tool {
	const char *name;	    /* function.name */
	struct json_object *params; /* function.parameters (NULL: {}) */
};

/* `s` as a grammar literal, quotes included. */
static void put_lit(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
		if (*c == '"' || *c == '\\')
			fprintf(f, "\\%c", *c);
		else if (*c == '\n')
			fputs("\\n", f);
		else if (*c < 0x20 || *c == 0x7f)
			fprintf(f, "\\x%02X", *c);
		else
			fputc(*c, f);
	}
	fputc('"', f);
}

/* The name as a JSON string (quotes included), as the model writes it. */
static const char *json_name(struct json_object **tmp, const char *name)
{
	*tmp = json_object_new_string(name);
	return json_object_to_json_string_ext(*tmp, JSON_C_TO_STRING_PLAIN |
							JSON_C_TO_STRING_NOSLASHESCAPE);
}

/* Check the OpenAI shape of tools[i]. 0 or ATLAS_EINVAL naming what is
 * wrong. */
static int tool_get(struct json_object *tools, size_t i, struct tool *t)
{
	struct json_object *o = json_object_array_get_idx(tools, i), *type, *fn, *name;

	if (!json_object_is_type(o, json_type_object))
		return atlas_error(ATLAS_EINVAL, "tools[%zu] is not an object", i);
	if (!json_object_object_get_ex(o, "type", &type) ||
	    !json_object_is_type(type, json_type_string) ||
	    strcmp(json_object_get_string(type), "function"))
		return atlas_error(ATLAS_EINVAL, "tools[%zu].type must be \"function\"", i);
	if (!json_object_object_get_ex(o, "function", &fn) ||
	    !json_object_is_type(fn, json_type_object))
		return atlas_error(ATLAS_EINVAL, "tools[%zu].function is missing or not an object",
				   i);
	if (!json_object_object_get_ex(fn, "name", &name) ||
	    !json_object_is_type(name, json_type_string) || !*json_object_get_string(name))
		return atlas_error(ATLAS_EINVAL,
				   "tools[%zu].function.name is missing or not a string", i);
	t->name = json_object_get_string(name);
	t->params = NULL;
	if (json_object_object_get_ex(fn, "parameters", &t->params) && t->params &&
	    !json_object_is_type(t->params, json_type_object))
		return atlas_error(ATLAS_EINVAL, "tools[%zu].function.parameters is not an object",
				   i);
	return 0;
}

/* Write the schema grammar of `schema` (NULL: any object) under prefix;
 * errors name tools[i] and `what`. */
static int put_schema(FILE *f, struct json_object *schema, const char *prefix, size_t i,
		      const char *what)
{
	const char *bad = NULL;
	struct json_object *empty = NULL;
	char *g;

	if (!schema) /* no parameters: any object */
		schema = empty = json_tokener_parse("{\"type\": \"object\"}");
	g = atlas_json_schema_grammar(schema, prefix, &bad);
	json_object_put(empty);
	if (!g)
		return atlas_error_wrap(bad ? ATLAS_EUNSUPPORTED : ATLAS_EINVAL, "tools[%zu] %s", i,
					what);
	fputs(g, f);
	fputc('\n', f);
	free(g);
	return 0;
}

/* Is property `pname` of `params` a plain string (written raw between
 * the qwen3_coder tags, not as JSON)? */
static bool xml_raw_string(struct json_object *prop)
{
	struct json_object *type;
	return json_object_object_get_ex(prop, "type", &type) &&
	       json_object_is_type(type, json_type_string) &&
	       !strcmp(json_object_get_string(type), "string");
}

static bool is_required(struct json_object *params, const char *pname)
{
	struct json_object *req;
	if (!json_object_object_get_ex(params, "required", &req) ||
	    !json_object_is_type(req, json_type_array))
		return false;
	for (size_t k = 0; k < json_object_array_length(req); k++) {
		const char *r = json_object_get_string(json_object_array_get_idx(req, k));
		if (r && !strcmp(r, pname))
			return true;
	}
	return false;
}

/* qwen3_coder: <parameter=P>\nVALUE\n</parameter>\n for each property, in
 * the schema's order, the required ones mandatory. */
static int put_xml_params(FILE *f, const struct tool *t, size_t i)
{
	struct json_object *props = NULL;
	char pre[48];
	int k = 0, rc;

	if (!t->params || !json_object_object_get_ex(t->params, "properties", &props) ||
	    !json_object_is_type(props, json_type_object)) {
		fprintf(f,
			"tool%zu-params ::= ( \"<parameter=\" [a-zA-Z0-9_.-]+ \">\\n\" xml-text "
			"\"\\n</parameter>\\n\" )*\n",
			i);
		return 0;
	}
	fprintf(f, "tool%zu-params ::=%s", i, json_object_object_length(props) ? "" : " \"\"");
	json_object_object_foreach(props, pname, prop)
	{
		(void)prop;
		fprintf(f, " tool%zu-p%d%s", i, k++, is_required(t->params, pname) ? "" : "?");
	}
	fputc('\n', f);
	k = 0;
	json_object_object_foreach(props, pname2, prop2)
	{
		fprintf(f, "tool%zu-p%d ::= ", i, k);
		put_lit(f, "<parameter=");
		fputc(' ', f);
		put_lit(f, pname2);
		fputs(" \">\\n\" ", f);
		snprintf(pre, sizeof(pre), "t%zu-p%d-", i, k);
		fprintf(f, "%s%s \"\\n</parameter>\\n\"\n",
			xml_raw_string(prop2) ? "xml-text" : pre,
			xml_raw_string(prop2) ? "" : "root");
		if (!xml_raw_string(prop2) &&
		    (rc = put_schema(f, prop2, pre, i, "parameter schema")))
			return rc;
		k++;
	}
	return 0;
}

/* The call rule of tool i. */
static int put_call(FILE *f, enum atlas_toolfmt fmt, const struct tool *t, size_t i)
{
	struct json_object *tmp = NULL;
	char pre[32];
	int rc = 0;

	snprintf(pre, sizeof(pre), "t%zu-", i);
	fprintf(f, "tool%zu ::= ", i);
	if (fmt == ATLAS_TOOLFMT_QWEN3_CODER) {
		char *head;
		if (asprintf(&head, "<tool_call>\n<function=%s>\n", t->name) < 0)
			return atlas_error(ATLAS_ENOMEM, "out of memory");
		put_lit(f, head);
		free(head);
		fprintf(f, " tool%zu-params \"</function>\\n</tool_call>\"\n", i);
		return put_xml_params(f, t, i);
	}
	const char *jname = json_name(&tmp, t->name);
	char *head;
	if (asprintf(&head, "%s{\"name\": %s, \"%s\": ",
		     fmt == ATLAS_TOOLFMT_HERMES ? "<tool_call>\n" : "", jname,
		     fmt == ATLAS_TOOLFMT_LLAMA3_JSON ? "parameters" : "arguments") < 0) {
		json_object_put(tmp);
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	}
	json_object_put(tmp);
	put_lit(f, head);
	free(head);
	fprintf(f, " %sroot ", pre);
	put_lit(f, fmt == ATLAS_TOOLFMT_HERMES ? "}\n</tool_call>" : "}");
	fputc('\n', f);
	rc = put_schema(f, t->params, pre, i, "parameters");
	return rc;
}

/* root and call: the calls of the format, joined by its separator. */
static void put_root(FILE *f, enum atlas_toolfmt fmt, bool parallel)
{
	static const char *const sep[] = {
	    [ATLAS_TOOLFMT_HERMES] = "\\n",
	    [ATLAS_TOOLFMT_QWEN3_CODER] = "\\n",
	    [ATLAS_TOOLFMT_LLAMA3_JSON] = "; ",
	    [ATLAS_TOOLFMT_MISTRAL] = ", ",
	};
	const char *open = fmt == ATLAS_TOOLFMT_MISTRAL ? "\"[TOOL_CALLS][\" " : "";
	const char *close = fmt == ATLAS_TOOLFMT_MISTRAL ? " \"]\"" : "";

	if (parallel)
		fprintf(f, "root ::= %scall ( \"%s\" call )*%s\n", open, sep[fmt], close);
	else
		fprintf(f, "root ::= %scall%s\n", open, close);
}

char *atlas_toolfmt_grammar(enum atlas_toolfmt fmt, struct json_object *tools, const char *only,
			    bool parallel)
{
	char *text = NULL;
	size_t len = 0, n, found = 0;
	struct tool t;
	FILE *f;
	int rc = 0;

	if (fmt <= ATLAS_TOOLFMT_NONE || fmt > ATLAS_TOOLFMT_MISTRAL) {
		atlas_error(ATLAS_EINVAL, "the model has no tool-call format");
		return NULL;
	}
	if (!json_object_is_type(tools, json_type_array) ||
	    !(n = json_object_array_length(tools))) {
		atlas_error(ATLAS_EINVAL, "tools must be a non-empty array");
		return NULL;
	}
	for (size_t i = 0; i < n; i++) {
		if (tool_get(tools, i, &t))
			return NULL;
		found += only && !strcmp(t.name, only);
	}
	if (only && !found) {
		atlas_error(ATLAS_EINVAL, "tool_choice names function '%s', which is not in tools",
			    only);
		return NULL;
	}
	if (!(f = open_memstream(&text, &len))) {
		atlas_error(ATLAS_ENOMEM, "out of memory");
		return NULL;
	}
	fprintf(f, "# tool calls, %s format (atlas_toolfmt_grammar)\n", atlas_toolfmt_name(fmt));
	put_root(f, fmt, parallel);
	fputs("call ::=", f);
	found = 0;
	for (size_t i = 0; i < n; i++) {
		tool_get(tools, i, &t);
		if (!only || !strcmp(t.name, only))
			fprintf(f, "%s tool%zu", found++ ? " |" : "", i);
	}
	fputc('\n', f);
	if (fmt == ATLAS_TOOLFMT_QWEN3_CODER)
		fputs("xml-text ::= ( [^<] | \"<\" [^/] )*\n", f);
	for (size_t i = 0; i < n && !rc; i++) {
		tool_get(tools, i, &t);
		if (!only || !strcmp(t.name, only))
			rc = put_call(f, fmt, &t, i);
	}
	if (fclose(f) || rc) {
		if (!rc)
			atlas_error(ATLAS_ENOMEM, "out of memory");
		free(text);
		return NULL;
	}
	return text;
}
