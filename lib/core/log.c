/* log.c - leveled logging to stderr (see log.h). */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int level = -1; /* -1: not yet read from the environment */

static void init_level(void)
{
	const char *e = getenv("ATLAS_LOG");
	level = ATLAS_LOG_WARN;
	if (!e)
		return;
	if (!strcmp(e, "error")) level = ATLAS_LOG_ERROR;
	else if (!strcmp(e, "warn")) level = ATLAS_LOG_WARN;
	else if (!strcmp(e, "info")) level = ATLAS_LOG_INFO;
	else if (!strcmp(e, "debug")) level = ATLAS_LOG_DEBUG;
}

void atlas_log_set_level(enum atlas_log_level l)
{
	level = (int)l;
}

enum atlas_log_level atlas_log_get_level(void)
{
	if (level < 0)
		init_level();
	return (enum atlas_log_level)level;
}

void atlas_log(enum atlas_log_level l, const char *fmt, ...)
{
	static const char *names[] = {"error", "warning", "info", "debug"};
	va_list ap;
	if ((int)l > (int)atlas_log_get_level())
		return;
	fprintf(stderr, "atlas: %s: ", names[l]);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}
