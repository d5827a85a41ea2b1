/*
 * test_mm.c - memory regions on userfaultfd: every test writes known data into regions larger than
 * the resident limit and checks each page against a checksum kept outside the regions.
 * Skips (77) when userfaultfd is not available for kernel-mode faults or the kernel is too old.
 */
#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "core/testhook.h"
#include "mm/mm.h"
#include "util/csum.h"
#include "uswap.h"

#define PS  4096ul
#define MiB (1024ul * 1024)
/* A stack that takes every page: random pages go to the file. */
#define TIERS "same,zpool:lz4:max=64M,file:size=256M"

#define mm_new_opts check_mm_new
#define put_page    check_put_page
#define swap_pages  check_swap_pages

static struct uswap_mm *mm_new_mode(uint64_t limit, const char *tiers, size_t folio, unsigned sigbus)
{
	struct uswap_mm_options o = {
		.limit_bytes = limit, .tiers = tiers, .folio_bytes = folio, .sigbus_mode = sigbus};

	return mm_new_opts(&o);
}

/* An instance whose program reports its discards (as under uswap run): reclaim demotes in batches. */
static struct uswap_mm *mm_new_batched(uint64_t limit, const char *tiers, size_t folio, unsigned sigbus)
{
	struct uswap_mm_options o = {.limit_bytes = limit,
				     .tiers = tiers,
				     .folio_bytes = folio,
				     .sigbus_mode = sigbus,
				     .discards_reported = 1};

	return mm_new_opts(&o);
}

static struct uswap_mm *mm_new(uint64_t limit, const char *tiers, size_t folio)
{
	return mm_new_mode(limit, tiers, folio, 0);
}

static const unsigned char zero_page[PS];

static size_t verify_pages(const unsigned char *base, size_t n, const uint32_t *sums)
{
	return check_verify_pages(base, 0, n, sums);
}

static void test_mm_basic(void)
{
	const size_t n = 4096; /* 16 MiB under a 4 MiB limit */
	struct uswap_mm *m = mm_new(4 * MiB, TIERS, 0);
	struct uswap_mm_stats st;
	unsigned char *p;
	uint32_t *sums = calloc(n, sizeof(*sums));

	if (!m)
		return;
	CHECK_EQ(uswap_map(m, n * PS, 0, (void **)&p), 0);
	for (size_t i = 0; i < n; i++)
		CHECK_EQ(p[i * PS + 100], 0); /* zero on first touch */
	for (size_t i = 0; i < n; i++)
		sums[i] = put_page(p + i * PS, i, 0);
	uswap_mm_stats(m, &st);
	CHECK(st.resident_bytes <= st.limit_bytes + 2 * MiB);
	CHECK(st.evictions > 0);
	CHECK_EQ(verify_pages(p, n, sums), 0);
	for (size_t i = n; i-- > 0;)
		CHECK_EQ(csum_buf(p + i * PS, PS), sums[i]);
	uswap_mm_stats(m, &st);
	CHECK(st.swapins > 0);
	CHECK(st.resident_bytes <= st.limit_bytes + 2 * MiB);
	check_validate_mm(m);
	CHECK_EQ(uswap_unmap(m, p, n * PS), 0);
	uswap_mm_stats(m, &st);
	CHECK_EQ(st.resident_bytes, 0);
	CHECK_EQ(st.regions, 0);
	CHECK_EQ(swap_pages(m), 0);
	check_mm_destroy(m);
	free(sums);
}

/*
 * Signals the program blocks stay pending while the instance works (handlers, reclaimer, writeback,
 * io_uring): none of its threads may take a process-directed signal. Both fault modes.
 */
static void signals_blocked_mode(unsigned sigbus)
{
	const size_t n = 4096; /* 16 MiB under a 4 MiB limit */
	struct uswap_mm *m = mm_new_mode(4 * MiB, TIERS, 0, sigbus);
	uint32_t *sums = calloc(n, sizeof(*sums));
	unsigned char *p;

	if (!m)
		return;
	p = check_map_filled(m, n, 0, sums);
	check_signals_stay_pending();
	CHECK_EQ(verify_pages(p, n, sums), 0);
	check_signals_stay_pending();
	check_validate_mm(m);
	CHECK_EQ(uswap_unmap(m, p, n * PS), 0);
	check_mm_destroy(m);
	free(sums);
}

static void test_mm_signals_blocked(void)
{
	signals_blocked_mode(0);
	signals_blocked_mode(1);
}

/*
 * A sparse mapping far bigger than memory (64 GiB, MAP_NORESERVE as uswap_map() makes it) with 6000
 * pages touched at scattered places (4x the 6 MiB limit): the limit holds, and every page reads back.
 * The hands skip the empty groups of folios; when they walked every folio, they stalled in the
 * emptiness and resident grew past the limit with nothing evicted.
 */
static void test_mm_sparse_huge(void)
{
	const size_t len = 512ul << 30, n = 6000;
	struct uswap_mm *m = mm_new(6 * MiB, TIERS, 0);
	struct uswap_mm_stats st;
	unsigned char *p;
	size_t bad = 0;
	uint32_t *sums = calloc(n, sizeof(*sums));

	if (!m)
		return;
	CHECK_EQ(uswap_map(m, len, 0, (void **)&p), 0);
	for (size_t i = 0; i < n; i++)
		sums[i] = put_page(p + (i * 2654435761ul % (len / PS)) * PS, i, 1);
	uswap_mm_stats(m, &st);
	if (st.resident_bytes > st.limit_bytes + 2 * MiB)
		fprintf(stderr, "[%s] resident %llu of %llu\n", check_test,
			(unsigned long long)st.resident_bytes, (unsigned long long)st.limit_bytes);
	CHECK(st.resident_bytes <= st.limit_bytes + 2 * MiB);
	CHECK(st.evictions > 0);
	for (size_t i = 0; i < n; i++)
		bad += csum_buf(p + (i * 2654435761ul % (len / PS)) * PS, PS) != sums[i];
	CHECK_EQ(bad, 0);
	check_validate_mm(m);
	CHECK_EQ(uswap_unmap(m, p, len), 0);
	check_mm_destroy(m);
	free(sums);
}

