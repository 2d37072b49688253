/* test-quant-int.c - the integer formats dequantized at load (quant_int.c):
 * AWQ gemm, GPTQ (v1/v2, desc_act g_idx, 4 and 8 bits, a partial last
 * group) and compressed-tensors pack-quantized (symmetric, asymmetric,
 * channel, padded rows). Each case writes a tiny safetensors file here
 * from integer tables packed by reference packers written from the
 * formats' packing code (not from the dequantizer), and compares W with
 * (q - z) * s computed from the tables. Malformed sets are refused with
 * the tensor's name. One AWQ case also goes through quantization_config
 * and atlas_quant_dequant. */
#include <stdlib.h>

#include "harness.h"
#include "../../lib/core/dtype.h"
#include "../../lib/core/error.h"
#include "../../lib/io/quant_internal.h"

#define P "model.layers.0.mlp.down_proj"

/* --- a safetensors writer ------------------------------------------- */

struct stw {
	char hdr[16384];     /* JSON header being built */
	size_t hl;	     /* its length */
	unsigned char *data; /* tensor bytes, in order */
	size_t len;	     /* their length */
};

static void stw_add(struct stw *w, const char *name, const char *dtype, int ndim,
		    const int64_t *shape, const void *bytes, size_t n)
{
	w->hl += (size_t)snprintf(w->hdr + w->hl, sizeof(w->hdr) - w->hl,
				  "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", w->hl ? "," : "{", name,
				  dtype);
	for (int d = 0; d < ndim; d++)
		w->hl += (size_t)snprintf(w->hdr + w->hl, sizeof(w->hdr) - w->hl, "%s%lld",
					  d ? "," : "", (long long)shape[d]);
	w->hl += (size_t)snprintf(w->hdr + w->hl, sizeof(w->hdr) - w->hl,
				  "],\"data_offsets\":[%zu,%zu]}", w->len, w->len + n);
	w->data = realloc(w->data, w->len + n + 1);
	memcpy(w->data + w->len, bytes, n);
	w->len += n;
}

static void stw_2d(struct stw *w, const char *suffix, const char *dtype, int64_t d0, int64_t d1,
		   const void *bytes, size_t esize)
{
	char name[256];
	snprintf(name, sizeof(name), P ".%s", suffix);
	const int64_t sh[2] = {d0, d1};
	stw_add(w, name, dtype, 2, sh, bytes, (size_t)(d0 * d1) * esize);
}

static void stw_1d(struct stw *w, const char *suffix, const char *dtype, int64_t d0,
		   const void *bytes, size_t esize)
{
	char name[256];
	snprintf(name, sizeof(name), P ".%s", suffix);
	stw_add(w, name, dtype, 1, &d0, bytes, (size_t)d0 * esize);
}

/* Write the file (a fresh name each call), open it, reset the writer. */
static struct atlas_st *stw_open(struct stw *w)
{
	static int n;
	char name[64];
	snprintf(name, sizeof(name), "q%d.safetensors", n++);
	if (!w->hl)
		w->hl = (size_t)snprintf(w->hdr, sizeof(w->hdr), "{");
	w->hl += (size_t)snprintf(w->hdr + w->hl, sizeof(w->hdr) - w->hl, "}");
	size_t total = 8 + w->hl + w->len;
	unsigned char *buf = malloc(total);
	for (int i = 0; i < 8; i++)
		buf[i] = (unsigned char)((uint64_t)w->hl >> (8 * i));
	memcpy(buf + 8, w->hdr, w->hl);
	if (w->len)
		memcpy(buf + 8 + w->hl, w->data, w->len);
	char *p = harness_write(harness_tmpdir(), name, buf, total);
	struct atlas_st *st = atlas_st_open(p);
	if (!st)
		harness_fail(__FILE__, __LINE__, "atlas_st_open: %s", atlas_errmsg());
	free(buf);
	free(p);
	free(w->data);
	memset(w, 0, sizeof(*w));
	return st;
}

/* --- reference packers ----------------------------------------------- */

/* AutoAWQ's pack: nibble k of the word for columns 8p..8p+7 holds column
 * 8p + awq_order[k]. m [rows, cols] -> [rows, cols/8]. */
static const int awq_order[8] = {0, 2, 4, 6, 1, 3, 5, 7};

