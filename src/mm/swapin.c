/*
 * swapin.c - bringing a folio in: NONE pages zero-filled, SWAPPED runs loaded through the swap layer
 * and installed with one UFFDIO_COPY, SHADOW runs copied back (a soft fault, no load); runs of whole
 * swapped folios in one batch (readahead, fork); and the rule that decides whether a page read back
 * keeps its swap copy. Context: the caller holds tbl_lock for reading and the folio locks.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "mm/mm.h"
#include "util/alloc.h"

/* Load failures told on stderr (with the swap id and tier), like the kernel's swap read errors; then only counted. */
#define LOAD_FAILURES_LOGGED 10

static int in_zero(struct uswap_mm *m, struct mm_region *r, size_t i, size_t n, bool wake, size_t *done_pages)
{
	size_t done;
	int ret = uffd_copy_vmas(m, region_addr(r, i), m->zero, n * MM_PAGE, false, wake, &done);

	*done_pages = done / MM_PAGE;
	for (size_t j = 0; j < *done_pages; j++) {
		r->pages[i + j] = PG_PRESENT;
	}
	atomic_fetch_add(&m->resident, *done_pages);
	atomic_fetch_add(&m->c.zero_fills, *done_pages);
	return ret;
}

/*
 * Whether a page swapped in by a read keeps its swap copy (mapped write-protected). A clean
 * eviction (no store) scores +1, a write fault on a clean page (a wasted round trip and a TLB flush,
 * several times the cost of a store) scores -WP_FAULT_COST. While the score is negative, one read in
 * WP_PROBE_EVERY still keeps its copy, so that a change of behaviour is noticed; one in four times
 * as many once the score is down in its lower half, where reads are almost always followed by a write
 * (x++, a reference count), and each probe is such a fault.
 */
#define WP_PROBE_EVERY 16
static bool clean_pays(struct uswap_mm *m)
{
	int score = atomic_load_explicit(&m->wp_score, memory_order_relaxed);
	unsigned every = score < -WP_SCORE_MAX / 2 ? 4 * WP_PROBE_EVERY : WP_PROBE_EVERY;

	if (score >= 0)
		return true;
	return atomic_fetch_add_explicit(&m->wp_probe, 1, memory_order_relaxed) % every == 0;
}

/*
 * A load that fails for a reason that may pass (a tier's I/O error, a server's timeout) is tried
 * again, LOAD_TRIES times in all, after 1, 10 and 100 ms: the kernel keeps a swap entry after a read
 * error and a later fault reads again; a page poisoned at the first error would be lost to a blip.
 * Data that does not match its checksum (-EBADMSG) or an id the layer does not know is not tried
 * again. Meanwhile the thread that touched the page waits, as it would for a slow disk.
 */
#define LOAD_TRIES 4

static int load_tried(struct uswap_mm *m, uint64_t w, size_t n, unsigned char *stage)
{
	int ret = uswap_load_pages(m->swap, pg_id(w), pg_idx(w), n, stage);

	for (unsigned t = 1, ms = 1;
	     ret && ret != -EBADMSG && ret != -ENOENT && ret != -EINVAL && t < LOAD_TRIES; t++, ms *= 10) {
		struct timespec ts = {0, (long)ms * 1000000L};

		atomic_fetch_add(&m->c.load_retries, 1);
		nanosleep(&ts, NULL);
		ret = uswap_load_pages(m->swap, pg_id(w), pg_idx(w), n, stage);
	}
	return ret;
}

static int in_swapped(struct uswap_mm *m, unsigned char *stage, struct mm_region *r, size_t i, size_t n,
		      bool write, bool wake)
{
	uint64_t w = r->pages[i];
	size_t done, dp;
	int ret = load_tried(m, w, n, stage);

	if (ret) {
		/* The data is gone (tier error, checksum mismatch): never hand out wrong data. */
		if (atomic_fetch_add(&m->c.load_failures, 1) < LOAD_FAILURES_LOGGED)
			fprintf(stderr,
				"uswap: swap-in of %zu page(s) at %#lx failed: %s; they are poisoned (SIGBUS "
				"on access)\n",
				n, (unsigned long)region_addr(r, i),
				uswap_errmsg()[0] ? uswap_errmsg() : strerror(-ret));
		uswap_free_pages(m->swap, pg_id(w), pg_idx(w), n);
		for (size_t j = 0; j < n; j++)
			r->pages[i + j] = PG_NONE | PG_POISON;
		uffd_poison(m->uffd, region_addr(r, i), n * MM_PAGE);
		return 0;
	}
	/*
	 * A read keeps the copy and maps the pages write-protected: evicting them again is free, but a
	 * later write costs a fault of its own. So keep copies only while they pay off (see clean_pays()).
	 */
	if (!write && !clean_pays(m))
		write = true;
	ret = uffd_copy_vmas(m, region_addr(r, i), stage, n * MM_PAGE, !write, wake, &done);
	dp = done / MM_PAGE;
	if (write && dp)
		uswap_free_pages(m->swap, pg_id(w), pg_idx(w), dp);
	for (size_t j = 0; j < dp; j++)
		r->pages[i + j] =
			write ? PG_PRESENT : pg_make(PG_PRESENT, pg_id(w), pg_idx(w) + (unsigned)j, true);
	atomic_fetch_add(&m->resident, dp);
	atomic_fetch_add(&m->c.swapin_pages, dp);
	return ret;
}

