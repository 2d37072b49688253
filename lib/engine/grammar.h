/* grammar.h - grammar-constrained decoding: a GBNF-like grammar (written
 * by hand, or compiled from a JSON schema or a regex) matched against the
 * model's output one token at a time, with a mask of the tokens allowed
 * next over the whole vocabulary.
 *
 * Three objects:
 *   - atlas_grammar_vocab: the tokenizer's byte strings in the form the
 *     matcher walks (built once per tokenizer, shared, immutable);
 *   - atlas_grammar: one compiled grammar (immutable, shareable across
 *     threads; it caches per-automaton-state token masks, each computed
 *     once by the first thread that needs it while other threads compute
 *     other states' masks at the same time);
 *   - atlas_grammar_matcher: one request's position in the grammar.
 *
 * The grammar text format (close to llama.cpp's GBNF, written from its
 * documented syntax):
 *   rule-name ::= alternative | alternative ...   (the start rule is "root")
 *   "literal" with \n \t \r \\ \" \xHH \uHHHH \UHHHHHHHH escapes,
 *   [a-z0-9_] and [^"\\] character classes (UTF-8 code points),
 *   . (any code point), ( group ), x* x+ x? x{m} x{m,} x{m,n},
 *   # comments to the end of the line; rules may span lines when a line
 *   ends inside parentheses or after "|" or "::=" (so an empty rule is
 *   written `x ::= ""`).
 * Errors name the line and column. Rule names are [a-zA-Z0-9_-]+.
 *
 * Limits (the text may come from an HTTP request): 8 MiB of text,
 * 100,000 rules, 400,000 automaton states, parentheses 64 deep,
 * repetition counts up to 10,000; at run time 1,024 live parses and
 * stacks 512 frames deep. Passing a limit is an ATLAS_EINVAL error (a
 * parse that would nest deeper than 512 frames is dropped).
 *
 * Cost: compiling is linear in the grammar. A mask is the OR of one
 * cached bitset per live parse plus a walk over the few tokens those
 * caches leave open (tokens that end the parse's innermost rule and go
 * on with a byte that may follow it); a cache entry costs one walk over
 * the vocabulary (a few ms with 150k tokens) the first time a grammar
 * state is reached. Bounded repetitions such as x{0,500} give every copy
 * its own state, so the first pass through them is slower.
 *
 * Tokens: a token is allowed when its bytes (atlas_tok_piece) can extend
 * the text matched so far. Special tokens (atlas_tok_is_special) are never
 * allowed, except the end-of-sequence ids given to the vocab, which are
 * allowed exactly when the grammar can end at this point. */
#ifndef ATLAS_ENGINE_GRAMMAR_H
#define ATLAS_ENGINE_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct atlas_tok;
struct json_object;

struct atlas_grammar_vocab;
struct atlas_grammar;
struct atlas_grammar_matcher;

/* The vocabulary view of `tok` (vocabulary size atlas_tok_vocab_size, or
 * n_vocab when larger: the model's rows past the tokenizer are never
 * allowed). eos[n_eos] are the ids that end a sequence. NULL with a
 * message on failure. */
struct atlas_grammar_vocab *atlas_grammar_vocab_new(const struct atlas_tok *tok, int64_t n_vocab,
						    const int32_t *eos, int n_eos);
void atlas_grammar_vocab_free(struct atlas_grammar_vocab *v);
int64_t atlas_grammar_vocab_size(const struct atlas_grammar_vocab *v);

/* Compile grammar text (start rule "root") for `v` (which must outlive
 * the grammar). NULL with a message (ATLAS_EINVAL, naming line:column) on
 * a syntax error, an undefined rule, left recursion (also through rules
 * that can match nothing) or a limit. The result is owned by the caller
 * (atlas_grammar_free, after every matcher of it). */
struct atlas_grammar *atlas_grammar_compile(const char *text, size_t len,
					    const struct atlas_grammar_vocab *v);
/* Grammars are reference-counted (atomically): atlas_grammar_ref takes one
 * more reference and returns g; atlas_grammar_free drops one and frees the
 * grammar with the last. A request in the scheduler holds its own. */
struct atlas_grammar *atlas_grammar_ref(struct atlas_grammar *g);
void atlas_grammar_free(struct atlas_grammar *g);

/* Allow the special token `id`, whose text is text[0..len), wherever `g`
 * accepts that text: a tool-call marker that the tokenizer has as one
 * special token (Mistral's [TOOL_CALLS], Llama 3's <|python_tag|>), which
 * masks otherwise never allow. The text stays allowed as ordinary tokens
 * too. At most 8 per grammar; call before the grammar's first matcher
 * (it is not thread-safe). 0, or ATLAS_EINVAL / ATLAS_ENOMEM. */
int atlas_grammar_allow_special(struct atlas_grammar *g, int32_t id, const char *text, size_t len);

