/* tokverify.c - the C side of the tokenizer verification (tests/tokverify/run).
 *
 *   tokverify DIR < corpus.jsonl           one output line per input line
 *   tokverify --bench DIR < docs.jsonl     encode throughput, one line
 *
 * Each input line is {"text": "...", "hex": "..."}; "hex", when present,
 * holds raw bytes that are not valid UTF-8 (and "text" is those bytes as
 * the reference sees them, with replacement characters). For every line it
 * prints {"ids": [...], "decoded": "...", "stream_ok": B, "raw_ok": B}:
 * ids of "text" with special tokens added, the decode of those ids (bytes
 * that are not UTF-8 written as U+FFFD, maximal subpart by subpart, as
 * TextDecoder does), whether the streaming decoder produced exactly the
 * bytes of the whole-sequence decode, and, for a "hex" line, whether
 * encoding the raw bytes and decoding the ids gives those bytes back
 * (null otherwise). --bench encodes each {"text"} line and prints
 * {"bytes": N, "seconds": S} for the encode calls alone. */
#include "../../lib/core/error.h"
#include "../../lib/tok/tok.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Length of the maximal subpart at s: the bytes TextDecoder replaces by
 * one U+FFFD, or the length of the valid character there (*valid = 1). */
static size_t utf8_step(const unsigned char *s, size_t len, int *valid)
{
	unsigned char c = s[0];
	size_t need = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
				 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
	*valid = 0;
	if (need == 0)
		return 1;
	for (size_t i = 1; i < need; i++) {
		unsigned char lo = 0x80, hi = 0xbf;
		if (i == 1 && c == 0xe0)
			lo = 0xa0;
		if (i == 1 && c == 0xed)
			hi = 0x9f;
		if (i == 1 && c == 0xf0)
			lo = 0x90;
		if (i == 1 && c == 0xf4)
			hi = 0x8f;
		if (i >= len || s[i] < lo || s[i] > hi)
			return i;
	}
	*valid = 1;
	return need;
}

static void put_json_string(FILE *f, const char *s, size_t len)
{
	const unsigned char *u = (const unsigned char *)s;
	fputc('"', f);
	for (size_t i = 0; i < len;) {
		int valid;
		size_t n = utf8_step(u + i, len - i, &valid);
		if (!valid) {
			fputs("\\ufffd", f);
		} else if (n == 1 && (u[i] < 0x20 || u[i] == '"' || u[i] == '\\')) {
			fprintf(f, "\\u%04x", u[i]);
		} else {
			fwrite(u + i, 1, n, f);
		}
		i += n;
	}
	fputc('"', f);
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Does streaming ids through atlas_tok_stream give exactly want? */
static int stream_same(const struct atlas_tok *tok, const int32_t *ids, size_t n,
		       const char *want, size_t wlen)
{
	struct atlas_tok_stream st;
	char *got = malloc(wlen + 64), buf[4096];
	size_t w = 0;
	int ok = got != NULL;
	atlas_tok_stream_init(&st, tok);
	for (size_t i = 0; ok && i <= n; i++) {
		int64_t k = i < n ? atlas_tok_stream_push(&st, ids[i], buf, sizeof(buf))
				  : atlas_tok_stream_flush(&st, buf, sizeof(buf));
		if (k < 0 || w + (size_t)k > wlen) {
			ok = 0;
			break;
		}
		memcpy(got + w, buf, (size_t)k);
		w += (size_t)k;
	}
	ok = ok && w == wlen && !memcmp(got, want, wlen);
	free(got);
	return ok;
}

/* Encode raw bytes without special tokens and decode: same bytes back? */
static int raw_roundtrip(const struct atlas_tok *tok, const char *b, size_t len)
{
	int32_t *ids;
	size_t n, dlen;
	char *d;
	if (atlas_tok_encode(tok, b, len, false, &ids, &n))
		return 0;
	int rc = atlas_tok_decode(tok, ids, n, &d, &dlen);
	free(ids);
	if (rc)
		return 0;
	rc = dlen == len && !memcmp(d, b, len);
	free(d);
	return rc;
}

static int one_line(const struct atlas_tok *tok, json_object *o)
{
	json_object *t = NULL, *h = NULL;
	if (!json_object_object_get_ex(o, "text", &t))
		return -1;
	const char *text = json_object_get_string(t);
	size_t len = (size_t)json_object_get_string_len(t), n, dlen;
	int32_t *ids;
	char *dec;
	if (atlas_tok_encode(tok, text, len, true, &ids, &n) ||
	    atlas_tok_decode(tok, ids, n, &dec, &dlen)) {
		fprintf(stderr, "tokverify: %s\n", atlas_errmsg());
		return -1;
	}
	printf("{\"ids\": [");
	for (size_t i = 0; i < n; i++)
		printf(i ? ",%d" : "%d", ids[i]);
	printf("], \"decoded\": ");
	put_json_string(stdout, dec, dlen);
	printf(", \"stream_ok\": %s", stream_same(tok, ids, n, dec, dlen) ? "true" : "false");
	printf(", \"raw_ok\": ");
	if (json_object_object_get_ex(o, "hex", &h)) {
		const char *x = json_object_get_string(h);
		size_t xl = strlen(x) / 2;
		char *b = malloc(xl + 1);
		for (size_t i = 0; b && i < xl; i++)
			b[i] = (char)(hexval(x[2 * i]) << 4 | hexval(x[2 * i + 1]));
		printf("%s", b && raw_roundtrip(tok, b, xl) ? "true" : "false");
		free(b);
	} else {
		printf("null");
	}
	printf("}\n");
	free(ids);
	free(dec);
	return 0;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	int bench = argc == 3 && !strcmp(argv[1], "--bench");
	if (argc != 2 && !bench) {
		fprintf(stderr, "usage: tokverify [--bench] DIR < lines.jsonl\n");
		return 2;
	}
	struct atlas_tok *tok = atlas_tok_load(argv[argc - 1]);
	if (!tok) {
		fprintf(stderr, "tokverify: %s\n", atlas_errmsg());
		return 1;
	}
	char *line = NULL;
	size_t cap = 0, bytes = 0;
	ssize_t got;
	double secs = 0;
	int rc = 0;
	while (!rc && (got = getline(&line, &cap, stdin)) > 0) {
		json_object *o = json_tokener_parse(line), *t;
		if (!o) {
			fprintf(stderr, "tokverify: bad JSON line\n");
			rc = 1;
			break;
		}
		if (bench && json_object_object_get_ex(o, "text", &t)) {
			int32_t *ids;
			size_t n, len = (size_t)json_object_get_string_len(t);
			double t0 = now();
			if (atlas_tok_encode(tok, json_object_get_string(t), len, false, &ids, &n))
				rc = 1;
			else
				free(ids);
			secs += now() - t0;
			bytes += len;
		} else if (!bench && one_line(tok, o)) {
			rc = 1;
		}
		json_object_put(o);
	}
	if (bench && !rc)
		printf("{\"bytes\": %zu, \"seconds\": %.6f}\n", bytes, secs);
	free(line);
	atlas_tok_free(tok);
	return rc;
}
