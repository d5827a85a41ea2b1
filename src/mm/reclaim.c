/*
 * reclaim.c - keeping resident memory under the limit: a two-handed clock over the folios of all
 * regions, with an inactive list that a touch brings back cheaply.
 *
 * We see no access bits, only faults. So the front hand makes folios fault again: it passes over
 * the folios in address order, gives a folio touched since its last pass (FL_REF, set by every fault)
 * a second chance, and demotes the others: their pages are moved (UFFDIO_MOVE, atomic, so no write
 * can be lost) out of the program's range into the region's shadow range, still in memory. A touch
 * on a demoted folio is a soft fault that copies it back without any load. The back hand follows the
 * front one over the same order and evicts folios still inactive when it reaches them: store through
 * the swap layer, then release the shadow pages. A folio whose pages all still have their swap copy
 * (clean: swapped in by a read and never written since) is released without a store.
 * The inactive list is kept at inactive_target pages; the distance between the hands is the time a
 * folio has to prove it is still in use. This is the kernel's active/inactive scheme (and the BSD
 * two-handed clock) with a fault standing in for the access bit.
 */
#include <assert.h>
#include <errno.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "mm/mm.h"
#include "mm/uffd.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/thread.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define ROUND_PAGES     64 /* pages evicted per round under reclaim_lock */
#define LOCK_CHUNK      64 /* folios a hand handles per hold of tbl_lock (a batching front hand: 256) */
#define PASS_PER_FOLIO  64 /* folios a hand may pass over (nothing to do there) per folio it may handle */
#define DRY_ROUNDS      8  /* a background run ends after this many rounds evicted nothing */
#define DIRECT_STALL_MS 10 /* no direct reclaim for this long after a direct round freed nothing */
#define BATCH           RELEASE_RANGES /* shadow ranges released together, folios held until then */
#define FRONT_BATCH     WINDOW_FOLIOS  /* the fewest folios a background round demotes, batching */

/*
 * Every change that takes a page away from the program's range or from a shadow range costs a TLB
 * flush, and a flush is an IPI to each CPU running the program: tens of times a page's share of one
 * flush that many pages share (docs/results.md#reclaim). So reclaim moves runs of
 * present pages across folios with one UFFDIO_MOVE each (the kernel flushes once per call; a run
 * ends at a swapped or untouched page, see uffd_move()) and releases the shadow pages of a batch of
 * evicted folios with one process_madvise().
 */
struct release_batch {
	struct iovec iov[BATCH];
	struct mm_region *r[BATCH];
	size_t fi[BATCH];
	unsigned nr_iov, nr_folios;
	size_t pages;
};

/* ---- the limit: watermarks, and the budget that resident pages share with the pool ---- */

void reclaim_set_limit(struct uswap_mm *m, uint64_t limit_pages, unsigned inactive_pct)
{
	uint64_t slack;

	atomic_store(&m->inactive_pct, inactive_pct);
	if (!limit_pages)
		limit_pages = UINT64_MAX / 4;
	slack = limit_pages / 32 > 64 ? limit_pages / 32 : 64;
	if (slack > limit_pages / 2)
		slack = limit_pages / 2;
	atomic_store(&m->limit_pages, limit_pages);
	atomic_store(&m->high_pages, limit_pages - slack / 2);
	atomic_store(&m->low_pages, limit_pages - slack);
	/* No limit, no second chances to keep: nothing is evicted. */
	atomic_store(&m->inactive_target_pages,
		     limit_pages >= UINT64_MAX / 4 ? 0 : limit_pages / 100 * inactive_pct);
}

/*
 * The pool's share of the budget starts at half: at the same total memory as kernel zram, a pool of a
 * quarter left the swap file to serve misses that a larger pool serves many times faster
 * (docs/results.md). It then follows what misses cost on each side of the pool, as the kernel balances
 * its anon and file lists by refault cost, looking every BALANCE_MS: once the tiers below the pool
 * have served no load for IDLE_TURNS looks in a row while the pool served some, the pool holds more
 * than the misses need and its share shrinks by a 16th of the budget (down to an eighth; the resident
 * limit grows by what it gives back), one step per IDLE_TURNS; while the tiers below cost more than
 * the pool (their load time plus a fault's round trip per load), it grows back at once (up to half).
 * A program that has not pushed anything below the pool yet is not idle below it for long. The capacity goes to the pool at once; what it holds beyond goes down by writeback.
 */
