/*
 * swap.c - the public swap-layer calls: create, store, load, free, stats.
 *
 * A store walks the folio in runs of pages of one kind (same-filled or not, known from the checksum
 * pass) and offers each run to the tiers in order; a tier takes a prefix, refuses, or fails, and the
 * rest goes on. Descriptors are locked one by one (ascending ids) while they are written or read, so
 * a mover (writeback, swapoff, compaction) never sees half a descriptor.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/layer.h"
#include "util/alloc.h"
#include "util/csum.h"
#include "util/err.h"

#define DEFAULT_MAX_PAGES (1ull << 28)

/*
 * The descriptor table reserves address space for DEFAULT_MAX_PAGES (4 GiB of it). Swapped pages
 * come from the process's memory, so under an address-space limit (RLIMIT_AS, `ulimit -v`) the table
 * needs no more than four descriptors per page the limit allows, and must not take the room itself.
 */
static uint64_t default_max_pages(void)
{
	struct rlimit rl;

	if (!getrlimit(RLIMIT_AS, &rl) && rl.rlim_cur != RLIM_INFINITY &&
	    rl.rlim_cur / PAGE_SIZE * 4 < DEFAULT_MAX_PAGES)
		return rl.rlim_cur / PAGE_SIZE * 4;
	return DEFAULT_MAX_PAGES;
}

static void layer_close_tiers(struct uswap *u)
{
	for (unsigned t = 0; t < u->nr_tiers; t++)
		backend_close(&u->tier[t]);
	u->nr_tiers = 0;
}

int uswap_create_opts(struct uswap **out, const struct uswap_options *opts)
{
	struct uswap *u;
	char def[USWAP_TIERS_LEN];
	const char *spec = opts && opts->tiers && *opts->tiers ? opts->tiers : def;
	uint64_t max_pages = opts && opts->max_pages ? opts->max_pages : default_max_pages();
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned nr_ctx = opts && opts->nr_ctx ? opts->nr_ctx : (unsigned)(ncpu > 0 ? 2 * ncpu : 2);
	int ret;

	err_clear();
	u = ualloc_zero(sizeof(*u));
	if (!u)
		return -ENOMEM;
	pthread_mutex_init(&u->move_lock, NULL);
	pthread_mutex_init(&u->bg_lock, NULL);
	pthread_cond_init(&u->bg_cond, NULL);
	ret = desc_table_init(&u->descs, max_pages);
	if (ret) {
		err_set(ret, "cannot reserve descriptors for %llu pages", (unsigned long long)max_pages);
		goto out_free;
	}
	u->move_buf = ualloc_aligned(4096, 4 * PAGE_SIZE);
	u->move_owners = ualloc(MOVE_BATCH * sizeof(uint32_t));
	ret = -ENOMEM;
	if (!u->move_buf || !u->move_owners)
		goto out_free;
	u->move_buf2 = u->move_buf + 2 * PAGE_SIZE;
	if (spec == def)
		uswap_default_tiers(0, def, sizeof(def));
	ret = config_open_tiers(u, spec, nr_ctx, false);
	if (ret)
		goto out_free;
	if (!(opts && opts->no_background)) {
		ret = move_start(u);
		if (ret) {
			err_set(ret, "cannot start the maintenance thread");
			goto out_free;
		}
	}
	*out = u;
	return 0;

out_free:
	layer_close_tiers(u);
	desc_table_destroy(&u->descs);
	ufree(u->move_buf);
	ufree(u->move_owners);
	ufree(u);
	return ret;
}

int uswap_create(struct uswap **out, const char *spec)
{
	struct uswap_options o = {.tiers = spec};

	return uswap_create_opts(out, &o);
}

