/*
 * demote.c - demotion: the present pages of unreferenced folios leave the program's range, still in
 * memory, so that the next touch faults (a soft fault brings them back without a load) and the back
 * hand can evict what nobody touched. A run of pages at a time into the region's shadow range with
 * UFFDIO_MOVE, or, when the program reports its discards, a window of folios at a time into the slot
 * store with one write-protect, one read and one zap. Called by reclaim.c's front hand.
 */
#include <assert.h>
#include <errno.h>
#include <string.h>
#include <sys/uio.h>

#include "mm/mm.h"
#include "util/alloc.h"

#define SPAN_PAGES 256 /* pages of program range demoted together by demote_front() */

/* ---- stale shadow pages ---- */

/*
 * A soft fault copies its pages back from the shadow (a UFFDIO_COPY into the program's empty slots
 * flushes nothing) rather than move them (a TLB flush each, which interrupts every CPU the program
 * runs on). A slot of the slot store is free again at once; pages of a region's shadow range are left
 * behind, stale. They go together: with the back hand's next
 * release (reclaim.c's batch_flush()), when the list is full, and before anything changes the table
 * (a region's shadow may go away then). Until then their folio is FL_STALE and no hand demotes it: its
 * shadow slots are not empty (it was just touched anyway). At most STALE_PAGES pages wait.
 */
/* Release the list, and @n ranges of @more with it. Context: stale_lock held. */
static void stale_flush(struct uswap_mm *m, const struct iovec *more, unsigned n)
{
	struct iovec iov[STALE_RANGES + RELEASE_RANGES];
	unsigned ns = atomic_load(&m->nr_stale);

	assert(n <= RELEASE_RANGES); /* a release batch */
	if (n)
		memcpy(iov, more, n * sizeof(*iov));
	if (ns)
		memcpy(iov + n, m->stale_iov, ns * sizeof(*iov));
	if (n + ns)
		ranges_zap(m, iov, n + ns);
	for (unsigned j = 0; j < ns; j++)
		atomic_fetch_and(&m->stale_r[j]->folios[m->stale_fi[j]], ~FL_STALE);
	atomic_store(&m->nr_stale, 0);
	m->stale_pages = 0;
}

void stale_add(struct uswap_mm *m, struct mm_region *r, size_t fi, uintptr_t shadow, size_t n)
{
	unsigned ns;

	pthread_mutex_lock(&m->stale_lock);
	/* Under the lock: a release going on now must not clear the mark of an entry it does not take. */
	atomic_fetch_or(&r->folios[fi], FL_STALE);
	ns = atomic_load(&m->nr_stale);
	if (ns && m->stale_r[ns - 1] == r && m->stale_fi[ns - 1] == fi &&
	    (uintptr_t)m->stale_iov[ns - 1].iov_base + m->stale_iov[ns - 1].iov_len == shadow) {
		m->stale_iov[ns - 1].iov_len += n * MM_PAGE;
	} else {
		m->stale_iov[ns] = (struct iovec){(void *)shadow, n * MM_PAGE};
		m->stale_r[ns] = r;
		m->stale_fi[ns] = fi;
		atomic_store(&m->nr_stale, ++ns);
	}
	m->stale_pages += n;
	if (ns == STALE_RANGES || m->stale_pages >= STALE_PAGES)
		stale_flush(m, NULL, 0);
	pthread_mutex_unlock(&m->stale_lock);
}

void stale_release(struct uswap_mm *m, const struct iovec *more, unsigned n)
{
	if (!atomic_load_explicit(&m->nr_stale, memory_order_relaxed)) {
		if (n)
			ranges_zap(m, more, n);
		return;
	}
	pthread_mutex_lock(&m->stale_lock);
	stale_flush(m, more, n);
	pthread_mutex_unlock(&m->stale_lock);
}

/*
 * Pages [i, i + n) of @r, PG_PRESENT, went to the shadow with uffd_move() and @st says where each
 * is: count the ones that arrived as inactive; a hole (the kernel zapped the page after a
 * MADV_DONTNEED whose REMOVE event is not applied yet) reads as zero from now on, which is what
 * the program asked for. Return: pages demoted.
 */