#define BALANCE_MS      100
#define POOL_SHARE_STEP 16 /* the share moves by budget / 16 */
#define IDLE_TURNS      10

void reclaim_budget_init(struct uswap_mm *m)
{
	uint64_t budget = atomic_load(&m->budget_pages) * MM_PAGE;
	int64_t cap;

	if (!budget || !m->swap)
		return;
	atomic_store(&m->pool_share, POOL_SHARE_STEP / USWAP_POOL_SHARE_MAX_DIV);
	cap = uswap_mem_capacity(m->swap, budget / USWAP_POOL_SHARE_MAX_DIV);
	atomic_store(&m->pool_target_bytes, cap > 0 ? (uint64_t)cap : 0);
	atomic_store(&m->balance_next_ms, mono_ms() + BALANCE_MS);
}

static void pool_balance(struct uswap_mm *m, uint64_t budget)
{
	uint64_t next = atomic_load(&m->balance_next_ms), now = mono_ms(), mem_ns = 0, mem_loads = 0;
	uint64_t deep_ns = 0, deep_loads = 0, d_mem, d_deep;
	unsigned share;
	struct uswap_stats st;
	bool below = false;

	if (!atomic_load(&m->pool_target_bytes) || now < next || pthread_mutex_trylock(&m->bal_lock))
		return;
	if (now < atomic_load(&m->balance_next_ms)) /* another look just happened */
		goto out_unlock;
	atomic_store(&m->balance_next_ms, now + BALANCE_MS);
	uswap_stats(m->swap, &st);
	for (unsigned t = 0; t < USWAP_MAX_TIERS && st.tier[t].name[0]; t++) {
		if (st.tier[t].in_memory) {
			mem_ns += st.tier[t].load_ns;
			mem_loads += st.tier[t].loads;
			below = true;
		} else if (below) {
			deep_ns += st.tier[t].load_ns;
			deep_loads += st.tier[t].loads;
		}
	}
	d_mem = mem_ns - m->bal_mem_ns + (mem_loads - m->bal_mem_loads) * MM_FAULT_ROUND_NS;
	d_deep = deep_ns - m->bal_deep_ns + (deep_loads - m->bal_deep_loads) * MM_FAULT_ROUND_NS;
	m->bal_mem_ns = mem_ns;
	m->bal_mem_loads = mem_loads;
	m->bal_deep_ns = deep_ns;
	m->bal_deep_loads = deep_loads;
	share = atomic_load(&m->pool_share);
	m->bal_idle = !d_deep && d_mem ? m->bal_idle + 1 : 0;
	if (d_deep > d_mem && share < POOL_SHARE_STEP / USWAP_POOL_SHARE_MAX_DIV) {
		share++;
	} else if (m->bal_idle >= IDLE_TURNS && share > POOL_SHARE_STEP / USWAP_POOL_SHARE_MIN_DIV) {
		share--;
		m->bal_idle = 0;
	} else {
		goto out_unlock;
	}
	atomic_store(&m->pool_share, share);
	atomic_store(&m->pool_target_bytes,
		     (uint64_t)uswap_mem_capacity(m->swap, budget / POOL_SHARE_STEP * share));
out_unlock:
	pthread_mutex_unlock(&m->bal_lock);
}

bool reclaim_budget_apply(struct uswap_mm *m)
{
	uint64_t budget = atomic_load(&m->budget_pages), pool, limit_pages;

	if (!budget || !m->swap)
		return false;
	pool_balance(m, budget * MM_PAGE);
	pool = (uswap_mem_bytes(m->swap) + MM_PAGE - 1) / MM_PAGE;
	limit_pages = budget -
		      (pool < budget / USWAP_POOL_SHARE_MAX_DIV ? pool : budget / USWAP_POOL_SHARE_MAX_DIV);
	if (limit_pages == atomic_load(&m->limit_pages))
		return false;
	reclaim_set_limit(m, limit_pages, atomic_load(&m->inactive_pct));
	return true;
}

