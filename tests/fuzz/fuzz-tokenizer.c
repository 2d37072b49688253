/* fuzz-tokenizer.c - libFuzzer entry point for the tokenizer.json loader.
 *
 * Each input is written as tokenizer.json into one temporary directory
 * (atlas_tok_load takes a directory) and loaded. A tokenizer that loads
 * encodes a fixed text (words, digits, accents, CJK, an emoji, bytes
 * that are no UTF-8, and the special tokens of the seeds), decodes the
 * ids in one piece and one at a time through the streaming decoder, and
 * looks each id's piece up; a loaded vocabulary must hold its ids. See
 * README. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../lib/tok/tok.h"

static char dir[64];
static char path[128];

static const char text[] = "Hello, world! It's 2024: caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac "
			   "\xf0\x9f\x91\x8d  \t\n\n x=1+2 <|end|><|pad|>[X] <s></s> "
			   "\xff\xfe\xc3 don't  end";

static void cleanup(void)
{
	if (path[0])
		unlink(path);
	if (dir[0])
		rmdir(dir);
}

/* The same file is reused for every input: fewer inodes, faster runs. */
static int write_input(const uint8_t *data, size_t size)
{
	if (!dir[0]) {
		snprintf(dir, sizeof(dir), "/tmp/fuzz-tok-%d-XXXXXX", (int)getpid());
		if (!mkdtemp(dir)) {
			dir[0] = '\0';
			return -1;
		}
		snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
		atexit(cleanup);
	}
	FILE *f = fopen(path, "wb");
	if (!f)
		return -1;
	if (size && fwrite(data, 1, size, f) != size) {
		fclose(f);
		return -1;
	}
	return fclose(f);
}

static void exercise(const struct atlas_tok *tok)
{
	int64_t nvocab = atlas_tok_vocab_size(tok);
	if (nvocab < 0 || nvocab > INT32_MAX)
		abort();
	for (int special = 0; special < 2; special++) {
		int32_t *ids = NULL;
		size_t n = 0;
		if (atlas_tok_encode(tok, text, sizeof(text) - 1, special, &ids, &n))
			continue;
		char *out = NULL;
		size_t len = 0;
		for (size_t i = 0; i < n; i++) {
			size_t plen;
			if (ids[i] < 0 || ids[i] >= nvocab)
				abort(); /* encode gave an id outside the vocabulary */
			(void)atlas_tok_piece(tok, ids[i], &plen);
			(void)atlas_tok_is_special(tok, ids[i]);
		}
		if (!atlas_tok_decode(tok, ids, n, &out, &len) && out[len] != '\0')
			abort();
		free(out);
		struct atlas_tok_stream s;
		char buf[256];
		atlas_tok_stream_init(&s, tok);
		for (size_t i = 0; i < n; i++)
			(void)atlas_tok_stream_push(&s, ids[i], buf, sizeof(buf));
		(void)atlas_tok_stream_flush(&s, buf, sizeof(buf));
		free(ids);
	}
	/* ids at and past the ends: refused, never read out of bounds */
	const int32_t edge[] = {-1, 0, (int32_t)(nvocab > 0 ? nvocab - 1 : 0), (int32_t)nvocab,
				INT32_MAX};
	for (size_t i = 0; i < sizeof(edge) / sizeof(edge[0]); i++) {
		char *out = NULL;
		size_t len;
		if (!atlas_tok_decode(tok, &edge[i], 1, &out, &len))
			free(out);
	}
	(void)atlas_tok_lookup(tok, "<|end|>");
	(void)atlas_tok_lookup(tok, "hello");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (write_input(data, size))
		return 0;
	struct atlas_tok *tok = atlas_tok_load(dir);
	if (!tok)
		return 0;
	exercise(tok);
	atlas_tok_free(tok);
	return 0;
}