static size_t demoted(struct uswap_mm *m, struct mm_region *r, size_t i, size_t n, const uint8_t *st)
{
	size_t moved = 0;

	for (size_t j = 0; j < n; j++) {
		if (st[j] == MV_MOVED) {
			r->pages[i + j] = (r->pages[i + j] & ~PG_KIND_MASK) | PG_SHADOW;
			moved++;
		} else if (st[j] == MV_HOLE) {
			pages_put_copies(m, r, i + j, i + j + 1);
			r->pages[i + j] = PG_NONE;
			atomic_fetch_sub(&m->resident, 1);
		}
	}
	atomic_fetch_add(&m->inactive, moved);
	return moved;
}

/* The first page of [i, i + n) that uffd_move() left in the program's range, or n. */
static size_t first_left(const uint8_t *st, size_t n)
{
	const uint8_t *p = memchr(st, MV_LEFT, n);

	return p ? (size_t)(p - st) : n;
}

/*
 * Move the runs of present pages in [first, end) of @r to the shadow range, one UFFDIO_MOVE a run.
 * On -EBUSY, *busy and *busy_len (if @busy) name the pages that would not move. Context: the folios
 * locked. Return: pages demoted, or -errno if none.
 */
static ssize_t demote_pages(struct uswap_mm *m, struct mm_region *r, size_t first, size_t end,
			    uintptr_t *busy, size_t *busy_len)
{
	size_t moved = 0;
	int ret = 0;

	for (size_t i = first; i < end && !ret;) {
		uint8_t st[MV_MAX_PAGES];
		size_t n = 0, left;

		while (i + n < end && n < MV_MAX_PAGES && pg_kind(r->pages[i + n]) == PG_PRESENT)
			n++;
		if (!n) {
			i++;
			continue;
		}
		ret = uffd_move(m, m->uffd_shadow, region_shadow(r, i), region_addr(r, i), n, false, st);
		moved += demoted(m, r, i, n, st);
		left = first_left(st, n);
		if (ret == -EBUSY && busy && left < n) {
			*busy = region_addr(r, i + left);
			*busy_len = (n - left) * MM_PAGE;
		}
		/*
		 * -ENOENT with pages left: no vma any more (mremap/munmap whose event is not applied
		 * yet); the pages stay as they are.
		 */
		i += n;
	}
	if (moved)
		atomic_fetch_add(&m->c.demotions, 1);
	return ret && !moved ? ret : (ssize_t)moved;
}

static ssize_t demote_folio(struct uswap_mm *m, struct mm_region *r, size_t fi, uintptr_t *busy,
			    size_t *busy_len)
{
	size_t first, end;
	ssize_t got;

	region_folio_pages(r, fi, &first, &end);
	got = demote_pages(m, r, first, end, busy, busy_len);
	folio_summarize(m, r, fi);
	return got;
}

/*
 * A span of folios [f0, f1) of @r, all locked by us, none with a shadow page, the first and the last
 * with present pages: move its runs of present pages to the shadow range, one UFFDIO_MOVE a run
 * (not one for the span with ALLOW_SRC_HOLES: see uffd_move()). Return: pages moved, or -errno if none.
 */
static ssize_t demote_span(struct uswap_mm *m, struct mm_region *r, size_t f0, size_t f1, uintptr_t *busy,
			   size_t *busy_len, size_t *busy_folio)
{
	size_t first, end, tmp;
	ssize_t got;

	region_folio_pages(r, f0, &first, &tmp);
	region_folio_pages(r, f1 - 1, &tmp, &end);
	got = demote_pages(m, r, first, end, busy, busy_len);
	if (*busy_len)
		*busy_folio = region_folio(r, *busy);
	return got;
}

static size_t folio_present_pages(struct mm_region *r, size_t fi)
{
	size_t first, end, n = 0;

	region_folio_pages(r, fi, &first, &end);
	for (size_t i = first; i < end; i++)
		n += pg_kind(r->pages[i]) == PG_PRESENT;
	return n;
}

