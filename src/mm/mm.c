/*
 * mm.c - the public calls of memory regions: create/destroy an instance, map, register, unmap,
 * adopt a fork child's ranges, limits, statistics. The files below it, each calling only the ones
 * after it: fork.c, sigbus.c, fault.c, swapin.c, reclaim.c, demote.c, region.c, uffd.c (docs/mm.md).
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "mm/mm.h"
#include "mm/uffd.h"
#include "util/err.h"
#include "util/fd.h"

#define DEFAULT_FAULT_AROUND 16
#define DEFAULT_INACTIVE_PCT 12

static int folio_shift_of(size_t bytes, unsigned dflt, unsigned *shift)
{
	if (!bytes) {
		*shift = dflt;
		return 0;
	}
	if (bytes < MM_PAGE || bytes > MM_FOLIO_MAX || (bytes & (bytes - 1)))
		return err_set(-EINVAL, "a folio is a power of two from 4 KiB to 2 MiB, not %zu bytes",
			       bytes);
	*shift = (unsigned)__builtin_ctzl(bytes) - MM_PAGE_SHIFT;
	return 0;
}

/* ---- create / destroy ---- */

static unsigned inactive_pct_of(const struct uswap_mm_options *o)
{
	return o && o->inactive_percent ? (o->inactive_percent > 50 ? 50 : o->inactive_percent)
					: DEFAULT_INACTIVE_PCT;
}

static void mm_free(struct uswap_mm *m)
{
	if (m->handlers) {
		for (unsigned i = 0; i < m->nr_handlers; i++)
			mm_unmap_mem(m->handlers[i].stage, MM_FOLIO_MAX);
		mm_unmap_mem(m->handlers, m->nr_handlers * sizeof(*m->handlers));
	}
	if (m->stages) {
		for (unsigned i = 0; i < m->nr_stages; i++)
			mm_unmap_mem(m->stages[i], MM_FOLIO_MAX);
		mm_unmap_mem(m->stages, m->nr_stages * sizeof(*m->stages));
	}
	mm_unmap_mem((void *)m->stage_busy, m->nr_stages * sizeof(*m->stage_busy));
	mm_unmap_mem(m->zero, MM_FOLIO_MAX);
	mm_unmap_mem(m->fork_stage, MM_FOLIO_MAX);
	mm_unmap_mem(m->fork_ranges, m->fork_ranges_cap * sizeof(*m->fork_ranges));
	if (m->tbl)
		region_table_destroy(m);
	slot_fini(m); /* after the regions: their inactive pages are in it */
	if (m->swap)
		uswap_destroy(m->swap);
	mm_close_fds(m);
	pthread_mutex_destroy(&m->reclaim_lock);
	pthread_mutex_destroy(&m->bal_lock);
	pthread_mutex_destroy(&m->ev_lock);
	pthread_mutex_destroy(&m->stale_lock);
	pthread_mutex_destroy(&m->kick_lock);
	pthread_cond_destroy(&m->kick);
	mm_unmap_mem(m, sizeof(*m));
}

/*
 * The CPUs this process may run on (taskset, a container's cpuset), not all the machine's: the
 * handlers are pinned to these, one each. Return: how many (at least 1; @set empty if unknown).
 */
static unsigned mm_cpus(cpu_set_t *set)
{
	long n;

	CPU_ZERO(set);
	if (!sched_getaffinity(0, sizeof(*set), set) && CPU_COUNT(set) > 0)
		return (unsigned)CPU_COUNT(set);
	CPU_ZERO(set);
	n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (unsigned)n : 1;
}

int uswap_mm_check(void)
{
	err_clear();
	return uffd_check();
}

/* Whether @fd opened (it is closed again). */
static bool mm_probe_fd(int fd)
{
	if (fd < 0)
		return false;
	close(fd);
	return true;
}

