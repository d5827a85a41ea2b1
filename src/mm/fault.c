/*
 * fault.c - fault handler threads: read the userfaultfd, resolve faults, apply events.
 *
 * Why the handlers look like this (measured on a 2-vCPU VM, see docs/mm.md): a handler sleeping in
 * poll() on another CPU costs ~60-70 us per fault, because every fault is two cross-CPU wake-ups and an
 * idle vCPU halts. One handler pinned on each CPU brings it to ~5 us: the faulting thread's wake-up of
 * the handler on its own CPU is a local switch. So there is one handler per CPU, each pinned, all
 * reading the same uffd (non-blocking read first, poll() only when it is empty). A whole folio is
 * resolved per fault, and a first touch zero-fills the untouched pages around it (fault-around), so
 * that sequential first touches pay one fault per window instead of one per page.
 *
 * Context rules: a handler never touches registered memory (it would wait on itself), never
 * allocates (a preloaded program may serve malloc from registered memory), and never holds a folio
 * lock or tbl_lock while it reclaims.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "mm/mm.h"
#include "mm/uffd.h"
#include "util/thread.h"

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void hist_add(struct mm_hist *h, uint64_t ns)
{
	unsigned b = 0;

	if (ns >= 4) {
		unsigned lg = 63 - (unsigned)__builtin_clzll(ns);

		b = lg * 4 + (unsigned)((ns >> (lg - 2)) & 3);
	} else {
		b = (unsigned)ns;
	}
	if (b >= MM_HIST_BUCKETS)
		b = MM_HIST_BUCKETS - 1;
	atomic_fetch_add_explicit(&h->n[b], 1, memory_order_relaxed);
}

uint64_t hist_percentile(const struct mm_hist *h, double p)
{
	uint64_t total = 0, seen = 0;

	for (unsigned b = 0; b < MM_HIST_BUCKETS; b++)
		total += atomic_load(&h->n[b]);
	if (!total)
		return 0;
	for (unsigned b = 0; b < MM_HIST_BUCKETS; b++) {
		seen += atomic_load(&h->n[b]);
		if ((double)seen >= p * (double)total) {
			unsigned lg = b / 4;

			if (b < 4)
				return b;
			/* the middle of the bucket */
			return (1ull << lg) + (uint64_t)(b % 4) * (1ull << (lg - 2)) + (1ull << (lg - 2)) / 2;
		}
	}
	return 0;
}

/* ---- uffd ioctls: 0 or -errno, *done = bytes done (also on a partial failure) ---- */

int uffd_copy(int uffd, uintptr_t dst, const void *src, size_t len, bool wp, bool wake, size_t *done)
{
	struct uffdio_copy c = {
		.dst = dst,
		.src = (uintptr_t)src,
		.len = len,
		.mode = (wp ? UFFDIO_COPY_MODE_WP : 0) | (wake ? 0 : UFFDIO_COPY_MODE_DONTWAKE),
	};
	int ret = ioctl(uffd, UFFDIO_COPY, &c) ? -errno : 0;

	*done = c.copy > 0 ? (size_t)c.copy : 0;
	if (!ret && *done != len)
		ret = -EAGAIN;
	return ret;
}

/*
 * Which of @n pages from @addr are mapped (present, or in the kernel's swap), into @out: mincore()
 * (which fails where there is no mapping at all), refined by /proc/self/pagemap when we have it
 * (mincore() cannot see a page the kernel swapped out). Return: 0; -1 no mapping, or no way to tell.
 */
static int pages_mapped(struct uswap_mm *m, uintptr_t addr, size_t n, uint8_t *out)
{
	uint64_t pm[64];

	if (mincore((void *)addr, n * MM_PAGE, out))
		return -1;
	for (size_t j = 0; j < n; j++)
		out[j] &= 1;
	for (size_t j0 = 0; m->pagemap_fd >= 0 && j0 < n; j0 += 64) {
		size_t cnt = n - j0 < 64 ? n - j0 : 64;
		off_t off = (off_t)((addr / MM_PAGE + j0) * sizeof(pm[0]));

		if (pread(m->pagemap_fd, pm, cnt * sizeof(pm[0]), off) != (ssize_t)(cnt * sizeof(pm[0])))
			break;
		for (size_t j = 0; j < cnt; j++)
			out[j0 + j] = (pm[j] & (PM_PRESENT | PM_SWAP)) != 0;
	}
	return 0;
}

/*
 * Pages from @addr (at most @n) inside the vma that holds @addr: the kernel moves and fills a range
 * only within one vma, and a program that changes the protection of part of a registered range
 * (a guard page, a heap committed with mprotect()) splits it into several.
 * Return: 0 and *pages; -ENOENT no vma there; -EOPNOTSUPP no way to tell (before Linux 6.11).
 */
static int vma_pages(struct uswap_mm *m, uintptr_t addr, size_t n, size_t *pages)
{
	struct procmap_query q = {.size = sizeof(q), .query_addr = addr};
	size_t left;

	if (m->maps_fd < 0 || ioctl(m->maps_fd, PROCMAP_QUERY, &q))
		return m->maps_fd < 0 || errno == ENOTTY || errno == EINVAL ? -EOPNOTSUPP : -ENOENT;
	if (q.vma_start > addr)
		return -ENOENT;
	left = (size_t)(q.vma_end - addr) / MM_PAGE;
	*pages = left < n ? left : n;
	return 0;
}

