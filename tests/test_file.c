/* test_file.c - round trips through the swap-file tier, alone and below the compressed pool. */
#include <errno.h>
#include <stdatomic.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "uswap.h"
#include "backend/backend.h"
#include "backend/file.h"
#include "core/testhook.h"

static void fill(unsigned char *p, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++) {
		seed = seed * 1103515245u + 12345u;
		p[i] = (unsigned char)(seed >> 16);
	}
}

static void test_file_roundtrip_folios(void)
{
	static const size_t sizes[] = {1, 2, 3, 16, 100, 512};
	struct uswap *u;
	size_t max = 512 * USWAP_PAGE_SIZE;
	unsigned char *a = malloc(max), *b = malloc(max);

	CHECK_EQ(uswap_create(&u, "file:size=64M"), 0);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uswap_id_t id;
		size_t len = sizes[i] * USWAP_PAGE_SIZE;

		fill(a, len, (unsigned)i + 1);
		CHECK_EQ(uswap_store(u, a, sizes[i], &id), 0);
		memset(b, 0, len);
		CHECK_EQ(uswap_load(u, id, b, sizes[i]), 0);
		CHECK_MEM(a, b, len);
		CHECK_EQ(uswap_free(u, id), 0);
	}
	check_destroy(u);
	free(a);
	free(b);
}

static void test_file_full_refuses(void)
{
	struct uswap *u;
	unsigned char *a = malloc(4 * USWAP_PAGE_SIZE);
	uswap_id_t id;

	fill(a, 4 * USWAP_PAGE_SIZE, 7);
	CHECK_EQ(uswap_create(&u, "file:size=8K"), 0);
	CHECK(uswap_store(u, a, 4, &id) < 0);
	CHECK_EQ(uswap_store(u, a, 2, &id), 0);
	check_destroy(u);
	free(a);
}

static void test_file_bad_spec(void)
{
	struct uswap *u;

	CHECK_EQ(uswap_create(&u, "file:bogus"), -EINVAL);
	CHECK_EQ(uswap_create(&u, "file:size=xyz"), -EINVAL);
}

/* Pool -> file writeback, then swapoff of the file tier back into the pool: data intact throughout. */
static void test_file_writeback_and_swapoff(void)
{
	enum { N = 64 };
	struct uswap *u;
	uswap_id_t ids[N];
	unsigned char *a = malloc(USWAP_PAGE_SIZE), *b = malloc(USWAP_PAGE_SIZE);

	CHECK_EQ(uswap_create(&u, "zpool:lz4:max=64M,file:size=64M"), 0);
	for (int i = 0; i < N; i++) {
		memset(a, 'a' + i % 26, USWAP_PAGE_SIZE);
		fill(a, 512, (unsigned)i); /* compressible but not same-filled */
		CHECK_EQ(uswap_store(u, a, 1, &ids[i]), 0);
	}
	CHECK(uswap_writeback(u, 0, N / 2) > 0);
	CHECK_EQ(uswap_swapoff(u, 1), 0);
	for (int i = 0; i < N; i++) {
		memset(a, 'a' + i % 26, USWAP_PAGE_SIZE);
		fill(a, 512, (unsigned)i);
		CHECK_EQ(uswap_load(u, ids[i], b, 1), 0);
		CHECK_MEM(a, b, USWAP_PAGE_SIZE);
	}
	check_destroy(u);
	free(a);
	free(b);
}

/* The descriptor of the tier's file, opened again through /proc (a named file has no name left). */
static int reopen_tier_file(struct uswap *u, int flags)
{
	struct file_layout fl;
	char proc[64];

	if (file_layout(testhook_tier(u, 0), &fl))
		return -1;
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fl.fd);
	return open(proc, flags);
}

/*
 * A named file is created 0600 and loses its name at once, so a crash (SIGKILL) leaves no file
 * behind; bytes changed behind the layer's back make the load fail.
 */
static void test_file_named_mode_and_corruption(void)
{
	char path[] = "/var/tmp/uswap-test-XXXXXX", spec[64];
	unsigned char *a = malloc(USWAP_PAGE_SIZE), *b = malloc(USWAP_PAGE_SIZE);
	struct uswap *u;
	struct stat st;
	uswap_id_t id;
	int fd;

	fd = mkstemp(path);
	CHECK(fd >= 0);
	close(fd);
	unlink(path);
	snprintf(spec, sizeof(spec), "file:%s:size=1M", path);
	CHECK_EQ(uswap_create(&u, spec), 0);
	CHECK_EQ(stat(path, &st), -1); /* no name left while it lives */
	fd = reopen_tier_file(u, O_WRONLY);
	CHECK(fd >= 0);
	CHECK_EQ(fstat(fd, &st), 0);
	CHECK_EQ(st.st_mode & 0777, 0600);
	CHECK_EQ(st.st_nlink, 0);
	fill(a, USWAP_PAGE_SIZE, 99);
	CHECK_EQ(uswap_store(u, a, 1, &id), 0);
	uswap_maintain(u); /* the staged page is on the disk now */
	memset(b, 0x5a, USWAP_PAGE_SIZE);
	CHECK_EQ(pwrite(fd, b, USWAP_PAGE_SIZE, 0), USWAP_PAGE_SIZE); /* slot 0: the first store */
	close(fd);
	CHECK_EQ(uswap_load(u, id, b, 1), -EBADMSG);
	check_destroy(u);
	unlink(path);
	free(a);
	free(b);
}

