/* quant.c - which quantization a checkpoint uses (config.json's
 * quantization_config, or ModelOpt's hf_quant_config.json), the
 * modules it leaves alone, and the dispatch of a weight to its format's
 * dequantizer or view (quant_fp.c, quant_int.c). See quant.h for the
 * formats. */
#include "quant.h"

#include <json-c/json.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "../core/error.h"
#include "file.h"
#include "quant_internal.h"

void atlas_quant_free(struct atlas_quant *q)
{
	for (int i = 0; i < q->n_ignore; i++) {
		free(q->ignore[i]);
		if (q->re[i])
			regfree(q->re[i]);
		free(q->re[i]);
	}
	memset(q, 0, sizeof(*q));
}

static json_object *field(json_object *o, const char *k)
{
	json_object *v = NULL;
	return o && json_object_is_type(o, json_type_object) && json_object_object_get_ex(o, k, &v)
		   ? v
		   : NULL;
}

static const char *str_field(json_object *o, const char *k)
{
	json_object *v = field(o, k);
	return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

/* An integer field: *out, 1; absent or null: 0; another type: error. */
static int int_field(json_object *o, const char *k, const char *where, int *out)
{
	json_object *v = field(o, k);
	if (!v || json_object_is_type(v, json_type_null))
		return 0;
	if (!json_object_is_type(v, json_type_int))
		return atlas_error(ATLAS_EFORMAT, "%s: quantization field '%s' must be an integer",
				   where, k);
	int64_t x = json_object_get_int64(v);
	if (x < -1 || x > 1 << 20)
		return atlas_error(ATLAS_EFORMAT, "%s: quantization field '%s' is out of range (%lld)",
				   where, k, (long long)x);
	*out = (int)x;
	return 1;
}

static bool bool_field(json_object *o, const char *k, bool dflt)
{
	json_object *v = field(o, k);
	return v && json_object_is_type(v, json_type_boolean) ? json_object_get_boolean(v) : dflt;
}

/* The module names of a list field (strings only) into q->ignore. */
static int add_ignores(struct atlas_quant *q, json_object *list, const char *where, const char *k)
{
	if (!list || json_object_is_type(list, json_type_null))
		return 0;
	if (!json_object_is_type(list, json_type_array))
		return atlas_error(ATLAS_EFORMAT, "%s: quantization field '%s' must be a list", where, k);
	for (size_t i = 0; i < json_object_array_length(list); i++) {
		json_object *s = json_object_array_get_idx(list, i);
		if (!json_object_is_type(s, json_type_string))
			return atlas_error(ATLAS_EFORMAT, "%s: '%s' holds a non-string", where, k);
		if (q->n_ignore == ATLAS_QUANT_MAX_IGNORE)
			return atlas_error(ATLAS_EUNSUPPORTED, "%s: '%s' lists more than %d modules",
					   where, k, ATLAS_QUANT_MAX_IGNORE);
		const char *p = json_object_get_string(s);
		if (!(q->ignore[q->n_ignore] = strdup(p)))
			return atlas_error(ATLAS_ENOMEM, "out of memory");
		q->n_ignore++;
		if (strncmp(p, "re:", 3))
			continue;
		/* "re:" entries match the whole module name: compiled once here */
		char *anch;
		regex_t *re = malloc(sizeof(*re));
		if (!re || asprintf(&anch, "^(%s)$", p + 3) < 0) {
			free(re);
			return atlas_error(ATLAS_ENOMEM, "out of memory");
		}
		int bad = regcomp(re, anch, REG_EXTENDED | REG_NOSUB);
		free(anch);
		if (bad) {
			free(re);
			return atlas_error(ATLAS_EFORMAT, "%s: '%s' holds a bad regular expression '%s'",
					   where, k, p + 3);
		}
		q->re[q->n_ignore - 1] = re;
	}
	return 0;
}

static int parse_fp8(struct atlas_quant *q, json_object *qc, const char *where)
{
	json_object *b = field(qc, "weight_block_size");
	const char *fmt = str_field(qc, "fmt");
	if (fmt && strcmp(fmt, "e4m3") != 0)
		return atlas_error(ATLAS_EUNSUPPORTED, "%s: fp8 format '%s' is not supported (e4m3 is)",
				   where, fmt);
	q->method = ATLAS_QUANT_FP8;
	q->bits = 8;
	if (b && !json_object_is_type(b, json_type_null)) {
		if (!json_object_is_type(b, json_type_array) || json_object_array_length(b) != 2)
			return atlas_error(ATLAS_EFORMAT, "%s: weight_block_size must be [rows, columns]",
					   where);
		for (int i = 0; i < 2; i++) {
			json_object *v = json_object_array_get_idx(b, (size_t)i);
			int64_t x = json_object_is_type(v, json_type_int) ? json_object_get_int64(v) : 0;
			if (x < 1 || x > 1 << 16)
				return atlas_error(ATLAS_EFORMAT,
						   "%s: weight_block_size entries must be 1..65536", where);
			q->block[i] = (int)x;
		}
		snprintf(q->name, sizeof(q->name), "fp8 block %dx%d", q->block[0], q->block[1]);
	} else {
		snprintf(q->name, sizeof(q->name), "fp8 per-tensor");
	}
	return add_ignores(q, field(qc, "modules_to_not_convert"), where, "modules_to_not_convert");
}

static int parse_awq(struct atlas_quant *q, json_object *qc, const char *where)
{
	const char *ver = str_field(qc, "version");
	int rc;
	q->method = ATLAS_QUANT_AWQ;
	q->bits = 4;
	q->group_size = 128;
	if ((rc = int_field(qc, "bits", where, &q->bits)) < 0 ||
	    (rc = int_field(qc, "w_bit", where, &q->bits)) < 0 ||
	    (rc = int_field(qc, "group_size", where, &q->group_size)) < 0 ||
	    (rc = int_field(qc, "q_group_size", where, &q->group_size)) < 0)
		return rc;
	if (ver && strcasecmp(ver, "gemm") != 0)
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "%s: AWQ version '%s' is not supported (the 'gemm' layout is)", where,
				   ver);
	if (q->bits != 4)
		return atlas_error(ATLAS_EUNSUPPORTED, "%s: AWQ with %d bits is not supported (4 is)",
				   where, q->bits);
	if (!bool_field(qc, "zero_point", true))
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "%s: AWQ without zero points is not supported", where);
	if (q->group_size < 1)
		return atlas_error(ATLAS_EUNSUPPORTED, "%s: AWQ group_size %d is not supported", where,
				   q->group_size);
	snprintf(q->name, sizeof(q->name), "awq w4 g%d", q->group_size);
	return add_ignores(q, field(qc, "modules_to_not_convert"), where, "modules_to_not_convert");
}

