/*
 * bench_mm.c - `uswap bench mm`: program memory under a resident limit against the same workload on
 * plain memory and against an exact LRU of the same capacity, in one run.
 *
 * A region of --size (1 GiB) filled with the core benchmark's page mix is touched under --limit
 * (256 MiB) in three patterns (seq, rand, zipf theta 0.99 over scattered pages); each touch reads and
 * writes one word. Per pattern: touches/s with uswap and on plain memory, swap-ins against the misses
 * of an exact LRU simulated on the same touch sequence, and the latency of touches that swapped in a
 * text page (so from the compressed pool) as the program sees it. Then the cost of a kernel first-touch
 * fault and of first touches under uswap. Every page is checked at the end.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#include "cli/cli.h"
#include "util/pagegen.h"
#include "uswap.h"

#define PS     4096ul
#define NR_LAT (1u << 20)

struct mm_opts {
	uint64_t size, limit, touches;
	const char *tiers;
	bool json, sigbus, remove_events;
};

static double tsc_per_us;

/*
 * TLB shootdown interrupts taken so far, all CPUs (the TLB row of /proc/interrupts): on this kind of
 * VM each is an IPI into the CPU the program runs on. 0 when the row is missing.
 */
static uint64_t tlb_shootdowns(void)
{
	FILE *f = fopen("/proc/interrupts", "r");
	char line[4096];
	uint64_t n = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		char *p = line, *end;

		while (*p == ' ')
			p++;
		if (strncmp(p, "TLB:", 4))
			continue;
		for (p += 4;; p = end) {
			unsigned long long v = strtoull(p, &end, 10);

			if (end == p)
				break;
			n += v;
		}
		break;
	}
	fclose(f);
	return n;
}

static void tsc_calibrate(void)
{
	double t0 = cli_now(), t1;
	uint64_t c0 = __rdtsc(), c1;

	do
		t1 = cli_now();
	while (t1 - t0 < 0.05);
	c1 = __rdtsc();
	tsc_per_us = (double)(c1 - c0) / ((t1 - t0) * 1e6);
}

static int parse(int argc, char **argv, struct mm_opts *o)
{
	static char def[USWAP_TIERS_LEN];

	/* The default stack with no limit: --limit is the resident limit alone, the pool outside it. */
	uswap_default_tiers(0, def, sizeof(def));
	o->size = 1ull << 30;
	o->limit = 256ull << 20;
	o->touches = 1000000;
	o->tiers = def;
	o->json = false;
	o->sigbus = false;
	o->remove_events = false;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--json")) {
			o->json = true;
		} else if (!strcmp(a, "--size") && v) {
			if (uswap_parse_size(v, 1, &o->size) || o->size < 1024 * PS)
				return cli_usage_error("bench mm: --size \"%s\" is not a size of 4M or more",
						       v);
			i++;
		} else if (!strcmp(a, "--limit") && v) {
			if (uswap_parse_size(v, 1, &o->limit) || o->limit < 256 * PS)
				return cli_usage_error("bench mm: --limit \"%s\" is not a size of 1M or more",
						       v);
			i++;
		} else if (!strcmp(a, "--touches") && v) {
			char *end;

			o->touches = strtoull(v, &end, 10);
			if (*end || o->touches < 1000)
				return cli_usage_error(
					"bench mm: --touches \"%s\" is not a count of 1000 or more", v);
			i++;
		} else if (!strcmp(a, "--fault-mode") && v) {
			if (strcmp(v, "handler") && strcmp(v, "sigbus"))
				return cli_usage_error(
					"bench mm: --fault-mode is handler or sigbus, not \"%s\"", v);
			o->sigbus = !strcmp(v, "sigbus");
			i++;
		} else if (!strcmp(a, "--remove-events")) {
			o->remove_events = true;
		} else if (!strcmp(a, "--tiers") && v) {
			o->tiers = v;
			i++;
		} else {
			return cli_usage_error("bench mm: unknown or incomplete option \"%s\"", a);
		}
	}
	if (o->limit >= o->size)
		return cli_usage_error("bench mm: --limit must be below --size");
	return 0;
}

