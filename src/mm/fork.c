/*
 * fork.c - fork() of a process with instances: pthread_atfork() handlers.
 *
 * The kernel gives a fork child none of our registrations (we do not ask for UFFD_EVENT_FORK, which
 * needs CAP_SYS_PTRACE and a parent willing to serve the child forever), so a child would read zeros
 * where the parent's pages are swapped or inactive. The prepare handler therefore brings every page
 * of every instance in before fork() (reclaim paused until the parent resumes) and saves the regions
 * for uswap_mm_adopt_forked(); the child closes its copies of our file descriptors and leaves the
 * instance alone. The cost is memory: for a moment the parent holds all its pages.
 */
#include <errno.h>
#include <sched.h>
#include <unistd.h>

#include "mm/mm.h"
#include "util/fd.h"

static pthread_mutex_t mm_list_lock = PTHREAD_MUTEX_INITIALIZER;
static struct uswap_mm *mm_list; /* live instances of this process, linked by next_mm */
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/*
 * Whether folio @fi of @r lies in a MADV_DONTFORK range of @dc (sorted; *k: where the search left off,
 * folios are asked in address order): the child does not get it, so it need not come in.
 */
static bool folio_dontfork(struct mm_region *r, size_t fi, const struct mm_range *dc, size_t n, size_t *k)
{
	size_t first, end;
	uintptr_t a, b;

	region_folio_pages(r, fi, &first, &end);
	a = region_addr(r, first);
	b = region_addr(r, end);
	while (*k < n && dc[*k].end <= a)
		(*k)++;
	return *k < n && dc[*k].start <= a && b <= dc[*k].end;
}

/*
 * The regions as fork() leaves them to the child, for uswap_mm_adopt_forked() there. Context: tbl_lock
 * held. Out of memory: the child finds none.
 */
static void fork_ranges_save(struct uswap_mm *m)
{
	m->nr_fork_ranges = 0;
	if (m->nr_regions > m->fork_ranges_cap) {
		size_t cap = (size_t)m->nr_regions * 2;
		struct mm_range *n = mm_map_mem(cap * sizeof(*n));

		if (!n)
			return;
		mm_unmap_mem(m->fork_ranges, m->fork_ranges_cap * sizeof(*n));
		m->fork_ranges = n;
		m->fork_ranges_cap = cap;
	}
	for (unsigned ri = 0; ri < m->nr_regions; ri++)
		m->fork_ranges[m->nr_fork_ranges++] = (struct mm_range){m->tbl[ri]->start, m->tbl[ri]->end};
}

#define DONTFORK_MAX 256

/*
 * Every swapped and inactive page of @m in, but those of the sorted MADV_DONTFORK ranges @dc (@ndc
 * of them). Context: reclaim_lock and tbl_lock (read) held; forking set.
 */
static void bring_all_in(struct uswap_mm *m, const struct mm_range *dc, size_t ndc)
{
	for (unsigned ri = 0; ri < m->nr_regions; ri++) {
		struct mm_region *r = m->tbl[ri];
		size_t k = 0;

		for (size_t fi = 0; fi < r->nr_folios; fi++) {
			size_t first, end, f, nf = 0, k2 = k;
			uint32_t fl = atomic_load(&r->folios[fi]);

			if (!(fl & (FL_SHADOW | FL_SWAPPED)))
				continue;
			if (ndc && folio_dontfork(r, fi, dc, ndc, &k))
				continue;
			/*
			 * Wholly swapped folios come in by runs, one batch of loads each (a swap file reads them
			 * in one round of I/O instead of one read after another); up to a folio the child does
			 * not get. They come in as written (copies dropped, mapped writable): after fork they
			 * are shared with the child, and the reclaimer cannot move one before it has broken
			 * that sharing with a write, which drops a kept copy anyway; kept, the copies would
			 * only hold swap space, and pool memory inside the limit, until then.
			 */
			for (f = fi; f < r->nr_folios && (f - fi) << r->folio_shift < SWAPIN_RUN_MAX; f++) {
				uint32_t g = atomic_load(&r->folios[f]);

				if ((g & (FL_PRESENT | FL_SHADOW)) || !(g & FL_SWAPPED) ||
				    (ndc && f > fi && folio_dontfork(r, f, dc, ndc, &k2)))
					break;
			}
			if (f > fi + 1 &&
			    swapin_run(m, m->fork_stage, r, fi, (f - fi) << r->folio_shift, false, &nf) &&
			    nf) {
				fi += nf -
				      1; /* the next folio goes by the loop: a run again, or one at a time */
				continue;
			}
			folio_lock(&r->folios[fi]);
			for (int tries = 0; tries < 1000; tries++) {
				if (swapin_folio(m, m->fork_stage, r, fi, true, false) != -EAGAIN)
					break;
				sched_yield();
			}
			region_folio_pages(r, fi, &first, &end);
			folio_unlock(&r->folios[fi]);
			uffd_wake(m->uffd, region_addr(r, first), (end - first) * MM_PAGE);
		}
	}
}

