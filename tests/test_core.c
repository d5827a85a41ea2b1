/*
 * test_core.c - the swap layer through its public API: round trips of every page kind and folio size,
 * the tier stack's fall-through, writeback, swapoff, checksums, partial frees and concurrent use.
 * Every test reads back what it stored and compares it byte for byte.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "check.h"
#include "core/debug.h"
#include "core/testhook.h"
#include "uswap.h"

#define PAGE 4096u

/* Tiers that take every kind of page: random pages end in the swap file. */
#define ALL_KINDS "same,zpool:lz4,file:size=256M"

static struct uswap *open_layer(const char *spec, bool background)
{
	return check_layer(spec, background);
}

static unsigned char *pages_alloc(size_t npages)
{
	unsigned char *p = aligned_alloc(PAGE, npages * PAGE);

	if (!p) {
		perror("aligned_alloc");
		exit(1);
	}
	return p;
}

static struct uswap_tier_stats tier_stats(struct uswap *u, unsigned t)
{
	struct uswap_tier_stats ts;

	check_tier_stats(u, t, &ts);
	return ts;
}

static void roundtrip_kinds_and_folios(void)
{
	static const size_t folios[] = {1, 4, 16, 512};
	static const char *names[] = {"zero", "same", "text", "random", "mixed"};
	struct uswap *u = open_layer(ALL_KINDS, true);
	unsigned char *src = pages_alloc(512), *dst = pages_alloc(512);

	if (!u)
		return;
	for (int kind = PK_ZERO; kind <= PK_MIXED; kind++) {
		for (size_t f = 0; f < sizeof(folios) / sizeof(folios[0]); f++) {
			size_t n = folios[f];
			uswap_id_t id = 0;
			int ret;

			fill_pages(src, n, (enum page_kind)kind, seed_for((uint64_t)kind * 1000 + f));
			ret = uswap_store(u, src, n, &id);
			if (ret) {
				fprintf(stderr, "store %s x%zu: %d %s\n", names[kind], n, ret,
					uswap_errmsg());
				CHECK_EQ(ret, 0);
				continue;
			}
			CHECK(id != 0);
			CHECK_EQ(uswap_folio_pages(u, id), n);
			memset(dst, 0xa5, n * PAGE);
			CHECK_EQ(uswap_load(u, id, dst, n), 0);
			CHECK_MEM(dst, src, n * PAGE);
			/* page by page, from the middle of the folio */
			for (size_t j = 0; j < n; j += (n > 16 ? 37 : 1)) {
				memset(dst, 0x5a, PAGE);
				CHECK_EQ(uswap_load_pages(u, id, j, 1, dst), 0);
				CHECK_MEM(dst, src + j * PAGE, PAGE);
			}
			CHECK_EQ(uswap_free(u, id), 0);
		}
	}
	struct uswap_stats st;
	uswap_stats(u, &st);
	CHECK_EQ(st.pages, 0);
	CHECK_EQ(st.folios, 0);
	CHECK_EQ(st.csum_errors, 0);
	check_destroy(u);
	free(src);
	free(dst);
}

/* Zero and same-filled pages live in the descriptor; text in the pool; random in the file. */
static void pages_go_to_the_right_tier(void)
{
	struct uswap *u = open_layer(ALL_KINDS, false);
	unsigned char *src = pages_alloc(4), *dst = pages_alloc(4);
	uswap_id_t id[4];

	if (!u)
		return;
	for (int kind = PK_ZERO; kind <= PK_RANDOM; kind++) {
		fill_pages(src, 4, (enum page_kind)kind, seed_for(kind));
		CHECK_EQ(uswap_store(u, src, 4, &id[kind]), 0);
	}
	CHECK_EQ(tier_stats(u, 0).pages, 8);
	CHECK_EQ(tier_stats(u, 1).pages, 4);
	CHECK_EQ(tier_stats(u, 2).pages, 4);
	CHECK(tier_stats(u, 1).data_bytes < 4 * PAGE);
	for (int kind = PK_ZERO; kind <= PK_RANDOM; kind++) {
		fill_pages(src, 4, (enum page_kind)kind, seed_for(kind));
		CHECK_EQ(uswap_load(u, id[kind], dst, 4), 0);
		CHECK_MEM(dst, src, 4 * PAGE);
	}
	check_destroy(u);
	free(src);
	free(dst);
}

