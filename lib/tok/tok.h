/* tok.h - tokenizers loaded from Hugging Face `tokenizer.json`.
 *
 * BPE, byte-level (Qwen 2/3, Llama 3, DeepSeek V3, GPT-2, gpt-oss) or over
 * characters with byte fallback (Llama 2, Mistral, Gemma 3): added
 * tokens are matched first, then the normalizer (NFC, NFKC, Replace,
 * Prepend), the pre-tokenizer (Split with every behaviour, ByteLevel,
 * Metaspace, Digits, ...; regexes run through PCRE2 with Unicode
 * properties) and the merges; decoding runs the decoder chain
 * (ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace). Settings from `tokenizer_config.json`
 * (add_bos_token, add_eos_token, bos/eos tokens) are honoured when the
 * file exists. Anything in tokenizer.json that is not supported is
 * refused at load, by name. Text is bytes: invalid UTF-8 passes through
 * as bytes, never a crash. */
#ifndef ATLAS_TOK_H
#define ATLAS_TOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct atlas_tok; /* opaque, immutable after load; safe to share across threads */

/* Load `dir`/tokenizer.json (and tokenizer_config.json if present).
 * Returns a tokenizer owned by the caller (atlas_tok_free) or NULL with
 * a message. */
struct atlas_tok *atlas_tok_load(const char *dir);
void atlas_tok_free(struct atlas_tok *tok);

/* Vocabulary size: 1 + the largest id (model vocab plus added tokens). */
int64_t atlas_tok_vocab_size(const struct atlas_tok *tok);

/* BOS/EOS ids from the tokenizer config, -1 if none. */
int32_t atlas_tok_bos(const struct atlas_tok *tok);
int32_t atlas_tok_eos(const struct atlas_tok *tok);

/* Encode `len` bytes of `text`. With add_special, BOS/EOS are added as
 * the tokenizer's post-processor / config asks. On success returns 0 and
 * sets *ids (malloc'd, owned by the caller) and *n. */
int atlas_tok_encode(const struct atlas_tok *tok, const char *text,
		     size_t len, bool add_special, int32_t **ids, size_t *n);

/* Decode ids to bytes (special tokens included as their text). Returns
 * 0 and sets *out (malloc'd, NUL-terminated, owned by the caller) and
 * *len; ATLAS_ERANGE for an id outside the vocabulary. */
int atlas_tok_decode(const struct atlas_tok *tok, const int32_t *ids,
		     size_t n, char **out, size_t *len);

/* The bytes of one token (byte-level symbols already mapped back to
 * bytes). Returns a pointer owned by the tokenizer and sets *len, or
 * NULL for an id outside the vocabulary. */
const char *atlas_tok_piece(const struct atlas_tok *tok, int32_t id,
			    size_t *len);

/* Id of an exact token string (vocab or added token), or -1. */
int32_t atlas_tok_lookup(const struct atlas_tok *tok, const char *token);

/* Is `id` a special added token? */
bool atlas_tok_is_special(const struct atlas_tok *tok, int32_t id);

/* Streaming decoder: push ids one at a time and get back only complete
 * UTF-8 characters; a character split across tokens is held until it is
 * complete (or proved invalid, in which case the raw bytes are emitted). */
struct atlas_tok_stream {
	const struct atlas_tok *tok; /* the tokenizer */
	char pending[8];             /* bytes of an incomplete character */
	size_t npending;             /* number of bytes in pending */
	int64_t ntok;                /* ids pushed so far (the first decodes differently) */
	int strip_left;              /* leading characters a Strip decoder still drops */
};

void atlas_tok_stream_init(struct atlas_tok_stream *s,
			   const struct atlas_tok *tok);
/* Append the text that `id` completes to `buf` (capacity `cap`, never
 * NUL-terminated) and return the number of bytes written, or a negative
 * ATLAS_E* (ATLAS_ERANGE: bad id; ATLAS_EINVAL: buffer too small). */
int64_t atlas_tok_stream_push(struct atlas_tok_stream *s, int32_t id,
			      char *buf, size_t cap);
/* Flush whatever is pending (an incomplete character at end of stream). */
int64_t atlas_tok_stream_flush(struct atlas_tok_stream *s, char *buf,
			       size_t cap);

#endif
