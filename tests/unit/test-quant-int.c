/* test-quant-int.c - the integer formats dequantized at load (quant_int.c):
 * AWQ gemm, GPTQ (v1/v2, desc_act g_idx, 4 and 8 bits, a partial last
 * group) and compressed-tensors pack-quantized (symmetric, asymmetric,
 * channel, padded rows). Each case writes a tiny safetensors file here
 * from integer tables packed by reference packers written from the
 * formats' packing code (not from the dequantizer), and compares W with
 * (q - z) * s computed from the tables. Malformed sets are refused with
 * the tensor's name. One AWQ case also goes through quantization_config
 * and atlas_quant_dequant. The view (atlas_quant_int_view) of every
 * format is checked against the tables it was written from and, as
 * (q - z) * s, against atlas_quant_dequant element for element. */
#include <stdlib.h>

#include "harness.h"
#include "../../lib/backend/backend.h"
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
	const int *g_idx;	 /* weight_g_idx [in], or NULL */
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
	if (c->g_idx)
		stw_1d(&w, "weight_g_idx", "I32", c->in, c->g_idx, 4);
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

/* The signed tables of a case: values vm [out, in], zeros zm [out, ng]
 * (0 when symmetric), scales sf [out, ng]; malloc'd, ct_tables_free. */
struct ct_tables {
	int64_t g, ng;
	int *vm, *zm;
	float *sf;
};

static struct ct_tables ct_tables(const struct ct_case *c)
{
	int half = 1 << (c->bits - 1);
	struct ct_tables t = {.g = c->g ? c->g : c->in};
	int64_t ng = t.ng = c->in / t.g;
	t.vm = malloc(sizeof(int) * (size_t)(c->out * c->in));
	t.zm = calloc((size_t)(c->out * ng), sizeof(int));
	t.sf = malloc(sizeof(float) * (size_t)(c->out * ng));
	for (int64_t o = 0; o < c->out; o++)
		for (int64_t i = 0; i < c->in; i++)
			t.vm[o * c->in + i] = (int)((o * 5 + i * 3 + o * i) % (2 * half)) - half;
	for (int64_t o = 0; o < c->out; o++)
		for (int64_t r = 0; r < ng; r++) {
			if (!c->sym)
				t.zm[o * ng + r] = (int)((o * 7 + r * 3) % (2 * half)) - half;
			t.sf[o * ng + r] = scale_of(o * 2 + r * 5);
		}
	return t;
}

static void ct_tables_free(struct ct_tables *t)
{
	free(t->vm);
	free(t->zm);
	free(t->sf);
}

