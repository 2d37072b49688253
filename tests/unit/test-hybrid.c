/* test-hybrid.c - hybrid linear-attention models (qwen3_next and
 * qwen3_5_moe_text, tests/fixtures/golden) in the engine: the recurrent
 * state a sequence carries beside its KV cache.
 *  - a prompt prefilled in one step, in chunks of 100, 64, 7 and one
 *    token at a time gives the same logits, bit for bit;
 *  - a sequence decoded alone and in a batch of 8 (the others at other
 *    positions, one step mixing in prefill chunks) gives the same bits;
 *  - a reset sequence starts from a zero state, as a new one does;
 *  - atlas_seq_truncate cuts back into the last step of several tokens
 *    (and the one-token steps after it) with the same bits as if the
 *    cut tokens had never run, and refuses to go further back;
 *  - the prefix cache keeps snapshots of the state at block boundaries
 *    (the last one each step reaches) and a prompt that attaches a
 *    cached prefix computes the same bits as one that does not; the
 *    snapshot slots are recycled least recently used first;
 *  - a composite Qwen3.5 MoE checkpoint (text_config, the language model
 *    under model.language_model., a vision tower) runs its text model.
 * The golden logits themselves are test-golden's. */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../lib/backend/backend.h"
#include "../../lib/core/error.h"
#include "../../lib/io/config.h"
#include "../../lib/model/decoder_internal.h" /* atlas_kvpool_check */
#include "../../lib/io/safetensors.h"
#include "../../lib/model/model.h"
#include "../../lib/model/tensors.h"
#include "harness.h"

static struct atlas_backend *be;
static struct atlas_model *m;
static int64_t V;

#define PROMPT 300

static int32_t tok(uint64_t seed, int64_t i)
{
	uint64_t x = (seed + 1) * 0x9e3779b97f4a7c15ull + (uint64_t)i * 0xbf58476d1ce4e5b9ull;
	x ^= x >> 31;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 29;
	return (int32_t)(x % (uint64_t)V);
}

static int64_t rows_differ(const float *want, const float *got, int64_t n)
{
	int64_t d = 0;
	for (int64_t i = 0; i < n; i++)
		d += memcmp(want + i * V, got + i * V, (size_t)V * sizeof(float)) != 0;
	return d;
}

static void test_chunked_prefill(void)
{
	int32_t ids[PROMPT];
	for (int64_t i = 0; i < PROMPT; i++)
		ids[i] = tok(1, i);
	float *ref = malloc((size_t)(PROMPT * V) * sizeof(float));
	float *got = malloc((size_t)(PROMPT * V) * sizeof(float));
	struct atlas_seq *s = atlas_seq_new(m);
	CHECK(atlas_model_recurrent(m));
	CHECK_EQ_INT(atlas_model_forward(m, s, ids, PROMPT, ref, true), 0);
	atlas_seq_free(s);
	static const int64_t chunks[] = {100, 64, 7, 1};
	for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
		s = atlas_seq_new(m);
		for (int64_t p = 0; p < PROMPT; p += chunks[c]) {
			int64_t n = PROMPT - p < chunks[c] ? PROMPT - p : chunks[c];
			CHECK_EQ_INT(atlas_model_forward(m, s, ids + p, n, got + p * V, true), 0);
		}
		atlas_seq_free(s);
		int64_t d = rows_differ(ref, got, PROMPT);
		printf("# prefill in chunks of %lld: %lld of %d positions differ from one step\n",
		       (long long)chunks[c], (long long)d, PROMPT);
		CHECK(d == 0);
	}
	free(ref);
	free(got);
}

#define STEPS 5

/* Sequence A (a 40-token prompt, then STEPS fed tokens) in steps with
 * nb - 1 others (prompts of 1..90 tokens; at step 2 each takes a 9-token
 * chunk); A's logits at each step into out[STEPS][V]. */
