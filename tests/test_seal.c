/*
 * test_seal.c - page sealing (seal.c): round trips, bindings, tampering, both forms; and the file
 * tier's encrypt option: ciphertext on disk, altered or swapped blocks detected, writeback and swapoff
 * through a sealed file.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#include "uswap.h"

#include "../src/backend/backend.h"
#include "../src/backend/file.h"
#include "../src/backend/seal.h"
#include "check.h"
#include "core/testhook.h"

/* The VmFlags line of /proc/self/smaps for the mapping that holds @addr ("" if none). */
static void vm_flags(const void *addr, char *out, size_t len)
{
	char line[512];
	bool in = false;
	FILE *f = fopen("/proc/self/smaps", "r");

	out[0] = 0;
	while (f && fgets(line, sizeof(line), f)) {
		unsigned long a, b;

		if (sscanf(line, "%lx-%lx ", &a, &b) == 2) /* a mapping's first line */
			in = (uintptr_t)addr >= a && (uintptr_t)addr < b;
		else if (in && !strncmp(line, "VmFlags:", 8))
			snprintf(out, len, "%.200s", line + 8);
	}
	if (f)
		fclose(f);
}

/*
 * The key: in pages of its own, left out of core dumps, read-only (and locked where RLIMIT_MEMLOCK
 * allows, as root here); gone when the sealer is.
 */
static void test_seal_key_pages(void)
{
	struct sealer s;
	char flags[256];

	CHECK_EQ(seal_init(&s), 0);
	CHECK(s.key != NULL);
	vm_flags(s.key, flags, sizeof(flags));
	if (!strstr(flags, " dd"))
		fprintf(stderr, "key pages: VmFlags%s", flags);
	CHECK(strstr(flags, " dd") != NULL); /* MADV_DONTDUMP */
	CHECK(strstr(flags, " rd") != NULL && !strstr(flags, " wr"));
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
	/* mlock()ed (the sanitizers' runtimes turn mlock() into nothing) */
	if (geteuid() == 0)
		CHECK(strstr(flags, " lo") != NULL);
#endif
	seal_destroy(&s);
	CHECK(s.key == NULL);
	seal_destroy(&s); /* twice, or after a failed init: nothing */
}

static void test_seal_roundtrip_every_kind(void)
{
	static unsigned char page[PAGE_SIZE], sealed[PAGE_SIZE + SEAL_OVERHEAD], back[PAGE_SIZE];
	struct sealer s;

	CHECK_EQ(seal_init(&s), 0);
	for (int kind = PK_ZERO; kind <= PK_MIXED; kind++) {
		fill_page(page, kind, seed_for(kind));
		CHECK_EQ(seal_page(&s, 7, 1000 + kind, page, PAGE_SIZE, sealed), 0);
		CHECK(memcmp(sealed + SEAL_NONCE_BYTES, page, 64) != 0); /* not in the clear */
		memset(back, 0xa5, sizeof(back));
		CHECK_EQ(seal_open(&s, 7, 1000 + kind, sealed, sizeof(sealed), back), 0);
		CHECK_MEM(page, back, PAGE_SIZE);
	}
	seal_destroy(&s);
}

static void test_seal_rejects_wrong_binding_and_tamper(void)
{
	static unsigned char page[PAGE_SIZE], sealed[PAGE_SIZE + SEAL_OVERHEAD], back[PAGE_SIZE];
	struct sealer s, other;

	CHECK_EQ(seal_init(&s), 0);
	CHECK_EQ(seal_init(&other), 0);
	fill_page(page, PK_RANDOM, seed_for(42));
	CHECK_EQ(seal_page(&s, 3, 9, page, PAGE_SIZE, sealed), 0);
	CHECK_EQ(seal_open(&s, 4, 9, sealed, sizeof(sealed), back), -EIO);     /* another owner's value */
	CHECK_EQ(seal_open(&s, 3, 10, sealed, sizeof(sealed), back), -EIO);    /* an older/newer version */
	CHECK_EQ(seal_open(&other, 3, 9, sealed, sizeof(sealed), back), -EIO); /* another key */
	CHECK_EQ(seal_open(&s, 3, 9, sealed, SEAL_OVERHEAD - 1, back), -EIO);
	for (size_t off = 0; off < sizeof(sealed); off += 517) {
		sealed[off] ^= 1;
		CHECK_EQ(seal_open(&s, 3, 9, sealed, sizeof(sealed), back), -EIO);
		sealed[off] ^= 1;
	}
	CHECK_EQ(seal_open(&s, 3, 9, sealed, sizeof(sealed), back), 0);
	CHECK_MEM(page, back, PAGE_SIZE);
	seal_destroy(&s);
	seal_destroy(&other);
}