/* A folio whose pages are of different kinds is split over tiers and still loads whole. */
static void mixed_folio_spans_tiers(void)
{
	struct uswap *u = open_layer(ALL_KINDS, false);
	unsigned char *src = pages_alloc(64), *dst = pages_alloc(64);
	uswap_id_t id;

	if (!u)
		return;
	fill_pages(src, 64, PK_MIXED, seed_for(7));
	CHECK_EQ(uswap_store(u, src, 64, &id), 0);
	CHECK(tier_stats(u, 0).pages > 0);
	CHECK(tier_stats(u, 1).pages > 0);
	CHECK(tier_stats(u, 2).pages > 0);
	CHECK_EQ(uswap_load(u, id, dst, 64), 0);
	CHECK_MEM(dst, src, 64 * PAGE);
	check_destroy(u);
	free(src);
	free(dst);
}

/* A pool at its limit passes pages to the next tier; nothing is lost. */
static void pool_full_goes_to_next_tier(void)
{
	enum { N = 600 };
	struct uswap *u = open_layer("zpool:lz4:max=256K,zpool:zstd", false);
	unsigned char *src = pages_alloc(1), *dst = pages_alloc(1);
	static uswap_id_t ids[N];

	if (!u)
		return;
	for (unsigned i = 0; i < N; i++) {
		fill_page(src, PK_TEXT, seed_for(i));
		CHECK_EQ(uswap_store(u, src, 1, &ids[i]), 0);
	}
	struct uswap_tier_stats t0 = tier_stats(u, 0), t1 = tier_stats(u, 1);
	CHECK(t0.used_bytes <= 256 * 1024);
	CHECK(t0.rejects > 0);
	CHECK(t1.pages > 0);
	CHECK_EQ(t0.pages + t1.pages, N);
	for (unsigned i = 0; i < N; i++) {
		fill_page(src, PK_TEXT, seed_for(i));
		CHECK_EQ(uswap_load(u, ids[i], dst, 1), 0);
		CHECK_MEM(dst, src, PAGE);
	}
	check_destroy(u);
	free(src);
	free(dst);
}

/* No tier takes the page: the store fails, nothing is kept, and the counters say so. */
static void no_tier_takes_it(void)
{
	struct uswap *u = open_layer("same,zpool:lz4", false);
	unsigned char *src = pages_alloc(4);
	uswap_id_t id = 12345;
	struct uswap_stats st;

	if (!u)
		return;
	fill_pages(src, 4, PK_RANDOM, seed_for(1));
	CHECK_EQ(uswap_store(u, src, 4, &id), -ENOSPC);
	/* A folio of which only one page is incompressible fails as a whole, and leaves nothing. */
	fill_pages(src, 3, PK_TEXT, seed_for(2));
	CHECK_EQ(uswap_store(u, src, 4, &id), -ENOSPC);
	uswap_stats(u, &st);
	CHECK_EQ(st.pages, 0);
	CHECK_EQ(st.folios, 0);
	CHECK_EQ(st.store_failures, 2);
	CHECK_EQ(st.tier[1].pages, 0);
	CHECK_EQ(st.tier[1].data_bytes, 0);
	check_destroy(u);
	free(src);
}

