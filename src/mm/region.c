/*
 * region.c - the region table: adding, slicing, moving and forgetting regions, adopting a vma, and
 * lifting the write protection of a range (page.c keeps the pages' state).
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "mm/mm.h"
#include "mm/uffd.h"
#include "util/err.h"
#include "util/alloc.h"

static size_t round_page(size_t n)
{
	return (n + MM_PAGE - 1) & ~(MM_PAGE - 1);
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
