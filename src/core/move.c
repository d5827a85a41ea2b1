/*
 * move.c - data moving between tiers while the layer is in use: writeback of cold pages to the tier
 * below, swapoff of a tier, compaction of a pool, and the thread that runs them in the background.
 * Only descriptors change; swap ids stay. One mover at a time (move_lock), except that a swapoff runs
 * two threads under it, over the two halves of its pages; the page being moved is held by its
 * descriptor lock, so a concurrent load waits and a concurrent free finds it moved.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/layer.h"
#include "util/alloc.h"
#include "util/csum.h"
#include "util/err.h"
#include "util/thread.h"

/* Writeback starts when a tier with a tier below passes HI of its capacity and stops under LO. */
#define WB_HI_PCT    95
#define WB_LO_PCT    85
#define BG_PERIOD_MS 100

/* Read page @id of @src as a plain page into @buf and check it against its descriptor. */
static int load_plain(struct uswap *u, struct backend *src, uint32_t id, uint64_t h, uint32_t csum, void *buf)
{
	int ret = backend_load(src, id, &h, 1, buf);

	if (ret)
		return ret;
	if (!backend_has(src, BACKEND_INLINE) && csum_buf(buf, PAGE_SIZE) != csum) {
		atomic_fetch_add(&u->csum_errors, 1);
		return -EBADMSG;
	}
	return 0;
}

/*
 * A page moves as its source stores it when both tiers are BACKEND_PACKED (a compressed page is not
 * inflated on its way to the file, nor recompressed on its way back); its checksum is then verified by
 * the next load. Any other destination gets the plain page, checked here.
 */
int move_page(struct uswap *u, uint32_t id, unsigned from, unsigned first, bool wait, unsigned char *buf)
{
	struct swap_desc *d = desc_get(&u->descs, id);
	struct backend *src = &u->tier[from];
	bool src_inline = backend_has(src, BACKEND_INLINE);
	unsigned char *page = NULL;
	unsigned fmt = OBJ_PLAIN;
	ssize_t len = PAGE_SIZE;
	uint64_t h, nh = 0;
	uint32_t m;
	unsigned t = 0;
	int ret;

	if (wait)
		m = desc_lock(d);
	else if (!desc_trylock(d, &m))
		return 0;
	if (!(m & DESC_LIVE) || desc_tier(m) != from) {
		desc_unlock(d, m);
		return 0;
	}
	h = desc_handle(d, src_inline);
	if (backend_has(src, BACKEND_PACKED)) {
		len = backend_peek(src, id, h, buf, &fmt);
		ret = len < 0 ? (int)len : 0;
		if (!ret && fmt == OBJ_PLAIN && csum_buf(buf, PAGE_SIZE) != d->csum) {
			atomic_fetch_add(&u->csum_errors, 1);
			ret = -EBADMSG;
		}
	} else {
		ret = load_plain(u, src, id, h, d->csum, buf);
	}
	if (ret)
		goto out_unlock;
	if (fmt == OBJ_PLAIN)
		page = buf;
	ret = -ENOSPC;
	for (t = first; t < u->nr_tiers; t++) {
		struct backend *dst = &u->tier[t];

		if (t == from)
			continue;
		if (!page) {
			if (backend_store_obj(dst, buf, (size_t)len, fmt, id, &nh) == 1)
				break;
			if (backend_has(dst, BACKEND_INLINE))
				continue; /* it was not same-filled when stored */
			page = buf + PAGE_SIZE;
			ret = load_plain(u, src, id, h, d->csum, page);
			if (ret)
				goto out_unlock;
			ret = -ENOSPC;
		}
		if (backend_store(dst, page, 1, id, &nh) == 1)
			break;
	}
	if (t == u->nr_tiers)
		goto out_unlock;
	if (src_inline)
		atomic_fetch_sub(&src->nr_pages, 1);
	else
		backend_release(src, id, h);
	/* a page that came from an inline tier had no checksum of its own (csum held handle bits) */
	desc_set_handle(d, backend_has(&u->tier[t], BACKEND_INLINE), nh,
			src_inline ? csum_buf(page, PAGE_SIZE) : d->csum);
	atomic_fetch_add(&src->wb_out, 1);
	atomic_fetch_add(&u->tier[t].wb_in, 1);
	m = (m & ~DESC_TIER_MASK) | (uint32_t)t << DESC_TIER_SHIFT;
	m += 1u << DESC_VERSION_SHIFT; /* wraps within the top 16 bits */
	ret = 1;
out_unlock:
	desc_unlock(d, m);
	if (ret == 1)
		desc_note_tier(&u->descs, id, t);
	return ret;
}

/* Write out what tiers other than @except buffer (objects a mover just gave them). */
static void flush_tiers(struct uswap *u, unsigned except)
{
	for (unsigned t = 0; t < u->nr_tiers; t++)
		if (t != except)
			backend_flush(&u->tier[t]);
}

