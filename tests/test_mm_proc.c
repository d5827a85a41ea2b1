/*
 * test_mm_proc.c - memory regions living with the rest of the process: munmap, madvise and mremap of
 * swapped ranges, fork, swapoff of a tier and a tier that fails, each while pages are being swapped.
 * Every page is checked against a checksum kept outside the regions.
 * Skips (77) when userfaultfd is not available for kernel-mode faults or the kernel is too old.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/backend.h"
#include "check.h"
#include "core/testhook.h"
#include "mm/mm.h"
#include "util/csum.h"
#include "uswap.h"

#define PS  4096ul
#define MiB (1024ul * 1024)
/* A stack that takes every page: random pages go to the file. */
#define TIERS   "same,zpool:lz4:max=64M,file:size=256M"
#define T_ZPOOL 1
#define T_FILE  2

/* The tests run again with this set: faults resolved by the faulting threads (SIGBUS mode). */
static unsigned sigbus_mode;

static struct uswap_mm *mm_new(uint64_t limit, const char *tiers, size_t folio)
{
	struct uswap_mm_options o = {
		.limit_bytes = limit, .tiers = tiers, .folio_bytes = folio, .sigbus_mode = sigbus_mode};

	return check_mm_new(&o);
}

#define put_page     check_put_page
#define verify_range check_verify_pages
#define page_is_zero check_page_is_zero
#define swap_pages   check_swap_pages

/*
 * Pages the regions hold swapped must be exactly what the swap layer holds: nothing leaks.
 * Context: no program thread running; holding the hands keeps reclaim still while we count.
 * Still, a handler finishes a fault (frees copies, reads ahead) after the install has woken the
 * thread, and after a fork the reclaimer breaks copy-on-write of pages shared with the child outside
 * the hands' lock (a write fault each, which drops a clean page's copy): the two counts are read
 * apart, so a leak is a difference that stays, not one reading.
 */
/* Swapped and clean pages counted from the page words themselves (what the statistics keep as totals). */
static void walk_pages(struct uswap_mm *m, uint64_t *swapped, uint64_t *clean)
{
	*swapped = *clean = 0;
	pthread_rwlock_rdlock(&m->tbl_lock);
	for (unsigned ri = 0; ri < m->nr_regions; ri++) {
		struct mm_region *r = m->tbl[ri];

		for (size_t fi = 0; fi < r->nr_folios; fi++) {
			size_t first, end;

			folio_lock(&r->folios[fi]);
			region_folio_pages(r, fi, &first, &end);
			for (size_t i = first; i < end; i++) {
				*swapped += pg_kind(r->pages[i]) == PG_SWAPPED;
				*clean += pg_kind(r->pages[i]) != PG_SWAPPED && (r->pages[i] & PG_CLEAN);
			}
			folio_unlock(&r->folios[fi]);
		}
	}
	pthread_rwlock_unlock(&m->tbl_lock);
}

static void check_accounting(struct uswap_mm *m)
{
	struct uswap_mm_stats st;
	uint64_t layer = 0, regions = 0, swapped = 0, clean = 0;

	uswap_mm_sync(m);
	for (int tries = 0; tries < 40; tries++) {
		pthread_mutex_lock(&m->reclaim_lock);
		uswap_mm_stats(m, &st);
		regions = (st.swapped_bytes + st.clean_bytes) / PS;
		layer = swap_pages(m);
		walk_pages(m, &swapped, &clean);
		pthread_mutex_unlock(&m->reclaim_lock);
		if (layer == regions && swapped * PS == st.swapped_bytes && clean * PS == st.clean_bytes)
			break;
		usleep(50 * 1000);
	}
	CHECK_EQ(layer, regions);
	CHECK_EQ(swapped * PS, st.swapped_bytes);
	CHECK_EQ(clean * PS, st.clean_bytes);
	CHECK(st.resident_bytes <= st.region_bytes);
	check_validate_mm(m); /* DEBUG builds: all of it, exactly, under the instance's locks */
}

/* ---- a thread that keeps pages moving while the test changes the mappings ---- */

struct churn {
	unsigned char *base;
	size_t first, end; /* pages it owns: it writes them and checks them */
	uint32_t *sums;
	_Atomic bool stop;
	_Atomic size_t bad;
	_Atomic uint64_t ops; /* touches done */
	pthread_t th;
	uint64_t seed;
};

static void *churn_main(void *arg)
{
	struct churn *c = arg;
	uint64_t s = c->seed, v = 1;

	while (!atomic_load(&c->stop)) {
		size_t i;

		s = s * 6364136223846793005ull + 1442695040888963407ull;
		i = c->first + (size_t)(s >> 33) % (c->end - c->first);
		if ((s >> 20) & 1)
			c->sums[i] = put_page(c->base + i * PS, i, 1000 + v++);
		else if (csum_buf(c->base + i * PS, PS) != c->sums[i])
			atomic_fetch_add(&c->bad, 1);
		atomic_fetch_add_explicit(&c->ops, 1, memory_order_relaxed);
	}
	return NULL;
}

