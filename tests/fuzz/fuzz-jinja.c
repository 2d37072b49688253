/* fuzz-jinja.c - libFuzzer entry point for the chat-template interpreter.
 *
 * An input is a template, then optionally a NUL byte and a JSON document
 * of variables: an object is used as it is, an array becomes "messages",
 * anything else (or no NUL) gives a fixed two-message conversation. The
 * template is parsed and, when it parses, rendered under small limits
 * (100,000 steps, 1 MiB of output, 64 MiB of memory) so that runaway
 * templates fail fast instead of timing out; a render must succeed with
 * a NUL-terminated output or fail with a message. See README. */
#include <json.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/core/error.h"
#include "../../lib/tok/jinja.h"

static const char default_vars[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"be brief\"},"
    " {\"role\": \"user\", \"content\": \"h\\u00e9llo <b>\", \"tool_calls\": "
    "[{\"function\": {\"name\": \"f\", \"arguments\": {\"a\": [1, 2.5, null]}}}]}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]}";

/* The variables from the bytes after the NUL (owned by the caller). */
static json_object *variables(const uint8_t *data, size_t size)
{
	json_object *v = NULL;
	if (data && size <= 1 << 20) {
		json_tokener *t = json_tokener_new();
		if (t) {
			v = json_tokener_parse_ex(t, (const char *)data, (int)size);
			json_tokener_free(t);
		}
	}
	if (v && json_object_is_type(v, json_type_array)) {
		json_object *o = json_object_new_object();
		json_object_object_add(o, "messages", v);
		v = o;
	} else if (!v || !json_object_is_type(v, json_type_object)) {
		json_object_put(v);
		v = json_tokener_parse(default_vars);
	}
	/* what atlas_chat_render adds */
	if (!json_object_object_get_ex(v, "add_generation_prompt", NULL))
		json_object_object_add(v, "add_generation_prompt", json_object_new_boolean(1));
	if (!json_object_object_get_ex(v, "bos_token", NULL))
		json_object_object_add(v, "bos_token", json_object_new_string("<s>"));
	if (!json_object_object_get_ex(v, "eos_token", NULL))
		json_object_object_add(v, "eos_token", json_object_new_string("</s>"));
	return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nul = memchr(data, 0, size);
	size_t tlen = nul ? (size_t)(nul - data) : size;
	struct atlas_jinja *t = NULL;
	if (atlas_jinja_parse((const char *)data, tlen, &t)) {
		if (t || !atlas_errmsg()[0])
			abort(); /* a failed parse returns nothing and says why */
		return 0;
	}
	json_object *vars = variables(nul ? nul + 1 : NULL, nul ? size - tlen - 1 : 0);
	struct atlas_jinja_limits lim = {
	    .max_steps = 100000,
	    .max_output = (size_t)1 << 20,
	    .max_memory = (size_t)64 << 20,
	};
	char *out = NULL;
	size_t len = 0;
	int rc = atlas_jinja_render_limited(t, vars, &lim, &out, &len);
	if (!rc && (!out || len > lim.max_output || out[len] != '\0'))
		abort(); /* the output is NUL-terminated and within the limit */
	if (rc && (out || !atlas_errmsg()[0]))
		abort();
	free(out);
	json_object_put(vars);
	atlas_jinja_free(t);
	return 0;
}