struct mt_arg {
	struct uswap *u;
	unsigned seed;
	int bad;
};

static void *mt_worker(void *p)
{
	struct mt_arg *m = p;
	unsigned char a[4 * USWAP_PAGE_SIZE], b[4 * USWAP_PAGE_SIZE];

	for (unsigned i = 0; i < 300; i++) {
		uswap_id_t id;
		size_t n = 1 + i % 4;

		fill(a, n * USWAP_PAGE_SIZE, m->seed + i);
		if (uswap_store(m->u, a, n, &id)) {
			m->bad++;
			continue;
		}
		if (i % 8 == 0)
			uswap_writeback(m->u, 0, 16);
		if (uswap_load(m->u, id, b, n) || memcmp(a, b, n * USWAP_PAGE_SIZE))
			m->bad++;
		uswap_free(m->u, id);
	}
	return NULL;
}

/* Two threads store, write back and load through pool + file at once. */
static void test_file_threads(void)
{
	struct mt_arg m[2];
	pthread_t t[2];
	struct uswap *u;

	CHECK_EQ(uswap_create(&u, "zpool:lz4:max=64M,file:size=64M"), 0);
	for (int i = 0; i < 2; i++) {
		m[i] = (struct mt_arg){u, 1000u * (unsigned)(i + 1), 0};
		CHECK_EQ(pthread_create(&t[i], NULL, mt_worker, &m[i]), 0);
	}
	for (int i = 0; i < 2; i++) {
		pthread_join(t[i], NULL);
		CHECK_EQ(m[i].bad, 0);
	}
	check_destroy(u);
}

/* EIO on a file store: the page is refused and stays with the caller; EIO on load is reported. */
static void test_file_injected_eio(void)
{
	unsigned char *a = malloc(USWAP_PAGE_SIZE), *b = malloc(USWAP_PAGE_SIZE);
	struct uswap *u;
	uswap_id_t id;

	fill(a, USWAP_PAGE_SIZE, 5);
	CHECK_EQ(uswap_create(&u, "fault(file:size=1M)"), 0);
	backend_inject(testhook_tier(u, 0), true, 1, -EIO, false);
	CHECK(uswap_store(u, a, 1, &id) < 0);
	CHECK_EQ(uswap_store(u, a, 1, &id), 0);
	backend_inject(testhook_tier(u, 0), false, 1, -EIO, false);
	CHECK_EQ(uswap_load(u, id, b, 1), -EIO);
	CHECK(strstr(uswap_errmsg(), "swap id") != NULL); /* reported with the swap id */
	CHECK_EQ(uswap_load(u, id, b, 1), 0);
	CHECK_MEM(a, b, USWAP_PAGE_SIZE);
	check_destroy(u);
	free(a);
	free(b);
}

/* Every folio size 1..512 through the file tier, each checked, with neighbours stored in between. */
static void test_file_every_folio_size(void)
{
	struct uswap *u;
	size_t max = 512 * USWAP_PAGE_SIZE;
	unsigned char *a = malloc(max), *b = aligned_alloc(4096, max + 4096);
	uswap_id_t keep[512];
	struct file_layout fl;

	size_t kept = 0;

	CHECK_EQ(uswap_create(&u, "file:size=64M"), 0);
	for (size_t n = 1; n <= 512; n++) {
		unsigned char *dst =
			n % 2 ? b : b + 16; /* aligned: direct reads; not: through the bounce buffer */

		fill_pages(a, n, PK_RANDOM, seed_for(n));
		CHECK_EQ(uswap_store(u, a, n, &keep[n - 1]), 0);
		memset(b, 0, max);
		CHECK_EQ(uswap_load(u, keep[n - 1], dst, n), 0);
		CHECK_MEM(a, dst, n * USWAP_PAGE_SIZE);
		if (n % 37 == 1) {
			kept += n;
			continue;
		}
		CHECK_EQ(uswap_free(u, keep[n - 1]), 0);
		keep[n - 1] = 0;
	}
	for (size_t n = 1; n <= 512; n += 37) {
		fill_pages(a, n, PK_RANDOM, seed_for(n));
		CHECK_EQ(uswap_load(u, keep[n - 1], b, n), 0);
		CHECK_MEM(a, b, n * USWAP_PAGE_SIZE);
		/* a part of the folio alone */
		CHECK_EQ(uswap_load_pages(u, keep[n - 1], n / 2, n - n / 2, b), 0);
		CHECK_MEM(a + n / 2 * USWAP_PAGE_SIZE, b, (n - n / 2) * USWAP_PAGE_SIZE);
	}
	CHECK_EQ(file_layout(testhook_tier(u, 0), &fl), 0);
	CHECK_EQ(fl.used_pages, kept);
	CHECK_EQ(fl.split_stores, 0); /* room enough: every folio got one run */
	for (size_t n = 1; n <= 512; n += 37)
		CHECK_EQ(uswap_free(u, keep[n - 1]), 0);
	CHECK_EQ(file_layout(testhook_tier(u, 0), &fl), 0);
	CHECK_EQ(fl.used_pages, 0);
	CHECK_EQ(fl.clusters_in_use, 0);
	check_destroy(u);
	free(a);
	free(b);
}

