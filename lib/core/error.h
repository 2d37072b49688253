/* error.h - error codes and the per-thread "last error" message.
 *
 * Library functions return 0 (or a count) on success and a negative
 * ATLAS_E* code on failure; constructors return NULL. Either way they
 * leave a human-readable message that the caller fetches with
 * atlas_errmsg(). Only cmd/ prints it. Messages follow git's habit:
 * lowercase, no final period, subjects quoted: "cannot open 'x'".
 */
#ifndef ATLAS_CORE_ERROR_H
#define ATLAS_CORE_ERROR_H

enum atlas_err {
	ATLAS_OK = 0,
	ATLAS_EINVAL = -1,       /* bad argument or bad input value */
	ATLAS_EIO = -2,          /* open/read/mmap failed */
	ATLAS_ENOMEM = -3,       /* allocation failed */
	ATLAS_EFORMAT = -4,      /* malformed file content */
	ATLAS_EUNSUPPORTED = -5, /* valid but not supported by Atlas */
	ATLAS_ENOTFOUND = -6,    /* file, tensor or key missing */
	ATLAS_ERANGE = -7,       /* value out of range (token id, length) */
};

/* Record a formatted message for this thread and return `code` unchanged,
 * so callers can write `return atlas_error(ATLAS_EIO, "cannot open '%s'", p);` */
int atlas_error(int code, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Prefix the current message with "prefix: " (for adding context such as
 * a file name on the way up). Returns `code`. */
int atlas_error_wrap(int code, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* The last message recorded on this thread; never NULL, "" if none.
 * Owned by the library; valid until the next atlas_error* on this thread. */
const char *atlas_errmsg(void);

/* Clear this thread's message. */
void atlas_error_clear(void);

/* A short name for a code ("invalid argument", ...). Static string. */
const char *atlas_strerror(int code);

#endif