/*
 * Pages [i, i + n) of folio @fi, in the shadow, back to the program by copy (see stale_add()): a
 * clean page read keeps its copy and comes back write-protected, any other page comes back dirty.
 */
static int in_shadow(struct uswap_mm *m, struct mm_region *r, size_t fi, size_t i, size_t n, bool write,
		     bool wake)
{
	bool clean = r->pages[i] & PG_CLEAN, keep = clean && !write, slotted = pg_slotted(r->pages[i]);
	uintptr_t from = page_shadow(m, r, i);
	size_t done, dp;
	int ret = uffd_copy_vmas(m, region_addr(r, i), (void *)from, n * MM_PAGE, keep, wake, &done);

	dp = done / MM_PAGE;
	if (!dp)
		return ret;
	if (clean && !keep)
		pages_put_copies(m, r, i, i + dp);
	/* The run's slots are free again (and warm) once no word names them; a shadow page goes stale. */
	for (size_t j = 0; j < dp; j += 64) {
		size_t c = dp - j < 64 ? dp - j : 64;
		uint32_t s[64];

		for (size_t k = 0; k < c; k++) {
			uint64_t *w = &r->pages[i + j + k];

			s[k] = pg_slot(*w);
			*w = keep ? (pg_unslot(*w) & ~PG_KIND_MASK) | PG_PRESENT : PG_PRESENT;
		}
		if (slotted)
			slot_put(m, s, c);
	}
	if (!slotted)
		stale_add(m, r, fi, from, dp);
	atomic_fetch_sub(&m->inactive, dp);
	return ret;
}

int swapin_folio(struct uswap_mm *m, unsigned char *stage, struct mm_region *r, size_t fi, bool write,
		 bool wake)
{
	size_t first, end, i;
	bool loaded = false, soft = false;
	int ret = 0;

	region_folio_pages(r, fi, &first, &end);
	for (i = first; i < end && !ret;) {
		uint64_t w = r->pages[i];
		size_t n = 1, dp;

		switch (pg_kind(w)) {
		case PG_PRESENT:
			break;
		case PG_NONE:
			if (w & PG_POISON) /* stays poisoned: the kernel answers its touches */
				break;
			while (i + n < end && r->pages[i + n] == PG_NONE)
				n++;
			ret = in_zero(m, r, i, n, wake, &dp);
			break;
		case PG_SWAPPED:
			while (i + n < end && pg_kind(r->pages[i + n]) == PG_SWAPPED &&
			       pg_copy_follows(r->pages[i + n - 1], r->pages[i + n]))
				n++;
			ret = in_swapped(m, stage + (i - first) * MM_PAGE, r, i, n, write, wake);
			loaded = true;
			break;
		case PG_SHADOW:
			while (i + n < end && pg_kind(r->pages[i + n]) == PG_SHADOW &&
			       shadow_follows(m, r, i + n - 1, i + n) &&
			       (r->pages[i + n] & PG_CLEAN) == (w & PG_CLEAN) &&
			       (!(w & PG_CLEAN) || pg_copy_follows(r->pages[i + n - 1], r->pages[i + n])))
				n++;
			ret = in_shadow(m, r, fi, i, n, write, wake);
			soft = true;
			break;
		}
		i += n;
	}
	if (loaded)
		atomic_fetch_add(&m->c.swapins, 1);
	else if (soft)
		atomic_fetch_add(&m->c.soft_faults, 1);
	folio_summarize(m, r, fi);
	return ret;
}

/*
 * How many of folios [@f0, @f1) (their pages from @first on) lie wholly in the @n pages from @first;
 * *@pages: the pages those folios hold.
 */
static size_t folios_within(struct mm_region *r, size_t f0, size_t f1, size_t first, size_t n, size_t *pages)
{
	size_t f, a, b;

	*pages = 0;
	for (f = f0; f < f1; f++) {
		region_folio_pages(r, f, &a, &b);
		if (b - first > n)
			break;
		*pages = b - first;
	}
	return f - f0;
}

