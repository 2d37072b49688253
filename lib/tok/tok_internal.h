/* tok_internal.h - the tokenizer's private state and the functions the
 * files of lib/tok share (load, BPE, pre-tokenization, added tokens,
 * decoding). Nothing here is visible above lib/tok.
 *
 * Everything in struct atlas_tok is written once by atlas_tok_load and
 * only read afterwards, so one tokenizer serves many threads; every
 * encode call keeps its scratch memory (and PCRE2 match data) to itself. */
#ifndef ATLAS_TOK_INTERNAL_H
#define ATLAS_TOK_INTERNAL_H

#include "tok.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* A string stored in the tokenizer's arena. */
struct tok_str {
	uint32_t off; /* byte offset into atlas_tok.arena */
	uint32_t len; /* length in bytes */
};

/* One slot of the string -> id table (open addressing). */
struct tok_slot {
	uint32_t hash;	    /* hash of the key, to skip most memcmp calls */
	int32_t id;	    /* token id; -1 marks an empty slot */
	struct tok_str key; /* the byte-level symbol string */
};

/* String -> id hash table over the model vocabulary. */
struct tok_map {
	struct tok_slot *slots; /* 2^k slots */
	size_t mask;		/* number of slots - 1 */
};

/* One slot of the merge table: (left id, right id) -> rank, result. */
struct tok_merge {
	uint64_t key;	/* (left << 32) | right; UINT64_MAX marks empty */
	int32_t rank;	/* position in the merges list; lower merges first */
	int32_t result; /* id of the merged symbol */
};

/* Pair -> merge hash table. */
struct tok_merges {
	struct tok_merge *slots; /* 2^k slots */
	size_t mask;		 /* number of slots - 1 */
};

/* An added token as the splitter sees it. */
struct tok_added {
	struct tok_str content; /* the exact text matched (raw bytes) */
	int32_t id;		/* its id */
	bool special;		/* a special token (control, not text) */
	bool single_word;	/* only match when not inside a word */
	bool lstrip;		/* absorb whitespace to its left */
	bool rstrip;		/* absorb whitespace to its right */
};

/* One pre-tokenizer stage, applied in order to every piece. */
struct tok_stage {
	pcre2_code *re;	   /* Split / ByteLevel regex (Isolated), NULL for none */
	bool prefix_space; /* ByteLevel add_prefix_space: prepend ' ' to each piece */
};

#define TOK_MAX_STAGES 8   /* more Split stages than any real tokenizer has */
#define TOK_MAX_TEMPLATE 8 /* special ids around $A in a template */

/* Per-id flags. */
enum {
	TOK_F_PRESENT = 1, /* the id has a token (ids may have gaps) */
	TOK_F_SPECIAL = 2, /* special added token */
	TOK_F_ADDED = 4,   /* added token (special or not) */
};

struct atlas_tok {
	char *arena;		   /* every string the tokenizer keeps */
	size_t arena_len;	   /* bytes used in arena */
	size_t arena_cap;	   /* bytes allocated for arena */
	int64_t nvocab;		   /* 1 + largest id */
	struct tok_str *piece;	   /* per id: decoded bytes */
	uint8_t *flags;		   /* per id: TOK_F_* */
	struct tok_map vocab;	   /* model vocab: byte-level symbol -> id */
	struct tok_merges merges;  /* merge ranks */
	int32_t byte_id[256];	   /* id of the one-symbol token for each byte, -1 if none */
	bool ignore_merges;	   /* a pre-token found whole in vocab skips BPE */
	bool nfc;		   /* normalizer NFC */
	struct tok_added *added;   /* added tokens, in file order */
	size_t nadded;		   /* number of added tokens */
	uint32_t added_first[257]; /* tokens starting with byte b: added_order[[b]..[b+1]) */
	uint32_t *added_order;	   /* added[] indices grouped by first byte, longest first */
	struct tok_stage stage[TOK_MAX_STAGES]; /* pre-tokenizer stages */
	int nstage;				/* number of stages */
	int32_t prefix_ids[TOK_MAX_TEMPLATE];	/* ids before $A with add_special */
	int nprefix;				/* number of prefix ids */
	int32_t suffix_ids[TOK_MAX_TEMPLATE];	/* ids after $A with add_special */
	int nsuffix;				/* number of suffix ids */
	int32_t bos;				/* BOS id or -1 */
	int32_t eos;				/* EOS id or -1 */
};

