/* sha256.h - SHA-256 (FIPS 180-4), incremental, for verifying downloaded
 * files against the Hub's LFS object ids. */
#ifndef ATLAS_CORE_SHA256_H
#define ATLAS_CORE_SHA256_H

#include <stddef.h>
#include <stdint.h>

struct atlas_sha256 {
	uint32_t h[8];      /* chaining state */
	uint64_t bytes;     /* message length so far */
	uint8_t buf[64];    /* pending partial block */
	size_t nbuf;        /* bytes used in buf */
};

void atlas_sha256_init(struct atlas_sha256 *s);
void atlas_sha256_update(struct atlas_sha256 *s, const void *data, size_t len);
/* Finish and write the digest as 64 lowercase hex digits plus NUL. The
 * state must be re-initialized before reuse. */
void atlas_sha256_hex(struct atlas_sha256 *s, char hex[65]);
/* Finish and write the raw 32-byte digest. */
void atlas_sha256_final(struct atlas_sha256 *s, uint8_t out[32]);

#endif