ssize_t uswap_writeback(struct uswap *u, unsigned tier, size_t max_pages)
{
	struct backend *b;
	size_t moved = 0;
	int ret = 0;

	if (tier >= u->nr_tiers || tier + 1 >= u->nr_tiers)
		return err_set(-EINVAL, "tier %u has no tier below it", tier);
	b = &u->tier[tier];
	if (!backend_has(b, BACKEND_LRU))
		return err_set(-EOPNOTSUPP, "tier \"%s\" keeps no LRU", b->spec);
	pthread_mutex_lock(&u->move_lock);
	while (moved < max_pages && ret >= 0) {
		size_t want = max_pages - moved < MOVE_BATCH ? max_pages - moved : MOVE_BATCH;
		size_t k = backend_cold(b, u->move_owners, want), progress = 0;

		for (size_t i = 0; i < k && ret >= 0; i++) {
			ret = move_page(u, u->move_owners[i], tier, tier + 1, false, u->move_buf);
			if (ret > 0)
				progress++;
		}
		moved += progress;
		flush_tiers(u, tier); /* one batched write per round for tiers that buffer */
		if (!progress)
			break; /* all busy, or nothing below takes them */
	}
	pthread_mutex_unlock(&u->move_lock);
	if (!moved && ret < 0)
		return err_set(ret, "writeback from tier \"%s\" failed: %s", b->spec, strerror(-ret));
	return (ssize_t)moved;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/*
 * The pages tier @tier holds, as (handle << 32 | id), sorted: moved in this order, a tier that reads
 * ahead (the file reads whole clusters) reads its space once, sequentially. NULL if out of memory.
 */
static uint64_t *swapoff_order(struct uswap *u, unsigned tier, size_t *n)
{
	size_t cap = (size_t)atomic_load(&u->tier[tier].nr_pages) + 64, k = 0;
	uint64_t *keys = ualloc(cap * sizeof(*keys));
	uint32_t nr_clusters = desc_nr_clusters(&u->descs);

	if (!keys)
		return NULL;
	for (uint32_t ci = 0; ci < nr_clusters && k < cap; ci++) {
		if (!desc_tier_bit(&u->descs, ci, tier))
			continue;
		for (uint32_t id = ci * DESC_CLUSTER; id < (ci + 1) * DESC_CLUSTER && k < cap; id++) {
			struct swap_desc *d = desc_get(&u->descs, id);
			uint32_t m = atomic_load_explicit(&d->meta, memory_order_acquire);

			if ((m & DESC_LIVE) && desc_tier(m) == tier)
				keys[k++] = desc_handle(d, false) << 32 |
					    id; /* a stale handle only costs order */
		}
	}
	qsort(keys, k, sizeof(*keys), cmp_u64);
	*n = k;
	return keys;
}

/* One mover of a swapoff: the pages of order[from, to), in order, with its own buffers and stream. */
struct swapoff_part {
	struct uswap *u;
	const uint64_t *order;
	size_t from, to;
	unsigned tier, stream;
	unsigned char *buf;
};

static void *swapoff_run(void *arg)
{
	struct swapoff_part *p = arg;

	backend_stream = p->stream;
	for (size_t i = p->from; i < p->to; i++) {
		move_page(p->u, (uint32_t)p->order[i], p->tier, 0, true, p->buf);
		if ((i - p->from) % MOVE_BATCH == MOVE_BATCH - 1)
			flush_tiers(p->u, p->tier);
	}
	backend_stream = 0;
	return NULL;
}

/* Below this many pages one mover does it all: a second thread is not worth its start. */
#define SWAPOFF_SPLIT_MIN 4096

int uswap_swapoff(struct uswap *u, unsigned tier)
{
	size_t stuck = 0, n = 0;
	uint64_t *order;
	int last = 0;

	if (tier >= u->nr_tiers)
		return err_set(-EINVAL, "no tier %u (the stack has %u)", tier, u->nr_tiers);
	atomic_store(&u->tier[tier].off, true);
	pthread_mutex_lock(&u->move_lock);
	/*
	 * Cost: the descriptor clusters that hold pages of the tier (a bit per cluster and tier), twice,
	 * plus one move per page the tier holds.
	 */
	order = backend_has(&u->tier[tier], BACKEND_INLINE) ? NULL : swapoff_order(u, tier, &n);
	/*
	 * Two movers, each over one half of the order (its own buffers and read-ahead stream): a mover
	 * spends most of its time compressing or copying into the pool, which the other CPU can do too.
	 */
	struct swapoff_part part[2] = {
		{u, order, 0, n, tier, 0, u->move_buf},
		{u, order, n / 2, n, tier, 1, u->move_buf2},
	};
	pthread_t helper;
	bool two = n >= SWAPOFF_SPLIT_MIN && !thread_start(&helper, "uswap-swapoff", swapoff_run, &part[1]);

	if (two)
		part[0].to = n / 2;
	swapoff_run(&part[0]);
	if (two)
		pthread_join(helper, NULL);
	ufree(order);
	/*
	 * What the ordered pass could not move (or a store that raced with "off"): again, and count. A
	 * cluster's bit is cleared before its scan; a store publishing later sets it again.
	 */
	uint32_t nr_clusters = desc_nr_clusters(&u->descs);
	for (uint32_t ci = 0; ci < nr_clusters; ci++) {
		bool left = false;

		if (!desc_take_tier_bit(&u->descs, ci, tier))
			continue;
		for (uint32_t id = ci * DESC_CLUSTER; id < (ci + 1) * DESC_CLUSTER; id++) {
			uint32_t m =
				atomic_load_explicit(&desc_get(&u->descs, id)->meta, memory_order_acquire);
			int ret;

			if (!(m & DESC_LIVE) || desc_tier(m) != tier)
				continue;
			ret = move_page(u, id, tier, 0, true, u->move_buf);
			if (ret < 0) {
				stuck++;
				last = ret;
				left = true;
			}
		}
		if (left)
			desc_note_tier(&u->descs, ci * DESC_CLUSTER, tier);
	}
	flush_tiers(u, tier);
	pthread_mutex_unlock(&u->move_lock);
	if (stuck)
		return err_set(last == -ENOSPC ? -ENOSPC : -EIO,
			       "swapoff of tier \"%s\": %zu pages could not move (%s); they stay, intact",
			       u->tier[tier].spec, stuck, strerror(-last));
	return 0;
}

int uswap_swapon(struct uswap *u, unsigned tier)
{
	if (tier >= u->nr_tiers)
		return err_set(-EINVAL, "no tier %u (the stack has %u)", tier, u->nr_tiers);
	atomic_store(&u->tier[tier].off, false);
	return 0;
}

static size_t compact_tier(struct uswap *u, unsigned tier)
{
	struct backend *b = &u->tier[tier];
	size_t k, moved = 0;

	pthread_mutex_lock(&u->move_lock);
	k = backend_sparse(b, u->move_owners, MOVE_BATCH);
	for (size_t i = 0; i < k; i++) {
		struct swap_desc *d = desc_get(&u->descs, u->move_owners[i]);
		uint64_t nh;
		uint32_t m;

		if (!desc_trylock(d, &m))
			continue;
		if ((m & DESC_LIVE) && desc_tier(m) == tier &&
		    !backend_relocate(b, u->move_owners[i], d->handle, &nh)) {
			desc_set_handle(d, false, nh, d->csum);
			moved++;
		}
		desc_unlock(d, m);
	}
	pthread_mutex_unlock(&u->move_lock);
	return moved;
}

ssize_t uswap_maintain(struct uswap *u)
{
	ssize_t done = 0;

	for (unsigned t = 0; t < u->nr_tiers; t++) {
		struct backend *b = &u->tier[t];
		struct uswap_tier_stats st;

		if (backend_has(b, BACKEND_LRU) && t + 1 < u->nr_tiers) {
			/* a store it refused for want of room asks for a batch even under the watermark */
			bool full = atomic_exchange(&b->full, false);

			backend_stats(b, &st);
			if (st.capacity_bytes &&
			    (full || st.used_bytes * 100 > st.capacity_bytes * WB_HI_PCT)) {
				do {
					ssize_t n = uswap_writeback(u, t, MOVE_BATCH);

					if (n <= 0)
						break;
					done += n;
					backend_stats(b, &st);
				} while (st.used_bytes * 100 > st.capacity_bytes * WB_LO_PCT);
			}
		}
		if (backend_has(b, BACKEND_COMPACT)) {
			size_t n;

			while ((n = compact_tier(u, t)) > 0)
				done += (ssize_t)n;
		}
		backend_flush(b); /* buffered writes out, freed file space back in bulk */
	}
	return done;
}

void move_kick(struct uswap *u)
{
	if (!u->bg_running || atomic_exchange(&u->bg_kicked, true))
		return;
	pthread_cond_signal(&u->bg_cond);
}

static void *bg_main(void *arg)
{
	struct uswap *u = arg;

	pthread_mutex_lock(&u->bg_lock);
	while (!u->bg_stop) {
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += BG_PERIOD_MS * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		if (!atomic_load(&u->bg_kicked))
			pthread_cond_timedwait(&u->bg_cond, &u->bg_lock, &ts);
		atomic_store(&u->bg_kicked, false);
		if (u->bg_stop)
			break;
		pthread_mutex_unlock(&u->bg_lock);
		uswap_maintain(u);
		pthread_mutex_lock(&u->bg_lock);
	}
	pthread_mutex_unlock(&u->bg_lock);
	return NULL;
}

int move_start(struct uswap *u)
{
	pthread_condattr_t ca;
	int ret;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_destroy(&u->bg_cond);
	pthread_cond_init(&u->bg_cond, &ca);
	pthread_condattr_destroy(&ca);
	ret = thread_start(&u->bg, "uswap-bg", bg_main, u);
	if (!ret)
		u->bg_running = true;
	return ret;
}

void move_stop(struct uswap *u)
{
	if (!u->bg_running)
		return;
	pthread_mutex_lock(&u->bg_lock);
	u->bg_stop = true;
	pthread_cond_signal(&u->bg_cond);
	pthread_mutex_unlock(&u->bg_lock);
	pthread_join(u->bg, NULL);
	u->bg_running = false;
}
