/* harness.h - a tiny unit-test harness that prints TAP.
 *
 *   static void test_parse(void) { CHECK(x == 1); CHECK_EQ_INT(a, b); }
 *   int main(void) { RUN(test_parse); return harness_done(); }
 *
 * A failed CHECK prints a diagnostic and marks the current test failed;
 * the test keeps running (so one run reports every broken check). */
#ifndef ATLAS_TEST_HARNESS_H
#define ATLAS_TEST_HARNESS_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

void harness_fail(const char *file, int line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Run fn as test `name` (HARNESS_ONLY=TEXT in the environment: only the
 * tests whose name contains TEXT run). */
void harness_run(const char *name, void (*fn)(void));
/* Prints the plan; returns the process exit code (1 if anything failed). */
int harness_done(void);
/* A fresh temporary directory for this process (created on first call). */
const char *harness_tmpdir(void);
/* Write `len` bytes to `dir`/`name`; returns the malloc'd path. */
char *harness_write(const char *dir, const char *name, const void *data,
		    size_t len);
/* One tensor for harness_write_st. */
struct harness_tensor {
	const char *name;  /* tensor name */
	const char *dtype; /* safetensors spelling: "F32", "F8_E4M3", "I32", ... */
	int ndim;          /* 0 for a scalar, at most 3 */
	int64_t shape[3];  /* dimensions */
	const void *data;  /* bytes: product(shape) * element size */
	size_t len;        /* bytes of data */
};
/* The n tensors as one safetensors file NAME in the test tmpdir (header
 * written by hand, data in order); returns the malloc'd path. */
char *harness_write_st(const char *name, const struct harness_tensor *t, int n);
/* Path of the source tree root (from ATLAS_SRC or the current dir). */
const char *harness_srcdir(void);
/* Each golden model of tests/fixtures/golden (a directory with an
 * expected.json), in name order: its path goes to dir (dir_size bytes)
 * and fn runs as the test named after it. Returns how many ran. */
int harness_each_golden(char *dir, size_t dir_size, void (*fn)(void));

#define RUN(fn) harness_run(#fn, fn)
#define CHECK(c) do { if (!(c)) harness_fail(__FILE__, __LINE__, "%s", #c); } while (0)
#define CHECK_EQ_INT(a, b) do { long long a_ = (long long)(a), b_ = (long long)(b); \
	if (a_ != b_) harness_fail(__FILE__, __LINE__, "%s == %lld, expected %s == %lld", #a, a_, #b, b_); } while (0)
#define CHECK_STR(a, b) do { const char *a_ = (a), *b_ = (b); \
	if (!a_ || !b_ || strcmp(a_, b_)) harness_fail(__FILE__, __LINE__, "%s is \"%s\", expected \"%s\"", #a, a_ ? a_ : "(null)", b_ ? b_ : "(null)"); } while (0)
#define CHECK_CONTAINS(hay, needle) do { const char *h_ = (hay), *n_ = (needle); \
	if (!h_ || !strstr(h_, n_)) harness_fail(__FILE__, __LINE__, "\"%s\" does not contain \"%s\"", h_ ? h_ : "(null)", n_); } while (0)
#define CHECK_NEAR(a, b, tol) do { double a_ = (a), b_ = (b); \
	if (!(a_ - b_ <= (tol) && b_ - a_ <= (tol))) harness_fail(__FILE__, __LINE__, "%s = %g, expected %g (tol %g)", #a, a_, b_, (double)(tol)); } while (0)

#endif