/*
 * A new budget keeps the pool's learned share of it (pool_share, in POOL_SHARE_STEPs). (Resetting it
 * to half at each step undid pool_balance() under limit_auto, which moves the budget once a second.)
 */
static void budget_rescale(struct uswap_mm *m)
{
	uint64_t budget = atomic_load(&m->budget_pages) * MM_PAGE;
	unsigned share = atomic_load(&m->pool_share);
	int64_t cap;

	if (!share || !m->swap) {
		reclaim_budget_init(m);
		return;
	}
	cap = uswap_mem_capacity(m->swap, budget / POOL_SHARE_STEP * share);
	atomic_store(&m->pool_target_bytes, cap > 0 ? (uint64_t)cap : 0);
}

void reclaim_limit(struct uswap_mm *m, uint64_t limit_bytes)
{
	reclaim_set_limit(m, mm_pages(limit_bytes), atomic_load(&m->inactive_pct));
	if (m->pool_in_limit) {
		atomic_store(&m->budget_pages, mm_pages(limit_bytes));
		budget_rescale(m);
		reclaim_budget_apply(m);
	}
	if (atomic_load(&m->resident) > atomic_load(&m->high_pages))
		reclaim_kick(m);
}

/*
 * A limit that finds itself (limit_auto), looked at every AUTO_PERIOD_MS by the reclaimer: the time
 * the program's threads waited on swap-ins and soft faults (stall_ns) against the wall time, averaged
 * over the last looks (each look weighs half). While the program grows (what it uses went up by more
 * than 1/64 since the last look) the limit stays. Under half the target share the limit comes down to
 * what the program uses (resident pages, and the pool with pool_in_limit) and below it, by up to
 * AUTO_LOWER_PERMILLE a look, less the nearer the stall is to the target; over the target it goes up
 * at once, by AUTO_RAISE_PERMILLE per multiple of the target (at most AUTO_RAISE_MAX), and stays for
 * AUTO_HOLD looks; in between it stays. A slow descent and a quick, measured retreat, as Senpai does
 * with the kernel's pressure stall figures: the program seldom waits long, and the limit does not
 * swing.
 */
#define AUTO_PERIOD_MS      1000
#define AUTO_LOWER_PERMILLE 20
#define AUTO_RAISE_PERMILLE 20
#define AUTO_RAISE_MAX      200
#define AUTO_HOLD           5

/* The limit as limit_auto moves it: the budget with pool_in_limit, else the resident limit. */
static uint64_t auto_current(struct uswap_mm *m)
{
	return (m->pool_in_limit ? atomic_load(&m->budget_pages) : atomic_load(&m->limit_pages)) * MM_PAGE;
}

static void auto_tick(struct uswap_mm *m)
{
	uint64_t now = mono_ms(), stall = atomic_load(&m->c.stall_ns), share, cur, use, next, permille;
	uint64_t max = atomic_load(&m->auto_max_bytes), target = m->auto_stall_ppm;
	bool growing;

	if (now < m->auto_next_ms)
		return;
	m->auto_next_ms = now + AUTO_PERIOD_MS;
	if (!m->auto_prev_ms || now <= m->auto_prev_ms) {
		m->auto_prev_ms = now;
		m->auto_prev_stall = stall;
		return;
	}
	share = (stall - m->auto_prev_stall) / (now - m->auto_prev_ms); /* ns waited per ms: ppm */
	share = m->auto_avg_ppm = (m->auto_avg_ppm + share) / 2;
	m->auto_prev_ms = now;
	m->auto_prev_stall = stall;
	cur = auto_current(m);
	use = atomic_load(&m->resident) * MM_PAGE +
	      (m->pool_in_limit && m->swap ? uswap_mem_bytes(m->swap) : 0);
	/* A program still growing is not lowered onto: the limit would chase its growth with stalls. */
	growing = use > m->auto_prev_use + m->auto_prev_use / 64;
	m->auto_prev_use = use;
	if (share > target) {
		/* never past what would hold every page the program has (beyond, nothing more comes back) */
		uint64_t all = (atomic_load(&m->resident) + atomic_load(&m->swapped)) * MM_PAGE;

		permille = AUTO_RAISE_PERMILLE * (share / target);
		next = cur + cur / 1000 * (permille < AUTO_RAISE_MAX ? permille : AUTO_RAISE_MAX);
		if (next > all + all / 32)
			next = all + all / 32;
		if (next > cur)
			m->auto_hold = AUTO_HOLD;
	} else if (m->auto_hold || share > target / 2 || growing) {
		m->auto_hold -= m->auto_hold > 0;
		return;
	} else {
		uint64_t base = use + use / 32 < cur ? use + use / 32 : cur;

		permille = AUTO_LOWER_PERMILLE * (target - 2 * share) / target;
		next = base - base / 1000 * permille;
	}
	if (!max)
		max = (uint64_t)sysconf(_SC_PHYS_PAGES) * MM_PAGE;
	if (next > max)
		next = max;
	if (next < m->auto_min_bytes)
		next = m->auto_min_bytes;
	next &= ~(uint64_t)(MM_PAGE - 1);
	if (next != cur)
		reclaim_limit(m, next);
}

