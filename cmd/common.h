/* common.h - what every atlas-* program shares: error reporting, number
 * parsing for flags, the default model, version text. Only cmd/ prints
 * and exits; these helpers do both on behalf of the programs. */
#ifndef ATLAS_CMD_COMMON_H
#define ATLAS_CMD_COMMON_H

#include <stdint.h>

#include "../lib/backend/backend.h"
#include "../lib/engine/spec.h"

extern const char *cmd_name; /* program name for messages, set by main */

/* Print "NAME: error: MSG" to stderr. */
void cmd_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Print the library's last message as an error and return 1. */
int cmd_lib_error(void);
/* Print "NAME: MSG" plus a hint to use --help, and exit 2. */
void cmd_usage_error(const char *fmt, ...)
	__attribute__((format(printf, 1, 2), noreturn));

/* Parse a flag value or exit 2 naming the flag. */
int64_t cmd_parse_int(const char *flag, const char *s, int64_t min, int64_t max);
double cmd_parse_double(const char *flag, const char *s, double min, double max);
uint64_t cmd_parse_u64(const char *flag, const char *s);

/* The values --kv-dtype takes, as the messages and usage texts list them. */
#define CMD_KV_DTYPES "auto, bf16, fp8 or q4"
/* Parse a KV cache format for a flag (lib/backend/kvq.h) or exit 2
 * naming the flag and the accepted values. */
enum atlas_kv_dtype cmd_parse_kv_dtype(const char *flag, const char *s);

/* Parse a --speculative mode (lib/engine/spec.h) or exit 2 with the
 * library's message (which names what is accepted). */
enum atlas_spec_mode cmd_parse_spec(const char *flag, const char *s);

/* Parse a byte size for a flag: a number with an optional unit, B, KB,
 * MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024);
 * exits 2 naming the flag when it is not one or is below `min`. */
int64_t cmd_parse_size(const char *flag, const char *s, int64_t min);

/* Print "NAME VERSION (git REV)" to stdout. */
void cmd_print_version(void);

/* Resolve -m's argument (NULL: the default model) to a directory.
 * Returns a malloc'd path, or NULL after printing an error. */
char *cmd_resolve_model(const char *model);

#endif
