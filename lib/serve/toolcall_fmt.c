/* toolcall_fmt.c - the tool-call formats by name, and which format and
 * reasoning markers a model uses, read from its chat template and its
 * vocabulary (toolcall.h). */
#include <string.h>

#include "../tok/tok.h"
#include "toolcall.h"

static const char *const names[] = {
    [ATLAS_TOOLFMT_NONE] = "none",
    [ATLAS_TOOLFMT_HERMES] = "hermes",
    [ATLAS_TOOLFMT_QWEN3_CODER] = "qwen3_coder",
    [ATLAS_TOOLFMT_LLAMA3_JSON] = "llama3_json",
    [ATLAS_TOOLFMT_MISTRAL] = "mistral",
};

int atlas_toolfmt_from_name(const char *name)
{
	for (size_t i = 0; name && i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(name, names[i]))
			return (int)i;
	return -1;
}

const char *atlas_toolfmt_name(enum atlas_toolfmt f)
{
	if ((unsigned)f >= sizeof(names) / sizeof(names[0]))
		return "none";
	return names[f];
}

static bool has_token(const struct atlas_tok *tok, const char *s)
{
	return tok && atlas_tok_lookup(tok, s) >= 0;
}

/* A template, when there is one, decides: many vocabularies carry tool
 * tokens their template never uses (base models, older revisions). The
 * vocabulary decides only without a template. */
enum atlas_toolfmt atlas_toolfmt_detect(const char *template_src, const struct atlas_tok *tok)
{
	const char *t = template_src;

	if (t) {
		if (strstr(t, "<tool_call>"))
			return strstr(t, "<function=") ? ATLAS_TOOLFMT_QWEN3_CODER
						       : ATLAS_TOOLFMT_HERMES;
		if (strstr(t, "[TOOL_CALLS]"))
			return ATLAS_TOOLFMT_MISTRAL;
		/* Llama 3.1+: "{"name": function name, "parameters": ...}" */
		if (strstr(t, "<|python_tag|>") ||
		    (strstr(t, "\"parameters\"") && strstr(t, "<|start_header_id|>")))
			return ATLAS_TOOLFMT_LLAMA3_JSON;
		return ATLAS_TOOLFMT_NONE;
	}
	if (has_token(tok, "<tool_call>"))
		return ATLAS_TOOLFMT_HERMES;
	if (has_token(tok, "[TOOL_CALLS]"))
		return ATLAS_TOOLFMT_MISTRAL;
	if (has_token(tok, "<|python_tag|>"))
		return ATLAS_TOOLFMT_LLAMA3_JSON;
	return ATLAS_TOOLFMT_NONE;
}

bool atlas_reasoning_detect(const char *template_src, const struct atlas_tok *tok)
{
	const char *t = template_src;
	if (t && strstr(t, "<think>") && strstr(t, "</think>"))
		return true;
	return has_token(tok, "<think>") && has_token(tok, "</think>");
}

/* Where the last occurrence of lit in s[0..len) begins, or NULL. */
static const char *last_of(const char *s, size_t len, const char *lit)
{
	size_t n = strlen(lit);
	for (size_t i = len; i >= n; i--)
		if (!memcmp(s + i - n, lit, n))
			return s + i - n;
	return NULL;
}

bool atlas_reasoning_open_in_prompt(const char *prompt, size_t len)
{
	const char *open, *close;
	if (!prompt)
		return false;
	open = last_of(prompt, len, "<think>");
	close = last_of(prompt, len, "</think>");
	return open && (!close || close < open);
}
