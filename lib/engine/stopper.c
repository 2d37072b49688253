/* stopper.c - stop strings over streamed text (see stopper.h). */
#include "stopper.h"

#include <stdlib.h>
#include <string.h>

#include "../core/error.h"

int atlas_stopper_init(struct atlas_stopper *s, const struct atlas_tok *tok,
		       const char *const *stop, int n_stop)
{
	memset(s, 0, sizeof(*s));
	s->tok = tok;
	s->matched = -1;
	if (tok)
		atlas_tok_stream_init(&s->ts, tok);
	if (n_stop > 0) {
		s->stop = calloc((size_t)n_stop, sizeof(char *));
		if (!s->stop)
			return atlas_error(ATLAS_ENOMEM, "out of memory");
		for (int i = 0; i < n_stop; i++) {
			if (!(s->stop[i] = strdup(stop[i])))
				return atlas_error(ATLAS_ENOMEM, "out of memory");
			s->n_stop = i + 1;
		}
	}
	return 0;
}

void atlas_stopper_release(struct atlas_stopper *s)
{
	for (int i = 0; i < s->n_stop; i++)
		free(s->stop[i]);
	free(s->stop);
	free(s->buf);
	memset(s, 0, sizeof(*s));
	s->matched = -1;
}

static int append(struct atlas_stopper *s, const char *p, size_t n)
{
	if (s->len + n + 1 > s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 256;
		while (cap < s->len + n + 1)
			cap *= 2;
		char *b = realloc(s->buf, cap);
		if (!b)
			return atlas_error(ATLAS_ENOMEM, "out of memory");
		s->buf = b;
		s->cap = cap;
	}
	memcpy(s->buf + s->len, p, n);
	s->len += n;
	s->buf[s->len] = '\0';
	return 0;
}

/* Forget what the previous call released. */
static void drop_released(struct atlas_stopper *s)
{
	if (!s->drop)
		return;
	memmove(s->buf, s->buf + s->drop, s->len - s->drop);
	s->len -= s->drop;
	s->buf[s->len] = '\0';
	s->drop = 0;
}

/* Length of the longest held tail that is a proper prefix of a stop
 * string: it must wait for the next token. */
static size_t held_suffix(const struct atlas_stopper *s)
{
	size_t best = 0;
	for (int i = 0; i < s->n_stop; i++) {
		size_t sl = strlen(s->stop[i]);
		for (size_t k = sl > 1 ? sl - 1 : 0; k > best; k--)
			if (k <= s->len && !memcmp(s->buf + s->len - k, s->stop[i], k)) {
				best = k;
				break;
			}
	}
	return best;
}

/* Offset of the earliest stop string in the held text, or -1; sets
 * s->matched to the string found. */
static int64_t find_stop(struct atlas_stopper *s)
{
	int64_t first = -1;
	for (int i = 0; i < s->n_stop; i++) {
		if (!s->stop[i][0] || !s->len)
			continue;
		const char *p = memmem(s->buf, s->len, s->stop[i], strlen(s->stop[i]));
		if (p && (first < 0 || p - s->buf < first)) {
			first = p - s->buf;
			s->matched = i;
		}
	}
	return first;
}

int atlas_stopper_push(struct atlas_stopper *s, int32_t id, const char **text,
		       size_t *len, bool *stopped)
{
	char piece[256];
	*text = "";
	*len = 0;
	*stopped = false;
	drop_released(s);
	if (!s->tok)
		return 0;
	int64_t n = atlas_tok_stream_push(&s->ts, id, piece, sizeof(piece));
	if (n < 0)
		return (int)n;
	int rc = append(s, piece, (size_t)n);
	if (rc)
		return rc;
	int64_t at = find_stop(s);
	size_t release;
	if (at >= 0) {
		release = (size_t)at;
		*stopped = true;
	} else {
		release = s->len - held_suffix(s);
	}
	*text = s->buf ? s->buf : "";
	*len = release;
	s->drop = release;
	return 0;
}

int atlas_stopper_finish(struct atlas_stopper *s, const char **text, size_t *len)
{
	char tail[16];
	*text = "";
	*len = 0;
	drop_released(s);
	if (!s->tok)
		return 0;
	int64_t n = atlas_tok_stream_flush(&s->ts, tail, sizeof(tail));
	if (n < 0)
		return (int)n;
	int rc = append(s, tail, (size_t)n);
	if (rc)
		return rc;
	*text = s->buf ? s->buf : "";
	*len = s->len;
	s->drop = s->len;
	return 0;
}
