/* chat.c - the chat template of tokenizer_config.json: parsed when the
 * tokenizer loads, rendered per request with the variables transformers'
 * apply_chat_template passes (messages, tools, documents,
 * add_generation_prompt, the special-token strings, and any extra keys
 * of the request), within the process-wide limits of
 * atlas_chat_set_limits. */
#include <json.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "chat.h"
#include "jinja.h"
#include "tok_internal.h"

struct atlas_chat_tmpl {
	struct atlas_jinja *tmpl; /* the parsed template */
	json_object *special;	  /* bos_token, eos_token, ... as strings (template variables) */
	char *src;		  /* the template's text (what tool syntax it uses...) */
};

/* The render limits of atlas_chat_set_limits; zero members (the start)
 * mean the interpreter's defaults. Guarded by limits_lock: set once at
 * startup in practice, read at the start of every render. */
static struct atlas_jinja_limits limits;
static pthread_mutex_t limits_lock = PTHREAD_MUTEX_INITIALIZER;

void atlas_chat_set_limits(const struct atlas_chat_limits *lim)
{
	pthread_mutex_lock(&limits_lock);
	limits = (struct atlas_jinja_limits){0};
	if (lim) {
		limits.max_steps = lim->max_steps > 0 ? lim->max_steps : 0;
		limits.max_output = lim->max_output;
		limits.max_memory = lim->max_memory;
	}
	pthread_mutex_unlock(&limits_lock);
}

/* A special token in the config: a string or {"content": ...}. */
static const char *token_string(json_object *cfg, const char *key)
{
	json_object *v = NULL;
	if (!json_object_object_get_ex(cfg, key, &v) || !v)
		return NULL;
	if (json_object_is_type(v, json_type_object) &&
	    !json_object_object_get_ex(v, "content", &v))
		return NULL;
	return json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

/* The template source: a string, or a list of {"name", "template"} of
 * which "default" is taken. NULL when there is none. */
static const char *template_source(json_object *cfg, const char *path, int *rc)
{
	json_object *t = NULL;
	*rc = 0;
	if (!json_object_object_get_ex(cfg, "chat_template", &t) || !t)
		return NULL;
	if (json_object_is_type(t, json_type_string))
		return json_object_get_string(t);
	if (json_object_is_type(t, json_type_array)) {
		for (size_t i = 0; i < json_object_array_length(t); i++) {
			json_object *e = json_object_array_get_idx(t, i), *name, *src;
			if (json_object_object_get_ex(e, "name", &name) &&
			    json_object_object_get_ex(e, "template", &src) &&
			    !strcmp(json_object_get_string(name), "default") &&
			    json_object_is_type(src, json_type_string))
				return json_object_get_string(src);
		}
		*rc = atlas_error(ATLAS_EFORMAT, "'%s': chat_template list has no \"default\" entry",
				  path);
		return NULL;
	}
	*rc = atlas_error(ATLAS_EFORMAT, "'%s': chat_template is neither a string nor a list", path);
	return NULL;
}

int atlas_chat_tmpl_load(json_object *cfg, const char *path, struct atlas_chat_tmpl **out)
{
	static const char *const keys[] = {"bos_token", "eos_token", "unk_token", "sep_token",
					   "pad_token", "cls_token", "mask_token"};
	int rc;
	const char *src = template_source(cfg, path, &rc);
	*out = NULL;
	if (!src)
		return rc;
	struct atlas_chat_tmpl *c = calloc(1, sizeof(*c));
	if (!c || !(c->special = json_object_new_object())) {
		free(c);
		return atlas_error(ATLAS_ENOMEM, "out of memory loading the chat template");
	}
	if (!(c->src = strdup(src))) {
		atlas_chat_tmpl_free(c);
		return atlas_error(ATLAS_ENOMEM, "out of memory loading the chat template");
	}
	rc = atlas_jinja_parse(src, strlen(src), &c->tmpl);
	if (rc) {
		atlas_error_wrap(rc, "'%s'", path);
		atlas_chat_tmpl_free(c);
		return rc;
	}
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		const char *s = token_string(cfg, keys[i]);
		if (s)
			json_object_object_add(c->special, keys[i], json_object_new_string(s));
	}
	*out = c;
	return 0;
}

void atlas_chat_tmpl_free(struct atlas_chat_tmpl *c)
{
	if (!c)
		return;
	atlas_jinja_free(c->tmpl);
	json_object_put(c->special);
	free(c->src);
	free(c);
}

bool atlas_chat_has_template(const struct atlas_tok *tok)
{
	return tok && tok->chat;
}

const char *atlas_chat_template_source(const struct atlas_tok *tok)
{
	return tok && tok->chat ? tok->chat->src : NULL;
}

static int check_request(json_object *req)
{
	json_object *msgs;
	if (!req || !json_object_is_type(req, json_type_object))
		return atlas_error(ATLAS_EINVAL, "the chat request is not a JSON object");
	if (!json_object_object_get_ex(req, "messages", &msgs) ||
	    !json_object_is_type(msgs, json_type_array))
		return atlas_error(ATLAS_EINVAL, "the chat request has no \"messages\" array");
	if (json_object_array_length(msgs) == 0) /* as transformers refuses it */
		return atlas_error(ATLAS_EINVAL, "cannot apply the chat template to an empty conversation");
	for (size_t i = 0; i < json_object_array_length(msgs); i++) {
		json_object *m = json_object_array_get_idx(msgs, i), *role, *content;
		if (!json_object_is_type(m, json_type_object))
			return atlas_error(ATLAS_EINVAL, "messages[%zu] is not an object", i);
		if (!json_object_object_get_ex(m, "role", &role) ||
		    !json_object_is_type(role, json_type_string))
			return atlas_error(ATLAS_EINVAL, "messages[%zu] has no \"role\" string", i);
		if (json_object_object_get_ex(m, "content", &content) && content &&
		    !json_object_is_type(content, json_type_string) &&
		    !json_object_is_type(content, json_type_array))
			return atlas_error(ATLAS_EINVAL,
					   "messages[%zu].content is not a string, a list of parts or null", i);
	}
	return 0;
}

int atlas_chat_render(const struct atlas_tok *tok, json_object *request, char **out, size_t *len)
{
	if (!atlas_chat_has_template(tok))
		return atlas_error(ATLAS_ENOTFOUND, "the tokenizer has no chat template");
	int rc = check_request(request);
	if (rc)
		return rc;
	/* the variables: special tokens, then defaults, then the request */
	json_object *vars = json_object_new_object();
	if (!vars)
		return atlas_error(ATLAS_ENOMEM, "out of memory rendering the chat template");
	json_object_object_foreach(tok->chat->special, sk, sv)
		json_object_object_add(vars, sk, json_object_get(sv));
	json_object_object_add(vars, "tools", NULL);
	json_object_object_add(vars, "documents", NULL);
	json_object_object_add(vars, "add_generation_prompt", json_object_new_boolean(1));
	json_object_object_foreach(request, k, v)
		json_object_object_add(vars, k, json_object_get(v));
	pthread_mutex_lock(&limits_lock);
	struct atlas_jinja_limits lim = limits;
	pthread_mutex_unlock(&limits_lock);
	rc = atlas_jinja_render_limited(tok->chat->tmpl, vars, &lim, out, len);
	json_object_put(vars);
	return rc;
}
