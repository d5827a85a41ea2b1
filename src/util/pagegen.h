/*
 * pagegen.h - synthetic page contents for benchmarks and tests: zero, same-filled, text-like (words,
 * numbers and punctuation, compressing about like program text and heap strings) and random.
 */
#ifndef USWAP_PAGEGEN_H
#define USWAP_PAGEGEN_H

#include <stddef.h>
#include <stdint.h>

enum pagegen_kind { PG_ZERO, PG_SAME, PG_TEXT, PG_RANDOM };

static inline uint64_t pagegen_mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

void pagegen_fill(void *page, enum pagegen_kind kind, uint64_t seed);
/* The kind of page @i of the standard mix (10% zero, 10% same, 60% text, 20% random), by seed. */
enum pagegen_kind pagegen_mix_kind(uint64_t seed);

#endif