/* GPT-2's byte <-> symbol alphabet: the code point standing for byte b,
 * and the byte a code point stands for (-1 if none). */
uint32_t atlas_tok_byte_cp(uint8_t b);
int atlas_tok_cp_byte(uint32_t cp);

/* Hashing and lookups (bpe.c). */
uint32_t atlas_tok_hash(const char *s, size_t len);
int32_t atlas_tok_map_get(const struct atlas_tok *tok, const char *s, size_t len);
int atlas_tok_map_build(struct atlas_tok *tok, size_t n);
int atlas_tok_map_put(struct atlas_tok *tok, struct tok_str key, int32_t id);
int atlas_tok_merges_build(struct atlas_tok *tok, size_t n);
void atlas_tok_merges_put(struct atlas_tok *tok, int32_t a, int32_t b, int32_t rank,
			  int32_t result);

/* A growable id list owned by one encode call. */
struct tok_ids {
	int32_t *v; /* the ids */
	size_t n;   /* number used */
	size_t cap; /* number allocated */
};
int atlas_tok_ids_push(struct tok_ids *ids, int32_t id);

/* Per-call scratch for BPE (bpe.c). */
struct tok_bpe_scratch {
	void *sym;	   /* symbol list */
	void *heap;	   /* pair heap */
	size_t cap;	   /* capacity of both, in symbols */
	char *mapped;	   /* byte-level string for ignore_merges lookups */
	size_t mapped_cap; /* bytes allocated for mapped */
};
/* BPE-encode one pre-token (raw bytes) and append its ids. */
int atlas_tok_bpe(const struct atlas_tok *tok, struct tok_bpe_scratch *sc, const char *s,
		  size_t len, struct tok_ids *out);
void atlas_tok_bpe_scratch_free(struct tok_bpe_scratch *sc);

/* Pre-tokenize one text segment (already normalized) and BPE each piece
 * (pretok.c). */
int atlas_tok_encode_segment(const struct atlas_tok *tok, struct tok_bpe_scratch *sc, const char *s,
			     size_t len, struct tok_ids *out);

/* Compile a pre-tokenizer regex for stage `k` (pretok.c); `literal` for a
 * Split {"String": ...} pattern. Names `what` in the error. */
int atlas_tok_stage_compile(struct atlas_tok *tok, const char *pattern, bool literal,
			    bool prefix_space, const char *what);
/* The GPT-2 pre-tokenizer regex ByteLevel uses with use_regex. */
extern const char atlas_tok_gpt2_regex[];

/* Find the leftmost-longest added token in s[from..len) (added.c).
 * Returns its index in tok->added and sets *start and *end to the span it
 * takes including stripped whitespace, or -1 if none. */
int64_t atlas_tok_added_find(const struct atlas_tok *tok, const char *s, size_t len, size_t from,
			     size_t *start, size_t *end);
/* Sort added tokens and build the first-byte index (added.c). */
int atlas_tok_added_index(struct atlas_tok *tok);

/* Length of a valid UTF-8 sequence at s (1..4), or 0 if the bytes at s
 * are not one; *cp gets the code point. */
static inline int atlas_tok_utf8(const unsigned char *s, size_t len, uint32_t *cp)
{
	unsigned char c = s[0];
	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	int n = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 0;
	if (n == 0 || c < 0xc2 || c > 0xf4 || (size_t)n > len)
		return 0;
	uint32_t v = c & (0x3f >> (n - 1));
	for (int i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		v = (v << 6) | (s[i] & 0x3f);
	}
	if ((n == 3 && v < 0x800) || (n == 4 && (v < 0x10000 || v > 0x10ffff)) ||
	    (v >= 0xd800 && v <= 0xdfff))
		return 0;
	*cp = v;
	return n;
}

#endif