static void bad_arguments(void)
{
	struct uswap *u = open_layer("same,zpool:lz4", false);
	unsigned char *src = pages_alloc(4), *dst = pages_alloc(4);
	uswap_id_t id;

	if (!u)
		return;
	fill_pages(src, 4, PK_TEXT, seed_for(3));
	CHECK_EQ(uswap_store(u, src, 0, &id), -EINVAL);
	CHECK_EQ(uswap_store(u, src, USWAP_FOLIO_MAX_PAGES + 1, &id), -EINVAL);
	CHECK_EQ(uswap_load(u, 0, dst, 1), -ENOENT);
	CHECK_EQ(uswap_load(u, 999999, dst, 1), -ENOENT);
	CHECK_EQ(uswap_free(u, 999999), -ENOENT);
	CHECK_EQ(uswap_store(u, src, 4, &id), 0);
	CHECK_EQ(uswap_load(u, id, dst, 3), -EINVAL);
	CHECK_EQ(uswap_load_pages(u, id, 2, 3, dst), -EINVAL);
	CHECK_EQ(uswap_free_pages(u, id, 3, 2), -EINVAL);
	CHECK_EQ(uswap_free(u, id), 0);
	CHECK_EQ(uswap_free(u, id), -ENOENT);
	CHECK_EQ(uswap_load(u, id, dst, 4), -ENOENT);
	CHECK_EQ(uswap_swapoff(u, 7), -EINVAL);
	CHECK_EQ(uswap_writeback(u, 1, 10), -EINVAL); /* no tier below the pool */
	CHECK_EQ(uswap_writeback(u, 0, 10), -EOPNOTSUPP);
	check_destroy(u);
	free(src);
	free(dst);
}

/* Partial free: the rest of the folio stays loadable; the folio ends with its last page. */
static void partial_free(void)
{
	struct uswap *u = open_layer(ALL_KINDS, false);
	unsigned char *src = pages_alloc(16), *dst = pages_alloc(16);
	uswap_id_t id;
	struct uswap_stats st;

	if (!u)
		return;
	fill_pages(src, 16, PK_MIXED, seed_for(4));
	CHECK_EQ(uswap_store(u, src, 16, &id), 0);
	CHECK_EQ(uswap_free_pages(u, id, 4, 8), 0);
	uswap_stats(u, &st);
	CHECK_EQ(st.pages, 8);
	CHECK_EQ(uswap_load_pages(u, id, 0, 4, dst), 0);
	CHECK_MEM(dst, src, 4 * PAGE);
	CHECK_EQ(uswap_load_pages(u, id, 12, 4, dst), 0);
	CHECK_MEM(dst, src + 12 * PAGE, 4 * PAGE);
	CHECK(uswap_load_pages(u, id, 5, 1, dst) < 0);
	CHECK_EQ(uswap_free_pages(u, id, 0, 4), 0);
	CHECK_EQ(uswap_folio_pages(u, id), 16);
	CHECK_EQ(uswap_free_pages(u, id, 12, 4), 0);
	CHECK_EQ(uswap_folio_pages(u, id), -ENOENT);
	uswap_stats(u, &st);
	CHECK_EQ(st.pages, 0);
	CHECK_EQ(st.folios, 0);
	for (unsigned t = 0; t < st.nr_tiers; t++)
		CHECK_EQ(st.tier[t].pages, 0);
	check_destroy(u);
	free(src);
	free(dst);
}

/* Writeback moves the pool's coldest pages down; swap ids stay, data stays. */
static void writeback_to_next_tier(void)
{
	enum { N = 256 };
	struct uswap *u = open_layer("same,zpool:lz4,zpool:zstd", false);
	unsigned char *src = pages_alloc(4), *dst = pages_alloc(4);
	static uswap_id_t ids[N];

	if (!u)
		return;
	for (unsigned i = 0; i < N; i++) {
		fill_pages(src, 4, PK_TEXT, seed_for(100 + i));
		CHECK_EQ(uswap_store(u, src, 4, &ids[i]), 0);
	}
	CHECK_EQ(tier_stats(u, 1).pages, 4 * N);
	ssize_t moved = uswap_writeback(u, 1, 200);
	CHECK(moved >= 200 && moved <= 200 + USWAP_FOLIO_MAX_PAGES);
	struct uswap_tier_stats t1 = tier_stats(u, 1), t2 = tier_stats(u, 2);
	CHECK_EQ(t2.pages, moved);
	CHECK_EQ(t1.pages + t2.pages, 4 * N);
	CHECK_EQ(t1.writeback_out, moved);
	CHECK_EQ(t2.writeback_in, moved);
	/*
	 * The pool's LRU is by block (last allocation), an approximation: most of what went down is
	 * from the oldest stores, and nothing of the newest did.
	 */
	unsigned old_down = 0, new_down = 0, tier = 99;
	uint64_t h = 0;
	for (unsigned i = 0; i < N; i++) {
		for (unsigned j = 0; j < 4; j++) {
			CHECK_EQ(testhook_page(u, ids[i], j, &tier, &h), 0);
			old_down += i < 64 && tier == 2;
			new_down += i >= N - 32 && tier == 2;
		}
	}
	CHECK(old_down >= moved / 2);
	CHECK_EQ(new_down, 0);
	for (unsigned i = 0; i < N; i++) {
		fill_pages(src, 4, PK_TEXT, seed_for(100 + i));
		CHECK_EQ(uswap_load(u, ids[i], dst, 4), 0);
		CHECK_MEM(dst, src, 4 * PAGE);
	}
	check_destroy(u);
	free(src);
	free(dst);
}

