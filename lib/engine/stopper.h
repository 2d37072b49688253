/* stopper.h - stop strings over a stream of generated tokens.
 *
 * Turns generated ids into text with the tokenizer's streaming decoder
 * (UTF-8 safe) and holds back the longest tail that could still grow
 * into a stop string, so a caller never shows text that a stop string
 * later takes back. The same rules as atlas_generate, as a piece any
 * loop can reuse (the server's scheduler runs many at once). */
#ifndef ATLAS_ENGINE_STOPPER_H
#define ATLAS_ENGINE_STOPPER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../tok/tok.h"

struct atlas_stopper {
	struct atlas_tok_stream ts;  /* streaming decoder */
	const struct atlas_tok *tok; /* tokenizer, or NULL (no text) */
	char **stop;                 /* stop strings (owned copies) */
	int n_stop;                  /* entries in stop */
	char *buf;                   /* held text (NUL-terminated) */
	size_t len;                  /* bytes held */
	size_t cap;                  /* capacity of buf */
	size_t drop;                 /* bytes released last call, dropped on the next */
	int matched;                 /* index of the stop string found, or -1 */
};

/* Set up for one generation; copies the stop strings. Returns 0 or
 * ATLAS_ENOMEM. Release with atlas_stopper_release even on failure. */
int atlas_stopper_init(struct atlas_stopper *s, const struct atlas_tok *tok,
		       const char *const *stop, int n_stop);
void atlas_stopper_release(struct atlas_stopper *s);

/* Feed one generated id. Sets *text and *len to the bytes it releases (valid
 * until the next call; len may be 0) and *stopped when a stop string
 * completed: the text then ends just before it, and s->matched says
 * which. Returns 0 or a negative ATLAS_E* (bad id, no memory). */
int atlas_stopper_push(struct atlas_stopper *s, int32_t id, const char **text,
		       size_t *len, bool *stopped);

/* End of generation without a stop string: release everything still
 * held (a partial stop string, an incomplete character). Same contract
 * for *text and *len as atlas_stopper_push. */
int atlas_stopper_finish(struct atlas_stopper *s, const char **text, size_t *len);

#endif
