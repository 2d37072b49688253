/* kvpool.c - the paged KV cache: one pool of fixed-size blocks per model
 * (all layers' K and V rows of a block move together), a host free list,
 * and the sequences whose block tables point into it.
 *
 * A block holds block_size consecutive positions of one sequence; token p
 * of a sequence lives in cache row blocks[p / B] * B + p % B of every
 * layer's K and V pool. Blocks are taken when a step needs them and given
 * back when the sequence is reset or freed, so finished or preempted
 * requests free their memory at once.
 *
 * With the prefix cache (prefix.c) a block may sit in several tables:
 * m->refs counts its holders. A block nobody holds is either plain free
 * (on free_list) or idle in the cache (still holding rows someone may
 * attach); both count as free, and a step takes plain free blocks first,
 * then evicts idle ones, least recently used first. */
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
	size_t bytes = 2 * (size_t)c->num_layers * rows * m->kv_row;
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
	m->refs = calloc((size_t)m->n_blocks, sizeof(int32_t));
	/* the staging that crosses every step: page-locked where the backend
	 * has it (one DMA a copy, no staging copy by the driver) */
	m->h_meta = host_alloc(m, nmeta);
	m->h_out = host_alloc(m, (size_t)m->max_seqs * sizeof(int32_t));
	m->h_args = calloc((size_t)m->max_seqs, sizeof(*m->h_args));
	if (!m->free_list || !m->refs || !m->h_meta || !m->h_out || !m->h_args)
		goto nomem;
	int rc = atlas_prefix_init(m);
	if (rc)
		return rc;
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
	free(m->refs);
	atlas_prefix_release(m);
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
	return m->n_free + m->prefix.n_idle;
}

bool atlas_model_recurrent(const struct atlas_model *m)
{
	return m->state_floats > 0;
}

int64_t atlas_model_state_bytes(const struct atlas_model *m)
{
	return m->state_floats * (int64_t)sizeof(float);
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
	s->pub_node = -1;
	s->saved_len = -1;
	s->pend_len = -1;
	/* a hybrid model's recurrent state (zero until the first step) */
	if (m->state_floats &&
	    !(s->state = m->be->alloc(m->be, (size_t)m->state_floats * sizeof(float)))) {
		free(s->blocks);
		free(s);
		atlas_error(ATLAS_ENOMEM, "cannot allocate a sequence's recurrent state (%lld KiB)",
			    (long long)(m->state_floats * 4 >> 10));
		return NULL;
	}
	return s;
}

/* A block for a sequence to write into, held once: a plain free one,
 * else the least recently used idle one (evicted with its subtree). The
 * caller has checked that one is free. */
static int32_t take(struct atlas_model *m)
{
	if (m->n_free == 0)
		atlas_prefix_evict(m);
	int32_t b = m->free_list[--m->n_free];
	m->refs[b] = 1;
	return b;
}

/* Drop one hold on block b: at the last, a cached block goes idle and
 * any other back on the free list. */
static void put(struct atlas_model *m, int32_t b)
{
	if (--m->refs[b] > 0)
		return;
	if (atlas_prefix_has(m, b))
		atlas_prefix_idle(m, b);
	else
		m->free_list[m->n_free++] = b;
}

void atlas_kvpool_shrink(struct atlas_seq *s, int64_t n_blocks)
{
	/* the last block first, so that a sequence's deeper blocks go idle
	 * before (are evicted before) the ones they hang from */
	while (s->n_blocks > n_blocks)
		put(s->m, s->blocks[--s->n_blocks]);
}

int atlas_seq_note_step(struct atlas_seq *s, const int32_t *ids, int64_t n)
{
	struct atlas_model *m = s->m;
	if (n == 1 && s->saved_len >= 0 && s->n_tail < m->max_tokens + ATLAS_TAIL_MORE) {
		s->tail[s->n_tail++] = ids[0];
		return 0;
	}
	/* a new save point: a step of several tokens, or a one-token step
	 * with none to extend (a state copy every max_tokens + 64 tokens of
	 * plain decoding, and after each cut) */
	s->saved_len = -1;
	if (n > m->max_tokens)
		return 0;
	if (!s->tail && !(s->tail = malloc((size_t)(m->max_tokens + ATLAS_TAIL_MORE) *
					  sizeof(int32_t))))
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	if (s->len > 0) {
		const size_t bytes = (size_t)m->state_floats * sizeof(float);
		if (!s->saved && !(s->saved = m->be->alloc(m->be, bytes)))
			return atlas_error(ATLAS_ENOMEM, "cannot allocate a copy of a sequence's "
					   "recurrent state (%zu KiB)", bytes >> 10);
		int rc = m->be->copy(m->be, s->saved, s->state, bytes);
		if (rc)
			return rc;
	}
	memcpy(s->tail, ids, (size_t)n * sizeof(int32_t));
	s->n_tail = n;
	s->saved_len = s->len;
	return 0;
}

