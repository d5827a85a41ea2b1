/*
 * mutate.h - a seeded random mutator for the fuzz tests (test_config_fuzz, test_redis_replies): byte
 * strings changed by flips, inserts, deletes, repeats, splices of dictionary words and crossovers with
 * other corpus entries. Everything follows from the seed, so a failing input is replayed by running
 * the test again with the seed it printed (USWAP_FUZZ_SEED=N).
 */
#ifndef USWAP_TEST_MUTATE_H
#define USWAP_TEST_MUTATE_H

#include <stddef.h>
#include <stdint.h>

struct mutator {
	uint64_t state;
	const char *const *dict; /* words spliced in: option names, separators, edge numbers */
	size_t nr_dict;
	const char *const *corpus; /* valid inputs, for crossovers */
	size_t nr_corpus;
};

/* The fuzz seed: USWAP_FUZZ_SEED if set, else one from check_seed; printed with how to replay it. */
uint64_t mut_seed(const char *test);
/* Iterations of a fuzz loop: @base, times USWAP_FUZZ_SCALE if set (a longer run by hand). */
unsigned long mut_iterations(unsigned long base);

void mut_init(struct mutator *m, uint64_t seed);
/* mut_init() with mut_seed(@test), splicing words of the array @dict into strings of the array @corpus. */
#define MUT_START(m, test, dict, corpus)                                                                     \
	mut_start(m, test, dict, sizeof(dict) / sizeof((dict)[0]), corpus,                                   \
		  sizeof(corpus) / sizeof((corpus)[0]))
void mut_start(struct mutator *m, const char *test, const char *const *dict, size_t nr_dict,
	       const char *const *corpus, size_t nr_corpus);
uint64_t mut_rand(struct mutator *m);
/* A number in [0, n). */
static inline uint64_t mut_below(struct mutator *m, uint64_t n)
{
	return n ? mut_rand(m) % n : 0;
}

/*
 * mut_mutate() - apply 1..@max_ops random edits to @buf (@len bytes, room for @cap), keeping it
 * within @cap. With @text, inserted bytes are mostly printable (a tier string, a size). Return: the
 * new length.
 */
size_t mut_mutate(struct mutator *m, unsigned char *buf, size_t len, size_t cap, unsigned max_ops, int text);

#endif