/* The background thread keeps a pool under its high watermark by writing back. */
static void background_writeback(void)
{
	enum { N = 2000 };
	struct uswap *u = open_layer("zpool:lz4:max=1M,zpool:zstd", true);
	unsigned char *src = pages_alloc(1), *dst = pages_alloc(1);
	static uswap_id_t ids[N];

	if (!u)
		return;
	for (unsigned i = 0; i < N; i++) {
		fill_page(src, PK_TEXT, seed_for(5000 + i));
		CHECK_EQ(uswap_store(u, src, 1, &ids[i]), 0);
	}
	uswap_maintain(u);
	struct uswap_tier_stats t0 = tier_stats(u, 0);
	CHECK(t0.writeback_out > 0);
	CHECK(t0.used_bytes <= t0.capacity_bytes);
	for (unsigned i = 0; i < N; i++) {
		fill_page(src, PK_TEXT, seed_for(5000 + i));
		CHECK_EQ(uswap_load(u, ids[i], dst, 1), 0);
		CHECK_MEM(dst, src, PAGE);
	}
	check_destroy(u);
	free(src);
	free(dst);
}

/* swapoff of the pool: everything moves below, online; new stores skip it until swapon. */
static void swapoff_pool(void)
{
	enum { N = 300 };
	struct uswap *u = open_layer("same,zpool:lz4,zpool:zstd", false);
	unsigned char *src = pages_alloc(8), *dst = pages_alloc(8);
	static uswap_id_t ids[N];
	uswap_id_t extra;

	if (!u)
		return;
	for (unsigned i = 0; i < N; i++) {
		fill_pages(src, 8, i % 3 ? PK_TEXT : PK_SAME, seed_for(200 + i));
		CHECK_EQ(uswap_store(u, src, 8, &ids[i]), 0);
	}
	uint64_t same_pages = tier_stats(u, 0).pages;
	CHECK(tier_stats(u, 1).pages > 0);
	CHECK_EQ(uswap_swapoff(u, 1), 0);
	struct uswap_tier_stats t1 = tier_stats(u, 1);
	CHECK_EQ(t1.pages, 0);
	CHECK_EQ(t1.data_bytes, 0);
	CHECK_EQ(t1.off, 1);
	CHECK_EQ(tier_stats(u, 0).pages, same_pages);
	CHECK_EQ(tier_stats(u, 2).pages + same_pages, 8 * N);
	fill_pages(src, 8, PK_TEXT, seed_for(1));
	CHECK_EQ(uswap_store(u, src, 8, &extra), 0);
	CHECK_EQ(tier_stats(u, 1).pages, 0);
	for (unsigned i = 0; i < N; i++) {
		fill_pages(src, 8, i % 3 ? PK_TEXT : PK_SAME, seed_for(200 + i));
		CHECK_EQ(uswap_load(u, ids[i], dst, 8), 0);
		CHECK_MEM(dst, src, 8 * PAGE);
	}
	CHECK_EQ(uswap_swapon(u, 1), 0);
	CHECK_EQ(uswap_store(u, src, 8, &extra), 0);
	CHECK_EQ(tier_stats(u, 1).pages, 8);
	check_destroy(u);
	free(src);
	free(dst);
}

