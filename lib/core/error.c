/* error.c - per-thread last-error message (see error.h). */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char errbuf[1024];

int atlas_error(int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(errbuf, sizeof(errbuf), fmt, ap);
	va_end(ap);
	return code;
}

int atlas_error_wrap(int code, const char *fmt, ...)
{
	char prefix[256], old[sizeof(errbuf)];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(prefix, sizeof(prefix), fmt, ap);
	va_end(ap);
	strcpy(old, errbuf);
	size_t pl = strlen(prefix), ol = strlen(old);
	if (ol && pl + 2 < sizeof(errbuf)) {
		memcpy(errbuf, prefix, pl);
		memcpy(errbuf + pl, ": ", 2);
		size_t room = sizeof(errbuf) - pl - 3;
		if (ol > room)
			ol = room;
		memcpy(errbuf + pl + 2, old, ol);
		errbuf[pl + 2 + ol] = '\0';
	} else {
		memcpy(errbuf, prefix, pl + 1);
	}
	return code;
}

const char *atlas_errmsg(void)
{
	return errbuf;
}

void atlas_error_clear(void)
{
	errbuf[0] = '\0';
}

const char *atlas_strerror(int code)
{
	switch (code) {
	case ATLAS_OK: return "success";
	case ATLAS_EINVAL: return "invalid argument";
	case ATLAS_EIO: return "input/output error";
	case ATLAS_ENOMEM: return "out of memory";
	case ATLAS_EFORMAT: return "malformed input";
	case ATLAS_EUNSUPPORTED: return "unsupported";
	case ATLAS_ENOTFOUND: return "not found";
	case ATLAS_ERANGE: return "out of range";
	}
	return "unknown error";
}