static void run_a(int nb, float *out)
{
	struct atlas_seq *seqs[8];
	struct atlas_batch_item it[8];
	static int32_t prompts[8][90], chunk[8][9];
	int32_t nexts[8];
	for (int b = 0; b < nb; b++) {
		seqs[b] = atlas_seq_new(m);
		int64_t n = b == 0 ? 40 : 1 + (b * 37) % 90;
		for (int64_t i = 0; i < n; i++)
			prompts[b][i] = tok(b ? 100 + (uint64_t)b : 2, i);
		it[b] = (struct atlas_batch_item){.seq = seqs[b], .ids = prompts[b], .n = n};
	}
	CHECK_EQ_INT(atlas_model_forward_batch(m, it, nb), 0);
	for (int st = 0; st < STEPS; st++) {
		for (int b = 0; b < nb; b++) {
			nexts[b] = tok(200 + (uint64_t)b, st);
			it[b] = (struct atlas_batch_item){.seq = seqs[b], .ids = &nexts[b], .n = 1};
			if (st == 2 && b) {
				for (int i = 0; i < 9; i++)
					chunk[b][i] = tok(300 + (uint64_t)b, i);
				it[b].ids = chunk[b];
				it[b].n = 9;
			}
		}
		it[0].logits = out + st * V;
		CHECK_EQ_INT(atlas_model_forward_batch(m, it, nb), 0);
	}
	for (int b = 0; b < nb; b++)
		atlas_seq_free(seqs[b]);
}

static void test_batch(void)
{
	float *alone = malloc((size_t)(STEPS * V) * sizeof(float));
	float *got = calloc((size_t)(STEPS * V), sizeof(float));
	run_a(1, alone);
	run_a(8, got);
	int64_t d = rows_differ(alone, got, STEPS);
	printf("# decode in a batch of 8: %lld of %d steps differ from alone\n", (long long)d,
	       STEPS);
	CHECK(d == 0);
	free(alone);
	free(got);
}

static void test_reset(void)
{
	int32_t a[30], b[12];
	for (int i = 0; i < 30; i++)
		a[i] = tok(5, i);
	for (int i = 0; i < 12; i++)
		b[i] = tok(6, i);
	float *want = malloc((size_t)V * sizeof(float)), *got = malloc((size_t)V * sizeof(float));
	struct atlas_seq *s = atlas_seq_new(m);
	CHECK_EQ_INT(atlas_model_forward(m, s, b, 12, want, false), 0);
	atlas_seq_reset(s);
	CHECK_EQ_INT(atlas_model_forward(m, s, a, 30, got, false), 0);
	atlas_seq_reset(s);
	CHECK_EQ_INT(atlas_model_forward(m, s, b, 12, got, false), 0);
	CHECK(memcmp(want, got, (size_t)V * sizeof(float)) == 0);
	atlas_seq_free(s);
	free(want);
	free(got);
}

/* A 20-token prompt, a 6-token step, 3 one-token steps; cut back to
 * 20 + keep and feed the rest again: the logits of the last token equal
 * a sequence that ran the same tokens without the detour. */
static void cut_case(int64_t keep)
{
	int32_t ids[29], detour[9];
	for (int i = 0; i < 29; i++)
		ids[i] = tok(7, i);
	for (int i = 0; i < 9; i++)
		detour[i] = i < keep ? ids[20 + i] : tok(8, i);
	float *want = malloc((size_t)V * sizeof(float)), *got = malloc((size_t)V * sizeof(float));
	struct atlas_seq *ref = atlas_seq_new(m), *s = atlas_seq_new(m);
	CHECK_EQ_INT(atlas_model_forward(m, ref, ids, 29, want, false), 0);
	CHECK_EQ_INT(atlas_model_forward(m, s, ids, 20, NULL, false), 0);
	CHECK_EQ_INT(atlas_model_forward(m, s, detour, 6, NULL, false), 0);
	for (int i = 6; i < 9; i++)
		CHECK_EQ_INT(atlas_model_forward(m, s, detour + i, 1, NULL, false), 0);
	CHECK_EQ_INT(atlas_seq_truncate(s, 20 + keep), 0);
	CHECK_EQ_INT(atlas_seq_len(s), 20 + keep);
	CHECK_EQ_INT(atlas_model_forward(m, s, ids + 20 + keep, 9 - keep, got, false), 0);
	printf("# cut back to 20 + %lld, the rest fed again: logits %s\n", (long long)keep,
	       memcmp(want, got, (size_t)V * sizeof(float)) ? "differ" : "identical");
	CHECK(memcmp(want, got, (size_t)V * sizeof(float)) == 0);
	atlas_seq_free(ref);
	atlas_seq_free(s);
	free(want);
	free(got);
}

