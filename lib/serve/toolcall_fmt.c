/* toolcall_fmt.c - the tool-call formats by name, which format and
 * reasoning markers a model uses (read from its chat template and its
 * vocabulary), and the incremental JSON scanner the parser reads the JSON
 * formats with (toolcall.h). */
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
		if (strstr(t, "[TOOL_CALLS]") ||
		    (strstr(t, "[AVAILABLE_TOOLS]") && has_token(tok, "[TOOL_CALLS]")))
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

/* ---- the JSON scanner --------------------------------------------------- */

enum {
	J_VAL,
	J_ARR1,
	J_KEY1,
	J_KEY,
	J_COLON,
	J_AFTER,
	J_STR,
	J_U8,
	J_ESC,
	J_UHEX,
	J_MINUS,
	J_ZERO,
	J_INT,
	J_DOT,
	J_FRAC,
	J_E,
	J_ESIGN,
	J_EXP,
	J_LIT,
	J_DONE,
	J_ERR,
};

void atlas_json_scan_init(struct atlas_json_scan *j)
{
	memset(j, 0, sizeof(*j));
}

static int js_err(struct atlas_json_scan *j)
{
	j->st = J_ERR;
	return ATLAS_JSON_ERR;
}

/* A value ended: the whole text, or back into its container. */
static int js_value_end(struct atlas_json_scan *j)
{
	if (!j->depth) {
		j->st = J_DONE;
		return ATLAS_JSON_DONE;
	}
	j->st = J_AFTER;
	return ATLAS_JSON_MORE;
}

static int js_push(struct atlas_json_scan *j, char k)
{
	if (j->depth == ATLAS_JSON_SCAN_MAXDEPTH)
		return js_err(j);
	j->stack[j->depth++] = k;
	j->st = k == '{' ? J_KEY1 : J_ARR1;
	return ATLAS_JSON_MORE;
}

static int js_pop(struct atlas_json_scan *j, char k)
{
	if (!j->depth || j->stack[j->depth - 1] != k)
		return js_err(j);
	j->depth--;
	return js_value_end(j);
}

/* The first byte of a value. */
static int js_value(struct atlas_json_scan *j, unsigned char c)
{
	switch (c) {
	case '{':
	case '[':
		return js_push(j, (char)c);
	case '"':
		j->st = J_STR;
		j->in_key = false;
		return ATLAS_JSON_MORE;
	case '-':
		j->st = J_MINUS;
		return ATLAS_JSON_MORE;
	case 't':
	case 'f':
	case 'n':
		j->lit = c == 't' ? "true" : c == 'f' ? "false" : "null";
		j->lit_i = 1;
		j->st = J_LIT;
		return ATLAS_JSON_MORE;
	}
	if (c >= '0' && c <= '9') {
		j->st = c == '0' ? J_ZERO : J_INT;
		return ATLAS_JSON_MORE;
	}
	return js_err(j);
}

/* A byte inside a string (after the opening quote). */
static int js_string(struct atlas_json_scan *j, unsigned char c)
{
	if (c == '"') {
		if (j->in_key) {
			j->st = J_COLON;
			return ATLAS_JSON_MORE;
		}
		return js_value_end(j);
	}
	if (c == '\\') {
		j->st = J_ESC;
		return ATLAS_JSON_MORE;
	}
	if (c < 0x20)
		return js_err(j);
	if (c < 0x80)
		return ATLAS_JSON_MORE;
	/* UTF-8: the lead byte fixes the count and the next byte's range */
	j->u8_lo = 0x80;
	j->u8_hi = 0xbf;
	if (c >= 0xc2 && c <= 0xdf)
		j->u8_need = 1;
	else if (c >= 0xe0 && c <= 0xef)
		j->u8_need = 2;
	else if (c >= 0xf0 && c <= 0xf4)
		j->u8_need = 3;
	else
		return js_err(j);
	if (c == 0xe0)
		j->u8_lo = 0xa0;
	else if (c == 0xed)
		j->u8_hi = 0x9f;
	else if (c == 0xf0)
		j->u8_lo = 0x90;
	else if (c == 0xf4)
		j->u8_hi = 0x8f;
	j->st = J_U8;
	return ATLAS_JSON_MORE;
}

/* A number ends at a byte that cannot continue it. */
static int js_num_end(struct atlas_json_scan *j, unsigned char c, bool complete);

static int js_num_end(struct atlas_json_scan *j, unsigned char c, bool complete)
{
	if (!complete)
		return js_err(j);
	if (!j->depth) {
		j->st = J_DONE;
		return ATLAS_JSON_BACK;
	}
	j->st = J_AFTER;
	return atlas_json_scan_byte(j, c);
}

static bool is_digit(unsigned char c)
{
	return c >= '0' && c <= '9';
}

