/*
 * validate.c - mm_validate(): the invariant walker of an instance's regions, page words and folio
 * words, against the instance's counters and its swap layer (DEBUG builds; a stub returning 0 in
 * others). What must hold whenever nobody is in the middle of a change (docs/mm.md, "Page state"):
 *
 *  - the region table is sorted, its regions disjoint, page aligned, their geometry as region_alloc()
 *    computed it (folio grid, word arrays inside the region's own mapping);
 *  - a page word uses only its fields: NONE is the word 0; PRESENT and SHADOW carry a swap id and
 *    index only with PG_CLEAN; SWAPPED and clean pages name a live page (id, idx) of the layer, each
 *    (id + idx) named by at most one page word, and together exactly the layer's live pages (the
 *    layer is the instance's own);
 *  - a folio word is unlocked with no waiter (tbl_lock held for writing means no folio lock is held
 *    or waited on), uses only its bits, and its FL_PRESENT / FL_SHADOW / FL_SWAPPED and its counts of
 *    swapped and clean pages are what its pages say; a folio with a present or shadow page has its
 *    group bit set (a clear bit is a promise the hands rely on);
 *  - the instance's resident, inactive, swapped and clean counters are the sums over the page words.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "core/debug.h"
#include "mm/mm.h"
#include "mm/uffd.h"
#include "util/err.h"

#if USWAP_DEBUG

/*
 * Which pages of the instance's metadata were ever written: a region's words live in MAP_NORESERVE
 * memory, and a sparse region of hundreds of GiB has most of its words untouched (zero: NONE, an
 * empty folio word). PAGEMAP_SCAN names the touched ones (present or in the kernel's swap), so the
 * walk reads those only. Without it (no pagemap, an older kernel) every word is read.
 */
struct touched {
	int fd;
	uintptr_t walked; /* the last scan covered [.., walked): its touched pages are in vec */
	struct page_region vec[64];
	long nr, at;
	uintptr_t end; /* of the words scanned */
};

/* The first address at or after @a that may hold a nonzero word, or t->end. Calls go up in @a. */
static uintptr_t touched_next(struct touched *t, uintptr_t a)
{
	for (;;) {
		struct pm_scan_arg arg;
		long nr;

		while (t->at < t->nr && t->vec[t->at].end <= a)
			t->at++;
		if (t->at < t->nr) {
			a = a > t->vec[t->at].start ? a : t->vec[t->at].start;
			return a < t->end ? a : t->end;
		}
		if (a < t->walked)
			a = t->walked; /* nothing touched in [a, walked) */
		if (a >= t->end)
			return t->end;
		if (t->fd < 0)
			return a;
		arg = (struct pm_scan_arg){
			.size = sizeof(arg),
			.start = a & ~(MM_PAGE - 1),
			.end = (t->end + MM_PAGE - 1) & ~(MM_PAGE - 1),
			.vec = (uintptr_t)t->vec,
			.vec_len = 64,
			.category_anyof_mask = PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
			.return_mask = PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
		};
		nr = ioctl(t->fd, PAGEMAP_SCAN, &arg);
		if (nr < 0 || arg.walk_end <= arg.start) {
			t->fd = -1; /* no scan: every word from here is read */
			return a;
		}
		t->nr = nr;
		t->at = 0;
		t->walked = arg.walk_end;
	}
}

/* Sums over the page words of every region, and the references to swap pages seen so far. */
struct mm_sums {
	uint64_t resident, inactive, swapped, clean, copies;
	uint64_t *refs;    /* bit per descriptor number: named by a page word */
	uint64_t *slots;   /* bit per slot of the slot store: named by a page word */
	uint64_t id_limit; /* descriptor numbers below it */
};