static void test_seal_nonces_differ(void)
{
	static unsigned char page[PAGE_SIZE], a[PAGE_SIZE + SEAL_OVERHEAD], b[PAGE_SIZE + SEAL_OVERHEAD];
	struct sealer s;

	CHECK_EQ(seal_init(&s), 0);
	fill_page(page, PK_TEXT, seed_for(1));
	CHECK_EQ(seal_page(&s, 1, 1, page, PAGE_SIZE, a), 0);
	CHECK_EQ(seal_page(&s, 1, 1, page, PAGE_SIZE, b), 0);
	CHECK(memcmp(a, b, SEAL_NONCE_BYTES) != 0);
	CHECK(memcmp(a + SEAL_NONCE_BYTES, b + SEAL_NONCE_BYTES, PAGE_SIZE) != 0);
	seal_destroy(&s);
}

static void test_seal_detached(void)
{
	static unsigned char page[PAGE_SIZE], ct[PAGE_SIZE], back[PAGE_SIZE];
	struct seal_tag tag, old;
	struct sealer s;

	CHECK_EQ(seal_init(&s), 0);
	fill_page(page, PK_TEXT, seed_for(11));
	CHECK_EQ(seal_page_detached(&s, 5, 77, page, PAGE_SIZE, ct, &tag), 0);
	CHECK(memcmp(ct, page, PAGE_SIZE) != 0);
	CHECK_EQ(seal_open_detached(&s, 5, 77, ct, PAGE_SIZE, &tag, back), 0);
	CHECK_MEM(page, back, PAGE_SIZE);
	CHECK_EQ(seal_open_detached(&s, 6, 77, ct, PAGE_SIZE, &tag, back), -EIO);
	CHECK_EQ(seal_open_detached(&s, 5, 78, ct, PAGE_SIZE, &tag, back), -EIO);
	ct[4000] ^= 0x80;
	CHECK_EQ(seal_open_detached(&s, 5, 77, ct, PAGE_SIZE, &tag, back), -EIO);
	ct[4000] ^= 0x80;
	/* the same slot sealed again: the old ciphertext does not open with the new tag */
	old = tag;
	CHECK_EQ(seal_page_detached(&s, 5, 77, page, PAGE_SIZE, back, &tag), 0);
	CHECK(old.counter != tag.counter);
	CHECK_EQ(seal_open_detached(&s, 5, 77, ct, PAGE_SIZE, &tag, back), -EIO);
	seal_destroy(&s);
}

/*
 * The file of tier @tier opened again through /proc/self/fd: a named swap file has no name once the
 * tier has opened it. Return: a descriptor, or -1.
 */
static int open_tier_file(struct uswap *u, unsigned tier, int flags)
{
	struct file_layout fl;
	char proc[64];

	if (file_layout(testhook_tier(u, tier), &fl))
		return -1;
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fl.fd);
	return open(proc, flags);
}

/* A named sealed swap file (on /var/tmp rather than $TMPDIR), whose blocks the test reads and alters. */
static struct uswap *open_sealed(char *path, size_t pathlen, const char *fmt)
{
	struct uswap_options o = {.no_background = 1};
	struct uswap *u = NULL;
	char spec[160];
	int fd;

	snprintf(path, pathlen, "/var/tmp/uswap-seal-XXXXXX");
	fd = mkstemp(path);
	CHECK(fd >= 0);
	if (fd < 0)
		return NULL;
	close(fd);
	unlink(path);
	snprintf(spec, sizeof(spec), fmt, path);
	o.tiers = spec;
	CHECK_EQ(uswap_create_opts(&u, &o), 0);
	return u;
}