/* ---- touch sequences ---- */

struct zipf {
	uint64_t n;
	double theta, alpha, zetan, eta;
};

static void zipf_init(struct zipf *z, uint64_t n, double theta)
{
	double zeta2 = 1.0 + pow(0.5, theta);

	z->n = n;
	z->theta = theta;
	z->alpha = 1.0 / (1.0 - theta);
	z->zetan = 0;
	for (uint64_t i = 1; i <= n; i++)
		z->zetan += 1.0 / pow((double)i, theta);
	z->eta = (1.0 - pow(2.0 / (double)n, 1.0 - theta)) / (1.0 - zeta2 / z->zetan);
}

static uint64_t zipf_next(const struct zipf *z, double u)
{
	double uz = u * z->zetan;
	uint64_t r;

	if (uz < 1.0)
		return 0;
	if (uz < 1.0 + pow(0.5, z->theta))
		return 1;
	r = (uint64_t)((double)z->n * pow(z->eta * u - z->eta + 1.0, z->alpha));
	return r < z->n ? r : z->n - 1;
}

/* The page of every touch, made once so that uswap, plain memory and the LRU see the same sequence. */
static uint32_t *make_sequence(char pattern, uint64_t npages, uint64_t n, uint64_t seed)
{
	uint32_t *seq = malloc(n * sizeof(*seq));
	uint64_t rng = seed, mult = 2654435761ull % npages | 1;
	struct zipf z = {0};

	if (!seq)
		return NULL;
	while (mult > 1 && npages % mult == 0)
		mult += 2;
	if (pattern == 'z')
		zipf_init(&z, npages, 0.99);
	for (uint64_t i = 0; i < n; i++) {
		rng += 0x9e3779b97f4a7c15ull;
		if (pattern == 's') {
			seq[i] = (uint32_t)(i % npages);
		} else if (pattern == 'r') {
			seq[i] = (uint32_t)(pagegen_mix(rng) % npages);
		} else { /* rank r at a scattered page: hot pages share no folio by chance */
			uint64_t r = zipf_next(&z, (double)(pagegen_mix(rng) >> 11) / 9007199254740992.0);

			seq[i] = (uint32_t)(r * mult % npages);
		}
	}
	return seq;
}

/* Misses of an exact LRU of @cap pages over seq[0..n), counted from @from on. */
static uint64_t lru_misses(const uint32_t *seq, uint64_t n, uint64_t from, uint64_t npages, uint64_t cap)
{
	uint32_t *prev = malloc(npages * sizeof(*prev)), *next = malloc(npages * sizeof(*next));
	unsigned char *in = calloc(npages, 1);
	uint32_t head = UINT32_MAX, tail = UINT32_MAX; /* head: most recent */
	uint64_t misses = 0, size = 0;

	if (!prev || !next || !in)
		return 0;
	for (uint64_t i = 0; i < n; i++) {
		uint32_t p = seq[i];

		if (in[p]) {
			if (head == p)
				continue;
			next[prev[p]] = next[p]; /* unlink (p is not head) */
			if (tail == p)
				tail = prev[p];
			else
				prev[next[p]] = prev[p];
		} else {
			misses += i >= from;
			if (size == cap) {
				uint32_t t = tail;

				in[t] = 0;
				tail = prev[t];
				if (tail != UINT32_MAX)
					next[tail] = UINT32_MAX;
				else
					head = UINT32_MAX;
				size--;
			}
			in[p] = 1;
			size++;
		}
		prev[p] = UINT32_MAX;
		next[p] = head;
		if (head != UINT32_MAX)
			prev[head] = p;
		head = p;
		if (tail == UINT32_MAX)
			tail = p;
	}
	free(prev);
	free(next);
	free(in);
	return misses;
}

/* ---- the region ---- */

static uint64_t page_seed(uint64_t p)
{
	return pagegen_mix(42 ^ p);
}

static void fill(unsigned char *base, uint64_t npages, unsigned char *kinds)
{
	for (uint64_t p = 0; p < npages; p++) {
		uint64_t s = page_seed(p);

		kinds[p] = (unsigned char)pagegen_mix_kind(s);
		pagegen_fill(base + p * PS, (enum pagegen_kind)kinds[p], s);
		memset(base + p * PS, 0, 8); /* word 0 counts the touches */
	}
}