/* Pages the pool writes back are stored compressed in the file, and come back intact. */
static void test_file_writeback_stays_compressed(void)
{
	enum { N = 2000 };
	struct uswap_options o = {.tiers = "zpool:lz4:max=64M,file:size=64M", .no_background = 1};
	unsigned char *a = malloc(USWAP_PAGE_SIZE), *b = malloc(USWAP_PAGE_SIZE);
	static uswap_id_t ids[N];
	struct file_layout fl;
	struct uswap_stats st;
	struct uswap *u;

	CHECK_EQ(uswap_create_opts(&u, &o), 0);
	for (int i = 0; i < N; i++) {
		fill_page(a, PK_TEXT, seed_for((uint64_t)i));
		CHECK_EQ(uswap_store(u, a, 1, &ids[i]), 0);
	}
	CHECK_EQ(uswap_writeback(u, 0, N), N);
	CHECK_EQ(file_layout(testhook_tier(u, 1), &fl), 0);
	CHECK_EQ(fl.used_pages, 0);
	CHECK(fl.used_sectors > 0 && fl.used_sectors * 512 < (uint64_t)N * USWAP_PAGE_SIZE * 9 / 10);
	CHECK_EQ(uswap_stats(u, &st), 0);
	CHECK_EQ(st.tier[1].pages, N);
	CHECK_EQ(st.tier[0].pages, 0);
	for (int i = 0; i < N; i++) {
		fill_page(a, PK_TEXT, seed_for((uint64_t)i));
		CHECK_EQ(uswap_load(u, ids[i], b, 1), 0);
		CHECK_MEM(a, b, USWAP_PAGE_SIZE);
	}
	/* back into the pool as they are, then down again */
	CHECK_EQ(uswap_swapoff(u, 1), 0);
	CHECK_EQ(uswap_stats(u, &st), 0);
	CHECK_EQ(st.tier[0].pages, N);
	CHECK_EQ(uswap_swapon(u, 1), 0);
	CHECK_EQ(uswap_writeback(u, 0, N / 2), N / 2);
	for (int i = 0; i < N; i++) {
		fill_page(a, PK_TEXT, seed_for((uint64_t)i));
		CHECK_EQ(uswap_load(u, ids[i], b, 1), 0);
		CHECK_MEM(a, b, USWAP_PAGE_SIZE);
	}
	check_destroy(u);
	free(a);
	free(b);
}

/* A pool object corrupted before writeback moves as it is, and its load from the file says so. */
static void test_file_writeback_corruption_detected(void)
{
	struct uswap_options o = {.tiers = "zpool:lz4:max=16M,file:size=16M", .no_background = 1};
	unsigned char *a = malloc(USWAP_PAGE_SIZE), *b = malloc(USWAP_PAGE_SIZE);
	struct uswap *u;
	uswap_id_t id;
	unsigned t = 9;
	uint64_t h = 0;

	CHECK_EQ(uswap_create_opts(&u, &o), 0);
	fill_page(a, PK_TEXT, seed_for(1));
	CHECK_EQ(uswap_store(u, a, 1, &id), 0);
	CHECK_EQ(testhook_page(u, id, 0, &t, &h), 0);
	CHECK_EQ(t, 0);
	CHECK_EQ(zpool_corrupt(testhook_tier(u, 0), h), 0);
	CHECK_EQ(uswap_writeback(u, 0, 1), 1);
	CHECK_EQ(testhook_page(u, id, 0, &t, &h), 0);
	CHECK_EQ(t, 1);
	CHECK_EQ(uswap_load(u, id, b, 1), -EBADMSG);
	check_destroy(u);
	free(a);
	free(b);
}

/*
 * uswap_load_vec(): pages of folios in every tier (same-filled, the pool, the file packed by writeback
 * and plain), in an order that mixes them, come back exact; the file tier reads a run of them in one
 * load; a freed page ends the prefix; a page that fails its checksum or a tier error fails the batch.
 */