void uswap_destroy(struct uswap *u)
{
	if (!u)
		return;
	move_stop(u);
	/* Release what is still stored, so backends with outside state (files, servers) are left clean. */
	for (uint64_t id = 1; desc_id_valid(&u->descs, id); id++) {
		uint32_t m = atomic_load(&desc_get(&u->descs, (uint32_t)id)->meta);

		if (m & DESC_HEAD)
			uswap_free(u, id);
	}
	layer_close_tiers(u);
	desc_table_destroy(&u->descs);
	pthread_mutex_destroy(&u->move_lock);
	pthread_mutex_destroy(&u->bg_lock);
	pthread_cond_destroy(&u->bg_cond);
	ufree(u->move_buf);
	ufree(u->move_owners);
	ufree(u);
}

/* Meta of a live page of tier @t; keeps the version (bumped) and the folio head fields. */
static inline uint32_t meta_live(uint32_t old, unsigned t)
{
	uint32_t keep = old & (DESC_HEAD | DESC_NPAGES_MASK);
	uint32_t version = (uint32_t)(desc_version(old) + 1) << DESC_VERSION_SHIFT;

	return keep | version | DESC_LIVE | (uint32_t)t << DESC_TIER_SHIFT;
}

/* Release pages [0, n) of a store that cannot complete. */
static void store_undo(struct uswap *u, uint32_t id, size_t n, const uint8_t *tiers, const uint64_t *handles)
{
	for (size_t j = 0; j < n; j++)
		if (!backend_has(&u->tier[tiers[j]], BACKEND_INLINE))
			backend_release(&u->tier[tiers[j]], id + (uint32_t)j, handles[j]);
		else
			atomic_fetch_sub(&u->tier[tiers[j]].nr_pages, 1);
}

int uswap_store(struct uswap *u, const void *src, size_t npages, uswap_id_t *idp)
{
	const unsigned char *s = src;
	uint64_t handles[USWAP_FOLIO_MAX_PAGES];
	uint32_t csums[USWAP_FOLIO_MAX_PAGES];
	uint8_t tiers[USWAP_FOLIO_MAX_PAGES];
	bool same[USWAP_FOLIO_MAX_PAGES];
	uint32_t id;
	size_t i = 0;
	unsigned err_tier = 0;
	int err = -ENOSPC;

	if (npages < 1 || npages > USWAP_FOLIO_MAX_PAGES)
		return err_set(-EINVAL, "a folio is 1..%u pages, not %zu", USWAP_FOLIO_MAX_PAGES, npages);
	id = desc_alloc(&u->descs, (unsigned)npages);
	if (!id) {
		atomic_fetch_add(&u->store_failures, 1);
		return err_set(-ENOMEM, "no swap descriptors left (slab full)");
	}
	for (size_t j = 0; j < npages; j++) {
		uint64_t word;

		csums[j] = csum_page(s + j * PAGE_SIZE, PAGE_SIZE, &same[j], &word);
	}
	while (i < npages) {
		size_t run = 1;
		unsigned t;

		while (i + run < npages && same[i + run] == same[i])
			run++;
		for (t = 0; t < u->nr_tiers; t++) {
			struct backend *b = &u->tier[t];
			ssize_t n;

			if (backend_has(b, BACKEND_INLINE) && !same[i])
				continue;
			n = backend_store(b, s + i * PAGE_SIZE, run, id + (uint32_t)i, handles + i);
			if (n > 0) {
				memset(tiers + i, (int)t, (size_t)n);
				i += (size_t)n;
				break;
			}
			if (n < 0 && n != -ENOSPC) {
				err = (int)n;
				err_tier = t;
			}
			/* a full pool wants writeback; an incompressible page does not */
			if (backend_has(b, BACKEND_LRU) && t + 1 < u->nr_tiers &&
			    atomic_load_explicit(&b->full, memory_order_relaxed))
				move_kick(u);
		}
		if (t == u->nr_tiers)
			goto out_undo;
	}
	for (size_t j = 0; j < npages; j++) {
		struct swap_desc *d = desc_get(&u->descs, id + (uint32_t)j);
		uint32_t m = desc_lock(d);

		m &= ~(DESC_HEAD | DESC_NPAGES_MASK);
		if (!j)
			m |= DESC_HEAD | (uint32_t)(npages - 1) << DESC_NPAGES_SHIFT;
		desc_set_handle(d, backend_has(&u->tier[tiers[j]], BACKEND_INLINE), handles[j], csums[j]);
		desc_unlock(d, meta_live(m, tiers[j]));
	}
	/* after publishing: swapoff finds the tiers of each descriptor cluster */
	for (size_t j = 0; j < npages; j++)
		if (!j || tiers[j] != tiers[j - 1] || (id + (uint32_t)j) % DESC_CLUSTER == 0)
			desc_note_tier(&u->descs, id + (uint32_t)j, tiers[j]);
	atomic_fetch_add(&u->stores, 1);
	atomic_fetch_add(&u->folios, 1);
	*idp = id;
	return 0;

out_undo:
	store_undo(u, id, i, tiers, handles);
	desc_free(&u->descs, id, (unsigned)npages);
	atomic_fetch_add(&u->store_failures, 1);
	if (err == -ENOSPC)
		return err_set(err, "no tier took page %zu of the folio (full or incompressible everywhere)",
			       i);
	return err_set(err, "no tier took page %zu of the folio: tier \"%s\" failed (%s)", i,
		       u->tier[err_tier].spec, strerror(-err));
}