/*
 * mm_copy() - UFFDIO_COPY of @len bytes from @src to @dst (see uffd_copy()), split where @dst
 * crosses from one vma into the next; @wake: each copy wakes the threads waiting in what it filled.
 * *done: bytes copied from the start, also on error.
 */
int mm_copy(struct uswap_mm *m, uintptr_t dst, const void *src, size_t len, bool wp, bool wake, size_t *done)
{
	size_t pos = 0, stop = len, d, fit;
	int ret = 0;

	while (pos < len) {
		ret = uffd_copy(m->uffd, dst + pos, (const char *)src + pos, stop - pos, wp, wake, &d);
		pos += d;
		if (!ret) {
			stop = len;
			continue;
		}
		if (d || (ret != -ENOENT && ret != -EINVAL) ||
		    vma_pages(m, dst + pos, (stop - pos) / MM_PAGE, &fit) || fit * MM_PAGE >= stop - pos)
			break;
		stop = pos + fit * MM_PAGE;
	}
	*done = pos;
	return pos == len ? 0 : ret;
}

/*
 * mm_move() - UFFDIO_MOVE of @n pages (at most MV_MAX_PAGES) from @src to @dst, whose slots are
 * empty, through @uffd (the one @dst is registered with); @st[j] says where page j is afterwards:
 * MV_MOVED (at dst), MV_LEFT (still at src) or MV_HOLE (at neither: src had no page there, the
 * kernel zapped it after a MADV_DONTNEED whose REMOVE event we may not have applied yet).
 *
 * Two properties of the kernel's move loop (mm/userfaultfd.c, move_pages(), as of 6.18) decide
 * how this is done. Once a step of the loop returns -EAGAIN (a pte changed under it: the program
 * touched the page and set its accessed bit, a concurrent MADV_DONTNEED zapped it, a migration)
 * the loop's error stays -EAGAIN: later steps that succeed do not clear it and do not advance.
 * With UFFDIO_MOVE_MODE_ALLOW_SRC_HOLES, a step over a hole "succeeds", so a page zapped between
 * its -EAGAIN and the retry makes the ioctl spin in the kernel for ever (seen: a handler thread
 * at 100% system time in move_pages_ptes()). Without it the retry moves the page (or finds the
 * hole) and the next step stops on -EEXIST or -ENOENT: it ends, but reports the page it just
 * moved as not moved. So: never ALLOW_SRC_HOLES (a hole ends a call, the next starts after it),
 * and after any error the page tables, not the count, say what moved.
 * A call also moves only within one vma on each side, between vmas of the same protection
 * (-EINVAL otherwise): a range that crosses a vma boundary is moved in parts, and the pages of a
 * vma whose protection the program changed (read-only, PROT_NONE) stay where they are.
 * Return: 0 when every page that src held is at dst; else the first error that left pages behind.
 */
static int move_pages_of(struct uswap_mm *m, int uffd, uintptr_t dst, uintptr_t src, size_t n, bool wake,
			 uint8_t *st, bool *erred)
{
	uint8_t at_dst[MV_MAX_PAGES], at_src[MV_MAX_PAGES];
	size_t i = 0, stop = n; /* this call tries [i, stop) */
	int ret = 0;

	memset(st, MV_LEFT, n);
	while (i < n) {
		if (i >= stop)
			stop = n;
		struct uffdio_move mv = {
			.dst = dst + i * MM_PAGE,
			.src = src + i * MM_PAGE,
			.len = (stop - i) * MM_PAGE,
			.mode = wake ? 0 : UFFDIO_MOVE_MODE_DONTWAKE,
		};
		size_t k, j, w = stop - i, fs, fd;
		int err;

		if (!ioctl(uffd, UFFDIO_MOVE, &mv)) {
			memset(st + i, MV_MOVED, w);
			i = stop;
			stop = n;
			continue;
		}
		err = -errno;
		*erred = true;
		if (pages_mapped(m, dst + i * MM_PAGE, w, at_dst) || pages_mapped(m, src + i * MM_PAGE, w, at_src)) {
			/* A range unmapped under us (its event not applied yet): trust the count. */
			size_t dp = mv.move > 0 ? (size_t)mv.move / MM_PAGE : 0;

			memset(st + i, MV_MOVED, dp < w ? dp : w);
			return err;
		}
		for (j = 0; j < w; j++)
			st[i + j] = at_dst[j] ? MV_MOVED : at_src[j] ? MV_LEFT : MV_HOLE;
		for (k = 0; k < w && at_dst[k]; k++)
			;
		if (k == w) {
			/* all there: the error came after the last page */
			i = stop;
			stop = n;
			continue;
		}
		if (at_src[k]) {
			/*
			 * Page i + k would not move. After progress the error may belong to a page
			 * already moved (see above) or be a partial move's -EAGAIN: go on from i + k.
			 */
			if (k > 0) {
				i += k;
				continue;
			}
			if ((err != -EINVAL && err != -ENOENT) || vma_pages(m, src + i * MM_PAGE, w, &fs) ||
			    vma_pages(m, dst + i * MM_PAGE, w, &fd))
				return ret ? ret : err;
			if (fs < w || fd < w) {
				stop = i + (fs < fd ? fs : fd); /* try the part inside both vmas */
				continue;
			}
			/* Within one vma on each side and still refused: those pages stay. */
			ret = ret ? ret : err;
			i = stop;
			stop = n;
			continue;
		}
		/* A hole: the next call starts at the next page src still holds. */
		for (j = k + 1; j < w && !at_src[j]; j++)
			;
		i += j;
	}
	return ret;
}

