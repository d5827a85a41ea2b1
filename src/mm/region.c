/*
 * region.c - the region table and per-page state: adding, slicing, moving and forgetting regions,
 * folio locks, and releasing what pages hold.
 *
 * A region's bookkeeping (the struct, its page words and folio words) lives in one mapping of mm's
 * own, never in a registered range and never from malloc: a fault handler that touched registered
 * memory would wait on itself, and a preloaded program may serve malloc from registered memory.
 * Folios sit on the absolute folio-size grid of the address space, so that slicing a region (a partial
 * munmap) keeps every folio where it was; a region edge may cut a folio short.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "mm/mm.h"
#include "mm/uffd.h"
#include "util/err.h"
#include "util/alloc.h"

/*
 * mm's own memory (page and folio words, shadow ranges, staging): left out of a core dump
 * (MADV_DONTDUMP), where it was gigabytes of mostly unwritten pages that say nothing of the program.
 */
#ifdef __SANITIZE_THREAD__
/* TSan must see the mapping calls (no preload in its builds): an address reused unseen is a "race". */
#define mm_mmap_call(len)                                                                                    \
	(long)mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
#define mm_munmap_call(p, len) munmap(p, len)
#else
#define mm_mmap_call(len)                                                                                    \
	syscall(SYS_mmap, NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,    \
		-1, 0)
#define mm_munmap_call(p, len) syscall(SYS_munmap, p, len)
#endif

void *mm_map_mem(size_t len)
{
	long p = mm_mmap_call(len);

	if (p == -1)
		return NULL;
	syscall(SYS_madvise, p, len, MADV_DONTDUMP);
	return (void *)p;
}

void mm_unmap_mem(void *p, size_t len)
{
	if (p)
		mm_munmap_call(p, len);
}

static size_t round_page(size_t n)
{
	return (n + MM_PAGE - 1) & ~(MM_PAGE - 1);
}

/* ---- folio locks: a bit in the folio word, waiters sleep on the word ---- */