static uint64_t verify(const unsigned char *base, uint64_t npages, const unsigned char *kinds,
		       const uint32_t *touched)
{
	unsigned char ref[PS];
	uint64_t bad = 0;

	for (uint64_t p = 0; p < npages; p++) {
		const unsigned char *pg = base + p * PS;
		uint64_t c;

		memcpy(&c, pg, 8);
		pagegen_fill(ref, (enum pagegen_kind)kinds[p], page_seed(p));
		if (c != touched[p] || memcmp(pg + 8, ref + 8, PS - 8))
			bad++;
	}
	return bad;
}

static double touch_plain(unsigned char *base, const uint32_t *seq, uint64_t from, uint64_t n)
{
	double t0;

	for (uint64_t i = 0; i < from; i++)
		(*(volatile uint64_t *)(base + (uint64_t)seq[i] * PS))++;
	t0 = cli_now();
	for (uint64_t i = from; i < n; i++)
		(*(volatile uint64_t *)(base + (uint64_t)seq[i] * PS))++;
	return cli_now() - t0;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

struct pattern_result {
	const char *name;
	uint64_t touches, swapins, soft_faults, lru_misses, nr_lat;
	double seconds, nolimit_seconds, p50_us, p99_us;
};

/*
 * The touches under uswap. A touch that swapped in a text page from the compressed pool is timed (rdtsc
 * around it; the pool's load counter moved and no other tier's did): a swap-in from the pool as the
 * program sees it. Loads from the file tier (what the pool wrote back) are counted, not timed.
 */
struct tier_loads {
	struct uswap *u;
	int pool; /* the first zpool tier, or -1 */
	unsigned others[USWAP_MAX_TIERS];
	unsigned nr_others;
};

static void tier_loads_init(struct uswap_mm *m, struct tier_loads *tl)
{
	struct uswap_stats st;

	memset(tl, 0, sizeof(*tl));
	tl->u = uswap_mm_swap(m);
	tl->pool = -1;
	uswap_stats(tl->u, &st);
	for (unsigned t = 0; t < st.nr_tiers; t++) {
		if (!strcmp(st.tier[t].name, "zpool") && tl->pool < 0)
			tl->pool = (int)t;
		else
			tl->others[tl->nr_others++] = t;
	}
}

static uint64_t pool_loads(const struct tier_loads *tl)
{
	return tl->pool < 0 ? 0 : uswap_tier_loads(tl->u, (unsigned)tl->pool);
}

static uint64_t other_loads(const struct tier_loads *tl)
{
	uint64_t n = 0;

	for (unsigned t = 0; t < tl->nr_others; t++)
		n += uswap_tier_loads(tl->u, tl->others[t]);
	return n;
}

static double touch_mm(struct uswap_mm *m, unsigned char *base, const uint32_t *seq, uint64_t from,
		       uint64_t n, const unsigned char *kinds, uint32_t *lat, uint64_t *nr_lat)
{
	struct tier_loads tl;
	double t0;

	tier_loads_init(m, &tl);
	*nr_lat = 0;
	t0 = cli_now();
	for (uint64_t i = from; i < n; i++) {
		uint64_t p0 = pool_loads(&tl);
		uint64_t o0 = other_loads(&tl);
		uint64_t c0 = __rdtsc(), c1;

		(*(volatile uint64_t *)(base + (uint64_t)seq[i] * PS))++;
		c1 = __rdtsc();
		if (tl.pool >= 0 && pool_loads(&tl) != p0 && other_loads(&tl) == o0 &&
		    kinds[seq[i]] == PG_TEXT && *nr_lat < NR_LAT)
			lat[(*nr_lat)++] = (uint32_t)((double)(c1 - c0) / tsc_per_us * 1000.0); /* ns */
	}
	return cli_now() - t0;
}

static int run_pattern(const struct mm_opts *o, struct uswap_mm *m, unsigned char *region,
		       unsigned char *plain, const unsigned char *kinds, uint32_t *touched, char pat,
		       struct pattern_result *res, uint32_t *lat)
{
	uint64_t npages = o->size / PS, warm = o->touches / 4, n = warm + o->touches;
	uint32_t *seq = make_sequence(pat, npages, n, 1234 + (uint64_t)pat);
	struct uswap_mm_stats a, b;

	if (!seq)
		return -ENOMEM;
	for (uint64_t i = 0; i < n; i++)
		touched[seq[i]]++;
	res->touches = o->touches;
	res->lru_misses = lru_misses(seq, n, warm, npages, o->limit / PS);
	res->nolimit_seconds = touch_plain(plain, seq, warm, n);
	for (uint64_t i = 0; i < warm; i++)
		(*(volatile uint64_t *)(region + (uint64_t)seq[i] * PS))++;
	uswap_mm_stats(m, &a);
	res->seconds = touch_mm(m, region, seq, warm, n, kinds, lat, &res->nr_lat);
	uswap_mm_stats(m, &b);
	res->swapins = b.swapins - a.swapins;
	res->soft_faults = b.soft_faults - a.soft_faults;
	qsort(lat, res->nr_lat, sizeof(*lat), cmp_u32);
	res->p50_us = res->nr_lat ? lat[res->nr_lat / 2] / 1000.0 : 0;
	res->p99_us = res->nr_lat ? lat[res->nr_lat * 99 / 100] / 1000.0 : 0;
	free(seq);
	return 0;
}

/* Per-page cost of first touches (one write per page, in address order) of @len fresh bytes. */
static double first_touch_plain_us(size_t len)
{
	unsigned char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	double t0, t;

	if (p == MAP_FAILED)
		return 0;
	madvise(p, len, MADV_NOHUGEPAGE);
	t0 = cli_now();
	for (size_t i = 0; i < len; i += PS)
		p[i] = 1;
	t = cli_now() - t0;
	munmap(p, len);
	return t * 1e6 / (double)(len / PS);
}

/*
 * The floor of a fault served by another thread: a bare userfaultfd over fresh anonymous memory, one
 * thread reading its messages and answering each with a UFFDIO_COPY of a zero page, the program
 * touching one page after another. No swap layer, no tables, no locks: what any userfaultfd design
 * pays per fault on this machine, to set the swap-in latency against. Return: us per fault, or 0.
 */
struct uffd_floor {
	int uffd;
	unsigned char *zero;
	atomic_bool done;
};

static void *uffd_floor_main(void *arg)
{
	struct uffd_floor *f = arg;
	struct uffd_msg msg;

	/*
	 * The descriptor does not block: a poll that says ready may find no message, and a blocking
	 * read then waits forever, past the end of the touches (seen under perf's uprobes).
	 */
	while (!atomic_load(&f->done)) {
		struct pollfd pfd = {.fd = f->uffd, .events = POLLIN};

		if (poll(&pfd, 1, 50) <= 0 || read(f->uffd, &msg, sizeof(msg)) != sizeof(msg))
			continue;
		if (msg.event != UFFD_EVENT_PAGEFAULT)
			continue;
		struct uffdio_copy c = {
			.dst = msg.arg.pagefault.address & ~(PS - 1), .src = (uintptr_t)f->zero, .len = PS};

		ioctl(f->uffd, UFFDIO_COPY, &c);
	}
	return NULL;
}

static double uffd_floor_us(size_t len)
{
	struct uffd_floor f = {
		.uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY)};
	struct uffdio_api api = {.api = UFFD_API};
	unsigned char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	double t = 0;
	pthread_t th;

	if (f.uffd < 0)
		f.uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	f.zero = aligned_alloc(PS, PS);
	if (f.uffd < 0 || p == MAP_FAILED || !f.zero || ioctl(f.uffd, UFFDIO_API, &api))
		goto out;
	memset(f.zero, 0, PS);
	madvise(p, len, MADV_NOHUGEPAGE);
	struct uffdio_register reg = {.range = {.start = (uintptr_t)p, .len = len},
				      .mode = UFFDIO_REGISTER_MODE_MISSING};

	if (ioctl(f.uffd, UFFDIO_REGISTER, &reg) || pthread_create(&th, NULL, uffd_floor_main, &f))
		goto out;
	double t0 = cli_now();

	for (size_t i = 0; i < len; i += PS)
		p[i] = 1;
	t = (cli_now() - t0) * 1e6 / (double)(len / PS);
	atomic_store(&f.done, true);
	pthread_join(th, NULL);
out:
	if (f.uffd >= 0)
		close(f.uffd);
	if (p != MAP_FAILED)
		munmap(p, len);
	free(f.zero);
	return t;
}