static void churn_start(struct churn *c, unsigned char *base, size_t first, size_t end, uint32_t *sums)
{
	c->base = base;
	c->first = first;
	c->end = end;
	c->sums = sums;
	c->seed = seed_for(first);
	atomic_store(&c->ops, 0);
	atomic_store(&c->stop, false);
	atomic_store(&c->bad, 0);
	pthread_create(&c->th, NULL, churn_main, c);
}

static void churn_stop(struct churn *c)
{
	atomic_store(&c->stop, true);
	pthread_join(c->th, NULL);
	CHECK_EQ(atomic_load(&c->bad), 0);
}

/*
 * A 24 MiB region under a 4 MiB limit; a thread churns its first third while the test, in the other
 * two thirds: drops pages with MADV_DONTNEED (they read zero), unmaps a hole with munmap() (the rest
 * stays intact), moves a swapped range with mremap() (its data follows it, the grown tail is zero).
 */
static void test_mm_munmap_madvise_mremap(void)
{
	const size_t n = 6144;
	struct uswap_mm *m = mm_new(4 * MiB, TIERS, 0);
	uint32_t *sums = calloc(n, sizeof(*sums));
	struct churn c;
	struct uswap_mm_stats st;
	unsigned char *p, *q;
	size_t moved0 = 4096, moved_n = 512;

	if (!m)
		return;
	p = check_map_filled(m, n, 0, sums);
	uswap_mm_stats(m, &st);
	CHECK(st.swapped_bytes > 0);
	churn_start(&c, p, 0, 2048, sums);

	/* MADV_DONTNEED of a swapped range and of a just-written one: both read zero afterwards. */
	CHECK_EQ(madvise(p + 2100 * PS, 300 * PS, MADV_DONTNEED), 0);
	for (size_t i = 3000; i < 3100; i++)
		sums[i] = put_page(p + i * PS, i, 1);
	CHECK_EQ(madvise(p + 3000 * PS, 50 * PS, MADV_DONTNEED), 0);
	for (size_t i = 2100; i < 2400; i++) {
		CHECK(page_is_zero(p + i * PS));
		sums[i] = csum_buf(p + i * PS, PS);
	}
	for (size_t i = 3000; i < 3050; i++) {
		CHECK(page_is_zero(p + i * PS));
		sums[i] = csum_buf(p + i * PS, PS);
	}
	CHECK_EQ(verify_range(p, 2048, 4096, sums), 0);

	/* munmap() of a hole by the program: the region splits, the pages around it stay. */
	CHECK_EQ(munmap(p + 2600 * PS, 200 * PS), 0);
	CHECK_EQ(verify_range(p, 2048, 2600, sums), 0);
	CHECK_EQ(verify_range(p, 2800, 4096, sums), 0);

	/* mremap() of a range that is mostly swapped out, grown so that it must move. */
	q = mremap(p + moved0 * PS, moved_n * PS, 2 * moved_n * PS, MREMAP_MAYMOVE);
	CHECK(q != MAP_FAILED);
	if (q != MAP_FAILED) {
		/*
		 * The kernel returns from mremap() once the event is read, maybe before it is applied;
		 * touching the moved range waits for it, so the counter is read after.
		 */
		CHECK_EQ(verify_range(q, 0, moved_n, sums + moved0), 0);
		uswap_mm_stats(m, &st);
		CHECK(st.events_remap >= 1);
		for (size_t i = moved_n; i < 2 * moved_n; i++)
			CHECK(page_is_zero(q + i * PS));
		/* The moved range is still swapped: write it all, push it out, read it back. */
		for (size_t i = 0; i < moved_n; i++)
			sums[moved0 + i] = put_page(q + i * PS, moved0 + i, 2);
		CHECK_EQ(verify_range(p, 4608, n, sums), 0);
		CHECK_EQ(verify_range(q, 0, moved_n, sums + moved0), 0);
		CHECK_EQ(munmap(q, 2 * moved_n * PS), 0);
	}
	churn_stop(&c);
	CHECK_EQ(verify_range(p, 0, 2600, sums), 0);
	CHECK_EQ(verify_range(p, 2800, moved0, sums), 0);
	CHECK_EQ(verify_range(p, moved0 + moved_n, n, sums), 0);
	check_accounting(m);
	uswap_mm_stats(m, &st);
	CHECK(st.events_remove >= 2);
	CHECK(st.events_unmap >= 1);
	CHECK_EQ(st.load_failures, 0);
	/* Piece by piece: the holes may hold someone else's mappings by now. */
	check_validate_mm(m);
	CHECK_EQ(uswap_unmap(m, p, 2600 * PS), 0);
	CHECK_EQ(uswap_unmap(m, p + 2800 * PS, (moved0 - 2800) * PS), 0);
	CHECK_EQ(uswap_unmap(m, p + (moved0 + moved_n) * PS, (n - moved0 - moved_n) * PS), 0);
	uswap_mm_sync(m);
	uswap_mm_stats(m, &st);
	CHECK_EQ(st.resident_bytes, 0);
	CHECK_EQ(st.regions, 0);
	CHECK_EQ(swap_pages(m), 0);
	check_mm_destroy(m);
	free(sums);
}