static uint32_t *pack_awq(const int *m, int64_t rows, int64_t cols)
{
	uint32_t *w = calloc((size_t)(rows * cols / 8), 4);
	for (int64_t r = 0; r < rows; r++)
		for (int64_t p = 0; p < cols / 8; p++)
			for (int k = 0; k < 8; k++)
				w[r * (cols / 8) + p] |=
				    (uint32_t)m[r * cols + 8 * p + awq_order[k]] << (4 * k);
	return w;
}

/* Pack m [rows, cols] of `bits`-bit values along the rows: word [p][c]
 * holds rows p*pack .. p*pack+pack-1, row p*pack+k in bits k*bits
 * (missing rows are zero padding). -> [ceil(rows/pack), cols]. */
static uint32_t *pack_dim0(const int *m, int64_t rows, int64_t cols, int bits)
{
	int pack = 32 / bits;
	int64_t pr = (rows + pack - 1) / pack;
	uint32_t *w = calloc((size_t)(pr * cols), 4);
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < cols; c++)
			w[(r / pack) * cols + c] |= (uint32_t)m[r * cols + c]
						    << (bits * (r % pack));
	return w;
}

/* The same along the columns: -> [rows, ceil(cols/pack)]. */
static uint32_t *pack_dim1(const int *m, int64_t rows, int64_t cols, int bits)
{
	int pack = 32 / bits;
	int64_t pc = (cols + pack - 1) / pack;
	uint32_t *w = calloc((size_t)(rows * pc), 4);
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < cols; c++)
			w[r * pc + c / pack] |= (uint32_t)m[r * cols + c] << (bits * (c % pack));
	return w;
}

static uint16_t *to_f16(const float *s, int64_t n)
{
	uint16_t *h = malloc(sizeof(uint16_t) * (size_t)n);
	for (int64_t i = 0; i < n; i++)
		h[i] = atlas_f32_to_f16(s[i]);
	return h;
}

static uint16_t *to_bf16(const float *s, int64_t n)
{
	uint16_t *h = malloc(sizeof(uint16_t) * (size_t)n);
	for (int64_t i = 0; i < n; i++)
		h[i] = atlas_f32_to_bf16(s[i]);
	return h;
}

/* A scale that F16 and BF16 hold exactly, distinct over small k. */
static float scale_of(int64_t k)
{
	return 0.125f * (float)(1 + k % 13);
}

/* Elements where got != want (exact: every format is exact in FP32);
 * the first is reported. */
static int64_t mismatches(const float *got, const float *want, int64_t out, int64_t in)
{
	int64_t bad = 0;
	for (int64_t o = 0; o < out; o++)
		for (int64_t i = 0; i < in; i++)
			if (got[o * in + i] != want[o * in + i] && !bad++)
				printf("# W[%lld][%lld] = %g, expected %g\n", (long long)o,
				       (long long)i, got[o * in + i], want[o * in + i]);
	return bad;
}

static int64_t differing(const float *a, const float *b, int64_t n)
{
	int64_t d = 0;
	for (int64_t k = 0; k < n; k++)
		d += a[k] != b[k];
	return d;
}

/* --- AWQ ------------------------------------------------------------- */

static struct atlas_quant awq_q(int g)
{
	return (struct atlas_quant){.method = ATLAS_QUANT_AWQ, .bits = 4, .group_size = g};
}

/* One word written out by hand: columns 0..7 holding 0..7 are packed as
 * nibbles 0,2,4,6,1,3,5,7 (low first). */
static void test_awq_nibble_order(void)
{
	uint32_t qw = 0x75316420u, qz = 0;
	float ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
	uint16_t *s = to_f16(ones, 8);
	struct stw w = {0};
	stw_2d(&w, "qweight", "I32", 1, 1, &qw, 4);
	stw_2d(&w, "qzeros", "I32", 1, 1, &qz, 4);
	stw_2d(&w, "scales", "F16", 1, 8, s, 2);
	struct atlas_st *st = stw_open(&w);
	struct atlas_quant q = awq_q(1);
	float W[8];
	CHECK_EQ_INT(atlas_quant_awq(&q, st, P, 8, 1, W), 1);
	for (int o = 0; o < 8; o++)
		CHECK_NEAR(W[o], o, 0);
	/* the reference packer agrees with the hand-written word */
	int row[8] = {0, 1, 2, 3, 4, 5, 6, 7};
	uint32_t *pw = pack_awq(row, 1, 8);
	CHECK_EQ_INT(pw[0], 0x75316420u);
	free(pw);
	free(s);
	atlas_st_close(st);
}