int mm_move(struct uswap_mm *m, int uffd, uintptr_t dst, uintptr_t src, size_t n, bool wake, uint8_t *st)
{
	bool erred = false;
	int ret = move_pages_of(m, uffd, dst, src, n, wake, st, &erred);

	/* A call that fails wakes nobody, even for the pages it moved before the error. */
	if (wake && erred)
		uffd_wake(uffd, dst, n * MM_PAGE);
	return ret;
}

int uffd_wake(int uffd, uintptr_t start, size_t len)
{
	struct uffdio_range r = {.start = start, .len = len};

	return ioctl(uffd, UFFDIO_WAKE, &r) ? -errno : 0;
}

static int uffd_unprotect(int uffd, uintptr_t start, size_t len)
{
	struct uffdio_writeprotect wp = {.range = {.start = start, .len = len}, .mode = 0};

	return ioctl(uffd, UFFDIO_WRITEPROTECT, &wp) ? -errno : 0;
}

/* Load failures told on stderr (with the swap id and tier), like the kernel's swap read errors; then only counted. */
#define LOAD_FAILURES_LOGGED 10

/* A page whose data cannot be read back: later accesses get SIGBUS, as with a swap read error. */
static void poison(struct uswap_mm *m, uintptr_t addr, size_t len)
{
	struct uffdio_poison p = {.range = {.start = addr, .len = len}, .mode = 0};

	ioctl(m->uffd, UFFDIO_POISON, &p);
}

/* ---- bringing a folio in ---- */

