/* hfcache.h - resolve a model argument to a directory.
 *
 * MODEL is either a directory (used as is) or a Hub id `org/name[@rev]`
 * looked up in the Hugging Face cache: $HF_HUB_CACHE, else $HF_HOME/hub,
 * else ~/.cache/huggingface/hub, as `models--org--name/snapshots/<sha>/`,
 * where rev is a ref name in `refs/` (default "main") or a commit sha. */
#ifndef ATLAS_IO_HFCACHE_H
#define ATLAS_IO_HFCACHE_H

/* Returns a malloc'd directory path owned by the caller, or NULL with a
 * message saying what was looked for and where. */
char *atlas_model_resolve(const char *model);

/* The hub cache directory as above; malloc'd, owned by the caller. */
char *atlas_hf_cache_dir(void);

#endif
