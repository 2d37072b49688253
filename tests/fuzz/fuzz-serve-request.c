/* fuzz-serve-request.c - libFuzzer entry point for atlas-serve's request
 * parsers.
 *
 * Each input is a request body, given to the POST routes as a request
 * would give it: /v1/chat/completions, /v1/completions, /v1/messages,
 * /v1/messages/count_tokens and /tokenize. That runs the JSON parse, every
 * typed field, stop strings, prompts (text, token ids, lists of either),
 * the chat template over OpenAI and Anthropic messages (tool calls and
 * results included), tools and tool_choice (the server parses hermes
 * calls), response_format, grammar and regex compiled to grammars,
 * tokenization and the job set-up, up to
 * the point where a request would be submitted; no model runs. The bytes
 * also go to serve_head_check, the check of a connection's first request
 * head. The server
 * is the parse-only one of lib/serve (serve_parse_only_open) over the
 * model in $ATLAS_FUZZ_MODEL, else models/default of the current
 * directory (run from the repository root). A route answering something
 * other than a JSON status (200, 400, 413, 500, 503) is a bug too.
 * See README. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../lib/serve/serve_internal.h"

static const char *const paths[] = {"/v1/chat/completions", "/v1/completions", "/v1/messages",
				    "/v1/messages/count_tokens", "/tokenize"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct atlas_server *srv;
	if (!srv) {
		const char *dir = getenv("ATLAS_FUZZ_MODEL");
		if (!(srv = serve_parse_only_open(dir ? dir : "models/default"))) {
			fprintf(stderr, "fuzz-serve-request: cannot open the model (set "
					"ATLAS_FUZZ_MODEL or run from the repository root)\n");
			abort();
		}
	}
	/* the same bytes as a request head, as the connection gate checks them */
	struct serve_err e;
	enum serve_api api;
	serve_head_check(srv, (const char *)data, size, size, &api, &e);
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		unsigned st = serve_parse_only_request(srv, paths[i], (const char *)data, size);
		if (st != 200 && st != 400 && st != 413 && st != 500 && st != 503) {
			fprintf(stderr, "fuzz-serve-request: %s answered %u\n", paths[i], st);
			abort();
		}
	}
	return 0;
}