/* ---- the hands ---- */

/* A store no tier took: the run goes back, dirty and resident (copied from its slots, or moved). */
static void evict_undo(struct uswap_mm *m, struct mm_region *r, size_t i, size_t n)
{
	uint8_t st[MV_MAX_PAGES];
	size_t dp = 0;

	if (pg_slotted(r->pages[i])) {
		uint32_t s[MV_MAX_PAGES];
		size_t done = 0;

		uffd_copy_vmas(m, region_addr(r, i), (void *)page_shadow(m, r, i), n * MM_PAGE, false, false,
			       &done);
		dp = done / MM_PAGE;
		pages_put_copies(m, r, i, i + dp); /* mapped writable: a clean page's copy goes */
		for (size_t j = 0; j < dp; j++)
			s[j] = pg_slot(r->pages[i + j]), r->pages[i + j] = PG_PRESENT;
		slot_put(m, s, dp);
		atomic_fetch_sub(&m->inactive, dp);
		return;
	}
	uffd_move(m, m->uffd, region_addr(r, i), region_shadow(r, i), n, false, st);
	for (size_t j = 0; j < n; j++) {
		if (st[j] == MV_MOVED) {
			r->pages[i + j] = (r->pages[i + j] & ~PG_KIND_MASK) | PG_PRESENT;
			dp++;
		}
	}
	atomic_fetch_sub(&m->inactive, dp);
}

/* Release the batch's shadow pages, then count them gone and unlock their folios. */
static void batch_flush(struct uswap_mm *m, struct release_batch *b)
{
	if (b->nr_iov) /* the soft faults' stale shadow pages go with them */
		stale_release(m, b->iov, b->nr_iov);
	atomic_fetch_sub(&m->resident, b->pages);
	atomic_fetch_sub(&m->inactive, b->pages);
	atomic_fetch_add(&m->c.evicted_pages, b->pages);
	for (unsigned i = 0; i < b->nr_folios; i++)
		folio_unlock(&b->r[i]->folios[b->fi[i]]);
	b->nr_iov = b->nr_folios = 0;
	b->pages = 0;
}

/*
 * Add a shadow range of @n pages to the batch. A large folio can bring more separate ranges than
 * the batch has room for: then the ranges gathered so far are released first (the folio itself is
 * not in the batch's folio list yet, so it stays locked).
 */
static void batch_add(struct uswap_mm *m, struct release_batch *b, uintptr_t addr, size_t n)
{
	struct iovec *last = b->nr_iov ? &b->iov[b->nr_iov - 1] : NULL;

	if (last && (uintptr_t)last->iov_base + last->iov_len == addr) {
		last->iov_len += n * MM_PAGE;
	} else {
		if (b->nr_iov == BATCH)
			batch_flush(m, b);
		b->iov[b->nr_iov].iov_base = (void *)addr;
		b->iov[b->nr_iov++].iov_len = n * MM_PAGE;
	}
	b->pages += n;
}

/*
 * Store the inactive pages of folio @fi. Their slots are free again at once (warm: no zap); pages of
 * the region's shadow range join the batch, and the folio stays locked until the batch is flushed
 * (a shadow page must be empty before anything can be moved into it again). Return: pages, or
 * -errno if none could go.
 */