static void test_truncate(void)
{
	static const int64_t keeps[] = {0, 1, 5, 7};
	for (size_t i = 0; i < sizeof(keeps) / sizeof(keeps[0]); i++)
		cut_case(keeps[i]);
	/* before the last step of several tokens: refused, nothing changes */
	int32_t ids[30];
	for (int i = 0; i < 30; i++)
		ids[i] = tok(9, i);
	struct atlas_seq *s = atlas_seq_new(m);
	CHECK_EQ_INT(atlas_model_forward(m, s, ids, 20, NULL, false), 0);
	CHECK_EQ_INT(atlas_model_forward(m, s, ids + 20, 5, NULL, false), 0);
	CHECK_EQ_INT(atlas_seq_truncate(s, 19), ATLAS_EUNSUPPORTED);
	CHECK(strstr(atlas_errmsg(), "hybrid") != NULL);
	CHECK_EQ_INT(atlas_seq_len(s), 25);
	CHECK_EQ_INT(atlas_seq_truncate(s, 25), 0);
	CHECK_EQ_INT(atlas_seq_truncate(s, 0), 0);
	CHECK_EQ_INT(atlas_seq_len(s), 0);
	/* one-token steps after a cut (a draft sequence's catch-up and
	 * passes): the first saves the state, so a later cut goes back */
	float *want = malloc((size_t)V * sizeof(float)), *got = malloc((size_t)V * sizeof(float));
	struct atlas_seq *ref = atlas_seq_new(m);
	CHECK_EQ_INT(atlas_model_forward(m, ref, ids, 23, want, false), 0);
	CHECK_EQ_INT(atlas_model_forward(m, s, ids, 20, NULL, false), 0);
	CHECK_EQ_INT(atlas_model_forward(m, s, ids + 20, 6, NULL, false), 0);
	CHECK_EQ_INT(atlas_seq_truncate(s, 20), 0); /* nothing to replay */
	for (int i = 20; i < 23; i++)
		CHECK_EQ_INT(atlas_model_forward(m, s, ids + i, 1, NULL, false), 0);
	CHECK_EQ_INT(atlas_seq_truncate(s, 21), 0);
	CHECK_EQ_INT(atlas_model_forward(m, s, ids + 21, 2, got, false), 0);
	CHECK(memcmp(want, got, (size_t)V * sizeof(float)) == 0);
	atlas_seq_free(ref);
	free(want);
	free(got);
	atlas_seq_free(s);
}

/* n tokens of stream `seed` run as `cold` from an empty sequence in one
 * step, and as `warm`: attached from the prefix cache (expect `hit`
 * tokens) and the rest computed; the last logits must be the same bits. */
static void warm_vs_cold_ids(const int32_t *ids, int64_t n, int64_t hit, bool publish);

static void warm_vs_cold(uint64_t seed, int64_t n, int64_t hit)
{
	int32_t ids[200];
	for (int64_t i = 0; i < n; i++)
		ids[i] = tok(seed, i);
	warm_vs_cold_ids(ids, n, hit, false);
}

/* The same for ids[0..n); the warm sequence publishes when `publish`. */
static void warm_vs_cold_ids(const int32_t *ids, int64_t n, int64_t hit, bool publish)
{
	float *cold = malloc((size_t)V * sizeof(float)), *warm = malloc((size_t)V * sizeof(float));
	struct atlas_seq *c = atlas_seq_new(m), *w = atlas_seq_new(m);
	CHECK_EQ_INT(atlas_model_forward(m, c, ids, n, cold, false), 0);
	int64_t got = atlas_seq_attach_prefix(w, ids, n);
	printf("# %lld tokens: %lld attached (want %lld)\n", (long long)n, (long long)got,
	       (long long)hit);
	CHECK_EQ_INT(got, hit);
	CHECK_EQ_INT(atlas_seq_len(w), hit);
	CHECK_EQ_INT(atlas_model_forward(m, w, ids + got, n - got, warm, false), 0);
	CHECK(memcmp(cold, warm, (size_t)V * sizeof(float)) == 0);
	if (publish)
		atlas_seq_publish_prefix(w, ids);
	atlas_seq_free(c);
	atlas_seq_free(w);
	free(cold);
	free(warm);
}