/*
 * Fault-around only for sequential first touches: one page in 64 touched over a region leaves about
 * that many pages resident (not a window of zeros each), while a buffer filled in address order gets
 * its neighbours zero-filled with each fault (fewer faults than pages). Every page reads what was
 * written, zeros elsewhere.
 */
static void test_mm_first_touch_sparse(void)
{
	const size_t n = 16384, gap = 64, seq = 1024; /* 64 MiB region; 4 MiB filled in order */
	struct uswap_mm *m = mm_new(256 * MiB, TIERS, 0);
	unsigned char *p, *q, *vec = calloc(n, 1);
	size_t mapped = 0, j = 0;

	if (!m)
		return;
	CHECK_EQ(uswap_map(m, n * PS, 0, (void **)&p), 0);
	for (size_t i = 0; i < n; i += gap)
		p[i * PS + 5] = (unsigned char)(i / gap + 1);
	/* mincore() sees the pages mapped in the program's range (the stats are counted after the wake). */
	CHECK_EQ(mincore(p, n * PS, vec), 0);
	for (size_t i = 0; i < n; i++)
		mapped += vec[i] & 1;
	if (mapped > 2 * (n / gap))
		fprintf(stderr, "[%s] %zu pages mapped for %zu sparse touches\n", check_test, mapped,
			n / gap);
	CHECK(mapped >= n / gap && mapped <= 2 * (n / gap));
	for (size_t i = 0; i < n; i++)
		CHECK_EQ(p[i * PS + 5], i % gap ? 0 : (unsigned char)(i / gap + 1));

	/* The first page of an aligned 64 KiB window (the default fault-around), then the next. */
	CHECK_EQ(uswap_map(m, seq * PS, 0, (void **)&q), 0);
	while (((uintptr_t)(q + j * PS) & (16 * PS - 1)) != 0)
		j++;
	q[j * PS] = 1;
	q[(j + 1) * PS] = 2;
	CHECK_EQ(mincore(q + j * PS, 16 * PS, vec), 0);
	mapped = 0;
	for (size_t i = 0; i < 16; i++)
		mapped += vec[i] & 1;
	CHECK_EQ(mapped, 16); /* the second touch in order filled the window */
	for (size_t i = 0; i < seq; i++)
		q[i * PS] = (unsigned char)i;
	for (size_t i = 0; i < seq; i++)
		CHECK_EQ(q[i * PS], (unsigned char)i);
	check_validate_mm(m);
	CHECK_EQ(uswap_unmap(m, q, seq * PS), 0);
	CHECK_EQ(uswap_unmap(m, p, n * PS), 0);
	check_mm_destroy(m);
	free(vec);
}

/* ---- pool_in_limit: resident pages and the compressed pool share one limit ---- */

/*
 * Statistics and the pool's memory of one moment: the background thread and reclaim may still move
 * pages into the pool, so the pool's memory is read before and after the statistics until it held.
 */
static void stats_with_mem(struct uswap_mm *m, struct uswap_mm_stats *st, uint64_t *mem)
{
	for (int tries = 0; tries < 1000; tries++) {
		uint64_t before = uswap_mem_bytes(uswap_mm_swap(m));

		uswap_mm_stats(m, st);
		*mem = uswap_mem_bytes(uswap_mm_swap(m));
		if (*mem == before)
			return;
		usleep(1000);
	}
	CHECK(!"the pool's memory kept changing");
}

/*
 * Resident + uswap_mem_bytes() within the budget once reclaim has caught up; then the resident limit
 * (what the statistics report) is the budget less the pool's memory.
 */
static void settle_budget(struct uswap_mm *m, uint64_t budget, struct uswap_mm_stats *st, uint64_t *mem)
{
	for (int tries = 0; tries < 200; tries++) {
		stats_with_mem(m, st, mem);
		if (st->resident_bytes + *mem <= budget)
			break;
		usleep(10 * 1000);
	}
	if (st->resident_bytes + *mem > budget)
		fprintf(stderr, "[%s] resident %llu + pool %llu over %llu\n", check_test,
			(unsigned long long)st->resident_bytes, (unsigned long long)*mem,
			(unsigned long long)budget);
	CHECK(st->resident_bytes + *mem <= budget);
}

