/* kvpool.c - the paged KV cache: one pool of fixed-size blocks per model
 * (all layers' K and V rows of a block move together), a host free list,
 * and the sequences whose block tables point into it.
 *
 * A block holds block_size consecutive positions of one sequence; token p
 * of a sequence lives in cache row blocks[p / B] * B + p % B of every
 * layer's K and V pool. Blocks are taken when a step needs them and given
 * back when the sequence is reset or freed, so finished or preempted
 * requests free their memory at once. */
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "decoder_internal.h"

#define ALLOC(ptr, bytes) \
	do { \
		if (!((ptr) = m->be->alloc(m->be, (bytes)))) \
			goto nomem; \
	} while (0)

static void *host_alloc(struct atlas_model *m, size_t bytes)
{
	if (m->be->host_alloc && m->be->host_free)
		return m->be->host_alloc(m->be, bytes);
	return calloc(1, bytes);
}

static void host_free(struct atlas_model *m, void *p)
{
	if (m->be->host_alloc && m->be->host_free) {
		m->be->host_free(m->be, p);
		return;
	}
	free(p);
}

int atlas_kvpool_init(struct atlas_model *m)
{
	const struct atlas_config *c = &m->cfg;
	size_t rows = (size_t)(m->n_blocks * m->block_size);
	size_t bytes = 2 * (size_t)c->num_layers * rows *
		       (size_t)(m->Hkv_loc * c->head_dim) * m->act;
	m->meta_stride = (m->max_tokens + 63) / 64 * 64;
	size_t nt = (size_t)m->meta_stride * sizeof(int32_t);
	size_t nb = (size_t)(m->max_seqs * m->max_blocks) * sizeof(int32_t);
	size_t nmeta = ATLAS_STEP_HDR * sizeof(int32_t) + 4 * nt + nb;

	if (m->n_blocks > INT32_MAX / m->block_size)
		return atlas_error(ATLAS_EINVAL, "a KV pool of %lld blocks is too large",
				   (long long)m->n_blocks);
	if (!(m->kv = m->be->alloc(m->be, bytes)))
		return atlas_error(ATLAS_ENOMEM,
				   "cannot allocate the KV cache: %lld blocks of %lld tokens need %zu MiB",
				   (long long)m->n_blocks, (long long)m->block_size, bytes >> 20);
	m->free_list = malloc((size_t)m->n_blocks * sizeof(int32_t));
	/* the staging that crosses every step: page-locked where the backend
	 * has it (one DMA a copy, no staging copy by the driver) */
	m->h_meta = host_alloc(m, nmeta);
	m->h_out = host_alloc(m, (size_t)m->max_seqs * sizeof(int32_t));
	m->h_args = calloc((size_t)m->max_seqs, sizeof(*m->h_args));
	if (!m->free_list || !m->h_meta || !m->h_out || !m->h_args)
		goto nomem;
	ALLOC(m->d_meta, nmeta);
	ALLOC(m->d_out, (size_t)m->max_seqs * sizeof(int32_t));
	/* one layout on both sides (decoder_internal.h) */
	int64_t mt = m->meta_stride;
	m->h_hdr = m->h_meta;
	m->h_ids = m->h_hdr + ATLAS_STEP_HDR;
	m->h_pos = m->h_ids + mt;
	m->h_seq = m->h_pos + mt;
	m->h_slot = m->h_seq + mt;
	m->h_tables = m->h_slot + mt;
	m->d_hdr = m->d_meta;
	m->d_ids = m->d_hdr + ATLAS_STEP_HDR;
	m->d_pos = m->d_ids + mt;
	m->d_seq = m->d_pos + mt;
	m->d_slot = m->d_seq + mt;
	m->d_tables = m->d_slot + mt;
	/* pop order 0, 1, 2...: the stack holds the ids in reverse */
	for (int64_t i = 0; i < m->n_blocks; i++)
		m->free_list[i] = (int32_t)(m->n_blocks - 1 - i);
	m->n_free = m->n_blocks;
	return 0;
nomem:
	return atlas_error(ATLAS_ENOMEM, "cannot allocate the KV cache bookkeeping");
}

void atlas_kvpool_release(struct atlas_model *m)
{
	void *dev[] = {m->kv, m->d_meta, m->d_out};
	for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
		if (dev[i])
			m->be->free(m->be, dev[i]);
	free(m->free_list);
	host_free(m, m->h_meta);
	host_free(m, m->h_out);
	free(m->h_args);
}

int64_t atlas_model_kv_blocks_total(const struct atlas_model *m)
{
	return m->n_blocks;
}

int64_t atlas_model_kv_blocks_free(const struct atlas_model *m)
{
	return m->n_free;
}

int64_t atlas_model_block_size(const struct atlas_model *m)
{
	return m->block_size;
}

struct atlas_seq *atlas_seq_new(struct atlas_model *m)
{
	struct atlas_seq *s = calloc(1, sizeof(*s));
	if (s)
		s->blocks = malloc((size_t)m->max_blocks * sizeof(int32_t));
	if (!s || !s->blocks) {
		free(s);
		atlas_error(ATLAS_ENOMEM, "out of memory");
		return NULL;
	}
	s->m = m;
	return s;
}

void atlas_seq_reset(struct atlas_seq *s)
{
	struct atlas_model *m = s->m;
	while (s->n_blocks > 0)
		m->free_list[m->n_free++] = s->blocks[--s->n_blocks];
	s->len = 0;
}

void atlas_seq_free(struct atlas_seq *s)
{
	if (!s)
		return;
	atlas_seq_reset(s);
	free(s->blocks);
	free(s);
}

int64_t atlas_seq_len(const struct atlas_seq *s)
{
	return s->len;
}

int64_t atlas_seq_blocks(const struct atlas_seq *s)
{
	return s->n_blocks;
}

int64_t atlas_seq_blocks_needed(const struct atlas_seq *s, int64_t n)
{
	int64_t want = (s->len + n + s->m->block_size - 1) / s->m->block_size;
	return want > s->n_blocks ? want - s->n_blocks : 0;
}

int atlas_kvpool_reserve(struct atlas_seq *s, int64_t len)
{
	struct atlas_model *m = s->m;
	int64_t want = (len + m->block_size - 1) / m->block_size;
	if (want > m->max_blocks)
		return atlas_error(ATLAS_ERANGE, "%lld tokens do not fit in the context of %lld",
				   (long long)len, (long long)m->max_ctx);
	if (want - s->n_blocks > m->n_free)
		return atlas_error(ATLAS_ENOMEM,
				   "out of KV cache blocks: %lld more needed, %lld of %lld free",
				   (long long)(want - s->n_blocks), (long long)m->n_free,
				   (long long)m->n_blocks);
	while (s->n_blocks < want)
		s->blocks[s->n_blocks++] = m->free_list[--m->n_free];
	return 0;
}
