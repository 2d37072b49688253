/* fuzz-config.c - libFuzzer entry point for config.json and
 * generation_config.json (lib/io/config.c).
 *
 * Each input is written as both files of one model directory and loaded
 * with atlas_config_load and atlas_gen_config_load, the calls a model
 * open makes; the input is also parsed from memory with
 * atlas_config_parse. An accepted config must keep the promises the
 * model code relies on (positive sizes, a head layout that divides, ids
 * in range, terminated strings); a broken one aborts. See README. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../lib/io/config.h"

static char dir[64];
static char cfg_path[96], gen_path[96];

static void cleanup(void)
{
	unlink(cfg_path);
	unlink(gen_path);
	rmdir(dir);
}

static int put(const char *path, const uint8_t *data, size_t size)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		return -1;
	if (size && fwrite(data, 1, size, f) != size) {
		fclose(f);
		return -1;
	}
	return fclose(f);
}

static void check_str(const char *s, size_t cap)
{
	if (!memchr(s, '\0', cap))
		abort(); /* not terminated inside its buffer */
}

static void check_eos(const int32_t *ids, int n)
{
	if (n < 0 || n > ATLAS_MAX_EOS)
		abort();
	for (int i = 0; i < n; i++)
		if (ids[i] < 0)
			abort();
}

static void check_config(const struct atlas_config *c)
{
	check_str(c->model_type, sizeof(c->model_type));
	check_str(c->architecture, sizeof(c->architecture));
	check_str(c->hidden_act, sizeof(c->hidden_act));
	if (c->vocab_size <= 0 || c->hidden_size <= 0 || c->intermediate_size <= 0 ||
	    c->num_layers <= 0 || c->num_heads <= 0 || c->num_kv_heads <= 0 || c->head_dim <= 0 ||
	    c->max_position <= 0)
		abort();
	if (c->num_heads % c->num_kv_heads)
		abort();
	if (!(c->rms_eps > 0) || !isfinite(c->rms_eps) || !(c->rope_theta > 0) ||
	    !isfinite(c->rope_theta) || !(c->rope_factor > 0) || !isfinite(c->rope_factor))
		abort();
	if (c->sliding_window < 0 || c->bos_id < -1)
		abort();
	if (c->mtp_layers < 0 || c->mtp_layers > 64)
		abort(); /* the MTP head's layer count, as config.c bounds it */
	check_eos(c->eos_ids, c->n_eos);
}

static void check_gen(const struct atlas_gen_config *g)
{
	if (!(g->temperature >= 0) || !isfinite(g->temperature) || !(g->top_p > 0) ||
	    g->top_p > 1 || !(g->min_p >= 0) || g->min_p > 1 || !(g->repetition_penalty > 0) ||
	    !isfinite(g->repetition_penalty) || g->top_k < 0 || g->max_new_tokens < -1 ||
	    g->bos_id < -1)
		abort();
	check_eos(g->eos_ids, g->n_eos);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct atlas_config c;
	struct atlas_gen_config g;
	char *text;

	if (!dir[0]) {
		snprintf(dir, sizeof(dir), "/tmp/fuzz-config-%d-XXXXXX", (int)getpid());
		if (!mkdtemp(dir))
			abort();
		snprintf(cfg_path, sizeof(cfg_path), "%s/config.json", dir);
		snprintf(gen_path, sizeof(gen_path), "%s/generation_config.json", dir);
		atexit(cleanup);
	}
	if (!(text = malloc(size + 1)))
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	if (atlas_config_parse(text, "fuzz", &c) == 0)
		check_config(&c);
	free(text);

	if (put(cfg_path, data, size) || put(gen_path, data, size))
		abort();
	if (atlas_config_load(dir, &c) == 0) {
		check_config(&c);
		if (memchr(data, '\0', size))
			abort(); /* a NUL byte must not end the file early */
	}
	if (atlas_gen_config_load(dir, &g) == 0)
		check_gen(&g);
	return 0;
}
