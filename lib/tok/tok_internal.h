/* tok_internal.h - the tokenizer's private state and the functions the
 * files of lib/tok share (load, BPE, pre-tokenization, added tokens,
 * decoding). Nothing here is visible above lib/tok.
 *
 * Everything in struct atlas_tok is written once by atlas_tok_load and
 * only read afterwards, so one tokenizer serves many threads; every
 * encode call keeps its scratch memory (and PCRE2 match data) to itself. */
#ifndef ATLAS_TOK_INTERNAL_H
#define ATLAS_TOK_INTERNAL_H

#include "../core/utf8.h"

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
	bool normalized;	/* matched in normalized text, not raw text */
};

/* Split behaviours: what becomes of the pieces a pattern matches. */
enum tok_behavior {
	TOK_B_ISOLATED,	  /* matches and gaps are pieces of their own */
	TOK_B_REMOVED,	  /* matches are dropped */
	TOK_B_PREVIOUS,	  /* a match ends the piece before it */
	TOK_B_NEXT,	  /* a match starts the piece after it */
	TOK_B_CONTIGUOUS, /* adjacent matches form one piece */
};

/* Metaspace prepend_scheme. */
enum tok_prepend { TOK_P_ALWAYS, TOK_P_FIRST, TOK_P_NEVER };

/* One pre-tokenizer stage, applied in order to every piece. */
struct tok_stage {
	pcre2_code *re;	      /* Split regex, NULL for none */
	int behavior;	      /* enum tok_behavior of the Split */
	bool invert;	      /* the pattern matches the pieces, not the delimiters */
	bool prefix_space;    /* ByteLevel add_prefix_space: prepend ' ' to each piece */
	bool metaspace;	      /* Metaspace: ' ' -> replacement, maybe prepended */
	int prepend;	      /* Metaspace enum tok_prepend */
	struct tok_str repl;  /* Metaspace replacement character (UTF-8) */
};

/* Normalizer steps, applied in order to each span of text. */
enum tok_norm_kind { TOK_N_NFC, TOK_N_NFKC, TOK_N_REPLACE, TOK_N_PREPEND };

struct tok_norm {
	int kind;		 /* enum tok_norm_kind */
	pcre2_code *re;		 /* Replace {"Regex": ...}, NULL for a literal */
	struct tok_str pattern;	 /* Replace {"String": ...} literal */
	struct tok_str content;	 /* Replace content / Prepend text */
};

#define TOK_MAX_STAGES 8   /* more Split stages than any real tokenizer has */
#define TOK_MAX_NORMS 8	   /* normalizer steps */
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
	bool byte_level;	   /* symbols are bytes in GPT-2's alphabet (ByteLevel pre-tokenizer) */
	bool byte_fallback;	   /* a character not in vocab becomes its <0xNN> tokens */
	bool fuse_unk;		   /* consecutive unknown characters make one unk */
	int32_t unk;		   /* unk_token id, -1 if none */
	int32_t fallback_id[256];  /* id of <0xNN> for each byte, -1 if none */
	struct tok_str *token;	   /* per id: the token string as tokenizer.json spells it */
	struct tok_norm norm[TOK_MAX_NORMS]; /* normalizer steps */
	int nnorm;			     /* number of normalizer steps */
	bool has_normalized_added;   /* some added token has normalized: true */
	struct tok_str *piece0;	     /* per id: piece when first in a decode (Metaspace), or NULL */
	int strip_start;	     /* decoder Strip after Fuse: leading chars to drop */
	int strip_stop;		     /* decoder Strip after Fuse: trailing chars to drop */
	char strip_char;	     /* the (ASCII) character Strip drops */
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
	struct atlas_chat_tmpl *chat;		/* chat_template of the config, or NULL (chat.c) */
};

/* The chat template of a parsed tokenizer_config.json (chat.c): *out is
 * NULL when the config has none; errors name `path` and the line. */
struct json_object;
int atlas_chat_tmpl_load(struct json_object *cfg, const char *path, struct atlas_chat_tmpl **out);
void atlas_chat_tmpl_free(struct atlas_chat_tmpl *c);

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
 * (pretok.c). `first`: the segment starts the original text (Metaspace
 * prepend_scheme "first"). */
int atlas_tok_encode_segment(const struct atlas_tok *tok, struct tok_bpe_scratch *sc, const char *s,
			     size_t len, bool first, struct tok_ids *out);

/* Compile a regex the way tokenizer.json means it (Oniguruma's \s);
 * `literal` for a {"String": ...} pattern. Returns NULL with a message
 * naming `what` (pretok.c). */
pcre2_code *atlas_tok_regex(const char *pattern, bool literal, const char *what);
/* Append a pre-tokenizer stage (pretok.c). */
int atlas_tok_stage_add(struct atlas_tok *tok, const struct tok_stage *st);
/* The GPT-2 pre-tokenizer regex ByteLevel uses with use_regex. */
extern const char atlas_tok_gpt2_regex[];

/* Find the leftmost-longest added token in s[from..len) whose
 * `normalized` flag equals `normalized` (added.c).
 * Returns its index in tok->added and sets *start and *end to the span it
 * takes including stripped whitespace, or -1 if none. */
int64_t atlas_tok_added_find(const struct atlas_tok *tok, const char *s, size_t len, size_t from,
			     bool normalized, size_t *start, size_t *end);

/* Run the normalizer steps over s (normalize.c). Sets *out to NULL when
 * the text is unchanged, else to a malloc'd buffer of *outlen bytes.
 * Fails with ATLAS_ERANGE when a step's output would pass 64 * len + 4 KiB
 * bytes (a hostile Replace or Prepend), ATLAS_ENOMEM. */
int atlas_tok_normalize(const struct atlas_tok *tok, const char *s, size_t len, char **out,
			size_t *outlen);

/* Load the normalizer, pre-tokenizer and decoder sections (pipeline.c);
 * `dir` names the file in errors. */
int atlas_tok_load_normalizer(struct atlas_tok *tok, const char *dir, void *json);
int atlas_tok_load_pretok(struct atlas_tok *tok, const char *dir, void *json);
int atlas_tok_load_decoder(struct atlas_tok *tok, const char *dir, void *json);
/* Copy bytes into the tokenizer's arena (tok_load.c). */
int atlas_tok_arena_add(struct atlas_tok *tok, const char *s, size_t len, struct tok_str *out);
/* The byte a "<0xNN>" byte-fallback token stands for, or -1 (bpe.c). */
int atlas_tok_fallback_byte(const char *s, size_t len);
/* Is cp Unicode White_Space? */
bool atlas_tok_is_space(uint32_t cp);
/* Sort added tokens and build the first-byte index (added.c). */
int atlas_tok_added_index(struct atlas_tok *tok);

#endif
