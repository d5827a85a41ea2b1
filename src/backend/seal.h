/*
 * seal.h - authenticated encryption of pages before they leave the process (remote tier, file tier).
 *
 * XChaCha20-Poly1305 (libsodium). One random key per sealer, kept only in this process's memory.
 * A sealed page is nonce || ciphertext || tag; the associated data binds it to (owner, handle), so a
 * replayed old value or another page's value fails to open. Nonces are a random 16-byte prefix chosen
 * with the key plus a 64-bit counter: they never repeat under one key.
 */
#ifndef USWAP_SEAL_H
#define USWAP_SEAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define SEAL_NONCE_BYTES 24
#define SEAL_TAG_BYTES   16
#define SEAL_OVERHEAD    (SEAL_NONCE_BYTES + SEAL_TAG_BYTES)

/*
 * The key lives in pages of its own (libsodium's sodium_malloc()): locked in memory where the
 * process's RLIMIT_MEMLOCK allows, left out of core dumps (MADV_DONTDUMP), between guard pages, and
 * read-only once made; it never leaves the process and is wiped when the sealer is destroyed.
 */
struct sealer {
	unsigned char *key;       /* 32 bytes; NULL before seal_init() */
	unsigned char prefix[16]; /* nonce bytes 0..15; bytes 16..23 are the counter */
	_Atomic uint64_t counter;
};

/*
 * Context: may block once for libsodium's initialisation. Return: 0; -EIO if no randomness; -ENOMEM
 * no pages for the key.
 */
int seal_init(struct sealer *s);
/* Wipes the key and frees its pages (nothing if seal_init() did not run or failed). */
void seal_destroy(struct sealer *s);
/*
 * Context: any thread, no allocation. Seal @len bytes at @src into @dst (@len + SEAL_OVERHEAD bytes).
 * Return: 0; -EOVERFLOW if the nonce counter is exhausted.
 */
int seal_page(struct sealer *s, uint32_t owner, uint64_t handle, const void *src, size_t len, void *dst);
/*
 * Context: any thread, no allocation. Open @sealed_len bytes at @src into @dst (@sealed_len -
 * SEAL_OVERHEAD bytes). Return: 0; -EIO if forged, corrupt, or sealed for another (owner, handle).
 */
int seal_open(const struct sealer *s, uint32_t owner, uint64_t handle, const void *src, size_t sealed_len,
	      void *dst);

/*
 * Detached form, for a tier whose slot holds exactly the page (the file tier): the ciphertext has the
 * page's size and what makes it openable stays in the caller's memory, so replaying an old ciphertext
 * of the same slot fails too.
 */
struct seal_tag {
	uint64_t counter; /* nonce bytes 16..23 */
	unsigned char mac[SEAL_TAG_BYTES];
};

/* Context: any thread, no allocation. Return: 0; -EOVERFLOW if the nonce counter is exhausted. */
int seal_page_detached(struct sealer *s, uint32_t owner, uint64_t handle, const void *src, size_t len,
		       void *dst, struct seal_tag *tag);
/* Context: any thread, no allocation. Return: 0; -EIO if forged, corrupt, or sealed for another binding. */
int seal_open_detached(const struct sealer *s, uint32_t owner, uint64_t handle, const void *src, size_t len,
		       const struct seal_tag *tag, void *dst);

#endif
