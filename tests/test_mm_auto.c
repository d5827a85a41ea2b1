/*
 * test_mm_auto.c - a limit that finds itself (uswap_mm_options.limit_auto): it comes down while the
 * program does not wait on swap-ins, goes back up when it does, keeps to its floor and ceiling, and
 * loses no page on the way; a limit lifted while reclaim works; and the limit strings a user writes.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "util/csum.h"
#include "uswap.h"

#define PS    4096ul
#define MiB   (1024ul * 1024)
#define TIERS "same,zpool:lz4:max=64M,file:size=256M"

static struct uswap_mm *auto_new(uint64_t ceiling, uint64_t floor)
{
	struct uswap_mm_options o = {
		.limit_bytes = ceiling, .tiers = TIERS, .limit_auto = 1, .auto_min_bytes = floor};

	return check_mm_new(&o);
}

static uint64_t limit_now(struct uswap_mm *m)
{
	struct uswap_mm_stats st;

	uswap_mm_stats(m, &st);
	return st.budget_bytes;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void fill(unsigned char *p, size_t n, uint32_t *sums)
{
	for (size_t i = 0; i < n; i++) {
		fill_page(p + i * PS, PK_MIXED, seed_for(i));
		sums[i] = csum_buf(p + i * PS, PS);
	}
}

static size_t bad_pages(const unsigned char *p, size_t n, const uint32_t *sums)
{
	size_t bad = 0;

	for (size_t i = 0; i < n; i++)
		bad += csum_buf(p + i * PS, PS) != sums[i];
	return bad;
}

/*
 * 64 MiB written once, then a 2 MiB hot set touched for a while: nothing waits, so the limit
 * leaves its 256 MiB ceiling for what the program uses and goes on down, not under the floor.
 */
static void test_auto_descends(void)
{
	const size_t n = 64 * MiB / PS, hot = 2 * MiB / PS;
	struct uswap_mm *m = auto_new(256 * MiB, 24 * MiB);
	uint32_t *sums = calloc(n, sizeof(*sums));
	struct uswap_mm_stats st;
	unsigned char *p;
	double t0;

	if (!m)
		return;
	CHECK_EQ(limit_now(m), 256 * MiB);
	CHECK_EQ(uswap_map(m, n * PS, 0, (void **)&p), 0);
	fill(p, n, sums);
	/* a look a second, 2% a look at most: a few seconds; more on a loaded machine */
	for (t0 = now_s(); now_s() - t0 < 30 && (now_s() - t0 < 6 || limit_now(m) >= 64 * MiB);)
		for (size_t i = 0; i < hot; i++)
			p[i * PS + 8]++, p[i * PS + 8]--;
	uswap_mm_stats(m, &st);
	CHECK_EQ(st.limit_auto, 1);
	CHECK(st.budget_bytes < 64 * MiB); /* came down to the use (64 MiB and a little), then under it */
	CHECK(st.budget_bytes >= 24 * MiB);
	CHECK(st.peak_resident_bytes >= 60 * MiB);
	if (st.budget_bytes >= 64 * MiB)
		fprintf(stderr, "limit %llu MiB after %.0f s\n", (unsigned long long)(st.budget_bytes / MiB),
			now_s() - t0);
	CHECK_EQ(bad_pages(p, n, sums), 0);
	CHECK_EQ(uswap_unmap(m, p, n * PS), 0);
	uswap_mm_destroy(m);
	free(sums);
}

/*
 * The same 64 MiB under a limit set to 16 MiB, then touched round and round: the program waits on
 * nearly every touch, and the limit goes back up (never past its ceiling) within a few seconds.
 */
static void test_auto_rises(void)
{
	const size_t n = 64 * MiB / PS;
	struct uswap_mm *m = auto_new(96 * MiB, 16 * MiB);
	uint32_t *sums = calloc(n, sizeof(*sums));
	struct uswap_mm_stats st;
	unsigned char *p;
	uint64_t low;
	double t0;

	if (!m)
		return;
	CHECK_EQ(uswap_mm_set_limit(m, 16 * MiB), 0); /* the ceiling, and the limit under it */
	CHECK_EQ(uswap_mm_set_limit(m, 96 * MiB), 0); /* a higher ceiling leaves the limit where it is */
	low = limit_now(m);
	CHECK_EQ(low, 16 * MiB);
	CHECK_EQ(uswap_map(m, n * PS, 0, (void **)&p), 0);
	fill(p, n, sums);
	for (t0 = now_s(); now_s() - t0 < 20 && limit_now(m) < 32 * MiB;)
		for (size_t i = 0; i < n; i++)
			p[i * PS + 8]++, p[i * PS + 8]--;
	uswap_mm_stats(m, &st);
	if (st.budget_bytes < 32 * MiB)
		fprintf(stderr, "limit %llu MiB, waited %llu ms\n",
			(unsigned long long)(st.budget_bytes / MiB),
			(unsigned long long)(st.stall_ns / 1000000));
	CHECK(st.budget_bytes >= 32 * MiB);
	CHECK(st.budget_bytes <= 96 * MiB);
	CHECK(st.stall_ns > 0);
	CHECK_EQ(bad_pages(p, n, sums), 0);
	CHECK_EQ(uswap_unmap(m, p, n * PS), 0);
	uswap_mm_destroy(m);
	free(sums);
}