/* out 16, in 8, groups of 4: every column of a word distinct, zeros and
 * scales distinct per group and column. */
static void test_awq_groups(void)
{
	enum { OUT = 16, IN = 8, G = 4, NG = IN / G };
	int qm[IN * OUT], zm[NG * OUT];
	float sf[NG * OUT], want[OUT * IN], got[OUT * IN];
	for (int i = 0; i < IN; i++)
		for (int o = 0; o < OUT; o++)
			qm[i * OUT + o] = (o + 5 * i) % 16;
	for (int r = 0; r < NG; r++)
		for (int o = 0; o < OUT; o++) {
			zm[r * OUT + o] = (3 * o + 5 * r + 1) % 16;
			sf[r * OUT + o] = scale_of(o + 7 * r);
		}
	for (int o = 0; o < OUT; o++)
		for (int i = 0; i < IN; i++)
			want[o * IN + i] = (float)(qm[i * OUT + o] - zm[(i / G) * OUT + o]) *
					   sf[(i / G) * OUT + o];
	uint32_t *qw = pack_awq(qm, IN, OUT), *qz = pack_awq(zm, NG, OUT);
	uint16_t *s = to_f16(sf, NG * OUT);
	struct stw w = {0};
	stw_2d(&w, "qweight", "I32", IN, OUT / 8, qw, 4);
	stw_2d(&w, "qzeros", "I32", NG, OUT / 8, qz, 4);
	stw_2d(&w, "scales", "F16", NG, OUT, s, 2);
	struct atlas_st *st = stw_open(&w);
	struct atlas_quant q = awq_q(G);
	CHECK_EQ_INT(atlas_quant_awq(&q, st, P, OUT, IN, got), 1);
	CHECK_EQ_INT(mismatches(got, want, OUT, IN), 0);
	CHECK_EQ_INT(atlas_quant_int_bytes(&q, st, P), (IN + NG) * (OUT / 8) * 4 + NG * OUT * 2);
	/* the same through config.json's quantization_config and the dispatcher */
	struct atlas_quant qc;
	CHECK_EQ_INT(atlas_quant_parse("{\"quantization_config\":{\"quant_method\":\"awq\","
				       "\"version\":\"gemm\",\"bits\":4,\"group_size\":4,"
				       "\"zero_point\":true}}",
				       NULL, "config.json", &qc),
		     0);
	memset(got, 0, sizeof(got));
	CHECK_EQ_INT(atlas_quant_dequant(&qc, st, P ".weight", OUT, IN, ATLAS_DTYPE_F32, got), 1);
	CHECK_EQ_INT(mismatches(got, want, OUT, IN), 0);
	CHECK_EQ_INT(atlas_quant_stored_bytes(&qc, st, P ".weight"),
		     atlas_quant_int_bytes(&q, st, P));
	CHECK_EQ_INT(atlas_quant_dequant(&qc, st, "model.layers.1.mlp.down_proj.weight", OUT, IN,
					 ATLAS_DTYPE_F32, got),
		     0);
	atlas_quant_free(&qc);
	/* a group size the file was not written with reads other zeros */
	struct atlas_quant q8 = awq_q(IN);
	int rc = atlas_quant_awq(&q8, st, P, OUT, IN, got);
	CHECK(rc < 0);
	CHECK_CONTAINS(atlas_errmsg(), P ".qzeros");
	/* the other formats find nothing of theirs */
	struct atlas_quant ct = {
	    .method = ATLAS_QUANT_CT_INT, .bits = 4, .strategy = ATLAS_QS_CHANNEL, .sym = true};
	CHECK_EQ_INT(atlas_quant_ct_int(&ct, st, P, OUT, IN, got), 0);
	CHECK_EQ_INT(atlas_quant_int_bytes(&ct, st, P), 0);
	free(qw);
	free(qz);
	free(s);
	atlas_st_close(st);
}