static int parse_gptq(struct atlas_quant *q, json_object *qc, const char *where)
{
	const char *cf = str_field(qc, "checkpoint_format");
	int rc;
	q->method = ATLAS_QUANT_GPTQ;
	q->bits = 4;
	q->group_size = 128;
	if ((rc = int_field(qc, "bits", where, &q->bits)) < 0 ||
	    (rc = int_field(qc, "group_size", where, &q->group_size)) < 0)
		return rc;
	if (q->bits != 4 && q->bits != 8)
		return atlas_error(ATLAS_EUNSUPPORTED, "%s: GPTQ with %d bits is not supported (4, 8 are)",
				   where, q->bits);
	if (q->group_size == 0 || q->group_size < -1)
		return atlas_error(ATLAS_EFORMAT, "%s: GPTQ group_size %d", where, q->group_size);
	q->desc_act = bool_field(qc, "desc_act", false);
	q->sym = bool_field(qc, "sym", true);
	if (cf && strcmp(cf, "gptq") != 0 && strcmp(cf, "gptq_v2") != 0)
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "%s: GPTQ checkpoint_format '%s' is not supported (gptq, gptq_v2 are)",
				   where, cf);
	q->gptq_v2 = cf && strcmp(cf, "gptq_v2") == 0;
	snprintf(q->name, sizeof(q->name), "gptq w%d g%d%s", q->bits, q->group_size,
		 q->desc_act ? " act-order" : "");
	return add_ignores(q, field(qc, "modules_to_not_convert"), where, "modules_to_not_convert");
}