/* Whether process_madvise(MADV_DONTNEED) takes PIDFD_SELF_THREAD_GROUP: tried on a page of our own. */
static bool self_madvise_works(void)
{
	void *p = (void *)syscall(SYS_mmap, NULL, MM_PAGE, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct iovec iov = {.iov_base = p, .iov_len = MM_PAGE};
	bool ok;

	if (p == MAP_FAILED)
		return false;
	ok = syscall(SYS_process_madvise, PIDFD_SELF_THREAD_GROUP, &iov, 1, MADV_DONTNEED, 0) == MM_PAGE;
	syscall(SYS_munmap, p, MM_PAGE);
	return ok;
}

int uswap_mm_create(struct uswap_mm **out, const struct uswap_mm_options *o)
{
	struct uswap_options so = {0};
	char def_tiers[USWAP_TIERS_LEN];
	struct uswap_mm *m;
	uint64_t limit;
	unsigned ncpu;
	unsigned fa = o && o->fault_around_pages ? o->fault_around_pages : DEFAULT_FAULT_AROUND;
	unsigned shift = 0;
	int ret;

	err_clear();
	ret = folio_shift_of(o ? o->folio_bytes : 0, 0, &shift);
	if (ret)
		return ret;
	if (fa > 512 || (fa & (fa - 1)))
		return err_set(-EINVAL, "fault_around_pages is a power of two up to 512, not %u", fa);
	ret = uffd_check();
	if (ret)
		return ret;
	m = mm_map_mem(sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->pid = getpid();
	ncpu = mm_cpus(&m->cpus);
	m->folio_shift = shift;
	m->fault_around = fa;
	m->uffd = m->uffd_shadow = m->stop_fd = -1;
	/* Optional: without them reclaim releases and moves pages one range at a time. */
	m->pidfd_self = self_madvise_works();
	m->have_pidfd = m->pidfd_self || mm_probe_fd((int)syscall(SYS_pidfd_open, m->pid, 0));
	m->have_pagemap = mm_probe_fd(open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC));
	m->have_maps = mm_probe_fd(open("/proc/self/maps", O_RDONLY | O_CLOEXEC));
	pthread_mutex_init(&m->reclaim_lock, NULL);
	pthread_mutex_init(&m->bal_lock, NULL);
	pthread_mutex_init(&m->ev_lock, NULL);
	pthread_mutex_init(&m->stale_lock, NULL);
	pthread_mutex_init(&m->kick_lock, NULL);
	pthread_cond_init(&m->kick, NULL);
	limit = o ? o->limit_bytes : 0;
	m->limit_auto = o && o->limit_auto;
	if (m->limit_auto) {
		/* From the ceiling, or from all of the machine's memory, down to what the program needs. */
		atomic_store(&m->auto_max_bytes, limit);
		m->auto_stall_ppm = o->auto_stall_ppm ? o->auto_stall_ppm : AUTO_STALL_PPM;
		m->auto_min_bytes = o->auto_min_bytes ? o->auto_min_bytes : AUTO_MIN_BYTES;
		if (!limit)
			limit = (uint64_t)sysconf(_SC_PHYS_PAGES) * MM_PAGE;
	}
	reclaim_set_limit(m, mm_pages(limit), inactive_pct_of(o));
	m->pool_in_limit = o && o->pool_in_limit;
	if (m->pool_in_limit)
		atomic_store(&m->budget_pages, mm_pages(limit));

	m->sigbus = o && o->sigbus_mode;
	m->discards_reported = o && o->discards_reported;
	ret = uffd_open(UFFD_FEATURE_MOVE | UFFD_FEATURE_PAGEFAULT_FLAG_WP | UFFD_FEATURE_EVENT_UNMAP |
				UFFD_FEATURE_EVENT_REMAP |
				(m->discards_reported ? 0 : UFFD_FEATURE_EVENT_REMOVE) |
				(m->sigbus ? UFFD_FEATURE_SIGBUS : 0),
			&m->uffd);
	if (ret)
		goto out_free;
	m->uffd = fd_keep(m->uffd);
	/* Shadow ranges: a touch of an empty shadow page is a bug; SIGBUS says so instead of hanging. */
	ret = uffd_open(UFFD_FEATURE_MOVE | UFFD_FEATURE_SIGBUS, &m->uffd_shadow);
	if (ret)
		goto out_free;
	m->uffd_shadow = fd_keep(m->uffd_shadow);
	m->stop_fd = fd_keep(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
	ret = -ENOMEM;
	/* In SIGBUS mode the handlers only apply events: one is enough. */
	if (o && o->nr_threads)
		m->nr_handlers = o->nr_threads;
	else
		m->nr_handlers = m->sigbus ? 1 : ncpu < MM_HANDLERS_MAX ? ncpu : MM_HANDLERS_MAX;
	m->handlers = mm_map_mem(m->nr_handlers * sizeof(*m->handlers));
	m->zero =
		(void *)syscall(SYS_mmap, NULL, MM_FOLIO_MAX, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	m->fork_stage = mm_map_mem(MM_FOLIO_MAX);
	if (m->stop_fd < 0 || !m->handlers || m->zero == MAP_FAILED || !m->fork_stage) {
		if (m->zero == MAP_FAILED)
			m->zero = NULL;
		goto out_free;
	}
	for (unsigned i = 0; i < m->nr_handlers; i++)
		if (!(m->handlers[i].stage = mm_map_mem(MM_FOLIO_MAX)))
			goto out_free;
	/* Faulting threads (SIGBUS mode) and prefaults beyond this many wait for a buffer (address space, touched as used). */
	m->nr_stages = m->sigbus ? 2 * ncpu + 2 : 2;
	m->stages = mm_map_mem(m->nr_stages * sizeof(*m->stages));
	m->stage_busy = mm_map_mem(m->nr_stages * sizeof(*m->stage_busy));
	if (!m->stages || !m->stage_busy)
		goto out_free;
	for (unsigned i = 0; i < m->nr_stages; i++)
		if (!(m->stages[i] = mm_map_mem(MM_FOLIO_MAX)))
			goto out_free;
	/* Batched demotion copies into the slot store when it works here (else into region shadows). */
	if (m->discards_reported)
		slot_init(m);
	ret = region_table_init(m);
	if (ret)
		goto out_free;
	so.tiers = o ? o->tiers : NULL;
	if (!so.tiers || !*so.tiers) {
		uswap_default_tiers(o ? o->limit_bytes : 0, def_tiers, sizeof(def_tiers));
		so.tiers = def_tiers;
	}
	so.max_pages = o ? o->max_swap_pages : 0;
	ret = uswap_create_opts(&m->swap, &so);
	if (ret)
		goto out_free;
	reclaim_budget_init(m);
	ret = reclaim_start(m);
	if (!ret)
		ret = fault_start(m);
	if (ret) {
		err_set(ret, "cannot start the threads of the instance");
		goto out_stop;
	}
	if (m->sigbus) {
		ret = sigbus_add(m);
		if (ret) {
			err_set(ret,
				ret == -EOPNOTSUPP ? "SIGBUS mode needs the page-fault error code of x86-64"
						   : "too many instances in SIGBUS mode (at most %d)",
				MM_SIGBUS_MAX);
			goto out_stop;
		}
	}
	fork_track(m);
	*out = m;
	return 0;

out_stop:
	eventfd_write(m->stop_fd, 1);
	fault_stop(m);
	reclaim_stop(m);
out_free:
	mm_free(m);
	return ret;
}

static int region_bring_in_pages(struct uswap_mm *m, struct mm_region *r)
{
	for (size_t fi = 0; fi < r->nr_folios; fi++) {
		int ret = 0;

		if (!(atomic_load(&r->folios[fi]) & (FL_SHADOW | FL_SWAPPED | FL_PRESENT)))
			continue;
		for (int tries = 0; tries < 1000; tries++) {
			ret = swapin_folio(m, m->fork_stage, r, fi, true, false);
			if (ret != -EAGAIN)
				break;
			sched_yield();
		}
		if (ret && ret != -EAGAIN)
			return ret;
	}
	return 0;
}

/*
 * Bring every page of region @r in and drop its copies. The shadow pages its soft faults leave go at
 * once: the caller is about to change the table. Context: tbl_lock held for writing.
 */
static int region_bring_in(struct uswap_mm *m, struct mm_region *r)
{
	int ret = region_bring_in_pages(m, r);

	stale_release(m, NULL, 0);
	return ret;
}

void uswap_mm_destroy(struct uswap_mm *m)
{

	if (!m)
		return;
	fork_untrack(m);
	if (mm_in_child(m))
		return; /* its threads and fds belong to the parent; the child's memory is plain already */
	if (m->sigbus)
		sigbus_del(m);
	eventfd_write(m->stop_fd, 1);
	fault_stop(m);
	reclaim_stop(m);
	pthread_rwlock_wrlock(&m->tbl_lock);
	stale_release(m, NULL, 0); /* before a shadow range can go */
	while (m->nr_regions) {
		struct mm_region *r = m->tbl[m->nr_regions - 1];
		uintptr_t start = r->start, end = r->end;
		bool owned = r->owned;
		struct uffdio_range rg = {.start = start, .len = end - start};

		if (!owned)
			region_bring_in(m, r);
		ioctl(m->uffd, UFFDIO_UNREGISTER, &rg);
		region_forget(m, start, end);
		if (owned)
			munmap((void *)start, end - start);
	}
	pthread_rwlock_unlock(&m->tbl_lock);
	mm_free(m);
}

/* ---- regions ---- */

int uswap_prefault(struct uswap_mm *m, void *addr, size_t len)
{
	uintptr_t start = (uintptr_t)addr & ~(MM_PAGE - 1), end = (uintptr_t)addr + len;

	err_clear();
	if (mm_in_child(m))
		return err_set(-ECHILD, "this uswap_mm belongs to the parent process");
	if (end < start || end > UINTPTR_MAX - MM_PAGE)
		return err_set(-EINVAL, "bad range");
	if (!len)
		return 0;
	end = (end + MM_PAGE - 1) & ~(MM_PAGE - 1);
	return fault_prefault(m, start, end);
}

int uswap_map(struct uswap_mm *m, size_t len, size_t folio_bytes, void **out)
{
	unsigned shift = 0;
	size_t fbytes, span;
	uintptr_t p, a;
	int ret;

	err_clear();
	if (mm_in_child(m))
		return err_set(-ECHILD, "this uswap_mm belongs to the parent process");
	ret = folio_shift_of(folio_bytes, m->folio_shift, &shift);
	if (ret)
		return ret;
	if (!len || len > (1ull << 46))
		return err_set(-EINVAL, "cannot map %zu bytes", len);
	len = (len + MM_PAGE - 1) & ~(MM_PAGE - 1);
	fbytes = MM_PAGE << shift;
	span = len + (fbytes > MM_PAGE ? fbytes : 0);
	p = (uintptr_t)mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
			    -1, 0);
	if (p == (uintptr_t)MAP_FAILED)
		return err_set(-ENOMEM, "mmap of %zu bytes failed", span);
	/* Folios are aligned in the address space: trim the mapping to an aligned start. */
	a = (p + fbytes - 1) & ~(fbytes - 1);
	if (a > p)
		munmap((void *)p, a - p);
	if (p + span > a + len)
		munmap((void *)(a + len), p + span - (a + len));
	pthread_rwlock_wrlock(&m->tbl_lock);
	stale_release(m, NULL, 0); /* before a shadow range can go */
	ret = region_add(m, a, a + len, shift, true, false, NULL);
	pthread_rwlock_unlock(&m->tbl_lock);
	if (ret) {
		munmap((void *)a, len);
		return ret;
	}
	*out = (void *)a;
	return 0;
}

static int check_range(struct uswap_mm *m, void *addr, size_t len)
{
	if (mm_in_child(m))
		return err_set(-ECHILD, "this uswap_mm belongs to the parent process");
	if (((uintptr_t)addr | len) & (MM_PAGE - 1) || !len || (uintptr_t)addr + len < (uintptr_t)addr)
		return err_set(-EINVAL, "[%p, +%zu) is not a page-aligned range", addr, len);
	return 0;
}

int uswap_unmap(struct uswap_mm *m, void *addr, size_t len)
{
	uintptr_t s = (uintptr_t)addr, e;
	struct uffdio_range rg;
	int ret;

	err_clear();
	len = (len + MM_PAGE - 1) & ~(MM_PAGE - 1);
	ret = check_range(m, addr, len);
	if (ret)
		return ret;
	e = s + len;
	rg.start = s;
	rg.len = len;
	pthread_rwlock_wrlock(&m->tbl_lock);
	stale_release(m, NULL, 0); /* before a shadow range can go */
	/* Unregister first: then munmap raises no event and a stray touch is the kernel's business. */
	for (unsigned ri = region_after(m, s); ri < m->nr_regions && m->tbl[ri]->start < e; ri++) {
		struct mm_region *r = m->tbl[ri];

		rg.start = s > r->start ? s : r->start;
		rg.len = (e < r->end ? e : r->end) - rg.start;
		ioctl(m->uffd, UFFDIO_UNREGISTER, &rg);
	}
	region_forget(m, s, e);
	pthread_rwlock_unlock(&m->tbl_lock);
	return munmap(addr, len) ? err_set(-errno, "munmap: %s", strerror(errno)) : 0;
}

/* A region for [s, s + len) unless it overlaps one (-EEXIST); @scan: count the pages present now. */
static int region_add_new(struct uswap_mm *m, uintptr_t s, size_t len, unsigned shift, bool scan)
{
	unsigned ri;
	int ret;

	pthread_rwlock_wrlock(&m->tbl_lock);
	stale_release(m, NULL, 0); /* before a shadow range can go */
	ri = region_after(m, s);
	if (ri < m->nr_regions && m->tbl[ri]->start < s + len)
		ret = err_set(-EEXIST, "[%p, +%zu) overlaps a registered range", (void *)s, len);
	else
		ret = region_add(m, s, s + len, shift, false, scan, NULL);
	pthread_rwlock_unlock(&m->tbl_lock);
	return ret;
}

int uswap_register(struct uswap_mm *m, void *addr, size_t len, size_t folio_bytes)
{
	unsigned shift = 0;
	int ret;

	err_clear();
	ret = check_range(m, addr, len);
	if (!ret)
		ret = folio_shift_of(folio_bytes, m->folio_shift, &shift);
	if (ret)
		return ret;
	/*
	 * A mapping made over a registered range (mmap with MAP_FIXED) unmapped that part, and its
	 * UNMAP event may be read but not applied yet: the second try comes after every event read.
	 */
	for (int tries = 0; tries < 2; tries++) {
		if (tries)
			fault_settle(m);
		ret = region_add_new(m, (uintptr_t)addr, len, shift, true);
		if (ret != -EEXIST)
			break;
	}
	if (!ret && atomic_load(&m->resident) > atomic_load(&m->high_pages))
		reclaim_kick(m);
	return ret;
}

int uswap_mm_adopt_forked(struct uswap_mm *m, struct uswap_mm *parent)
{
	int n = 0;

	err_clear();
	if (mm_in_child(m) || !mm_in_child(parent))
		return err_set(-EINVAL,
			       "uswap_mm_adopt_forked() takes this process's instance and its parent's");
	for (size_t i = 0; i < parent->nr_fork_ranges; i++) {
		const struct mm_range *rg = &parent->fork_ranges[i];

		/*
		 * One page a folio: a folio never mixes the pages the child inherited (present, but not
		 * ours) with pages it touches later. Not scanned, so the inherited ones are neither
		 * counted nor evicted. A range the child did not get (MADV_DONTFORK) fails to register.
		 */
		n += !region_add_new(m, rg->start, rg->end - rg->start, 0, false);
	}
	err_clear();
	return n;
}

int uswap_unregister(struct uswap_mm *m, void *addr, size_t len)
{
	uintptr_t s = (uintptr_t)addr, e = s + len;
	int ret;

	err_clear();
	ret = check_range(m, addr, len);
	if (ret)
		return ret;
	pthread_rwlock_wrlock(&m->tbl_lock);
	stale_release(m, NULL, 0); /* before a shadow range can go */
	for (unsigned ri = region_after(m, s); ri < m->nr_regions && m->tbl[ri]->start < e;) {
		struct mm_region *r = m->tbl[ri];
		uintptr_t a = s > r->start ? s : r->start, b = e < r->end ? e : r->end;
		struct uffdio_range rg = {.start = a, .len = b - a};

		ret = region_bring_in(m, r);
		if (ret)
			break;
		ioctl(m->uffd, UFFDIO_UNREGISTER, &rg);
		region_forget(m, a, b);
		ri = region_after(m, b);
	}
	pthread_rwlock_unlock(&m->tbl_lock);
	return ret ? err_set(ret, "could not bring every page back: %s", strerror(-ret)) : 0;
}

/* "1%", "0.5%": parts per million, 100 (0.01%) to 500000 (50%). Return: 0 or -EINVAL. */
static int parse_ppm(const char *s, unsigned *ppm)
{
	char *end;
	double v = strtod(s, &end);

	if (end == s || strcmp(end, "%") || !(v >= 0.01 && v <= 50))
		return -EINVAL;
	*ppm = (unsigned)(v * 10000 + 0.5);
	return 0;
}

int uswap_parse_limit(const char *s, struct uswap_mm_options *o)
{
	char buf[128], *save = NULL, *tok;
	bool first = true;

	err_clear();
	if (!s || strlen(s) >= sizeof(buf))
		return err_set(-EINVAL, "limit \"%s\": not a size, a percentage or auto", s ? s : "");
	snprintf(buf, sizeof(buf), "%s", s);
	o->limit_bytes = 0;
	o->limit_auto = 0;
	for (tok = strtok_r(buf, ":", &save); tok; tok = strtok_r(NULL, ":", &save), first = false) {
		char *eq = strchr(tok, '=');
		uint64_t v;

		if (!strcmp(tok, "auto") && !o->limit_auto) {
			o->limit_auto = 1;
		} else if (first && !eq) {
			if (uswap_parse_size(tok, 1, &v) || !v)
				return err_set(-EINVAL,
					       "limit \"%s\": \"%s\" is not a size (512M, 2G, 25%%) or auto",
					       s, tok);
			o->limit_bytes = v;
		} else if (o->limit_auto && eq && !strncmp(tok, "stall=", 6)) {
			if (parse_ppm(eq + 1, &o->auto_stall_ppm))
				return err_set(-EINVAL,
					       "limit \"%s\": stall \"%s\" is not a percentage 0.01%%..50%%",
					       s, eq + 1);
		} else if (o->limit_auto && eq && (!strncmp(tok, "min=", 4) || !strncmp(tok, "max=", 4))) {
			if (uswap_parse_size(eq + 1, 1, &v) || !v)
				return err_set(-EINVAL, "limit \"%s\": %.3s \"%s\" is not a size", s, tok,
					       eq + 1);
			if (tok[1] == 'i')
				o->auto_min_bytes = v;
			else if (!o->limit_bytes || v < o->limit_bytes)
				o->limit_bytes = v;
		} else {
			return err_set(-EINVAL,
				       "limit \"%s\": unexpected \"%s\" (SIZE, N%%, "
				       "auto[:stall=PCT][:min=SIZE][:max=SIZE], "
				       "SIZE:auto[:...])",
				       s, tok);
		}
	}
	if (!o->limit_bytes && !o->limit_auto)
		return err_set(-EINVAL, "limit \"%s\": empty", s);
	if (o->limit_auto && o->auto_min_bytes && o->limit_bytes && o->auto_min_bytes > o->limit_bytes)
		return err_set(-EINVAL, "limit \"%s\": min is above the ceiling", s);
	return 0;
}

int uswap_mm_set_limit(struct uswap_mm *m, uint64_t limit_bytes)
{
	if (m->limit_auto) {
		uint64_t cur =
			(m->pool_in_limit ? atomic_load(&m->budget_pages) : atomic_load(&m->limit_pages)) *
			MM_PAGE;

		/* The ceiling; the limit comes under it at once and finds itself below. */
		atomic_store(&m->auto_max_bytes, limit_bytes);
		if (!limit_bytes || cur <= limit_bytes)
			return 0;
	}
	reclaim_limit(m, limit_bytes);
	return 0;
}

ssize_t uswap_mm_shrink(struct uswap_mm *m, uint64_t target_bytes)
{
	if (mm_in_child(m))
		return err_set(-ECHILD, "this uswap_mm belongs to the parent process");
	return (ssize_t)(reclaim_run(m, target_bytes / MM_PAGE, true) * MM_PAGE);
}

int uswap_mm_discard(struct uswap_mm *m, void *addr, size_t len)
{
	uintptr_t a = (uintptr_t)addr;

	if (mm_in_child(m))
		return err_set(-ECHILD, "this uswap_mm belongs to the parent process");
	if ((a | len) & (MM_PAGE - 1))
		return err_set(-EINVAL, "uswap_mm_discard: %p + %zu is not page aligned", addr, len);
	if (!len)
		return 0;
	return fault_discard(m, a, a + len);
}

int uswap_mm_sync(struct uswap_mm *m)
{
	if (mm_in_child(m))
		return err_set(-ECHILD, "this uswap_mm belongs to the parent process");
	fault_settle(m);
	return 0;
}

int uswap_mm_prepare_dump(struct uswap_mm *m, uint64_t max_bytes)
{
	struct timespec deadline;

	if (mm_in_child(m))
		return -ECHILD;
	if (atomic_load(&m->swapped) > max_bytes / MM_PAGE)
		return -ENOMEM;
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += 2;
	return fork_dump_prepare(m, &deadline);
}

struct uswap *uswap_mm_swap(struct uswap_mm *m)
{
	return m->swap;
}

int uswap_mm_stats(struct uswap_mm *m, struct uswap_mm_stats *st)
{
	struct mm_counters *c = &m->c;
	uint64_t bytes = 0;

	memset(st, 0, sizeof(*st));
	reclaim_budget_apply(m);
	/* Every 500 ms under `uswap run`: no walk of the pages (see folio_summarize()). */
	pthread_rwlock_rdlock(&m->tbl_lock);
	for (unsigned ri = 0; ri < m->nr_regions; ri++)
		bytes += m->tbl[ri]->end - m->tbl[ri]->start;
	st->regions = m->nr_regions;
	pthread_rwlock_unlock(&m->tbl_lock);
	st->region_bytes = bytes;
	st->limit_bytes =
		atomic_load(&m->limit_pages) >= UINT64_MAX / 4 ? 0 : atomic_load(&m->limit_pages) * MM_PAGE;
	st->budget_bytes = m->pool_in_limit ? atomic_load(&m->budget_pages) * MM_PAGE : st->limit_bytes;
	st->limit_auto = m->limit_auto;
	st->resident_bytes = atomic_load(&m->resident) * MM_PAGE;
	st->peak_resident_bytes = atomic_load(&m->peak_resident) * MM_PAGE;
	if (st->peak_resident_bytes < st->resident_bytes)
		st->peak_resident_bytes = st->resident_bytes;
	st->stall_ns = atomic_load(&c->stall_ns);
	st->inactive_bytes = atomic_load(&m->inactive) * MM_PAGE;
	st->swapped_bytes = atomic_load(&m->swapped) * MM_PAGE;
	st->clean_bytes = atomic_load(&m->clean) * MM_PAGE;
	st->zero_fills = atomic_load(&c->zero_fills);
	st->swapins = atomic_load(&c->swapins);
	st->swapin_pages = atomic_load(&c->swapin_pages);
	st->readahead_pages = atomic_load(&c->readahead_pages);
	st->soft_faults = atomic_load(&c->soft_faults);
	st->wp_faults = atomic_load(&c->wp_faults);
	st->demotions = atomic_load(&c->demotions);
	st->reclaim_ns = atomic_load(&c->reclaim_ns);
	st->reclaim_store_ns = atomic_load(&c->store_ns);
	st->pool_share_bytes = atomic_load(&m->pool_target_bytes);
	st->evictions = atomic_load(&c->evictions);
	st->evicted_pages = atomic_load(&c->evicted_pages);
	st->clean_evictions = atomic_load(&c->clean_evictions);
	st->store_failures = atomic_load(&c->store_failures);
	st->load_failures = atomic_load(&c->load_failures);
	st->load_retries = atomic_load(&c->load_retries);
	st->direct_reclaims = atomic_load(&c->direct_reclaims);
	st->events_remove = atomic_load(&c->events_remove);
	st->events_unmap = atomic_load(&c->events_unmap);
	st->events_remap = atomic_load(&c->events_remap);
	st->untracked_faults = atomic_load(&c->untracked_faults);
	st->sigbus_faults = atomic_load(&c->sigbus_faults);
	st->swapin_ns_p50 = hist_percentile(&m->swapin_hist, 0.5);
	st->swapin_ns_p99 = hist_percentile(&m->swapin_hist, 0.99);
	st->meta_bytes = atomic_load(&m->meta_bytes);
	st->buffer_bytes = (uint64_t)(m->nr_handlers + m->nr_stages + 2) * MM_FOLIO_MAX;
	return 0;
}