static void test_prefix_snapshots(void)
{
	const int64_t B = atlas_model_block_size(m);
	int32_t ids[200];
	for (int i = 0; i < 200; i++)
		ids[i] = tok(10, i);
	atlas_model_set_prefix_cache(m, true);
	int64_t bytes = -1;
	CHECK_EQ_INT(atlas_model_prefix_snapshots(m, &bytes), 0);
	CHECK_EQ_INT(bytes, 0);
	/* 70 tokens in one step: one snapshot, at the boundary 64 */
	struct atlas_seq *a = atlas_seq_new(m);
	CHECK_EQ_INT(atlas_model_forward(m, a, ids, 70, NULL, false), 0);
	atlas_seq_publish_prefix(a, ids);
	CHECK_EQ_INT(atlas_model_prefix_snapshots(m, &bytes), 1);
	CHECK(bytes > 0);
	atlas_seq_free(a);
	CHECK_EQ_INT(atlas_kvpool_check(m), 0);
	warm_vs_cold(10, 80, 4 * B);
	warm_vs_cold(10, 65, 4 * B);
	warm_vs_cold(10, 64, 0);  /* one token must be left to compute */
	warm_vs_cold(10, 50, 0);  /* blocks 0-2 match, none has a snapshot */
	/* in one-block steps: a snapshot at every boundary */
	a = atlas_seq_new(m);
	for (int64_t p = 0; p < 128; p += B) {
		CHECK_EQ_INT(atlas_model_forward(m, a, ids + p, B, NULL, false), 0);
		atlas_seq_publish_prefix(a, ids);
	}
	atlas_seq_free(a);
	warm_vs_cold(10, 50, 3 * B);
	warm_vs_cold(10, 129, 8 * B);
	/* decode steps crossing a boundary snapshot too */
	a = atlas_seq_new(m);
	CHECK_EQ_INT(atlas_model_forward(m, a, ids, 140, NULL, false), 0);
	atlas_seq_publish_prefix(a, ids);
	for (int64_t p = 140; p < 150; p++) {
		CHECK_EQ_INT(atlas_model_forward(m, a, ids + p, 1, NULL, false), 0);
		atlas_seq_publish_prefix(a, ids);
	}
	atlas_seq_free(a);
	warm_vs_cold(10, 150, 9 * B);
	/* a shared 48-token prefix (a system prompt), then 30 tokens of each
	 * prompt's own: the first prompt's step snapshots at 64 only; the
	 * second matches 3 blocks without a snapshot, attaches nothing and
	 * snapshots at its branch point, 48; the third attaches 48 */
	int32_t sp[78];
	for (int k = 0; k < 3; k++) {
		for (int i = 0; i < 78; i++)
			sp[i] = i < 48 ? tok(20, i) : tok(21 + (uint64_t)k, i);
		warm_vs_cold_ids(sp, 78, k < 2 ? 0 : 3 * B, true);
	}
	/* slots are recycled least recently used first: 40 prompts of 40
	 * tokens, each leaving one snapshot (at 32), outnumber the slots */
	int64_t live = 0;
	for (uint64_t k = 0; k < 40; k++) {
		int32_t p[40];
		for (int i = 0; i < 40; i++)
			p[i] = tok(1000 + k, i);
		a = atlas_seq_new(m);
		CHECK_EQ_INT(atlas_model_forward(m, a, p, 40, NULL, false), 0);
		atlas_seq_publish_prefix(a, p);
		atlas_seq_free(a);
		live = atlas_model_prefix_snapshots(m, NULL);
	}
	printf("# after 40 prompts: %lld snapshots kept\n", (long long)live);
	CHECK(live >= 8 && live < 40);
	warm_vs_cold(1039, 40, 2 * B); /* the newest is still there */
	warm_vs_cold(1000, 40, 0);     /* the oldest was recycled */
	CHECK_EQ_INT(atlas_kvpool_check(m), 0);
	atlas_model_set_prefix_cache(m, false);
	CHECK_EQ_INT(atlas_model_prefix_snapshots(m, &bytes), 0);
	CHECK_EQ_INT(bytes, 0);
}

/* tests/fixtures/golden/qwen3-5-moe as a composite Qwen3.5 MoE
 * checkpoint (model_type qwen3_5_moe, the text model in text_config, its
 * tensors under model.language_model., a vision tower beside them and
 * the fixture's MTP head, mtp.*, at the top as the Hub stores it)
 * written into dir. */