/* swapoff with nowhere to go: -ENOSPC, and every page is still there, intact. */
static void swapoff_without_room(void)
{
	enum { N = 50 };
	struct uswap *u = open_layer("same,zpool:lz4", false);
	unsigned char *src = pages_alloc(2), *dst = pages_alloc(2);
	uswap_id_t ids[N];

	if (!u)
		return;
	for (unsigned i = 0; i < N; i++) {
		fill_pages(src, 2, PK_TEXT, seed_for(300 + i));
		CHECK_EQ(uswap_store(u, src, 2, &ids[i]), 0);
	}
	CHECK_EQ(uswap_swapoff(u, 1), -ENOSPC);
	CHECK_EQ(tier_stats(u, 1).pages, 2 * N);
	for (unsigned i = 0; i < N; i++) {
		fill_pages(src, 2, PK_TEXT, seed_for(300 + i));
		CHECK_EQ(uswap_load(u, ids[i], dst, 2), 0);
		CHECK_MEM(dst, src, 2 * PAGE);
	}
	check_destroy(u);
	free(src);
	free(dst);
}

/* A byte flipped in the pool is caught by the descriptor's checksum: an error, never wrong data. */
static void checksum_catches_corruption(void)
{
	struct uswap *u = open_layer("same,zpool:lz4", false);
	unsigned char *src = pages_alloc(4), *dst = pages_alloc(4);
	uswap_id_t id;
	unsigned tier = 99;
	uint64_t h = 0;
	struct uswap_stats st;

	if (!u)
		return;
	fill_pages(src, 4, PK_TEXT, seed_for(9));
	CHECK_EQ(uswap_store(u, src, 4, &id), 0);
	CHECK_EQ(testhook_page(u, id, 2, &tier, &h), 0);
	CHECK_EQ(tier, 1);
	CHECK_EQ(zpool_corrupt(testhook_tier(u, tier), h), 0);
	int ret = uswap_load(u, id, dst, 4);
	CHECK(ret == -EBADMSG || ret == -EIO);
	CHECK_EQ(uswap_load_pages(u, id, 2, 1, dst), ret);
	/* the other pages are fine */
	CHECK_EQ(uswap_load_pages(u, id, 0, 2, dst), 0);
	CHECK_MEM(dst, src, 2 * PAGE);
	CHECK_EQ(uswap_load_pages(u, id, 3, 1, dst), 0);
	CHECK_MEM(dst, src + 3 * PAGE, PAGE);
	uswap_stats(u, &st);
	CHECK(st.csum_errors + st.io_errors >= 2);
	CHECK_EQ(uswap_free(u, id), 0);
	check_destroy(u);
	free(src);
	free(dst);
}

/* ---- threads: stores, loads and frees of shared slots, with writeback and compaction running ---- */

enum { SLOTS = 512, OPS_PER_THREAD = 6000, NTHREADS = 4 };

struct slot {
	pthread_mutex_t lock;
	uswap_id_t id;
	uint64_t seed;
	unsigned npages;
};

static struct slot slots[SLOTS];
static struct uswap *shared_u;
static atomic_uint thread_errors;

static void *worker(void *arg)
{
	uint64_t r = seed_for((uintptr_t)arg + 77);
	unsigned char *buf = pages_alloc(16), *ref = pages_alloc(16);

	for (unsigned op = 0; op < OPS_PER_THREAD; op++) {
		r = r * 6364136223846793005ull + 1442695040888963407ull;
		struct slot *s = &slots[(r >> 33) % SLOTS];

		pthread_mutex_lock(&s->lock);
		if (!s->id) {
			s->npages = 1u << ((r >> 20) % 5);
			s->seed = r;
			fill_pages(ref, s->npages, PK_MIXED, s->seed);
			int ret = uswap_store(shared_u, ref, s->npages, &s->id);
			if (ret == -ENOSPC)
				s->id = 0; /* random pages with no file below: legitimate refusal */
			else if (ret)
				atomic_fetch_add(&thread_errors, 1);
		} else {
			fill_pages(ref, s->npages, PK_MIXED, s->seed);
			if (uswap_load(shared_u, s->id, buf, s->npages) ||
			    memcmp(buf, ref, (size_t)s->npages * PAGE))
				atomic_fetch_add(&thread_errors, 1);
			if ((r >> 40) % 3 == 0) {
				if (uswap_free(shared_u, s->id))
					atomic_fetch_add(&thread_errors, 1);
				s->id = 0;
			}
		}
		pthread_mutex_unlock(&s->lock);
		if (op % 1000 == 999 && (uintptr_t)arg == 0)
			uswap_writeback(shared_u, 1, 256);
	}
	free(buf);
	free(ref);
	return NULL;
}