/*
 * Demotion in batches (discards_reported): the front hand gathers unreferenced present folios in
 * address order, within WINDOW_PAGES of one region, and demotes them together without a TLB flush
 * per run of pages:
 *  1. one UFFDIO_WRITEPROTECT over the window (one flush): from here a program write to any page of
 *     it waits in a write-protect fault, for our folio lock if it is a victim's;
 *  2. the victims' present pages are read into free slots of the slot store (window_to_slots(): no
 *     page fault, no flush; without a store, each run is copied into its empty shadow pages with
 *     UFFDIO_COPY); a page shared with a fork child is copied like any other;
 *  3. one process_madvise(MADV_DONTNEED) zaps the copied runs (one flush);
 *  4. the protection is lifted from the present, dirty pages of the window that stay: the victims'
 *     pages that did not copy, and the other folios' (each try-locked meanwhile, so that none of
 *     their pages turns clean, i.e. protected on purpose, under us; one that is busy keeps it until
 *     its next write, which faults and lifts it).
 * A write that waited on a victim finds its page demoted and brings it back by a soft fault. Pages
 * that would not copy (a hole, a vma that went or refuses) go the way of demote_pages().
 * Only with discards_reported: otherwise each zapped range raises a REMOVE event and stops us until
 * a handler reads it, and a program's MADV_DONTNEED could zap a page between our look at the page
 * tables and our copy, which would then wait for a fault that only the handlers serve.
 */
bool demote_window_fits(const struct demote_window *w, struct mm_region *r, size_t fi)
{
	size_t first, end;

	if (!w->n)
		return true;
	region_folio_pages(r, fi, &first, &end);
	return w->r == r && w->n < WINDOW_FOLIOS && end - w->first <= WINDOW_PAGES;
}

void demote_window_add(struct demote_window *w, struct mm_region *r, size_t fi)
{
	size_t first, end;

	region_folio_pages(r, fi, &first, &end);
	if (!w->n) {
		w->r = r;
		w->first = first;
		w->pages = 0;
	}
	w->end = end;
	w->fi[w->n++] = fi;
	w->pages += folio_present_pages(r, fi);
}

/*
 * Step 4 above: lift the protection of the present, dirty pages of the window, by runs of pages
 * whose folios we hold: the victims (locked by us) and every other folio of the window we can
 * try-lock (for a moment, so that no page of it turns clean, i.e. protected on purpose, under us).
 */
static void window_unprotect(struct uswap_mm *m, struct demote_window *w)
{
	struct mm_region *r = w->r;
	size_t f0 = region_folio(r, region_addr(r, w->first)),
	       nf = region_folio(r, region_addr(r, w->end - 1)) + 1 - f0;
	bool held[WINDOW_PAGES], locked[WINDOW_PAGES];
	size_t run = 0, present = 0;
	unsigned k = 0;

	assert(nf <= WINDOW_PAGES);
	for (size_t j = 0; j < nf; j++) {
		bool victim = k < w->n && w->fi[k] == f0 + j;

		k += victim;
		locked[j] = !victim && folio_trylock(&r->folios[f0 + j]);
		held[j] = victim || locked[j];
	}
	for (size_t i = w->first; i <= w->end; i++) {
		bool ok = i < w->end && held[region_folio(r, region_addr(r, i)) - f0] &&
			  !(pg_kind(r->pages[i]) == PG_PRESENT && (r->pages[i] & PG_CLEAN));

		if (ok) {
			if (!present && pg_kind(r->pages[i]) != PG_PRESENT)
				continue;
			if (!present)
				run = i;
			present = i + 1; /* the run ends after its last present page */
			continue;
		}
		if (present)
			uffd_unprotect(m->uffd, region_addr(r, run), (present - run) * MM_PAGE);
		present = 0;
	}
	for (size_t j = 0; j < nf; j++)
		if (locked[j])
			folio_unlock(&r->folios[f0 + j]);
}

/* Merge [base, base + len) into the last of @v's @n ranges when it continues it; else a new one. */
static void iov_add(struct iovec *v, unsigned *n, uintptr_t base, size_t len)
{
	if (*n && (uintptr_t)v[*n - 1].iov_base + v[*n - 1].iov_len == base) {
		v[*n - 1].iov_len += len;
	} else {
		v[*n].iov_base = (void *)base;
		v[(*n)++].iov_len = len;
	}
}

#define SLOT_CHUNK 64 /* pages a process_vm_readv() of window_to_slots() reads */

/*
 * Step 2 with the slot store: the pages @pg[0..@np) (window offsets) are read into free slots, with
 * one process_vm_readv() (no page fault: the slots are warm, the pages mapped; a page unmapped under
 * us ends the read, and the rest stay where they are). The copied ones are marked 2 in @st, their
 * slots in @slot, their program ranges added to @iov for the zap. Return: pages copied.
 */
