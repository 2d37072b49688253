/* file.c - whole-file reads and path joins (see file.h). */
#include "file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"

int atlas_file_read(const char *path, char **buf, size_t *len)
{
	FILE *f = fopen(path, "rb");
	size_t cap = 4096, n = 0;
	char *p;

	*buf = NULL;
	*len = 0;
	if (!f) {
		int code = errno == ENOENT ? ATLAS_ENOTFOUND : ATLAS_EIO;
		return atlas_error(code, "cannot open '%s': %s", path, strerror(errno));
	}
	/* Grow as we go rather than trusting st_size: it is 0 for pipes and
	 * /proc files, and the file may change under us. */
	p = malloc(cap);
	while (p) {
		size_t got = fread(p + n, 1, cap - n - 1, f);
		n += got;
		if (n + 1 < cap)
			break;
		char *q = realloc(p, cap * 2);
		if (!q) {
			free(p);
			p = NULL;
			break;
		}
		p = q;
		cap *= 2;
	}
	if (!p) {
		fclose(f);
		return atlas_error(ATLAS_ENOMEM, "out of memory reading '%s'", path);
	}
	if (ferror(f)) {
		int e = errno;
		fclose(f);
		free(p);
		return atlas_error(ATLAS_EIO, "cannot read '%s': %s", path, strerror(e));
	}
	fclose(f);
	p[n] = '\0';
	*buf = p;
	*len = n;
	return 0;
}

char *atlas_path_join(const char *dir, const char *name)
{
	size_t dl = strlen(dir), nl = strlen(name);
	int slash = dl > 0 && dir[dl - 1] != '/';
	char *p = malloc(dl + slash + nl + 1);

	if (!p) {
		atlas_error(ATLAS_ENOMEM, "out of memory");
		return NULL;
	}
	memcpy(p, dir, dl);
	if (slash)
		p[dl] = '/';
	memcpy(p + dl + slash, name, nl + 1);
	return p;
}