/*
 * fork() with most pages swapped out: the child checks every page while the parent keeps swapping
 * (its pages are shared with the child until the child writes or exits: reclaim must cope).
 */
static void test_mm_fork(void)
{
	const size_t n = 4096;
	struct uswap_mm *m = mm_new(4 * MiB, TIERS, 0);
	uint32_t *sums = calloc(n, sizeof(*sums));
	struct uswap_mm_stats st;
	unsigned char *p;
	int status = -1;
	pid_t pid;

	if (!m)
		return;
	p = check_map_filled(m, n, 16384, sums);
	uswap_mm_stats(m, &st);
	CHECK(st.swapped_bytes > n * PS / 2);
	pid = fork();
	if (pid == 0) {
		size_t bad = verify_range(p, 0, n, sums);

		/* The child's memory is plain: writing it must not reach the parent. */
		for (size_t i = 0; i < n; i += 7)
			p[i * PS] ^= 0xff;
		_exit(bad ? 1 : 0);
	}
	CHECK(pid > 0);
	for (size_t i = 0; i < n; i += 2)
		sums[i] = put_page(p + i * PS, i, 1);
	CHECK_EQ(verify_range(p, 0, n, sums), 0);
	CHECK_EQ(waitpid(pid, &status, 0), pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK_EQ(verify_range(p, 0, n, sums), 0);
	uswap_mm_stats(m, &st);
	CHECK(st.resident_bytes <= st.limit_bytes + 2 * MiB);
	check_accounting(m);
	check_validate_mm(m);
	CHECK_EQ(uswap_unmap(m, p, n * PS), 0);
	CHECK_EQ(swap_pages(m), 0);
	check_mm_destroy(m);
	free(sums);
}

/*
 * After a fork the parent's pages are shared with the child, and stay so (unmovable) after it exits
 * until they are written: the reclaimer must break the sharing itself, and bring the resident size
 * under a limit lowered after the fork while the program touches nothing. In SIGBUS mode it could
 * not for clean pages (write-protected: the kernel's write for us failed), and they stayed.
 */
static void test_mm_fork_idle(void)
{
	const size_t n = 4096;
	struct uswap_mm *m = mm_new(4 * MiB, TIERS, 0);
	uint32_t *sums = calloc(n, sizeof(*sums));
	struct uswap_mm_stats st;
	unsigned char *p;
	int status = -1;
	pid_t pid;

	if (!m)
		return;
	p = check_map_filled(m, n, 16384, sums);
	/* Read back: most pages resident at the fork are clean (write-protected, with their copies). */
	CHECK_EQ(verify_range(p, 0, n, sums), 0);
	uswap_mm_stats(m, &st);
	CHECK(st.clean_bytes > 2 * MiB);
	pid = fork();
	if (pid == 0)
		_exit(verify_range(p, 0, n, sums) ? 1 : 0);
	CHECK(pid > 0);
	CHECK_EQ(waitpid(pid, &status, 0), pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK_EQ(uswap_mm_set_limit(m, MiB), 0);
	/* A second or so here; 30 s before it counts as stuck. */
	for (int i = 0; i < 600; i++) {
		uswap_mm_stats(m, &st);
		if (st.resident_bytes <= st.limit_bytes)
			break;
		usleep(50 * 1000);
	}
	CHECK(st.resident_bytes <= st.limit_bytes);
	CHECK_EQ(verify_range(p, 0, n, sums), 0);
	check_accounting(m);
	check_validate_mm(m);
	CHECK_EQ(uswap_unmap(m, p, n * PS), 0);
	CHECK_EQ(swap_pages(m), 0);
	check_mm_destroy(m);
	free(sums);
}

#if !defined(__SANITIZE_THREAD__) /* TSan kills a fork child of a multithreaded process that starts threads */
/*
 * A fork child with an instance of its own (uswap_mm_adopt_forked()): it reads what it inherited
 * (half the region, mostly swapped in the parent), writes the other half, which its own limit then
 * swaps, and reads it back; the parent's pages stay the parent's.
 */
static void test_mm_fork_adopt(void)
{
	const size_t n = 4096, half = n / 2;
	struct uswap_mm *m = mm_new(4 * MiB, TIERS, 0);
	uint32_t *sums = calloc(n, sizeof(*sums));
	unsigned char *p;
	int status = -1;
	pid_t pid;

	if (!m)
		return;
	CHECK_EQ(uswap_mm_adopt_forked(m, m), -EINVAL);
	CHECK_EQ(uswap_map(m, n * PS, 0, (void **)&p), 0);
	for (size_t i = 0; i < half; i++)
		sums[i] = put_page(p + i * PS, i, 0);
	pid = fork();
	if (pid == 0) {
		struct uswap_mm_options o = {.limit_bytes = 4 * MiB, .tiers = TIERS};
		struct uswap_mm *c = NULL;
		struct uswap_mm_stats st;

		if (uswap_mm_create(&c, &o))
			_exit(2);
		if (uswap_mm_adopt_forked(c, m) < 1 || uswap_mm_adopt_forked(m, c) != -EINVAL)
			_exit(3);
		if (verify_range(p, 0, half, sums))
			_exit(4);
		for (size_t i = half; i < n; i++)
			sums[i] = put_page(p + i * PS, i, 2);
		uswap_mm_stats(c, &st);
		if (st.resident_bytes > st.limit_bytes + 2 * MiB || st.swapped_bytes < 2 * MiB)
			_exit(5);
		if (verify_range(p, half, n, sums) || verify_range(p, 0, half, sums))
			_exit(6);
		_exit(0);
	}
	CHECK(pid > 0);
	CHECK_EQ(waitpid(pid, &status, 0), pid);
	CHECK(WIFEXITED(status));
	CHECK_EQ(WEXITSTATUS(status), 0);
	CHECK_EQ(verify_range(p, 0, half, sums), 0);
	for (size_t i = half; i < n; i++)
		CHECK_EQ(p[i * PS], 0); /* untouched here: the child's writes stayed in the child */
	check_accounting(m);
	check_validate_mm(m);
	CHECK_EQ(uswap_unmap(m, p, n * PS), 0);
	check_mm_destroy(m);
	free(sums);
}

#define FORK_ADOPT T(test_mm_fork_adopt),
#else
#define FORK_ADOPT
#endif

/* ---- the swap layer under the program changes while it runs ---- */

struct workers {
	unsigned char *base;
	uint32_t *sums;
	struct churn c[2];
};

static void workers_start(struct workers *w, unsigned char *base, size_t n, uint32_t *sums)
{
	churn_start(&w->c[0], base, 0, n / 2, sums);
	churn_start(&w->c[1], base, n / 2, n, sums);
}

static void workers_stop(struct workers *w)
{
	churn_stop(&w->c[0]);
	churn_stop(&w->c[1]);
}

/*
 * A fixed amount of work: wait until the workers have done @n more touches (each touch that misses
 * is a swap-in; counting touches, not swap-ins, cannot wait forever when nothing can be evicted).
 */
static void wait_ops(struct workers *w, uint64_t n)
{
	uint64_t until = atomic_load(&w->c[0].ops) + atomic_load(&w->c[1].ops) + n;

	while (atomic_load(&w->c[0].ops) + atomic_load(&w->c[1].ops) < until)
		sched_yield();
}

static uint64_t swapins(struct uswap_mm *m)
{
	struct uswap_mm_stats st;

	uswap_mm_stats(m, &st);
	return st.swapins;
}

/* swapoff of the compressed pool, then of the file, while two threads read and write. */
static void test_mm_swapoff_running(void)
{
	const size_t n = 4096;
	struct uswap_mm *m = mm_new(4 * MiB, TIERS, 0);
	uint32_t *sums = calloc(n, sizeof(*sums));
	struct workers w;
	struct uswap_stats ss;
	unsigned char *p;
	uint64_t s0;
	int ret;

	if (!m)
		return;
	p = check_map_filled(m, n, 0, sums);
	s0 = swapins(m);
	workers_start(&w, p, n, sums);
	wait_ops(&w, 3000);
	CHECK_EQ(uswap_swapoff(uswap_mm_swap(m), T_ZPOOL), 0);
	wait_ops(&w, 3000);
	uswap_stats(uswap_mm_swap(m), &ss);
	CHECK_EQ(ss.tier[T_ZPOOL].pages, 0); /* off: it took nothing since */
	CHECK_EQ(uswap_swapon(uswap_mm_swap(m), T_ZPOOL), 0);
	wait_ops(&w, 3000);
	/* Random pages have nowhere else to go: -ENOSPC leaves them in the file, intact. */
	ret = uswap_swapoff(uswap_mm_swap(m), T_FILE);
	CHECK(ret == 0 || ret == -ENOSPC);
	wait_ops(&w, 3000);
	workers_stop(&w);
	CHECK(swapins(m) > s0 + 1000);
	CHECK_EQ(verify_range(p, 0, n, sums), 0);
	check_accounting(m);
	check_validate_mm(m);
	CHECK_EQ(uswap_unmap(m, p, n * PS), 0);
	CHECK_EQ(swap_pages(m), 0);
	check_mm_destroy(m);
	free(sums);
}

/*
 * The file tier fails every store from some point on, then the pool too: nothing is lost, the program
 * goes on. The failures are armed before the workers start (the hook is not meant to change under
 * running I/O): they fire after a number of stores, in the middle of the run.
 */
static void test_mm_tier_fails(void)
{
	const size_t n = 4096;
	struct uswap_mm *m = mm_new(4 * MiB, "same,fault(zpool:lz4:max=64M),fault(file:size=256M)", 0);
	uint32_t *sums = calloc(n, sizeof(*sums));
	struct uswap_mm_stats st;
	struct uswap_stats ss;
	struct workers w;
	unsigned char *p;

	if (!m)
		return;
	p = check_map_filled(m, n, 0, sums);
	uswap_mm_sync(m);
	pthread_rwlock_wrlock(&m->tbl_lock); /* no load or store runs while the hooks change */
	backend_inject(testhook_tier(uswap_mm_swap(m), T_FILE), true, 100, -EIO, true);
	backend_inject(testhook_tier(uswap_mm_swap(m), T_ZPOOL), true, 1000, -EIO, true);
	pthread_rwlock_unlock(&m->tbl_lock);
	workers_start(&w, p, n, sums);
	wait_ops(&w, 10000);
	workers_stop(&w);
	CHECK_EQ(verify_range(p, 0, n, sums), 0);
	uswap_mm_stats(m, &st);
	uswap_stats(uswap_mm_swap(m), &ss);
	CHECK(st.store_failures > 0);
	CHECK(ss.tier[T_FILE].errors > 0);
	CHECK(ss.tier[T_ZPOOL].errors > 0);
	CHECK_EQ(st.load_failures, 0);
	/* Tiers back: the program's pages can leave again. */
	uswap_mm_sync(m);
	pthread_rwlock_wrlock(&m->tbl_lock);
	backend_inject(testhook_tier(uswap_mm_swap(m), T_FILE), true, 0, 0, false);
	backend_inject(testhook_tier(uswap_mm_swap(m), T_ZPOOL), true, 0, 0, false);
	pthread_rwlock_unlock(&m->tbl_lock);
	for (size_t i = 0; i < n; i++)
		sums[i] = put_page(p + i * PS, i, 7);
	CHECK_EQ(verify_range(p, 0, n, sums), 0);
	uswap_mm_stats(m, &st);
	CHECK(st.resident_bytes <= st.limit_bytes + 2 * MiB);
	check_accounting(m);
	check_validate_mm(m);
	CHECK_EQ(uswap_unmap(m, p, n * PS), 0);
	CHECK_EQ(swap_pages(m), 0);
	check_mm_destroy(m);
	free(sums);
}

/* ---- MADV_DONTNEED racing with reclaim and faults ---- */

struct storm {
	unsigned char *base;
	size_t first, end;
	uint32_t *sums;
	uint64_t seed;
	long ops;
	_Atomic size_t bad;
	_Atomic bool done;
	pthread_t th;
};

static void *storm_main(void *arg)
{
	struct storm *w = arg;
	uint64_t s = w->seed, v = 1;
	uint32_t zero = csum_buf((const unsigned char[PS]){0}, PS);

	for (long t = 0; t < w->ops; t++) {
		size_t i, n;
		unsigned op;

		s = s * 6364136223846793005ull + 1442695040888963407ull;
		i = w->first + (size_t)(s >> 33) % (w->end - w->first);
		op = (unsigned)(s >> 20) % 100;
		if (csum_buf(w->base + i * PS, PS) != w->sums[i] && atomic_fetch_add(&w->bad, 1) < 5)
			fprintf(stderr, "[%s] page %zu differs\n", check_test, i);
		if (op < 30) {
			w->sums[i] = put_page(w->base + i * PS, i, 1000 + v++);
		} else if (op < 36) {
			/* Drop a few pages: resident, inactive, swapped or being moved right now. */
			n = 1 + (s >> 40) % 8;
			if (i + n > w->end)
				n = w->end - i;
			CHECK_EQ(madvise(w->base + i * PS, n * PS, MADV_DONTNEED), 0);
			for (size_t k = i; k < i + n; k++)
				w->sums[k] = zero;
		}
	}
	atomic_store(&w->done, true);
	return NULL;
}

/*
 * Three threads, each in its own part of a region 8x the limit, read, write and MADV_DONTNEED
 * random pages while reclaim demotes and evicts around them: every page read back holds what was
 * last written, or zeros after a DONTNEED. A zap racing with a move is what once made the kernel's
 * UFFDIO_MOVE spin for ever (see uffd_move()): the test fails after a deadline instead of hanging.
 */
static void test_mm_madvise_storm(void)
{
	const size_t n = 8192, nw = 3;
	struct uswap_mm *m = mm_new(4 * MiB, TIERS, 0);
	uint32_t *sums = calloc(n, sizeof(*sums));
	struct storm w[3];
	unsigned char *p;
	bool finished = true;

	if (!m)
		return;
	p = check_map_filled(m, n, 0, sums);
	for (size_t k = 0; k < nw; k++) {
		w[k] = (struct storm){.base = p,
				      .first = k * n / nw,
				      .end = (k + 1) * n / nw,
				      .sums = sums,
				      .seed = seed_for(k + 77),
				      .ops = 40000};
		pthread_create(&w[k].th, NULL, storm_main, &w[k]);
	}
	for (int waited = 0; waited < 600; waited++) {
		bool all = true;

		for (size_t k = 0; k < nw; k++)
			all = all && atomic_load(&w[k].done);
		if (all)
			break;
		sleep(1);
	}
	for (size_t k = 0; k < nw; k++)
		finished = finished && atomic_load(&w[k].done);
	if (!finished) {
		fprintf(stderr,
			"[%s] the threads did not finish in 600 s: a fault or a move never returned\n",
			check_test);
		CHECK(0);
		fflush(NULL);
		_exit(1);
	}
	for (size_t k = 0; k < nw; k++) {
		pthread_join(w[k].th, NULL);
		CHECK_EQ(atomic_load(&w[k].bad), 0);
	}
	CHECK_EQ(verify_range(p, 0, n, sums), 0);
	struct uswap_mm_stats st;
	uswap_mm_stats(m, &st);
	CHECK(st.swapins > 0);
	CHECK(st.events_remove > 0);
	CHECK_EQ(st.load_failures, 0);
	check_accounting(m);
	check_mm_destroy(m);
	free(sums);
}

/* Pages of [p, p + n pages) mapped in the process (resident, not swapped by us). */
static size_t pages_resident(const unsigned char *p, size_t n)
{
	unsigned char v[4096];
	size_t res = 0;

	for (size_t i = 0; i < n; i += sizeof(v)) {
		size_t k = n - i < sizeof(v) ? n - i : sizeof(v);

		if (mincore((void *)(p + i * PS), k * PS, v))
			return SIZE_MAX;
		for (size_t j = 0; j < k; j++)
			res += v[j] & 1;
	}
	return res;
}

/*
 * fork() brings in only what the child gets: a region marked MADV_DONTFORK (a runtime's heap often
 * is) stays swapped, the other comes in and the child reads it intact.
 */
static void test_mm_fork_dontfork(void)
{
	const size_t n = 2048;
	struct uswap_mm *m = mm_new(2 * MiB, TIERS, 0);
	uint32_t *sums = calloc(2 * n, sizeof(*sums));
	unsigned char *a, *b;
	size_t rb0, rb1;
	int status = -1;
	pid_t pid;

	if (!m)
		return;
	CHECK_EQ(uswap_map(m, n * PS, 0, (void **)&a), 0);
	CHECK_EQ(uswap_map(m, n * PS, 0, (void **)&b), 0);
	CHECK_EQ(madvise(b, n * PS, MADV_DONTFORK), 0);
	for (size_t i = 0; i < n; i++) {
		sums[i] = put_page(a + i * PS, i, 0);
		sums[n + i] = put_page(b + i * PS, n + i, 0);
	}
	uswap_mm_shrink(m, 0);
	rb0 = pages_resident(b, n);
	CHECK(rb0 < n / 2);
	pid = fork();
	if (pid == 0)
		_exit(verify_range(a, 0, n, sums) ? 1 : 0);
	CHECK(pid > 0);
	CHECK_EQ(waitpid(pid, &status, 0), pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* b did not come in for the fork (nothing else touched it since) */
	rb1 = pages_resident(b, n);
	if (rb1 > rb0)
		fprintf(stderr, "[%s] %zu pages of the DONTFORK region came in for the fork\n", check_test,
			rb1 - rb0);
	CHECK(rb1 <= rb0);
	CHECK_EQ(verify_range(a, 0, n, sums), 0);
	CHECK_EQ(verify_range(b, 0, n, sums + n), 0);
	check_accounting(m);
	check_validate_mm(m);
	CHECK_EQ(uswap_unmap(m, a, n * PS), 0);
	CHECK_EQ(uswap_unmap(m, b, n * PS), 0);
	check_mm_destroy(m);
	free(sums);
}

/*
 * Protection changes inside registered ranges, as language runtimes make them: a region made
 * read-only while its pages are swapped and inactive (a swap-in cannot move a page into a read-only
 * vma: it copies), a guard page inside a region (first touches around it must not span the two
 * vmas), and a PROT_NONE reservation committed and decommitted piecewise with mprotect() and with
 * mmap(MAP_FIXED) (whose UNMAP event uswap_register() waits for).
 */
static void test_mm_mprotect(void)
{
	const size_t n = 4096, chunk = 64; /* pages: 16 MiB, committed 256 KiB at a time */
	struct uswap_mm *m = mm_new(2 * MiB, TIERS, 0);
	uint32_t *sums = calloc(n, sizeof(*sums));
	unsigned char *p, *q;
	size_t bad = 0;

	if (!m)
		return;
	alarm(300); /* a fault that is never resolved loops: fail instead of hanging */
	p = check_map_filled(m, n, 0, sums);
	CHECK_EQ(mprotect(p, n * PS, PROT_READ), 0);
	for (size_t i = n; i-- > 0;) /* newest first: those are resident or inactive */
		bad += csum_buf(p + i * PS, PS) != sums[i];
	bad += verify_range(p, 0, n, sums);
	CHECK_EQ(mprotect(p, n * PS, PROT_READ | PROT_WRITE), 0);
	for (size_t i = 1; i < n; i += 2)
		sums[i] = put_page(p + i * PS, i, 1);
	bad += verify_range(p, 0, n, sums);
	CHECK_EQ(bad, 0);

	/* A guard page in a fresh region: every page around it still comes in. */
	CHECK_EQ(uswap_map(m, 256 * PS, 0, (void **)&q), 0);
	CHECK_EQ(mprotect(q + 5 * PS, PS, PROT_NONE), 0);
	CHECK_EQ(mprotect(q + 9 * PS, 2 * PS, PROT_READ), 0);
	for (size_t i = 0; i < 256; i++)
		if (i != 5)
			CHECK_EQ(q[i * PS + 7], 0);
	for (size_t i = 0; i < 256; i++)
		if (i != 5 && i != 9 && i != 10)
			q[i * PS] = (unsigned char)(i + 1);
	CHECK_EQ(mprotect(q + 5 * PS, PS, PROT_READ | PROT_WRITE), 0);
	CHECK_EQ(mprotect(q + 9 * PS, 2 * PS, PROT_READ | PROT_WRITE), 0);
	q[5 * PS] = 6;
	q[9 * PS] = 10;
	q[10 * PS] = 11;
	uswap_mm_shrink(m, 0);
	for (size_t i = 0; i < 256; i++)
		if (q[i * PS] != (unsigned char)(i + 1) && bad++ < 5)
			fprintf(stderr, "[%s] guard region page %zu differs\n", check_test, i);
	CHECK_EQ(bad, 0);
	check_validate_mm(m);
	CHECK_EQ(uswap_unmap(m, q, 256 * PS), 0);

	/* A reservation: registered PROT_NONE, its parts made read-write as they are needed. */
	CHECK_EQ(uswap_unmap(m, p, n * PS), 0);
	p = mmap(NULL, n * PS, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	CHECK(p != MAP_FAILED);
	CHECK_EQ(uswap_register(m, p, n * PS, 0), 0);
	for (size_t c = 0; c < n; c += chunk) {
		CHECK_EQ(mprotect(p + c * PS, chunk * PS, PROT_READ | PROT_WRITE), 0);
		for (size_t i = c; i < c + chunk; i++)
			sums[i] = put_page(p + i * PS, i, 2);
	}
	/* Decommit [0, 512) with mprotect (the pages stay), [512, 1024) with a new mapping. */
	CHECK_EQ(mprotect(p, 512 * PS, PROT_NONE), 0);
	CHECK(mmap(p + 512 * PS, 512 * PS, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
		   -1, 0) == p + 512 * PS);
	/* After the sync, the mapping's UNMAP event is applied: the old range is cut from the table. */
	CHECK_EQ(uswap_mm_sync(m), 0);
	struct uswap_mm_stats st;
	uswap_mm_stats(m, &st);
	CHECK(st.events_unmap >= 1);
	CHECK_EQ(uswap_register(m, p + 512 * PS, 512 * PS, 0), 0);
	for (int pass = 0; pass < 2; pass++)
		CHECK_EQ(verify_range(p, 1024, n, sums), 0);
	CHECK_EQ(mprotect(p, 1024 * PS, PROT_READ | PROT_WRITE), 0);
	CHECK_EQ(verify_range(p, 0, 512, sums), 0);
	for (size_t i = 512; i < 1024; i++) {
		CHECK(page_is_zero(p + i * PS));
		sums[i] = put_page(p + i * PS, i, 3);
	}
	CHECK_EQ(verify_range(p, 0, n, sums), 0);
	uswap_mm_stats(m, &st);
	CHECK(st.swapins > 0);
	CHECK_EQ(st.load_failures, 0);
	check_accounting(m);
	CHECK_EQ(uswap_unregister(m, p, n * PS), 0);
	munmap(p, n * PS);
	alarm(0);
	check_mm_destroy(m);
	free(sums);
}

static sigjmp_buf bus_jb;
static void *volatile bus_addr;
static volatile int bus_code;

static void on_bus(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)uc;
	bus_addr = si->si_addr;
	bus_code = si->si_code;
	siglongjmp(bus_jb, 1);
}

/* A read of @p: 0 and *out its first byte, or 1 when it got SIGBUS. */
static int read_or_sigbus(const volatile unsigned char *p, unsigned char *out)
{
	bus_addr = NULL;
	if (sigsetjmp(bus_jb, 1))
		return 1;
	*out = *p;
	return 0;
}

/*
 * A swap-in whose load fails once is tried again and comes in; one whose every try fails (docs/mm.md):
 * the pages are poisoned, every touch of them gets SIGBUS
 * (BUS_MCEERR_AR at the page) until they are discarded, and never reads other data (zeros); the
 * other pages are intact. Both fault modes; folios of 1 and 16 pages.
 */
static void test_mm_load_fails(void)
{
	const size_t n = 256;
	struct sigaction sa = {.sa_sigaction = on_bus, .sa_flags = SA_SIGINFO | SA_NODEFER}, old;
	uint32_t *sums = calloc(n, sizeof(*sums));

	sigaction(SIGBUS, &sa, &old); /* first: a SIGBUS-mode instance passes the poison's SIGBUS here */
	for (unsigned mode = 0; mode < 2; mode++) {
		for (size_t folio = 1; folio <= 16; folio *= 16) {
			struct uswap_mm *m;
			struct uswap_mm_stats st;
			unsigned char *p, c;
			size_t hit = 37; /* a page in the middle of a folio */

			struct uswap_mm *other = NULL;

			/* handler mode: with a SIGBUS-mode instance alive too, whose handler sees the SIGBUS first */
			if (!mode) {
				sigbus_mode = 1;
				other = mm_new(PS * 64, "same", 0);
			}
			sigbus_mode = mode;
			m = mm_new(64 * PS * 4, "same,fault(zpool:lz4:max=64M)", folio * PS);
			if (!m)
				break;
			CHECK_EQ(uswap_map(m, n * PS, 0, (void **)&p), 0);
			for (size_t i = 0; i < n; i++) { /* text: the pool holds them, not `same` */
				fill_page(p + i * PS, PK_TEXT, seed_for(i));
				sums[i] = csum_buf(p + i * PS, PS);
			}
			for (int k = 0; k < 50 && (uswap_mm_stats(m, &st), st.resident_bytes); k++)
				uswap_mm_shrink(m, 0);
			CHECK_EQ(st.resident_bytes, 0);
			/* an error that passes: the load is tried again, and the page comes in intact */
			CHECK_EQ(backend_inject(testhook_tier(uswap_mm_swap(m), 1), false, 1, -EIO, false),
				 0);
			CHECK_EQ(read_or_sigbus(p + (hit + folio) * PS + 100, &c), 0);
			CHECK_EQ(csum_buf(p + (hit + folio) * PS, PS), sums[hit + folio]);
			uswap_mm_stats(m, &st);
			CHECK(st.load_retries >= 1);
			CHECK_EQ(st.load_failures, 0);
			/* one that stays: every try fails, and the pages are poisoned */
			CHECK_EQ(backend_inject(testhook_tier(uswap_mm_swap(m), 1), false, 1, -EIO, true), 0);
			CHECK_EQ(read_or_sigbus(p + hit * PS + 100, &c), 1);
			CHECK_EQ(backend_inject(testhook_tier(uswap_mm_swap(m), 1), false, 0, 0, false), 0);
			CHECK(bus_addr != NULL && (unsigned char *)bus_addr >= p + hit * PS &&
			      (unsigned char *)bus_addr < p + (hit + 1) * PS);
			/* the kernel's code for a poison marker: BUS_MCEERR_AR before 6.11, BUS_ADRERR since */
			CHECK(bus_code == BUS_MCEERR_AR || bus_code == BUS_ADRERR);
			/* poisoned for good: again, and each page of its folio */
			for (size_t i = hit / folio * folio; i < (hit / folio + 1) * folio; i++)
				CHECK_EQ(read_or_sigbus(p + i * PS, &c), 1);
			CHECK_EQ(read_or_sigbus(p + hit * PS, &c), 1);
			/* the rest is intact, and the poison survives reclaim passing over it */
			for (int k = 0; k < 50 && (uswap_mm_stats(m, &st), st.resident_bytes); k++)
				uswap_mm_shrink(m, 0);
			for (size_t i = 0; i < n; i++) {
				if (i / folio == hit / folio)
					continue;
				CHECK_EQ(read_or_sigbus(p + i * PS, &c), 0);
				CHECK_EQ(csum_buf(p + i * PS, PS), sums[i]);
			}
			CHECK_EQ(read_or_sigbus(p + hit * PS, &c), 1);
			uswap_mm_stats(m, &st);
			CHECK_EQ(st.load_failures, 1);
			/* discarded, the page reads zero again and takes writes */
			CHECK_EQ(uswap_mm_discard(m, p + hit / folio * folio * PS, folio * PS), 0);
			CHECK_EQ(read_or_sigbus(p + hit * PS, &c), 0);
			CHECK(page_is_zero(p + hit * PS));
			fill_page(p + hit * PS, PK_TEXT, seed_for(hit + n));
			sums[hit] = csum_buf(p + hit * PS, PS);
			CHECK_EQ(csum_buf(p + hit * PS, PS), sums[hit]);
			uswap_mm_destroy(m);
			if (other)
				uswap_mm_destroy(other);
		}
	}
	sigbus_mode = 0;
	sigaction(SIGBUS, &old, NULL);
	free(sums);
}

/*
 * munmap/madvise/mremap (a grown range adopted by a faulting thread), fork (and idle after it),
 * mprotect, swapoff while threads run, tiers failing mid-run: again in SIGBUS mode.
 */
static void test_mm_sigbus_proc(void)
{
	sigbus_mode = 1;
	test_mm_munmap_madvise_mremap();
	test_mm_fork();
	test_mm_fork_idle();
	test_mm_mprotect();
	test_mm_swapoff_running();
	test_mm_tier_fails();
	sigbus_mode = 0;
}

CHECK_MAIN(T(test_mm_munmap_madvise_mremap), T(test_mm_fork), T(test_mm_fork_idle),
	   T(test_mm_swapoff_running), T(test_mm_tier_fails), T(test_mm_madvise_storm), T(test_mm_mprotect),
	   T(test_mm_fork_dontfork), FORK_ADOPT T(test_mm_sigbus_proc), T(test_mm_load_fails))