static size_t chunk_to_slots(struct uswap_mm *m, struct demote_window *w, const size_t *pg, size_t np,
			     uint8_t *st, uint32_t *slot, struct iovec *iov, unsigned *nio)
{
	struct mm_region *r = w->r;
	struct iovec local[SLOT_CHUNK], remote[SLOT_CHUNK];
	uint32_t sl[SLOT_CHUNK];
	unsigned nl = 0, nr = 0;
	size_t got = slot_get(m, np, sl), c = 0;
	ssize_t b;

	for (size_t j = 0; j < got; j++) {
		iov_add(local, &nl, slot_addr(m, sl[j]), MM_PAGE);
		iov_add(remote, &nr, region_addr(r, w->first + pg[j]), MM_PAGE);
	}
	b = got ? process_vm_readv(m->pid, local, nl, remote, nr, 0) : 0;
	if (b > 0)
		c = (size_t)b / MM_PAGE;
	for (size_t j = 0; j < c; j++) {
		st[pg[j]] = 2;
		slot[pg[j]] = sl[j];
		iov_add(iov, nio, region_addr(r, w->first + pg[j]), MM_PAGE);
	}
	if (got > c)
		slot_put(m, sl + c, got - c);
	return c;
}

/*
 * Step 2 into the slot store: the victims' mapped present pages, SLOT_CHUNK at a time. *left: pages
 * that stayed (no free slot, or unmapped under us). Return: pages copied.
 */
static size_t window_to_slots(struct uswap_mm *m, struct demote_window *w, uint8_t *st, uint32_t *slot,
			      struct iovec *iov, unsigned *nio, size_t *left)
{
	struct mm_region *r = w->r;
	size_t pg[SLOT_CHUNK], np = 0, copied = 0;

	for (unsigned k = 0; k < w->n; k++) {
		size_t first, end;

		region_folio_pages(r, w->fi[k], &first, &end);
		for (size_t i = first; i < end; i++) {
			if (pg_kind(r->pages[i]) != PG_PRESENT)
				continue;
			if (st[i - w->first] != 1) {
				++*left;
				continue;
			}
			pg[np++] = i - w->first;
			if (np == SLOT_CHUNK) {
				size_t c = chunk_to_slots(m, w, pg, np, st, slot, iov, nio);

				copied += c;
				*left += np - c;
				np = 0;
			}
		}
	}
	if (np) {
		size_t c = chunk_to_slots(m, w, pg, np, st, slot, iov, nio);

		copied += c;
		*left += np - c;
	}
	return copied;
}

/*
 * Demote the window's victims (steps 1-4 above), then let each go: summarized and unlocked. Pages
 * that did not copy go through demote_pages(); one shared with a fork child there (-EBUSY) is noted
 * in @res for cow_break(). Return: pages demoted.
 */