/* compressed-tensors: one weight scheme for every quantized module. */
static int parse_ct(struct atlas_quant *q, json_object *qc, const char *where)
{
	const char *format = str_field(qc, "format");
	json_object *groups = field(qc, "config_groups"), *w = NULL;
	if (!format)
		return atlas_error(ATLAS_EFORMAT, "%s: compressed-tensors config without 'format'",
				   where);
	if (!groups || !json_object_is_type(groups, json_type_object))
		return atlas_error(ATLAS_EFORMAT, "%s: compressed-tensors config without config_groups",
				   where);
	json_object_object_foreach(groups, gname, g)
	{
		json_object *gw = field(g, "weights");
		if (!gw || json_object_is_type(gw, json_type_null))
			continue;
		if (w && strcmp(json_object_to_json_string(w), json_object_to_json_string(gw)) != 0)
			return atlas_error(ATLAS_EUNSUPPORTED,
					   "%s: config group '%s' quantizes weights differently from "
					   "another group; one scheme per model is supported",
					   where, gname);
		w = gw;
	}
	if (!w)
		return atlas_error(ATLAS_EFORMAT, "%s: no config group quantizes weights", where);
	const char *type = str_field(w, "type"), *strategy = str_field(w, "strategy");
	int bits = 0, rc;
	if ((rc = int_field(w, "num_bits", where, &bits)) < 0)
		return rc;
	q->bits = bits;
	q->sym = bool_field(w, "symmetric", true);
	if ((rc = int_field(w, "group_size", where, &q->group_size)) < 0)
		return rc;
	if (!strategy || !strcmp(strategy, "tensor"))
		q->strategy = ATLAS_QS_TENSOR;
	else if (!strcmp(strategy, "channel"))
		q->strategy = ATLAS_QS_CHANNEL;
	else if (!strcmp(strategy, "group") || !strcmp(strategy, "tensor_group"))
		q->strategy = ATLAS_QS_GROUP;
	else if (!strcmp(strategy, "block"))
		q->strategy = ATLAS_QS_BLOCK;
	else
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "%s: compressed-tensors weight strategy '%s' is not supported", where,
				   strategy);
	if (q->strategy == ATLAS_QS_BLOCK) {
		json_object *bs = field(w, "block_structure");
		if (!bs || !json_object_is_type(bs, json_type_array) ||
		    json_object_array_length(bs) != 2)
			return atlas_error(ATLAS_EFORMAT, "%s: block strategy without block_structure",
					   where);
		for (int i = 0; i < 2; i++) {
			int64_t x = json_object_get_int64(json_object_array_get_idx(bs, (size_t)i));
			if (x < 1 || x > 1 << 16)
				return atlas_error(ATLAS_EFORMAT, "%s: block_structure out of range", where);
			q->block[i] = (int)x;
		}
	}
	if (q->strategy == ATLAS_QS_GROUP && q->group_size < 1)
		return atlas_error(ATLAS_EFORMAT, "%s: group strategy without a group_size", where);
	bool is_float = type && !strcmp(type, "float"), is_int = type && !strcmp(type, "int");
	if ((!strcmp(format, "float-quantized") || !strcmp(format, "naive-quantized")) && is_float &&
	    bits == 8 && q->strategy != ATLAS_QS_GROUP) {
		q->method = ATLAS_QUANT_CT_FP8;
		snprintf(q->name, sizeof(q->name), "compressed-tensors fp8 %s",
			 strategy ? strategy : "tensor");
	} else if (!strcmp(format, "pack-quantized") && is_int && (bits == 4 || bits == 8) &&
		   (q->strategy == ATLAS_QS_GROUP || q->strategy == ATLAS_QS_CHANNEL)) {
		q->method = ATLAS_QUANT_CT_INT;
		if (q->strategy == ATLAS_QS_GROUP)
			snprintf(q->name, sizeof(q->name), "compressed-tensors w%da16 g%d%s", bits,
				 q->group_size, q->sym ? "" : " asym");
		else
			snprintf(q->name, sizeof(q->name), "compressed-tensors w%da16 channel%s", bits,
				 q->sym ? "" : " asym");
	} else if (!strcmp(format, "nvfp4-pack-quantized") && is_float && bits == 4) {
		q->method = ATLAS_QUANT_CT_NVFP4;
		q->group_size = 16;
		snprintf(q->name, sizeof(q->name), "compressed-tensors nvfp4");
	} else {
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "%s: compressed-tensors format '%s' with %d-bit %s weights (strategy "
				   "%s) is not supported (float-quantized fp8, pack-quantized int4/int8, "
				   "nvfp4-pack-quantized are)",
				   where, format, bits, type ? type : "?", strategy ? strategy : "?");
	}
	return add_ignores(q, field(qc, "ignore"), where, "ignore");
}

