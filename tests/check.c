/*
 * check.c - the test runner of one binary, and page generators shared by the tests.
 */
#include "check.h"

#include <stdbool.h>
#include <time.h>

#include "util/pagegen.h"
#include "uswap.h"

int check_failures;
const char *check_test = "";
uint64_t check_seed;

_Noreturn void check_skip(const char *why)
{
	printf("SKIP: %s\n", why);
	exit(77);
}

int check_run(const struct test *tests, size_t n, int argc, char **argv)
{
	const char *env = getenv("USWAP_TEST_SEED");
	int failed_tests = 0;

	check_seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL);
	printf("seed %llu (USWAP_TEST_SEED=%llu reproduces)\n", (unsigned long long)check_seed,
	       (unsigned long long)check_seed);
	for (size_t i = 0; i < n; i++) {
		bool wanted = argc < 2;
		int before = check_failures;

		for (int a = 1; a < argc; a++)
			wanted |= !strcmp(argv[a], tests[i].name);
		if (!wanted)
			continue;
		check_test = tests[i].name;
		tests[i].fn();
		printf("%s %s\n", check_failures == before ? "ok  " : "FAIL", tests[i].name);
		fflush(stdout);
		failed_tests += check_failures != before;
	}
	return failed_tests ? 1 : 0;
}

uint64_t seed_for(uint64_t x)
{
	return pagegen_mix(check_seed ^ (x * 0x9e3779b97f4a7c15ull));
}

void fill_page(void *p, enum page_kind kind, uint64_t seed)
{
	static const enum pagegen_kind map[] = { PG_ZERO, PG_SAME, PG_TEXT, PG_RANDOM };

	if (kind == PK_MIXED)
		kind = (enum page_kind)(seed % 4);
	pagegen_fill(p, map[kind], seed);
}

void fill_pages(void *p, size_t npages, enum page_kind kind, uint64_t seed)
{
	for (size_t i = 0; i < npages; i++)
		fill_page((unsigned char *)p + i * 4096, kind, pagegen_mix(seed + i));
}

struct uswap *check_layer(const char *spec, int background)
{
	struct uswap_options o = { .tiers = spec, .no_background = !background };
	struct uswap *u = NULL;
	int ret = uswap_create_opts(&u, &o);

	if (ret) {
		fprintf(stderr, "[%s] layer \"%s\": %d %s\n", check_test, spec, ret, uswap_errmsg());
		check_failures++;
		return NULL;
	}
	return u;
}

void check_tier_stats(struct uswap *u, unsigned t, struct uswap_tier_stats *out)
{
	struct uswap_stats st;

	uswap_stats(u, &st);
	*out = st.tier[t];
}