/*
 * A limit lifted (0: none) while reclaim works under it: the run in progress stops and nothing is
 * evicted any more (the reclaimer once spun on an inactive target of ~2^62 pages, holding its lock,
 * and the program's faults waited behind it).
 */
struct writer {
	unsigned char *p;
	size_t n;
	uint32_t *sums;
	atomic_int done;
};

static void *writer_main(void *arg)
{
	struct writer *w = arg;

	fill(w->p, w->n, w->sums);
	atomic_store(&w->done, 1);
	return NULL;
}

static void test_limit_lifted(void)
{
	struct uswap_mm_options o = {.limit_bytes = 4 * MiB, .tiers = TIERS};
	struct writer w = {.n = 64 * MiB / PS};
	struct uswap_mm_stats st, st2;
	struct uswap_mm *m = NULL;
	pthread_t th;
	int ret = uswap_mm_create(&m, &o);

	if (ret == -EPERM || ret == -EOPNOTSUPP)
		check_skip(uswap_errmsg());
	CHECK_EQ(ret, 0);
	if (!m)
		return;
	w.sums = calloc(w.n, sizeof(*w.sums));
	CHECK_EQ(uswap_map(m, w.n * PS, 0, (void **)&w.p), 0);
	for (int round = 0; round < 8; round++) { /* lifted at a different moment of the runs each time */
		uint64_t from;

		CHECK_EQ(uswap_mm_set_limit(m, 4 * MiB), 0);
		atomic_store(&w.done, 0);
		uswap_mm_stats(m, &st);
		from = st.evicted_pages;
		CHECK_EQ(pthread_create(&th, NULL, writer_main, &w), 0);
		do
			uswap_mm_stats(m, &st);
		while (st.evicted_pages < from + 500u * (unsigned)(round + 1) && !atomic_load(&w.done));
		CHECK_EQ(uswap_mm_set_limit(m, 0), 0);
		for (double t0 = now_s(); !atomic_load(&w.done) && now_s() - t0 < 30;)
			usleep(10000);
		CHECK(atomic_load(&w.done)); /* the writer was not held up for good */
		if (!atomic_load(&w.done))
			break; /* a reclaimer that spins: the runner's timeout ends it */
		pthread_join(th, NULL);
	}
	uswap_mm_stats(m, &st);
	usleep(300000);
	uswap_mm_stats(m, &st2);
	CHECK_EQ(st.limit_bytes, 0);
	CHECK_EQ(st2.evicted_pages, st.evicted_pages); /* no limit: nothing more leaves */
	CHECK_EQ(bad_pages(w.p, w.n, w.sums), 0);
	CHECK_EQ(uswap_unmap(m, w.p, w.n * PS), 0);
	uswap_mm_destroy(m);
	free(w.sums);
}

static void test_parse_limit(void)
{
	static const struct {
		const char *s;
		uint64_t bytes;
		unsigned auto_on, ppm;
		uint64_t min;
	} good[] = {
		{"512M", 512 * MiB, 0, 0, 0},
		{"auto", 0, 1, 0, 0},
		{"auto:stall=0.5%", 0, 1, 5000, 0},
		{"auto:min=64M:max=2G", 2048 * MiB, 1, 0, 64 * MiB},
		{"2G:auto", 2048 * MiB, 1, 0, 0},
		{"2G:auto:stall=2%:min=32M", 2048 * MiB, 1, 20000, 32 * MiB},
		{"2G:auto:max=1G", 1024 * MiB, 1, 0, 0},
	};
	static const char *bad[] = {"",          "auto:stall=90%", "auto:stall=1", "512M:min=4M", "banana",
				    "auto:auto", "1G:auto:min=2G", "auto:max=",    "512M:512M"};

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		struct uswap_mm_options o = {0};

		CHECK_EQ(uswap_parse_limit(good[i].s, &o), 0);
		CHECK_EQ(o.limit_bytes, good[i].bytes);
		CHECK_EQ(o.limit_auto, good[i].auto_on);
		CHECK_EQ(o.auto_stall_ppm, good[i].ppm);
		CHECK_EQ(o.auto_min_bytes, good[i].min);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct uswap_mm_options o = {0};
		int ret = uswap_parse_limit(bad[i], &o);

		if (ret != -EINVAL)
			fprintf(stderr, "\"%s\" gave %d\n", bad[i], ret);
		CHECK_EQ(ret, -EINVAL);
		CHECK(strstr(uswap_errmsg(), "limit") != NULL);
	}
}

CHECK_MAIN(T(test_parse_limit), T(test_auto_descends), T(test_auto_rises), T(test_limit_lifted))