static int in_zero(struct uswap_mm *m, struct mm_region *r, size_t i, size_t n, bool wake, size_t *done_pages)
{
	size_t done;
	int ret = mm_copy(m, region_addr(r, i), m->zero, n * MM_PAGE, false, wake, &done);

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
 * eviction (no store) scores +1, a write fault on a clean page (a wasted round trip, several times
 * the cost of a store) scores -WP_FAULT_COST. While the score is negative, one read in
 * WP_PROBE_EVERY still keeps its copy, so that a change of behaviour is noticed.
 */
#define WP_FAULT_COST  4
#define WP_PROBE_EVERY 16
static bool clean_pays(struct uswap_mm *m)
{
	if (atomic_load_explicit(&m->wp_score, memory_order_relaxed) >= 0)
		return true;
	return atomic_fetch_add_explicit(&m->wp_probe, 1, memory_order_relaxed) % WP_PROBE_EVERY == 0;
}

static int in_swapped(struct uswap_mm *m, unsigned char *stage, struct mm_region *r, size_t i, size_t n,
		      bool write, bool wake)
{
	uint64_t w = r->pages[i];
	size_t done, dp;
	int ret = uswap_load_pages(m->swap, pg_id(w), pg_idx(w), n, stage);

	if (ret) {
		/* The data is gone (tier error, checksum mismatch): never hand out wrong data. */
		if (atomic_fetch_add(&m->c.load_failures, 1) < LOAD_FAILURES_LOGGED)
			fprintf(stderr, "uswap: swap-in of %zu page(s) at %#lx failed: %s; they are poisoned (SIGBUS on access)\n",
				n, (unsigned long)region_addr(r, i), uswap_errmsg()[0] ? uswap_errmsg() : strerror(-ret));
		uswap_free_pages(m->swap, pg_id(w), pg_idx(w), n);
		for (size_t j = 0; j < n; j++)
			r->pages[i + j] = PG_NONE;
		poison(m, region_addr(r, i), n * MM_PAGE);
		return 0;
	}
	/*
	 * A read keeps the copy and maps the pages write-protected: evicting them again is free, but a
	 * later write costs a fault of its own. So keep copies only while they pay off (see clean_pays()).
	 */
	if (!write && !clean_pays(m))
		write = true;
	ret = mm_copy(m, region_addr(r, i), stage, n * MM_PAGE, !write, wake, &done);
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
 * Page @i of @r back from the shadow by copy, when a move cannot take it: the kernel moves a page
 * only between vmas of the same protection, and the program may have made its range read-only or
 * PROT_NONE since the page went to the shadow (the fault then comes from a read, or from the kernel
 * on the program's behalf). Return: 0, or -errno with the page still in the shadow.
 */
static int shadow_copy_back(struct uswap_mm *m, struct mm_region *r, size_t i, bool wake)
{
	size_t done;
	int ret = mm_copy(m, region_addr(r, i), (void *)region_shadow(r, i), MM_PAGE, false, wake, &done);

	if (ret)
		return ret;
	madvise((void *)region_shadow(r, i), MM_PAGE, MADV_DONTNEED);
	return 0;
}

static int in_shadow(struct uswap_mm *m, struct mm_region *r, size_t i, size_t n, bool write, bool wake)
{
	bool clean = r->pages[i] & PG_CLEAN;
	size_t done, dp;
	int ret;

	if (clean && !write) {
		/* MOVE would map the page writable and lose the protection: copy it in protected. */
		ret = mm_copy(m, region_addr(r, i), (void *)region_shadow(r, i), n * MM_PAGE, true, wake,
			      &done);
		dp = done / MM_PAGE;
		if (dp)
			madvise((void *)region_shadow(r, i), dp * MM_PAGE, MADV_DONTNEED);
		for (size_t j = 0; j < dp; j++)
			r->pages[i + j] = (r->pages[i + j] & ~PG_KIND_MASK) | PG_PRESENT;
	} else {
		uint8_t st[MV_MAX_PAGES];

		ret = mm_move(m, m->uffd, region_addr(r, i), region_shadow(r, i), n, wake, st);
		dp = 0;
		for (size_t j = 0; j < n; j++) {
			if (st[j] == MV_LEFT && ret == -EINVAL && !shadow_copy_back(m, r, i + j, wake))
				st[j] = MV_MOVED;
			if (st[j] != MV_MOVED)
				continue; /* still in the shadow, still counted there */
			if (clean)
				pages_put_copies(m, r, i + j, i + j + 1);
			r->pages[i + j] = PG_PRESENT;
			dp++;
		}
		if (ret == -EINVAL && dp == n)
			ret = 0;
	}
	atomic_fetch_sub(&m->inactive, dp);
	return ret;
}

int fault_folio_in(struct uswap_mm *m, unsigned char *stage, struct mm_region *r, size_t fi, bool write,
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
			while (i + n < end && pg_kind(r->pages[i + n]) == PG_NONE)
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
			       (r->pages[i + n] & PG_CLEAN) == (w & PG_CLEAN) &&
			       (!(w & PG_CLEAN) || pg_copy_follows(r->pages[i + n - 1], r->pages[i + n])))
				n++;
			ret = in_shadow(m, r, i, n, write, wake);
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
 * First touch of an untouched folio: zero-fill it together with the untouched folios around it, in an
 * aligned window of fault_around pages, with one UFFDIO_COPY per contiguous run. Neighbours are only
 * try-locked (we already hold @fi): nobody waits while holding a folio lock, so this cannot deadlock.
 */
static int fault_around(struct uswap_mm *m, struct mm_region *r, size_t fi)
{
	size_t win = (size_t)m->fault_around << MM_PAGE_SHIFT;
	uintptr_t fa = r->fbase + (fi << (MM_PAGE_SHIFT + r->folio_shift));
	uintptr_t ws = fa & ~(win - 1), we = ws + win;
	size_t fpages = (size_t)1 << r->folio_shift;
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
	(void)fpages;
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
size_t swapin_run(struct uswap_mm *m, unsigned char *stage, struct mm_region *r, size_t f0, size_t max, bool keep,
		  size_t *nf)
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
		mm_copy(m, region_addr(r, first), stage, fit * MM_PAGE, keep, false, &done);
		dp = done / MM_PAGE;
		for (size_t j = 0; j < dp; j++) {
			if (!keep)
				uswap_free_pages(m->swap, ids[j], idx[j], 1);
			r->pages[first + j] = keep ? pg_make(PG_PRESENT, (uint32_t)ids[j], idx[j], true) : PG_PRESENT;
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
static void readahead(struct uswap_mm *m, unsigned char *stage, struct mm_region *r, size_t fi)
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
	if (!win || atomic_load(&m->resident) + win > atomic_load(&m->limit))
		return;
	dp = swapin_run(m, stage, r, fi + 1, win, clean_pays(m), &nf);
	atomic_fetch_add(&m->c.readahead_pages, dp);
	if (dp)
		atomic_store(&m->ra_next, region_addr(r, end + dp));
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
			atomic_store_explicit(&m->ft_end[k], we, memory_order_relaxed); /* fb <= we: a folio is smaller */
			return true;
		}
	}
	atomic_store_explicit(&m->ft_end[atomic_fetch_add_explicit(&m->ft_next, 1, memory_order_relaxed) % FT_STREAMS],
			      fb, memory_order_relaxed);
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

/*
 * The copies of folio @fi's clean pages are stale from now on: drop them and lift the folio's write
 * protection. *had: it had clean pages. Context: folio locked. Return: 0 (waiters woken) or -errno.
 */
static int folio_unprotect(struct uswap_mm *m, struct mm_region *r, size_t fi, bool *had)
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

/* A write to a clean (write-protected) page. Return: as folio_unprotect(). */
static int fault_wp(struct uswap_mm *m, struct mm_region *r, size_t fi)
{
	bool had;
	int ret = folio_unprotect(m, r, fi, &had);

	if (had && atomic_load_explicit(&m->wp_score, memory_order_relaxed) > -WP_SCORE_MAX)
		atomic_fetch_sub_explicit(&m->wp_score, WP_FAULT_COST, memory_order_relaxed);
	atomic_fetch_add(&m->c.wp_faults, 1);
	return ret;
}

void fault_unprotect(struct uswap_mm *m, uintptr_t start, uintptr_t end)
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
 * A missing-page fault on a page we hold as present: either a stale message (another fault installed
 * it since: the copy fails with EEXIST), or the kernel zapped it after we handled its REMOVE event
 * (madvise tells us first, then zaps). Then it reads as zero, which is what the program asked for.
 */
static void fault_present(struct uswap_mm *m, struct mm_region *r, size_t page)
{
	size_t done;

	if (uffd_copy(m->uffd, region_addr(r, page), m->zero, MM_PAGE, false, false, &done) == 0) {
		pages_put_copies(m, r, page, page + 1);
		atomic_fetch_add(&m->c.zero_fills, 1);
	}
}

/*
 * A fault where we track nothing (a registration raced with us): give it a zero page and move on.
 * Return: 0, or -ENOENT when @addr is not registered with our uffd (SIGBUS mode: not our fault).
 */
static int fault_untracked(struct uswap_mm *m, uintptr_t addr, bool wp)
{
	size_t done;
	int ret;

	if (wp)
		ret = uffd_unprotect(m->uffd, addr, MM_PAGE);
	else
		ret = uffd_copy(m->uffd, addr, m->zero, MM_PAGE, false, true, &done);
	if (m->sigbus && (ret == -ENOENT || ret == -EINVAL))
		return -ENOENT;
	atomic_fetch_add(&m->c.untracked_faults, 1);
	if (!m->sigbus)
		uffd_wake(m->uffd, addr, MM_PAGE);
	return 0;
}

static void after_fault(struct uswap_mm *m)
{
	uint64_t res = atomic_load(&m->resident);

	if (res <= atomic_load(&m->high))
		return;
	reclaim_kick(m);
	if (res > atomic_load(&m->limit) && !atomic_load(&m->forking)) {
		atomic_fetch_add(&m->c.direct_reclaims, 1);
		if (m->sigbus)
			reclaim_direct(m);
		else
			reclaim_run(m, atomic_load(&m->limit), true);
	}
}

/*
 * A fault at @addr: @wp a write to a write-protected page, else a missing page (@write: by a write).
 * From a handler (@stage its own), or in SIGBUS mode from the faulting thread. @adopt: a fault in no
 * region may adopt the vma around it (a range that grew in place) or be served a zero page; in
 * SIGBUS mode only a vma that holds one of our regions is adopted, and an address our uffd does not
 * cover is left alone. Return: 0 (served: the access can be retried), -ENOENT not ours.
 */
static int fault_resolve(struct uswap_mm *m, unsigned char *stage, uintptr_t addr, bool wp, bool write,
			 bool adopt)
{
	uint64_t t0 = now_ns();
	struct mm_region *r;
	bool swapin = false, woken = false;
	size_t fi, first, end;
	int ret = 0;

	pthread_rwlock_rdlock(&m->tbl_lock);
	r = region_find(m, addr);
	if (!r) {
		pthread_rwlock_unlock(&m->tbl_lock);
		if (!adopt)
			return -ENOENT;
		/*
		 * No region: a range that grew in place (adopt it), or one that mremap() moved and whose
		 * REMAP event another handler has read but not applied yet: adopting it now would zero-fill
		 * pages that are swapped. So first let every event read so far be applied.
		 */
		mm_settle(m);
		pthread_rwlock_wrlock(&m->tbl_lock);
		region_adopt(m, addr, m->sigbus);
		pthread_rwlock_unlock(&m->tbl_lock);
		pthread_rwlock_rdlock(&m->tbl_lock);
		r = region_find(m, addr);
		if (!r) {
			pthread_rwlock_unlock(&m->tbl_lock);
			return fault_untracked(m, addr, wp);
		}
	}
	fi = region_folio(r, addr);
	region_folio_pages(r, fi, &first, &end);
	folio_lock(&r->folios[fi]);
	if (wp) {
		woken = !fault_wp(m, r, fi);
		folio_summarize(m, r, fi);
	} else if (pg_kind(r->pages[region_page(r, addr)]) == PG_PRESENT) {
		fault_present(m, r, region_page(r, addr));
		folio_summarize(m, r, fi);
	} else {
		swapin = pg_kind(r->pages[region_page(r, addr)]) == PG_SWAPPED;
		if (m->fault_around > (1u << r->folio_shift) && folio_untouched(r, fi) &&
		    ft_sequential(m, region_addr(r, first), region_addr(r, end)) &&
		    atomic_load(&m->resident) + m->fault_around < atomic_load(&m->high) &&
		    !fault_around(m, r, fi))
			ret = 0;
		else /* without neighbours, or when filling them failed (pages of a vma we cannot fill) */
			ret = fault_folio_in(m, stage, r, fi, write, true);
		/* 0: every page of the folio went in by a copy or move that woke its waiters. */
		woken = !ret;
	}
	atomic_fetch_or(&r->folios[fi], FL_REF);
	folio_unlock(&r->folios[fi]);
	/*
	 * Otherwise, whatever happened, wake: a thread whose page is still missing faults again and
	 * comes back. (A UFFDIO_WAKE is a system call of its own, ~1-2 us here, on every fault.) In
	 * SIGBUS mode nobody waits in the kernel: the faulting thread retries when it returns.
	 */
	if (!woken && !m->sigbus)
		uffd_wake(m->uffd, region_addr(r, first), (end - first) * MM_PAGE);
	if (swapin)
		hist_add(&m->swapin_hist, now_ns() - t0);
	/* The program goes on with its page while the next ones come in. */
	if (swapin && !ret)
		readahead(m, stage, r, fi);
	pthread_rwlock_unlock(&m->tbl_lock);
	if (ret == -EAGAIN)
		atomic_fetch_add(&m->c.retries, 1);
	after_fault(m);
	return 0;
}

static void on_pagefault(struct mm_handler *h, const struct uffd_msg *msg)
{
	uintptr_t addr = (uintptr_t)msg->arg.pagefault.address & ~(MM_PAGE - 1);

	fault_resolve(h->m, h->stage, addr, msg->arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_WP,
		      msg->arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_WRITE, true);
}

/*
 * MADV_DONTNEED / MADV_FREE / MADV_REMOVE on a registered range: the kernel tells us before it zaps.
 * Present pages are moved out and dropped by us (so that MADV_FREE, which may leave pages mapped,
 * cannot leave memory we no longer count); then everything in the range is NONE.
 */
static void on_remove(struct uswap_mm *m, uintptr_t start, uintptr_t end)
{
	atomic_fetch_add(&m->c.events_remove, 1);
	pthread_rwlock_rdlock(&m->tbl_lock);
	for (unsigned ri = region_after(m, start); ri < m->nr_regions && m->tbl[ri]->start < end; ri++) {
		struct mm_region *r = m->tbl[ri];
		uintptr_t a = start > r->start ? start : r->start;
		uintptr_t b = end < r->end ? end : r->end;

		for (size_t fi = region_folio(r, a); fi <= region_folio(r, b - 1); fi++) {
			size_t first, fend, i;

			folio_lock(&r->folios[fi]);
			region_folio_pages(r, fi, &first, &fend);
			if (first < region_page(r, a))
				first = region_page(r, a);
			if (fend > region_page(r, b))
				fend = region_page(r, b);
			for (i = first; i < fend;) {
				uint8_t st[MV_MAX_PAGES];
				size_t n = 0;

				while (i + n < fend && pg_kind(r->pages[i + n]) == PG_PRESENT)
					n++;
				if (!n) {
					i++;
					continue;
				}
				/* Pages the kernel zaps first are holes that mm_move() steps over. */
				mm_move(m, m->uffd_shadow, region_shadow(r, i), region_addr(r, i), n, false, st);
				if (memchr(st, MV_MOVED, n))
					madvise((void *)region_shadow(r, i), n * MM_PAGE, MADV_DONTNEED);
				i += n;
			}
			pages_drop(m, r, first, fend);
			folio_summarize(m, r, fi);
			folio_unlock(&r->folios[fi]);
		}
	}
	pthread_rwlock_unlock(&m->tbl_lock);
}

static void on_unmap(struct uswap_mm *m, uintptr_t start, uintptr_t end, uint64_t seq)
{
	atomic_fetch_add(&m->c.events_unmap, 1);
	pthread_rwlock_wrlock(&m->tbl_lock);
	/* A region made after this event was read is a new mapping at a reused address: not ours to cut. */
	for (unsigned ri = region_after(m, start); ri < m->nr_regions && m->tbl[ri]->start < end;) {
		struct mm_region *r = m->tbl[ri];
		uintptr_t b = end < r->end ? end : r->end;

		if (r->seq > seq) {
			ri++;
			continue;
		}
		region_forget(m, start > r->start ? start : r->start, b);
		ri = region_after(m, b);
	}
	pthread_rwlock_unlock(&m->tbl_lock);
}

static void on_remap(struct uswap_mm *m, uintptr_t from, uintptr_t to, size_t len)
{
	atomic_fetch_add(&m->c.events_remap, 1);
	pthread_rwlock_wrlock(&m->tbl_lock);
	region_remap(m, from, to, len);
	pthread_rwlock_unlock(&m->tbl_lock);
}

/*
 * Events are applied one at a time in the order the kernel queued them, whichever handler read them:
 * mremap() queues REMAP and then UNMAP of the old range, and applying the UNMAP first would drop the
 * pages that REMAP moves. Reads are serialized by ev_lock, which numbers the events; a handler waits
 * for its event's turn (ev_applied) holding no lock. Events of a batch go before its faults, and a
 * fault in no region waits until every event read so far is applied (mm_settle()): the kernel
 * completes an event when it is read, so the program may touch a moved range before it is applied.
 */
static void apply_event(struct uswap_mm *m, const struct uffd_msg *msg, uint64_t region_seq, uint64_t ev)
{
	while (atomic_load_explicit(&m->ev_applied, memory_order_acquire) != ev)
		sched_yield();
	switch (msg->event) {
	case UFFD_EVENT_REMOVE:
		on_remove(m, msg->arg.remove.start, msg->arg.remove.end);
		break;
	case UFFD_EVENT_UNMAP:
		on_unmap(m, msg->arg.remove.start, msg->arg.remove.end, region_seq);
		break;
	case UFFD_EVENT_REMAP:
		on_remap(m, msg->arg.remap.from, msg->arg.remap.to, msg->arg.remap.len);
		break;
	default:
		break;
	}
	atomic_store_explicit(&m->ev_applied, ev + 1, memory_order_release);
}

static void *handler_main(void *arg)
{
	struct mm_handler *h = arg;
	struct uswap_mm *m = h->m;
	struct uffd_msg msgs[16];
	struct pollfd p[2] = {{.fd = m->uffd, .events = POLLIN}, {.fd = m->stop_fd, .events = POLLIN}};

	if (h->cpu >= 0) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(h->cpu, &set);
		pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	}
	for (;;) {
		uint64_t seq, ev;
		ssize_t n;
		size_t nr, nev = 0;
		int e;

		/*
		 * Every handler in poll() wakes on a fault, and one read takes it. A handler that found
		 * another reading would sleep on ev_lock and cost that one a futex wake (a system call,
		 * an IPI to a halted vCPU) before it could serve the fault: it polls again instead (poll
		 * is level-triggered: what the reader leaves wakes it at once), after a yield, so that
		 * it cannot spin against a reader that shares its CPU.
		 */
		if (pthread_mutex_trylock(&m->ev_lock)) {
			sched_yield();
			if (poll(p, 2, -1) < 0 && errno != EINTR)
				break;
			if (p[1].revents)
				break;
			continue;
		}
		seq = atomic_load(&m->seq);
		n = read(m->uffd, msgs, sizeof(msgs));
		e = errno;
		nr = n > 0 ? (size_t)n / sizeof(msgs[0]) : 0;
		for (size_t i = 0; i < nr; i++)
			nev += msgs[i].event != UFFD_EVENT_PAGEFAULT;
		ev = m->ev_read;
		m->ev_read += nev;
		pthread_mutex_unlock(&m->ev_lock);
		if (n < 0) {
			if (e == EINTR)
				continue;
			if (e != EAGAIN)
				break;
			if (poll(p, 2, -1) < 0 && errno != EINTR)
				break;
			if (p[1].revents)
				break;
			continue;
		}
		for (size_t i = 0; i < nr; i++)
			if (msgs[i].event != UFFD_EVENT_PAGEFAULT)
				apply_event(m, &msgs[i], seq, ev++);
		if (nr == nev)
			continue;
		/*
		 * Events another handler read before these faults may still be applying: the kernel
		 * zaps a MADV_DONTNEED range once its REMOVE is read, so a fault here may be a touch
		 * after the zap, and the page must then read zero, not come back from swap.
		 */
		while (atomic_load_explicit(&m->ev_applied, memory_order_acquire) < ev)
			sched_yield();
		for (size_t i = 0; i < nr; i++)
			if (msgs[i].event == UFFD_EVENT_PAGEFAULT)
				on_pagefault(h, &msgs[i]);
	}
	return NULL;
}

void mm_settle(struct uswap_mm *m)
{
	uint64_t target;

	pthread_mutex_lock(&m->ev_lock);
	target = m->ev_read;
	pthread_mutex_unlock(&m->ev_lock);
	while (atomic_load_explicit(&m->ev_applied, memory_order_acquire) < target)
		sched_yield();
}

int fault_start(struct uswap_mm *m)
{
	int cpu = -1;

	for (unsigned i = 0; i < m->nr_handlers; i++) {
		struct mm_handler *h = &m->handlers[i];
		int ret;

		h->m = m;
		if (CPU_COUNT(&m->cpus)) {
			do
				cpu = (cpu + 1) % CPU_SETSIZE;
			while (!CPU_ISSET(cpu, &m->cpus));
		}
		h->cpu = cpu;
		ret = thread_start(&h->th, "uswap-fault", handler_main, h);
		if (ret)
			return ret;
		h->started = true;
	}
	return 0;
}

void fault_stop(struct uswap_mm *m)
{
	for (unsigned i = 0; i < m->nr_handlers; i++)
		if (m->handlers[i].started) {
			pthread_join(m->handlers[i].th, NULL);
			m->handlers[i].started = false;
		}
}

/*
 * ---- SIGBUS mode: the faulting thread resolves its own fault ----
 *
 * With UFFD_FEATURE_SIGBUS the kernel does not queue a fault and put the thread to sleep: it sends
 * the thread SIGBUS (BUS_ADRERR, the address in si_addr), and the handler below resolves the fault
 * in that thread, like a handler thread would, then returns and the access is retried. No wake-up
 * of another thread, no sleep: on this machine's vCPUs that is the difference between ~5 us and
 * 13-60 us per fault (docs/mm.md). The price: an access the kernel makes on the program's behalf
 * (read(2) into a missing page, a futex word) cannot be served and fails with EFAULT.
 *
 * Which fault it was comes from the page-fault error code the kernel leaves in the signal frame
 * (x86: bit 0 the page was present, so a write-protect fault; bit 1 a write). The handler runs with
 * every signal blocked (so no other handler of the program interrupts it and faults in turn), never
 * allocates, and takes only our own locks, which no thread holds while it touches registered memory.
 */
static pthread_rwlock_t sig_lock = PTHREAD_RWLOCK_INITIALIZER; /* sig_mm: written under it for writing */
static struct uswap_mm *sig_mm[MM_SIGBUS_MAX];
static struct sigaction sig_old; /* the program's SIGBUS action before ours */

#if defined(__x86_64__)
#define SIG_FLAGS_KNOWN 1
static bool sig_fault_flags(const void *ucv, bool *wp, bool *write)
{
	const ucontext_t *uc = ucv;
	unsigned long err = (unsigned long)uc->uc_mcontext.gregs[REG_ERR];

	*wp = err & 1;
	*write = err & 2;
	return true;
}
#else
#define SIG_FLAGS_KNOWN 0
static bool sig_fault_flags(const void *ucv, bool *wp, bool *write)
{
	(void)ucv;
	*wp = *write = false;
	return false;
}
#endif

static unsigned char *stage_get(struct uswap_mm *m, unsigned *slot)
{
	for (;;) {
		for (unsigned i = 0; i < m->nr_stages; i++)
			if (!atomic_load_explicit(&m->stage_busy[i], memory_order_relaxed) &&
			    !atomic_exchange_explicit(&m->stage_busy[i], true, memory_order_acquire)) {
				*slot = i;
				return m->stages[i];
			}
		sched_yield();
	}
}

/* Not a fault of ours: what the program would have got without us (@old: its action). */
static void sig_chain(const struct sigaction *old, int sig, siginfo_t *si, void *uc)
{
	if (old->sa_flags & SA_SIGINFO) {
		if (old->sa_sigaction) {
			old->sa_sigaction(sig, si, uc);
			return;
		}
	} else if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) {
		old->sa_handler(sig);
		return;
	}
	/*
	 * The default action (a SIGBUS the kernel raises for a fault cannot be ignored): a faulting
	 * access is retried on return and faults again, now to the default; one sent by kill() is sent
	 * again, and delivered when this handler returns, unless the program ignored it.
	 */
	if (si->si_code <= 0 && old->sa_handler == SIG_IGN)
		return;
	signal(SIGBUS, SIG_DFL);
	if (si->si_code <= 0)
		raise(sig);
}

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	int saved = errno, ret = -ENOENT;
	uintptr_t addr = (uintptr_t)si->si_addr & ~(MM_PAGE - 1);
	struct sigaction old;
	bool wp, write;

	pthread_rwlock_rdlock(&sig_lock);
	old = sig_old;
	if (si->si_code == BUS_ADRERR && sig_fault_flags(uc, &wp, &write)) {
		/* First the regions of every instance, then a range one of them may have grown. */
		for (int pass = 0; pass < 2 && ret; pass++)
			for (unsigned i = 0; i < MM_SIGBUS_MAX && ret; i++) {
				struct uswap_mm *m = sig_mm[i];
				unsigned slot;
				unsigned char *stage;

				if (!m)
					continue;
				/* Faults after a munmap/mremap/madvise of ours see its event applied. */
				mm_settle(m);
				stage = stage_get(m, &slot);
				ret = fault_resolve(m, stage, addr, wp, write, pass == 1);
				atomic_store_explicit(&m->stage_busy[slot], false, memory_order_release);
				if (!ret)
					atomic_fetch_add_explicit(&m->c.sigbus_faults, 1, memory_order_relaxed);
			}
	}
	pthread_rwlock_unlock(&sig_lock);
	errno = saved;
	if (ret)
		sig_chain(&old, sig, si, uc);
}