static void test_awq_refusals(void)
{
	enum { OUT = 8, IN = 8 };
	uint32_t qw[IN] = {0}, qz[IN] = {0};
	uint16_t s[IN * OUT] = {0};
	float got[OUT * IN];
	struct stw w = {0};
	stw_2d(&w, "qweight", "I32", IN, 1, qw, 4);
	stw_2d(&w, "qzeros", "I32", 2, 1, qz, 4);
	stw_2d(&w, "scales", "F16", 2, OUT, s, 2);
	struct atlas_st *st = stw_open(&w);
	struct atlas_quant q = awq_q(3);
	CHECK(atlas_quant_awq(&q, st, P, OUT, IN, got) < 0);
	CHECK_CONTAINS(atlas_errmsg(), P ".scales");
	CHECK_CONTAINS(atlas_errmsg(), "group size 3");
	q = awq_q(4);
	CHECK_EQ_INT(atlas_quant_awq(&q, st, P, OUT, IN, got), 1);
	CHECK(atlas_quant_awq(&q, st, P, 12, IN, got) < 0); /* out not a multiple of 8 */
	CHECK_CONTAINS(atlas_errmsg(), P ".qweight");
	CHECK(atlas_quant_awq(&q, st, P, OUT, 16, got) < 0); /* qweight [8, 1] for in 16 */
	CHECK_CONTAINS(atlas_errmsg(), P ".qweight");
	atlas_st_close(st);

	/* a float qweight, and scales missing */
	float fw[IN] = {0};
	stw_2d(&w, "qweight", "F32", IN, 1, fw, 4);
	st = stw_open(&w);
	CHECK(atlas_quant_awq(&q, st, P, OUT, IN, got) < 0);
	CHECK_CONTAINS(atlas_errmsg(), P ".qweight");
	atlas_st_close(st);
	stw_2d(&w, "qweight", "I32", IN, 1, qw, 4);
	stw_2d(&w, "qzeros", "I32", 2, 1, qz, 4);
	st = stw_open(&w);
	CHECK(atlas_quant_awq(&q, st, P, OUT, IN, got) < 0);
	CHECK_CONTAINS(atlas_errmsg(), P ".scales");
	atlas_st_close(st);
}

/* --- GPTQ ------------------------------------------------------------ */

struct gptq_case {
	int bits, g;	  /* bits, group size (-1: all of in) */
	int64_t out, in;  /* W [out, in] */
	const int *g_idx; /* [in] or NULL */
	int *qm, *zm;	  /* q [in, out], true zero [groups, out] */
	float *sf;	  /* scales [groups, out] */
	int64_t ng;	  /* groups */
};

/* Tables for a case: q and zeros spread over the whole range. */
static void gptq_fill(struct gptq_case *c)
{
	int max = (1 << c->bits) - 1;
	int64_t g = c->g == -1 ? c->in : c->g;
	c->ng = (c->in + g - 1) / g;
	c->qm = malloc(sizeof(int) * (size_t)(c->in * c->out));
	c->zm = malloc(sizeof(int) * (size_t)(c->ng * c->out));
	c->sf = malloc(sizeof(float) * (size_t)(c->ng * c->out));
	for (int64_t i = 0; i < c->in; i++)
		for (int64_t o = 0; o < c->out; o++)
			c->qm[i * c->out + o] = (int)((i * 7 + o * 3 + i * o) % (max + 1));
	for (int64_t r = 0; r < c->ng; r++)
		for (int64_t o = 0; o < c->out; o++) {
			/* 1..max so that v1's stored zero - 1 fits */
			c->zm[r * c->out + o] = (int)(1 + (r * 5 + o * 11) % max);
			c->sf[r * c->out + o] = scale_of(r * 3 + o);
		}
}

static void gptq_free(struct gptq_case *c)
{
	free(c->qm);
	free(c->zm);
	free(c->sf);
}

/* W from the tables, with zeros shifted by zdelta (what a reader that
 * misses v1's offset would see). */
static void gptq_want(const struct gptq_case *c, int zdelta, float *want)
{
	int64_t g = c->g == -1 ? c->in : c->g;
	for (int64_t o = 0; o < c->out; o++)
		for (int64_t i = 0; i < c->in; i++) {
			int64_t r = c->g_idx ? c->g_idx[i] : i / g;
			want[o * c->in + i] =
			    (float)(c->qm[i * c->out + o] - (c->zm[r * c->out + o] + zdelta)) *
			    c->sf[r * c->out + o];
		}
}