static void test_file_load_vec(void)
{
	enum { NF = 24, PS = USWAP_PAGE_SIZE };
	static const enum page_kind kinds[] = {PK_TEXT, PK_RANDOM, PK_SAME, PK_TEXT};
	struct uswap_options o = {.tiers = "same,zpool:lz4:max=16M,fault(file:size=16M)", .no_background = 1};
	unsigned char *a = malloc(4 * PS), *b = malloc(64 * PS);
	uswap_id_t ids[NF], vid[64];
	uint32_t vidx[64];
	size_t np[NF], vf[64], n = 0;
	struct uswap_tier_stats before, after;
	struct uswap *u;
	unsigned t = 9;
	uint64_t h = 0;

	CHECK_EQ(uswap_create_opts(&u, &o), 0);
	for (size_t f = 0; f < NF; f++) {
		np[f] = 1 + f % 3;
		fill_pages(a, np[f], kinds[f % 4], seed_for(f));
		CHECK_EQ(uswap_store(u, a, np[f], &ids[f]), 0);
	}
	CHECK_EQ(uswap_writeback(u, 1, 10), 10); /* some text pages go to the file, compressed */
	/* Backwards over the folios, each folio's pages in order. */
	for (size_t f = NF; f-- > 0;)
		for (uint32_t j = 0; j < np[f]; j++, n++) {
			vid[n] = ids[f];
			vidx[n] = j;
			vf[n] = f;
		}
	memset(b, 0, 64 * PS);
	CHECK_EQ(uswap_load_vec(u, vid, vidx, n, b), (ssize_t)n);
	for (size_t i = 0; i < n; i++) {
		fill_pages(a, np[vf[i]], kinds[vf[i] % 4], seed_for(vf[i]));
		CHECK_MEM(a + vidx[i] * PS, b + i * PS, PS);
	}
	/* Six plain pages in the file, one load of the file tier. */
	check_tier_stats(u, 2, &before);
	for (size_t i = 0; i < 6; i++) {
		vid[i] = ids[1 + 4 * i];
		vidx[i] = 0;
	}
	CHECK_EQ(uswap_load_vec(u, vid, vidx, 6, b), 6);
	check_tier_stats(u, 2, &after);
	CHECK_EQ(after.loads - before.loads, 1);
	/* A freed folio ends the prefix. */
	for (size_t i = 0; i < 4; i++) {
		vid[i] = ids[i];
		vidx[i] = 0;
	}
	CHECK_EQ(uswap_free(u, ids[2]), 0);
	CHECK_EQ(uswap_load_vec(u, vid, vidx, 4, b), 2);
	/* A tier error or a corrupt page: the whole batch fails. */
	backend_inject(testhook_tier(u, 2), false, 1, -EIO, false);
	CHECK_EQ(uswap_load_vec(u, vid, vidx, 2, b), -EIO);
	CHECK_EQ(uswap_load_vec(u, vid, vidx, 2, b), 2);
	for (size_t f = NF; f-- > 0 && t != 1;)
		CHECK_EQ(testhook_page(u, (vid[1] = ids[f]), 0, &t, &h), 0);
	CHECK_EQ(t, 1);
	CHECK_EQ(zpool_corrupt(testhook_tier(u, 1), h), 0);
	CHECK_EQ(uswap_load_vec(u, vid, vidx, 2, b), -EBADMSG);
	check_destroy(u);
	free(a);
	free(b);
}

struct press_arg {
	struct uswap *u;
	uint64_t seed;
	int bad, stored;
};

/* Stores text-like folios into a small pool over the file, loads and frees some, checks every byte. */
static void *press_worker(void *p)
{
	enum { KEEP = 256 };
	struct press_arg *m = p;
	unsigned char *a = malloc(8 * USWAP_PAGE_SIZE), *b = malloc(8 * USWAP_PAGE_SIZE);
	uswap_id_t ids[KEEP] = {0};
	size_t np[KEEP];
	uint64_t sd[KEEP];

	for (unsigned i = 0; i < 6000; i++) {
		unsigned k = i % KEEP;

		if (ids[k]) {
			fill_pages(a, np[k], PK_TEXT, sd[k]);
			if (uswap_load(m->u, ids[k], b, np[k]) || memcmp(a, b, np[k] * USWAP_PAGE_SIZE))
				m->bad++;
			if (i % 3)
				continue; /* keep it: the pool fills and writes back */
			uswap_free(m->u, ids[k]);
			ids[k] = 0;
		}
		np[k] = 1 + i % 8;
		sd[k] = m->seed + k * 7919 + i;
		fill_pages(a, np[k], PK_TEXT, sd[k]);
		if (uswap_store(m->u, a, np[k], &ids[k]))
			ids[k] = 0;
		else
			m->stored++;
		if (i % 64 == 0)
			uswap_writeback(m->u, 0, 32);
	}
	free(a);
	free(b);
	return NULL;
}

/* Pool -> file writeback under pressure (background thread and explicit) with two threads at work. */
static void test_file_writeback_under_pressure(void)
{
	struct press_arg m[2];
	pthread_t t[2];
	struct uswap *u;
	struct uswap_stats st;

	CHECK_EQ(uswap_create(&u, "zpool:lz4:max=1M,file:size=128M"), 0);
	for (int i = 0; i < 2; i++) {
		m[i] = (struct press_arg){u, seed_for((uint64_t)i + 100) & 0xffffffffu, 0, 0};
		CHECK_EQ(pthread_create(&t[i], NULL, press_worker, &m[i]), 0);
	}
	for (int i = 0; i < 2; i++) {
		pthread_join(t[i], NULL);
		CHECK_EQ(m[i].bad, 0);
		CHECK(m[i].stored > 0);
	}
	CHECK_EQ(uswap_stats(u, &st), 0);
	CHECK(st.tier[1].writeback_in > 0);
	CHECK_EQ(st.csum_errors, 0);
	CHECK_EQ(st.io_errors, 0);
	check_destroy(u);
}