static void futex_wait(_Atomic uint32_t *w, uint32_t val)
{
	syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *w)
{
	syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

bool folio_trylock(_Atomic uint32_t *f)
{
	uint32_t v = atomic_load_explicit(f, memory_order_relaxed);

	while (!(v & FL_LOCK))
		if (atomic_compare_exchange_weak_explicit(f, &v, v | FL_LOCK, memory_order_acquire,
							  memory_order_relaxed))
			return true;
	return false;
}

void folio_lock(_Atomic uint32_t *f)
{
	for (int spins = 0;; spins++) {
		uint32_t v = atomic_load_explicit(f, memory_order_relaxed);

		if (!(v & FL_LOCK)) {
			if (atomic_compare_exchange_weak_explicit(f, &v, v | FL_LOCK, memory_order_acquire,
								  memory_order_relaxed))
				return;
			continue;
		}
		if (spins < 100) {
			__builtin_ia32_pause();
			continue;
		}
		if (!(v & FL_WAIT) && !atomic_compare_exchange_weak(f, &v, v | FL_WAIT))
			continue;
		futex_wait(f, v | FL_WAIT);
	}
}

void folio_unlock(_Atomic uint32_t *f)
{
	uint32_t v = atomic_fetch_and_explicit(f, ~(FL_LOCK | FL_WAIT), memory_order_release);

	if (v & FL_WAIT)
		futex_wake_all(f);
}

static uint32_t fl_swapped(uint32_t f)
{
	return f >> FL_NSWAP_SHIFT & FL_NMASK;
}

static uint32_t fl_clean(uint32_t f)
{
	return f >> FL_NCLEAN_SHIFT & FL_NMASK;
}

void folio_summarize(struct uswap_mm *m, struct mm_region *r, size_t fi)
{
	size_t first, end;
	uint32_t set = 0, swapped = 0, clean = 0, old;

	region_folio_pages(r, fi, &first, &end);
	for (size_t i = first; i < end; i++) {
		unsigned k = pg_kind(r->pages[i]);

		if (k == PG_PRESENT)
			set |= FL_PRESENT;
		else if (k == PG_SHADOW)
			set |= FL_SHADOW;
		else if (k == PG_SWAPPED)
			swapped++;
		clean += k != PG_SWAPPED && (r->pages[i] & PG_CLEAN);
	}
	if (swapped)
		set |= FL_SWAPPED;
	set |= swapped << FL_NSWAP_SHIFT | clean << FL_NCLEAN_SHIFT;
	/* Others change only the lock and reference bits of the word meanwhile. */
	old = atomic_fetch_and(&r->folios[fi], ~(FL_PRESENT | FL_SHADOW | FL_SWAPPED | FL_COUNTS) | set);
	atomic_fetch_or(&r->folios[fi], set);
	if (set & (FL_PRESENT | FL_SHADOW)) {
		/* after the folio word: a hand that clears the bit and looks again sees one or the other */
		_Atomic uint64_t *g = &r->groups[fi / FOLIO_GROUP / 64];
		uint64_t bit = 1ull << (fi / FOLIO_GROUP % 64);

		if (!(atomic_load(g) & bit))
			atomic_fetch_or(g, bit);
	}
	/* Unsigned sums: a difference below zero wraps and comes back with the other terms. */
	if (swapped != fl_swapped(old))
		atomic_fetch_add(&m->swapped, (uint64_t)swapped - fl_swapped(old));
	if (clean != fl_clean(old))
		atomic_fetch_add(&m->clean, (uint64_t)clean - fl_clean(old));
}

/* ---- releasing what pages hold ---- */

/* Free swap copies of the pages [first, end) for which @want(w) holds, in runs of one swap folio. */
static void free_copies(struct uswap_mm *m, const uint64_t *pages, size_t first, size_t end, bool clean_only)
{
	size_t i = first;

	while (i < end) {
		uint64_t w = pages[i];
		size_t n = 1;

		if (!(clean_only ? (pg_kind(w) != PG_SWAPPED && (w & PG_CLEAN)) : pg_has_copy(w))) {
			i++;
			continue;
		}
		while (i + n < end && pg_has_copy(pages[i + n]) &&
		       (!clean_only || pg_kind(pages[i + n]) != PG_SWAPPED) &&
		       pg_copy_follows(pages[i + n - 1], pages[i + n]))
			n++;
		uswap_free_pages(m->swap, pg_id(w), pg_idx(w), n);
		i += n;
	}
}

void pages_put_copies(struct uswap_mm *m, struct mm_region *r, size_t first, size_t end)
{
	free_copies(m, r->pages, first, end, true);
	for (size_t i = first; i < end; i++)
		if (pg_kind(r->pages[i]) != PG_SWAPPED && (r->pages[i] & PG_CLEAN)) /* a slot stays */
			r->pages[i] &= PG_KIND_MASK | PG_SLOT | PG_SLOT_MASK;
}

void pages_drop(struct uswap_mm *m, struct mm_region *r, size_t first, size_t end)
{
	uint64_t resident = 0, inactive = 0;
	uint32_t slots[64];
	size_t run = 0, ns = 0;

	free_copies(m, r->pages, first, end, false);
	for (size_t i = first; i < end; i++) {
		unsigned k = pg_kind(r->pages[i]);
		bool slotted = k == PG_SHADOW && pg_slotted(r->pages[i]);

		if (k == PG_PRESENT || k == PG_SHADOW)
			resident++;
		inactive += k == PG_SHADOW;
		if (k == PG_SHADOW && !slotted) {
			run++;
		} else if (run) {
			umadvise((void *)region_shadow(r, i - run), run * MM_PAGE, MADV_DONTNEED);
			run = 0;
		}
		if (slotted) {
			slots[ns++] = pg_slot(r->pages[i]);
			if (ns == 64) {
				slot_put(m, slots, ns);
				ns = 0;
			}
		}
		if (r->pages[i]) /* a sparse region's untouched words stay untouched memory */
			r->pages[i] = 0;
	}
	if (run)
		umadvise((void *)region_shadow(r, end - run), run * MM_PAGE, MADV_DONTNEED);
	if (ns)
		slot_put(m, slots, ns);
	atomic_fetch_sub(&m->resident, resident);
	atomic_fetch_sub(&m->inactive, inactive);
}

/*
 * The copies of folio @fi's clean pages are stale from now on: drop them and lift the folio's write
 * protection. *had: it had clean pages. Context: folio locked. Return: 0 (waiters woken) or -errno.
 */
int folio_unprotect(struct uswap_mm *m, struct mm_region *r, size_t fi, bool *had)
{
	size_t first, end;

	*had = false;
	region_folio_pages(r, fi, &first, &end);
	for (size_t i = first; i < end && !*had; i++)
		*had = pg_kind(r->pages[i]) == PG_PRESENT && (r->pages[i] & PG_CLEAN);
	if (*had)
		pages_put_copies(m, r, first, end);
	return uffd_unprotect(m->uffd, region_addr(r, first), (end - first) * MM_PAGE);
}

void region_unprotect(struct uswap_mm *m, uintptr_t start, uintptr_t end)
{
	for (uintptr_t a = start; a < end;) {
		struct mm_region *r;
		size_t fi, first, fend;
		bool had;

		pthread_rwlock_rdlock(&m->tbl_lock);
		r = region_find(m, a);
		if (!r) {
			pthread_rwlock_unlock(&m->tbl_lock);
			return;
		}
		fi = region_folio(r, a);
		region_folio_pages(r, fi, &first, &fend);
		folio_lock(&r->folios[fi]);
		folio_unprotect(m, r, fi, &had);
		folio_summarize(m, r, fi);
		folio_unlock(&r->folios[fi]);
		a = region_addr(r, fend);
		pthread_rwlock_unlock(&m->tbl_lock);
	}
}

/*
 * Zap @n ranges of our own address space (shadow pages, or program pages already copied to the
 * shadow) with one process_madvise(): one TLB flush for all of them.
 */
void ranges_zap(struct uswap_mm *m, const struct iovec *iov, unsigned n)
{
	size_t total = 0;
	ssize_t done = -1;

	for (unsigned i = 0; i < n; i++)
		total += iov[i].iov_len;
	if (m->pidfd_self) {
		done = syscall(SYS_process_madvise, PIDFD_SELF_THREAD_GROUP, iov, n, MADV_DONTNEED, 0);
	} else if (n > 1 && m->have_pidfd) {
		int pidfd = (int)syscall(SYS_pidfd_open, m->pid, 0);

		if (pidfd >= 0) {
			done = syscall(SYS_process_madvise, pidfd, iov, n, MADV_DONTNEED, 0);
			close(pidfd);
		}
	}
	if (done == (ssize_t)total)
		return;
	/* A kernel without DONTNEED in process_madvise (before 6.13), or a partial result. */
	for (unsigned i = 0; i < n; i++)
		umadvise(iov[i].iov_base, iov[i].iov_len, MADV_DONTNEED);
}

/* ---- the slot store ---- */

/*
 * Warm free slots kept beyond those in use: what eviction frees between two refills of the inactive
 * list (a round evicts 64 pages, a refill demotes 128 folios), a 16th of the inactive target, at
 * least 128, at most 1024 (4 MiB). They are memory outside the limit, like mm's own metadata.
 */
static uint32_t slot_spare_max(struct uswap_mm *m)
{
	uint64_t t = atomic_load(&m->inactive_target_pages) / 16;

	return t < 128 ? 128 : t > 1024 ? 1024 : (uint32_t)t;
}

/*
 * Slots for half the limit (the inactive list is at most half of it; no limit yet: SLOTS_MAX), at
 * least 4096 (16 MiB), at most SLOTS_MAX; and at most a 64th of the address space an RLIMIT_AS leaves. When the limit grows past
 * what the store holds, demotion goes on into the region's shadow range (UFFDIO_MOVE).
 */
static uint32_t slot_count(struct uswap_mm *m)
{
	uint64_t n = atomic_load(&m->limit_pages) ? atomic_load(&m->limit_pages) / 2 : SLOTS_MAX;
	struct rlimit rl;

	if (!getrlimit(RLIMIT_AS, &rl) && rl.rlim_cur != RLIM_INFINITY && n > rl.rlim_cur / 64 / MM_PAGE)
		n = rl.rlim_cur / 64 / MM_PAGE;
	return n < 4096 ? 4096 : n > SLOTS_MAX ? SLOTS_MAX : (uint32_t)n;
}

/*
 * The store works only where process_vm_readv() on ourselves does (a seccomp filter may refuse it):
 * tried on its first slot, which stays warm.
 */
int slot_init(struct uswap_mm *m)
{
	struct iovec to, from = {.iov_base = m->zero, .iov_len = MM_PAGE};

	m->slot_max = slot_count(m);
	m->slot_base = mm_map_mem((size_t)m->slot_max * MM_PAGE);
	m->slot_stack = mm_map_mem(m->slot_max * sizeof(uint32_t));
	if (!m->slot_base || !m->slot_stack)
		goto none;
	umadvise(m->slot_base, (size_t)m->slot_max * MM_PAGE, MADV_NOHUGEPAGE);
	umadvise(m->slot_base, (size_t)m->slot_max * MM_PAGE, MADV_DONTFORK);
	to = (struct iovec){.iov_base = m->slot_base, .iov_len = MM_PAGE};
	if (process_vm_readv(m->pid, &to, 1, &from, 1, 0) != (ssize_t)MM_PAGE)
		goto none;
	pthread_mutex_init(&m->slot_lock, NULL);
	m->slot_stack[0] = 0;
	m->slot_warm = 1;
	m->slot_next = 1;
	return 0;
none:
	slot_fini(m);
	return -EOPNOTSUPP;
}

void slot_fini(struct uswap_mm *m)
{
	if (m->slot_base && m->slot_stack)
		pthread_mutex_destroy(&m->slot_lock);
	mm_unmap_mem(m->slot_base, (size_t)m->slot_max * MM_PAGE);
	mm_unmap_mem(m->slot_stack, m->slot_max * sizeof(uint32_t));
	m->slot_base = NULL;
	m->slot_stack = NULL;
}

/* Ascending, in place; at most 64 slots (qsort() may call malloc(), which a handler must not). */
static void slots_sort(uint32_t *s, size_t n)
{
	for (size_t i = 1; i < n; i++) {
		uint32_t v = s[i];
		size_t j = i;

		for (; j && s[j - 1] > v; j--)
			s[j] = s[j - 1];
		s[j] = v;
	}
}

size_t slot_get(struct uswap_mm *m, size_t n, uint32_t *out)
{
	size_t k = 0;

	pthread_mutex_lock(&m->slot_lock);
	while (k < n && m->slot_warm)
		out[k++] = m->slot_stack[--m->slot_warm];
	while (k < n && m->slot_cold)
		out[k++] = m->slot_stack[m->slot_max - m->slot_cold--];
	while (k < n && m->slot_next < m->slot_max)
		out[k++] = m->slot_next++;
	pthread_mutex_unlock(&m->slot_lock);
	slots_sort(out, k);
	return k;
}

void slot_put(struct uswap_mm *m, const uint32_t *s, size_t n)
{
	uint32_t spare = slot_spare_max(m), zap[64];
	struct iovec iov[64];

	pthread_mutex_lock(&m->slot_lock);
	for (size_t i = 0; i < n; i++)
		m->slot_stack[m->slot_warm++] = s[i];
	/* Past twice the spare, back down to it: the extra slots' pages go, 64 slots a zap. */
	if (m->slot_warm <= 2 * spare) {
		pthread_mutex_unlock(&m->slot_lock);
		return;
	}
	while (m->slot_warm > spare) {
		unsigned nz = 0, ni = 0;

		while (nz < 64 && m->slot_warm > spare)
			zap[nz++] = m->slot_stack[--m->slot_warm];
		pthread_mutex_unlock(&m->slot_lock);
		slots_sort(zap, nz);
		for (unsigned j = 0; j < nz; j++) {
			if (ni && zap[j] == zap[j - 1] + 1) {
				iov[ni - 1].iov_len += MM_PAGE;
			} else {
				iov[ni].iov_base = (void *)slot_addr(m, zap[j]);
				iov[ni++].iov_len = MM_PAGE;
			}
		}
		ranges_zap(m, iov, ni);
		pthread_mutex_lock(&m->slot_lock);
		for (unsigned j = 0; j < nz; j++)
			m->slot_stack[m->slot_max - ++m->slot_cold] = zap[j];
	}
	pthread_mutex_unlock(&m->slot_lock);
}

/* ---- the table ---- */

int region_table_init(struct uswap_mm *m)
{
	pthread_rwlockattr_t a;

	pthread_rwlockattr_init(&a);
	/* Faults and reclaim read all the time; an event that must change the table would starve. */
	pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&m->tbl_lock, &a);
	pthread_rwlockattr_destroy(&a);
	m->tbl_cap = 64;
	m->tbl = mm_map_mem(m->tbl_cap * sizeof(*m->tbl));
	if (!m->tbl)
		return -ENOMEM;
	atomic_fetch_add(&m->meta_bytes, m->tbl_cap * sizeof(*m->tbl));
	return 0;
}

