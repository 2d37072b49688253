/* toolcall.h - the model's output split into reasoning, content and tool
 * calls, streaming: text arrives in pieces of any size (a marker or a
 * UTF-8 character may be split anywhere) and events come out as soon as
 * they are certain. Pieces that might begin a marker are held back, never
 * leaked as content; feeding the same text in any split gives the same
 * events concatenated (the same calls, the same ids for the same seed,
 * the same text). Every decision is made a byte at a time by a state
 * machine (toolcall.c).
 *
 * Formats (atlas_toolfmt):
 *   hermes       Qwen2.5/Qwen3: <tool_call>{"name": ..., "arguments": {...}}</tool_call>,
 *                several per message, whitespace around the JSON allowed;
 *   qwen3_coder  <tool_call><function=NAME><parameter=P>VALUE</parameter>...</function></tool_call>;
 *                one newline is trimmed on each side of a value; a value
 *                is a string when the tool's schema types the parameter
 *                "string" only, else JSON when it parses as JSON ("True" for a
 *                boolean too), else a string. The ARGS are the JSON text
 *                {"P": VALUE, ...} written by the parser, one parameter at a
 *                time as each completes; a value ends at the first
 *                </parameter> (or </function>);
 *   llama3_json  only at the start of the output: an optional <|python_tag|>,
 *                then {"name": ..., "parameters": {...}} (also "arguments");
 *                several calls separated by ';';
 *   mistral      [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] and the
 *                newer [TOOL_CALLS]NAME[ARGS]{...} (an optional [CALL_ID]ID
 *                before [ARGS]); ids are 9 alphanumerics.
 * hermes and qwen3_coder each also read the other's syntax inside
 * <tool_call>. In the JSON formats a call's CALL comes once its name is
 * known and its arguments value begins (or at the object's end when the
 * name comes last or there are no arguments, which are then {}); the ARGS
 * are the arguments value's own text, streamed as it comes.
 *
 * Malformed markers: text that goes wrong inside a marker before the
 * call's CALL is given back whole as content; after CALL, see
 * atlas_toolparse_call_complete (qwen3_coder instead closes the object
 * of the parameters complete so far, with CALL_END, and gives back the
 * unfinished parameter as content). Whitespace at the start of the
 * content and after a call is held back, and is content only when text
 * other than a call follows it (so a message of calls alone has none).
 *
 * Reasoning: with a reasoning parser, text up to </think> is reasoning
 * (starting in reasoning when the prompt left <think> open, or when the
 * output begins with <think>, whitespace before it allowed); whitespace
 * right after </think> is dropped; a tool-call marker inside reasoning is
 * not a call. */
#ifndef ATLAS_SERVE_TOOLCALL_H
#define ATLAS_SERVE_TOOLCALL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct atlas_tok;
struct json_object;

enum atlas_toolfmt {
	ATLAS_TOOLFMT_NONE = 0,
	ATLAS_TOOLFMT_HERMES,
	ATLAS_TOOLFMT_QWEN3_CODER,
	ATLAS_TOOLFMT_LLAMA3_JSON,
	ATLAS_TOOLFMT_MISTRAL,
};

/* "hermes", ... , "none"; -1 for an unknown name. */
int atlas_toolfmt_from_name(const char *name);
const char *atlas_toolfmt_name(enum atlas_toolfmt f);

/* The format a model uses, from its chat template source (may be NULL)
 * and tokenizer (which marker tokens exist): NONE when no tool syntax is
 * recognised. */
enum atlas_toolfmt atlas_toolfmt_detect(const char *template_src, const struct atlas_tok *tok);

/* Does the model think with <think>...</think>? (the template or the
 * vocabulary mentions both markers) */
bool atlas_reasoning_detect(const char *template_src, const struct atlas_tok *tok);

/* Does the rendered prompt leave a <think> open (the last <think> has no
 * </think> after it)? Then the output starts inside reasoning. */
bool atlas_reasoning_open_in_prompt(const char *prompt, size_t len);

enum atlas_toolev_kind {
	ATLAS_TOOLEV_CONTENT,   /* text: content */
	ATLAS_TOOLEV_REASONING, /* text: reasoning */
	ATLAS_TOOLEV_CALL,      /* a call begins: index, id, name */
	ATLAS_TOOLEV_ARGS,      /* text: more of call `index`'s arguments (JSON text) */
	ATLAS_TOOLEV_CALL_END,  /* call `index` is complete; its arguments are valid JSON */
};

struct atlas_toolev {
	enum atlas_toolev_kind kind;
	int index;        /* call number in this message, from 0 */
	const char *id;   /* CALL: the call id (call_ + 24 alphanumerics; mistral: 9) */
	const char *name; /* CALL: the function name */
	const char *text; /* CONTENT, REASONING, ARGS: bytes (not NUL-terminated) */
	size_t len;       /* of text */
};