/* The head descriptor's meta of folio @id, or 0 when @id is not a folio. */
static uint32_t folio_meta(struct uswap *u, uswap_id_t id)
{
	uint32_t m;

	if (!desc_id_valid(&u->descs, id))
		return 0;
	m = atomic_load_explicit(&desc_get(&u->descs, (uint32_t)id)->meta, memory_order_acquire);
	return m & DESC_HEAD ? m : 0;
}

ssize_t uswap_folio_pages(struct uswap *u, uswap_id_t id)
{
	uint32_t m = folio_meta(u, id);

	return m ? (ssize_t)desc_npages(m) : -ENOENT;
}

static int check_range(struct uswap *u, uswap_id_t id, size_t first, size_t n)
{
	uint32_t m = folio_meta(u, id);

	if (!m)
		return err_set(-ENOENT, "swap id %llu is not live", (unsigned long long)id);
	if (n < 1 || first >= desc_npages(m) || n > desc_npages(m) - first)
		return err_set(-EINVAL, "pages [%zu, +%zu) are not inside folio %llu of %u pages", first, n,
			       (unsigned long long)id, desc_npages(m));
	return 0;
}

/*
 * Load @n pages whose descriptors the caller holds locked (page i: descriptor @owners[i], its meta and
 * handle) into @out, one run of one tier at a time (one load() when the run's descriptors follow each
 * other, else one load_vec()), and check each against its checksum. Return: 0; -EIO or -EBADMSG with
 * *bad the page that failed (counted in io_errors / csum_errors).
 */
static int load_locked(struct uswap *u, const uint32_t *owners, const uint32_t *metas,
		       const uint64_t *handles, size_t n, unsigned char *out, size_t *bad)
{
	for (size_t i = 0; i < n;) {
		struct backend *b = &u->tier[desc_tier(metas[i])];
		size_t run = 1;
		bool follow = true;

		while (i + run < n && desc_tier(metas[i + run]) == desc_tier(metas[i])) {
			follow = follow && owners[i + run] == owners[i] + run;
			run++;
		}
		if (follow ? backend_load(b, owners[i], handles + i, run, out + i * PAGE_SIZE)
			   : backend_load_vec(b, owners + i, handles + i, run, out + i * PAGE_SIZE)) {
			atomic_fetch_add(&u->io_errors, 1);
			*bad = i;
			return -EIO;
		}
		for (size_t j = i; j < i + run && !backend_has(b, BACKEND_INLINE); j++) {
			if (csum_buf(out + j * PAGE_SIZE, PAGE_SIZE) !=
			    desc_get(&u->descs, owners[j])->csum) {
				atomic_fetch_add(&u->csum_errors, 1);
				*bad = j;
				return -EBADMSG;
			}
		}
		i += run;
	}
	return 0;
}

