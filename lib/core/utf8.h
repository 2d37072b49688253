/* utf8.h - one UTF-8 decoder for the whole library (tokenizer, pipe
 * formats, server JSON): strict, so overlong forms, surrogates and code
 * points past U+10FFFF count as invalid. */
#ifndef ATLAS_CORE_UTF8_H
#define ATLAS_CORE_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Length of the valid UTF-8 sequence at s (1..4, reading at most len
 * bytes), or 0 if the bytes at s are not one; *cp gets the code point. */
static inline int atlas_utf8_decode(const unsigned char *s, size_t len, uint32_t *cp)
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