static void test_mm_pool_in_limit(void)
{
	const uint64_t budget = 16 * MiB;
	const size_t n = 12288; /* 48 MiB */
	struct uswap_mm_options o = {
		.limit_bytes = budget, .tiers = "same,zpool:lz4:max=4M,file:size=256M", .pool_in_limit = 1};
	struct uswap_mm_stats st;
	struct uswap_mm *m = NULL;
	uint32_t *sums = calloc(n, sizeof(*sums));
	unsigned char *p;
	uint64_t mem = 0;
	int ret = uswap_mm_create(&m, &o);

	if (ret == -EPERM || ret == -EOPNOTSUPP)
		check_skip(uswap_errmsg());
	CHECK_EQ(ret, 0);
	if (ret)
		return;
	CHECK_EQ(uswap_map(m, n * PS, 0, (void **)&p), 0);
	/* Same-filled pages take no pool memory: the resident pages get the whole budget. */
	for (size_t i = 0; i < n; i++)
		memset(p + i * PS, (int)(i % 251) + 1, PS);
	settle_budget(m, budget, &st, &mem);
	CHECK_EQ(mem, 0);
	CHECK_EQ(st.limit_bytes, budget);
	CHECK(st.swapped_bytes > 0);
	for (size_t i = 0; i < n; i += 97)
		CHECK_EQ(p[i * PS + 100], (unsigned char)(i % 251 + 1));
	/* Text pages fill the pool: the resident limit gives way to it, page for page. */
	for (size_t i = 0; i < n; i++) {
		fill_page(p + i * PS, PK_TEXT, seed_for(i));
		sums[i] = csum_buf(p + i * PS, PS);
	}
	settle_budget(m, budget, &st, &mem);
	CHECK(mem > 0);
	CHECK(mem <= 4 * MiB + PS);
	CHECK_EQ(st.limit_bytes, budget - (mem + PS - 1) / PS * PS);
	CHECK_EQ(verify_pages(p, n, sums), 0);
	/* No limit, then a new one: the new budget. */
	CHECK_EQ(uswap_mm_set_limit(m, 0), 0);
	uswap_mm_stats(m, &st);
	CHECK_EQ(st.limit_bytes, 0);
	CHECK_EQ(uswap_mm_set_limit(m, 24 * MiB), 0);
	stats_with_mem(m, &st, &mem);
	CHECK(st.limit_bytes > 16 * MiB && st.limit_bytes + mem <= 24 * MiB + PS);
	check_validate_mm(m);
	CHECK_EQ(uswap_unmap(m, p, n * PS), 0);
	check_mm_destroy(m);
	free(sums);
}

/*
 * The pool's share of the budget: half at first; while every miss is served by the pool (pages that
 * compress well and all fit in it) it shrinks, never under an eighth; once misses come from the file (random pages)
 * and cost more there, it grows back. Each phase touches pages until the share moves (at most 20 s,
 * about 1 s here); every page reads back.
 */
static void test_mm_pool_share(void)
{
	const uint64_t budget = 16 * MiB;
	const size_t n = 10240, nt = 5120; /* 40 MiB: 20 MiB of pages a quarter text, then 20 of random */
	struct uswap_mm_options o = {.limit_bytes = budget,
				     .tiers = "same,zpool:lz4:max=8M,file:size=256M",
				     .pool_in_limit = 1,
				     .discards_reported = 1};
	struct uswap_mm_stats st;
	struct uswap_mm *m = mm_new_opts(&o);
	uint32_t *sums = calloc(n, sizeof(*sums));
	uint64_t s = seed_for(42), shrunk;
	unsigned char *p;
	volatile unsigned char sink = 0;

	if (!m)
		return;
	uswap_mm_stats(m, &st);
	CHECK_EQ(st.pool_share_bytes, budget / 2);
	CHECK_EQ(uswap_map(m, n * PS, 0, (void **)&p), 0);
	for (size_t i = 0; i < nt; i++) {
		fill_page(p + i * PS, PK_TEXT, seed_for(i));
		memset(p + i * PS + PS / 4, 0, PS - PS / 4); /* ~4:1 in the pool: all of them fit */
		sums[i] = csum_buf(p + i * PS, PS);
	}
	for (time_t end = time(NULL) + 20; time(NULL) < end;) {
		for (int k = 0; k < 2000; k++) {
			s = s * 6364136223846793005ull + 1442695040888963407ull;
			sink += p[(s >> 33) % nt * PS + 7];
		}
		uswap_mm_stats(m, &st);
		if (st.pool_share_bytes < budget / 2)
			break;
	}
	CHECK(st.pool_share_bytes < budget / 2);
	CHECK(st.pool_share_bytes >= budget / 8);
	shrunk = st.pool_share_bytes;
	/*
	 * A new limit keeps the share learned (as limit_auto moves it several times a second): half
	 * the limit, half the pool; back, the pool as it was, not reset to half the budget.
	 */
	CHECK_EQ(uswap_mm_set_limit(m, budget / 2), 0);
	uswap_mm_stats(m, &st);
	CHECK(st.pool_share_bytes <= shrunk / 2 + PS && st.pool_share_bytes + PS >= shrunk / 2);
	CHECK_EQ(uswap_mm_set_limit(m, budget), 0);
	uswap_mm_stats(m, &st);
	CHECK(st.pool_share_bytes <= shrunk + PS && st.pool_share_bytes + 2 * PS >= shrunk);
	CHECK(st.pool_share_bytes < budget / 2);
	shrunk = st.pool_share_bytes;
	for (size_t i = nt; i < n; i++) {
		fill_page(p + i * PS, PK_RANDOM, seed_for(i));
		sums[i] = csum_buf(p + i * PS, PS);
	}
	for (time_t end = time(NULL) + 20; time(NULL) < end;) {
		for (int k = 0; k < 2000; k++) {
			s = s * 6364136223846793005ull + 1442695040888963407ull;
			sink += p[(s >> 33) % n * PS + 7];
		}
		uswap_mm_stats(m, &st);
		if (st.pool_share_bytes > shrunk)
			break;
	}
	CHECK(st.pool_share_bytes > shrunk);
	CHECK(st.pool_share_bytes <= budget / 2);
	(void)sink;
	CHECK_EQ(verify_pages(p, n, sums), 0);
	check_validate_mm(m);
	CHECK_EQ(uswap_unmap(m, p, n * PS), 0);
	check_mm_destroy(m);
	free(sums);
}

/* ---- several threads, random reads and writes, region 4x the limit ---- */

struct mt {
	unsigned char *base;
	size_t n;
	unsigned nthreads;
	int ops; /* per thread */
	uint32_t *sums;
	uint64_t *ver;
	_Atomic size_t bad;
};

struct mt_arg {
	struct mt *mt;
	unsigned t;
};

/* A read of a page another thread may be writing: racy on purpose, so hidden from TSan. */
__attribute__((noinline, no_sanitize_thread)) static unsigned char peek(const unsigned char *p)
{
	return *(const volatile unsigned char *)p;
}