/* The message for load_locked()'s failure @err on page @page of swap id @id, in tier @tier. */
static int load_error(struct uswap *u, int err, unsigned tier, uswap_id_t id, size_t page)
{
	if (err == -EIO)
		return err_set(-EIO, "tier \"%s\" failed to read page %zu of swap id %llu",
			       u->tier[tier].spec, page, (unsigned long long)id);
	return err_set(err, "page %zu of swap id %llu does not match its checksum (tier \"%s\")", page,
		       (unsigned long long)id, u->tier[tier].spec);
}

int uswap_load_pages(struct uswap *u, uswap_id_t id, size_t first, size_t n, void *dst)
{
	uint32_t metas[USWAP_FOLIO_MAX_PAGES], owners[USWAP_FOLIO_MAX_PAGES];
	uint64_t handles[USWAP_FOLIO_MAX_PAGES];
	size_t locked = 0, bad = 0;
	int ret = check_range(u, id, first, n);

	if (ret)
		return ret;
	for (; locked < n; locked++) {
		struct swap_desc *d;

		owners[locked] = (uint32_t)id + (uint32_t)(first + locked);
		d = desc_get(&u->descs, owners[locked]);
		metas[locked] = desc_lock(d);
		if (!(metas[locked] & DESC_LIVE)) {
			locked++;
			ret = err_set(-ENOENT, "page %zu of swap id %llu was freed", first + locked - 1,
				      (unsigned long long)id);
			goto out_unlock;
		}
		handles[locked] =
			desc_handle(d, backend_has(&u->tier[desc_tier(metas[locked])], BACKEND_INLINE));
	}
	ret = load_locked(u, owners, metas, handles, n, dst, &bad);
	if (ret)
		ret = load_error(u, ret, desc_tier(metas[bad]), id, first + bad);
	else
		atomic_fetch_add(&u->loads, 1);
out_unlock:
	for (size_t j = 0; j < locked; j++)
		desc_unlock(desc_get(&u->descs, owners[j]), metas[j]);
	return ret;
}

ssize_t uswap_load_vec(struct uswap *u, const uswap_id_t *ids, const uint32_t *idx, size_t n, void *dst)
{
	uint32_t metas[USWAP_FOLIO_MAX_PAGES], owners[USWAP_FOLIO_MAX_PAGES];
	uint64_t handles[USWAP_FOLIO_MAX_PAGES];
	size_t locked = 0, bad = 0;
	int ret;

	if (n > USWAP_FOLIO_MAX_PAGES)
		n = USWAP_FOLIO_MAX_PAGES;
	for (; locked < n; locked++) {
		uint32_t m = folio_meta(u, ids[locked]);
		struct swap_desc *d;

		if (!m || idx[locked] >= desc_npages(m))
			break;
		owners[locked] = (uint32_t)ids[locked] + idx[locked];
		d = desc_get(&u->descs, owners[locked]);
		if (!desc_trylock(d, &metas[locked]))
			break;
		if (!(metas[locked] & DESC_LIVE)) {
			desc_unlock(d, metas[locked]);
			break;
		}
		handles[locked] =
			desc_handle(d, backend_has(&u->tier[desc_tier(metas[locked])], BACKEND_INLINE));
	}
	if (!locked)
		return 0;
	ret = load_locked(u, owners, metas, handles, locked, dst, &bad);
	if (ret)
		ret = load_error(u, ret, desc_tier(metas[bad]), ids[bad], idx[bad]);
	for (size_t i = 0; i < locked; i++) {
		if (!ret && (!i || ids[i] != ids[i - 1]))
			atomic_fetch_add(&u->loads, 1);
		desc_unlock(desc_get(&u->descs, owners[i]), metas[i]);
	}
	return ret ? ret : (ssize_t)locked;
}

int uswap_load(struct uswap *u, uswap_id_t id, void *dst, size_t npages)
{
	uint32_t m = folio_meta(u, id);

	if (!m)
		return err_set(-ENOENT, "swap id %llu is not live", (unsigned long long)id);
	if (npages != desc_npages(m))
		return err_set(-EINVAL, "folio %llu has %u pages, not %zu", (unsigned long long)id,
			       desc_npages(m), npages);
	return uswap_load_pages(u, id, 0, npages, dst);
}