static int validate_page(struct uswap_mm *m, struct mm_region *r, size_t i, struct mm_sums *s)
{
	uint64_t w = r->pages[i], ref;
	unsigned k = pg_kind(w);
	uintptr_t a = region_addr(r, i);

	if (k == PG_SHADOW && pg_slotted(w)) {
		if (!m->slot_base || pg_slot(w) >= m->slot_next)
			return err_invariant(
				"page %#lx (region %#lx): in slot %u, which the store never gave",
				(unsigned long)a, (unsigned long)r->start, pg_slot(w));
		if (s->slots[pg_slot(w) / 64] >> (pg_slot(w) % 64) & 1)
			return err_invariant("page %#lx (region %#lx): slot %u is another page's too",
					     (unsigned long)a, (unsigned long)r->start, pg_slot(w));
		s->slots[pg_slot(w) / 64] |= 1ull << (pg_slot(w) % 64);
		w = pg_unslot(w);
	}
	if (w & ~(PG_KIND_MASK | PG_CLEAN | PG_IDX_MASK | ~0ull << PG_ID_SHIFT))
		return err_invariant("page %#lx (region %#lx): word %#llx has bits outside its fields",
				     (unsigned long)a, (unsigned long)r->start, (unsigned long long)w);
	if (k == PG_NONE && w)
		return err_invariant("page %#lx (region %#lx): NONE but word %#llx", (unsigned long)a,
				     (unsigned long)r->start, (unsigned long long)w);
	if (k == PG_SWAPPED && (w & PG_CLEAN))
		return err_invariant("page %#lx (region %#lx): SWAPPED and clean (word %#llx)",
				     (unsigned long)a, (unsigned long)r->start, (unsigned long long)w);
	s->resident += k == PG_PRESENT || k == PG_SHADOW;
	s->inactive += k == PG_SHADOW;
	s->swapped += k == PG_SWAPPED;
	s->clean += k != PG_SWAPPED && (w & PG_CLEAN);
	if (!pg_has_copy(w)) {
		if (w >> PG_IDX_SHIFT)
			return err_invariant(
				"page %#lx (region %#lx): %s without a copy but swap id %u idx %u",
				(unsigned long)a, (unsigned long)r->start,
				k == PG_PRESENT ? "PRESENT" : "SHADOW", pg_id(w), pg_idx(w));
		return 0;
	}
	if (!pg_id(w) || !uswap_debug_page_live(m->swap, pg_id(w), pg_idx(w)))
		return err_invariant("page %#lx (region %#lx): %s names page %u of swap id %u, which is not "
				     "live in the layer",
				     (unsigned long)a, (unsigned long)r->start,
				     k == PG_SWAPPED ? "SWAPPED" : "clean", pg_idx(w), pg_id(w));
	ref = (uint64_t)pg_id(w) + pg_idx(w);
	if (ref >= s->id_limit)
		return err_invariant("page %#lx: swap page %llu beyond the descriptors in use",
				     (unsigned long)a, (unsigned long long)ref);
	if (s->refs[ref / 64] >> (ref % 64) & 1)
		return err_invariant(
			"page %#lx (region %#lx): page %u of swap id %u is named by another page "
			"word too",
			(unsigned long)a, (unsigned long)r->start, pg_idx(w), pg_id(w));
	s->refs[ref / 64] |= 1ull << (ref % 64);
	s->copies++;
	return 0;
}