static void *mt_worker(void *arg)
{
	struct mt_arg *a = arg;
	struct mt *mt = a->mt;
	uint64_t s = seed_for(1000 + a->t);
	volatile unsigned char sink = 0;

	for (int op = 0; op < mt->ops; op++) {
		size_t i;

		s = s * 6364136223846793005ull + 1442695040888963407ull;
		i = (size_t)(s >> 33) % mt->n;
		if (i % mt->nthreads == a->t) {
			unsigned char *pg = mt->base + i * PS;

			if ((s >> 20) & 1) {
				mt->sums[i] = put_page(pg, i, ++mt->ver[i]);
			} else if ((s >> 21) & 1) {
				/* one word changes: a partial write of a possibly swapped page */
				pg[(s >> 40) % PS] ^= 0x5a;
				mt->sums[i] = csum_buf(pg, PS);
			} else if (csum_buf(pg, PS) != mt->sums[i]) {
				atomic_fetch_add(&mt->bad, 1);
			}
		} else {
			sink += peek(mt->base + i * PS + (s >> 44) % PS);
		}
	}
	(void)sink;
	return NULL;
}

static void run_mt(struct uswap_mm *m, size_t n, unsigned nthreads, size_t folio)
{
	/* Large folios move more per miss: fewer touches keep the work per run about the same. */
	struct mt mt = {.n = n,
			.nthreads = nthreads,
			.ops = 20000 >> (folio > PS ? (__builtin_ctzl(folio) - 12) * 2 / 3 : 0)};
	pthread_t th[8];
	struct mt_arg args[8];
	struct uswap_mm_stats st;

	mt.sums = calloc(n, sizeof(*mt.sums));
	mt.ver = calloc(n, sizeof(*mt.ver));
	CHECK_EQ(uswap_map(m, n * PS, folio, (void **)&mt.base), 0);
	for (size_t i = 0; i < n; i++)
		mt.sums[i] = put_page(mt.base + i * PS, i, 0);
	for (unsigned t = 0; t < nthreads; t++) {
		args[t] = (struct mt_arg){&mt, t};
		pthread_create(&th[t], NULL, mt_worker, &args[t]);
	}
	for (unsigned t = 0; t < nthreads; t++)
		pthread_join(th[t], NULL);
	CHECK_EQ(atomic_load(&mt.bad), 0);
	CHECK_EQ(verify_pages(mt.base, n, mt.sums), 0);
	uswap_mm_stats(m, &st);
	if (getenv("USWAP_TEST_VERBOSE"))
		fprintf(stderr,
			"folio %zu: swapins %llu pages %llu soft %llu evictions %llu pages %llu clean %llu "
			"demotions %llu direct %llu wp %llu zero %llu p50 %llu p99 %llu resident %llu\n",
			folio, (unsigned long long)st.swapins, (unsigned long long)st.swapin_pages,
			(unsigned long long)st.soft_faults, (unsigned long long)st.evictions,
			(unsigned long long)st.evicted_pages, (unsigned long long)st.clean_evictions,
			(unsigned long long)st.demotions, (unsigned long long)st.direct_reclaims,
			(unsigned long long)st.wp_faults, (unsigned long long)st.zero_fills,
			(unsigned long long)st.swapin_ns_p50, (unsigned long long)st.swapin_ns_p99,
			(unsigned long long)st.resident_bytes);
	CHECK(st.swapins > 0);
	CHECK(st.evictions > 0);
	CHECK_EQ(st.load_failures, 0);
	check_validate_mm(m);
	CHECK_EQ(uswap_unmap(m, mt.base, n * PS), 0);
	CHECK_EQ(swap_pages(m), 0);
	free(mt.sums);
	free(mt.ver);
}

static void test_mm_threads_4x_limit(void)
{
	struct uswap_mm *m = mm_new(8 * MiB, TIERS, 0);

	if (!m)
		return;
	run_mt(m, 8192, 4, 0); /* 32 MiB */
	{
		struct uswap_mm_stats st;

		uswap_mm_stats(m, &st);
		CHECK_EQ(st.sigbus_faults, 0); /* handler threads served them */
	}
	check_mm_destroy(m);
}

/*
 * Batched demotion (discards_reported): four threads write and check their pages while reclaim
 * write-protects windows of them, copies the victims out and zaps them. A write that lands in a
 * window meanwhile must survive (it waits in its fault, then finds its page demoted), in both fault
 * modes and with large folios.
 */
static void test_mm_batched_threads(void)
{
	static const struct {
		unsigned sigbus;
		size_t folio;
	} runs[] = {{0, 0}, {1, 0}, {0, 65536}, {1, 16384}};

	for (size_t k = 0; k < sizeof(runs) / sizeof(runs[0]); k++) {
		struct uswap_mm *m = mm_new_batched(8 * MiB, TIERS, runs[k].folio, runs[k].sigbus);
		struct uswap_mm_stats st;

		if (!m)
			return;
		run_mt(m, 8192, 4, runs[k].folio ? runs[k].folio : PS);
		uswap_mm_stats(m, &st);
		CHECK(st.demotions > 0);
		CHECK(st.soft_faults > 0);
		check_mm_destroy(m);
	}
}

/*
 * uswap_mm_discard(): pages present, inactive and swapped read zero after it, their copies are
 * freed, pages outside the range are untouched; then the range is used again. With reported
 * discards (no remove events) and with the kernel's events.
 */
