/* file.h - small file-system helpers shared by the lib/io readers:
 * read a whole (small) file into memory, join path components. */
#ifndef ATLAS_IO_FILE_H
#define ATLAS_IO_FILE_H

#include <stddef.h>

/* Read all of `path` into a malloc'd buffer with a NUL appended (not
 * counted in *len). On success returns 0 and *buf is owned by the caller
 * (free it). Returns ATLAS_ENOTFOUND if the file does not exist,
 * ATLAS_EIO if it cannot be opened or read, ATLAS_ENOMEM; the message
 * names the path. */
int atlas_file_read(const char *path, char **buf, size_t *len);

/* "dir/name" in a malloc'd string owned by the caller (a '/' is not
 * doubled when `dir` ends with one). NULL with a message if out of
 * memory. */
char *atlas_path_join(const char *dir, const char *name);

#endif
