/*
 * reclaim.c - keeping resident memory under the limit: a two-handed clock over the folios of all
 * regions, with an inactive list that a touch brings back cheaply.
 *
 * We see no access bits, only faults. So the front hand makes folios fault again: it passes over
 * the folios in address order, gives a folio touched since its last pass (FL_REF, set by every fault)
 * a second chance, and demotes the others: their pages are moved (UFFDIO_MOVE, atomic, so no write
 * can be lost) out of the program's range into the region's shadow range, still in memory. A touch
 * on a demoted folio is a soft fault that moves it back without any load. The back hand follows the
 * front one over the same order and evicts folios still inactive when it reaches them: store through
 * the swap layer, then release the shadow pages. A folio whose pages all still have their swap copy
 * (clean: swapped in by a read and never written since) is released without a store.
 * The inactive list is kept at inactive_target pages; the distance between the hands is the time a
 * folio has to prove it is still in use. This is the kernel's active/inactive scheme (and the BSD
 * two-handed clock) with a fault standing in for the access bit.
 */
#include <errno.h>
#include <sys/mman.h>
#include <time.h>

#include "mm/mm.h"
#include "mm/uffd.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define ROUND_PAGES     64 /* pages evicted per round under reclaim_lock */
#define LOCK_CHUNK      32 /* folios looked at per hold of tbl_lock */
#define MAX_COW         16
#define DIRECT_STALL_MS 10 /* no direct reclaim for this long after a direct round freed nothing */

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

ssize_t reclaim_demote_folio(struct uswap_mm *m, struct mm_region *r, size_t fi, uintptr_t *busy,
			     size_t *busy_len)
{
	size_t first, end, moved = 0;
	int ret = 0;

	region_folio_pages(r, fi, &first, &end);
	for (size_t i = first; i < end && !ret;) {
		size_t n = 0, done, dp;

		while (i + n < end && pg_kind(r->pages[i + n]) == PG_PRESENT)
			n++;
		if (!n) {
			i++;
			continue;
		}
		ret = uffd_move(m->uffd_shadow, region_shadow(r, i), region_addr(r, i), n * MM_PAGE, false,
				&done);
		dp = done / MM_PAGE;
		for (size_t j = 0; j < dp; j++)
			r->pages[i + j] = (r->pages[i + j] & ~PG_KIND_MASK) | PG_SHADOW;
		atomic_fetch_add(&m->inactive, dp);
		moved += dp;
		if (ret == -EBUSY && busy) {
			*busy = region_addr(r, i + dp);
			*busy_len = (n - dp) * MM_PAGE;
		}
		/*
		 * -ENOENT: a hole where we count a page (the kernel zapped it after we handled its REMOVE
		 * event; a touch zero-fills it, see fault_present()) or no vma any more (mremap/munmap whose
		 * event is not applied yet). We cannot tell them apart here, so the page stays as it is.
		 */
		i += n;
	}
	folio_summarize(r, fi);
	if (moved)
		atomic_fetch_add(&m->c.demotions, 1);
	return ret && !moved ? ret : (ssize_t)moved;
}

/* A store no tier took: the folio goes back where it was, dirty and resident. */
static void evict_undo(struct uswap_mm *m, struct mm_region *r, size_t i, size_t n)
{
	size_t done, dp;

	uffd_move(m->uffd, region_addr(r, i), region_shadow(r, i), n * MM_PAGE, false, &done);
	dp = done / MM_PAGE;
	for (size_t j = 0; j < dp; j++)
		r->pages[i + j] = (r->pages[i + j] & ~PG_KIND_MASK) | PG_PRESENT;
	atomic_fetch_sub(&m->inactive, dp);
}