/* The checkpoint: zeros stored - 1 unless v2. */
static struct atlas_st *gptq_write(const struct gptq_case *c, bool v2)
{
	int pack = 32 / c->bits;
	int *zs = calloc((size_t)(c->ng * c->out), sizeof(int));
	for (int64_t k = 0; k < c->ng * c->out; k++)
		zs[k] = c->zm[k] - (v2 ? 0 : 1);
	uint32_t *qw = pack_dim0(c->qm, c->in, c->out, c->bits);
	uint32_t *qz = pack_dim1(zs, c->ng, c->out, c->bits);
	uint16_t *s = to_f16(c->sf, c->ng * c->out);
	struct stw w = {0};
	stw_2d(&w, "qweight", "I32", c->in / pack, c->out, qw, 4);
	stw_2d(&w, "qzeros", "I32", c->ng, c->out / pack, qz, 4);
	stw_2d(&w, "scales", "F16", c->ng, c->out, s, 2);
	if (c->g_idx)
		stw_1d(&w, "g_idx", "I32", c->in, c->g_idx, 4);
	free(zs);
	free(qw);
	free(qz);
	free(s);
	return stw_open(&w);
}

static struct atlas_quant gptq_q(const struct gptq_case *c, bool v2)
{
	return (struct atlas_quant){.method = ATLAS_QUANT_GPTQ,
				    .bits = c->bits,
				    .group_size = c->g,
				    .gptq_v2 = v2,
				    .desc_act = c->g_idx != NULL};
}

/* Dequantize case c written as v1 and as v2 and compare; *seq_out (when
 * given) receives the v1 result. */
static void gptq_check(struct gptq_case *c, float *v1_out)
{
	gptq_fill(c);
	int64_t n = c->out * c->in;
	float *want = malloc(sizeof(float) * (size_t)n), *got = malloc(sizeof(float) * (size_t)n);
	float *off = malloc(sizeof(float) * (size_t)n);
	gptq_want(c, 0, want);
	for (int v2 = 0; v2 <= 1; v2++) {
		struct atlas_st *st = gptq_write(c, v2);
		struct atlas_quant q = gptq_q(c, v2);
		CHECK_EQ_INT(atlas_quant_gptq(&q, st, P, c->out, c->in, got), 1);
		CHECK_EQ_INT(mismatches(got, want, c->out, c->in), 0);
		if (!v2 && v1_out)
			memcpy(v1_out, got, sizeof(float) * (size_t)n);
		/* read with the other version's zero convention: off by one */
		q.gptq_v2 = !v2;
		CHECK_EQ_INT(atlas_quant_gptq(&q, st, P, c->out, c->in, got), 1);
		gptq_want(c, v2 ? 1 : -1, off);
		CHECK_EQ_INT(mismatches(got, off, c->out, c->in), 0);
		CHECK(differing(got, want, n) > 0);
		atlas_st_close(st);
	}
	free(want);
	free(got);
	free(off);
	gptq_free(c);
}

static void test_gptq_4bit(void)
{
	struct gptq_case c = {.bits = 4, .g = 8, .out = 16, .in = 32};
	gptq_check(&c, NULL);
}

static void test_gptq_8bit(void)
{
	struct gptq_case c = {.bits = 8, .g = 4, .out = 8, .in = 16};
	gptq_check(&c, NULL);
}

/* in 24 with groups of 16: the last group holds 8 (AutoGPTQ sizes
 * scales ceil(in / g)); and one group for all of in. */
static void test_gptq_partial_and_whole_row(void)
{
	struct gptq_case c = {.bits = 4, .g = 16, .out = 8, .in = 24};
	gptq_check(&c, NULL);
	struct gptq_case d = {.bits = 4, .g = -1, .out = 8, .in = 24};
	gptq_check(&d, NULL);
}

/* desc_act: input i in group g_idx[i], a permutation of the sequential
 * groups, differs from i / g. */