static void threads_store_and_load(void)
{
	pthread_t th[NTHREADS];

	shared_u = open_layer("same,zpool:lz4:max=4M,zpool:zstd", true);
	if (!shared_u)
		return;
	for (unsigned i = 0; i < SLOTS; i++) {
		pthread_mutex_init(&slots[i].lock, NULL);
		slots[i].id = 0;
	}
	for (uintptr_t i = 0; i < NTHREADS; i++)
		pthread_create(&th[i], NULL, worker, (void *)i);
	for (unsigned i = 0; i < NTHREADS; i++)
		pthread_join(th[i], NULL);
	CHECK_EQ(atomic_load(&thread_errors), 0);

	unsigned char *buf = pages_alloc(16), *ref = pages_alloc(16);
	uint64_t live_pages = 0;
	struct uswap_stats st;

	for (unsigned i = 0; i < SLOTS; i++) {
		struct slot *s = &slots[i];

		if (!s->id)
			continue;
		live_pages += s->npages;
		fill_pages(ref, s->npages, PK_MIXED, s->seed);
		CHECK_EQ(uswap_load(shared_u, s->id, buf, s->npages), 0);
		CHECK_MEM(buf, ref, (size_t)s->npages * PAGE);
	}
	uswap_stats(shared_u, &st);
	CHECK_EQ(st.pages, live_pages);
	CHECK_EQ(st.csum_errors, 0);
	check_destroy(shared_u);
	free(buf);
	free(ref);
}

/* swapoff of the pool while other threads keep loading and storing. */
static atomic_bool stop_loaders;

static void *loader(void *arg)
{
	uint64_t r = seed_for((uintptr_t)arg + 991);
	unsigned char *buf = pages_alloc(16), *ref = pages_alloc(16);

	while (!atomic_load(&stop_loaders)) {
		r = r * 6364136223846793005ull + 1442695040888963407ull;
		struct slot *s = &slots[(r >> 33) % SLOTS];

		pthread_mutex_lock(&s->lock);
		if (s->id) {
			fill_pages(ref, s->npages, PK_TEXT, s->seed);
			if (uswap_load(shared_u, s->id, buf, s->npages) ||
			    memcmp(buf, ref, (size_t)s->npages * PAGE))
				atomic_fetch_add(&thread_errors, 1);
		} else {
			s->npages = 1u << ((r >> 20) % 5);
			s->seed = r;
			fill_pages(ref, s->npages, PK_TEXT, s->seed);
			if (uswap_store(shared_u, ref, s->npages, &s->id))
				atomic_fetch_add(&thread_errors, 1);
		}
		pthread_mutex_unlock(&s->lock);
	}
	free(buf);
	free(ref);
	return NULL;
}