static void test_file_encrypt_roundtrip_ciphertext_on_disk(void)
{
	static const size_t sizes[] = {1, 3, 16, 512};
	unsigned char *a = malloc(512 * PAGE_SIZE), *b = malloc(512 * PAGE_SIZE + 1), disk[PAGE_SIZE];
	uswap_id_t ids[4];
	char path[64];
	struct uswap *u = open_sealed(path, sizeof(path), "file:%s:size=16M:encrypt");
	unsigned tier = 9;
	uint64_t h = 0;
	int fd;

	if (!u)
		goto out;
	for (size_t i = 0; i < 4; i++) {
		/* from an unaligned copy first (sealing reads any source), then from the aligned one */
		fill_pages(b + 1, sizes[i], PK_TEXT, seed_for(20 + i));
		fill_pages(a, sizes[i], PK_TEXT, seed_for(20 + i));
		CHECK_EQ(uswap_store(u, b + 1, sizes[i], &ids[i]), 0);
		memset(b, 0, sizes[i] * PAGE_SIZE);
		CHECK_EQ(uswap_load(u, ids[i], b, sizes[i]), 0);
		CHECK_MEM(a, b, sizes[i] * PAGE_SIZE);
		CHECK_EQ(uswap_free(u, ids[i]), 0);
		CHECK_EQ(uswap_store(u, a, sizes[i], &ids[i]), 0);
	}
	uswap_maintain(u); /* the staged pages are on the disk now */
	fd = open_tier_file(u, 0, O_RDONLY);
	CHECK(fd >= 0);
	for (size_t i = 0; i < 4; i++) {
		fill_pages(a, sizes[i], PK_TEXT, seed_for(20 + i));
		memset(b, 0, sizes[i] * PAGE_SIZE);
		CHECK_EQ(uswap_load(u, ids[i], b, sizes[i]), 0);
		CHECK_MEM(a, b, sizes[i] * PAGE_SIZE);
		for (unsigned j = 0; j < sizes[i]; j += 5) { /* what the file holds is not the page */
			CHECK_EQ(testhook_page(u, ids[i], j, &tier, &h), 0);
			CHECK_EQ(pread(fd, disk, PAGE_SIZE, (off_t)(h * PAGE_SIZE)), PAGE_SIZE);
			CHECK(memcmp(disk, a + j * PAGE_SIZE, 64) != 0);
			CHECK(memmem(disk, PAGE_SIZE, a + j * PAGE_SIZE + 1000, 16) == NULL);
		}
	}
	if (fd >= 0)
		close(fd);
	check_destroy(u);
	CHECK(uswap_create(&u, "file:size=1M:encrypt=yes") < 0);
out:
	free(a);
	free(b);
}