/* Called for each event; return non-zero to stop (returned by feed). */
typedef int (*atlas_toolev_fn)(void *ud, const struct atlas_toolev *ev);

struct atlas_toolparse;

/* A parser for one output. fmt NONE: no tool calls, content only.
 * reasoning: split <think> reasoning; start_in_reasoning: the prompt left
 * <think> open. tools: the request's tools array (may be NULL), used by
 * qwen3_coder for parameter types. seed: for the call ids (the same seed
 * gives the same ids). */
struct atlas_toolparse *atlas_toolparse_new(enum atlas_toolfmt fmt, bool reasoning,
					    bool start_in_reasoning, struct json_object *tools,
					    uint64_t seed);
void atlas_toolparse_free(struct atlas_toolparse *p);

/* Feed more output. Returns 0, the callback's non-zero value (the rest
 * of s is then not parsed: free the parser) or ATLAS_ENOMEM. fn may be
 * NULL. Text events are handed out at the end of each feed (or earlier,
 * before a CALL or CALL_END); ev->text lives until the callback
 * returns. */
int atlas_toolparse_feed(struct atlas_toolparse *p, const char *s, size_t n, atlas_toolev_fn fn,
			 void *ud);
/* The output ended: flush what was held. An unfinished call whose JSON is
 * complete is a call; anything else held is content (never dropped). */
int atlas_toolparse_finish(struct atlas_toolparse *p, atlas_toolev_fn fn, void *ud);

/* Calls emitted so far (for finish_reason "tool_calls"). */
int atlas_toolparse_ncalls(const struct atlas_toolparse *p);

/* Was CALL_END emitted for call `index` (its ARGS concatenated are one
 * valid JSON text)? A call that went wrong after its CALL (bad JSON in
 * the arguments, or the output ended inside them) has no CALL_END: its
 * ARGS are an unfinished JSON text, and the text from the byte that
 * broke it on is content. false for an index out of range. */
bool atlas_toolparse_call_complete(const struct atlas_toolparse *p, int index);

/* An incremental, strict JSON scanner (RFC 8259, UTF-8 checked) for one
 * value fed a byte at a time: it says when the value is complete or
 * broken, allocating nothing. The parser reads the JSON formats with it;
 * it also tells whether streamed ARGS are valid so far. Nesting deeper
 * than ATLAS_JSON_SCAN_MAXDEPTH is an error. Start with
 * atlas_json_scan_init; the fields are private. */
#define ATLAS_JSON_SCAN_MAXDEPTH 128
struct atlas_json_scan {
	uint8_t st;                           /* where in the grammar */
	bool in_key;                          /* the string scanned is an object key */
	uint8_t lit_i;                        /* bytes of lit matched */
	uint8_t u8_need;                      /* UTF-8 continuation bytes still expected */
	uint8_t u8_lo, u8_hi;                 /* range of the next continuation byte */
	uint8_t hex;                          /* hex digits left in a \uXXXX escape */
	const char *lit;                      /* true, false or null being matched */
	int depth;                            /* open containers */
	char stack[ATLAS_JSON_SCAN_MAXDEPTH]; /* '{' or '[' for each */
};

enum atlas_json_scan_result {
	ATLAS_JSON_MORE, /* the byte is part of the value, not complete yet */
	ATLAS_JSON_DONE, /* the byte completed the value */
	ATLAS_JSON_BACK, /* the value was complete before the byte, which is not part of
			  * it (a top-level number; any byte after DONE) */
	ATLAS_JSON_ERR,  /* not JSON (then every later byte too) */
};

void atlas_json_scan_init(struct atlas_json_scan *j);
/* One more byte: an atlas_json_scan_result. */
int atlas_json_scan_byte(struct atlas_json_scan *j, unsigned char c);
/* The text ended: is the value complete? (a top-level number is known
 * complete only here) */
bool atlas_json_scan_finish(struct atlas_json_scan *j);
/* Is s[0..n) exactly one JSON value, whitespace around it allowed? */
bool atlas_json_valid(const char *s, size_t n);

/* Grammar text (lib/engine/grammar.h syntax, start rule "root") for output
 * that is tool calls in format `fmt` (only function `only`, when
 * not NULL) with arguments matching each tool's "parameters" schema, then
 * the end. tools: the request's tools array (OpenAI shape: {"type":
 * "function", "function": {"name", "parameters"}}). parallel: several
 * calls allowed (parallel_tool_calls), else exactly one. NULL with
 * a message (ATLAS_EINVAL / ATLAS_EUNSUPPORTED naming the keyword) on a
 * bad tool or schema. malloc'd. */
char *atlas_toolfmt_grammar(enum atlas_toolfmt fmt, struct json_object *tools, const char *only,
			    bool parallel);

#endif