static void test_gptq_g_idx(void)
{
	enum { OUT = 8, IN = 32, G = 8 };
	int gi[IN];
	for (int i = 0; i < IN; i++)
		gi[i] = (i * 3 + 1) % 4;
	float seq[OUT * IN], perm[OUT * IN];
	struct gptq_case c = {.bits = 4, .g = G, .out = OUT, .in = IN};
	gptq_check(&c, seq);
	struct gptq_case d = {.bits = 4, .g = G, .out = OUT, .in = IN, .g_idx = gi};
	gptq_check(&d, perm);
	CHECK(differing(seq, perm, OUT * IN) > OUT * IN / 2);
	/* the sequential g_idx written out equals no g_idx */
	int gs[IN];
	for (int i = 0; i < IN; i++)
		gs[i] = i / G;
	struct gptq_case e = {.bits = 4, .g = G, .out = OUT, .in = IN, .g_idx = gs};
	gptq_check(&e, perm);
	CHECK_EQ_INT(differing(seq, perm, OUT * IN), 0);
}

static void test_gptq_refusals(void)
{
	enum { OUT = 8, IN = 32, G = 8 };
	int gi[IN];
	for (int i = 0; i < IN; i++)
		gi[i] = i % 4;
	gi[IN - 3] = 4; /* groups are 0..3 */
	struct gptq_case c = {.bits = 4, .g = G, .out = OUT, .in = IN, .g_idx = gi};
	gptq_fill(&c);
	float got[OUT * IN];
	struct atlas_st *st = gptq_write(&c, false);
	struct atlas_quant q = gptq_q(&c, false);
	CHECK(atlas_quant_gptq(&q, st, P, OUT, IN, got) < 0);
	CHECK_CONTAINS(atlas_errmsg(), P ".g_idx");
	CHECK_CONTAINS(atlas_errmsg(), "input 29");
	atlas_st_close(st);
	gi[IN - 3] = -1;
	st = gptq_write(&c, false);
	CHECK(atlas_quant_gptq(&q, st, P, OUT, IN, got) < 0);
	CHECK_CONTAINS(atlas_errmsg(), P ".g_idx");
	atlas_st_close(st);
	gptq_free(&c);

	/* qzeros [4, 2] where [4, 1] belongs; desc_act without g_idx */
	uint32_t qw[IN / 8 * OUT] = {0}, qz[8] = {0};
	uint16_t s[4 * OUT] = {0};
	struct stw w = {0};
	stw_2d(&w, "qweight", "I32", IN / 8, OUT, qw, 4);
	stw_2d(&w, "qzeros", "I32", 4, 2, qz, 4);
	stw_2d(&w, "scales", "F16", 4, OUT, s, 2);
	st = stw_open(&w);
	q = (struct atlas_quant){.method = ATLAS_QUANT_GPTQ, .bits = 4, .group_size = G};
	CHECK(atlas_quant_gptq(&q, st, P, OUT, IN, got) < 0);
	CHECK_CONTAINS(atlas_errmsg(), P ".qzeros");
	atlas_st_close(st);
	stw_2d(&w, "qweight", "I32", IN / 8, OUT, qw, 4);
	stw_2d(&w, "qzeros", "I32", 4, 1, qz, 4);
	stw_2d(&w, "scales", "F16", 4, OUT, s, 2);
	st = stw_open(&w);
	CHECK_EQ_INT(atlas_quant_gptq(&q, st, P, OUT, IN, got), 1);
	CHECK_EQ_INT(atlas_quant_int_bytes(&q, st, P), (IN / 8 * OUT + 4) * 4 + 4 * OUT * 2);
	q.desc_act = true;
	CHECK(atlas_quant_gptq(&q, st, P, OUT, IN, got) < 0);
	CHECK_CONTAINS(atlas_errmsg(), P ".g_idx");
	q.desc_act = false;
	CHECK(atlas_quant_gptq(&q, st, P, OUT, 20, got) < 0); /* in not a multiple of 8 */
	CHECK_CONTAINS(atlas_errmsg(), P ".qweight");
	q.group_size = 16; /* scales would be [2, 8] */
	CHECK(atlas_quant_gptq(&q, st, P, OUT, IN, got) < 0);
	CHECK_CONTAINS(atlas_errmsg(), P ".qzeros");
	atlas_st_close(st);
}

/* --- compressed-tensors pack-quantized ------------------------------- */

