/* spec.h - speculative decoding: how drafts are made.
 *
 * A decoding request may propose k draft tokens a step; the scheduler
 * runs its last token and the drafts as one item of k + 1 rows, takes the
 * logits of every row, and verifies the drafts in order: each row is
 * sampled with the request's own sampler and next uniform, exactly as a
 * plain step would, and its draft is kept when the two agree. For a fixed
 * draft that is the standard rule (kept with probability p(draft), else
 * a draw from p without it), and the tokens are those of plain decoding,
 * greedy or seeded, wherever a row's logits do not depend on how many
 * rows its step holds. The first rejected draft
 * is replaced by the verified token, and when every draft is kept the
 * last row gives one token more: a step emits 1..k+1 tokens. The rows of
 * rejected drafts are dropped from the KV cache (atlas_seq_truncate).
 *
 * Drafts come from one of two sources:
 * - prompt lookup (n-gram): the longest suffix of the request's tokens
 *   (ngram_max down to ngram_min tokens) that occurred before in its
 *   prompt or output, most recent occurrence first, proposes the tokens
 *   that followed it. It costs no model and pays off where the output
 *   repeats its input: code edits, quoting, tool calls over given
 *   arguments.
 * - a draft model (sched_draft.c): a smaller model with the target's
 *   tokenizer decodes k tokens greedily (under the request's grammar, if
 *   any) from its own KV cache, which follows the request's accepted
 *   tokens. A greedy draft is a point mass, so the verification rule
 *   above is the standard one for it: output is distributed exactly as
 *   without drafts.
 * - an MTP head (sched_mtp.c): the checkpoint's multi-token prediction
 *   layer, run as a draft model whose input pairs each token with the
 *   target's hidden state of the token before it (its own, for the
 *   drafts after the first); drafts are greedy as a draft model's. */
#ifndef ATLAS_ENGINE_SPEC_H
#define ATLAS_ENGINE_SPEC_H

#include <stdint.h>

enum atlas_spec_mode {
	ATLAS_SPEC_NONE = 0,  /* no speculation */
	ATLAS_SPEC_NGRAM,     /* prompt lookup */
	ATLAS_SPEC_DRAFT,     /* a draft model (--draft-model) */
	ATLAS_SPEC_MTP,       /* the checkpoint's multi-token prediction head */
};

#define ATLAS_SPEC_MAX_DRAFT 16  /* most drafts a step (--num-draft) */
#define ATLAS_SPEC_DEFAULT_DRAFT 4
#define ATLAS_SPEC_NGRAM_MAX 4   /* longest suffix matched by default */
#define ATLAS_SPEC_NGRAM_MIN 2   /* shortest */

struct atlas_spec_params {
	enum atlas_spec_mode mode; /* ATLAS_SPEC_NONE: off */
	int num_draft;             /* drafts a step, 1..ATLAS_SPEC_MAX_DRAFT (0: default) */
	int ngram_max, ngram_min;  /* suffix lengths tried (0: defaults) */
};

/* "none", "ngram", "draft", "mtp". */
const char *atlas_spec_name(enum atlas_spec_mode m);
/* Parse a --speculative value: "none", "ngram", "draft", "mtp"; anything
 * else is ATLAS_EINVAL, the message listing what is accepted. */
int atlas_spec_parse(const char *s, enum atlas_spec_mode *out);
/* Check p (a mode, num_draft and the n-gram range) and fill its
 * defaults; 0 or ATLAS_EINVAL naming the field. */
int atlas_spec_check(struct atlas_spec_params *p);

/* Prompt-lookup drafts for the sequence hist[0, n): for g = ngram_max
 * down to ngram_min, the latest earlier occurrence of its last g tokens
 * (one that some token follows) proposes the tokens after it, at most k
 * of them, into out. Returns how many (0: no match). */
int64_t atlas_ngram_draft(const int32_t *hist, int64_t n, int ngram_max, int ngram_min,
			  int64_t k, int32_t *out);

#endif