/* A byte flipped in a block, and two blocks swapped: the seal fails (-EIO), before any checksum. */
static void test_file_encrypt_altered_blocks_detected(void)
{
	unsigned char a[PAGE_SIZE], b[PAGE_SIZE], blk[2][PAGE_SIZE];
	uswap_id_t ids[3];
	char path[64];
	struct uswap *u = open_sealed(path, sizeof(path), "file:%s:size=4M:encrypt");
	uint64_t h[3] = {0};
	unsigned tier = 9;
	int fd;

	if (!u)
		return;
	for (int i = 0; i < 3; i++) {
		fill_page(a, PK_RANDOM, seed_for(40 + (uint64_t)i));
		CHECK_EQ(uswap_store(u, a, 1, &ids[i]), 0);
		CHECK_EQ(testhook_page(u, ids[i], 0, &tier, &h[i]), 0);
	}
	uswap_maintain(u); /* the staged pages are on the disk now */
	fd = open_tier_file(u, 0, O_RDWR);
	CHECK(fd >= 0);
	if (fd < 0)
		goto out;
	/* page 0: one byte altered */
	CHECK_EQ(pread(fd, blk[0], PAGE_SIZE, (off_t)(h[0] * PAGE_SIZE)), PAGE_SIZE);
	blk[0][1234] ^= 0x01;
	CHECK_EQ(pwrite(fd, blk[0], PAGE_SIZE, (off_t)(h[0] * PAGE_SIZE)), PAGE_SIZE);
	/* pages 1 and 2: their blocks swapped */
	CHECK_EQ(pread(fd, blk[0], PAGE_SIZE, (off_t)(h[1] * PAGE_SIZE)), PAGE_SIZE);
	CHECK_EQ(pread(fd, blk[1], PAGE_SIZE, (off_t)(h[2] * PAGE_SIZE)), PAGE_SIZE);
	CHECK_EQ(pwrite(fd, blk[1], PAGE_SIZE, (off_t)(h[1] * PAGE_SIZE)), PAGE_SIZE);
	CHECK_EQ(pwrite(fd, blk[0], PAGE_SIZE, (off_t)(h[2] * PAGE_SIZE)), PAGE_SIZE);
	fsync(fd);
	for (int i = 0; i < 3; i++) {
		fill_page(a, PK_RANDOM, seed_for(40 + (uint64_t)i));
		memset(b, 0, PAGE_SIZE);
		CHECK_EQ(uswap_load(u, ids[i], b, 1), -EIO);
		CHECK(strstr(uswap_errmsg(), "swap id") != NULL);
		CHECK(memcmp(a, b, PAGE_SIZE) != 0);
	}
	/* put page 1's block back: it opens again */
	CHECK_EQ(pwrite(fd, blk[0], PAGE_SIZE, (off_t)(h[1] * PAGE_SIZE)), PAGE_SIZE);
	fill_page(a, PK_RANDOM, seed_for(41));
	CHECK_EQ(uswap_load(u, ids[1], b, 1), 0);
	CHECK_MEM(a, b, PAGE_SIZE);
	close(fd);
out:
	check_destroy(u);
}

/* Writeback from the pool into a sealed file stores plain sealed pages (no packed, clear objects). */
static void test_file_encrypt_writeback_and_swapoff(void)
{
	enum { N = 600 };
	unsigned char a[PAGE_SIZE], b[PAGE_SIZE];
	static uswap_id_t ids[N];
	struct file_layout fl;
	char path[64];
	struct uswap *u = open_sealed(path, sizeof(path), "zpool:lz4:max=64M,file:%s:size=16M:encrypt");

	if (!u)
		return;
	for (int i = 0; i < N; i++) {
		fill_page(a, PK_TEXT, seed_for(5000 + (uint64_t)i));
		CHECK_EQ(uswap_store(u, a, 1, &ids[i]), 0);
	}
	CHECK_EQ(uswap_writeback(u, 0, N), N);
	CHECK_EQ(file_layout(testhook_tier(u, 1), &fl), 0);
	CHECK_EQ(fl.used_sectors, 0);
	CHECK_EQ(fl.used_pages, N);
	for (int i = 0; i < N; i++) {
		fill_page(a, PK_TEXT, seed_for(5000 + (uint64_t)i));
		CHECK_EQ(uswap_load(u, ids[i], b, 1), 0);
		CHECK_MEM(a, b, PAGE_SIZE);
	}
	CHECK_EQ(uswap_swapoff(u, 1), 0); /* read back through the readahead windows, opened */
	CHECK_EQ(file_layout(testhook_tier(u, 1), &fl), 0);
	CHECK_EQ(fl.used_pages, 0);
	for (int i = 0; i < N; i++) {
		fill_page(a, PK_TEXT, seed_for(5000 + (uint64_t)i));
		CHECK_EQ(uswap_load(u, ids[i], b, 1), 0);
		CHECK_MEM(a, b, PAGE_SIZE);
	}
	check_destroy(u);
}

CHECK_MAIN(T(test_seal_key_pages), T(test_seal_roundtrip_every_kind),
	   T(test_seal_rejects_wrong_binding_and_tamper), T(test_seal_nonces_differ), T(test_seal_detached),
	   T(test_file_encrypt_roundtrip_ciphertext_on_disk), T(test_file_encrypt_altered_blocks_detected),
	   T(test_file_encrypt_writeback_and_swapoff))