/* A hybrid sequence cut back to len: the state saved before its last
 * step of several tokens, then the tokens from there to len again (the
 * same bits: a sequence's rows depend on it alone). */
static int recurrent_cut(struct atlas_seq *s, int64_t len)
{
	struct atlas_model *m = s->m;
	const int64_t from = s->saved_len, B = m->block_size;
	if (from < 0 || len < from || len - from > s->n_tail || from < s->n_pub * B)
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "cannot cut a sequence of a hybrid model from %lld tokens to %lld: "
				   "its recurrent state can go back only into its last step of "
				   "several tokens", (long long)s->len, (long long)len);
	const int64_t n = len - from;
	int32_t *ids = malloc((size_t)(n ? n : 1) * sizeof(int32_t));
	if (!ids)
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	memcpy(ids, s->tail, (size_t)n * sizeof(int32_t));
	int rc = 0;
	if (from > 0)
		rc = m->be->copy(m->be, s->state, s->saved, (size_t)m->state_floats * sizeof(float));
	atlas_kvpool_shrink(s, (from + B - 1) / B);
	s->len = from;
	s->saved_len = -1;
	/* the replay's rows would overwrite the hidden rows of the step
	 * just run, which an MTP head reads next (atlas_model_hidden_rows):
	 * with a head attached they are kept aside and put back */
	const bool keep = m->rows_read && m->h_keep;
	const size_t rb = (size_t)m->cfg.hidden_size * m->act;
	const size_t kb = (size_t)(n < m->max_tokens ? n : m->max_tokens) * rb;
	if (!rc && n && keep)
		rc = m->be->copy(m->be, m->h_keep, m->h, kb);
	if (!rc && n)
		rc = atlas_model_forward(m, s, ids, n, NULL, false);
	if (!rc && n && keep)
		rc = m->be->copy(m->be, m->h, m->h_keep, kb);
	free(ids);
	return rc;
}

int atlas_seq_truncate(struct atlas_seq *s, int64_t len)
{
	int64_t B = s->m->block_size, keep = (len + B - 1) / B;
	if (len < s->n_pub * B || len > s->len)
		return atlas_error(ATLAS_EINVAL,
				   "cannot cut a sequence of %lld tokens (%lld blocks published) to %lld",
				   (long long)s->len, (long long)s->n_pub, (long long)len);
	if (s->state && len != 0 && len != s->len)
		return recurrent_cut(s, len);
	atlas_kvpool_shrink(s, keep);
	s->len = len;
	return 0;
}

void atlas_seq_reset(struct atlas_seq *s)
{
	atlas_kvpool_shrink(s, 0);
	s->len = 0;
	s->n_pub = 0;
	s->pub_node = -1;
	s->saved_len = -1;
	s->pend_len = -1;
	s->snap_want = 0;
}