static void discard_mode(bool batched)
{
	const size_t n = 4096; /* 16 MiB under 4 MiB: most pages swapped, some inactive */
	struct uswap_mm *m = batched ? mm_new_batched(4 * MiB, TIERS, 0, 0) : mm_new(4 * MiB, TIERS, 0);
	uint32_t *sums = calloc(n, sizeof(*sums));
	unsigned char *p;
	uint64_t before;

	if (!m)
		return;
	p = check_map_filled(m, n, 0, sums);
	for (size_t i = n - 64; i < n; i++) /* the last ones resident */
		CHECK_EQ(csum_buf(p + i * PS, PS), sums[i]);
	before = swap_pages(m);
	CHECK_EQ(uswap_mm_discard(m, p + 100 * PS, 1000 * PS), 0);
	CHECK_EQ(uswap_mm_discard(m, p + (n - 32) * PS, 32 * PS), 0);
	CHECK_EQ(uswap_mm_discard(m, p + 1, PS), -EINVAL);
	CHECK(swap_pages(m) < before);
	for (size_t i = 0; i < n; i++) {
		bool gone = (i >= 100 && i < 1100) || i >= n - 32;

		if (gone)
			CHECK_MEM(p + i * PS, zero_page, PS);
		else if (csum_buf(p + i * PS, PS) != sums[i])
			CHECK_EQ(i, (size_t)-1); /* names the page */
	}
	for (size_t i = 100; i < 1100; i++)
		sums[i] = put_page(p + i * PS, i, 1);
	for (size_t i = n - 32; i < n; i++)
		sums[i] = put_page(p + i * PS, i, 1);
	CHECK_EQ(verify_pages(p, n, sums), 0);
	check_validate_mm(m);
	CHECK_EQ(uswap_unmap(m, p, n * PS), 0);
	CHECK_EQ(swap_pages(m), 0);
	check_mm_destroy(m);
	free(sums);
}

static void test_mm_discard(void)
{
	discard_mode(true);
	discard_mode(false);
}

/*
 * Soft faults leave their shadow pages to be released later (demote.c's stale list). A region unmapped
 * meanwhile takes its shadow range with it, and the next region's shadow (or anything else) is mapped
 * at the same addresses: a release that came after would zap that region's inactive pages. So the
 * list is released before the table changes (without that, this test crashes: the list's folio words
 * are gone too). Rounds of map, fill, re-read (soft faults), then unmap or unregister (which brings the
 * pages in: more soft faults) and munmap, each region landing where the last one was; every page of
 * every round read back exact.
 */
static void stale_reuse_mode(bool batched, unsigned sigbus)
{
	const size_t n = 2048; /* 8 MiB under 3 MiB: pages inactive and swapped */
	struct uswap_mm *m =
		batched ? mm_new_batched(3 * MiB, TIERS, 0, sigbus) : mm_new_mode(3 * MiB, TIERS, 0, sigbus);
	uint32_t *sums = calloc(n, sizeof(*sums));
	struct uswap_mm_stats st;

	if (!m)
		return;
	for (unsigned round = 0; round < 12; round++) {
		unsigned char *p = check_map_filled(m, n, 0, sums);

		if (!p)
			break;
		CHECK_EQ(verify_pages(p, n, sums), 0);
		/*
		 * Then a hot set under the limit, read again and again: its demoted folios come back by
		 * soft faults, and nothing is evicted (no release) before the unmap.
		 */
		for (unsigned pass = 0; pass < 6; pass++)
			for (size_t i = n - 512; i < n; i++)
				if (csum_buf(p + i * PS, PS) != sums[i])
					CHECK_EQ(i, (size_t)-1); /* names the page */
		if (round % 2) {
			CHECK_EQ(uswap_unmap(m, p, n * PS), 0);
		} else { /* brings every page in first: its inactive ones leave stale shadow pages */
			CHECK_EQ(uswap_unregister(m, p, n * PS), 0);
			CHECK_EQ(verify_pages(p, n, sums), 0);
			munmap(p, n * PS);
		}
	}
	uswap_mm_stats(m, &st);
	CHECK(st.soft_faults > 0);
	free(sums);
	check_mm_destroy(m);
}

static void test_mm_stale_reuse(void)
{
	stale_reuse_mode(true, 0);
	stale_reuse_mode(false, 0);
	stale_reuse_mode(true, 1);
}

static void test_mm_folio_sweep(void)
{
	static const size_t folios[] = {4096, 16384, 65536, 262144, 2 * MiB};

	for (size_t k = 0; k < sizeof(folios) / sizeof(folios[0]); k++) {
		struct uswap_mm *m = mm_new(8 * MiB, TIERS, folios[k]);
		struct uswap_mm_stats st;

		if (!m)
			return;
		run_mt(m, 8192, 2, folios[k]);
		uswap_mm_stats(m, &st);
		CHECK(st.swapin_pages >= st.swapins);
		check_mm_destroy(m);
	}
}

/*
 * Sequential passes over a region 8x the limit bring pages in ahead of the faults (readahead);
 * pages read ahead, written, evicted again and read back must still be exact. The last setup has a
 * pool too small for the region: most pages are read ahead from the file, in batches.
 */
