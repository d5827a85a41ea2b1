/*
 * test_redis.c - the remote tier's page sealing (seal.c); the Redis tier itself is not written yet.
 */
#include <errno.h>

#include "../src/backend/backend.h"
#include "../src/backend/seal.h"
#include "check.h"

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
	CHECK_EQ(seal_open(&s, 4, 9, sealed, sizeof(sealed), back), -EIO);  /* another owner's value */
	CHECK_EQ(seal_open(&s, 3, 10, sealed, sizeof(sealed), back), -EIO); /* an older/newer version */
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

CHECK_MAIN(T(test_seal_roundtrip_every_kind), T(test_seal_rejects_wrong_binding_and_tamper),
	   T(test_seal_nonces_differ))
