/* log.h - leveled logging to stderr. The level comes from ATLAS_LOG
 * (error, warn, info, debug; default warn) or atlas_log_set_level().
 * Library code logs only to stderr and never to stdout. */
#ifndef ATLAS_CORE_LOG_H
#define ATLAS_CORE_LOG_H

enum atlas_log_level {
	ATLAS_LOG_ERROR = 0,
	ATLAS_LOG_WARN = 1,
	ATLAS_LOG_INFO = 2,
	ATLAS_LOG_DEBUG = 3,
};

void atlas_log_set_level(enum atlas_log_level level);
enum atlas_log_level atlas_log_get_level(void);
void atlas_log(enum atlas_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define atlas_info(...) atlas_log(ATLAS_LOG_INFO, __VA_ARGS__)
#define atlas_warn(...) atlas_log(ATLAS_LOG_WARN, __VA_ARGS__)
#define atlas_debug(...) atlas_log(ATLAS_LOG_DEBUG, __VA_ARGS__)

#endif