static int make_composite(const char *src, const char *dir)
{
	char path[1200];
	snprintf(path, sizeof(path), "%s/config.json", src);
	json_object *text = json_object_from_file(path), *top = json_object_new_object();
	if (!text)
		return -1;
	json_object_object_del(text, "architectures");
	json_object *arch = json_object_new_array();
	json_object_array_add(arch, json_object_new_string("Qwen3_5MoeForConditionalGeneration"));
	json_object_object_add(top, "architectures", arch);
	json_object_object_add(top, "model_type", json_object_new_string("qwen3_5_moe"));
	json_object_object_add(top, "text_config", text);
	json_object_object_add(top, "vision_config", json_object_new_object());
	mkdir(dir, 0755);
	snprintf(path, sizeof(path), "%s/config.json", dir);
	if (json_object_to_file(path, top))
		return -1;
	json_object_put(top);
	struct atlas_st *st = atlas_st_open(src);
	if (!st)
		return -1;
	/* the header: every tensor renamed, then two the text model lacks */
	json_object *h = json_object_new_object();
	size_t off = 0;
	for (int64_t i = 0; i < atlas_st_count(st); i++) {
		const struct atlas_tensor_info *t = atlas_st_get(st, i);
		char name[300];
		snprintf(name, sizeof(name), "%s%s",
			 strncmp(t->name, "model.", 6) ? "" : "model.language_model.",
			 t->name + (strncmp(t->name, "model.", 6) ? 0 : 6));
		json_object *e = json_object_new_object(), *sh = json_object_new_array();
		json_object *offs = json_object_new_array();
		for (int d = 0; d < t->ndim; d++)
			json_object_array_add(sh, json_object_new_int64(t->shape[d]));
		json_object_array_add(offs, json_object_new_int64((int64_t)off));
		json_object_array_add(offs, json_object_new_int64((int64_t)(off + t->nbytes)));
		json_object_object_add(e, "dtype", json_object_new_string(atlas_dtype_name(t->dtype)));
		json_object_object_add(e, "shape", sh);
		json_object_object_add(e, "data_offsets", offs);
		json_object_object_add(h, name, e);
		off += t->nbytes;
	}
	static const char *const extra[] = {"model.visual.patch_embed.proj.weight"};
	for (int k = 0; k < 1; k++) {
		json_object *e = json_object_new_object(), *sh = json_object_new_array();
		json_object *offs = json_object_new_array();
		json_object_array_add(sh, json_object_new_int64(4));
		json_object_array_add(offs, json_object_new_int64((int64_t)off));
		json_object_array_add(offs, json_object_new_int64((int64_t)off + 16));
		json_object_object_add(e, "dtype", json_object_new_string("F32"));
		json_object_object_add(e, "shape", sh);
		json_object_object_add(e, "data_offsets", offs);
		json_object_object_add(h, extra[k], e);
		off += 16;
	}
	const char *hs = json_object_to_json_string_ext(h, JSON_C_TO_STRING_PLAIN);
	uint64_t hl = (strlen(hs) + 7) / 8 * 8;
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	FILE *f = fopen(path, "wb");
	int rc = f ? 0 : -1;
	if (f) {
		fwrite(&hl, 8, 1, f);
		fputs(hs, f);
		for (size_t i = strlen(hs); i < hl; i++)
			fputc(' ', f);
		for (int64_t i = 0; i < atlas_st_count(st); i++)
			fwrite(atlas_st_get(st, i)->data, 1, atlas_st_get(st, i)->nbytes, f);
		static const float zeros[4] = {0};
		fwrite(zeros, sizeof(float), 4, f);
		rc = fclose(f) ? -1 : 0;
	}
	json_object_put(h);
	atlas_st_close(st);
	return rc;
}

static int n_warnings, n_problems;
static char last_warning[512];

static void on_finding(void *arg, enum atlas_finding level, const char *msg)
{
	(void)arg;
	if (level == ATLAS_FINDING_PROBLEM) {
		n_problems++;
		printf("# problem: %s\n", msg);
	} else {
		n_warnings++;
		snprintf(last_warning, sizeof(last_warning), "%s", msg);
		printf("# warning: %s\n", msg);
	}
}

/* The composite checkpoint loads its language model: the same logits, bit
 * for bit, as the text model's directory, and so does its MTP head;
 * validate reads it, with one warning for the vision tower (the MTP head
 * is checked, not skipped). */