int uswap_free_pages(struct uswap *u, uswap_id_t id, size_t first, size_t n)
{
	struct swap_desc *head;
	uint32_t m, npages;
	int ret = check_range(u, id, first, n);

	if (ret)
		return ret;
	for (size_t j = first; j < first + n; j++) {
		struct swap_desc *d = desc_get(&u->descs, (uint32_t)(id + j));
		struct backend *b;

		m = desc_lock(d);
		if (!(m & DESC_LIVE)) {
			desc_unlock(d, m);
			continue;
		}
		b = &u->tier[desc_tier(m)];
		if (backend_has(b, BACKEND_INLINE))
			atomic_fetch_sub(&b->nr_pages, 1);
		else
			backend_release(b, (uint32_t)(id + j), d->handle);
		desc_unlock(d, m & ~DESC_LIVE);
	}
	/* The folio ends with its last live page; whoever clears DESC_HEAD returns the run. */
	head = desc_get(&u->descs, (uint32_t)id);
	m = desc_lock(head);
	npages = desc_npages(m);
	if (!(m & DESC_HEAD)) {
		desc_unlock(head, m);
		return 0;
	}
	for (uint32_t j = 0; j < npages; j++) {
		if (atomic_load(&desc_get(&u->descs, (uint32_t)id + j)->meta) & DESC_LIVE && j) {
			desc_unlock(head, m);
			return 0;
		}
	}
	if (m & DESC_LIVE) {
		desc_unlock(head, m);
		return 0;
	}
	desc_unlock(head, m & ~(DESC_HEAD | DESC_NPAGES_MASK));
	desc_free(&u->descs, (uint32_t)id, npages);
	atomic_fetch_add(&u->frees, 1);
	atomic_fetch_sub(&u->folios, 1);
	return 0;
}

int uswap_free(struct uswap *u, uswap_id_t id)
{
	ssize_t n = uswap_folio_pages(u, id);

	if (n < 0)
		return err_set((int)n, "swap id %llu is not live", (unsigned long long)id);
	return uswap_free_pages(u, id, 0, (size_t)n);
}

int64_t uswap_mem_capacity(struct uswap *u, uint64_t bytes)
{
	uint64_t cap = 0;

	for (unsigned t = 0; t < u->nr_tiers; t++)
		cap += backend_set_capacity(&u->tier[t], bytes);
	return cap ? (int64_t)cap : -EOPNOTSUPP;
}

uint64_t uswap_tier_loads(struct uswap *u, unsigned tier)
{
	return tier < u->nr_tiers ? atomic_load_explicit(&u->tier[tier].loads, memory_order_relaxed) : 0;
}

uint64_t uswap_mem_bytes(struct uswap *u)
{
	uint64_t bytes = 0;

	for (unsigned t = 0; t < u->nr_tiers; t++)
		if (u->tier[t].ops->mem_bytes)
			bytes += u->tier[t].ops->mem_bytes(&u->tier[t]);
	return bytes;
}

int uswap_stats(struct uswap *u, struct uswap_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->folios = atomic_load(&u->folios);
	st->stores = atomic_load(&u->stores);
	st->loads = atomic_load(&u->loads);
	st->frees = atomic_load(&u->frees);
	st->store_failures = atomic_load(&u->store_failures);
	st->csum_errors = atomic_load(&u->csum_errors);
	st->io_errors = atomic_load(&u->io_errors);
	pthread_mutex_lock(&u->descs.lock);
	st->desc_bytes = desc_table_bytes(&u->descs);
	pthread_mutex_unlock(&u->descs.lock);
	st->meta_bytes = st->desc_bytes;
	st->nr_tiers = u->nr_tiers;
	for (unsigned t = 0; t < u->nr_tiers; t++) {
		backend_stats(&u->tier[t], &st->tier[t]);
		st->pages += st->tier[t].pages;
		st->meta_bytes += st->tier[t].meta_bytes;
	}
	return 0;
}