/* ModelOpt: quant_algo NVFP4 (or FP8: per-tensor F8 weights with a
 * scalar weight_scale, compressed-tensors' tensor strategy). */
static int parse_modelopt(struct atlas_quant *q, json_object *qc, const char *where)
{
	const char *algo = str_field(qc, "quant_algo");
	if (!algo)
		return atlas_error(ATLAS_EFORMAT, "%s: ModelOpt config without quant_algo", where);
	if (!strcmp(algo, "NVFP4")) {
		int g = 16, rc;
		if ((rc = int_field(qc, "group_size", where, &g)) < 0)
			return rc;
		if (g != 16)
			return atlas_error(ATLAS_EUNSUPPORTED, "%s: NVFP4 group_size %d (16 is)", where,
					   g);
		q->method = ATLAS_QUANT_NVFP4;
		q->bits = 4;
		q->group_size = 16;
		snprintf(q->name, sizeof(q->name), "modelopt nvfp4");
	} else if (!strcmp(algo, "FP8")) {
		q->method = ATLAS_QUANT_CT_FP8;
		q->bits = 8;
		q->strategy = ATLAS_QS_TENSOR;
		snprintf(q->name, sizeof(q->name), "modelopt fp8 per-tensor");
	} else {
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "%s: ModelOpt quant_algo '%s' is not supported (NVFP4, FP8 are)", where,
				   algo);
	}
	return add_ignores(q, field(qc, "exclude_modules"), where, "exclude_modules");
}

int atlas_quant_parse(const char *config_json, const char *hf_quant_json, const char *where,
		      struct atlas_quant *q)
{
	memset(q, 0, sizeof(*q));
	json_object *root = config_json ? json_tokener_parse(config_json) : NULL, *hq = NULL;
	json_object *qc = field(root, "quantization_config");
	int rc = 0;
	if (hf_quant_json) {
		hq = json_tokener_parse(hf_quant_json);
		if (!hq) {
			json_object_put(root);
			return atlas_error(ATLAS_EFORMAT, "hf_quant_config.json in %s is not JSON", where);
		}
	}
	if (qc && !json_object_is_type(qc, json_type_null)) {
		const char *m = str_field(qc, "quant_method");
		if (!json_object_is_type(qc, json_type_object) || !m)
			rc = atlas_error(ATLAS_EFORMAT, "%s: quantization_config without quant_method",
					 where);
		else if (!strcmp(m, "fp8"))
			rc = parse_fp8(q, qc, where);
		else if (!strcmp(m, "awq"))
			rc = parse_awq(q, qc, where);
		else if (!strcmp(m, "gptq"))
			rc = parse_gptq(q, qc, where);
		else if (!strcmp(m, "compressed-tensors"))
			rc = parse_ct(q, qc, where);
		else if (!strcmp(m, "modelopt"))
			rc = parse_modelopt(q, qc, where);
		else
			rc = atlas_error(ATLAS_EUNSUPPORTED,
					 "%s: quantization method '%s' is not supported (supported: fp8, "
					 "awq, gptq, compressed-tensors, modelopt)",
					 where, m);
	} else if (hq) {
		json_object *qq = field(hq, "quantization");
		if (!qq)
			rc = atlas_error(ATLAS_EFORMAT, "hf_quant_config.json in %s has no 'quantization'",
					 where);
		else
			rc = parse_modelopt(q, qq, where);
	}
	json_object_put(root);
	json_object_put(hq);
	if (rc)
		atlas_quant_free(q);
	return rc;
}