static int js_number(struct atlas_json_scan *j, unsigned char c)
{
	bool d = is_digit(c), e = c == 'e' || c == 'E';
	switch (j->st) {
	case J_MINUS:
		if (!d)
			return js_err(j);
		j->st = c == '0' ? J_ZERO : J_INT;
		return ATLAS_JSON_MORE;
	case J_ZERO:
	case J_INT:
		if (d && j->st == J_INT)
			return ATLAS_JSON_MORE;
		if (c == '.' || e) {
			j->st = c == '.' ? J_DOT : J_E;
			return ATLAS_JSON_MORE;
		}
		return js_num_end(j, c, true);
	case J_DOT:
		if (!d)
			return js_err(j);
		j->st = J_FRAC;
		return ATLAS_JSON_MORE;
	case J_FRAC:
		if (d)
			return ATLAS_JSON_MORE;
		if (e) {
			j->st = J_E;
			return ATLAS_JSON_MORE;
		}
		return js_num_end(j, c, true);
	case J_E:
		if (c == '+' || c == '-') {
			j->st = J_ESIGN;
			return ATLAS_JSON_MORE;
		}
		/* fall through */
	case J_ESIGN:
		if (!d)
			return js_err(j);
		j->st = J_EXP;
		return ATLAS_JSON_MORE;
	default: /* J_EXP */
		return d ? ATLAS_JSON_MORE : js_num_end(j, c, true);
	}
}

/* Scan one byte: ATLAS_JSON_MORE (part of the value, not complete), ATLAS_JSON_DONE (the
 * byte completed it), ATLAS_JSON_BACK (it was complete before this byte, which is
 * not part of it: a top-level number) or ATLAS_JSON_ERR (not JSON). */
int atlas_json_scan_byte(struct atlas_json_scan *j, unsigned char c)
{
	switch (j->st) {
	case J_VAL:
		return is_ws(c) ? ATLAS_JSON_MORE : js_value(j, c);
	case J_ARR1:
		if (is_ws(c))
			return ATLAS_JSON_MORE;
		return c == ']' ? js_pop(j, '[') : js_value(j, c);
	case J_KEY1:
	case J_KEY:
		if (is_ws(c))
			return ATLAS_JSON_MORE;
		if (c == '}' && j->st == J_KEY1)
			return js_pop(j, '{');
		if (c != '"')
			return js_err(j);
		j->st = J_STR;
		j->in_key = true;
		return ATLAS_JSON_MORE;
	case J_COLON:
		if (is_ws(c))
			return ATLAS_JSON_MORE;
		if (c != ':')
			return js_err(j);
		j->st = J_VAL;
		return ATLAS_JSON_MORE;
	case J_AFTER:
		if (is_ws(c))
			return ATLAS_JSON_MORE;
		if (c == ',') {
			j->st = j->stack[j->depth - 1] == '{' ? J_KEY : J_VAL;
			return ATLAS_JSON_MORE;
		}
		if (c == '}' || c == ']')
			return js_pop(j, c == '}' ? '{' : '[');
		return js_err(j);
	case J_STR:
		return js_string(j, c);
	case J_U8:
		if (c < j->u8_lo || c > j->u8_hi)
			return js_err(j);
		j->u8_lo = 0x80;
		j->u8_hi = 0xbf;
		if (!--j->u8_need)
			j->st = J_STR;
		return ATLAS_JSON_MORE;
	case J_ESC:
		if (c == 'u') {
			j->hex = 4;
			j->st = J_UHEX;
		} else if (strchr("\"\\/bfnrt", c) && c) {
			j->st = J_STR;
		} else {
			return js_err(j);
		}
		return ATLAS_JSON_MORE;
	case J_UHEX:
		if (!(is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
			return js_err(j);
		if (!--j->hex)
			j->st = J_STR;
		return ATLAS_JSON_MORE;
	case J_LIT:
		if (c != (unsigned char)j->lit[j->lit_i])
			return js_err(j);
		if (!j->lit[++j->lit_i])
			return js_value_end(j);
		return ATLAS_JSON_MORE;
	case J_DONE:
		return ATLAS_JSON_BACK;
	case J_ERR:
		return ATLAS_JSON_ERR;
	default:
		return js_number(j, c);
	}
}

/* The text ended: is the value complete? (a top-level number is only
 * known complete here) */
bool atlas_json_scan_finish(struct atlas_json_scan *j)
{
	if (j->st == J_DONE)
		return true;
	if (!j->depth && (j->st == J_ZERO || j->st == J_INT || j->st == J_FRAC || j->st == J_EXP)) {
		j->st = J_DONE;
		return true;
	}
	return false;
}

/* Is s[0..n) exactly one JSON value (whitespace around allowed)? */
bool atlas_json_valid(const char *s, size_t n)
{
	struct atlas_json_scan j;
	size_t i = 0;
	atlas_json_scan_init(&j);
	for (; i < n; i++) {
		int r = atlas_json_scan_byte(&j, (unsigned char)s[i]);
		if (r == ATLAS_JSON_ERR)
			return false;
		if (r == ATLAS_JSON_BACK)
			break;
	}
	return atlas_json_scan_finish(&j) && all_ws(s + i, n - i);
}