struct reader_arg {
	struct uswap *u;
	const uswap_id_t *ids;
	size_t n;
	_Atomic int *stop;
	int bad;
	long loads;
};

static void *reader(void *p)
{
	struct reader_arg *r = p;
	unsigned char *a = malloc(4 * USWAP_PAGE_SIZE), *b = malloc(4 * USWAP_PAGE_SIZE);
	uint64_t x = 1;

	while (!atomic_load(r->stop) || r->loads < 100) {
		size_t i = (size_t)((x = x * 6364136223846793005ull + 1) >> 33) % r->n;

		fill_pages(a, 4, PK_TEXT, seed_for(i));
		if (uswap_load(r->u, r->ids[i], b, 4) || memcmp(a, b, 4 * USWAP_PAGE_SIZE))
			r->bad++;
		r->loads++;
	}
	free(a);
	free(b);
	return NULL;
}

/* Folios of 4 text pages, folio i from seed_for(i), stored into @u. */
static void store_text_folios(struct uswap *u, uswap_id_t *ids, size_t n)
{
	unsigned char *a = malloc(4 * USWAP_PAGE_SIZE);

	for (size_t i = 0; i < n; i++) {
		fill_pages(a, 4, PK_TEXT, seed_for(i));
		CHECK_EQ(uswap_store(u, a, 4, &ids[i]), 0);
	}
	free(a);
}

/* Every folio of store_text_folios() loads back identical. */
static void check_text_folios(struct uswap *u, const uswap_id_t *ids, size_t n)
{
	unsigned char *a = malloc(4 * USWAP_PAGE_SIZE), *b = malloc(4 * USWAP_PAGE_SIZE);

	for (size_t i = 0; i < n; i++) {
		fill_pages(a, 4, PK_TEXT, seed_for(i));
		CHECK_EQ(uswap_load(u, ids[i], b, 4), 0);
		CHECK_MEM(a, b, 4 * USWAP_PAGE_SIZE);
	}
	free(a);
	free(b);
}

/* Two reader() threads over the folios of store_text_folios(). */
static void readers_start(struct reader_arg r[2], pthread_t t[2], struct uswap *u, const uswap_id_t *ids,
			  size_t n, _Atomic int *stop)
{
	for (int i = 0; i < 2; i++) {
		r[i] = (struct reader_arg){u, ids, n, stop, 0, 0};
		CHECK_EQ(pthread_create(&t[i], NULL, reader, &r[i]), 0);
	}
}

/* Stop them: each must have seen only identical data. */
static void readers_stop(struct reader_arg r[2], pthread_t t[2], _Atomic int *stop)
{
	atomic_store(stop, 1);
	for (int i = 0; i < 2; i++) {
		pthread_join(t[i], NULL);
		CHECK_EQ(r[i].bad, 0);
	}
}

/* Swapoff of the file tier, then of the pool, while two threads keep loading and checking. */
static void test_file_swapoff_while_loading(void)
{
	enum { N = 1500 };
	struct uswap_options o = {.tiers = "zpool:lz4:max=64M,file:size=64M", .no_background = 1};
	static uswap_id_t ids[N];
	struct reader_arg r[2];
	_Atomic int stop = 0;
	struct uswap_stats st;
	pthread_t t[2];
	struct uswap *u;

	CHECK_EQ(uswap_create_opts(&u, &o), 0);
	store_text_folios(u, ids, N);
	CHECK_EQ(uswap_writeback(u, 0, N * 4), N * 4);
	readers_start(r, t, u, ids, N, &stop);
	CHECK_EQ(uswap_swapoff(u, 1), 0); /* file -> pool */
	CHECK_EQ(uswap_stats(u, &st), 0);
	CHECK_EQ(st.tier[1].pages, 0);
	CHECK_EQ(st.tier[0].pages, N * 4);
	CHECK_EQ(uswap_swapon(u, 1), 0);
	CHECK_EQ(uswap_swapoff(u, 0), 0); /* pool -> file */
	CHECK_EQ(uswap_stats(u, &st), 0);
	CHECK_EQ(st.tier[0].pages, 0);
	CHECK_EQ(st.tier[1].pages, N * 4);
	readers_stop(r, t, &stop);
	check_text_folios(u, ids, N);
	check_destroy(u);
}

/*
 * Swapoff of a file holding plain pages, large enough for two movers (each compresses its half into
 * the pool, reading the file through its own readahead windows), while two threads load and check.
 */