int atlas_quant_load(const char *dir, struct atlas_quant *q)
{
	char *cpath = atlas_path_join(dir, "config.json"), *hpath = atlas_path_join(dir,
										 "hf_quant_config.json");
	char *ctext = NULL, *htext = NULL, *where = NULL;
	size_t len;
	int rc = 0;
	memset(q, 0, sizeof(*q));
	if (!cpath || !hpath) {
		rc = atlas_error(ATLAS_ENOMEM, "out of memory");
		goto out;
	}
	if ((rc = atlas_file_read(cpath, &ctext, &len)))
		goto out;
	if (access(hpath, F_OK) == 0 && (rc = atlas_file_read(hpath, &htext, &len)))
		goto out;
	if (asprintf(&where, "'%s'", dir) < 0) {
		where = NULL;
		rc = atlas_error(ATLAS_ENOMEM, "out of memory");
		goto out;
	}
	rc = atlas_quant_parse(ctext, htext, where, q);
out:
	free(cpath);
	free(hpath);
	free(ctext);
	free(htext);
	free(where);
	return rc;
}

bool atlas_quant_ignored(const struct atlas_quant *q, const char *module)
{
	/* AWQ, GPTQ and fp8 list name pieces ("gate", "lm_head"), matched
	 * anywhere in the module's name; compressed-tensors and ModelOpt
	 * list whole names or "re:" expressions (ModelOpt's may end in *) */
	const bool pieces = q->method == ATLAS_QUANT_AWQ || q->method == ATLAS_QUANT_GPTQ ||
			    q->method == ATLAS_QUANT_FP8;
	for (int i = 0; i < q->n_ignore; i++) {
		const char *p = q->ignore[i];
		if (q->re[i]) {
			if (regexec(q->re[i], module, 0, NULL, 0) == 0)
				return true;
			continue;
		}
		size_t n = strlen(p);
		if (pieces ? strstr(module, p) != NULL
			   : (!strcmp(module, p) ||
			      (n > 0 && p[n - 1] == '*' && !strncmp(module, p, n - 1))))
			return true;
	}
	return false;
}

/* The module of a weight name: "X.weight" -> "X" in buf; false when the
 * name does not end in ".weight". */
static bool module_of(const char *name, char *buf, size_t n)
{
	size_t len = strlen(name);
	if (len < 8 || strcmp(name + len - 7, ".weight") != 0 || len - 7 >= n)
		return false;
	memcpy(buf, name, len - 7);
	buf[len - 7] = 0;
	return true;
}

/* The module of weight `name` into prefix when the checkpoint stores it
 * quantized in principle (1), 0 when not, or an error for a shape out
 * of range. */
static int quant_module(const struct atlas_quant *q, const char *name, int64_t out, int64_t in,
			char *prefix, size_t n)
{
	if (q->method == ATLAS_QUANT_NONE || !module_of(name, prefix, n) ||
	    atlas_quant_ignored(q, prefix))
		return 0;
	if (out < 1 || in < 1 || out > (int64_t)1 << 31 || in > (int64_t)1 << 31)
		return atlas_error(ATLAS_EFORMAT, "weight '%s': shape [%lld, %lld] out of range", name,
				   (long long)out, (long long)in);
	return 1;
}

int atlas_quant_f8_view(const struct atlas_quant *q, const struct atlas_st *st, const char *name,
			int64_t out, int64_t in, struct atlas_quant_f8 *v)
{
	char prefix[512];
	int rc = quant_module(q, name, out, in, prefix, sizeof(prefix));
	if (rc <= 0)
		return rc;
	if (q->method == ATLAS_QUANT_FP8)
		rc = atlas_quant_fp8(q, st, prefix, out, in, v);
	else if (q->method == ATLAS_QUANT_CT_FP8)
		rc = atlas_quant_ct_fp8(q, st, prefix, out, in, v);
	else
		return 0;
	if (rc < 0)
		atlas_error_wrap(rc, "cannot load '%s' (%s)", name, q->name);
	return rc;
}

int atlas_quant_fp4_view(const struct atlas_quant *q, const struct atlas_st *st, const char *name,
			 int64_t out, int64_t in, struct atlas_quant_fp4 *v)
{
	char prefix[512];
	int rc = quant_module(q, name, out, in, prefix, sizeof(prefix));
	if (rc <= 0)
		return rc;
	if (q->method != ATLAS_QUANT_NVFP4 && q->method != ATLAS_QUANT_CT_NVFP4)
		return 0;
	rc = atlas_quant_nvfp4(q, st, prefix, out, in, v);
	if (rc < 0)
		atlas_error_wrap(rc, "cannot load '%s' (%s)", name, q->name);
	return rc;
}