ssize_t reclaim_evict_folio(struct uswap_mm *m, struct mm_region *r, size_t fi)
{
	size_t first, end, freed = 0;
	int ret = 0;

	region_folio_pages(r, fi, &first, &end);
	for (size_t i = first; i < end;) {
		size_t n = 0;
		bool clean = true;
		uswap_id_t id;

		while (i + n < end && pg_kind(r->pages[i + n]) == PG_SHADOW) {
			clean = clean && (r->pages[i + n] & PG_CLEAN) &&
				(!n || pg_copy_follows(r->pages[i + n - 1], r->pages[i + n]));
			n++;
		}
		if (!n) {
			i++;
			continue;
		}
		if (clean) {
			for (size_t j = 0; j < n; j++)
				r->pages[i + j] = (r->pages[i + j] & ~(PG_KIND_MASK | PG_CLEAN)) | PG_SWAPPED;
			atomic_fetch_add(&m->c.clean_evictions, 1);
		} else {
			ret = uswap_store(m->swap, (const void *)region_shadow(r, i), n, &id);
			if (ret) {
				atomic_fetch_add(&m->c.store_failures, 1);
				evict_undo(m, r, i, n);
				atomic_fetch_or(&r->folios[fi], FL_REF);
				break;
			}
			pages_put_copies(m, r, i, i + n);
			for (size_t j = 0; j < n; j++)
				r->pages[i + j] = pg_make(PG_SWAPPED, (uint32_t)id, (unsigned)j, false);
		}
		madvise((void *)region_shadow(r, i), n * MM_PAGE, MADV_DONTNEED);
		atomic_fetch_sub(&m->resident, n);
		atomic_fetch_sub(&m->inactive, n);
		atomic_fetch_add(&m->c.evicted_pages, n);
		freed += n;
		i += n;
	}
	folio_summarize(r, fi);
	if (freed)
		atomic_fetch_add(&m->c.evictions, 1);
	return ret && !freed ? ret : (ssize_t)freed;
}

/* The folio of region slot @ri at or after @addr; false when the table is empty. */
static bool hand_seek(struct uswap_mm *m, uintptr_t addr, unsigned *ri, size_t *fi)
{
	if (!m->nr_regions)
		return false;
	*ri = region_after(m, addr);
	if (*ri == m->nr_regions) {
		*ri = 0;
		addr = 0;
	}
	*fi = region_folio(m->tbl[*ri], addr > m->tbl[*ri]->start ? addr : m->tbl[*ri]->start);
	return true;
}

static uintptr_t hand_addr(struct mm_region *r, size_t fi)
{
	uintptr_t a = r->fbase + (fi << (MM_PAGE_SHIFT + r->folio_shift));

	return a < r->start ? r->start : a;
}

struct hand_result {
	size_t pages;   /* demoted or evicted */
	size_t touched; /* folios whose reference bit was cleared: progress of a kind */
	uintptr_t cow[MAX_COW];
	size_t cow_len[MAX_COW];
	unsigned nr_cow;
};

/*
 * Advance a hand over up to @max_scan folios or until @want pages were handled. @front: demote
 * present folios not referenced since the last pass; else evict inactive folios.
 */
static void hand_advance(struct uswap_mm *m, bool front, size_t want, size_t max_scan,
			 struct hand_result *res)
{
	uintptr_t *hand = front ? &m->front : &m->back;
	size_t scanned = 0;

	while (res->pages < want && scanned < max_scan && !atomic_load(&m->forking)) {
		unsigned ri, chunk = 0;
		size_t fi;

		pthread_rwlock_rdlock(&m->tbl_lock);
		if (!hand_seek(m, *hand, &ri, &fi)) {
			pthread_rwlock_unlock(&m->tbl_lock);
			return;
		}
		while (chunk < LOCK_CHUNK && res->pages < want && scanned < max_scan) {
			struct mm_region *r = m->tbl[ri];
			_Atomic uint32_t *f = &r->folios[fi];
			uint32_t v = atomic_load(f);
			ssize_t got;

			scanned++;
			chunk++;
			if (front && (v & FL_PRESENT)) {
				if (v & (FL_PINNED | FL_REF)) {
					atomic_fetch_and(f, ~(FL_PINNED | FL_REF));
					res->touched++;
				} else if (folio_trylock(f)) {
					uintptr_t ba = 0;
					size_t bl = 0;

					got = reclaim_demote_folio(m, r, fi, &ba, &bl);
					if (bl && res->nr_cow < MAX_COW) {
						res->cow[res->nr_cow] = ba;
						res->cow_len[res->nr_cow++] = bl;
					}
					if (got == -EBUSY) {
						atomic_fetch_or(f, FL_PINNED);
					} else if (got > 0) {
						res->pages += (size_t)got;
					}
					folio_unlock(f);
				}
			} else if (!front && (v & FL_SHADOW) && folio_trylock(f)) {
				got = reclaim_evict_folio(m, r, fi);
				if (got > 0)
					res->pages += (size_t)got;
				folio_unlock(f);
			}
			if (++fi == r->nr_folios) {
				ri = ri + 1 == m->nr_regions ? 0 : ri + 1;
				fi = 0;
			}
		}
		*hand = hand_addr(m->tbl[ri], fi);
		pthread_rwlock_unlock(&m->tbl_lock);
	}
}

