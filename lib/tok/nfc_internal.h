/* nfc_internal.h - Unicode NFC and NFKC normalization for the tokenizer's
 * "NFC" and "NFKC" normalizers (private to lib/tok).
 *
 * The tables live in nfc_data.c (generated from the Unicode Character
 * Database); nfc.c holds the algorithm: canonical decomposition,
 * canonical ordering, canonical composition. Bytes that are not valid
 * UTF-8 pass through unchanged and block composition across them. */
#ifndef ATLAS_TOK_NFC_INTERNAL_H
#define ATLAS_TOK_NFC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* One canonical decomposition: cp -> a [b]. */
struct atlas_nfc_decomp {
	uint32_t cp;	  /* the decomposable code point (sorted key) */
	uint32_t a;	  /* first code point of the mapping */
	uint32_t b;	  /* second code point, 0 for a singleton mapping */
	uint32_t primary; /* 1 if cp is a primary composite (NFC keeps it) */
};

/* One primary composition: a + b -> cp. */
struct atlas_nfc_comp {
	uint32_t a;  /* starter (sorted key, first) */
	uint32_t b;  /* combining code point (sorted key, second) */
	uint32_t cp; /* the composite */
};

/* A run of code points sharing one non-zero canonical combining class. */
struct atlas_nfc_ccc {
	uint32_t first; /* first code point of the run */
	uint32_t last;	/* last code point of the run (inclusive) */
	uint32_t ccc;	/* the class, 1..254 */
};

/* One compatibility decomposition (NFKC): cp -> pool[off..off+len). */
struct atlas_nfkc_decomp {
	uint32_t cp;  /* the code point (sorted key) */
	uint32_t off; /* first code point of its full NFKD expansion in the pool */
	uint32_t len; /* number of code points in the expansion */
};

extern const struct atlas_nfc_decomp atlas_nfc_decomp[];
extern const size_t atlas_nfc_decomp_len;
extern const struct atlas_nfc_comp atlas_nfc_comp[];
extern const size_t atlas_nfc_comp_len;
extern const uint32_t atlas_nfc_second[]; /* sorted; may follow a starter in a composition */
extern const size_t atlas_nfc_second_len;
extern const struct atlas_nfc_ccc atlas_nfc_ccc[];
extern const size_t atlas_nfc_ccc_len;
extern const struct atlas_nfkc_decomp atlas_nfkc_decomp[];
extern const size_t atlas_nfkc_decomp_len;
extern const uint32_t atlas_nfkc_pool[];
extern const size_t atlas_nfkc_pool_len;

/* Normalize `len` bytes of `s` to NFC. Returns 0 and sets *out to NULL
 * when the text is already in NFC (the common case, checked quickly),
 * or to a malloc'd buffer (owned by the caller) of *outlen bytes.
 * ATLAS_ENOMEM on allocation failure. */
int atlas_nfc(const char *s, size_t len, char **out, size_t *outlen);
/* The same for NFKC (compatibility decomposition, then composition). */
int atlas_nfkc(const char *s, size_t len, char **out, size_t *outlen);

#endif