void atlas_seq_free(struct atlas_seq *s)
{
	if (!s)
		return;
	atlas_seq_reset(s);
	if (s->state)
		s->m->be->free(s->m->be, s->state);
	if (s->saved)
		s->m->be->free(s->m->be, s->saved);
	if (s->pend)
		s->m->be->free(s->m->be, s->pend);
	free(s->tail);
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

/* The next token of s lands in a partly used block that another
 * sequence or the cache still uses (one atlas_seq_attach_prefix shared):
 * s must copy it before it writes. */
static bool must_copy(const struct atlas_seq *s)
{
	const struct atlas_model *m = s->m;
	int64_t i = s->len / m->block_size;
	if (s->len % m->block_size == 0 || i >= s->n_blocks)
		return false;
	return m->refs[s->blocks[i]] > 1 || atlas_prefix_has(m, s->blocks[i]);
}

int64_t atlas_seq_blocks_needed(const struct atlas_seq *s, int64_t n)
{
	int64_t want = (s->len + n + s->m->block_size - 1) / s->m->block_size;
	int64_t more = want > s->n_blocks ? want - s->n_blocks : 0;
	return more + (n > 0 && must_copy(s));
}

/* Copy on write: the partly used block s appends to next becomes a
 * fresh copy of its used rows (every layer's K and V), and s lets go of
 * the original, which the other holders or the cache keep unchanged.
 * The caller has checked that a block is free. */
static int copy_last(struct atlas_seq *s)
{
	struct atlas_model *m = s->m;
	int64_t B = m->block_size, i = s->len / B, used = s->len % B;
	if (m->comm->world > 1)
		return atlas_error(ATLAS_EUNSUPPORTED,
				   "a shared partial KV block cannot be copied with tensor parallelism");
	/* one layer's K (or V) pool: n_blocks * B rows of `row` bytes, a
	 * block's rows contiguous; K then V, layer by layer */
	size_t row = m->kv_row;
	size_t pool = (size_t)(m->n_blocks * B) * row;
	int32_t from = s->blocks[i], to = take(m);
	for (int64_t p = 0; p < 2 * m->cfg.num_layers; p++) {
		char *base = (char *)m->kv + (size_t)p * pool;
		int rc = m->be->copy(m->be, base + (size_t)to * (size_t)B * row,
				     base + (size_t)from * (size_t)B * row, (size_t)used * row);
		if (rc) {
			put(m, to);
			return rc;
		}
	}
	s->blocks[i] = to;
	put(m, from);
	return 0;
}

int atlas_kvpool_reserve(struct atlas_seq *s, int64_t len)
{
	struct atlas_model *m = s->m;
	int64_t want = (len + m->block_size - 1) / m->block_size;
	if (want > m->max_blocks)
		return atlas_error(ATLAS_ERANGE, "%lld tokens do not fit in the context of %lld",
				   (long long)len, (long long)m->max_ctx);
	bool copy = len > s->len && must_copy(s);
	int64_t more = (want > s->n_blocks ? want - s->n_blocks : 0) + copy;
	if (more > atlas_model_kv_blocks_free(m))
		return atlas_error(ATLAS_ENOMEM,
				   "out of KV cache blocks: %lld more needed, %lld of %lld free",
				   (long long)more, (long long)atlas_model_kv_blocks_free(m),
				   (long long)m->n_blocks);
	if (copy) {
		int rc = copy_last(s);
		if (rc)
			return rc;
	}
	while (s->n_blocks < want)
		s->blocks[s->n_blocks++] = take(m);
	return 0;
}

int atlas_kvpool_check(const struct atlas_model *m)
{
	char *seen = calloc((size_t)m->n_blocks, 1);
	int rc = 0;
	if (!seen)
		return atlas_error(ATLAS_ENOMEM, "out of memory");
	int64_t held = 0;
	for (int64_t i = 0; i < m->n_free && !rc; i++) {
		int32_t b = m->free_list[i];
		if (b < 0 || b >= m->n_blocks || seen[b]++ || m->refs[b] != 0 ||
		    atlas_prefix_has(m, b))
			rc = atlas_error(ATLAS_EINVAL, "free block %d: twice, held or cached", b);
	}
	for (int32_t b = 0; b < (int32_t)m->n_blocks && !rc; b++) {
		if (m->refs[b] < 0)
			rc = atlas_error(ATLAS_EINVAL, "block %d has %d holders", b, m->refs[b]);
		else if (m->refs[b] > 0)
			held += !seen[b]++;
		else if (!seen[b] && atlas_prefix_has(m, b))
			seen[b]++; /* idle: atlas_prefix_check walks the list */
		if (!rc && !seen[b])
			rc = atlas_error(ATLAS_EINVAL, "block %d is lost (not free, idle or held)", b);
	}
	if (!rc && m->n_free + m->prefix.n_idle + held != m->n_blocks)
		rc = atlas_error(ATLAS_EINVAL, "%lld free + %lld idle + %lld held != %lld blocks",
				 (long long)m->n_free, (long long)m->prefix.n_idle, (long long)held,
				 (long long)m->n_blocks);
	free(seen);
	return rc ? rc : atlas_prefix_check(m);
}