static void test_mm_sequential_readahead(void)
{
	static const struct {
		const char *tiers;
		size_t folio;
	} setups[] = {{TIERS, 4096}, {TIERS, 16384}, {"same,zpool:lz4:max=1M,file:size=256M", 4096}};

	for (size_t k = 0; k < sizeof(setups) / sizeof(setups[0]); k++) {
		const size_t n = 8192; /* 32 MiB under 4 MiB */
		struct uswap_mm *m = mm_new(4 * MiB, setups[k].tiers, setups[k].folio);
		struct uswap_tier_stats file;
		struct uswap_mm_stats st;
		uint32_t *sums = calloc(n, sizeof(*sums));
		unsigned char *p;
		uint64_t ra;

		if (!m)
			return;
		p = check_map_filled(m, n, 0, sums);
		CHECK_EQ(verify_pages(p, n, sums), 0);
		/* A forward pass that reads one page in two (an interpreter sizing its objects) reads ahead. */
		uswap_mm_stats(m, &st);
		ra = st.readahead_pages;
		for (size_t i = 0; i < n; i += 2)
			CHECK_EQ(csum_buf(p + i * PS, PS), sums[i]);
		uswap_mm_stats(m, &st);
		CHECK(st.readahead_pages > ra);
		/* Every other page rewritten in a forward pass: pages read ahead take writes. */
		for (size_t i = 0; i < n; i += 2)
			sums[i] = put_page(p + i * PS, i, 1);
		CHECK_EQ(verify_pages(p, n, sums), 0);
		for (size_t i = n; i-- > 0;)
			CHECK_EQ(csum_buf(p + i * PS, PS), sums[i]);
		uswap_mm_stats(m, &st);
		CHECK(st.readahead_pages > 0);
		check_tier_stats(uswap_mm_swap(m), 2, &file);
		if (k == 2)
			CHECK(file.loads > 0);
		CHECK(st.resident_bytes <= st.limit_bytes + 2 * MiB);
		check_validate_mm(m);
		CHECK_EQ(uswap_unmap(m, p, n * PS), 0);
		CHECK_EQ(swap_pages(m), 0);
		check_mm_destroy(m);
		free(sums);
	}
}

/*
 * SIGBUS mode: the faulting threads resolve their own faults. The same random reads and writes of
 * 4 threads over 4x the limit, and a folio sweep; then madvise(MADV_DONTNEED) of swapped pages
 * (they read zero after), and writes that make clean pages dirty.
 */
static void test_mm_sigbus_threads(void)
{
	static const size_t folios[] = {4096, 65536, 2 * MiB};
	struct uswap_mm *m = mm_new_mode(8 * MiB, TIERS, 0, 1);
	struct uswap_mm_stats st;
	const size_t n = 4096;
	uint32_t *sums = calloc(n, sizeof(*sums));
	unsigned char *p;

	if (!m)
		return;
	run_mt(m, 8192, 4, 0);
	uswap_mm_stats(m, &st);
	CHECK_EQ(st.untracked_faults, 0);
	CHECK(st.sigbus_faults >= st.swapins); /* the threads served every fault themselves */
	/* Reads keep swap copies (clean pages, write-protected); writes then fault on the protection. */
	p = check_map_filled(m, n, 0, sums);
	CHECK_EQ(verify_pages(p, n, sums), 0);
	for (size_t i = 0; i < n; i += 3)
		sums[i] = put_page(p + i * PS, i, 1);
	CHECK_EQ(verify_pages(p, n, sums), 0);
	/* Pages dropped by the program read zero afterwards, whether they were in or swapped. */
	CHECK_EQ(madvise(p, n / 2 * PS, MADV_DONTNEED), 0);
	for (size_t i = 0; i < n / 2; i++)
		sums[i] = csum_buf(zero_page, PS);
	CHECK_EQ(verify_pages(p, n, sums), 0);
	check_validate_mm(m);
	CHECK_EQ(uswap_unmap(m, p, n * PS), 0);
	uswap_mm_stats(m, &st);
	CHECK(st.wp_faults > 0);
	CHECK_EQ(st.load_failures, 0);
	check_mm_destroy(m);
	free(sums);
	for (size_t k = 0; k < sizeof(folios) / sizeof(folios[0]); k++) {
		m = mm_new_mode(8 * MiB, TIERS, folios[k], 1);
		if (!m)
			return;
		run_mt(m, 8192, 2, folios[k]);
		check_mm_destroy(m);
	}
}

/*
 * SIGBUS mode and the kernel's own accesses: read(2) into a page that is not in memory fails with
 * EFAULT (the kernel cannot wait for it) and loses nothing; after uswap_prefault() the same read
 * works, and write(2) from prefaulted swapped pages sends their exact bytes.
 */
static void test_mm_sigbus_syscalls(void)
{
	const size_t n = 1024; /* 4 MiB under 1 MiB */
	struct uswap_mm *m = mm_new_mode(1 * MiB, TIERS, 0, 1);
	uint32_t *sums = calloc(n, sizeof(*sums));
	unsigned char *p, buf[PS];
	int fd[2];

	if (!m)
		return;
	p = check_map_filled(m, n, 0, sums);
	CHECK(uswap_mm_shrink(m, 0) > 0);
	CHECK_EQ(pipe(fd), 0);
	CHECK_EQ(write(fd[1], "0123456789", 10), 10);
	errno = 0;
	CHECK_EQ(read(fd[0], p + 5 * PS, 10), -1);
	CHECK_EQ(errno, EFAULT);
	CHECK_EQ(uswap_prefault(m, p + 5 * PS, 10), 0);
	CHECK_EQ(read(fd[0], p + 5 * PS, 10), 10);
	CHECK_MEM(p + 5 * PS, "0123456789", 10);
	memcpy(buf, p + 5 * PS, PS);
	put_page(buf, 5, 0);
	CHECK_MEM(p + 5 * PS + 10, buf + 10, PS - 10);
	sums[5] = csum_buf(p + 5 * PS, PS);
	/* Pages 100..103 from swap to a pipe, whole. */
	CHECK(uswap_mm_shrink(m, 0) > 0);
	CHECK_EQ(uswap_prefault(m, p + 100 * PS, 4 * PS), 0);
	for (size_t i = 100; i < 104; i++) {
		CHECK_EQ(write(fd[1], p + i * PS, PS), (ssize_t)PS);
		CHECK_EQ(read(fd[0], buf, PS), (ssize_t)PS);
		CHECK_EQ(csum_buf(buf, PS), sums[i]);
	}
	/* A range with parts outside every region is fine. */
	CHECK_EQ(uswap_prefault(m, p + (n - 2) * PS, 64 * PS), 0);
	CHECK_EQ(verify_pages(p, n, sums), 0);
	close(fd[0]);
	close(fd[1]);
	check_validate_mm(m);
	CHECK_EQ(uswap_unmap(m, p, n * PS), 0);
	check_mm_destroy(m);
	free(sums);
}