static void mm_fork_prepare(struct uswap_mm *m)
{
	struct mm_range dc[DONTFORK_MAX];
	size_t ndc = 0;

	atomic_store(&m->forking, 1);
	pthread_mutex_lock(&m->reclaim_lock);
	pthread_rwlock_rdlock(&m->tbl_lock);
	fork_ranges_save(m);
	/* Swapped memory of vmas the child does not get stays out (a runtime's heap often is one). */
	if (atomic_load(&m->c.evicted_pages) || atomic_load(&m->inactive))
		ndc = region_dontfork_ranges(dc, DONTFORK_MAX);
	bring_all_in(m, dc, ndc);
	stale_release(m, NULL, 0); /* the child would get a copy of them */
	pthread_rwlock_unlock(&m->tbl_lock);
}

/*
 * Before a core dump, from the handler of the fatal signal in the dying thread: the kernel writes a
 * page that is not mapped as zeros, and our fault handlers are gone by then. Reclaim stays stopped
 * (forking set, reclaim_lock kept: fork_stage is ours). The dying thread may hold one of our locks:
 * each is waited for until @deadline (CLOCK_REALTIME), then given up.
 * Return: 0; -ETIMEDOUT.
 */
int fork_dump_prepare(struct uswap_mm *m, const struct timespec *deadline)
{
	atomic_store(&m->forking, 1);
	if (pthread_mutex_timedlock(&m->reclaim_lock, deadline))
		return -ETIMEDOUT;
	if (pthread_rwlock_timedrdlock(&m->tbl_lock, deadline))
		return -ETIMEDOUT;
	bring_all_in(m, NULL, 0);
	pthread_rwlock_unlock(&m->tbl_lock);
	return 0;
}

static void mm_fork_parent(struct uswap_mm *m)
{
	pthread_mutex_unlock(&m->reclaim_lock);
	atomic_store(&m->forking, 0);
	if (atomic_load(&m->resident) > atomic_load(&m->high_pages))
		reclaim_kick(m);
}

static void fork_prepare(void)
{
	pthread_mutex_lock(&mm_list_lock);
	for (struct uswap_mm *m = mm_list; m; m = m->next_mm)
		if (!mm_in_child(m))
			mm_fork_prepare(m);
}

static void fork_parent(void)
{
	for (struct uswap_mm *m = mm_list; m; m = m->next_mm)
		if (!mm_in_child(m))
			mm_fork_parent(m);
	pthread_mutex_unlock(&mm_list_lock);
}

/* The child's memory is plain now; its copies of our fds would keep the parent's uffds alive. */
static void fork_child(void)
{
	/*
	 * A child of a child finds the fds already closed (-1): their numbers may have been reused by
	 * then (a shell's pipes), and must not be closed again.
	 */
	for (struct uswap_mm *m = mm_list; m; m = m->next_mm)
		mm_close_fds(m);
	sigbus_child();
	pthread_mutex_unlock(&mm_list_lock);
}

static void atfork_init(void)
{
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

void fork_track(struct uswap_mm *m)
{
	pthread_once(&atfork_once, atfork_init);
	pthread_mutex_lock(&mm_list_lock);
	m->next_mm = mm_list;
	mm_list = m;
	pthread_mutex_unlock(&mm_list_lock);
}

void fork_untrack(struct uswap_mm *m)
{
	pthread_mutex_lock(&mm_list_lock);
	for (struct uswap_mm **pp = &mm_list; *pp; pp = &(*pp)->next_mm)
		if (*pp == m) {
			*pp = m->next_mm;
			break;
		}
	pthread_mutex_unlock(&mm_list_lock);
}