struct ct_case {
	int bits, g;		 /* bits, group size (0: channel) */
	bool sym;		 /* no zero points */
	int64_t out, in;	 /* W [out, in] */
	const char *scale_dtype; /* "BF16", "F16" or "F32" */
	const char *shape_dtype; /* weight_shape "I64"/"I32", NULL: none */
	int64_t shape_lie;	 /* added to weight_shape[1] */
};

static struct atlas_st *ct_write(const struct ct_case *c, const int *vm, const int *zm,
				 const float *sf, int64_t ng)
{
	int half = 1 << (c->bits - 1), pack = 32 / c->bits;
	int64_t n = c->out * c->in;
	int *u = malloc(sizeof(int) * (size_t)n), *uz = malloc(sizeof(int) * (size_t)(c->out * ng));
	for (int64_t k = 0; k < n; k++)
		u[k] = vm[k] + half; /* stored unsigned */
	for (int64_t k = 0; k < c->out * ng; k++)
		uz[k] = zm[k] + half;
	uint32_t *wp = pack_dim1(u, c->out, c->in, c->bits);
	uint32_t *wz = pack_dim0(uz, c->out, ng, c->bits);
	struct stw w = {0};
	stw_2d(&w, "weight_packed", "I32", c->out, (c->in + pack - 1) / pack, wp, 4);
	if (!strcmp(c->scale_dtype, "F32")) {
		stw_2d(&w, "weight_scale", "F32", c->out, ng, sf, 4);
	} else {
		bool bf = !strcmp(c->scale_dtype, "BF16");
		uint16_t *h = bf ? to_bf16(sf, c->out * ng) : to_f16(sf, c->out * ng);
		stw_2d(&w, "weight_scale", c->scale_dtype, c->out, ng, h, 2);
		free(h);
	}
	if (!c->sym)
		stw_2d(&w, "weight_zero_point", "I32", (c->out + pack - 1) / pack, ng, wz, 4);
	if (c->shape_dtype && !strcmp(c->shape_dtype, "I64")) {
		int64_t sh[2] = {c->out, c->in + c->shape_lie};
		stw_1d(&w, "weight_shape", "I64", 2, sh, 8);
	} else if (c->shape_dtype) {
		int32_t sh[2] = {(int32_t)c->out, (int32_t)(c->in + c->shape_lie)};
		stw_1d(&w, "weight_shape", "I32", 2, sh, 4);
	}
	free(u);
	free(uz);
	free(wp);
	free(wz);
	return stw_open(&w);
}

static struct atlas_quant ct_q(const struct ct_case *c)
{
	return (struct atlas_quant){.method = ATLAS_QUANT_CT_INT,
				    .bits = c->bits,
				    .group_size = c->g ? c->g : -1,
				    .sym = c->sym,
				    .strategy = c->g ? ATLAS_QS_GROUP : ATLAS_QS_CHANNEL};
}

static void ct_check(const struct ct_case *c)
{
	int half = 1 << (c->bits - 1);
	int64_t g = c->g ? c->g : c->in, ng = c->in / g, n = c->out * c->in;
	int *vm = malloc(sizeof(int) * (size_t)n), *zm = calloc((size_t)(c->out * ng), sizeof(int));
	float *sf = malloc(sizeof(float) * (size_t)(c->out * ng));
	float *want = malloc(sizeof(float) * (size_t)n), *got = malloc(sizeof(float) * (size_t)n);
	for (int64_t o = 0; o < c->out; o++)
		for (int64_t i = 0; i < c->in; i++)
			vm[o * c->in + i] = (int)((o * 5 + i * 3 + o * i) % (2 * half)) - half;
	for (int64_t o = 0; o < c->out; o++)
		for (int64_t r = 0; r < ng; r++) {
			if (!c->sym)
				zm[o * ng + r] = (int)((o * 7 + r * 3) % (2 * half)) - half;
			sf[o * ng + r] = scale_of(o * 2 + r * 5);
		}
	for (int64_t o = 0; o < c->out; o++)
		for (int64_t i = 0; i < c->in; i++)
			want[o * c->in + i] =
			    (float)(vm[o * c->in + i] - zm[o * ng + i / g]) * sf[o * ng + i / g];
	struct atlas_st *st = ct_write(c, vm, zm, sf, ng);
	struct atlas_quant q = ct_q(c);
	CHECK_EQ_INT(atlas_quant_ct_int(&q, st, P, c->out, c->in, got), 1);
	CHECK_EQ_INT(mismatches(got, want, c->out, c->in), 0);
	if (!c->sym) {
		/* read as symmetric, the zeros are lost */
		q.sym = true;
		CHECK_EQ_INT(atlas_quant_ct_int(&q, st, P, c->out, c->in, got), 1);
		CHECK(differing(got, want, n) > 0);
	}
	CHECK(atlas_quant_int_bytes(&q, st, P) > 0);
	atlas_st_close(st);
	free(vm);
	free(zm);
	free(sf);
	free(want);
	free(got);
}

