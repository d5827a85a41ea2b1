/*
 * seal.c - XChaCha20-Poly1305 sealing of pages bound to (owner, handle); see seal.h.
 * The only file that calls libsodium: its int results become 0/-errno here.
 */
#include <assert.h>
#include <errno.h>
#include <string.h>

#include <sodium.h>

#include "seal.h"

static_assert(SEAL_NONCE_BYTES == crypto_aead_xchacha20poly1305_ietf_NPUBBYTES, "nonce size");
static_assert(SEAL_TAG_BYTES == crypto_aead_xchacha20poly1305_ietf_ABYTES, "tag size");
static_assert(crypto_aead_xchacha20poly1305_ietf_KEYBYTES == 32, "key size");

/* Associated data: owner (le32) || handle (le64), so a value only opens where it was sealed. */
static void seal_ad(unsigned char ad[12], uint32_t owner, uint64_t handle)
{
	for (int i = 0; i < 4; i++)
		ad[i] = (unsigned char)(owner >> (8 * i));
	for (int i = 0; i < 8; i++)
		ad[4 + i] = (unsigned char)(handle >> (8 * i));
}

int seal_init(struct sealer *s)
{
	s->key = NULL;
	if (sodium_init() < 0)
		return -EIO;
	s->key = sodium_malloc(crypto_aead_xchacha20poly1305_ietf_KEYBYTES);
	if (!s->key)
		return -ENOMEM;
	crypto_aead_xchacha20poly1305_ietf_keygen(s->key);
	sodium_mprotect_readonly(s->key);
	randombytes_buf(s->prefix, sizeof(s->prefix));
	atomic_init(&s->counter, 0);
	return 0;
}

void seal_destroy(struct sealer *s)
{
	sodium_free(s->key); /* wipes it first; NULL: nothing */
	s->key = NULL;
}

static void seal_nonce(const struct sealer *s, uint64_t n, unsigned char nonce[SEAL_NONCE_BYTES])
{
	memcpy(nonce, s->prefix, sizeof(s->prefix));
	for (int i = 0; i < 8; i++)
		nonce[16 + i] = (unsigned char)(n >> (8 * i));
}

int seal_page(struct sealer *s, uint32_t owner, uint64_t handle, const void *src, size_t len, void *dst)
{
	unsigned char *nonce = dst, ad[12];
	uint64_t n = atomic_fetch_add_explicit(&s->counter, 1, memory_order_relaxed);

	if (n == UINT64_MAX)
		return -EOVERFLOW;
	seal_nonce(s, n, nonce);
	seal_ad(ad, owner, handle);
	crypto_aead_xchacha20poly1305_ietf_encrypt(nonce + SEAL_NONCE_BYTES, NULL, src, len, ad, sizeof(ad),
						   NULL, nonce, s->key);
	return 0;
}

int seal_open(const struct sealer *s, uint32_t owner, uint64_t handle, const void *src, size_t sealed_len,
	      void *dst)
{
	const unsigned char *nonce = src;
	unsigned char ad[12];

	if (sealed_len < SEAL_OVERHEAD)
		return -EIO;
	seal_ad(ad, owner, handle);
	if (crypto_aead_xchacha20poly1305_ietf_decrypt(dst, NULL, NULL, nonce + SEAL_NONCE_BYTES,
						       sealed_len - SEAL_NONCE_BYTES, ad, sizeof(ad), nonce,
						       s->key))
		return -EIO;
	return 0;
}

int seal_page_detached(struct sealer *s, uint32_t owner, uint64_t handle, const void *src, size_t len,
		       void *dst, struct seal_tag *tag)
{
	unsigned char nonce[SEAL_NONCE_BYTES], ad[12];
	uint64_t n = atomic_fetch_add_explicit(&s->counter, 1, memory_order_relaxed);

	if (n == UINT64_MAX)
		return -EOVERFLOW;
	seal_nonce(s, n, nonce);
	seal_ad(ad, owner, handle);
	crypto_aead_xchacha20poly1305_ietf_encrypt_detached(dst, tag->mac, NULL, src, len, ad, sizeof(ad),
							    NULL, nonce, s->key);
	tag->counter = n;
	return 0;
}

int seal_open_detached(const struct sealer *s, uint32_t owner, uint64_t handle, const void *src, size_t len,
		       const struct seal_tag *tag, void *dst)
{
	unsigned char nonce[SEAL_NONCE_BYTES], ad[12];

	seal_nonce(s, tag->counter, nonce);
	seal_ad(ad, owner, handle);
	if (crypto_aead_xchacha20poly1305_ietf_decrypt_detached(dst, NULL, src, len, tag->mac, ad, sizeof(ad),
								nonce, s->key))
		return -EIO;
	return 0;
}
