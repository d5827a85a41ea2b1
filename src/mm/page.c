/*
 * page.c - mm's own memory and the state of pages: mapping it, folio locks, folio summaries,
 * releasing what pages hold (swap copies, shadow pages), zapping ranges of our own address space, and
 * the slot store where batched demotion keeps inactive pages. Knows nothing of the region table.
 *
 * Everything here lives in mappings of mm's own, never in a registered range and never from malloc:
 * a fault handler that touched registered memory would wait on itself, and a preloaded program may
 * serve malloc from registered memory.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "mm/mm.h"
#include "mm/uffd.h"
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
