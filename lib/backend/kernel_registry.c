/* kernel_registry.c - choosing a kernel target from the embedded table
 * (see kernel_registry.h). */
#include "kernel_registry.h"

#include <stdio.h>
#include <string.h>

const struct atlas_kernel_blob *atlas_kernel_pick(const struct atlas_kernel_blob *tab, int n,
						  const char *arch, const char *family,
						  const char *quant, int *fallback)
{
	const struct atlas_kernel_blob *common = NULL;
	*fallback = 0;
	for (int i = 0; i < n; i++) {
		if (strcmp(tab[i].arch, arch))
			continue;
		if (!strcmp(tab[i].family, "common"))
			common = &tab[i];
		else if (family && quant && !strcmp(tab[i].family, family) &&
			 !strcmp(tab[i].quant, quant))
			return &tab[i];
	}
	if (common && family && strcmp(family, "common"))
		*fallback = 1;
	return common;
}

const char *atlas_kernel_blob_name(const struct atlas_kernel_blob *b, char *buf, size_t cap)
{
	if (b->quant[0])
		snprintf(buf, cap, "%s/%s/%s", b->arch, b->family, b->quant);
	else
		snprintf(buf, cap, "%s/%s", b->arch, b->family);
	return buf;
}
