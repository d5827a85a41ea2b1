/*
 * mutate.c - the fuzz tests' seeded mutator; see mutate.h.
 */
#include "mutate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

uint64_t mut_seed(const char *test)
{
	const char *env = getenv("USWAP_FUZZ_SEED");
	uint64_t seed = env && *env ? strtoull(env, NULL, 0) : seed_for(0x6675) % 1000000000;

	printf("%s: fuzz seed %llu (USWAP_FUZZ_SEED=%llu %s replays)\n", test, (unsigned long long)seed,
	       (unsigned long long)seed, test);
	fflush(stdout);
	return seed;
}

unsigned long mut_iterations(unsigned long base)
{
	const char *env = getenv("USWAP_FUZZ_SCALE");
	unsigned long scale = env && *env ? strtoul(env, NULL, 0) : 1;

	return base * (scale ? scale : 1);
}

void mut_init(struct mutator *m, uint64_t seed)
{
	memset(m, 0, sizeof(*m));
	m->state = seed ^ 0x9e3779b97f4a7c15ull;
}

void mut_start(struct mutator *m, const char *test, const char *const *dict, size_t nr_dict,
	       const char *const *corpus, size_t nr_corpus)
{
	mut_init(m, mut_seed(test));
	m->dict = dict;
	m->nr_dict = nr_dict;
	m->corpus = corpus;
	m->nr_corpus = nr_corpus;
}

/* splitmix64 */
uint64_t mut_rand(struct mutator *m)
{
	uint64_t z = (m->state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static unsigned char rand_byte(struct mutator *m, int text)
{
	static const char punct[] = ":,()=%.-+/ \t";

	if (!text || mut_below(m, 16) == 0)
		return (unsigned char)mut_rand(m);
	switch (mut_below(m, 4)) {
	case 0:
		return (unsigned char)punct[mut_below(m, sizeof(punct) - 1)];
	case 1:
		return (unsigned char)('0' + mut_below(m, 10));
	default:
		return (unsigned char)(' ' + mut_below(m, 95));
	}
}

/* Put @n bytes of @src at @pos, shifting the rest; as much as fits in @cap. */
static size_t insert(unsigned char *buf, size_t len, size_t cap, size_t pos, const void *src, size_t n)
{
	if (pos > len)
		pos = len;
	if (n > cap - len)
		n = cap - len;
	memmove(buf + pos + n, buf + pos, len - pos);
	memcpy(buf + pos, src, n);
	return len + n;
}

size_t mut_mutate(struct mutator *m, unsigned char *buf, size_t len, size_t cap, unsigned max_ops, int text)
{
	unsigned ops = 1 + (unsigned)mut_below(m, max_ops ? max_ops : 1);

	for (unsigned op = 0; op < ops; op++) {
		size_t pos = mut_below(m, len + 1), n;
		unsigned char tmp[256];

		switch (mut_below(m, 9)) {
		case 0: /* flip one bit */
			if (len)
				buf[pos % len] ^= (unsigned char)(1u << mut_below(m, 8));
			break;
		case 1: /* replace a byte */
			if (len)
				buf[pos % len] = rand_byte(m, text);
			break;
		case 2: /* insert a few bytes */
			n = 1 + mut_below(m, 4);
			for (size_t i = 0; i < n; i++)
				tmp[i] = rand_byte(m, text);
			len = insert(buf, len, cap, pos, tmp, n);
			break;
		case 3: /* delete a run */
			n = 1 + mut_below(m, mut_below(m, 4) ? 3 : 32);
			if (pos < len) {
				if (n > len - pos)
					n = len - pos;
				memmove(buf + pos, buf + pos + n, len - pos - n);
				len -= n;
			}
			break;
		case 4: /* repeat a run */
			n = 1 + mut_below(m, 16);
			if (pos < len) {
				if (n > len - pos)
					n = len - pos;
				memcpy(tmp, buf + pos, n);
				len = insert(buf, len, cap, pos + n, tmp, n);
			}
			break;
		case 5:
		case 6: /* splice a dictionary word in, or over */
			if (m->nr_dict) {
				const char *w = m->dict[mut_below(m, m->nr_dict)];
				size_t wl = strlen(w);

				if (mut_below(m, 2) && pos < len) {
					n = 1 + mut_below(m, 8);
					if (n > len - pos)
						n = len - pos;
					memmove(buf + pos, buf + pos + n, len - pos - n);
					len -= n;
				}
				len = insert(buf, len, cap, pos, w, wl);
			}
			break;
		case 7: /* crossover: a piece of another corpus entry */
			if (m->nr_corpus) {
				const char *c = m->corpus[mut_below(m, m->nr_corpus)];
				size_t cl = strlen(c), from = mut_below(m, cl + 1);

				n = mut_below(m, cl - from + 1);
				len = insert(buf, len, cap, pos, c + from, n);
			}
			break;
		default: /* truncate */
			if (mut_below(m, 4) == 0)
				len = pos;
			break;
		}
	}
	return len;
}
