/*
 * test_evict.c - the store (eviction) path allocates nothing: a burst of 10,000 stores of every kind
 * and folio size, through every tier the default stack and a swap file give, counted two ways:
 * the library's own allocator counter, and (outside sanitizer builds, which own malloc) the C
 * library's malloc family interposed by this binary. Refused stores (no tier takes the page) count too.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "check.h"
#include "uswap.h"
#include "util/alloc.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define INTERPOSE 0
#else
#define INTERPOSE 1
#endif

static atomic_bool counting;
static atomic_ulong malloc_calls;

#if INTERPOSE
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static inline void count(void)
{
	if (atomic_load_explicit(&counting, memory_order_relaxed))
		atomic_fetch_add(&malloc_calls, 1);
}

void *malloc(size_t n)
{
	count();
	return __libc_malloc(n);
}

void *calloc(size_t a, size_t b)
{
	count();
	return __libc_calloc(a, b);
}

void *realloc(void *p, size_t n)
{
	count();
	return __libc_realloc(p, n);
}

void *memalign(size_t align, size_t n)
{
	count();
	return __libc_memalign(align, n);
}

void *aligned_alloc(size_t align, size_t n)
{
	count();
	return __libc_memalign(align, n);
}

int posix_memalign(void **out, size_t align, size_t n)
{
	void *p;

	count();
	p = __libc_memalign(align, n);
	if (!p)
		return ENOMEM;
	*out = p;
	return 0;
}
#endif

enum { STORES = 10000 };

static void burst(const char *spec)
{
	struct uswap_options o = {.tiers = spec, .no_background = 1};
	struct uswap *u = NULL;
	unsigned char *src = aligned_alloc(4096, 16 * 4096), *dst = aligned_alloc(4096, 16 * 4096);
	static uswap_id_t ids[STORES];
	static unsigned char npages[STORES];
	unsigned refused = 0, stored = 0;
	int ret = uswap_create_opts(&u, &o);

	if (ret) {
		fprintf(stderr, "\"%s\": %s\n", spec, uswap_errmsg());
		CHECK_EQ(ret, 0);
		return;
	}
	/* The data is made before counting starts; only the layer's calls run while counting. */
	static unsigned char *pages;
	if (!pages) {
		pages = aligned_alloc(4096, 64 * 4096);
		fill_pages(pages, 64, PK_MIXED, seed_for(1));
	}
	uint64_t before = ualloc_count();
	atomic_store(&malloc_calls, 0);
	atomic_store(&counting, true);
	for (unsigned i = 0; i < STORES; i++) {
		npages[i] = (unsigned char)(1u << (i % 5)); /* 1, 2, 4, 8, 16 */
		ret = uswap_store(u, pages + (i % 48) * 4096, npages[i], &ids[i]);
		if (ret == -ENOSPC) {
			refused++;
			ids[i] = 0;
		} else if (ret) {
			break;
		} else {
			stored++;
		}
	}
	atomic_store(&counting, false);
	uint64_t lib_allocs = ualloc_count() - before;
	CHECK_EQ(ret == -ENOSPC ? 0 : ret, 0);
	printf("  %s: %u stored, %u refused, ualloc %llu, malloc %lu%s\n", spec, stored, refused,
	       (unsigned long long)lib_allocs, atomic_load(&malloc_calls),
	       INTERPOSE ? "" : " (not interposed: sanitizer build)");
	CHECK_EQ(lib_allocs, 0);
	CHECK_EQ(atomic_load(&malloc_calls), 0);
	CHECK(stored > 0);
	/* and the data is all there */
	for (unsigned i = 0; i < STORES; i++) {
		if (!ids[i])
			continue;
		CHECK_EQ(uswap_load(u, ids[i], dst, npages[i]), 0);
		CHECK_MEM(dst, pages + (i % 48) * 4096, (size_t)npages[i] * 4096);
	}
	check_destroy(u);
	free(src);
	free(dst);
}

/* The default stack: random pages are refused (no tier below the pool), and refusing allocates nothing. */
static void default_stack(void)
{
#if INTERPOSE
	/* the counter counts: one malloc while counting is one call */
	void *volatile p;
	atomic_store(&malloc_calls, 0);
	atomic_store(&counting, true);
	p = malloc(100);
	atomic_store(&counting, false);
	free(p);
	CHECK_EQ(atomic_load(&malloc_calls), 1);
#endif
	char def[USWAP_TIERS_LEN];

	CHECK(uswap_default_tiers(0, def, sizeof(def)) > 0);
	burst(def);
}

/* Pool then zstd pool then a swap file: every page finds a home. */
static void full_stack(void)
{
	burst("same,zpool:lz4:max=8M,zpool:zstd:max=8M,file:size=512M");
}

/* Writeback is reclaim work too: the pool's coldest pages move down without allocating. */
static void writeback_allocates_nothing(void)
{
	struct uswap_options o = {.tiers = "same,zpool:lz4,file:size=256M", .no_background = 1};
	struct uswap *u = NULL;
	unsigned char *pages = aligned_alloc(4096, 16 * 4096), *dst = aligned_alloc(4096, 16 * 4096);
	static uswap_id_t ids[1000];

	CHECK_EQ(uswap_create_opts(&u, &o), 0);
	if (!u)
		return;
	fill_pages(pages, 16, PK_TEXT, seed_for(2));
	for (unsigned i = 0; i < 1000; i++)
		CHECK_EQ(uswap_store(u, pages + (i % 8) * 4096, 8, &ids[i]), 0);
	uint64_t before = ualloc_count();
	atomic_store(&malloc_calls, 0);
	atomic_store(&counting, true);
	ssize_t moved = uswap_writeback(u, 1, 4000);
	atomic_store(&counting, false);
	CHECK(moved >= 4000);
	CHECK_EQ(ualloc_count() - before, 0);
	CHECK_EQ(atomic_load(&malloc_calls), 0);
	for (unsigned i = 0; i < 1000; i++) {
		CHECK_EQ(uswap_load(u, ids[i], dst, 8), 0);
		CHECK_MEM(dst, pages + (i % 8) * 4096, 8 * 4096);
	}
	check_destroy(u);
	free(pages);
	free(dst);
}

CHECK_MAIN(T(default_stack), T(full_stack), T(writeback_allocates_nothing))