/* Folio @fi: its pages, then its word and group bit against them. */
static int validate_folio(struct uswap_mm *m, struct mm_region *r, size_t fi, struct mm_sums *s)
{
	uint32_t f = atomic_load(&r->folios[fi]), want = 0, swapped = 0, clean = 0;
	uint32_t known = FL_LOCK | FL_WAIT | FL_REF | FL_PRESENT | FL_SHADOW | FL_PINNED | FL_SWAPPED |
			 FL_STALE | FL_COUNTS;
	uintptr_t fa = r->fbase + (fi << (MM_PAGE_SHIFT + r->folio_shift));
	size_t first, end;
	int ret;

	if (f & (FL_LOCK | FL_WAIT) || f & ~known)
		return err_invariant(
			"folio %#lx (region %#lx): word %#x is locked, waited on, or has unknown "
			"bits",
			(unsigned long)fa, (unsigned long)r->start, f);
	region_folio_pages(r, fi, &first, &end);
	for (size_t i = first; i < end; i++) {
		unsigned k = pg_kind(r->pages[i]);

		ret = validate_page(m, r, i, s);
		if (ret)
			return ret;
		want |= k == PG_PRESENT ? FL_PRESENT : k == PG_SHADOW ? FL_SHADOW : 0;
		swapped += k == PG_SWAPPED;
		clean += k != PG_SWAPPED && (r->pages[i] & PG_CLEAN);
	}
	if (swapped)
		want |= FL_SWAPPED;
	want |= swapped << FL_NSWAP_SHIFT | clean << FL_NCLEAN_SHIFT;
	if ((f & (FL_PRESENT | FL_SHADOW | FL_SWAPPED | FL_COUNTS)) != want)
		return err_invariant("folio %#lx (region %#lx): word %#x, its pages say %#x (%u swapped, %u "
				     "clean)",
				     (unsigned long)fa, (unsigned long)r->start, f, want, swapped, clean);
	if ((want & (FL_PRESENT | FL_SHADOW)) &&
	    !(atomic_load(&r->groups[fi / FOLIO_GROUP / 64]) >> (fi / FOLIO_GROUP % 64) & 1))
		return err_invariant("folio %#lx (region %#lx) holds pages but its group bit is clear",
				     (unsigned long)fa, (unsigned long)r->start);
	return 0;
}

/* @pagemap: /proc/self/pagemap, or -1 (every word is read). */
static int validate_region(struct uswap_mm *m, struct mm_region *r, struct mm_sums *s, int pagemap)
{
	size_t fbytes = MM_PAGE << r->folio_shift;
	struct touched tp = {.fd = pagemap, .end = (uintptr_t)(r->pages + r->nr_pages)};
	struct touched tf = {.fd = pagemap, .end = (uintptr_t)(r->folios + r->nr_folios)};
	size_t fi = 0;

	if (r->start >= r->end || (r->start | r->end | r->shadow) & (MM_PAGE - 1) || !r->shadow ||
	    r->folio_shift > MM_FOLIO_MAX_SHIFT || r->fbase != (r->start & ~(fbytes - 1)) ||
	    r->nr_pages != (r->end - r->start) >> MM_PAGE_SHIFT ||
	    r->nr_folios != (r->end - r->fbase + fbytes - 1) / fbytes || r->pages != (uint64_t *)(r + 1) ||
	    (void *)r->groups != (void *)(r->pages + r->nr_pages))
		return err_invariant(
			"region [%#lx, %#lx): shadow %#lx, folio shift %u, fbase %#lx, %zu pages, %zu "
			"folios: not its geometry",
			(unsigned long)r->start, (unsigned long)r->end, (unsigned long)r->shadow,
			r->folio_shift, (unsigned long)r->fbase, r->nr_pages, r->nr_folios);
	tp.walked = (uintptr_t)r->pages;
	tf.walked = (uintptr_t)r->folios;
	while (fi < r->nr_folios) {
		size_t first, end, next;
		uintptr_t pa, fa;
		int ret;

		region_folio_pages(r, fi, &first, &end);
		pa = touched_next(&tp, (uintptr_t)(r->pages + first));
		fa = touched_next(&tf, (uintptr_t)(r->folios + fi));
		if (pa < (uintptr_t)(r->pages + end) || fa < (uintptr_t)(r->folios + fi + 1)) {
			ret = validate_folio(m, r, fi, s);
			if (ret)
				return ret;
			fi++;
			continue;
		}
		/* Untouched words read zero: NONE pages in an empty folio. On to the next touched word. */
		next = (fa - (uintptr_t)r->folios) / sizeof(*r->folios);
		if (pa < tp.end) {
			size_t p = (pa - (uintptr_t)r->pages) / sizeof(*r->pages);
			size_t pf = region_folio(r, region_addr(r, p));

			if (pf < next)
				next = pf;
		}
		fi = next > fi ? next : fi + 1;
	}
	return 0;
}

/*
 * Context: quiescent: no fault being resolved and no reclaim running while it looks (it holds
 * reclaim_lock and tbl_lock for writing, so whatever runs waits; the program's threads must not be
 * touching region memory meanwhile, or they wait too). The counters are compared after the walk,
 * under the same locks: every change of page words and counters is made under tbl_lock.
 */
