/*
 * check.h - the tests' assertions: CHECK_* prints "file:line: expected X, got Y" and the test goes on;
 * a binary exits 1 if any check failed, 77 if it skipped (a missing facility, never a failed one).
 */
#ifndef USWAP_CHECK_H
#define USWAP_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern int check_failures;
extern const char *check_test;

#define CHECK(cond)                                                                                          \
	do {                                                                                                 \
		if (!(cond)) {                                                                               \
			fprintf(stderr, "%s:%d: [%s] check failed: %s\n", __FILE__, __LINE__, check_test,    \
				#cond);                                                                      \
			check_failures++;                                                                    \
		}                                                                                            \
	} while (0)

#define CHECK_EQ(a, b)                                                                                       \
	do {                                                                                                 \
		long long va_ = (long long)(a), vb_ = (long long)(b);                                        \
		if (va_ != vb_) {                                                                            \
			fprintf(stderr, "%s:%d: [%s] %s: expected %lld, got %lld\n", __FILE__, __LINE__,     \
				check_test, #a, vb_, va_);                                                   \
			check_failures++;                                                                    \
		}                                                                                            \
	} while (0)

#define CHECK_MEM(a, b, len)                                                                                 \
	do {                                                                                                 \
		size_t off_ = check_memdiff((a), (b), (len));                                                \
		if (off_ != (size_t)-1) {                                                                    \
			fprintf(stderr, "%s:%d: [%s] %s and %s differ at byte %zu of %zu\n", __FILE__,       \
				__LINE__, check_test, #a, #b, off_, (size_t)(len));                          \
			check_failures++;                                                                    \
		}                                                                                            \
	} while (0)

static inline size_t check_memdiff(const void *a, const void *b, size_t len)
{
	const unsigned char *x = a, *y = b;

	if (!memcmp(a, b, len))
		return (size_t)-1;
	for (size_t i = 0; i < len; i++)
		if (x[i] != y[i])
			return i;
	return (size_t)-1;
}

struct test {
	const char *name;
	void (*fn)(void);
};

/* Runs the tests named on the command line (all when none), prints one line each. Return: exit code. */
int check_run(const struct test *tests, size_t n, int argc, char **argv);
#define CHECK_MAIN(...)                                                                                      \
	int main(int argc, char **argv)                                                                      \
	{                                                                                                    \
		static const struct test tests_[] = {__VA_ARGS__};                                           \
		return check_run(tests_, sizeof(tests_) / sizeof(tests_[0]), argc, argv);                    \
	}
#define T(fn)                                                                                                \
	{                                                                                                    \
#fn, fn                                                                                      \
	}

/* Skip the whole binary (exit 77) with a reason. */
_Noreturn void check_skip(const char *why);

/*
 * CHECK_SANITIZED - an ASan or TSan build: its preload library cannot go into the uninstrumented
 * programs that the tests of `uswap run` start, so those binaries skip themselves.
 */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CHECK_SANITIZED 1
#else
#define CHECK_SANITIZED 0
#endif

/* Skip the running test alone, with a reason: "skip NAME: WHY" (a missing program, never a failure). */
void check_skip_test(const char *why);

/* ---- programs run by the tests (test_run, test_programs) ---- */
/*
 * check_cmd() - run @argv with stdout to @out (NULL: /dev/null) and stderr to @err (NULL: inherited),
 * in a process group of its own that is killed after CHECK_CMD_TIMEOUT_S (a program that hangs under
 * uswap fails its own test, not the whole binary). Return: wait status.
 */
#define CHECK_CMD_TIMEOUT_S 300
int check_cmd(char *const argv[], const char *out, const char *err);
/* check_cmd(), and the program's resource usage (wait4(): ru_maxrss is its peak resident KiB) in @ru. */
struct rusage;
int check_cmd_rusage(char *const argv[], const char *out, const char *err, struct rusage *ru);
/* The whole file at @path, NUL-terminated (its length in @len), or NULL; free() it. */
char *check_slurp(const char *path, size_t *len);
/* Write @text to @path (a failed check if it cannot). */
void check_write_file(const char *path, const char *text);
/* The number after the first "@key": in @json (a summary of --stats-json), or -1. */
long long check_json_num(const char *json, const char *key);
/* The sum of the numbers after every "@key": in @json: the program's and its descendants'; -1 if none. */
long long check_json_sum(const char *json, const char *key);

/* ---- layers for tests ---- */
struct uswap;
struct uswap_tier_stats;
/* A layer from @spec (no background thread unless @background); a failed check and NULL if refused. */
struct uswap *check_layer(const char *spec, int background);
/* The statistics of tier @t of @u. */
void check_tier_stats(struct uswap *u, unsigned t, struct uswap_tier_stats *out);

/*
 * check_validate() / check_validate_mm() - in DEBUG builds (make DEBUG=1), run the invariant walkers
 * as a check: uswap_debug_validate() of a layer (descriptors, tiers, the pool's validator), or
 * mm_validate() of an instance (regions, page and folio words, counters, then its layer). Nothing in
 * other builds. Context: quiescent, no store, load, free or fault of the test running.
 * check_destroy() / check_mm_destroy(): that, then uswap_destroy() / uswap_mm_destroy(); the tests
 * destroy through them, so `make DEBUG=1 check` runs every walker at the end of every test. A
 * failure names the caller's line.
 */
struct uswap_mm;
void check_validate_at(struct uswap *u, const char *file, int line);
void check_validate_mm_at(struct uswap_mm *m, const char *file, int line);
#define check_validate(u)    check_validate_at((u), __FILE__, __LINE__)
#define check_validate_mm(m) check_validate_mm_at((m), __FILE__, __LINE__)
#define check_destroy(u)                                                                                     \
	do {                                                                                                 \
		struct uswap *u_ = (u);                                                                      \
		if (u_)                                                                                      \
			check_validate_at(u_, __FILE__, __LINE__);                                           \
		uswap_destroy(u_);                                                                           \
	} while (0)
#define check_mm_destroy(m)                                                                                  \
	do {                                                                                                 \
		struct uswap_mm *m_ = (m);                                                                   \
		if (m_)                                                                                      \
			check_validate_mm_at(m_, __FILE__, __LINE__);                                        \
		uswap_mm_destroy(m_);                                                                        \
	} while (0)
/* Whether the walkers are compiled in (DEBUG builds): the tests of the walkers themselves need them. */
int check_debug_build(void);

/*
 * check_signals_stay_pending() - SIGUSR1 and SIGUSR2 blocked in the calling thread and in two threads
 * it starts (the test's own threads; the library may run any of its own meanwhile): a kill() of the
 * process leaves them pending, to be taken by sigtimedwait() and by a signalfd, and no handler runs.
 * A library thread that does not block them takes them instead (and a handler runs there).
 */
void check_signals_stay_pending(void);

/* ---- memory regions for tests (test_mm, test_mm_proc, test_mm_auto) ---- */
struct uswap_mm;
struct uswap_mm_options;
/* An instance with @o; skips the binary (exit 77) where userfaultfd is not allowed or too old. */
struct uswap_mm *check_mm_new(const struct uswap_mm_options *o);
/* Page @i at version @v in @p: mixed kinds (zero, same-filled, text, random) by seed. Return: its checksum. */
uint32_t check_put_page(unsigned char *p, size_t i, uint64_t v);
/* Pages [first, end) of @base whose checksum is not @sums[i] (the first five are named on stderr). */
size_t check_verify_pages(const unsigned char *base, size_t first, size_t end, const uint32_t *sums);
/* @n pages of a new region of @m (folios of @folio_bytes, 0: the instance's), each at version 0 (@sums). */
unsigned char *check_map_filled(struct uswap_mm *m, size_t n, size_t folio_bytes, uint32_t *sums);
/* Pages the instance's swap layer holds now. */
uint64_t check_swap_pages(struct uswap_mm *m);
/* Whether the 4 KiB page at @p reads zero. */
int check_page_is_zero(const unsigned char *p);

/* ---- page data of every kind, reproducible from a seed ---- */
enum page_kind { PK_ZERO, PK_SAME, PK_TEXT, PK_RANDOM, PK_MIXED };
uint64_t seed_for(uint64_t x);
void fill_page(void *p, enum page_kind kind, uint64_t seed);
void fill_pages(void *p, size_t npages, enum page_kind kind, uint64_t seed);
extern uint64_t check_seed; /* base seed, printed at start; USWAP_TEST_SEED overrides */

#endif