/*
 * Pages shared with a fork child (or read-only since a fork) cannot be moved (-EBUSY): a write fault
 * makes them ours again. MADV_POPULATE_WRITE does that without changing a byte, and fails harmlessly
 * on an unmapped range. A write-protected clean page raises a WP fault (its copy is dropped).
 * Context: the reclaimer thread only, no lock held: it may fault, and a handler must be free to
 * answer, so a handler in direct reclaim never does it.
 */
static void cow_break(struct hand_result *res)
{
	for (unsigned i = 0; i < res->nr_cow; i++)
		madvise((void *)res->cow[i], res->cow_len[i], MADV_POPULATE_WRITE);
	res->nr_cow = 0;
}

/*
 * Direct reclaim (a fault handler over the hard limit) does one round: waiting for the hands is what
 * throttles a program that faults faster than the reclaimer frees, and one round bounds the time the
 * handler serves no faults. A direct round that makes no progress at all (every folio pinned, or no
 * tier takes them) turns direct reclaim off for a while, so that faults do not pay for a scan that
 * cannot succeed; the resident size then stays above the limit until something can go.
 */
size_t reclaim_run(struct uswap_mm *m, uint64_t target, bool direct)
{
	size_t freed = 0;
	unsigned idle = 0;

	if (direct && now_ms() < atomic_load(&m->direct_stall_until_ms))
		return 0;
	while (atomic_load(&m->resident) > target && idle < 3 && !atomic_load(&m->forking)) {
		uint64_t res = atomic_load(&m->resident), inact, want;
		struct hand_result front = {0}, back = {0};

		want = res - target < ROUND_PAGES ? res - target : ROUND_PAGES;
		pthread_mutex_lock(&m->reclaim_lock);
		inact = atomic_load(&m->inactive);
		if (inact < atomic_load(&m->inactive_target) + want) {
			uint64_t fwant = atomic_load(&m->inactive_target) + want - inact;

			/* A fault is waiting behind direct reclaim: refill the inactive list only a little. */
			if (direct && fwant > 2 * want)
				fwant = 2 * want;
			hand_advance(m, true, fwant, 4 * fwant + 64, &front);
		}
		hand_advance(m, false, want, 4 * want + 64, &back);
		pthread_mutex_unlock(&m->reclaim_lock);
		if (!direct)
			cow_break(&front);
		freed += back.pages;
		if (direct) {
			if (!back.pages && !front.pages && !front.touched)
				atomic_store(&m->direct_stall_until_ms, now_ms() + DIRECT_STALL_MS);
			break;
		}
		idle = back.pages || front.pages || front.touched ? 0 : idle + 1;
	}
	return freed;
}

void reclaim_kick(struct uswap_mm *m)
{
	pthread_mutex_lock(&m->kick_lock);
	if (m->reclaim_sleeping)
		pthread_cond_signal(&m->kick);
	pthread_mutex_unlock(&m->kick_lock);
}

static void *reclaimer_main(void *arg)
{
	struct uswap_mm *m = arg;
	pthread_mutex_lock(&m->kick_lock);
	while (!m->stopping) {
		size_t freed;

		if (atomic_load(&m->forking) || atomic_load(&m->resident) <= atomic_load(&m->high)) {
			m->reclaim_sleeping = true;
			pthread_cond_wait(&m->kick, &m->kick_lock);
			m->reclaim_sleeping = false;
			continue;
		}
		pthread_mutex_unlock(&m->kick_lock);
		freed = reclaim_run(m, atomic_load(&m->low), false);
		pthread_mutex_lock(&m->kick_lock);
		if (!freed && !m->stopping && atomic_load(&m->resident) > atomic_load(&m->high)) {
			/* Nothing could go (tiers full, everything pinned): try again a little later. */
			struct timespec ts;

			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 20 * 1000 * 1000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			m->reclaim_sleeping = true;
			pthread_cond_timedwait(&m->kick, &m->kick_lock, &ts);
			m->reclaim_sleeping = false;
		}
	}
	pthread_mutex_unlock(&m->kick_lock);
	return NULL;
}

int reclaim_start(struct uswap_mm *m)
{
	int ret = pthread_create(&m->reclaimer, NULL, reclaimer_main, m);

	if (ret)
		return -ret;
	m->reclaimer_started = true;
	return 0;
}

void reclaim_stop(struct uswap_mm *m)
{
	if (!m->reclaimer_started)
		return;
	pthread_mutex_lock(&m->kick_lock);
	m->stopping = true;
	pthread_cond_signal(&m->kick);
	pthread_mutex_unlock(&m->kick_lock);
	pthread_join(m->reclaimer, NULL);
	m->reclaimer_started = false;
}