/*
 * SIGBUS mode leaves the program's own SIGBUS alone: in a child with its own handler, an access past
 * the end of a file mapping reaches that handler while the region's faults are served; in a child
 * without one, it kills the child with SIGBUS as it would without uswap.
 */
static sigjmp_buf bus_jmp;
static volatile sig_atomic_t bus_seen;

static void on_bus(int sig)
{
	(void)sig;
	bus_seen = 1;
	siglongjmp(bus_jmp, 1);
}

/* @how: 0 the default action, 1 a handler of the program's own, 2 SIGBUS ignored and sent by kill(). */
static int bus_child(int how)
{
	const size_t n = 1024;
	char path[] = "/tmp/uswap-bus-XXXXXX";
	int fd = mkstemp(path);
	volatile unsigned char *f;
	unsigned char *p;
	struct uswap_mm *m;
	struct uswap_mm_options o = {.limit_bytes = 1 * MiB, .tiers = TIERS, .sigbus_mode = 1};
	int bad = 0;

	if (fd < 0)
		return 10;
	unlink(path);
	f = mmap(NULL, PS, PROT_READ, MAP_SHARED, fd, 0); /* the file is empty: touching it is SIGBUS */
	if (f == MAP_FAILED)
		return 11;
	if (how == 1)
		signal(SIGBUS, on_bus);
	if (how == 2)
		signal(SIGBUS, SIG_IGN);
	if (uswap_mm_create(&m, &o) || uswap_map(m, n * PS, 0, (void **)&p))
		return 12;
	for (size_t i = 0; i < n; i++)
		p[i * PS + 7] = (unsigned char)i;
	if (how == 2) {
		kill(getpid(), SIGBUS); /* ignored, as without uswap */
		for (size_t i = 0; i < n; i++)
			bad += p[i * PS + 7] != (unsigned char)i;
		return bad ? 13 : 0;
	}
	if (sigsetjmp(bus_jmp, 1) == 0) {
		bad += f[0] == 1; /* never returns normally */
		return 20;
	}
	for (size_t i = 0; i < n; i++)
		bad += p[i * PS + 7] != (unsigned char)i;
	return bad ? 13 : bus_seen ? 0 : 14;
}

static void test_mm_sigbus_foreign(void)
{
	int st;
	pid_t pid = fork();

	if (!pid)
		_exit(bus_child(1));
	CHECK(waitpid(pid, &st, 0) == pid);
	if (!WIFEXITED(st))
		fprintf(stderr, "[%s] child: signal %d\n", check_test, WTERMSIG(st));
	CHECK(WIFEXITED(st));
	if (WIFEXITED(st) && WEXITSTATUS(st) == 12)
		check_skip("userfaultfd SIGBUS mode not available");
	CHECK_EQ(WEXITSTATUS(st), 0);
	pid = fork();
	if (!pid)
		_exit(bus_child(0));
	CHECK(waitpid(pid, &st, 0) == pid);
	/* The access was not swallowed (a sanitizer's handler, the one before ours, reports and exits)... */
	CHECK(!WIFEXITED(st) || (WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != 20));
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
	/* ...and without one, the default action killed the child. */
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS);
#endif
	pid = fork();
	if (!pid)
		_exit(bus_child(2));
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/*
 * The fault handlers follow the CPUs the process may use (taskset, a container's cpuset), not all
 * the machine's: created on one CPU, the instance has one handler, pinned there, and it serves
 * (not one per online CPU pinned to CPUs 0..n-1 whatever the mask).
 */
static void test_mm_cpu_affinity(void)
{
	const size_t n = 2048; /* 8 MiB under a 2 MiB limit */
	cpu_set_t old, one, got;
	unsigned handlers = 0, wrong = 0;
	int cpu = -1;
	struct uswap_mm *m;
	unsigned char *p;
	uint32_t *sums = calloc(n, sizeof(*sums));
	DIR *d;
	struct dirent *e;

	CHECK_EQ(sched_getaffinity(0, sizeof(old), &old), 0);
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &old))
			cpu = c; /* the last one: not CPU 0 where there are two */
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	CHECK_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
	m = mm_new(2 * MiB, TIERS, 0);
	CHECK_EQ(sched_setaffinity(0, sizeof(old), &old), 0);
	if (!m)
		goto out;
	d = opendir("/proc/self/task");
	CHECK(d != NULL);
	while (d && (e = readdir(d))) {
		char path[300], comm[32] = "";
		FILE *f;

		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		if (!(f = fopen(path, "r")))
			continue;
		if (fgets(comm, sizeof(comm), f) && !strncmp(comm, "uswap-fault", 11)) {
			handlers++;
			if (sched_getaffinity(atoi(e->d_name), sizeof(got), &got) || !CPU_EQUAL(&got, &one))
				wrong++;
		}
		fclose(f);
	}
	if (d)
		closedir(d);
	CHECK_EQ(handlers, 1);
	CHECK_EQ(wrong, 0);
	p = check_map_filled(m, n, 0, sums);
	CHECK_EQ(verify_pages(p, n, sums), 0);
	check_validate_mm(m);
	CHECK_EQ(uswap_unmap(m, p, n * PS), 0);
	check_mm_destroy(m);
out:
	free(sums);
}

/* ---- the walker itself (DEBUG builds) ---- */

/*
 * Replace *@word by @bad under the instance's locks, run mm_validate(), put the word back.
 * Context: the reclaimer asleep (resident under the high watermark) and no thread touching the region.
 */
