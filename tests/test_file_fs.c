/*
 * test_file_fs.c - the swap-file tier on real, small storage: a tiny ext4 file system on a loop device
 * that fills up (ENOSPC from the file system, not from a hook), and a loop block device as the swap
 * "file". Needs root and mkfs.ext4/losetup; otherwise the binary skips (exit 77).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "uswap.h"

static char dir[] = "/var/tmp/uswap-fs-XXXXXX";
static char mnt[64], img[64], img2[64], loopdev[64];

static int run(const char *cmd)
{
	char full[600];

	snprintf(full, sizeof(full), "%s >/dev/null 2>&1", cmd);
	return system(full);
}

static void teardown(void);

/* Once per process, from whichever test runs first; undone at exit. */
static void setup(void)
{
	static int done;
	char cmd[512];
	FILE *p;

	if (done++)
		return;
	if (geteuid() != 0)
		check_skip("needs root (mounts a loop file system)");
	if (!mkdtemp(dir))
		check_skip("no temporary directory in /var/tmp");
	snprintf(mnt, sizeof(mnt), "%s/mnt", dir);
	snprintf(img, sizeof(img), "%s/fs.img", dir);
	snprintf(img2, sizeof(img2), "%s/dev.img", dir);
	mkdir(mnt, 0700);
	snprintf(cmd, sizeof(cmd), "truncate -s 8M %s && mkfs.ext4 -q -F %s && mount -o loop %s %s", img, img,
		 img, mnt);
	if (run(cmd)) {
		rmdir(mnt);
		unlink(img);
		rmdir(dir);
		check_skip("cannot make and mount a loop ext4 file system");
	}
	atexit(teardown);
	snprintf(cmd, sizeof(cmd), "truncate -s 32M %s && losetup -f --show %s", img2, img2);
	p = popen(cmd, "r");
	if (!p || !fgets(loopdev, sizeof(loopdev), p))
		loopdev[0] = '\0';
	if (p)
		pclose(p);
	loopdev[strcspn(loopdev, "\n")] = '\0';
}

static void teardown(void)
{
	char cmd[128];

	if (loopdev[0]) {
		snprintf(cmd, sizeof(cmd), "losetup -d %s", loopdev);
		run(cmd);
	}
	umount(mnt);
	rmdir(mnt);
	unlink(img);
	unlink(img2);
	rmdir(dir);
}

/* The file system fills: the file tier refuses with ENOSPC, and what it holds stays intact. */
static void test_fs_enospc_alone(void)
{
	enum { MAX = 4096 };
	char spec[128];
	static uswap_id_t ids[MAX];
	unsigned char *a = malloc(4 * USWAP_PAGE_SIZE), *b = malloc(4 * USWAP_PAGE_SIZE);
	struct uswap *u;
	int n = 0, ret = 0;
	setup();

	snprintf(spec, sizeof(spec), "file:%s/swap:size=64M", mnt);
	CHECK_EQ(uswap_create(&u, spec), 0);
	while (n < MAX) {
		fill_pages(a, 4, PK_RANDOM, seed_for((uint64_t)n));
		ret = uswap_store(u, a, 4, &ids[n]);
		if (ret)
			break;
		n++;
	}
	CHECK_EQ(ret, -ENOSPC); /* 8 MiB of file system, 64 MiB of file: the file system said so */
	CHECK(n > 0 && n < MAX);
	CHECK_EQ(uswap_store(u, a, 4, &ids[n]), -ENOSPC); /* and keeps saying so */
	for (int i = 0; i < n; i++) {
		fill_pages(a, 4, PK_RANDOM, seed_for((uint64_t)i));
		CHECK_EQ(uswap_load(u, ids[i], b, 4), 0);
		CHECK_MEM(a, b, 4 * USWAP_PAGE_SIZE);
	}
	/* freed space is usable again */
	for (int i = 0; i < n; i++)
		CHECK_EQ(uswap_free(u, ids[i]), 0);
	uswap_maintain(u);
	CHECK_EQ(uswap_store(u, a, 4, &ids[0]), 0);
	check_destroy(u);
	free(a);
	free(b);
}

/* A full file passes pages to the next tier; writeback into it refuses and the pool keeps them. */
static void test_fs_enospc_next_tier(void)
{
	enum { N = 3000 };
	char spec[160];
	static uswap_id_t ids[N];
	unsigned char *a = malloc(USWAP_PAGE_SIZE), *b = malloc(USWAP_PAGE_SIZE);
	struct uswap_options o = {.tiers = spec, .no_background = 1};
	struct uswap_stats st;
	struct uswap *u;
	setup();

	snprintf(spec, sizeof(spec), "file:%s/swap2:size=64M,zpool:lz4:max=64M", mnt);
	CHECK_EQ(uswap_create_opts(&u, &o), 0);
	for (int i = 0; i < N; i++) {
		fill_page(a, PK_TEXT, seed_for((uint64_t)i + 7));
		CHECK_EQ(uswap_store(u, a, 1, &ids[i]), 0);
	}
	CHECK_EQ(uswap_stats(u, &st), 0);
	CHECK(st.tier[0].pages > 0 && st.tier[0].pages < N);
	CHECK_EQ(st.tier[0].pages + st.tier[1].pages, N);
	CHECK(st.tier[0].rejects > 0);
	for (int i = 0; i < N; i++) {
		fill_page(a, PK_TEXT, seed_for((uint64_t)i + 7));
		CHECK_EQ(uswap_load(u, ids[i], b, 1), 0);
		CHECK_MEM(a, b, USWAP_PAGE_SIZE);
	}
	/* swapoff of the pool into the full file: what does not fit stays, intact, and is reported */
	CHECK_EQ(uswap_swapoff(u, 1), -ENOSPC);
	for (int i = 0; i < N; i++) {
		fill_page(a, PK_TEXT, seed_for((uint64_t)i + 7));
		CHECK_EQ(uswap_load(u, ids[i], b, 1), 0);
		CHECK_MEM(a, b, USWAP_PAGE_SIZE);
	}
	check_destroy(u);
	free(a);
	free(b);
}

/* A block device as the swap file: folios round-trip, writeback and swapoff keep data. */
static void test_fs_block_device(void)
{
	enum { N = 200 };
	char spec[128];
	uswap_id_t ids[N];
	unsigned char *a = malloc(8 * USWAP_PAGE_SIZE), *b = malloc(8 * USWAP_PAGE_SIZE);
	struct uswap_options o = {.tiers = spec, .no_background = 1};
	struct uswap *u;
	setup();

	if (!loopdev[0]) {
		printf("     (no loop device: skipped)\n");
		return;
	}
	snprintf(spec, sizeof(spec), "zpool:lz4:max=4M,file:%s", loopdev);
	CHECK_EQ(uswap_create_opts(&u, &o), 0);
	for (int i = 0; i < N; i++) {
		fill_pages(a, 8, i % 2 ? PK_RANDOM : PK_TEXT, seed_for((uint64_t)i));
		CHECK_EQ(uswap_store(u, a, 8, &ids[i]), 0);
	}
	CHECK(uswap_writeback(u, 0, N * 8) > 0);
	for (int i = 0; i < N; i++) {
		fill_pages(a, 8, i % 2 ? PK_RANDOM : PK_TEXT, seed_for((uint64_t)i));
		CHECK_EQ(uswap_load(u, ids[i], b, 8), 0);
		CHECK_MEM(a, b, 8 * USWAP_PAGE_SIZE);
	}
	check_destroy(u);
	free(a);
	free(b);
}

CHECK_MAIN(T(test_fs_enospc_alone), T(test_fs_enospc_next_tier), T(test_fs_block_device))