/* Grammar text from a JSON schema: rules whose names all begin with
 * `prefix` (an identifier-like string, may be "") and whose start rule is
 * `<prefix>root`, so that several schemas can share one grammar (a
 * non-empty prefix needs a `root ::= <prefix>root ...` of the caller's
 * before atlas_grammar_compile). The
 * output is the JSON text json.dumps would accept, whitespace allowed
 * where JSON allows it (bounded, so a model cannot loop on spaces).
 * Supported: type (also lists of types), properties, required,
 * additionalProperties (false, true, or a schema), enum, const, items,
 * prefixItems, minItems, maxItems, anyOf, oneOf (as anyOf), allOf of
 * objects, nested objects, $ref to #/$defs/... and #/definitions/...,
 * string minLength/maxLength/pattern/format (date, time, date-time, uuid,
 * email, ipv4), integer/number minimum/maximum (as far as a grammar can),
 * and the annotation keywords (title, description, default, examples,
 * $schema, $id, $comment). Anything else is refused: returns NULL and
 * sets *bad (when not NULL) to a static string naming the keyword, with
 * a message (ATLAS_EUNSUPPORTED, or ATLAS_EINVAL for a malformed schema).
 * (*bad is a static string for the keywords above; an unknown keyword's
 * name is kept in a per-thread buffer valid until the next call.)
 * `schema` true/{} means any JSON value. Result malloc'd.
 * Looser than the schema (grammar_schema.c has the details): number
 * minimum/maximum keep only the sign (integer ranges are exact, bounds
 * past 10^18 aside); with "pattern", minLength/maxLength are ignored; a
 * maxLength over 2000 counts as none; extra properties (additionalProperties
 * true or a schema) may repeat declared names. Stricter: "pattern" must
 * match the whole string (as if anchored, and without \u escapes for
 * characters that need none); an object with "properties" and no
 * additionalProperties allows no other keys; properties come in the
 * schema's order; prefixItems without items allows no further items;
 * numbers have at most 19 integer and 20 fraction digits; "any value"
 * nests at most 20 deep. Whitespace between tokens is bounded (WS in
 * grammar_schema.c), and there is none before or after the value. */
char *atlas_json_schema_grammar(struct json_object *schema, const char *prefix,
				const char **bad);

/* Grammar text for any JSON value whose top level is an object
 * (response_format json_object), start rule `<prefix>root`. */
char *atlas_json_object_grammar(const char *prefix);

/* Grammar text from a regular expression (the whole output must match):
 * literals, escapes (\d \w \s \D \W \S \. ...), classes, . , groups
 * (capturing and (?:...)), |, * + ? {m} {m,} {m,n}; anchors ^ $ only at
 * the ends. Backreferences and lookaround are refused. Start rule
 * `<prefix>root`. NULL with a message on error. Result malloc'd. */
char *atlas_regex_grammar(const char *re, const char *prefix);

/* A matcher at the start of `g` (which must outlive it). */
struct atlas_grammar_matcher *atlas_grammar_matcher_new(const struct atlas_grammar *g);
void atlas_grammar_matcher_free(struct atlas_grammar_matcher *m);
/* An independent matcher at the same position as m (for forking a
 * request, or trying a token without committing). Owned by the caller;
 * NULL with a message when out of memory. */
struct atlas_grammar_matcher *atlas_grammar_matcher_copy(const struct atlas_grammar_matcher *m);

/* Words of a mask: (n_vocab + 31) / 32. Bit i of word i/32 (i % 32) set
 * means token i is allowed. */
int64_t atlas_grammar_mask_words(const struct atlas_grammar_vocab *v);

/* The tokens allowed next, into mask[atlas_grammar_mask_words]. Returns
 * the number of allowed tokens (0 only when the grammar is finished and no
 * EOS id was given), or a negative ATLAS_E* code with a message (out of
 * memory, or a grammar so ambiguous that the walk passed its work limit).
 * Thread-compatible: one matcher per thread; matchers of one grammar may
 * run on several threads at once (the shared cache is thread-safe: a
 * thread that needs a state's entry while another computes it waits for
 * it; entries of different states are computed in parallel, with up to
 * 64 walkers per grammar, kept until atlas_grammar_free). */
int64_t atlas_grammar_fill_mask(struct atlas_grammar_matcher *m, uint32_t *mask);

/* Advance by token `id`. 0, or ATLAS_EINVAL when the token is not allowed
 * (the matcher is then unchanged). An EOS id is accepted when the grammar
 * can end; the matcher is then finished. */
int atlas_grammar_accept(struct atlas_grammar_matcher *m, int32_t id);

/* Advance by raw bytes (text forced into the output, e.g. a prefix).
 * 0, or ATLAS_EINVAL (unchanged) when they do not fit. */
int atlas_grammar_accept_bytes(struct atlas_grammar_matcher *m, const char *s, size_t n);

/* Could the output end here (the root rule is complete)? */
bool atlas_grammar_can_end(const struct atlas_grammar_matcher *m);
/* Must it end here (complete, and no byte can follow)? */
bool atlas_grammar_must_end(const struct atlas_grammar_matcher *m);

#endif