int atlas_quant_int_view(const struct atlas_quant *q, const struct atlas_st *st, const char *name,
			 int64_t out, int64_t in, struct atlas_quant_int *v)
{
	char prefix[512];
	memset(v, 0, sizeof(*v));
	int rc = quant_module(q, name, out, in, prefix, sizeof(prefix));
	if (rc <= 0)
		return rc;
	if (q->method == ATLAS_QUANT_AWQ)
		rc = atlas_quant_awq_view(q, st, prefix, out, in, v);
	else if (q->method == ATLAS_QUANT_GPTQ)
		rc = atlas_quant_gptq_view(q, st, prefix, out, in, v);
	else if (q->method == ATLAS_QUANT_CT_INT)
		rc = atlas_quant_ct_int_view(q, st, prefix, out, in, v);
	else
		return 0;
	if (rc < 0)
		atlas_error_wrap(rc, "cannot load '%s' (%s)", name, q->name);
	return rc;
}

int atlas_quant_dequant(const struct atlas_quant *q, const struct atlas_st *st, const char *name,
			int64_t out, int64_t in, enum atlas_dtype dt, void *dst)
{
	char prefix[512];
	int rc = quant_module(q, name, out, in, prefix, sizeof(prefix));
	if (rc <= 0)
		return rc;
	if (dt != ATLAS_DTYPE_F32 && dt != ATLAS_DTYPE_BF16)
		return atlas_error(ATLAS_EINVAL, "dequantize '%s': to F32 or BF16 only", name);
	float *f = dt == ATLAS_DTYPE_F32 ? dst : malloc((size_t)(out * in) * sizeof(float));
	if (!f)
		return atlas_error(ATLAS_ENOMEM, "out of memory dequantizing '%s'", name);
	struct atlas_quant_f8 v;
	switch (q->method) {
	case ATLAS_QUANT_FP8:
	case ATLAS_QUANT_CT_FP8:
		rc = q->method == ATLAS_QUANT_FP8 ? atlas_quant_fp8(q, st, prefix, out, in, &v)
						  : atlas_quant_ct_fp8(q, st, prefix, out, in, &v);
		if (rc == 1)
			atlas_quant_f8_dequant(&v, out, in, f);
		break;
	case ATLAS_QUANT_NVFP4:
	case ATLAS_QUANT_CT_NVFP4: {
		struct atlas_quant_fp4 v4;
		rc = atlas_quant_nvfp4(q, st, prefix, out, in, &v4);
		if (rc == 1)
			atlas_quant_fp4_dequant(&v4, out, in, f);
		break;
	}
	case ATLAS_QUANT_AWQ:
		rc = atlas_quant_awq(q, st, prefix, out, in, f);
		break;
	case ATLAS_QUANT_GPTQ:
		rc = atlas_quant_gptq(q, st, prefix, out, in, f);
		break;
	case ATLAS_QUANT_CT_INT:
		rc = atlas_quant_ct_int(q, st, prefix, out, in, f);
		break;
	default:
		rc = 0;
	}
	if (rc == 1 && dt == ATLAS_DTYPE_BF16) {
		uint16_t *b = dst;
		for (int64_t i = 0; i < out * in; i++)
			b[i] = atlas_f32_to_bf16(f[i]);
	}
	if (f != dst)
		free(f);
	if (rc < 0)
		atlas_error_wrap(rc, "cannot dequantize '%s' (%s)", name, q->name);
	return rc;
}

int64_t atlas_quant_stored_bytes(const struct atlas_quant *q, const struct atlas_st *st,
				 const char *name)
{
	char prefix[512];
	if (q->method == ATLAS_QUANT_NONE || !module_of(name, prefix, sizeof(prefix)) ||
	    atlas_quant_ignored(q, prefix))
		return 0;
	switch (q->method) {
	case ATLAS_QUANT_FP8:
	case ATLAS_QUANT_CT_FP8:
	case ATLAS_QUANT_NVFP4:
	case ATLAS_QUANT_CT_NVFP4:
		return atlas_quant_fp_bytes(q, st, prefix);
	default:
		return atlas_quant_int_bytes(q, st, prefix);
	}
}