/*
 * Swap in whole swapped folios from @f0 on (up to the end of @r), at most @max pages, in one batch:
 * try-locked (a busy folio, or one not wholly swapped, ends the run), loaded with one
 * uswap_load_vec() (the file tier reads them in one round of I/O, adjacent slots in one read; it
 * stops at a busy descriptor) and installed with one copy. @keep: pages keep their swap copy and are
 * mapped write-protected (see clean_pays()). Folios not installed stay swapped. Return: pages
 * installed; *@nf: folios installed, from @f0.
 */
size_t swapin_run(struct uswap_mm *m, unsigned char *stage, struct mm_region *r, size_t f0, size_t max,
		  bool keep, size_t *nf)
{
	uswap_id_t ids[SWAPIN_RUN_MAX];
	uint32_t idx[SWAPIN_RUN_MAX];
	size_t first, end, f, f1, np = 0, fit = 0, dp = 0, done, covered;
	ssize_t got;

	*nf = 0;
	if (f0 >= r->nr_folios)
		return 0;
	if (max > SWAPIN_RUN_MAX)
		max = SWAPIN_RUN_MAX;
	region_folio_pages(r, f0, &first, &end);
	/* Lock whole swapped folios [f0, f1): their pages are [first, first + np). */
	for (f1 = f0; np < max && f1 < r->nr_folios; f1++) {
		size_t a, b, i;

		if (!folio_trylock(&r->folios[f1]))
			break;
		region_folio_pages(r, f1, &a, &b);
		for (i = a; i < b && pg_kind(r->pages[i]) == PG_SWAPPED; i++)
			;
		if (i < b || np + (b - a) > max) {
			folio_unlock(&r->folios[f1]);
			break;
		}
		for (i = a; i < b; i++, np++) {
			ids[np] = pg_id(r->pages[i]);
			idx[np] = pg_idx(r->pages[i]);
		}
	}
	got = np ? uswap_load_vec(m->swap, ids, idx, np, stage) : 0;
	/* Install the whole folios among the pages loaded. */
	if (got > 0)
		folios_within(r, f0, f1, first, (size_t)got, &fit);
	if (fit) {
		uffd_copy_vmas(m, region_addr(r, first), stage, fit * MM_PAGE, keep, false, &done);
		dp = done / MM_PAGE;
		for (size_t j = 0; j < dp; j++) {
			if (!keep)
				uswap_free_pages(m->swap, ids[j], idx[j], 1);
			r->pages[first + j] =
				keep ? pg_make(PG_PRESENT, (uint32_t)ids[j], idx[j], true) : PG_PRESENT;
		}
		atomic_fetch_add(&m->resident, dp);
		atomic_fetch_add(&m->c.swapin_pages, dp);
		*nf = folios_within(r, f0, f1, first, dp, &covered); /* the copy may stop short */
	}
	for (f = f0; f < f1; f++) {
		folio_summarize(m, r, f);
		folio_unlock(&r->folios[f]);
	}
	return dp;
}

/*
 * Swap-in readahead. A swap-in at the address where the previous one ended, or at most RA_GAP pages
 * after it, starts or extends a forward run: the window doubles from RA_MIN up to RA_MAX pages, and
 * that many swapped pages after the faulting folio come in, after the faulting thread is woken, as
 * one swapin_run(). The gap lets a pass that touches one page in two or three (the headers of 8 KiB
 * objects: an interpreter sizing a list's items before it copies them) read ahead too, the pages it
 * skips included. Any other swap-in closes the window, so random access practically never reads
 * ahead. Pages read ahead keep their swap copy like any read (so a page never used goes again
 * without a store) and carry no reference bit: the clock takes them first. A folio that is locked,
 * not wholly swapped, or whose descriptors are busy ends the window; a failed batch loads nothing
 * (the pages stay swapped, and a fault on one of them reports the error).
 */
#define RA_MIN 4
#define RA_MAX 16
#define RA_GAP 4
void swapin_readahead(struct uswap_mm *m, unsigned char *stage, struct mm_region *r, size_t fi)
{
	size_t first, end, dp, nf;
	unsigned win = 0;
	uintptr_t prev;

	region_folio_pages(r, fi, &first, &end);
	prev = atomic_exchange(&m->ra_next, region_addr(r, end));
	if (prev <= region_addr(r, first) && region_addr(r, first) - prev <= RA_GAP * MM_PAGE) {
		win = atomic_load(&m->ra_pages);
		win = win ? (win * 2 > RA_MAX ? RA_MAX : win * 2) : RA_MIN;
	}
	atomic_store(&m->ra_pages, win);
	if (!win || atomic_load(&m->resident) + win > atomic_load(&m->limit_pages))
		return;
	dp = swapin_run(m, stage, r, fi + 1, win, clean_pays(m), &nf);
	atomic_fetch_add(&m->c.readahead_pages, dp);
	if (dp)
		atomic_store(&m->ra_next, region_addr(r, end + dp));
}