static void test_ct_sym_group(void)
{
	ct_check(&(struct ct_case){.bits = 4,
				   .g = 8,
				   .sym = true,
				   .out = 8,
				   .in = 16,
				   .scale_dtype = "BF16",
				   .shape_dtype = "I64"});
	ct_check(&(struct ct_case){
	    .bits = 8, .g = 4, .sym = true, .out = 4, .in = 16, .scale_dtype = "F16"});
}

/* out 12 and in 12 are not multiples of 8: the last word of a row and of
 * the zero points' column is padding. */
static void test_ct_asym(void)
{
	ct_check(&(struct ct_case){.bits = 4,
				   .g = 0,
				   .sym = false,
				   .out = 12,
				   .in = 12,
				   .scale_dtype = "F32",
				   .shape_dtype = "I64"});
	ct_check(&(struct ct_case){.bits = 4,
				   .g = 4,
				   .sym = false,
				   .out = 16,
				   .in = 16,
				   .scale_dtype = "BF16",
				   .shape_dtype = "I32"});
	ct_check(&(struct ct_case){
	    .bits = 8, .g = 8, .sym = false, .out = 6, .in = 16, .scale_dtype = "BF16"});
}

static void test_ct_refusals(void)
{
	float got[16 * 16];
	int vm[16 * 16] = {0}, zm[16 * 2] = {0};
	float sf[16 * 2] = {0};
	/* weight_shape that says in 17 */
	struct ct_case c = {.bits = 4,
			    .g = 8,
			    .sym = false,
			    .out = 16,
			    .in = 16,
			    .scale_dtype = "BF16",
			    .shape_dtype = "I64",
			    .shape_lie = 1};
	struct atlas_st *st = ct_write(&c, vm, zm, sf, 2);
	struct atlas_quant q = ct_q(&c);
	CHECK(atlas_quant_ct_int(&q, st, P, 16, 16, got) < 0);
	CHECK_CONTAINS(atlas_errmsg(), P ".weight_shape");
	atlas_st_close(st);
	/* group size 6 does not divide 16; weight_scale [16, 2] read as channel */
	c.shape_lie = 0;
	st = ct_write(&c, vm, zm, sf, 2);
	q.group_size = 6;
	CHECK(atlas_quant_ct_int(&q, st, P, 16, 16, got) < 0);
	CHECK_CONTAINS(atlas_errmsg(), P ".weight_scale");
	CHECK_CONTAINS(atlas_errmsg(), "group size 6");
	q = ct_q(&c);
	q.strategy = ATLAS_QS_CHANNEL;
	CHECK(atlas_quant_ct_int(&q, st, P, 16, 16, got) < 0);
	CHECK_CONTAINS(atlas_errmsg(), P ".weight_scale");
	q = ct_q(&c);
	CHECK_EQ_INT(atlas_quant_ct_int(&q, st, P, 16, 16, got), 1);
	atlas_st_close(st);
	/* asymmetric without weight_zero_point */
	c.sym = true;
	st = ct_write(&c, vm, zm, sf, 2);
	CHECK(atlas_quant_ct_int(&q, st, P, 16, 16, got) < 0);
	CHECK_CONTAINS(atlas_errmsg(), P ".weight_zero_point");
	atlas_st_close(st);
}

int main(void)
{
	RUN(test_awq_nibble_order);
	RUN(test_awq_groups);
	RUN(test_awq_refusals);
	RUN(test_gptq_4bit);
	RUN(test_gptq_8bit);
	RUN(test_gptq_partial_and_whole_row);
	RUN(test_gptq_g_idx);
	RUN(test_gptq_refusals);
	RUN(test_ct_sym_group);
	RUN(test_ct_asym);
	RUN(test_ct_refusals);
	return harness_done();
}