static double first_touch_mm_us(struct uswap_mm *m, size_t len)
{
	unsigned char *p;
	double t0, t;

	if (uswap_map(m, len, 0, (void **)&p))
		return 0;
	t0 = cli_now();
	for (size_t i = 0; i < len; i += PS)
		p[i] = 1;
	t = cli_now() - t0;
	uswap_unmap(m, p, len);
	return t * 1e6 / (double)(len / PS);
}

int bench_mm(int argc, char **argv)
{
	static const struct {
		char c;
		const char *name;
	} pats[] = {{'s', "seq"}, {'r', "rand"}, {'z', "zipf"}};
	struct pattern_result res[3] = {0};
	struct mm_opts o;
	struct uswap_mm_options mo = {0};
	struct uswap_mm_stats st, st0;
	struct uswap_stats ss;
	struct uswap_mm *m = NULL, *m2 = NULL;
	uint64_t tlb0, tlb1, evicted;
	unsigned char *region = NULL, *plain, *kinds;
	uint32_t *touched, *lat;
	uint64_t npages, bad;
	double kernel_us, first_mm_us, floor_us, t0, fill_s;
	int ret = parse(argc, argv, &o);

	if (ret)
		return ret;
	tsc_calibrate();
	npages = o.size / PS;
	mo.limit_bytes = o.limit;
	mo.tiers = o.tiers;
	mo.sigbus_mode = o.sigbus;
	mo.discards_reported = !o.remove_events; /* the region is never madvise()d; as under uswap run */
	ret = uswap_mm_create(&m, &mo);
	if (ret) {
		fprintf(stderr, "uswap: bench mm: %s\n", uswap_errmsg());
		return 1;
	}
	plain = mmap(NULL, o.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	kinds = malloc(npages);
	touched = calloc(npages, sizeof(*touched));
	lat = malloc(NR_LAT * sizeof(*lat));
	if (plain == MAP_FAILED || !kinds || !touched || !lat || uswap_map(m, o.size, 0, (void **)&region)) {
		fprintf(stderr, "uswap: bench mm: out of memory\n");
		return 1;
	}
	fill(plain, npages, kinds);
	t0 = cli_now();
	fill(region, npages, kinds);
	fill_s = cli_now() - t0;
	uswap_mm_stats(m, &st0);
	tlb0 = tlb_shootdowns();
	for (unsigned k = 0; k < 3; k++) {
		res[k].name = pats[k].name;
		if (run_pattern(&o, m, region, plain, kinds, touched, pats[k].c, &res[k], lat)) {
			fprintf(stderr, "uswap: bench mm: out of memory\n");
			return 1;
		}
		if (!o.json)
			fprintf(stderr, "%s: %.0f touches/s (plain %.0f), swapins %llu, lru misses %llu\n",
				res[k].name, (double)res[k].touches / res[k].seconds,
				(double)res[k].touches / res[k].nolimit_seconds,
				(unsigned long long)res[k].swapins, (unsigned long long)res[k].lru_misses);
	}
	uswap_mm_stats(m, &st);
	tlb1 = tlb_shootdowns();
	uswap_stats(uswap_mm_swap(m), &ss);
	evicted = st.evicted_pages - st0.evicted_pages;
	bad = verify(region, npages, kinds, touched);

	/* First touches: the kernel's, then a fresh instance with room to spare (no reclaim). */
	kernel_us = first_touch_plain_us(64ul << 20);
	floor_us = uffd_floor_us(64ul << 20);
	mo.limit_bytes = 0;
	ret = uswap_mm_create(&m2, &mo);
	first_mm_us = ret ? 0 : first_touch_mm_us(m2, 64ul << 20);
	uswap_mm_destroy(m2);

	printf("{\"size_bytes\":%llu,\"limit_bytes\":%llu,\"tiers\":\"%s\",\"fault_mode\":\"%s\","
	       "\"touches_per_pattern\":%llu,\"fill_s\":%.2f,\"patterns\":{",
	       (unsigned long long)o.size, (unsigned long long)o.limit, o.tiers,
	       o.sigbus ? "sigbus" : "handler", (unsigned long long)o.touches, fill_s);
	for (unsigned k = 0; k < 3; k++) {
		struct pattern_result *r = &res[k];

		printf("%s\"%s\":{\"touches_per_s\":%.0f,\"nolimit_touches_per_s\":%.0f,\"swapins\":%llu,"
		       "\"soft_faults\":%llu,\"lru_misses\":%llu,\"swapins_vs_lru\":%.3f,\"fault_us_p50\":%."
		       "2f,"
		       "\"fault_us_p99\":%.2f,\"timed_faults\":%llu,\"fault_vs_kernel\":%.2f}",
		       k ? "," : "", r->name, (double)r->touches / r->seconds,
		       (double)r->touches / r->nolimit_seconds, (unsigned long long)r->swapins,
		       (unsigned long long)r->soft_faults, (unsigned long long)r->lru_misses,
		       r->lru_misses ? (double)r->swapins / (double)r->lru_misses : 0.0, r->p50_us, r->p99_us,
		       (unsigned long long)r->nr_lat, kernel_us > 0 ? r->p50_us / kernel_us : 0.0);
	}
	printf("},\"kernel_fault_us\":%.3f,\"uffd_floor_us\":%.3f,\"first_touch_us\":%.3f,\"first_touch_vs_"
	       "kernel\":%.2f,"
	       "\"first_touch_vs_uffd_floor\":%.2f,\"rand_fault_vs_uffd_floor\":%.2f,\"handler_swapin_us_"
	       "p50\":%.2f,\"handler_swapin_us_p99\":%.2f,\"direct_reclaims\":%llu,"
	       "\"evictions\":%llu,\"clean_evictions\":%llu,\"wp_faults\":%llu,\"readahead_pages\":%llu,"
	       "\"store_failures\":%llu,"
	       "\"mm_meta_bytes_per_page\":%.2f,\"swap_meta_bytes_per_page\":%.2f,"
	       "\"discards_reported\":%s,\"tlb_flushes_per_evicted_page\":%.3f,\"evict_us_per_page\":%.2f,"
	       "\"bad_pages\":%llu,\"verified\":%s}\n",
	       kernel_us, floor_us, first_mm_us, kernel_us > 0 ? first_mm_us / kernel_us : 0.0,
	       floor_us > 0 ? first_mm_us / floor_us : 0.0, floor_us > 0 ? res[1].p50_us / floor_us : 0.0,
	       st.swapin_ns_p50 / 1e3, st.swapin_ns_p99 / 1e3, (unsigned long long)st.direct_reclaims,
	       (unsigned long long)st.evictions, (unsigned long long)st.clean_evictions,
	       (unsigned long long)st.wp_faults, (unsigned long long)st.readahead_pages,
	       (unsigned long long)st.store_failures, (double)st.meta_bytes / (double)npages,
	       ss.pages ? (double)ss.meta_bytes / (double)ss.pages : 0.0, o.remove_events ? "false" : "true",
	       evicted && tlb1 >= tlb0 ? (double)(tlb1 - tlb0) / (double)evicted : 0.0,
	       evicted ? (double)(st.reclaim_ns - st0.reclaim_ns -
				  (st.reclaim_store_ns - st0.reclaim_store_ns)) /
				 1e3 / (double)evicted
		       : 0.0,
	       (unsigned long long)bad, bad ? "false" : "true");
	uswap_unmap(m, region, o.size);
	uswap_mm_destroy(m);
	munmap(plain, o.size);
	free(kinds);
	free(touched);
	free(lat);
	return bad ? 1 : 0;
}