/*
 * First touch of an untouched folio: zero-fill it together with the untouched folios around it, in an
 * aligned window of fault_around pages, with one UFFDIO_COPY per contiguous run. Neighbours are only
 * try-locked (we already hold @fi): nobody waits while holding a folio lock, so this cannot deadlock.
 */
static int zero_around(struct uswap_mm *m, struct mm_region *r, size_t fi)
{
	size_t win = (size_t)m->fault_around << MM_PAGE_SHIFT;
	uintptr_t fa = r->fbase + (fi << (MM_PAGE_SHIFT + r->folio_shift));
	uintptr_t ws = fa & ~(win - 1), we = ws + win;
	size_t f0, f1, locked[64];
	unsigned nl = 0;
	int ret = 0;

	if (ws < r->start)
		ws = r->start;
	if (we > r->end)
		we = r->end;
	f0 = region_folio(r, ws);
	f1 = region_folio(r, we - 1) + 1;
	for (size_t f = f0; f < f1;) {
		size_t run0 = f, first, end, dp;

		/* Collect a run of untouched, lockable folios (fi is ours already). */
		while (f < f1 && nl < 64) {
			bool mine = f == fi, empty = true;

			if (!mine && (atomic_load(&r->folios[f]) & (FL_PRESENT | FL_SHADOW | FL_LOCK)))
				break;
			if (!mine && !folio_trylock(&r->folios[f]))
				break;
			region_folio_pages(r, f, &first, &end);
			for (size_t i = first; i < end && empty; i++)
				empty = r->pages[i] == PG_NONE;
			if (!empty) {
				if (!mine)
					folio_unlock(&r->folios[f]);
				break;
			}
			if (!mine)
				locked[nl++] = f;
			f++;
		}
		if (f > run0) {
			size_t a, b;

			region_folio_pages(r, run0, &a, &first);
			region_folio_pages(r, f - 1, &first, &b);
			if (!ret)
				ret = in_zero(m, r, a, b - a, true, &dp);
			for (size_t g = run0; g < f; g++)
				folio_summarize(m, r, g);
		} else {
			f++;
		}
		while (nl) {
			size_t g = locked[--nl];

			atomic_fetch_or(&r->folios[g], FL_REF);
			folio_unlock(&r->folios[g]);
		}
	}
	return ret;
}

/*
 * Whether a first touch of the folio at [fa, fb) continues a stream of first touches: it lies within
 * one fault-around window after where a recent one ended. Only then are its untouched neighbours
 * zero-filled with it: sequential first touches (a buffer being filled, an allocator carving a fresh
 * heap) still cost one fault per window, while a program that touches a page or two of many places
 * (sparse buffers, one header page of each of many mappings, a hash table filled at random) gets its
 * folio alone, as the kernel gives an anonymous fault one page, instead of holding a window of zeros
 * per touch that reclaim must then evict. FT_STREAMS stream ends are remembered, so that threads
 * filling their own buffers do not break each other's streams; the races between handlers on
 * these entries cost at most a window filled or not filled.
 */
static bool ft_sequential(struct uswap_mm *m, uintptr_t fa, uintptr_t fb)
{
	uintptr_t win = (uintptr_t)m->fault_around << MM_PAGE_SHIFT, we = (fa & ~(win - 1)) + win;

	for (unsigned k = 0; k < FT_STREAMS; k++) {
		uintptr_t e = atomic_load_explicit(&m->ft_end[k], memory_order_relaxed);

		if (e && fa >= e && fa - e < win) {
			atomic_store_explicit(&m->ft_end[k], we,
					      memory_order_relaxed); /* fb <= we: a folio is smaller */
			return true;
		}
	}
	atomic_store_explicit(
		&m->ft_end[atomic_fetch_add_explicit(&m->ft_next, 1, memory_order_relaxed) % FT_STREAMS], fb,
		memory_order_relaxed);
	return false;
}

static bool folio_untouched(struct mm_region *r, size_t fi)
{
	size_t first, end;

	region_folio_pages(r, fi, &first, &end);
	for (size_t i = first; i < end; i++)
		if (r->pages[i] != PG_NONE)
			return false;
	return true;
}

bool swapin_around(struct uswap_mm *m, struct mm_region *r, size_t fi)
{
	size_t first, end;

	region_folio_pages(r, fi, &first, &end);
	return m->fault_around > (1u << r->folio_shift) && folio_untouched(r, fi) &&
	       ft_sequential(m, region_addr(r, first), region_addr(r, end)) &&
	       atomic_load(&m->resident) + m->fault_around < atomic_load(&m->high_pages) &&
	       !zero_around(m, r, fi);
}