static void ct_check(const struct ct_case *c)
{
	struct ct_tables t = ct_tables(c);
	int64_t g = t.g, ng = t.ng, n = c->out * c->in;
	const int *vm = t.vm, *zm = t.zm;
	const float *sf = t.sf;
	float *want = malloc(sizeof(float) * (size_t)n), *got = malloc(sizeof(float) * (size_t)n);
	for (int64_t o = 0; o < c->out; o++)
		for (int64_t i = 0; i < c->in; i++) {
			int64_t r = c->g_idx ? c->g_idx[i] : i / g;
			want[o * c->in + i] =
			    (float)(vm[o * c->in + i] - zm[o * ng + r]) * sf[o * ng + r];
		}
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
	ct_tables_free(&t);
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

/* actorder "group": weight_g_idx gives input i its group; an
 * out-of-range entry is refused with the tensor's name */
static void test_ct_g_idx(void)
{
	enum { OUT = 8, IN = 32, G = 8 };
	int gi[IN];
	for (int i = 0; i < IN; i++)
		gi[i] = (i * 3 + 2) % (IN / G);
	struct ct_case c = {.bits = 4,
			    .g = G,
			    .sym = false,
			    .out = OUT,
			    .in = IN,
			    .scale_dtype = "BF16",
			    .g_idx = gi};
	ct_check(&c);
	gi[5] = IN / G;
	struct ct_tables t = ct_tables(&c);
	struct atlas_st *st = ct_write(&c, t.vm, t.zm, t.sf, t.ng);
	struct atlas_quant q = ct_q(&c);
	float got[OUT * IN];
	CHECK(atlas_quant_ct_int(&q, st, P, OUT, IN, got) < 0);
	CHECK_CONTAINS(atlas_errmsg(), P ".weight_g_idx");
	CHECK_CONTAINS(atlas_errmsg(), "input 5");
	atlas_st_close(st);
	ct_tables_free(&t);
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

/* --- the view ------------------------------------------------------- */

/* P.weight of q's checkpoint st through atlas_quant_int_view into *v
 * (the caller frees it), checked: values, zeros and groups in range, and
 * (q - z) * s, computed here from the definition in quant.h, equal to
 * atlas_quant_dequant's W element for element, as is
 * atlas_quant_int_dequant's. */
static void view_check(const struct atlas_quant *q, const struct atlas_st *st, int64_t out,
		       int64_t in, struct atlas_quant_int *v)
{
	int64_t n = out * in;
	float *want = malloc(sizeof(float) * (size_t)n), *got = malloc(sizeof(float) * (size_t)n);
	CHECK_EQ_INT(atlas_quant_dequant(q, st, P ".weight", out, in, ATLAS_DTYPE_F32, want), 1);
	CHECK_EQ_INT(atlas_quant_int_view(q, st, P ".weight", out, in, v), 1);
	if (!v->q) {
		free(want);
		free(got);
		return;
	}
	CHECK_EQ_INT(v->bits, q->bits);
	CHECK(v->g >= 1 && v->g <= in);
	CHECK_EQ_INT(v->ng, (in + v->g - 1) / v->g);
	const int top = 1 << v->bits;
	int64_t bad_q = 0, bad_z = 0, bad_g = 0;
	for (int64_t k = 0; k < n; k++)
		bad_q += v->q[k] >= top;
	for (int64_t k = 0; k < out * v->ng; k++)
		bad_z += v->z[k] < 0 || v->z[k] > top;
	for (int64_t i = 0; v->grp && i < in; i++)
		bad_g += v->grp[i] < 0 || v->grp[i] >= v->ng;
	CHECK_EQ_INT(bad_q, 0);
	CHECK_EQ_INT(bad_z, 0);
	CHECK_EQ_INT(bad_g, 0);
	for (int64_t o = 0; o < out; o++)
		for (int64_t i = 0; i < in; i++) {
			int64_t r = o * v->ng + (v->grp ? v->grp[i] : i / v->g);
			got[o * in + i] = (float)(v->q[o * in + i] - v->z[r]) * v->s[r];
		}
	CHECK_EQ_INT(mismatches(got, want, out, in), 0);
	memset(got, 0, sizeof(float) * (size_t)n);
	atlas_quant_int_dequant(v, out, in, got);
	CHECK_EQ_INT(mismatches(got, want, out, in), 0);
	free(want);
	free(got);
}

/* Entries of the view's arrays that differ from the tables. */
static int64_t view_q_diff(const struct atlas_quant_int *v, const int *m, int64_t out, int64_t in,
			   bool transposed, int add)
{
	int64_t d = 0;
	for (int64_t o = 0; v->q && o < out; o++)
		for (int64_t i = 0; i < in; i++)
			d +=
			    v->q[o * in + i] != (transposed ? m[i * out + o] : m[o * in + i]) + add;
	return d;
}

static int64_t view_zs_diff(const struct atlas_quant_int *v, const int *zm, const float *sf,
			    int64_t out, bool transposed, int add)
{
	int64_t d = 0;
	for (int64_t o = 0; v->z && o < out; o++)
		for (int64_t r = 0; r < v->ng; r++) {
			int64_t k = transposed ? r * out + o : o * v->ng + r;
			d += v->z[o * v->ng + r] != (zm ? zm[k] : 0) + add;
			d += v->s[o * v->ng + r] != sf[k];
		}
	return d;
}

/* AWQ W [out, in] in groups of g (-1: the row): the nibbles in
 * column order, zeros and scales turned to [out, ng]. */
static void awq_view_case(int64_t out, int64_t in, int g)
{
	int64_t gg = g == -1 ? in : g, ng = in / gg;
	int *qm = malloc(sizeof(int) * (size_t)(in * out)),
	    *zm = malloc(sizeof(int) * (size_t)(ng * out));
	float *sf = malloc(sizeof(float) * (size_t)(ng * out));
	for (int64_t i = 0; i < in; i++)
		for (int64_t o = 0; o < out; o++)
			qm[i * out + o] = (int)((o + 5 * i + o * i) % 16);
	for (int64_t r = 0; r < ng; r++)
		for (int64_t o = 0; o < out; o++) {
			zm[r * out + o] = (int)((3 * o + 5 * r + 1) % 16);
			sf[r * out + o] = scale_of(o + 7 * r);
		}
	uint32_t *qw = pack_awq(qm, in, out), *qz = pack_awq(zm, ng, out);
	uint16_t *s = to_f16(sf, ng * out);
	struct stw w = {0};
	stw_2d(&w, "qweight", "I32", in, out / 8, qw, 4);
	stw_2d(&w, "qzeros", "I32", ng, out / 8, qz, 4);
	stw_2d(&w, "scales", "F16", ng, out, s, 2);
	struct atlas_st *st = stw_open(&w);
	struct atlas_quant q = awq_q(g);
	struct atlas_quant_int v;
	view_check(&q, st, out, in, &v);
	CHECK_EQ_INT(v.g, gg);
	CHECK_EQ_INT(v.ng, ng);
	CHECK(v.grp == NULL);
	CHECK_EQ_INT(view_q_diff(&v, qm, out, in, true, 0), 0);
	CHECK_EQ_INT(view_zs_diff(&v, zm, sf, out, true, 0), 0);
	atlas_quant_int_free(&v);
	CHECK(v.q == NULL && v.z == NULL && v.s == NULL && v.bits == 0);
	atlas_st_close(st);
	free(qm);
	free(zm);
	free(sf);
	free(qw);
	free(qz);
	free(s);
}

static void test_view_awq(void)
{
	awq_view_case(16, 32, 8);
	awq_view_case(24, 72, 8); /* in crosses the 64-column unpacking block */
	awq_view_case(8, 16, -1);
}

/* GPTQ case c as v1 or v2 (sym: every zero 2^(bits-1), as symmetric
 * checkpoints store them; zmax: one zero of 2^bits, v1 only): q and the
 * true zeros, grp from a g_idx only when it is not i / g. */
static void gptq_view_case(struct gptq_case *c, bool v2, bool sym, bool zmax)
{
	gptq_fill(c);
	if (sym)
		for (int64_t k = 0; k < c->ng * c->out; k++)
			c->zm[k] = 1 << (c->bits - 1);
	if (zmax)
		c->zm[c->out + 1] = 1 << c->bits; /* stored 2^bits - 1 */
	struct atlas_st *st = gptq_write(c, v2);
	struct atlas_quant q = gptq_q(c, v2);
	q.sym = sym;
	int64_t g = c->g == -1 || c->g > c->in ? c->in : c->g;
	bool seq = true;
	for (int64_t i = 0; c->g_idx && i < c->in; i++)
		seq = seq && c->g_idx[i] == i / g;
	struct atlas_quant_int v;
	view_check(&q, st, c->out, c->in, &v);
	CHECK_EQ_INT(v.g, g);
	CHECK_EQ_INT(v.ng, c->ng);
	CHECK_EQ_INT(view_q_diff(&v, c->qm, c->out, c->in, true, 0), 0);
	CHECK_EQ_INT(view_zs_diff(&v, c->zm, c->sf, c->out, true, 0), 0);
	if (c->g_idx && !seq) {
		CHECK(v.grp != NULL);
		for (int64_t i = 0; v.grp && i < c->in; i++)
			CHECK_EQ_INT(v.grp[i], c->g_idx[i]);
	} else {
		CHECK(v.grp == NULL);
	}
	if (zmax)
		CHECK_EQ_INT(v.z[1 * c->ng + 1], 1 << c->bits);
	atlas_quant_int_free(&v);
	atlas_st_close(st);
	gptq_free(c);
}

static void test_view_gptq(void)
{
	enum { OUT = 16, IN = 32, G = 8 };
	int gi[IN], gs[IN];
	for (int i = 0; i < IN; i++) {
		gi[i] = (i * 3 + 1) % (IN / G);
		gs[i] = i / G;
	}
	struct gptq_case c = {.bits = 4, .g = G, .out = OUT, .in = IN};
	gptq_view_case(&c, false, true, false); /* v1 symmetric */
	gptq_view_case(&c, false, false, true); /* v1 asymmetric, a zero of 16 */
	gptq_view_case(&c, true, false, false); /* v2 */
	c.g_idx = gi;				/* desc_act */
	gptq_view_case(&c, false, false, false);
	gptq_view_case(&c, true, true, false);
	c.g_idx = gs; /* a g_idx that says i / g */
	gptq_view_case(&c, false, false, false);
	struct gptq_case b8 = {.bits = 8, .g = 4, .out = 8, .in = 16};
	gptq_view_case(&b8, false, false, true);
	gptq_view_case(&b8, true, true, false);
	/* a partial last group (in 24, g 16) over 72 rows (the 64-row
	 * unpacking block and a rest), the whole row, a group wider than it */
	struct gptq_case p = {.bits = 4, .g = 16, .out = 72, .in = 24};
	gptq_view_case(&p, false, false, false);
	struct gptq_case r = {.bits = 4, .g = -1, .out = 8, .in = 24};
	gptq_view_case(&r, true, false, false);
	struct gptq_case wide = {.bits = 4, .g = 128, .out = 8, .in = 24};
	gptq_view_case(&wide, false, false, false);
}

/* compressed-tensors case c: q and z as stored (+ 2^(bits-1)), a
 * symmetric weight's zero 2^(bits-1), scales as written. */
static void ct_view_case(const struct ct_case *c)
{
	int half = 1 << (c->bits - 1);
	struct ct_tables t = ct_tables(c);
	struct atlas_st *st = ct_write(c, t.vm, t.zm, t.sf, t.ng);
	struct atlas_quant q = ct_q(c);
	bool seq = true;
	for (int64_t i = 0; c->g_idx && i < c->in; i++)
		seq = seq && c->g_idx[i] == i / t.g;
	struct atlas_quant_int v;
	view_check(&q, st, c->out, c->in, &v);
	CHECK_EQ_INT(v.g, t.g);
	CHECK_EQ_INT(v.ng, t.ng);
	CHECK_EQ_INT(view_q_diff(&v, t.vm, c->out, c->in, false, half), 0);
	CHECK_EQ_INT(view_zs_diff(&v, c->sym ? NULL : t.zm, t.sf, c->out, false, half), 0);
	if (c->g_idx && !seq) {
		CHECK(v.grp != NULL);
		for (int64_t i = 0; v.grp && i < c->in; i++)
			CHECK_EQ_INT(v.grp[i], c->g_idx[i]);
	} else {
		CHECK(v.grp == NULL);
	}
	atlas_quant_int_free(&v);
	atlas_st_close(st);
	ct_tables_free(&t);
}

static void test_view_ct(void)
{
	enum { IN = 32, G = 8 };
	int gi[IN], gs[IN];
	for (int i = 0; i < IN; i++) {
		gi[i] = (i * 3 + 2) % (IN / G);
		gs[i] = i / G;
	}
	/* int4 symmetric and asymmetric groups, F16/BF16/F32 scales */
	ct_view_case(&(struct ct_case){
	    .bits = 4, .g = 8, .sym = true, .out = 8, .in = 16, .scale_dtype = "BF16"});
	ct_view_case(&(struct ct_case){.bits = 4,
				       .g = 4,
				       .sym = false,
				       .out = 16,
				       .in = 16,
				       .scale_dtype = "F16",
				       .shape_dtype = "I32"});
	/* channel: one group, g = in; rows and zero columns padded */
	ct_view_case(&(struct ct_case){.bits = 4,
				       .g = 0,
				       .sym = false,
				       .out = 12,
				       .in = 12,
				       .scale_dtype = "F32",
				       .shape_dtype = "I64"});
	ct_view_case(&(struct ct_case){
	    .bits = 4, .g = 0, .sym = true, .out = 8, .in = 20, .scale_dtype = "BF16"});
	/* int8 */
	ct_view_case(&(struct ct_case){
	    .bits = 8, .g = 4, .sym = true, .out = 4, .in = 16, .scale_dtype = "F16"});
	ct_view_case(&(struct ct_case){
	    .bits = 8, .g = 8, .sym = false, .out = 6, .in = 16, .scale_dtype = "BF16"});
	/* weight_g_idx: a permutation, and one that says i / g */
	ct_view_case(&(struct ct_case){.bits = 4,
				       .g = G,
				       .sym = false,
				       .out = 8,
				       .in = IN,
				       .scale_dtype = "BF16",
				       .g_idx = gi});
	ct_view_case(&(struct ct_case){.bits = 4,
				       .g = G,
				       .sym = true,
				       .out = 8,
				       .in = IN,
				       .scale_dtype = "BF16",
				       .g_idx = gs});
}

/* 0 for what is not stored as integers (a plain tensor, an ignored
 * module, another method, a name that is no weight), and an error
 * naming the weight and the tensor; *v zeroed each time. */
static void test_view_none(void)
{
	enum { OUT = 8, IN = 8 };
	float plain[OUT * IN] = {0};
	struct stw w = {0};
	stw_2d(&w, "weight", "F32", OUT, IN, plain, 4);
	struct atlas_st *st = stw_open(&w);
	struct atlas_quant_int v;
	struct atlas_quant q = awq_q(4);
	const struct atlas_quant_int zero = {0};
	memset(&v, 0x5a, sizeof(v));
	CHECK_EQ_INT(atlas_quant_int_view(&q, st, P ".weight", OUT, IN, &v), 0);
	CHECK(!memcmp(&v, &zero, sizeof(v)));
	struct gptq_case gc = {.bits = 4, .g = 4, .out = OUT, .in = IN};
	q = gptq_q(&gc, false);
	CHECK_EQ_INT(atlas_quant_int_view(&q, st, P ".weight", OUT, IN, &v), 0);
	struct ct_case cc = {.bits = 4, .g = 4, .sym = true, .out = OUT, .in = IN};
	q = ct_q(&cc);
	CHECK_EQ_INT(atlas_quant_int_view(&q, st, P ".weight", OUT, IN, &v), 0);
	atlas_quant_int_free(&v);
	atlas_st_close(st);

	/* an AWQ module: ignored by name, read as another method, or not
	 * named as a weight; then read with the wrong group size */
	uint32_t qw[IN] = {0}, qz[2] = {0};
	uint16_t s[2 * OUT] = {0};
	stw_2d(&w, "qweight", "I32", IN, OUT / 8, qw, 4);
	stw_2d(&w, "qzeros", "I32", 2, OUT / 8, qz, 4);
	stw_2d(&w, "scales", "F16", 2, OUT, s, 2);
	st = stw_open(&w);
	struct atlas_quant qi;
	CHECK_EQ_INT(atlas_quant_parse("{\"quantization_config\":{\"quant_method\":\"awq\","
				       "\"version\":\"gemm\",\"bits\":4,\"group_size\":4,"
				       "\"modules_to_not_convert\":[\"down_proj\"]}}",
				       NULL, "config.json", &qi),
		     0);
	memset(&v, 0x5a, sizeof(v));
	CHECK_EQ_INT(atlas_quant_int_view(&qi, st, P ".weight", OUT, IN, &v), 0);
	CHECK(!memcmp(&v, &zero, sizeof(v)));
	atlas_quant_free(&qi);
	q = (struct atlas_quant){.method = ATLAS_QUANT_FP8, .bits = 8};
	CHECK_EQ_INT(atlas_quant_int_view(&q, st, P ".weight", OUT, IN, &v), 0);
	q = (struct atlas_quant){0};
	CHECK_EQ_INT(atlas_quant_int_view(&q, st, P ".weight", OUT, IN, &v), 0);
	q = awq_q(4);
	CHECK_EQ_INT(atlas_quant_int_view(&q, st, P ".qweight", OUT, IN, &v), 0);
	CHECK_EQ_INT(atlas_quant_int_view(&q, st, P ".weight", OUT, IN, &v), 1);
	CHECK(v.q != NULL && v.bits == 4 && v.g == 4 && v.ng == 2);
	atlas_quant_int_free(&v);
	q = awq_q(8);
	memset(&v, 0x5a, sizeof(v));
	CHECK(atlas_quant_int_view(&q, st, P ".weight", OUT, IN, &v) < 0);
	CHECK_CONTAINS(atlas_errmsg(), "cannot load '" P ".weight'");
	CHECK_CONTAINS(atlas_errmsg(), P ".qzeros");
	CHECK(!memcmp(&v, &zero, sizeof(v)));
	atlas_quant_int_free(&v);
	CHECK(atlas_quant_int_view(&q, st, P ".weight", OUT, 0, &v) < 0);
	CHECK_CONTAINS(atlas_errmsg(), "out of range");
	atlas_st_close(st);
}

/* The W4B blob (backend.h): nibble order (low nibble the even column),
 * one zero point and BF16 scale per row and group, W = bf16(f32(q - z) *
 * s),
 * a partial last group; the layouts atlas_w4b_init refuses. */
static void test_w4b_blob(void)
{
	const int64_t N = 3, K = 96, g = 64, ng = 2;
	const int64_t bytes = atlas_w4b_bytes(N, K, g);
	CHECK_EQ_INT(bytes, ATLAS_W4B_HEAD + 256 + 256 + N * ng * 2);
	char *blob = calloc(1, (size_t)bytes);
	CHECK_EQ_INT(atlas_w4b_init(blob, N, K, g), 0);
	uint8_t *q = (uint8_t *)blob + ATLAS_W4B_HEAD;
	uint8_t *z = (uint8_t *)blob + atlas_w4b_z_off(N, K);
	uint16_t *sc = (uint16_t *)(blob + atlas_w4b_s_off(N, K, g));
	for (int64_t i = 0; i < N * K / 2; i++)
		q[i] = (uint8_t)(i * 37 + 11);
	for (int64_t i = 0; i < N * ng; i++) {
		z[i] = (uint8_t)(i == 5 ? 128 : 3 + i);
		sc[i] = atlas_f32_to_bf16(0.1f * (float)(i + 1));
	}
	uint16_t row[96];
	int64_t bad = 0;
	for (int64_t n = 0; n < N; n++) {
		atlas_w4b_row_bf16(blob, n, row);
		for (int64_t k = 0; k < K; k++) {
			const uint8_t b = q[(n * K + k) / 2];
			const int v = k % 2 ? b >> 4 : b & 15;
			const int64_t gi = n * ng + k / g;
			bad += row[k] != atlas_f32_to_bf16((float)(v - z[gi]) * atlas_bf16_to_f32(sc[gi]));
		}
	}
	CHECK_EQ_INT(bad, 0);
	atlas_w4b_row_bf16(blob, 2, row); /* z 128 in the last row's second group */
	CHECK(atlas_bf16_to_f32(row[95]) < -60.0f);
	/* groups: multiples of 32 columns, or the row; rows of 32k columns */
	CHECK_EQ_INT(atlas_w4b_init(blob, N, K, 32), 0);
	CHECK_EQ_INT(atlas_w4b_init(blob, N, K, 1000), 0);
	CHECK_EQ_INT(atlas_w4b_init(blob, N, K, 96), 0);
	CHECK(atlas_w4b_init(blob, N, K, 16) < 0);
	CHECK(atlas_w4b_init(blob, N, K, 48) < 0);
	CHECK(atlas_w4b_init(blob, N, 80, 32) < 0);
	CHECK(atlas_w4b_init(blob, 0, K, 32) < 0);
	free(blob);
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
	RUN(test_ct_g_idx);
	RUN(test_ct_refusals);
	RUN(test_view_awq);
	RUN(test_view_gptq);
	RUN(test_view_ct);
	RUN(test_view_none);
	RUN(test_w4b_blob);
	return harness_done();
}