static void test_file_swapoff_plain_two_movers(void)
{
	enum { N = 2500 }; /* folios of 4 pages: 10000 pages over 20 clusters */
	struct uswap_options o = {.tiers = "file:size=128M,zpool:lz4:max=128M", .no_background = 1};
	static uswap_id_t ids[N];
	struct reader_arg r[2];
	_Atomic int stop = 0;
	struct uswap_stats st;
	pthread_t t[2];
	struct uswap *u;

	CHECK_EQ(uswap_create_opts(&u, &o), 0);
	store_text_folios(u, ids, N);
	CHECK_EQ(uswap_stats(u, &st), 0);
	CHECK_EQ(st.tier[0].pages, N * 4);
	readers_start(r, t, u, ids, N, &stop);
	CHECK_EQ(uswap_swapoff(u, 0), 0);
	readers_stop(r, t, &stop);
	CHECK_EQ(uswap_stats(u, &st), 0);
	CHECK_EQ(st.tier[0].pages, 0);
	CHECK_EQ(st.tier[1].pages, N * 4);
	CHECK_EQ(st.csum_errors, 0);
	check_text_folios(u, ids, N);
	check_destroy(u);
}

/* EIO while writing back and while swapping off: the pages stay where they were, intact. */
static void test_file_eio_while_moving(void)
{
	enum { N = 64 };
	struct uswap_options o = {.tiers = "zpool:lz4:max=16M,fault(file:size=16M)", .no_background = 1};
	unsigned char *a = malloc(USWAP_PAGE_SIZE), *b = malloc(USWAP_PAGE_SIZE);
	uswap_id_t ids[N];
	struct uswap_stats st;
	struct uswap *u;

	CHECK_EQ(uswap_create_opts(&u, &o), 0);
	for (int i = 0; i < N; i++) {
		fill_page(a, PK_TEXT, seed_for((uint64_t)i));
		CHECK_EQ(uswap_store(u, a, 1, &ids[i]), 0);
	}
	backend_inject(testhook_tier(u, 1), true, 1, -EIO, true); /* every store into the file fails */
	CHECK(uswap_writeback(u, 0, N) <= 0);
	backend_inject(testhook_tier(u, 1), true, 0, 0, false);
	CHECK_EQ(uswap_stats(u, &st), 0);
	CHECK_EQ(st.tier[0].pages, N);
	CHECK_EQ(uswap_writeback(u, 0, N), N);
	backend_inject(testhook_tier(u, 1), false, 5, -EIO, false); /* the 5th read of swapoff fails */
	CHECK_EQ(uswap_swapoff(u, 1), 0); /* the catch-up pass moves the page that failed */
	backend_inject(testhook_tier(u, 1), false, 1, -EIO, true);
	CHECK_EQ(uswap_swapon(u, 1), 0);
	CHECK_EQ(uswap_writeback(u, 0, N), N);
	CHECK_EQ(uswap_swapoff(u, 1), -EIO); /* every read fails: nothing moves, nothing is lost */
	backend_inject(testhook_tier(u, 1), false, 0, 0, false);
	CHECK_EQ(uswap_stats(u, &st), 0);
	CHECK_EQ(st.tier[1].pages, N);
	for (int i = 0; i < N; i++) {
		fill_page(a, PK_TEXT, seed_for((uint64_t)i));
		CHECK_EQ(uswap_load(u, ids[i], b, 1), 0);
		CHECK_MEM(a, b, USWAP_PAGE_SIZE);
	}
	check_destroy(u);
	free(a);
	free(b);
}

/* Freed clusters go back to the file system in bulk (the file's blocks shrink). */
static void test_file_punch_in_bulk(void)
{
	enum { N = 48 };
	struct uswap_options o = {.tiers = "file:size=256M", .no_background = 1};
	unsigned char *a = malloc(512 * USWAP_PAGE_SIZE);
	uswap_id_t ids[N];
	struct file_layout fl;
	struct stat st0, st1;
	struct uswap *u;

	CHECK_EQ(uswap_create_opts(&u, &o), 0);
	fill_pages(a, 512, PK_RANDOM, seed_for(3));
	for (int i = 0; i < N; i++)
		CHECK_EQ(uswap_store(u, a, 512, &ids[i]), 0);
	CHECK_EQ(file_layout(testhook_tier(u, 0), &fl), 0);
	CHECK_EQ(fl.clusters_in_use, N);
	CHECK_EQ(fstat(fl.fd, &st0), 0);
	for (int i = 0; i < N; i++)
		CHECK_EQ(uswap_free(u, ids[i]), 0);
	uswap_maintain(u);
	CHECK_EQ(file_layout(testhook_tier(u, 0), &fl), 0);
	CHECK_EQ(fl.clusters_in_use, 0);
	CHECK(fl.punched_clusters >= N - 8);
	CHECK(fl.punch_calls < fl.punched_clusters); /* neighbours went in one call */
	CHECK_EQ(fstat(fl.fd, &st1), 0);
	CHECK((uint64_t)st1.st_blocks * 512 <= (uint64_t)st0.st_blocks * 512 - (uint64_t)(N - 8) * (2 << 20));
	check_destroy(u);
	free(a);
}