static int validate_with(struct uswap_mm *m, void *word, size_t size, uint64_t bad)
{
	uint64_t old = 0;
	int ret;

	pthread_mutex_lock(&m->reclaim_lock);
	pthread_rwlock_wrlock(&m->tbl_lock);
	memcpy(&old, word, size);
	memcpy(word, &bad, size);
	pthread_rwlock_unlock(&m->tbl_lock);
	pthread_mutex_unlock(&m->reclaim_lock);
	ret = mm_validate(m);
	pthread_mutex_lock(&m->reclaim_lock);
	pthread_rwlock_wrlock(&m->tbl_lock);
	memcpy(word, &old, size);
	pthread_rwlock_unlock(&m->tbl_lock);
	pthread_mutex_unlock(&m->reclaim_lock);
	return ret;
}

/*
 * mm_validate() finds a page word, a folio word, a counter and a leaked swap copy broken on purpose,
 * one at a time, and passes again when each is put back.
 */
static void test_mm_validate_catches(void)
{
	const size_t n = 1024; /* 4 MiB under 1 MiB: some pages present, some swapped */
	struct uswap_mm *m;
	struct mm_region *r;
	unsigned char *p;
	size_t present = SIZE_MAX, swapped = SIZE_MAX;
	uswap_id_t id;

	if (!check_debug_build()) {
		printf("  (the walkers are compiled in DEBUG builds only)\n");
		return;
	}
	m = mm_new(1 * MiB, TIERS, 16 * PS);
	if (!m)
		return;
	CHECK_EQ(uswap_map(m, n * PS, 0, (void **)&p), 0);
	for (size_t i = 0; i < n; i++)
		put_page(p + i * PS, i, 0);
	/*
	 * Reclaim done and asleep (resident at most the high watermark, nothing faulting): it stays so
	 * while the words are broken. (Not uswap_mm_set_limit(m, 0): a reclaim run in progress then
	 * chases an inactive target of 12% of "no limit" and does not end.)
	 */
	for (int tries = 0; tries < 100; tries++) {
		bool idle;

		pthread_mutex_lock(&m->reclaim_lock);
		idle = atomic_load(&m->resident) <= atomic_load(&m->high_pages);
		pthread_mutex_unlock(&m->reclaim_lock);
		if (idle)
			break;
		usleep(20 * 1000);
	}
	CHECK_EQ(mm_validate(m), 0);

	pthread_rwlock_rdlock(&m->tbl_lock);
	r = region_find(m, (uintptr_t)p);
	for (size_t i = 0; r && i < r->nr_pages; i++) {
		unsigned k = pg_kind(r->pages[i]);

		if (k == PG_PRESENT && present == SIZE_MAX)
			present = i;
		if (k == PG_SWAPPED && swapped == SIZE_MAX && i + 1 < r->nr_pages &&
		    pg_kind(r->pages[i + 1]) == PG_SWAPPED && pg_copy_follows(r->pages[i], r->pages[i + 1]))
			swapped = i;
	}
	pthread_rwlock_unlock(&m->tbl_lock);
	CHECK(r != NULL);
	CHECK(present != SIZE_MAX);
	CHECK(swapped != SIZE_MAX);
	if (!r || present == SIZE_MAX || swapped == SIZE_MAX)
		goto out;

	/* a present page turned inactive behind its folio word's back */
	CHECK_EQ(validate_with(m, &r->pages[present], 8, (r->pages[present] & ~PG_KIND_MASK) | PG_SHADOW),
		 -EUCLEAN);
	/* a present page with a swap id but no PG_CLEAN */
	CHECK_EQ(validate_with(m, &r->pages[present], 8, pg_make(PG_PRESENT, 1, 0, false)), -EUCLEAN);
	/* two swapped pages naming the same swap page */
	CHECK_EQ(validate_with(m, &r->pages[swapped + 1], 8, r->pages[swapped]), -EUCLEAN);
	/* a swapped page naming a page its swap folio does not have */
	CHECK_EQ(validate_with(m, &r->pages[swapped], 8,
			       pg_make(PG_SWAPPED, pg_id(r->pages[swapped]), 511, false)),
		 -EUCLEAN);
	/* a folio word whose swapped count is off by one */
	{
		size_t fi = region_folio(r, region_addr(r, swapped));
		uint32_t f = atomic_load(&r->folios[fi]);

		CHECK_EQ(validate_with(m, (void *)&r->folios[fi], 4, f ^ 1u << FL_NSWAP_SHIFT), -EUCLEAN);
		CHECK_EQ(validate_with(m, (void *)&r->folios[fi], 4, f | FL_LOCK), -EUCLEAN);
	}
	/* the resident counter */
	CHECK_EQ(validate_with(m, (void *)&m->resident, 8, atomic_load(&m->resident) + 1), -EUCLEAN);
	/* a swap page no page word names: a leak */
	CHECK_EQ(uswap_store(uswap_mm_swap(m), zero_page, 1, &id), 0);
	CHECK_EQ(mm_validate(m), -EUCLEAN);
	CHECK_EQ(uswap_free(uswap_mm_swap(m), id), 0);

	CHECK_EQ(mm_validate(m), 0);
out:
	CHECK_EQ(uswap_unmap(m, p, n * PS), 0);
	check_mm_destroy(m);
}

CHECK_MAIN(T(test_mm_basic), T(test_mm_signals_blocked), T(test_mm_cpu_affinity),
	   T(test_mm_first_touch_sparse), T(test_mm_sparse_huge), T(test_mm_pool_in_limit),
	   T(test_mm_pool_share), T(test_mm_threads_4x_limit), T(test_mm_batched_threads), T(test_mm_discard),
	   T(test_mm_stale_reuse), T(test_mm_folio_sweep), T(test_mm_sequential_readahead),
	   T(test_mm_sigbus_threads), T(test_mm_sigbus_syscalls), T(test_mm_sigbus_foreign),
	   T(test_mm_validate_catches))
