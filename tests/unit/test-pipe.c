/* test-pipe.c - the pipe-stage line formats: id lines, JSONL fields,
 * and JSON string output that keeps invalid UTF-8 bytes visible. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/core/error.h"
#include "../../lib/engine/pipe.h"
#include "harness.h"

static void test_idline(void)
{
	int32_t *ids;
	size_t n;
	CHECK_EQ_INT(atlas_idline_parse("12 7\t99 0\n", &ids, &n), 0);
	CHECK_EQ_INT(n, 4);
	CHECK(ids[0] == 12 && ids[1] == 7 && ids[2] == 99 && ids[3] == 0);
	free(ids);
	CHECK_EQ_INT(atlas_idline_parse("", &ids, &n), 0);
	CHECK_EQ_INT(n, 0);
	CHECK_EQ_INT(atlas_idline_parse("12 abc 4", &ids, &n), ATLAS_EFORMAT);
	CHECK_CONTAINS(atlas_errmsg(), "'abc' is not a token id");
	CHECK_EQ_INT(atlas_idline_parse("1 -3", &ids, &n), ATLAS_EFORMAT);
	CHECK_EQ_INT(atlas_idline_parse("1 2x", &ids, &n), ATLAS_EFORMAT);
	CHECK_EQ_INT(atlas_idline_parse("99999999999", &ids, &n), ATLAS_EFORMAT);
}

static void test_jsonl(void)
{
	int32_t *ids;
	size_t n;
	char *s;
	CHECK_EQ_INT(atlas_idline_parse_json("{\"ids\": [3, 4, 5]}", "ids", &ids, &n), 0);
	CHECK_EQ_INT(n, 3);
	CHECK_EQ_INT(ids[2], 5);
	free(ids);
	CHECK_EQ_INT(atlas_idline_parse_json("{\"ids\": [3, \"x\"]}", "ids", &ids, &n), ATLAS_EFORMAT);
	CHECK_EQ_INT(atlas_idline_parse_json("[1, 2]", "ids", &ids, &n), ATLAS_EFORMAT);
	CHECK_EQ_INT(atlas_idline_parse_json("{\"text\": 1}", "ids", &ids, &n), ATLAS_EFORMAT);
	CHECK_CONTAINS(atlas_errmsg(), "missing field 'ids'");
	CHECK_EQ_INT(atlas_jsonl_get_string("{\"prompt\": \"a\\u0000b\\n\"}", "prompt", &s, &n), 0);
	CHECK_EQ_INT(n, 4);
	CHECK(!memcmp(s, "a\0b\n", 4));
	free(s);
	CHECK_EQ_INT(atlas_jsonl_get_string("{\"prompt\": 5}", "prompt", &s, &n), ATLAS_EFORMAT);
	CHECK_EQ_INT(atlas_jsonl_get_string("{not json", "prompt", &s, &n), ATLAS_EFORMAT);
}

/* A NUL byte in a line read with getline must not end the line early:
 * the length-aware parsers refuse it and say where it is. */
static void test_nul_byte(void)
{
	int32_t *ids;
	size_t n;
	char *s;
	static const char ids_line[] = "12 7\0 99";
	static const char json_line[] = "{\"ids\": [1]}\0{\"ids\": [2]}";
	static const char text_line[] = "{\"text\": \"a\"}\0 junk";

	CHECK_EQ_INT(atlas_idline_parse_n(ids_line, sizeof(ids_line) - 1, &ids, &n), ATLAS_EFORMAT);
	CHECK_CONTAINS(atlas_errmsg(), "NUL byte at byte 5 (of 8)");
	CHECK(ids == NULL && n == 0);
	CHECK_EQ_INT(atlas_idline_parse_json_n(json_line, sizeof(json_line) - 1, "ids", &ids, &n),
		     ATLAS_EFORMAT);
	CHECK_CONTAINS(atlas_errmsg(), "NUL byte at byte 13");
	CHECK_EQ_INT(atlas_jsonl_get_string_n(text_line, sizeof(text_line) - 1, "text", &s, &n),
		     ATLAS_EFORMAT);
	CHECK_CONTAINS(atlas_errmsg(), "NUL byte at byte 14");

	/* the same lines up to the NUL parse as before */
	CHECK_EQ_INT(atlas_idline_parse_n(ids_line, 4, &ids, &n), 0);
	CHECK(n == 2 && ids[0] == 12 && ids[1] == 7);
	free(ids);
	/* the length bounds the parse: no reading past it */
	CHECK_EQ_INT(atlas_idline_parse_n("12 345", 5, &ids, &n), 0);
	CHECK(n == 2 && ids[1] == 34);
	free(ids);
	CHECK_EQ_INT(atlas_idline_parse_n("2147483647 2147483648", 10, &ids, &n), 0);
	CHECK(n == 1 && ids[0] == INT32_MAX);
	free(ids);
	CHECK_EQ_INT(atlas_idline_parse_n("2147483648", 10, &ids, &n), ATLAS_EFORMAT);
	CHECK_EQ_INT(atlas_idline_parse_n("+5", 2, &ids, &n), ATLAS_EFORMAT);
	CHECK_EQ_INT(atlas_idline_parse_n("1 \r\n", 4, &ids, &n), 0);
	CHECK(n == 1);
	free(ids);
}

/* One object per line: text after it is an error, not ignored. */
static void test_json_trailing(void)
{
	int32_t *ids;
	size_t n;
	char *s;
	CHECK_EQ_INT(atlas_idline_parse_json("{\"ids\": [1]} {\"ids\": [2]}", "ids", &ids, &n),
		     ATLAS_EFORMAT);
	CHECK_CONTAINS(atlas_errmsg(), "text after the JSON object (byte 14)");
	CHECK_EQ_INT(atlas_jsonl_get_string("{\"text\": \"a\"}x", "text", &s, &n), ATLAS_EFORMAT);
	CHECK_EQ_INT(atlas_idline_parse_json("{\"ids\": [1, 2]} \r\n", "ids", &ids, &n), 0);
	CHECK_EQ_INT(n, 2);
	free(ids);
	CHECK_EQ_INT(atlas_idline_parse_json("{\"ids\": [1, 2]", "ids", &ids, &n), ATLAS_EFORMAT);
	CHECK_EQ_INT(atlas_idline_parse_json("5", "ids", &ids, &n), ATLAS_EFORMAT);
}

static void test_write_string(void)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	atlas_json_write_string(f, "a\"\\\n\x01 caf\xc3\xa9 \xff\xc3", 14);
	fclose(f);
	CHECK_STR(buf, "\"a\\\"\\\\\\n\\u0001 caf\xc3\xa9 \\u00ff\\u00c3\"");
	free(buf);
}

int main(void)
{
	RUN(test_idline);
	RUN(test_jsonl);
	RUN(test_nul_byte);
	RUN(test_json_trailing);
	RUN(test_write_string);
	return harness_done();
}