/* After destroy no data is left: a named file is gone, and an open descriptor to it reads nothing. */
static void test_file_nothing_left_after_destroy(void)
{
	char path[] = "/var/tmp/uswap-test-XXXXXX", spec[64];
	unsigned char *a = malloc(USWAP_PAGE_SIZE), *b = aligned_alloc(4096, USWAP_PAGE_SIZE);
	struct uswap *u;
	struct stat st;
	uswap_id_t id;
	int fd;

	fd = mkstemp(path);
	CHECK(fd >= 0);
	close(fd);
	unlink(path);
	snprintf(spec, sizeof(spec), "file:%s:size=8M", path);
	CHECK_EQ(uswap_create(&u, spec), 0);
	fd = reopen_tier_file(u, O_RDONLY);
	CHECK(fd >= 0);
	fill_page(a, PK_RANDOM, seed_for(9));
	CHECK_EQ(uswap_store(u, a, 1, &id), 0);
	uswap_maintain(u); /* the staged page is on the disk now */
	CHECK_EQ(pread(fd, b, USWAP_PAGE_SIZE, 0), USWAP_PAGE_SIZE);
	CHECK_MEM(a, b, USWAP_PAGE_SIZE); /* the holder of a descriptor saw it while live (root test) */
	check_destroy(u);
	CHECK_EQ(stat(path, &st), -1);
	CHECK_EQ(fstat(fd, &st), 0);
	CHECK_EQ(st.st_size, 0);
	CHECK_EQ(st.st_blocks, 0);
	CHECK_EQ(pread(fd, b, USWAP_PAGE_SIZE, 0), 0);
	close(fd);
	free(a);
	free(b);
}

/* Random folio sizes stored and freed for a long run: the file does not fragment into single slots. */
static void test_file_churn_fragmentation(void)
{
	enum { SLOTS = 2048, OPS = 30000 };
	struct uswap_options o = {.tiers = "file:size=64M", .no_background = 1};
	static uswap_id_t ids[SLOTS];
	static uint32_t np[SLOTS];
	unsigned char *a = malloc(512 * USWAP_PAGE_SIZE), *b = malloc(512 * USWAP_PAGE_SIZE);
	uint64_t x = seed_for(77), held = 0, stores = 0;
	struct file_layout fl;
	struct uswap_stats st;
	struct uswap *u;

	CHECK_EQ(uswap_create_opts(&u, &o), 0);
	for (int op = 0; op < OPS; op++) {
		size_t k = (size_t)((x = x * 6364136223846793005ull + 1) >> 33) % SLOTS;
		uint32_t r = (uint32_t)(x >> 20) % 100;

		if (ids[k]) {
			if (op % 16 == 0) {
				fill_pages(a, np[k], PK_RANDOM, seed_for(k * 1000 + np[k]));
				CHECK_EQ(uswap_load(u, ids[k], b, np[k]), 0);
				CHECK_MEM(a, b, np[k] * USWAP_PAGE_SIZE);
			}
			CHECK_EQ(uswap_free(u, ids[k]), 0);
			held -= np[k];
			ids[k] = 0;
			continue;
		}
		np[k] = r < 60 ? 1 : r < 90 ? 2 + r % 15 : r < 98 ? 16 + (uint32_t)(x >> 40) % 100 : 512;
		if (held + np[k] > 64 * 256 * 8 / 10)
			continue;
		fill_pages(a, np[k], PK_RANDOM, seed_for(k * 1000 + np[k]));
		if (uswap_store(u, a, np[k], &ids[k]) == 0) {
			held += np[k];
			stores++;
		} else {
			ids[k] = 0;
		}
	}
	CHECK_EQ(uswap_stats(u, &st), 0);
	CHECK_EQ(file_layout(testhook_tier(u, 0), &fl), 0);
	printf("     churn: %llu stores, %llu split, %.1f%% of the space in use is free slots\n",
	       (unsigned long long)stores, (unsigned long long)fl.split_stores,
	       100.0 - 100.0 * (double)st.tier[0].data_bytes / (double)st.tier[0].used_bytes);
	CHECK(fl.split_stores * 20 < stores);                     /* fewer than 5% of folios split */
	CHECK(st.tier[0].data_bytes * 2 > st.tier[0].used_bytes); /* clusters in use are mostly full */
	for (size_t k = 0; k < SLOTS; k++)
		if (ids[k])
			CHECK_EQ(uswap_free(u, ids[k]), 0);
	check_destroy(u);
	free(a);
	free(b);
}

/*
 * Write-behind of plain pages: small folios wait in the stage and go to the disk together. Loads (one
 * by one and in a vector), frees and slot reuse while pages are staged, a swapoff that finds pages still
 * staged, and everything again once they are written: each page exact.
 */
