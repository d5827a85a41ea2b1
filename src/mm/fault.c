/*
 * fault.c - fault handler threads: read the userfaultfd, resolve faults, apply events (munmap,
 * mremap, madvise) in the order the kernel queued them; the staging pool and uswap_prefault().
 *
 * A handler sleeping in poll() on another CPU pays two cross-CPU wake-ups per fault, and an idle vCPU
 * halts; the handler on the faulting thread's own CPU is woken by a local switch, several times faster
 * (docs/results.md#fault-floor). So there is one handler per CPU of the process, each pinned, all
 * reading the same uffd (non-blocking read first, poll() only when it is empty). A whole folio is
 * resolved per fault (swapin.c brings it in).
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
#include "util/alloc.h"
#include "util/clock.h"

static void hist_add(struct mm_hist *h, uint64_t ns)
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
 * Only a handler's: its fault came from our uffd. A SIGBUS may be for any range of this process that
 * a userfaultfd covers (another instance's, the kernel's SIGBUS for a page a handler-mode instance
 * poisoned, the program's own uffd), and the kernel lets UFFDIO_COPY and UFFDIO_WRITEPROTECT through
 * our uffd act on any of them (it checks that the vma is registered, not with which uffd): a zero
 * page there replaced another's page or its poison with zeros.
 * Return: 0, or -ENOENT in SIGBUS mode (not ours).
 */
static int fault_untracked(struct uswap_mm *m, uintptr_t addr, bool wp)
{
	size_t done;

	if (m->sigbus)
		return -ENOENT;
	if (wp)
		uffd_unprotect(m->uffd, addr, MM_PAGE);
	else
		uffd_copy(m->uffd, addr, m->zero, MM_PAGE, false, true, &done);
	atomic_fetch_add(&m->c.untracked_faults, 1);
	uffd_wake(m->uffd, addr, MM_PAGE);
	return 0;
}

static void after_fault(struct uswap_mm *m)
{
	uint64_t res = atomic_load(&m->resident);

	if (res > atomic_load_explicit(&m->peak_resident, memory_order_relaxed))
		atomic_store_explicit(&m->peak_resident, res, memory_order_relaxed); /* a close bound */
	if (res <= atomic_load(&m->high_pages))
		return;
	reclaim_kick(m);
	if (res > atomic_load(&m->limit_pages) && !atomic_load(&m->forking)) {
		atomic_fetch_add(&m->c.direct_reclaims, 1);
		if (m->sigbus)
			reclaim_direct(m);
		else
			reclaim_run(m, atomic_load(&m->limit_pages), true);
	}
}

/*
 * A fault at @addr: @wp a write to a write-protected page, else a missing page (@write: by a write).
 * From a handler (@stage its own), or in SIGBUS mode from the faulting thread. @adopt: a fault in no
 * region may adopt the vma around it (a range that grew in place) or be served a zero page; in
 * SIGBUS mode only a vma that holds one of our regions is adopted, and an address our uffd does not
 * cover is left alone. Return: 0 (served: the access can be retried), -ENOENT not ours, -EFAULT in
 * SIGBUS mode a poisoned page (its swap-in failed): the program's SIGBUS, not ours to serve.
 */
int fault_resolve(struct uswap_mm *m, unsigned char *stage, uintptr_t addr, bool wp, bool write, bool adopt)
{
	uint64_t t0 = mono_ns();
	struct mm_region *r;
	bool swapin = false, soft = false, woken = false, poisoned = false;
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
		fault_settle(m);
		pthread_rwlock_wrlock(&m->tbl_lock);
		stale_release(m, NULL, 0); /* before a shadow range can go */
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
	} else if (r->pages[region_page(r, addr)] == (PG_NONE | PG_POISON)) {
		/*
		 * A handler: a fault queued before the poison went in; the wake retries it into the
		 * kernel's SIGBUS. SIGBUS mode: the kernel's SIGBUS for the poison marker looks like our
		 * own faults (BUS_ADRERR), so it is told by the page word and goes to the program.
		 */
		poisoned = true;
	} else {
		swapin = pg_kind(r->pages[region_page(r, addr)]) == PG_SWAPPED;
		soft = pg_kind(r->pages[region_page(r, addr)]) ==
		       PG_SHADOW; /* inactive: back without a load */
		if (swapin_around(m, r, fi))
			ret = 0;
		else /* without neighbours, or when filling them failed (pages of a vma we cannot fill) */
			ret = swapin_folio(m, stage, r, fi, write, true);
		/* 0: every page of the folio went in by a copy or move that woke its waiters. */
		woken = !ret;
	}
	atomic_fetch_or(&r->folios[fi], FL_REF);
	folio_unlock(&r->folios[fi]);
	/*
	 * Otherwise, whatever happened, wake: a thread whose page is still missing faults again and
	 * comes back. (A UFFDIO_WAKE is a system call of its own, on every fault.) In
	 * SIGBUS mode nobody waits in the kernel: the faulting thread retries when it returns.
	 */
	if (!woken && !m->sigbus)
		uffd_wake(m->uffd, region_addr(r, first), (end - first) * MM_PAGE);
	if (swapin || soft) {
		uint64_t ns = mono_ns() - t0;

		if (swapin)
			hist_add(&m->swapin_hist, ns);
		/* what the program waited because of the limit (limit_auto reads it) */
		atomic_fetch_add_explicit(&m->c.stall_ns, ns + MM_FAULT_ROUND_NS, memory_order_relaxed);
	}
	/* The program goes on with its page while the next ones come in. */
	if (swapin && !ret)
		swapin_readahead(m, stage, r, fi);
	pthread_rwlock_unlock(&m->tbl_lock);
	if (ret == -EAGAIN)
		atomic_fetch_add(&m->c.retries, 1);
	after_fault(m);
	return poisoned && m->sigbus ? -EFAULT : 0;
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
				/* Pages the kernel zaps first are holes that uffd_move() steps over. */
				uffd_move(m, m->uffd_shadow, region_shadow(r, i), region_addr(r, i), n, false,
					  st);
				if (memchr(st, MV_MOVED, n))
					umadvise((void *)region_shadow(r, i), n * MM_PAGE, MADV_DONTNEED);
				i += n;
			}
			pages_drop(m, r, first, fend);
			folio_summarize(m, r, fi);
			folio_unlock(&r->folios[fi]);
		}
	}
	pthread_rwlock_unlock(&m->tbl_lock);
}