static size_t nr_groups_words(size_t nr_folios)
{
	return (nr_folios + 64 * FOLIO_GROUP - 1) / (64 * FOLIO_GROUP);
}

static size_t region_mem_bytes(size_t nr_pages, size_t nr_folios)
{
	return round_page(sizeof(struct mm_region) + nr_pages * sizeof(uint64_t) +
			  nr_groups_words(nr_folios) * sizeof(uint64_t) + nr_folios * sizeof(uint32_t));
}

/* The region's pages leave the instance's totals (its slices, if any, were counted when made). */
static void region_free(struct uswap_mm *m, struct mm_region *r)
{
	size_t bytes = region_mem_bytes(r->nr_pages, r->nr_folios);
	uint64_t swapped = 0, clean = 0;

	for (size_t fi = 0; fi < r->nr_folios; fi++) {
		uint32_t f = atomic_load_explicit(&r->folios[fi], memory_order_relaxed);

		swapped += fl_swapped(f);
		clean += fl_clean(f);
	}
	atomic_fetch_sub(&m->swapped, swapped);
	atomic_fetch_sub(&m->clean, clean);

	atomic_fetch_sub(&m->meta_bytes, bytes);
	mm_unmap_mem(r, bytes);
}

void region_table_destroy(struct uswap_mm *m)
{
	for (unsigned i = 0; i < m->nr_regions; i++)
		region_free(m, m->tbl[i]);
	mm_unmap_mem(m->tbl, m->tbl_cap * sizeof(*m->tbl));
	m->tbl = NULL;
	m->nr_regions = 0;
	pthread_rwlock_destroy(&m->tbl_lock);
}