int mm_validate(struct uswap_mm *m)
{
	struct mm_sums s = {0};
	size_t refs_bytes = 0, slots_bytes = (m->slot_max / 64 + 1) * sizeof(uint64_t);
	uint64_t in_slots = 0;
	int ret = 0, pagemap;

	if (mm_in_child(m))
		return 0; /* the parent's instance: its state is the parent's to check */
	pagemap = m->have_pagemap ? open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC) : -1;
	pthread_mutex_lock(&m->reclaim_lock);
	pthread_rwlock_wrlock(&m->tbl_lock);
	s.id_limit = uswap_debug_id_limit(m->swap);
	refs_bytes = (s.id_limit / 64 + 1) * sizeof(uint64_t);
	s.refs = mm_map_mem(refs_bytes);
	s.slots = mm_map_mem(slots_bytes);
	if (!s.refs || !s.slots) {
		ret = -ENOMEM;
		goto out_unlock;
	}
	if (m->nr_regions > m->tbl_cap) {
		ret = err_invariant("region table: %u regions, room for %u", m->nr_regions, m->tbl_cap);
		goto out_unlock;
	}
	for (unsigned ri = 0; ri < m->nr_regions && !ret; ri++) {
		struct mm_region *r = m->tbl[ri];

		if (ri && m->tbl[ri - 1]->end > r->start)
			ret = err_invariant("region table: [%#lx, %#lx) before [%#lx, %#lx): out of order or "
					    "overlapping",
					    (unsigned long)m->tbl[ri - 1]->start,
					    (unsigned long)m->tbl[ri - 1]->end, (unsigned long)r->start,
					    (unsigned long)r->end);
		else
			ret = validate_region(m, r, &s, pagemap);
	}
	if (ret)
		goto out_unlock;
	if (s.resident != atomic_load(&m->resident) || s.inactive != atomic_load(&m->inactive) ||
	    s.swapped != atomic_load(&m->swapped) || s.clean != atomic_load(&m->clean)) {
		ret = err_invariant(
			"counters: resident %llu, inactive %llu, swapped %llu, clean %llu; the page "
			"words say %llu, %llu, %llu, %llu",
			(unsigned long long)atomic_load(&m->resident),
			(unsigned long long)atomic_load(&m->inactive),
			(unsigned long long)atomic_load(&m->swapped),
			(unsigned long long)atomic_load(&m->clean), (unsigned long long)s.resident,
			(unsigned long long)s.inactive, (unsigned long long)s.swapped,
			(unsigned long long)s.clean);
		goto out_unlock;
	}
	/* Every slot the store gave is in one place: a page word, the warm or the cold free slots. */
	for (size_t j = 0; m->slot_base && j <= m->slot_max / 64; j++)
		in_slots += (uint64_t)__builtin_popcountll(s.slots[j]);
	if (m->slot_base && in_slots + m->slot_warm + m->slot_cold != m->slot_next) {
		ret = err_invariant("slot store: %llu slots in pages, %u warm and %u cold free, %u given out",
				    (unsigned long long)in_slots, m->slot_warm, m->slot_cold, m->slot_next);
		goto out_unlock;
	}
	/* Distinct live pages, as many as the layer has: no page of the layer is lost to mm. */
	if (s.copies != uswap_debug_live_pages(m->swap)) {
		ret = err_invariant(
			"the page words name %llu swap pages, the layer holds %llu: a copy leaked",
			(unsigned long long)s.copies, (unsigned long long)uswap_debug_live_pages(m->swap));
		goto out_unlock;
	}
	ret = uswap_debug_validate(m->swap);
out_unlock:
	mm_unmap_mem(s.refs, refs_bytes);
	mm_unmap_mem(s.slots, slots_bytes);
	pthread_rwlock_unlock(&m->tbl_lock);
	pthread_mutex_unlock(&m->reclaim_lock);
	if (pagemap >= 0)
		close(pagemap);
	return ret;
}

#else /* !USWAP_DEBUG: nothing is checked */

int mm_validate(struct uswap_mm *m)
{
	(void)m;
	return 0;
}

#endif