static void swapoff_while_in_use(void)
{
	pthread_t th[2];
	unsigned char *ref = pages_alloc(16), *buf = pages_alloc(16);

	atomic_store(&thread_errors, 0);
	shared_u = open_layer("same,zpool:lz4,zpool:zstd", true);
	if (!shared_u)
		return;
	for (unsigned i = 0; i < SLOTS; i++) {
		struct slot *s = &slots[i];

		s->npages = 1u << (i % 5);
		s->seed = seed_for(i + 40000);
		fill_pages(ref, s->npages, PK_TEXT, s->seed);
		CHECK_EQ(uswap_store(shared_u, ref, s->npages, &s->id), 0);
	}
	atomic_store(&stop_loaders, false);
	for (uintptr_t i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, loader, (void *)i);
	for (int round = 0; round < 3; round++) {
		CHECK_EQ(uswap_swapoff(shared_u, 1), 0);
		CHECK_EQ(tier_stats(shared_u, 1).pages, 0);
		CHECK_EQ(uswap_swapon(shared_u, 1), 0);
		CHECK_EQ(uswap_swapoff(shared_u, 2), 0); /* ... and back up into the pool above */
		CHECK_EQ(tier_stats(shared_u, 2).pages, 0);
		CHECK_EQ(uswap_swapon(shared_u, 2), 0);
	}
	atomic_store(&stop_loaders, true);
	for (unsigned i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	CHECK_EQ(atomic_load(&thread_errors), 0);
	for (unsigned i = 0; i < SLOTS; i++) {
		struct slot *s = &slots[i];

		fill_pages(ref, s->npages, PK_TEXT, s->seed);
		CHECK_EQ(uswap_load(shared_u, s->id, buf, s->npages), 0);
		CHECK_MEM(buf, ref, (size_t)s->npages * PAGE);
	}
	check_destroy(shared_u);
	free(ref);
	free(buf);
}

/*
 * DEBUG builds: uswap_debug_validate() finds a descriptor broken on purpose, each way in turn, and
 * passes again once it is put back. (Other builds have no walker to test.)
 */
static void validate_catches_bad_descriptors(void)
{
	struct uswap *u;
	unsigned char *src;
	uswap_id_t id[3];
	struct swap_desc *d;
	uint32_t meta, handle;
	unsigned tier = 99;
	uint64_t h;

	if (!check_debug_build()) {
		printf("  (the walkers are compiled in DEBUG builds only)\n");
		return;
	}
	u = open_layer(ALL_KINDS, false);
	if (!u)
		return;
	src = pages_alloc(16);
	fill_pages(src, 16, PK_MIXED, seed_for(29));
	for (int i = 0; i < 3; i++)
		CHECK_EQ(uswap_store(u, src, 16, &id[i]), 0);
	CHECK_EQ(uswap_free_pages(u, id[1], 0, 3), 0); /* a folio that lost its head page is still one */
	CHECK_EQ(uswap_debug_validate(u), 0);

	/* a folio head that is no longer one: its pages belong to no folio */
	d = desc_get(&u->descs, (uint32_t)id[0]);
	meta = atomic_load(&d->meta);
	atomic_store(&d->meta, meta & ~DESC_HEAD);
	CHECK_EQ(uswap_debug_validate(u), -EUCLEAN);
	atomic_store(&d->meta, meta);

	/* a live page moved to another tier behind the tiers' backs: the per-tier counts disagree */
	d = desc_get(&u->descs, (uint32_t)id[2] + 5);
	meta = atomic_load(&d->meta);
	atomic_store(&d->meta, (meta & ~DESC_TIER_MASK) | ((desc_tier(meta) + 1) % 3) << DESC_TIER_SHIFT);
	CHECK_EQ(uswap_debug_validate(u), -EUCLEAN);
	atomic_store(&d->meta, meta);

	/* a page freed in the descriptor but not in its tier */
	for (unsigned j = 0; j < 16; j++) {
		if (testhook_page(u, id[2], j, &tier, &h) || tier != 1)
			continue;
		d = desc_get(&u->descs, (uint32_t)id[2] + j);
		meta = atomic_load(&d->meta);
		atomic_store(&d->meta, meta & ~DESC_LIVE);
		CHECK_EQ(uswap_debug_validate(u), -EUCLEAN);
		atomic_store(&d->meta, meta);

		/* a pool page whose descriptor names another object: the pool's walk finds the mismatch */
		handle = d->handle;
		d->handle = handle ^ 1;
		CHECK_EQ(uswap_debug_validate(u), -EUCLEAN);
		d->handle = handle;
		break;
	}
	CHECK(tier == 1); /* the mixed folio had a pool page */

	/* the folio count */
	atomic_fetch_add(&u->folios, 1);
	CHECK_EQ(uswap_debug_validate(u), -EUCLEAN);
	atomic_fetch_sub(&u->folios, 1);

	CHECK_EQ(uswap_debug_validate(u), 0);
	check_destroy(u);
	free(src);
}

CHECK_MAIN(T(roundtrip_kinds_and_folios), T(pages_go_to_the_right_tier), T(mixed_folio_spans_tiers),
	   T(pool_full_goes_to_next_tier), T(no_tier_takes_it), T(bad_arguments), T(partial_free),
	   T(writeback_to_next_tier), T(background_writeback), T(swapoff_pool), T(swapoff_without_room),
	   T(checksum_catches_corruption), T(threads_store_and_load), T(swapoff_while_in_use),
	   T(validate_catches_bad_descriptors))