unsigned region_after(struct uswap_mm *m, uintptr_t addr)
{
	unsigned lo = 0, hi = m->nr_regions;

	while (lo < hi) {
		unsigned mid = (lo + hi) / 2;

		if (m->tbl[mid]->end <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

struct mm_region *region_find(struct uswap_mm *m, uintptr_t addr)
{
	unsigned i = region_after(m, addr);

	return i < m->nr_regions && m->tbl[i]->start <= addr ? m->tbl[i] : NULL;
}

static int table_insert(struct uswap_mm *m, struct mm_region *r)
{
	unsigned i;

	if (m->nr_regions == m->tbl_cap) {
		unsigned cap = m->tbl_cap * 2;
		struct mm_region **t = mm_map_mem(cap * sizeof(*t));

		if (!t)
			return -ENOMEM;
		memcpy(t, m->tbl, m->nr_regions * sizeof(*t));
		mm_unmap_mem(m->tbl, m->tbl_cap * sizeof(*t));
		atomic_fetch_add(&m->meta_bytes, (cap - m->tbl_cap) * sizeof(*t));
		m->tbl = t;
		m->tbl_cap = cap;
	}
	i = region_after(m, r->start);
	memmove(m->tbl + i + 1, m->tbl + i, (m->nr_regions - i) * sizeof(*m->tbl));
	m->tbl[i] = r;
	m->nr_regions++;
	return 0;
}

static void table_remove(struct uswap_mm *m, struct mm_region *r)
{
	unsigned i = region_after(m, r->start);

	if (i < m->nr_regions && m->tbl[i] == r) {
		memmove(m->tbl + i, m->tbl + i + 1, (m->nr_regions - i - 1) * sizeof(*m->tbl));
		m->nr_regions--;
	}
}

/* A region struct with page and folio words for [start, end), all zero (NONE, unlocked). */
static struct mm_region *region_alloc(struct uswap_mm *m, uintptr_t start, uintptr_t end,
				      unsigned folio_shift)
{
	size_t fbytes = MM_PAGE << folio_shift;
	uintptr_t fbase = start & ~(fbytes - 1);
	size_t nr_pages = (end - start) >> MM_PAGE_SHIFT;
	size_t nr_folios = (end - fbase + fbytes - 1) / fbytes;
	size_t bytes = region_mem_bytes(nr_pages, nr_folios);
	struct mm_region *r = mm_map_mem(bytes);

	if (!r)
		return NULL;
	atomic_fetch_add(&m->meta_bytes, bytes);
	r->start = start;
	r->end = end;
	r->fbase = fbase;
	r->folio_shift = folio_shift;
	r->nr_pages = nr_pages;
	r->nr_folios = nr_folios;
	r->pages = (uint64_t *)(r + 1);
	r->groups = (_Atomic uint64_t *)(r->pages + nr_pages);
	r->folios = (_Atomic uint32_t *)(r->groups + nr_groups_words(nr_folios));
	r->seq = atomic_fetch_add(&m->seq, 1) + 1;
	return r;
}

/*
 * folio_summarize() the folios of @r that [a, b) touches. Context: tbl_lock held for writing, or @r
 * not in the table yet.
 */
static void range_summarize(struct uswap_mm *m, struct mm_region *r, uintptr_t a, uintptr_t b)
{
	for (size_t fi = region_folio(r, a); fi <= region_folio(r, b - 1); fi++)
		folio_summarize(m, r, fi);
}

/* Pages of [start, end) the kernel holds (present, or in its own swap): PRESENT for us. */
static uint64_t scan_present(struct uswap_mm *m, struct mm_region *r)
{
	struct page_region vec[64];
	uint64_t n = 0;
	uintptr_t at = r->start;
	int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return 0;
	while (at < r->end) {
		struct pm_scan_arg a = {
			.size = sizeof(a),
			.start = at,
			.end = r->end,
			.vec = (uintptr_t)vec,
			.vec_len = 64,
			.category_anyof_mask = PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
			.return_mask = PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
		};
		long nr = ioctl(fd, PAGEMAP_SCAN, &a);

		if (nr < 0)
			break;
		for (long i = 0; i < nr; i++) {
			for (uintptr_t p = vec[i].start; p < vec[i].end; p += MM_PAGE) {
				r->pages[region_page(r, p)] = PG_PRESENT;
				n++;
			}
			/* only these folios changed: a scan of a big, mostly untouched range stays cheap */
			range_summarize(m, r, vec[i].start, vec[i].end);
		}
		if (a.walk_end <= at)
			break;
		at = a.walk_end;
	}
	close(fd);
	return n;
}

int region_add(struct uswap_mm *m, uintptr_t start, uintptr_t end, unsigned folio_shift, bool owned,
	       bool scan, struct mm_region **out)
{
	const __u64 need = 1ull << _UFFDIO_COPY | 1ull << _UFFDIO_WAKE | 1ull << _UFFDIO_WRITEPROTECT |
			   1ull << _UFFDIO_MOVE;
	size_t len = end - start;
	struct mm_region *r = region_alloc(m, start, end, folio_shift);
	void *shadow;
	int ret;

	if (!r)
		return err_set(-ENOMEM, "no memory for the page state of %zu bytes", len);
	shadow = mm_map_mem(len);
	if (!shadow) {
		ret = err_set(-ENOMEM, "cannot reserve %zu bytes of address space for a shadow range", len);
		goto out_free;
	}
	umadvise(shadow, len, MADV_NOHUGEPAGE);
	/* A fork child never sees inactive pages (they are brought back before fork anyway). */
	umadvise(shadow, len, MADV_DONTFORK);
	ret = uffd_register(m->uffd_shadow, (uintptr_t)shadow, len, UFFDIO_REGISTER_MODE_MISSING,
			    1ull << _UFFDIO_MOVE);
	if (ret) {
		err_set(ret, "cannot register a shadow range with userfaultfd (%s)", strerror(-ret));
		goto out_shadow;
	}
	r->shadow = (uintptr_t)shadow;
	r->owned = owned;
	/* THP would make eviction split huge pages; folios are the unit here. */
	umadvise((void *)start, len, MADV_NOHUGEPAGE);
	ret = uffd_register(m->uffd, start, len, UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP,
			    need);
	if (ret) {
		err_set(ret,
			"cannot register [%#lx, %#lx) with userfaultfd (%s): it must be private anonymous "
			"read-write memory",
			(unsigned long)start, (unsigned long)end, strerror(-ret));
		goto out_shadow;
	}
	if (scan)
		atomic_fetch_add(&m->resident, scan_present(m, r));
	ret = table_insert(m, r);
	if (ret) {
		struct uffdio_range rg = {.start = start, .len = len};

		ioctl(m->uffd, UFFDIO_UNREGISTER, &rg);
		goto out_shadow;
	}
	if (out)
		*out = r;
	return 0;

out_shadow:
	mm_unmap_mem(shadow, len);
out_free:
	region_free(m, r);
	return ret;
}

/*
 * A new region for [a, b) of @r carrying its page states (and shadow pages), placed at a + delta.
 * Folio flags are recomputed for the new grid; locks are free (tbl_lock is held for writing).
 */
static struct mm_region *region_slice(struct uswap_mm *m, struct mm_region *r, uintptr_t a, uintptr_t b,
				      intptr_t delta)
{
	struct mm_region *n = region_alloc(m, a + delta, b + delta, r->folio_shift);

	if (!n)
		return NULL;
	n->shadow = region_shadow(r, region_page(r, a));
	n->owned = r->owned;
	n->seq = r->seq;
	memcpy(n->pages, r->pages + region_page(r, a), n->nr_pages * sizeof(uint64_t));
	for (size_t fi = 0; fi < n->nr_folios; fi++) {
		uintptr_t fa = n->fbase + (fi << (MM_PAGE_SHIFT + n->folio_shift));
		uint32_t ref = FL_REF;

		if (!delta) {
			uintptr_t oa = fa < r->start ? r->start : fa;

			ref = atomic_load(&r->folios[region_folio(r, oa)]) & (FL_REF | FL_PINNED);
		}
		atomic_store(&n->folios[fi], ref);
		folio_summarize(m, n, fi);
	}
	return n;
}

/*
 * Replace @r by its parts outside [a, b) (none, one or two). Return: 0 or -ENOMEM (then @r stays, and
 * the caller's pages inside were already dropped: they read as zero, which is still right).
 */
static int region_cut(struct uswap_mm *m, struct mm_region *r, uintptr_t a, uintptr_t b)
{
	struct mm_region *left = NULL, *right = NULL;

	if (a > r->start && !(left = region_slice(m, r, r->start, a, 0)))
		return -ENOMEM;
	if (b < r->end && !(right = region_slice(m, r, b, r->end, 0))) {
		if (left)
			region_free(m, left);
		return -ENOMEM;
	}
	table_remove(m, r);
	if (left)
		table_insert(m, left);
	if (right)
		table_insert(m, right);
	region_free(m, r);
	return 0;
}

void region_forget(struct uswap_mm *m, uintptr_t start, uintptr_t end)
{
	unsigned i = region_after(m, start);

	while (i < m->nr_regions && m->tbl[i]->start < end) {
		struct mm_region *r = m->tbl[i];
		uintptr_t a = start > r->start ? start : r->start;
		uintptr_t b = end < r->end ? end : r->end;
		uintptr_t sh = region_shadow(r, region_page(r, a));

		pages_drop(m, r, region_page(r, a), region_page(r, b));
		if (region_cut(m, r, a, b)) {
			/* No memory for the parts: @r stays, its pages inside [a, b) dropped. */
			range_summarize(m, r, a, b);
			i++;
			continue;
		}
		/* The shadow of the forgotten part goes with it (uffd_shadow has no events). */
		mm_unmap_mem((void *)sh, b - a);
		i = region_after(m, b);
	}
}

int region_remap(struct uswap_mm *m, uintptr_t from, uintptr_t to, size_t len)
{
	struct mm_region *moved[16];
	unsigned nr = 0, i;
	intptr_t delta = (intptr_t)(to - from);
	uintptr_t end = from + len;
	int ret = 0;

	/* Whatever we still had at the destination was unmapped by the kernel first. */
	region_forget(m, to, to + len);
	i = region_after(m, from);
	while (i < m->nr_regions && m->tbl[i]->start < end && nr < 16) {
		struct mm_region *r = m->tbl[i];
		uintptr_t a = from > r->start ? from : r->start;
		uintptr_t b = end < r->end ? end : r->end;
		struct mm_region *n = region_slice(m, r, a, b, delta);

		if (!n) {
			ret = -ENOMEM;
			pages_drop(m, r, region_page(r, a), region_page(r, b));
		} else {
			moved[nr++] = n;
		}
		/* The data moved with the slice: cut without dropping anything. */
		if (region_cut(m, r, a, b)) {
			/* No memory for the parts: @r stays, and what it had in [a, b) is the slice's. */
			if (n)
				memset(r->pages + region_page(r, a), 0, (b - a) / MM_PAGE * sizeof(uint64_t));
			range_summarize(m, r, a, b);
			i++;
		} else {
			i = region_after(m, b);
		}
	}
	for (unsigned k = 0; k < nr; k++)
		table_insert(m, moved[k]);
	return ret;
}

/*
 * Call @fn for each line of the /proc file @path (newline removed) until it returns nonzero, read
 * without stdio (no malloc: this runs on fault and fork paths); a line longer than the buffer (a
 * long path name) is skipped. Return: what @fn last returned, or -errno if @path cannot be opened.
 */
static int proc_lines(const char *path, int (*fn)(char *line, void *arg), void *arg)
{
	char buf[16384];
	size_t have = 0;
	bool skipping = false; /* in a line longer than the buffer */
	int fd = open(path, O_RDONLY | O_CLOEXEC), ret = 0;

	if (fd < 0)
		return -errno;
	while (!ret) {
		ssize_t n = read(fd, buf + have, sizeof(buf) - 1 - have);
		char *line = buf, *nl;

		if (n <= 0)
			break;
		have += (size_t)n;
		buf[have] = 0;
		while (!ret && (nl = strchr(line, '\n'))) {
			*nl = 0;
			if (skipping)
				skipping = false;
			else
				ret = fn(line, arg);
			line = nl + 1;
		}
		have = (size_t)(buf + have - line);
		if (have == sizeof(buf) - 1) {
			have = 0;
			skipping = true;
		} else {
			memmove(buf, line, have);
		}
	}
	close(fd);
	return ret;
}

struct vma_find {
	uintptr_t addr, start, end;
};

static int vma_find_line(char *line, void *arg)
{
	struct vma_find *v = arg;
	unsigned long s, e;

	if (sscanf(line, "%lx-%lx", &s, &e) != 2 || s > v->addr || v->addr >= e)
		return 0;
	v->start = s;
	v->end = e;
	return 1;
}

/* The vma containing @addr, from /proc/self/maps. */
static int vma_bounds(uintptr_t addr, uintptr_t *vs, uintptr_t *ve)
{
	struct vma_find v = {.addr = addr};
	int ret = proc_lines("/proc/self/maps", vma_find_line, &v);

	if (ret < 0)
		return ret;
	if (!ret)
		return -ENOENT;
	*vs = v.start;
	*ve = v.end;
	return 0;
}

struct dontfork_scan {
	struct mm_range *out;
	size_t max, nr;
	unsigned long start, end; /* the vma whose lines are being read */
};

static int dontfork_line(char *line, void *arg)
{
	struct dontfork_scan *d = arg;
	unsigned long a, b;

	if (!strncmp(line, "VmFlags:", 8)) {
		if (strstr(line, " dc") && d->end > d->start && d->nr < d->max) {
			if (d->nr && d->out[d->nr - 1].end == d->start)
				d->out[d->nr - 1].end = d->end;
			else
				d->out[d->nr++] = (struct mm_range){.start = d->start, .end = d->end};
		}
	} else if (sscanf(line, "%lx-%lx ", &a, &b) == 2) { /* a vma's first line */
		d->start = a;
		d->end = b;
	}
	return 0;
}

size_t region_dontfork_ranges(struct mm_range *out, size_t max)
{
	struct dontfork_scan d = {.out = out, .max = max};

	proc_lines("/proc/self/smaps", dontfork_line, &d);
	return d.nr;
}

int region_adopt(struct uswap_mm *m, uintptr_t addr, bool grown_only)
{
	uintptr_t vs, ve;
	unsigned i;
	int ret;

	if (region_find(m, addr))
		return 0;
	ret = vma_bounds(addr, &vs, &ve);
	if (ret)
		return ret;
	i = region_after(m, addr);
	/* A vma that grew out of a region holds that region whole. */
	if (grown_only && !(i > 0 && m->tbl[i - 1]->start >= vs) &&
	    !(i < m->nr_regions && m->tbl[i]->end <= ve))
		return -ENOENT;
	if (i > 0 && m->tbl[i - 1]->end > vs)
		vs = m->tbl[i - 1]->end;
	if (i < m->nr_regions && m->tbl[i]->start < ve)
		ve = m->tbl[i]->start;
	return region_add(m, vs, ve, m->folio_shift, false, true, NULL);
}
