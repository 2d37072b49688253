/* spec.c - speculative decoding's drafts and settings (see spec.h). */
#include "spec.h"

#include <string.h>

#include "../core/error.h"

const char *atlas_spec_name(enum atlas_spec_mode m)
{
	return m == ATLAS_SPEC_NGRAM ? "ngram" : m == ATLAS_SPEC_DRAFT ? "draft"
	       : m == ATLAS_SPEC_MTP ? "mtp" : "none";
}

int atlas_spec_parse(const char *s, enum atlas_spec_mode *out)
{
	if (!strcmp(s, "none")) {
		*out = ATLAS_SPEC_NONE;
		return 0;
	}
	if (!strcmp(s, "ngram")) {
		*out = ATLAS_SPEC_NGRAM;
		return 0;
	}
	if (!strcmp(s, "draft")) {
		*out = ATLAS_SPEC_DRAFT;
		return 0;
	}
	if (!strcmp(s, "mtp")) {
		*out = ATLAS_SPEC_MTP;
		return 0;
	}
	return atlas_error(ATLAS_EINVAL, "unknown speculative mode '%s' (none, ngram, draft, mtp)",
			   s);
}

int atlas_spec_check(struct atlas_spec_params *p)
{
	if (p->mode != ATLAS_SPEC_NONE && p->mode != ATLAS_SPEC_NGRAM && p->mode != ATLAS_SPEC_DRAFT &&
	    p->mode != ATLAS_SPEC_MTP)
		return atlas_error(ATLAS_EINVAL, "unknown speculative mode %d", (int)p->mode);
	if (!p->num_draft)
		p->num_draft = ATLAS_SPEC_DEFAULT_DRAFT;
	if (p->num_draft < 1 || p->num_draft > ATLAS_SPEC_MAX_DRAFT)
		return atlas_error(ATLAS_EINVAL, "the number of drafts must be 1..%d, not %d",
				   ATLAS_SPEC_MAX_DRAFT, p->num_draft);
	if (!p->ngram_max)
		p->ngram_max = ATLAS_SPEC_NGRAM_MAX;
	if (!p->ngram_min)
		p->ngram_min = p->ngram_max < ATLAS_SPEC_NGRAM_MIN ? p->ngram_max : ATLAS_SPEC_NGRAM_MIN;
	if (p->ngram_min < 1 || p->ngram_max < p->ngram_min || p->ngram_max > 64)
		return atlas_error(ATLAS_EINVAL, "the n-gram lengths must satisfy 1 <= min <= max <= 64, "
				   "not %d..%d", p->ngram_min, p->ngram_max);
	return 0;
}

int64_t atlas_ngram_draft(const int32_t *hist, int64_t n, int ngram_max, int ngram_min,
			  int64_t k, int32_t *out)
{
	if (k <= 0)
		return 0;
	for (int64_t g = ngram_max; g >= ngram_min && g >= 1; g--) {
		if (g >= n)
			continue;
		const int32_t *suf = hist + n - g;
		/* an occurrence at i, i + g <= n - 1, so that a token follows it
		 * (the suffix itself, at n - g, has none) */
		for (int64_t i = n - g - 1; i >= 0; i--) {
			if (hist[i] != suf[0] || memcmp(hist + i, suf, (size_t)g * sizeof(int32_t)))
				continue;
			int64_t from = i + g, m = n - from < k ? n - from : k;
			memcpy(out, hist + from, (size_t)m * sizeof(int32_t));
			return m;
		}
	}
	return 0;
}