static bool sig_none(void)
{
	for (unsigned i = 0; i < MM_SIGBUS_MAX; i++)
		if (sig_mm[i])
			return false;
	return true;
}

int fault_sigbus_add(struct uswap_mm *m)
{
	int ret = -EMFILE;

	if (!SIG_FLAGS_KNOWN)
		return -EOPNOTSUPP;
	pthread_rwlock_wrlock(&sig_lock);
	/*
	 * The first instance installs the handler (again, if the last one went: see _del()), unless it
	 * is there already (a fork child of a process that had one keeps it, and sig_old with it).
	 */
	if (sig_none()) {
		struct sigaction sa = {.sa_sigaction = on_sigbus, .sa_flags = SA_SIGINFO | SA_RESTART}, cur;

		sigfillset(&sa.sa_mask);
		if (sigaction(SIGBUS, NULL, &cur) ||
		    (!((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_sigbus) && sigaction(SIGBUS, &sa, &sig_old))) {
			ret = -errno;
			goto out;
		}
	}
	for (unsigned i = 0; i < MM_SIGBUS_MAX; i++)
		if (!sig_mm[i]) {
			sig_mm[i] = m;
			ret = 0;
			break;
		}
out:
	pthread_rwlock_unlock(&sig_lock);
	return ret;
}

void fault_sigbus_del(struct uswap_mm *m)
{
	pthread_rwlock_wrlock(&sig_lock);
	for (unsigned i = 0; i < MM_SIGBUS_MAX; i++)
		if (sig_mm[i] == m)
			sig_mm[i] = NULL;
	/* The last one gives the program its action back, unless the program changed it since. */
	if (sig_none()) {
		struct sigaction cur;

		if (!sigaction(SIGBUS, NULL, &cur) && (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_sigbus)
			sigaction(SIGBUS, &sig_old, NULL);
	}
	pthread_rwlock_unlock(&sig_lock);
}

void fault_sigbus_child(void)
{
	/* Only this thread runs in the child; sig_lock may have been held by another at fork(). */
	for (unsigned i = 0; i < MM_SIGBUS_MAX; i++)
		sig_mm[i] = NULL;
}

/*
 * uswap_prefault(): every page of [start, end) that lies in a region in memory, writable, its swap
 * copy dropped (what a write by the program would do), through the same path as a fault. Pages of
 * a folio that will not come in (a part of the range the program made read-only) are given up on
 * after a few tries. Return: 0, or -EAGAIN some pages are not in.
 */
#define PREFAULT_TRIES 8
int fault_prefault(struct uswap_mm *m, uintptr_t start, uintptr_t end)
{
	unsigned slot, tries = 0;
	unsigned char *stage = stage_get(m, &slot);
	int ret = 0;

	mm_settle(m);
	for (uintptr_t a = start; a < end;) {
		struct mm_region *r;
		uintptr_t next, missing = 0;
		bool clean = false;

		pthread_rwlock_rdlock(&m->tbl_lock);
		r = region_find(m, a);
		if (r) {
			size_t fi = region_folio(r, a), first, fend;

			folio_lock(&r->folios[fi]);
			region_folio_pages(r, fi, &first, &fend);
			for (size_t i = first; i < fend; i++) {
				if (pg_kind(r->pages[i]) != PG_PRESENT && !missing)
					missing = region_addr(r, i);
				else if (pg_kind(r->pages[i]) == PG_PRESENT && (r->pages[i] & PG_CLEAN))
					clean = true;
			}
			folio_unlock(&r->folios[fi]);
			next = region_addr(r, fend);
		} else {
			unsigned i = region_after(m, a);

			next = i < m->nr_regions && m->tbl[i]->start > a ? m->tbl[i]->start : end;
		}
		pthread_rwlock_unlock(&m->tbl_lock);
		if ((!missing && !clean) || ++tries > PREFAULT_TRIES) {
			if (missing || clean)
				ret = -EAGAIN;
			a = next;
			tries = 0;
			continue;
		}
		/* Missing pages first (written: copies dropped), then the protection of clean ones. */
		fault_resolve(m, stage, missing ? missing : a, !missing, true, false);
	}
	atomic_store_explicit(&m->stage_busy[slot], false, memory_order_release);
	return ret;
}