static ssize_t evict_folio(struct uswap_mm *m, struct mm_region *r, size_t fi, struct release_batch *b)
{
	size_t first, end, freed = 0;
	int ret = 0;

	region_folio_pages(r, fi, &first, &end);
	for (size_t i = first; i < end;) {
		size_t n = 0;
		bool clean = true, slotted;
		uint32_t slots[MV_MAX_PAGES];
		uswap_id_t id;

		while (i + n < end && pg_kind(r->pages[i + n]) == PG_SHADOW &&
		       (!n || shadow_follows(m, r, i + n - 1, i + n))) {
			clean = clean && (r->pages[i + n] & PG_CLEAN) &&
				(!n || pg_copy_follows(r->pages[i + n - 1], r->pages[i + n]));
			n++;
		}
		if (!n) {
			i++;
			continue;
		}
		slotted = pg_slotted(r->pages[i]);
		for (size_t j = 0; slotted && j < n; j++)
			slots[j] = pg_slot(r->pages[i + j]);
		if (clean) {
			for (size_t j = 0; j < n; j++)
				r->pages[i + j] = (pg_unslot(r->pages[i + j]) & ~(PG_KIND_MASK | PG_CLEAN)) |
						  PG_SWAPPED;
			atomic_fetch_add(&m->c.clean_evictions, 1);
			if (atomic_load_explicit(&m->wp_score, memory_order_relaxed) < WP_SCORE_MAX)
				atomic_fetch_add_explicit(&m->wp_score, 1, memory_order_relaxed);
		} else {
			uint64_t t0 = mono_ns();

			ret = uswap_store(m->swap, (const void *)page_shadow(m, r, i), n, &id);
			atomic_fetch_add_explicit(&m->c.store_ns, mono_ns() - t0, memory_order_relaxed);
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
		if (slotted) { /* stored: the slots are free again, and warm (no zap) */
			slot_put(m, slots, n);
			b->pages += n;
		} else {
			batch_add(m, b, region_shadow(r, i), n);
		}
		freed += n;
		i += n;
	}
	folio_summarize(m, r, fi);
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

/*
 * Whether the folios of @r from @fi on (a group's first, or a group word's first with @word) hold no
 * present or shadow page: a clear bit says so; a set one is checked, and cleared when the group is
 * empty, then the folios are looked at again (folio_summarize() sets the bit after the folio word).
 */
static bool group_empty(struct mm_region *r, size_t fi)
{
	_Atomic uint64_t *g = &r->groups[fi / FOLIO_GROUP / 64];
	uint64_t bit = 1ull << (fi / FOLIO_GROUP % 64);
	size_t end = fi + FOLIO_GROUP < r->nr_folios ? fi + FOLIO_GROUP : r->nr_folios;

	if (!(atomic_load(g) & bit))
		return true;
	for (int pass = 0; pass < 2; pass++) {
		for (size_t f = fi; f < end; f++)
			if (atomic_load(&r->folios[f]) & (FL_PRESENT | FL_SHADOW)) {
				if (pass)
					atomic_fetch_or(g, bit);
				return false;
			}
		if (!pass)
			atomic_fetch_and(g, ~bit);
	}
	return true;
}

/* Folios a hand at folio @fi of @r may skip at once: a word of empty groups, an empty group, or 0. */
static size_t hand_skip(struct mm_region *r, size_t fi)
{
	if (fi % FOLIO_GROUP)
		return 0;
	if (!(fi % (64 * FOLIO_GROUP)) && !atomic_load(&r->groups[fi / FOLIO_GROUP / 64]))
		return 64 * FOLIO_GROUP;
	return group_empty(r, fi) ? FOLIO_GROUP : 0;
}

/*
 * Advance a hand over up to @max_scan folios or until @want pages were handled. @front: demote
 * present folios not referenced since the last pass; else evict inactive folios.
 */
static void hand_advance(struct uswap_mm *m, bool front, size_t want, size_t max_scan,
			 struct hand_result *res)
{
	uintptr_t *hand = front ? &m->front : &m->back;
	struct release_batch batch;
	struct demote_window win;
	bool batching = front && m->discards_reported && m->have_pidfd && m->have_pagemap;
	size_t scanned = 0, passed = 0;

	batch.nr_iov = batch.nr_folios = 0;
	batch.pages = 0;
	win.n = 0;
	win.pages = 0;
	while (res->pages + win.pages < want && scanned < max_scan && passed < max_scan * PASS_PER_FOLIO &&
	       !atomic_load(&m->forking)) {
		unsigned ri, chunk = 0, chunk_passed = 0;
		size_t fi;

		pthread_rwlock_rdlock(&m->tbl_lock);
		if (!hand_seek(m, *hand, &ri, &fi)) {
			pthread_rwlock_unlock(&m->tbl_lock);
			return;
		}
		while (chunk < (batching ? 2 * WINDOW_FOLIOS : LOCK_CHUNK) &&
		       chunk_passed < LOCK_CHUNK * PASS_PER_FOLIO && res->pages + win.pages < want &&
		       scanned < max_scan) {
			struct mm_region *r = m->tbl[ri];
			size_t skip = hand_skip(r, fi);

			if (skip) {
				passed++;
				chunk_passed++;
				if ((fi += skip) >= r->nr_folios) {
					ri = ri + 1 == m->nr_regions ? 0 : ri + 1;
					fi = 0;
				}
				continue;
			}
			_Atomic uint32_t *f = &r->folios[fi];
			uint32_t v = atomic_load(f);
			bool acts = v & (front ? FL_PRESENT : FL_SHADOW); /* resident / inactive */
			ssize_t got;

			/*
			 * Only the folios a hand can act on count against its budgets: under random
			 * access most folios of a large region are swapped, and a hand that counted
			 * them found a few folios a round, each round paying its own release (a TLB
			 * flush, an IPI to the program's CPU).
			 */
			if (!acts) {
				passed++;
				chunk_passed++;
			} else {
				scanned++;
				chunk++;
				res->met++;
			}
			if (acts && front) {
				if (v & (FL_PINNED | FL_REF)) {
					atomic_fetch_and(f, ~(FL_PINNED | FL_REF));
					res->touched++;
				} else if (folio_trylock(f)) {
					v = atomic_load(f);
					if (v & FL_STALE) { /* just touched; its shadow slots are taken */
						folio_unlock(f);
					} else if (batching && (v & FL_PRESENT) &&
						   !(v & (FL_SHADOW | FL_REF | FL_PINNED))) {
						if (!demote_window_fits(&win, r, fi)) {
							res->pages += demote_window_flush(m, &win, res);
							win.pages = 0;
						}
						demote_window_add(&win, r, fi);
					} else {
						fi = demote_front(m, r, fi, want, &scanned, res);
					}
				}
			} else if (acts && folio_trylock(f)) {
				got = evict_folio(m, r, fi, &batch);
				if (got > 0) {
					res->pages += (size_t)got;
					batch.r[batch.nr_folios] = r;
					batch.fi[batch.nr_folios++] = fi;
					if (batch.nr_folios == BATCH || batch.nr_iov == BATCH ||
					    batch.pages >= BATCH)
						batch_flush(m, &batch);
				} else {
					folio_unlock(f);
				}
			}
			if (++fi >= r->nr_folios) {
				ri = ri + 1 == m->nr_regions ? 0 : ri + 1;
				fi = 0;
			}
		}
		/* Before tbl_lock goes: a region may go away once it is released. */
		res->pages += demote_window_flush(m, &win, res);
		win.pages = 0;
		batch_flush(m, &batch);
		*hand = hand_addr(m->tbl[ri], fi);
		pthread_rwlock_unlock(&m->tbl_lock);
	}
}

/*
 * Pages shared with a fork child (or read-only since a fork) cannot be moved (-EBUSY): a write fault
 * makes them ours again. MADV_POPULATE_WRITE does that without changing a byte, and fails harmlessly
 * on an unmapped range. The write protection of clean pages is lifted first (their copies dropped,
 * as a write would): in SIGBUS mode a protected page fails the call with EFAULT (after a fork the
 * hands would meet the same shared folios round after round), and in handler mode each one would be
 * a WP fault for a handler, which then goes into direct reclaim while this thread waits
 * (docs/results.md#2026-12-07-breaking-fork-sharing).
 * Context: the reclaimer thread only, no lock held: it may fault, and a handler must be free to
 * answer, so a handler in direct reclaim never does it.
 */
static void cow_break(struct uswap_mm *m, struct hand_result *res)
{
	for (unsigned i = 0; i < res->nr_cow; i++) {
		void *p = (void *)res->cow[i];

		region_unprotect(m, res->cow[i], res->cow[i] + res->cow_len[i]);
		umadvise(p, res->cow_len[i], MADV_POPULATE_WRITE);
	}
	res->nr_cow = 0;
}

/*
 * A round that evicted nothing is dry when the back hand met inactive folios and none went (no tier
 * takes them), or when nothing at all happened (every folio pinned). One whose back hand spent its
 * pass budget crossing empty space before it met any folio is not: the next round goes on from there
 * (over a sparse 512 GiB mapping, treating it as dry stalled direct reclaim while faults went on).
 */
static bool round_dry(const struct hand_result *front, const struct hand_result *back)
{
	return !back->pages && (back->met || (!front->pages && !front->touched));
}

/*
 * Direct reclaim (a fault handler over the hard limit) does one round: waiting for the hands is what
 * throttles a program that faults faster than the reclaimer frees, and one round bounds the time the
 * handler serves no faults. A direct round that makes no progress at all (every folio pinned, or no
 * tier takes them) turns direct reclaim off for a while, so that faults do not pay for a scan that
 * cannot succeed; the resident size then stays above the limit until something can go.
 */
static size_t reclaim_rounds(struct uswap_mm *m, uint64_t target, bool direct, bool try)
{
	size_t freed = 0;
	unsigned idle = 0, dry = 0; /* rounds without progress of any kind; dry rounds since an eviction */
	uint64_t limit = atomic_load(&m->limit_pages);

	if (direct && mono_ms() < atomic_load(&m->direct_stall_until_ms))
		return 0;
	for (;;) {
		uint64_t res, inact, want, t0;
		struct hand_result front = {0}, back = {0};

		/*
		 * The target moves with the limit: with the pool in the limit, by what the pool took or gave
		 * back; with limit_auto or uswap_mm_set_limit(), by the new limit. Without a limit, no run.
		 */
		reclaim_budget_apply(m);
		if (atomic_load(&m->limit_pages) != limit) {
			uint64_t now = atomic_load(&m->limit_pages);

			if (now >= UINT64_MAX / 4)
				break;
			target = now > limit            ? target + (now - limit)
				 : target > limit - now ? target - (limit - now)
							: 0;
			limit = now;
		}
		res = atomic_load(&m->resident);
		if (res <= target || idle >= 3 || dry >= DRY_ROUNDS || atomic_load(&m->forking))
			break;

		want = res - target < ROUND_PAGES ? res - target : ROUND_PAGES;
		if (!try)
			pthread_mutex_lock(&m->reclaim_lock);
		else if (pthread_mutex_trylock(&m->reclaim_lock))
			break;
		t0 = mono_ns();
		inact = atomic_load(&m->inactive);
		if (inact < atomic_load(&m->inactive_target_pages) + want) {
			uint64_t fwant = atomic_load(&m->inactive_target_pages) + want - inact;

			/*
			 * A fault is waiting behind direct reclaim: refill the inactive list only a little.
			 * In the background, batched demotion pays three TLB flushes a window whatever
			 * its size: refill by full windows, overshooting the target by less than one.
			 */
			if (direct && fwant > 2 * want)
				fwant = 2 * want;
			else if (!direct && m->discards_reported && fwant < FRONT_BATCH &&
				 FRONT_BATCH < atomic_load(&m->inactive_target_pages) / 2)
				fwant = FRONT_BATCH;
			hand_advance(m, true, fwant, 4 * fwant + 64, &front);
		}
		hand_advance(m, false, want, 4 * want + 64, &back);
		atomic_fetch_add_explicit(&m->c.reclaim_ns, mono_ns() - t0, memory_order_relaxed);
		pthread_mutex_unlock(&m->reclaim_lock);
		if (!direct)
			cow_break(m, &front);
		freed += back.pages;
		if (direct) {
			/* Demotions free nothing: a dry round (no tier takes pages) stalls. */
			if (round_dry(&front, &back))
				atomic_store(&m->direct_stall_until_ms, mono_ms() + DIRECT_STALL_MS);
			break;
		}
		/*
		 * Demoting and clearing reference bits is progress only while it leads to evictions: with
		 * no tier taking pages, the program pulls the demoted folios back and the front hand demotes
		 * them again, for ever. Rounds that evict nothing end the run (the reclaimer backs off).
		 */
		idle = back.pages || front.pages || front.touched ? 0 : idle + 1;
		if (back.pages)
			dry = 0;
		else if (round_dry(&front, &back))
			dry++;
	}
	return freed;
}

size_t reclaim_run(struct uswap_mm *m, uint64_t target, bool direct)
{
	return reclaim_rounds(m, target, direct, false);
}

/*
 * Direct reclaim by a faulting thread in SIGBUS mode, which waits for it itself (a handler thread's
 * wait holds up only the next fault): while resident is within the slack above the limit and the
 * hands are busy (the reclaimer is at work), the thread goes back to the program instead of queueing
 * behind that round; further over, it waits as a handler would, which is what bounds the overshoot.
 */
size_t reclaim_direct(struct uswap_mm *m)
{
	uint64_t limit = atomic_load(&m->limit_pages), slack = limit - atomic_load(&m->low_pages);

	return reclaim_rounds(m, limit, true, atomic_load(&m->resident) <= limit + slack);
}

/*
 * Called after every fault above the high watermark, so it takes no lock while the reclaimer is awake:
 * the reclaimer sets reclaim_sleeping before it checks whether there is work, and the caller changed
 * that state (resident, forking) before it reads reclaim_sleeping, both sequentially consistent, so
 * one of the two sees the other.
 */
void reclaim_kick(struct uswap_mm *m)
{
	if (!atomic_load(&m->reclaim_sleeping))
		return;
	pthread_mutex_lock(&m->kick_lock);
	if (atomic_load(&m->reclaim_sleeping))
		pthread_cond_signal(&m->kick);
	pthread_mutex_unlock(&m->kick_lock);
}

static void *reclaimer_main(void *arg)
{
	struct uswap_mm *m = arg;
	pthread_mutex_lock(&m->kick_lock);
	while (!m->stopping) {
		size_t freed;

		if (m->limit_auto) {
			pthread_mutex_unlock(&m->kick_lock);
			auto_tick(m);
			pthread_mutex_lock(&m->kick_lock);
		}
		atomic_store(&m->reclaim_sleeping, true);
		if (atomic_load(&m->forking) || atomic_load(&m->resident) <= atomic_load(&m->high_pages)) {
			if (m->limit_auto) { /* the next look at the stall */
				struct timespec ts;

				clock_gettime(CLOCK_REALTIME, &ts);
				ts.tv_sec += AUTO_PERIOD_MS / 1000;
				pthread_cond_timedwait(&m->kick, &m->kick_lock, &ts);
			} else {
				pthread_cond_wait(&m->kick, &m->kick_lock);
			}
			atomic_store(&m->reclaim_sleeping, false);
			continue;
		}
		atomic_store(&m->reclaim_sleeping, false);
		pthread_mutex_unlock(&m->kick_lock);
		freed = reclaim_run(m, atomic_load(&m->low_pages), false);
		pthread_mutex_lock(&m->kick_lock);
		if (!freed && !m->stopping && atomic_load(&m->resident) > atomic_load(&m->high_pages)) {
			/* Nothing could go (tiers full, everything pinned): try again a little later. */
			struct timespec ts;

			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 20 * 1000 * 1000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			atomic_store(&m->reclaim_sleeping, true);
			pthread_cond_timedwait(&m->kick, &m->kick_lock, &ts);
			atomic_store(&m->reclaim_sleeping, false);
		}
	}
	pthread_mutex_unlock(&m->kick_lock);
	return NULL;
}

int reclaim_start(struct uswap_mm *m)
{
	int ret = thread_start(&m->reclaimer, "uswap-reclaim", reclaimer_main, m);

	if (ret)
		return ret;
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
