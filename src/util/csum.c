/*
 * csum.c - page checksum: four lanes of (acc ^ w) * odd constant, folded at the end.
 * Multiplying by an odd constant is a bijection on 64 bits, so a change in one word changes its lane's
 * accumulator for good; the fold mixes lanes so that two changes are caught with ~2^-32 miss odds.
 */
#include "util/csum.h"

#include <assert.h>
#include <string.h>

#define K0 0x9e3779b97f4a7c15ull
#define K1 0xc2b2ae3d27d4eb4full
#define K2 0x165667b19e3779f9ull
#define K3 0x27d4eb2f165667c5ull

static inline uint64_t rd64(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

static inline uint64_t mix(uint64_t h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ull;
	h ^= h >> 33;
	return h;
}

static uint32_t fold(uint64_t a, uint64_t b, uint64_t c, uint64_t d, size_t len)
{
	uint64_t h = mix(a ^ len) + mix(b + K1) * 3 + mix(c + K2) * 5 + mix(d + K3) * 7;

	h = mix(h);
	return (uint32_t)(h ^ (h >> 32));
}

uint32_t csum_page(const void *p, size_t len, bool *same, uint64_t *word)
{
	const unsigned char *s = p;
	uint64_t a = K0, b = K1, c = K2, d = K3;
	uint64_t first, diff = 0;

	assert(len % 32 == 0 && len > 0);
	first = rd64(s);
	for (size_t i = 0; i < len; i += 32) {
		uint64_t w0 = rd64(s + i), w1 = rd64(s + i + 8), w2 = rd64(s + i + 16), w3 = rd64(s + i + 24);

		diff |= (w0 ^ first) | (w1 ^ first) | (w2 ^ first) | (w3 ^ first);
		a = (a ^ w0) * K0;
		b = (b ^ w1) * K1;
		c = (c ^ w2) * K2;
		d = (d ^ w3) * K3;
		a ^= a >> 29;
		b ^= b >> 29;
		c ^= c >> 29;
		d ^= d >> 29;
	}
	*same = diff == 0;
	*word = first;
	return fold(a, b, c, d, len);
}

uint32_t csum_buf(const void *p, size_t len)
{
	bool same;
	uint64_t word;

	return csum_page(p, len, &same, &word);
}