/*
 * uswap_mm_discard(). With remove events, the kernel tells the handlers of the madvise() (on_remove())
 * and we only wait until they applied it. Without them (discards_reported), every page of the range
 * becomes NONE (copies freed, shadow pages dropped) and is zapped while its folio is still locked,
 * so that reclaim never copies a page of it while the kernel zaps. The folio locks of a chunk are
 * taken in address order, waiting for each while holding the ones before: everyone else who holds
 * several (reclaim, fault-around, readahead) only try-locks the others, so this cannot deadlock.
 * The zap needs no handler (no event), so holding locks across it is safe.
 */
#define DISCARD_CHUNK 512 /* folios locked at once */
int fault_discard(struct uswap_mm *m, uintptr_t start, uintptr_t end)
{
	int ret = 0, err;

	if (!m->discards_reported) {
		ret = umadvise((void *)start, end - start, MADV_DONTNEED);
		fault_settle(m);
		return ret;
	}
	fault_settle(m); /* a range moved or unmapped before this call is where the table says */
	pthread_rwlock_rdlock(&m->tbl_lock);
	for (unsigned ri = region_after(m, start); ri < m->nr_regions && m->tbl[ri]->start < end; ri++) {
		struct mm_region *r = m->tbl[ri];
		uintptr_t a = start > r->start ? start : r->start;
		uintptr_t b = end < r->end ? end : r->end;
		size_t flast = region_folio(r, b - 1);

		atomic_fetch_add(&m->c.events_remove, 1);
		for (size_t f0 = region_folio(r, a); f0 <= flast; f0 += DISCARD_CHUNK) {
			size_t f1 = f0 + DISCARD_CHUNK - 1 < flast ? f0 + DISCARD_CHUNK - 1 : flast;
			size_t p0 = region_page(r, a), p1 = region_page(r, b), first, fend, tmp;
			uintptr_t ca, cb;

			for (size_t fi = f0; fi <= f1; fi++)
				folio_lock(&r->folios[fi]);
			region_folio_pages(r, f0, &first, &tmp);
			region_folio_pages(r, f1, &tmp, &fend);
			first = first > p0 ? first : p0;
			fend = fend < p1 ? fend : p1;
			ca = region_addr(r, first);
			cb = region_addr(r, fend);
			pages_drop(m, r, first, fend);
			for (size_t fi = f0; fi <= f1; fi++)
				folio_summarize(m, r, fi);
			err = umadvise((void *)ca, cb - ca, MADV_DONTNEED);
			ret = ret ? ret : err;
			for (size_t fi = f0; fi <= f1; fi++)
				folio_unlock(&r->folios[fi]);
		}
	}
	pthread_rwlock_unlock(&m->tbl_lock);
	/* What no region covers (a plain mapping in the range) is the kernel's alone. */
	err = umadvise((void *)start, end - start, MADV_DONTNEED);
	return ret ? ret : err;
}

static void on_unmap(struct uswap_mm *m, uintptr_t start, uintptr_t end, uint64_t seq)
{
	atomic_fetch_add(&m->c.events_unmap, 1);
	pthread_rwlock_wrlock(&m->tbl_lock);
	stale_release(m, NULL, 0); /* before a shadow range can go */
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
	stale_release(m, NULL, 0); /* before a shadow range can go */
	region_remap(m, from, to, len);
	pthread_rwlock_unlock(&m->tbl_lock);
}

/*
 * Events are applied one at a time in the order the kernel queued them, whichever handler read them:
 * mremap() queues REMAP and then UNMAP of the old range, and applying the UNMAP first would drop the
 * pages that REMAP moves. Reads are serialized by ev_lock, which numbers the events; a handler waits
 * for its event's turn (ev_applied) holding no lock. Events of a batch go before its faults, and a
 * fault in no region waits until every event read so far is applied (fault_settle()): the kernel
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

void fault_settle(struct uswap_mm *m)
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

/* A staging buffer from the instance's pool (waits, yielding, while all are taken). */
unsigned char *fault_stage_get(struct uswap_mm *m, unsigned *slot)
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

void fault_stage_put(struct uswap_mm *m, unsigned slot)
{
	atomic_store_explicit(&m->stage_busy[slot], false, memory_order_release);
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
	unsigned char *stage = fault_stage_get(m, &slot);
	int ret = 0;

	fault_settle(m);
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
	fault_stage_put(m, slot);
	return ret;
}