static void test_composite(void)
{
	char src[1100], dir[1100];
	snprintf(src, sizeof(src), "%s/tests/fixtures/golden/qwen3-5-moe", harness_srcdir());
	const char *tmp = getenv("TMPDIR");
	snprintf(dir, sizeof(dir), "%s/atlas-test-composite-%d", tmp ? tmp : "/tmp", (int)getpid());
	CHECK_EQ_INT(make_composite(src, dir), 0);
	struct atlas_config c;
	CHECK_EQ_INT(atlas_config_load(dir, &c), 0);
	CHECK_STR(c.model_type, "qwen3_5_moe_text");
	CHECK_STR(c.composite, "qwen3_5_moe");
	CHECK_STR(c.architecture, "Qwen3_5MoeForConditionalGeneration");
	CHECK_EQ_INT(c.n_linear, 3);
	n_warnings = n_problems = 0;
	CHECK_EQ_INT(atlas_model_validate(dir, on_finding, NULL), 0);
	CHECK_EQ_INT(n_problems, 0);
	CHECK_EQ_INT(n_warnings, 1);
	CHECK_CONTAINS(last_warning, "vision tower");
	struct atlas_model *a = atlas_model_load(src, be, NULL), *b = atlas_model_load(dir, be, NULL);
	CHECK(a && b);
	if (a && b) {
		int32_t ids[40];
		V = atlas_model_config(a)->vocab_size;
		for (int i = 0; i < 40; i++)
			ids[i] = tok(11, i);
		float *la = malloc((size_t)(40 * V) * 4), *lb = malloc((size_t)(40 * V) * 4);
		struct atlas_seq *sa = atlas_seq_new(a), *sb = atlas_seq_new(b);
		CHECK_EQ_INT(atlas_model_forward(a, sa, ids, 40, la, true), 0);
		CHECK_EQ_INT(atlas_model_forward(b, sb, ids, 40, lb, true), 0);
		CHECK(memcmp(la, lb, (size_t)(40 * V) * 4) == 0);
		/* the heads: the same logits from the same hidden rows */
		struct atlas_model *ha = atlas_model_load_mtp(src, a, NULL);
		struct atlas_model *hb = atlas_model_load_mtp(dir, b, NULL);
		CHECK(ha && hb);
		if (ha && hb) {
			struct atlas_seq *qa = atlas_seq_new(ha), *qb = atlas_seq_new(hb);
			struct atlas_batch_item ia = {.seq = qa, .ids = ids + 1, .n = 20, .logits = la,
						      .n_logits = 20, .hid = atlas_model_hidden_rows(a, NULL)};
			struct atlas_batch_item ib = ia;
			ib.seq = qb;
			ib.logits = lb;
			/* each trunk's one step of 40 rows left them */
			ib.hid = atlas_model_hidden_rows(b, NULL);
			CHECK_EQ_INT(atlas_model_forward_batch(ha, &ia, 1), 0);
			CHECK_EQ_INT(atlas_model_forward_batch(hb, &ib, 1), 0);
			CHECK(memcmp(la, lb, (size_t)(20 * V) * 4) == 0);
			atlas_seq_free(qa);
			atlas_seq_free(qb);
		}
		atlas_model_free(ha);
		atlas_model_free(hb);
		atlas_seq_free(sa);
		atlas_seq_free(sb);
		free(la);
		free(lb);
	}
	atlas_model_free(a);
	atlas_model_free(b);
	char path[1200];
	snprintf(path, sizeof(path), "%s/config.json", dir);
	remove(path);
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	remove(path);
	rmdir(dir);
}

static void run_model(const char *name)
{
	char dir[1100];
	snprintf(dir, sizeof(dir), "%s/tests/fixtures/golden/%s", harness_srcdir(), name);
	struct atlas_model_params p;
	atlas_model_default_params(&p);
	p.max_seqs = 8;
	p.max_tokens = 512;
	p.max_context = 512;
	m = atlas_model_load(dir, be, &p);
	if (!m) {
		harness_fail(__FILE__, __LINE__, "load %s: %s", dir, atlas_errmsg());
		return;
	}
	printf("# %s\n", name);
	V = atlas_model_config(m)->vocab_size;
	RUN(test_chunked_prefill);
	RUN(test_batch);
	RUN(test_reset);
	RUN(test_truncate);
	RUN(test_prefix_snapshots);
	atlas_model_free(m);
}

int main(void)
{
	const char *dev = getenv("ATLAS_TEST_DEVICE");
	be = atlas_backend_open(dev ? dev : "cpu");
	if (!be) {
		printf("not ok 1 - open device '%s': %s\n", dev ? dev : "cpu", atlas_errmsg());
		return 1;
	}
	be->batch_invariant = true;
	run_model("qwen3-next-bf16");
	run_model("qwen3-5-moe");
	RUN(test_composite);
	be->destroy(be);
	return harness_done();
}