static void test_file_staged_plain(void)
{
	enum { NF = 300, PS = USWAP_PAGE_SIZE };
	struct uswap_options o = {.tiers = "file:size=16M,zpool:lz4:max=16M", .no_background = 1};
	unsigned char *a = malloc(64 * PS), *b = malloc(64 * PS);
	static uswap_id_t ids[NF];
	static size_t np[NF];
	uswap_id_t vid[8];
	uint32_t vidx[8];
	struct file_layout fl;
	struct uswap *u;
	uint64_t staged = 0;

	CHECK_EQ(uswap_create_opts(&u, &o), 0);
	for (size_t f = 0; f < NF; f++) {
		np[f] = f % 50 == 49 ? 40 : 1 + f % 3; /* 40 pages: written at once, not staged */
		fill_pages(a, np[f], f % 2 ? PK_RANDOM : PK_TEXT, seed_for(f));
		CHECK_EQ(uswap_store(u, a, np[f], &ids[f]), 0);
		staged += np[f] <= 32 ? np[f] : 0;
	}
	CHECK_EQ(file_layout(testhook_tier(u, 0), &fl), 0);
	CHECK_EQ(fl.staged_pages, staged);
	CHECK(fl.staged_now > 0);
	CHECK(fl.stage_writes * 16 < staged); /* written in batches, not page by page */
	for (size_t f = 0; f < NF; f++) {
		fill_pages(a, np[f], f % 2 ? PK_RANDOM : PK_TEXT, seed_for(f));
		CHECK_EQ(uswap_load(u, ids[f], b, np[f]), 0);
		CHECK_MEM(a, b, np[f] * PS);
	}
	/* One vector over the last folios (staged) and the first ones (on disk). */
	for (size_t k = 0; k < 8; k++) {
		size_t f = k < 4 ? NF - 1 - k : k;

		vid[k] = ids[f];
		vidx[k] = 0;
	}
	CHECK_EQ(uswap_load_vec(u, vid, vidx, 8, b), 8);
	for (size_t k = 0; k < 8; k++) {
		size_t f = k < 4 ? NF - 1 - k : k;

		fill_pages(a, np[f], f % 2 ? PK_RANDOM : PK_TEXT, seed_for(f));
		CHECK_MEM(a, b + k * PS, PS);
	}
	/* Free the staged folios at the end and store new ones: their slots come back while staged. */
	for (size_t f = NF - 20; f < NF; f++)
		CHECK_EQ(uswap_free(u, ids[f]), 0);
	for (size_t f = NF - 20; f < NF; f++) {
		fill_pages(a, np[f], PK_RANDOM, seed_for(f + 7000));
		CHECK_EQ(uswap_store(u, a, np[f], &ids[f]), 0);
	}
	for (int pass = 0; pass < 2; pass++) {
		for (size_t f = 0; f < NF; f++) {
			fill_pages(a, np[f],
				   f >= NF - 20 ? PK_RANDOM
				   : f % 2      ? PK_RANDOM
						: PK_TEXT,
				   seed_for(f >= NF - 20 ? f + 7000 : f));
			CHECK_EQ(uswap_load(u, ids[f], b, np[f]), 0);
			CHECK_MEM(a, b, np[f] * PS);
		}
		if (pass)
			break;
		uswap_maintain(u); /* written now: the same loads come from the disk */
		CHECK_EQ(file_layout(testhook_tier(u, 0), &fl), 0);
		CHECK_EQ(fl.staged_now, 0);
	}
	/* Staged text pages, then swapoff of the file into the pool: they move from the stage. */
	for (size_t f = 0; f < NF; f++)
		CHECK_EQ(uswap_free(u, ids[f]), 0);
	for (size_t f = 0; f < 40; f++) {
		fill_pages(a, 1, PK_TEXT, seed_for(f + 9000));
		CHECK_EQ(uswap_store(u, a, 1, &ids[f]), 0);
	}
	CHECK_EQ(file_layout(testhook_tier(u, 0), &fl), 0);
	CHECK(fl.staged_now > 0);
	CHECK_EQ(uswap_swapoff(u, 0), 0);
	for (size_t f = 0; f < 40; f++) {
		unsigned t = 9;
		uint64_t h = 0;

		CHECK_EQ(testhook_page(u, ids[f], 0, &t, &h), 0);
		CHECK_EQ(t, 1);
		fill_pages(a, 1, PK_TEXT, seed_for(f + 9000));
		CHECK_EQ(uswap_load(u, ids[f], b, 1), 0);
		CHECK_MEM(a, b, PS);
	}
	check_destroy(u);
	free(a);
	free(b);
}

CHECK_MAIN(T(test_file_roundtrip_folios), T(test_file_full_refuses), T(test_file_bad_spec),
	   T(test_file_writeback_and_swapoff), T(test_file_named_mode_and_corruption), T(test_file_threads),
	   T(test_file_injected_eio), T(test_file_every_folio_size), T(test_file_writeback_stays_compressed),
	   T(test_file_writeback_corruption_detected), T(test_file_load_vec),
	   T(test_file_writeback_under_pressure), T(test_file_swapoff_while_loading),
	   T(test_file_swapoff_plain_two_movers), T(test_file_eio_while_moving), T(test_file_punch_in_bulk),
	   T(test_file_nothing_left_after_destroy), T(test_file_churn_fragmentation),
	   T(test_file_staged_plain))
