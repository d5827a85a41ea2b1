/*
 * workload.c - the touch workload of bench/vs-kernel.sh: one anonymous region filled with the core
 * benchmark's page mix (10% zero, 10% same-filled, 60% text-like, 20% random), then touched in a
 * pattern (seq, rand, zipf theta 0.99 over pages scattered in the region); each touch reads and writes
 * one word. The same binary runs on plain memory, under the kernel's swap in a memory cgroup, and
 * under `uswap run`, so the figures compare like with like.
 *
 * usage: workload [--size 2G] [--pattern seq|rand|zipf] [--seconds 20] [--touches N] [--seed N]
 *                 [--writes PCT]   (PCT% of touches write, the others only read; default 100)
 * Prints one JSON line: touches/s, major faults, peak RSS, and whether every page's counter checked out.
 * Exit status 1 if data did not check out.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

#include "util/pagegen.h"

#define PAGE 4096u

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);

	switch (*end) {
	case 'G':
	case 'g':
		v <<= 30;
		end++;
		break;
	case 'M':
	case 'm':
		v <<= 20;
		end++;
		break;
	case 'K':
	case 'k':
		v <<= 10;
		end++;
		break;
	case '\0':
		break;
	default:
		return -1;
	}
	if (*end || !v)
		return -1;
	*out = v;
	return 0;
}

/* Zipf ranks by the rejection-free method of Gray et al. ("Quickly generating billion-record ..."). */
struct zipf {
	uint64_t n;
	double theta, alpha, zetan, eta;
};

static double zeta(uint64_t n, double theta)
{
	double s = 0;

	for (uint64_t i = 1; i <= n; i++)
		s += 1.0 / pow((double)i, theta);
	return s;
}

static void zipf_init(struct zipf *z, uint64_t n, double theta)
{
	double zeta2 = zeta(2, theta);

	z->n = n;
	z->theta = theta;
	z->alpha = 1.0 / (1.0 - theta);
	z->zetan = zeta(n, theta);
	z->eta = (1.0 - pow(2.0 / (double)n, 1.0 - theta)) / (1.0 - zeta2 / z->zetan);
}

static uint64_t zipf_next(const struct zipf *z, double u)
{
	double uz = u * z->zetan;

	if (uz < 1.0)
		return 0;
	if (uz < 1.0 + pow(0.5, z->theta))
		return 1;
	uint64_t r = (uint64_t)((double)z->n * pow(z->eta * u - z->eta + 1.0, z->alpha));
	return r < z->n ? r : z->n - 1;
}

static uint64_t rng_state;

static uint64_t rng(void)
{
	rng_state += 0x9e3779b97f4a7c15ull;
	return pagegen_mix(rng_state);
}

int main(int argc, char **argv)
{
	uint64_t size = 2ull << 30, max_touches = UINT64_MAX, seed = 42;
	double seconds = 20;
	const char *pattern = "rand";
	unsigned writes = 100;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--size") && v && !parse_size(v, &size)) {
			i++;
		} else if (!strcmp(a, "--pattern") && v &&
			   (!strcmp(v, "seq") || !strcmp(v, "rand") || !strcmp(v, "zipf"))) {
			pattern = v;
			i++;
		} else if (!strcmp(a, "--seconds") && v && atof(v) > 0) {
			seconds = atof(v);
			i++;
		} else if (!strcmp(a, "--touches") && v && strtoull(v, NULL, 10) > 0) {
			max_touches = strtoull(v, NULL, 10);
			i++;
		} else if (!strcmp(a, "--writes") && v && *v && strspn(v, "0123456789") == strlen(v) &&
			   strlen(v) <= 3 && atoi(v) <= 100) {
			writes = (unsigned)atoi(v);
			i++;
		} else if (!strcmp(a, "--seed") && v) {
			seed = strtoull(v, NULL, 10);
			i++;
		} else {
			fprintf(stderr,
				"workload: bad argument \"%s\"\n"
				"usage: workload [--size 2G] [--pattern seq|rand|zipf] [--seconds 20] "
				"[--touches N] [--seed N] [--writes PCT]\n",
				a);
			return 2;
		}
	}

	uint64_t npages = size / PAGE;
	unsigned char *region =
		mmap(NULL, npages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint32_t *touched = calloc(npages, sizeof(*touched)); /* the shadow: touches per page */

	if (region == MAP_FAILED || !touched) {
		fprintf(stderr, "workload: cannot map %llu bytes: %s\n", (unsigned long long)size,
			strerror(errno));
		return 2;
	}

	/* Fill: every page gets its kind's content; word 0 is the page's touch counter. */
	double t0 = now();
	for (uint64_t p = 0; p < npages; p++) {
		unsigned char *pg = region + p * PAGE;
		uint64_t s = pagegen_mix(seed ^ p);

		pagegen_fill(pg, pagegen_mix_kind(s), s);
		memset(pg, 0, 8);
	}
	double fill_s = now() - t0;

	struct zipf z = {0};
	if (!strcmp(pattern, "zipf"))
		zipf_init(&z, npages, 0.99);
	rng_state = seed * 7 + 1;

	/* Touch: read one word and (PCT% of touches) write it; check the clock every 4096 touches. */
	uint64_t touches = 0, seq = 0, mult = 2654435761ull % npages | 1;
	while (mult > 1 && npages % mult == 0)
		mult += 2;
	double start = now(), end = start + seconds, elapsed;
	for (;;) {
		for (unsigned k = 0; k < 4096 && touches < max_touches; k++, touches++) {
			uint64_t p;

			if (pattern[0] == 's') {
				p = seq++ % npages;
			} else if (pattern[0] == 'r') {
				p = rng() % npages;
			} else { /* zipf: rank r lives at a scattered page, so hot pages share no folio by chance */
				uint64_t r = zipf_next(&z, (double)(rng() >> 11) / 9007199254740992.0);
				p = (r * mult) % npages;
			}
			volatile uint64_t *w = (volatile uint64_t *)(region + p * PAGE);
			if (writes < 100 && rng() % 100 >= writes) {
				(void)*w;
				continue;
			}
			*w = *w + 1;
			touched[p]++;
		}
		elapsed = now() - start;
		if (touches >= max_touches || elapsed >= seconds || now() >= end)
			break;
	}

	/* Verify: every page's counter equals its touches, and one generated word further in is intact. */
	uint64_t bad = 0;
	unsigned char *ref = malloc(PAGE);
	for (uint64_t p = 0; p < npages; p++) {
		const unsigned char *pg = region + p * PAGE;
		uint64_t s = pagegen_mix(seed ^ p), c;

		memcpy(&c, pg, 8);
		pagegen_fill(ref, pagegen_mix_kind(s), s);
		if (c != touched[p] || memcmp(pg + 8, ref + 8, PAGE - 8))
			bad++;
	}

	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	printf("{\"pattern\":\"%s\",\"size_bytes\":%llu,\"fill_s\":%.2f,\"seconds\":%.2f,\"touches\":%llu,"
	       "\"touches_per_s\":%.0f,\"majflt\":%ld,\"minflt\":%ld,\"maxrss_kb\":%ld,\"bad_pages\":%llu,"
	       "\"writes_pct\":%u,\"verified\":%s}\n",
	       pattern, (unsigned long long)size, fill_s, elapsed, (unsigned long long)touches,
	       (double)touches / elapsed, ru.ru_majflt, ru.ru_minflt, ru.ru_maxrss, (unsigned long long)bad,
	       writes, bad ? "false" : "true");
	return bad ? 1 : 0;
}
