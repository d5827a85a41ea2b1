/* test_file.c - round trips through the swap-file tier, alone and below the compressed pool. */
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "uswap.h"
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
	static const size_t sizes[] = { 1, 2, 3, 16, 100, 512 };
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
	uswap_destroy(u);
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
	uswap_destroy(u);
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
	uswap_destroy(u);
	free(a);
	free(b);
}

/* A named file is created 0600; bytes changed behind the layer's back make the load fail. */
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
	CHECK_EQ(stat(path, &st), 0);
	CHECK_EQ(st.st_mode & 0777, 0600);
	fill(a, USWAP_PAGE_SIZE, 99);
	CHECK_EQ(uswap_store(u, a, 1, &id), 0);
	fd = open(path, O_WRONLY);
	CHECK(fd >= 0);
	memset(b, 0x5a, USWAP_PAGE_SIZE);
	CHECK_EQ(pwrite(fd, b, USWAP_PAGE_SIZE, 0), USWAP_PAGE_SIZE); /* slot 0: the first store */
	close(fd);
	CHECK_EQ(uswap_load(u, id, b, 1), -EBADMSG);
	uswap_destroy(u);
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
		m[i] = (struct mt_arg){ u, 1000u * (unsigned)(i + 1), 0 };
		CHECK_EQ(pthread_create(&t[i], NULL, mt_worker, &m[i]), 0);
	}
	for (int i = 0; i < 2; i++) {
		pthread_join(t[i], NULL);
		CHECK_EQ(m[i].bad, 0);
	}
	uswap_destroy(u);
}

/* EIO on a file store: the page is refused and stays with the caller; EIO on load is reported. */
static void test_file_injected_eio(void)
{
	unsigned char *a = malloc(USWAP_PAGE_SIZE), *b = malloc(USWAP_PAGE_SIZE);
	struct uswap *u;
	uswap_id_t id;

	fill(a, USWAP_PAGE_SIZE, 5);
	CHECK_EQ(uswap_create(&u, "file:size=1M"), 0);
	backend_inject(testhook_tier(u, 0), true, 1, -EIO, false);
	CHECK(uswap_store(u, a, 1, &id) < 0);
	CHECK_EQ(uswap_store(u, a, 1, &id), 0);
	backend_inject(testhook_tier(u, 0), false, 1, -EIO, false);
	CHECK_EQ(uswap_load(u, id, b, 1), -EIO);
	CHECK(strstr(uswap_errmsg(), "swap id") != NULL); /* reported with the swap id */
	CHECK_EQ(uswap_load(u, id, b, 1), 0);
	CHECK_MEM(a, b, USWAP_PAGE_SIZE);
	uswap_destroy(u);
	free(a);
	free(b);
}

CHECK_MAIN(T(test_file_roundtrip_folios), T(test_file_full_refuses), T(test_file_bad_spec),
	   T(test_file_writeback_and_swapoff),
	   T(test_file_named_mode_and_corruption),
	   T(test_file_threads),
	   T(test_file_injected_eio))