size_t demote_window_flush(struct uswap_mm *m, struct demote_window *w, struct hand_result *res)
{
	struct mm_region *r = w->r;
	size_t n = w->end - w->first, moved = 0, left = 0;
	uint8_t st[WINDOW_PAGES], need[WINDOW_PAGES]; /* st: 0 not there, 1 mapped, 2 copied */
	uint32_t slot[WINDOW_PAGES];
	struct iovec iov[WINDOW_PAGES / 2 + 1];
	unsigned nio = 0;

	if (!w->n)
		return 0;
	assert(n <= WINDOW_PAGES);
	memset(need, 0, n);
	for (unsigned k = 0; k < w->n; k++) { /* the victims' present pages */
		size_t first, end;

		region_folio_pages(r, w->fi[k], &first, &end);
		for (size_t i = first; i < end; i++)
			need[i - w->first] = pg_kind(r->pages[i]) == PG_PRESENT;
	}
	if (uffd_protect(m->uffd, region_addr(r, w->first), n * MM_PAGE) ||
	    uffd_pages_mapped(m, region_addr(r, w->first), n, need, st))
		memset(st, 0, n); /* no copies: every victim goes by demote_pages() */
	if (m->slot_base)
		window_to_slots(m, w, st, slot, iov, &nio, &left);
	for (unsigned k = 0; k < w->n && !m->slot_base; k++) {
		size_t first, end;

		region_folio_pages(r, w->fi[k], &first, &end);
		for (size_t i = first; i < end;) {
			size_t c = 0, done = 0;

			while (i + c < end && pg_kind(r->pages[i + c]) == PG_PRESENT &&
			       st[i + c - w->first] == 1)
				c++;
			if (!c) {
				left += pg_kind(r->pages[i]) == PG_PRESENT;
				i++;
				continue;
			}
			uffd_copy(m->uffd_shadow, region_shadow(r, i), (const void *)region_addr(r, i),
				  c * MM_PAGE, false, false, &done);
			done /= MM_PAGE;
			if (done) {
				iov_add(iov, &nio, region_addr(r, i), done * MM_PAGE);
				memset(st + (i - w->first), 2, done);
			}
			left += done < c; /* page i + done would not copy; the run goes on after it */
			i += done < c ? done + 1 : c;
		}
	}
	if (nio)
		ranges_zap(m, iov, nio);
	if (m->slot_base) {
		for (size_t j = 0; j < n; j++)
			if (st[j] == 2) {
				r->pages[w->first + j] = pg_to_slot(r->pages[w->first + j], slot[j]);
				moved++;
			}
		atomic_fetch_add(&m->inactive, moved);
	} else {
		for (size_t j = 0; j < n; j++) /* in demoted()'s terms: copied pages are in the shadow now */
			st[j] = st[j] == 2 ? MV_MOVED : MV_LEFT;
		moved = demoted(m, r, w->first, n, st);
	}
	if (moved)
		atomic_fetch_add(&m->c.demotions, 1);
	window_unprotect(m, w);
	for (unsigned k = 0; k < w->n; k++) {
		size_t fi = w->fi[k], first, end, busy_len = 0;
		uintptr_t busy = 0;

		if (left && (atomic_load(&r->folios[fi]) & FL_PRESENT)) {
			ssize_t got;

			region_folio_pages(r, fi, &first, &end);
			got = demote_pages(m, r, first, end, &busy, &busy_len);
			if (got > 0)
				moved += (size_t)got;
			if (busy_len && res->nr_cow < MAX_COW) {
				res->cow[res->nr_cow] = busy;
				res->cow_len[res->nr_cow++] = busy_len;
			}
			if (got == -EBUSY || busy_len)
				atomic_fetch_or(&r->folios[fi], FL_PINNED);
		}
		folio_summarize(m, r, fi);
		folio_unlock(&r->folios[fi]);
	}
	w->n = 0;
	return moved;
}

/*
 * The front hand found folio @fi present, unreferenced and locked: demote it, together with the
 * folios after it that can go in the same move (see demote_span()). Return: the last folio handled.
 */
size_t demote_front(struct uswap_mm *m, struct mm_region *r, size_t fi, size_t want, size_t *scanned,
		    struct hand_result *res)
{
	size_t f1 = fi + 1, present = folio_present_pages(r, fi), first, end, busy_len = 0, busy_folio = 0;
	uintptr_t busy = 0;
	ssize_t got;

	if (atomic_load(&r->folios[fi]) & FL_SHADOW) {
		got = demote_folio(m, r, fi, &busy, &busy_len);
		busy_folio = fi;
	} else {
		region_folio_pages(r, fi, &first, &end);
		while (f1 < r->nr_folios && res->pages + present < want) {
			_Atomic uint32_t *f = &r->folios[f1];
			uint32_t v = atomic_load(f);
			size_t e;

			region_folio_pages(r, f1, &e, &end);
			if (end - first > SPAN_PAGES || (v & (FL_SHADOW | FL_STALE)) ||
			    ((v & FL_PRESENT) && (v & (FL_PINNED | FL_REF))) || !folio_trylock(f))
				break;
			v = atomic_load(f);
			if ((v & (FL_SHADOW | FL_STALE)) ||
			    ((v & FL_PRESENT) && (v & (FL_PINNED | FL_REF)))) {
				folio_unlock(f);
				break;
			}
			present += folio_present_pages(r, f1);
			f1++;
			++*scanned;
		}
		/* The span ends on a folio with something to move. */
		while (f1 - 1 > fi && !(atomic_load(&r->folios[f1 - 1]) & FL_PRESENT))
			folio_unlock(&r->folios[--f1]);
		got = demote_span(m, r, fi, f1, &busy, &busy_len, &busy_folio);
	}
	if (busy_len && res->nr_cow < MAX_COW) {
		res->cow[res->nr_cow] = busy;
		res->cow_len[res->nr_cow++] = busy_len;
	}
	if (got == -EBUSY || busy_len)
		atomic_fetch_or(&r->folios[busy_folio], FL_PINNED);
	if (got > 0)
		res->pages += (size_t)got;
	for (size_t g = fi; g < f1; g++) {
		folio_summarize(m, r, g);
		folio_unlock(&r->folios[g]);
	}
	return f1 - 1;
}
