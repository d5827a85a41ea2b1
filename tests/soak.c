/*
 * soak.c - a soak with faults at every layer (`make soak`, a short form in test_soak and CI).
 *
 * Two parts run side by side for --seconds, every tier but `same` wrapped in fault() (seeded, the
 * seed printed first so that a failing run can be replayed):
 *  - the swap layer: threads store folios of every kind of page into slots, load them (whole, in part,
 *    several slots in one load_vec), free them (whole or a prefix), write back, run maintenance and
 *    swap tiers off and on, over "same,fault(zpool),fault(file)[,fault(redis)]" (Redis when
 *    redis-server is installed);
 *  - memory regions: two uswap_mm instances (handler mode and SIGBUS mode) under small limits; threads
 *    write pages and read them back, each page its own version and seed; a coordinator, with the
 *    threads paused, forks a child that checks its copy of every page, unmaps, mremap()s and discards
 *    parts of regions, maps new ones, moves limits and swaps tiers off and on.
 * The rule: what a call said it stored reads back identical, or the read fails (a load with -EIO or
 * -EBADMSG; a page of a region with SIGBUS: swap-in load failures poison the page, docs/mm.md) and
 * only when faults were injected; never wrong data, never a hang (a watchdog aborts with a message),
 * never a crash. The last line:
 *   soak: seconds S seed N ops N stores N loads N frees N writebacks N swapoffs N injected eio=N
 *   enospc=N etimedout=N delay=N flip=N pages_verified N mismatches N hangs 0
 * Exit status: 0, or 1 on any mismatch, unexplained failure or unexpected return code.
 * For narrowing a failure down: SOAK_MODE=0|1 maps every region under the handler-mode (0) or the
 * SIGBUS-mode (1) instance; SOAK_SKIP=LETTERS skips coordinator steps (f fork, u unmap, m mremap,
 * d discard, l limit, s shrink, w swapoff); SOAK_DEBUG=1 says more about a mismatching page.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "rserver.h"
#include "uswap.h"

#define PS             USWAP_PAGE_SIZE
#define NSLOTS         1024
#define MAX_FOLIO      64
#define MAX_THREADS    16
#define MAX_SPANS      64
#define DEFAULT_FAULTS "eio=1:enospc=1:etimedout=0.5:delay=0.5:flip=0.1:delay_ms=2" /* percent */

static struct {
	unsigned seconds, layer_threads, mm_threads, watchdog_s;
	uint64_t seed;
	const char *faults;
	bool no_layer, no_mm, no_redis, quiet;
} opt = {600, 3, 3, 120, 0, DEFAULT_FAULTS, false, false, false, false};

static atomic_bool stop;
static _Atomic uint64_t progress; /* every finished operation, for the watchdog */
static _Atomic uint64_t n_stores, n_loads, n_frees, n_writebacks, n_swapoffs, n_verified, n_mismatches;
static _Atomic uint64_t n_store_fail, n_load_eio, n_load_badmsg, n_violations, n_mm_sigbus, n_mm_writes;
static _Atomic uint64_t n_forks, n_child_verified, n_child_sigbus, n_unmaps, n_remaps, n_discards, n_maps;
static bool faults_on; /* some rate is not zero: failures are explained */

static uint64_t rnd_next(uint64_t *s)
{
	uint64_t x = *s += 0x9e3779b97f4a7c15ull;

	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

#define VIOLATION(...)                                                                                       \
	do {                                                                                                 \
		atomic_fetch_add(&n_violations, 1);                                                          \
		fprintf(stderr, "soak: VIOLATION: " __VA_ARGS__);                                            \
	} while (0)

/* A failed load or SIGBUS is allowed only while faults are injected. */
static void load_failed(int err, const char *what)
{
	atomic_fetch_add(err == -EBADMSG ? &n_load_badmsg : &n_load_eio, 1);
	if (!faults_on)
		VIOLATION("%s failed (%d, %s) with no fault injected\n", what, err, uswap_errmsg());
}

/* ---------------------------------------------------------------- the swap layer ---- */

struct slot {
	pthread_mutex_t lock;
	uswap_id_t id;   /* 0: empty */
	uint32_t npages; /* of the folio */
	uint32_t first;  /* pages [0, first) freed by uswap_free_pages() */
	enum page_kind kind;
	uint64_t seed;
};

static struct uswap *layer;
static unsigned layer_tiers;
static struct slot slots[NSLOTS];
static atomic_bool swapoff_busy;

struct lthread {
	pthread_t th;
	unsigned idx;
	uint64_t rng;
	unsigned char *buf, *want;
	const char *_Atomic doing;
};

/* The bytes of pages [first, first + n) of the slot's folio. */
static void slot_expect(const struct slot *s, size_t first, size_t n, unsigned char *out)
{
	for (size_t i = 0; i < n; i++)
		fill_pages(out + i * PS, 1, s->kind, s->seed + first + i);
}

static void slot_fill(struct slot *s, unsigned char *out)
{
	slot_expect(s, 0, s->npages, out);
}

static void verify_bytes(const unsigned char *got, const unsigned char *want, size_t npages, const char *what,
			 uswap_id_t id)
{
	for (size_t i = 0; i < npages; i++) {
		if (memcmp(got + i * PS, want + i * PS, PS)) {
			atomic_fetch_add(&n_mismatches, 1);
			fprintf(stderr, "soak: MISMATCH: %s: page %zu of swap id %" PRIu64 " differs\n", what,
				i, id);
		}
	}
	atomic_fetch_add(&n_verified, npages);
}

static void op_store(struct lthread *t, struct slot *s)
{
	static const uint32_t sizes[] = {1, 1, 1, 2, 4, 16, 64};
	int ret;

	if (s->id) {
		if ((ret = uswap_free(layer, s->id)))
			VIOLATION("free of a live id: %d %s\n", ret, uswap_errmsg());
		s->id = 0;
	}
	s->npages = sizes[rnd_next(&t->rng) % 7];
	s->kind = (enum page_kind)(rnd_next(&t->rng) % 5);
	s->seed = rnd_next(&t->rng);
	s->first = 0;
	slot_fill(s, t->buf);
	ret = uswap_store(layer, t->buf, s->npages, &s->id);
	if (!ret) {
		atomic_fetch_add(&n_stores, 1);
		return;
	}
	s->id = 0;
	atomic_fetch_add(&n_store_fail, 1);
	if (ret != -ENOSPC && ret != -EIO && ret != -ETIMEDOUT)
		VIOLATION("store returned %d: %s\n", ret, uswap_errmsg());
	else if (!faults_on && ret != -ENOSPC)
		VIOLATION("store failed (%d, %s) with no fault injected\n", ret, uswap_errmsg());
}

static void op_load(struct lthread *t, struct slot *s)
{
	size_t first = s->first, n = s->npages - s->first;
	int ret;

	if (n > 1 && rnd_next(&t->rng) % 3 == 0) { /* a part */
		first += rnd_next(&t->rng) % n;
		n = 1 + rnd_next(&t->rng) % (s->npages - first);
	}
	ret = first == 0 && n == s->npages ? uswap_load(layer, s->id, t->buf, n)
					   : uswap_load_pages(layer, s->id, first, n, t->buf);
	if (ret) {
		if (ret != -EIO && ret != -EBADMSG)
			VIOLATION("load of id %" PRIu64 " returned %d: %s\n", s->id, ret, uswap_errmsg());
		load_failed(ret, "load");
		return;
	}
	atomic_fetch_add(&n_loads, 1);
	slot_expect(s, first, n, t->want);
	verify_bytes(t->buf, t->want, n, "load", s->id);
}

static void op_free(struct lthread *t, struct slot *s)
{
	int ret;

	if (s->npages - s->first > 1 && rnd_next(&t->rng) % 3 == 0) {
		uint32_t k = 1 + (uint32_t)(rnd_next(&t->rng) % (s->npages - s->first - 1));

		ret = uswap_free_pages(layer, s->id, s->first, k);
		if (ret)
			VIOLATION("free_pages: %d %s\n", ret, uswap_errmsg());
		s->first += k;
		return;
	}
	ret = uswap_free(layer, s->id);
	if (ret)
		VIOLATION("free: %d %s\n", ret, uswap_errmsg());
	s->id = 0;
	atomic_fetch_add(&n_frees, 1);
}

/* One page of each of up to 8 slots in one uswap_load_vec(): slots try-locked in ascending order. */
static void op_load_vec(struct lthread *t)
{
	uswap_id_t ids[8];
	uint32_t idx[8];
	struct slot *held[8];
	size_t n = 0, base = rnd_next(&t->rng) % (NSLOTS - 64);
	ssize_t got;

	for (size_t i = base; i < base + 64 && n < 8; i += 1 + rnd_next(&t->rng) % 8) {
		struct slot *s = &slots[i];

		if (pthread_mutex_trylock(&s->lock))
			continue;
		if (!s->id) {
			pthread_mutex_unlock(&s->lock);
			continue;
		}
		held[n] = s;
		ids[n] = s->id;
		idx[n] = s->first + (uint32_t)(rnd_next(&t->rng) % (s->npages - s->first));
		n++;
	}
	if (n) {
		got = uswap_load_vec(layer, ids, idx, n, t->buf);
		if (got < 0) {
			if (got != -EIO && got != -EBADMSG)
				VIOLATION("load_vec returned %zd: %s\n", got, uswap_errmsg());
			load_failed((int)got, "load_vec");
		} else {
			atomic_fetch_add(&n_loads, 1);
			for (ssize_t i = 0; i < got; i++) {
				slot_expect(held[i], idx[i], 1, t->want + i * PS);
				verify_bytes(t->buf + i * PS, t->want + i * PS, 1, "load_vec", ids[i]);
			}
		}
	}
	while (n--)
		pthread_mutex_unlock(&held[n]->lock);
}

static void op_writeback(struct lthread *t)
{
	ssize_t n;

	if (rnd_next(&t->rng) % 3 == 0) {
		n = uswap_maintain(layer);
	} else {
		n = uswap_writeback(layer, 1, 1 + rnd_next(&t->rng) % 512);
		if (n < 0 && n != -EIO && n != -EBADMSG && n != -ENOSPC && n != -ETIMEDOUT)
			VIOLATION("writeback returned %zd: %s\n", n, uswap_errmsg());
	}
	atomic_fetch_add(&n_writebacks, 1);
}

static void op_swapoff(struct uswap *u, unsigned nr_tiers, uint64_t *rng)
{
	unsigned tier = (unsigned)(rnd_next(rng) % nr_tiers);
	int ret;

	if (atomic_exchange(&swapoff_busy, true))
		return;
	ret = uswap_swapoff(u, tier);
	if (ret && ret != -ENOSPC && ret != -EIO)
		VIOLATION("swapoff of tier %u returned %d: %s\n", tier, ret, uswap_errmsg());
	atomic_fetch_add(&n_swapoffs, 1);
	usleep((useconds_t)(rnd_next(rng) % 20000));
	if ((ret = uswap_swapon(u, tier)))
		VIOLATION("swapon: %d\n", ret);
	atomic_store(&swapoff_busy, false);
}

static void *layer_main(void *arg)
{
	struct lthread *t = arg;

	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		unsigned r = (unsigned)(rnd_next(&t->rng) % 1000);
		struct slot *s = &slots[rnd_next(&t->rng) % NSLOTS];

		if (r < 60) {
			t->doing = "load_vec";
			op_load_vec(t);
		} else if (r < 100) {
			t->doing = "writeback";
			op_writeback(t);
		} else if (r < 102) {
			t->doing = "swapoff";
			op_swapoff(layer, layer_tiers, &t->rng);
		} else {
			pthread_mutex_lock(&s->lock);
			if (!s->id || r < 400) {
				t->doing = "store";
				op_store(t, s);
			} else if (r < 850) {
				t->doing = "load";
				op_load(t, s);
			} else {
				t->doing = "free";
				op_free(t, s);
			}
			pthread_mutex_unlock(&s->lock);
		}
		t->doing = NULL;
		atomic_fetch_add_explicit(&progress, 1, memory_order_relaxed);
	}
	return NULL;
}

/* After the run: every slot still holding data reads back identical (or fails, explained). */
static void layer_final(struct lthread *t)
{
	for (size_t i = 0; i < NSLOTS; i++) {
		if (!slots[i].id)
			continue;
		op_load(t, &slots[i]);
		atomic_fetch_add(&progress, 1);
	}
}

/* ---------------------------------------------------------------- memory regions ---- */

struct pstate {
	uint64_t uid;     /* the page's name, kept across mremap() */
	uint32_t ver;     /* 0: never written, reads zero */
	uint8_t owner;    /* the thread that may touch it */
	uint8_t poisoned; /* a touch got SIGBUS: its swap-in failed; every touch must get SIGBUS */
	uint8_t last_op;  /* for messages: 1 read, 2 write, 3 SIGBUS */
};

struct span {
	struct uswap_mm *m;
	unsigned char *addr;
	size_t npages, folio_pages;
	struct pstate *ps;
};

static struct uswap_mm *mms[2];
static struct span spans[MAX_SPANS];
static unsigned nr_spans;
static pthread_rwlock_t span_lock; /* workers read, the coordinator writes (writers first: else it starves) */
static uint64_t next_uid = 1;

struct mthread {
	pthread_t th;
	unsigned idx;
	uint64_t rng;
	unsigned char *want;
	const char *_Atomic doing;
	sigjmp_buf jb;
	volatile bool guard;
	void *volatile bus_addr;
	volatile int bus_code;
};

static _Thread_local struct mthread *self;

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	if (self && self->guard) {
		self->guard = false;
		self->bus_addr = si->si_addr;
		self->bus_code = si->si_code;
		siglongjmp(self->jb, 1);
	}
	signal(sig, SIG_DFL); /* not a touch of ours: the access faults again and kills */
}

static void page_expect(const struct pstate *p, unsigned char *out)
{
	static const enum page_kind kinds[] = {PK_TEXT, PK_SAME, PK_RANDOM, PK_TEXT, PK_ZERO};

	if (!p->ver)
		memset(out, 0, PS);
	else
		fill_page(out, kinds[p->ver % 5], p->uid * 0x9e3779b97f4a7c15ull + p->ver);
}

/*
 * Touch page @i of @sp (read and compare, or write a new version), guarded: a SIGBUS there marks the
 * page poisoned. A poisoned page must keep getting SIGBUS.
 */
static void mm_touch(struct mthread *t, struct span *sp, size_t i, bool write)
{
	struct pstate *p = &sp->ps[i];
	unsigned char *addr = sp->addr + i * PS;

	if (sigsetjmp(t->jb, 1)) {
		if ((unsigned char *)t->bus_addr < addr || (unsigned char *)t->bus_addr >= addr + PS)
			VIOLATION("SIGBUS (code %d) at %p while touching %p\n", t->bus_code, t->bus_addr,
				  (void *)addr);
		p->last_op = 3;
		if (!p->poisoned) {
			p->poisoned = 1;
			atomic_fetch_add(&n_mm_sigbus, 1);
			load_failed(-EIO, "swap-in of a region page (SIGBUS)");
		}
		return;
	}
	t->guard = true;
	if (write) {
		p->ver++;
		page_expect(p, t->want);
		memcpy(addr, t->want, PS);
		t->guard = false;
		if (p->poisoned)
			VIOLATION("a poisoned page at %p took a write\n", (void *)addr);
		p->poisoned = 0;
		p->last_op = 2;
		atomic_fetch_add(&n_mm_writes, 1);
		return;
	}
	page_expect(p, t->want);
	if (memcmp(addr, t->want, PS)) {
		t->guard = false;
		atomic_fetch_add(&n_mismatches, 1);
		fprintf(stderr,
			"soak: MISMATCH: region page %p (uid %" PRIu64
			" version %u%s, %s mode, folio %zu pages, page %zu of %zu) differs: %s\n",
			(void *)addr, p->uid, p->ver, p->poisoned ? ", poisoned before" : "",
			sp->m == mms[1] ? "SIGBUS" : "handler", sp->folio_pages, i, sp->npages,
			addr[0] == 0 && !memcmp(addr, addr + 1, PS - 1) ? "zeros" : "other bytes");
		if (getenv("SOAK_DEBUG")) {
			size_t f0 = i / sp->folio_pages * sp->folio_pages, np = 0;

			for (size_t j = f0; j < f0 + sp->folio_pages && j < sp->npages; j++)
				np += sp->ps[j].poisoned;
			fprintf(stderr,
				"soak: debug: %zu pages of its folio known poisoned; last op on it: %s\n", np,
				p->last_op == 1   ? "read"
				: p->last_op == 2 ? "write"
				: p->last_op == 3 ? "sigbus"
						  : "none");
		}
	}
	t->guard = false;
	if (p->poisoned)
		VIOLATION("a poisoned page at %p read without SIGBUS\n", (void *)addr);
	p->last_op = 1;
	atomic_fetch_add(&n_verified, 1);
}

static void *mm_main(void *arg)
{
	struct mthread *t = arg;

	self = t;
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		pthread_rwlock_rdlock(&span_lock);
		for (int k = 0; k < 64 && nr_spans; k++) {
			struct span *sp = &spans[rnd_next(&t->rng) % nr_spans];
			size_t i = rnd_next(&t->rng) % sp->npages;

			/* the pages of a span next to each other, sometimes: folios and readahead */
			for (size_t run = 1 + (rnd_next(&t->rng) % 4 == 0 ? rnd_next(&t->rng) % 32 : 0);
			     run-- && i < sp->npages; i++) {
				if (sp->ps[i].owner != t->idx)
					continue;
				if (sp->ps[i].poisoned && rnd_next(&t->rng) % 8)
					continue;
				t->doing = "touch";
				mm_touch(t, sp, i, rnd_next(&t->rng) % 5 < 2);
			}
			atomic_fetch_add_explicit(&progress, 1, memory_order_relaxed);
		}
		t->doing = NULL;
		pthread_rwlock_unlock(&span_lock);
	}
	return NULL;
}

static const size_t folio_choices[] = {1, 1, 4, 16, 512};

/* A new region of @npages under instance @m. Context: span_lock held for writing. */
static void span_map(struct uswap_mm *m, size_t npages, uint64_t *rng)
{
	size_t folio = folio_choices[rnd_next(rng) % 5];
	struct span *sp;
	void *p;
	int ret;

	if (nr_spans == MAX_SPANS)
		return;
	npages = (npages + folio - 1) / folio * folio;
	ret = uswap_map(m, npages * PS, folio * PS, &p);
	if (ret) {
		VIOLATION("uswap_map of %zu pages: %d %s\n", npages, ret, uswap_errmsg());
		return;
	}
	sp = &spans[nr_spans++];
	sp->m = m;
	sp->addr = p;
	sp->npages = npages;
	sp->folio_pages = folio;
	sp->ps = calloc(npages, sizeof(*sp->ps));
	for (size_t i = 0; i < npages; i++) {
		sp->ps[i].uid = next_uid++;
		sp->ps[i].owner = (uint8_t)(rnd_next(rng) % opt.mm_threads);
	}
	atomic_fetch_add(&n_maps, 1);
}

static void span_drop(unsigned k)
{
	free(spans[k].ps);
	spans[k] = spans[--nr_spans];
}

static size_t spans_pages(void)
{
	size_t n = 0;

	for (unsigned k = 0; k < nr_spans; k++)
		n += spans[k].npages;
	return n;
}

/* A cut point in span @sp: on a folio boundary, or (1 in 4) anywhere. */
static size_t span_cut(struct span *sp, uint64_t *rng)
{
	size_t at = 1 + rnd_next(rng) % (sp->npages - 1);

	if (rnd_next(rng) % 4 && sp->folio_pages > 1)
		at = at / sp->folio_pages * sp->folio_pages;
	return at ? at : sp->folio_pages < sp->npages ? sp->folio_pages : 1;
}

/* In a fork child: page @i of @sp against its state. Return: 0 same, 1 SIGBUS, 2 differs. */
static int child_check_page(struct mthread *ct, struct span *sp, size_t i)
{
	const struct pstate *p = &sp->ps[i];
	int differs;

	if (sigsetjmp(ct->jb, 1))
		return 1;
	page_expect(p, ct->want);
	ct->guard = true;
	differs = memcmp(sp->addr + i * PS, ct->want, PS) != 0;
	ct->guard = false;
	if (differs)
		fprintf(stderr, "soak: MISMATCH in fork child: page %p (uid %" PRIu64 " version %u)\n",
			(void *)(sp->addr + i * PS), p->uid, p->ver);
	return differs ? 2 : 0;
}

/* Fork a child that checks every page (workers paused); it reports pages checked and SIGBUS pages. */
static void mm_fork_check(void)
{
	uint64_t res[3] = {0, 0, 0}; /* verified, SIGBUS, mismatches */
	int fds[2], st = 0;
	pid_t pid;

	if (pipe(fds))
		return;
	pid = fork();
	if (pid == 0) {
		static struct mthread ct;
		static unsigned char want[PS];

		self = &ct;
		ct.want = want;
		for (unsigned k = 0; k < nr_spans; k++)
			for (size_t i = 0; i < spans[k].npages; i++)
				if (!spans[k].ps[i].poisoned)
					res[child_check_page(&ct, &spans[k], i)]++;
		res[0] += res[2];
		if (write(fds[1], res, sizeof(res)) != sizeof(res))
			_exit(2);
		_exit(0);
	}
	close(fds[1]);
	if (pid > 0) {
		if (read(fds[0], res, sizeof(res)) != sizeof(res) || waitpid(pid, &st, 0) != pid ||
		    !WIFEXITED(st) || WEXITSTATUS(st))
			VIOLATION("fork child died or said nothing (status %#x)\n", st);
		atomic_fetch_add(&n_forks, 1);
		atomic_fetch_add(&n_child_verified, res[0]);
		atomic_fetch_add(&n_verified, res[0]);
		atomic_fetch_add(&n_child_sigbus, res[1]);
		atomic_fetch_add(&n_mismatches, res[2]);
		if (res[1])
			load_failed(-EIO, "a page in a fork child (SIGBUS)");
	}
	close(fds[0]);
}

/* One structural change, with every worker paused. */
static void mm_coordinate(uint64_t *rng, size_t target_pages)
{
	unsigned r = (unsigned)(rnd_next(rng) % 100);
	struct span *sp;
	size_t cut;
	int ret;

	pthread_rwlock_wrlock(&span_lock);
	if (spans_pages() < target_pages || nr_spans == 0) {
		span_map(mms[getenv("SOAK_MODE") ? (uint64_t)atoi(getenv("SOAK_MODE")) : rnd_next(rng) % 2],
			 256 + rnd_next(rng) % 2048, rng);
		goto out;
	}
	sp = &spans[rnd_next(rng) % nr_spans];
	if (getenv("SOAK_SKIP") && strchr(getenv("SOAK_SKIP"), "fumdlsw"[r < 10   ? 0
									 : r < 25 ? 1
									 : r < 40 ? 2
									 : r < 55 ? 3
									 : r < 70 ? 4
									 : r < 75 ? 5
									 : r < 85 ? 6
										  : 0]))
		goto out;
	if (r < 10) {
		mm_fork_check();
	} else if (r < 25 && sp->npages > 1) { /* unmap the tail, or the whole span */
		cut = rnd_next(rng) % 3 ? span_cut(sp, rng) : 0;
		if (rnd_next(rng) % 2)
			ret = uswap_unmap(sp->m, sp->addr + cut * PS, (sp->npages - cut) * PS);
		else
			ret = munmap(sp->addr + cut * PS, (sp->npages - cut) * PS) ? -errno
										   : uswap_mm_sync(sp->m);
		if (ret)
			VIOLATION("unmap: %d\n", ret);
		atomic_fetch_add(&n_unmaps, 1);
		sp->npages = cut;
		if (!cut)
			span_drop((unsigned)(sp - spans));
	} else if (r < 40 && sp->npages > 1 && nr_spans < MAX_SPANS) { /* the tail moves elsewhere */
		struct span *nsp;
		size_t len;
		void *to;

		cut = span_cut(sp, rng);
		len = (sp->npages - cut) * PS;
		/* to a place of its own (a same-size mremap without one moves nothing) */
		to = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (to != MAP_FAILED)
			to = mremap(sp->addr + cut * PS, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, to);
		if (to == MAP_FAILED) {
			VIOLATION("mremap of %zu pages at %p (+%zu of a span of folios of %zu pages): %s\n",
				  len / PS, (void *)(sp->addr + cut * PS), cut, sp->folio_pages,
				  strerror(errno));
			goto out;
		}
		if (uswap_mm_sync(sp->m))
			VIOLATION("uswap_mm_sync after mremap\n");
		atomic_fetch_add(&n_remaps, 1);
		nsp = &spans[nr_spans++];
		nsp->m = sp->m;
		nsp->addr = to;
		nsp->npages = sp->npages - cut;
		nsp->folio_pages = 1; /* moved pages keep their folios only if the move kept the alignment */
		nsp->ps = malloc(nsp->npages * sizeof(*nsp->ps));
		memcpy(nsp->ps, sp->ps + cut, nsp->npages * sizeof(*nsp->ps));
		sp->npages = cut;
	} else if (r < 55) { /* discard a range: reads zero after, poison gone */
		size_t from = rnd_next(rng) % sp->npages, n = 1 + rnd_next(rng) % (sp->npages - from);

		ret = uswap_mm_discard(sp->m, sp->addr + from * PS, n * PS);
		if (ret)
			VIOLATION("discard: %d %s\n", ret, uswap_errmsg());
		for (size_t i = from; i < from + n; i++) {
			sp->ps[i].ver = 0;
			sp->ps[i].poisoned = 0;
		}
		atomic_fetch_add(&n_discards, 1);
	} else if (r < 70) {
		uswap_mm_set_limit(mms[rnd_next(rng) % 2], (4 + rnd_next(rng) % 20) << 20);
	} else if (r < 75) {
		uswap_mm_shrink(mms[rnd_next(rng) % 2], (rnd_next(rng) % 8) << 20);
	} else if (r < 85) {
		struct uswap *u = uswap_mm_swap(mms[rnd_next(rng) % 2]);

		pthread_rwlock_unlock(&span_lock); /* a swapoff runs while the program runs */
		op_swapoff(u, 3, rng);
		return;
	}
out:
	pthread_rwlock_unlock(&span_lock);
}

static void *mm_coord_main(void *arg)
{
	uint64_t rng = *(uint64_t *)arg;
	size_t target = 12288; /* 48 MiB of pages over two limits of 4..24 MiB */

	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		mm_coordinate(&rng, target);
		atomic_fetch_add(&progress, 1);
		usleep(20000 + (useconds_t)(rnd_next(&rng) % 200000));
	}
	return NULL;
}

/* After the run: every page of every span once more. */
static void mm_final(struct mthread *t)
{
	self = t;
	for (unsigned k = 0; k < nr_spans; k++) {
		for (size_t i = 0; i < spans[k].npages; i++) {
			mm_touch(t, &spans[k], i, false);
			atomic_fetch_add(&progress, 1);
		}
	}
}

/* ---------------------------------------------------------------- the run ---- */

static const char *_Atomic phase = "start";

static void *watchdog_main(void *arg)
{
	struct lthread *lt = arg;
	uint64_t last = 0, since = mono_ms();

	for (;;) {
		uint64_t now = atomic_load(&progress);

		sleep(1);
		if (now != last) {
			last = now;
			since = mono_ms();
			continue;
		}
		if (mono_ms() - since < opt.watchdog_s * 1000ull)
			continue;
		fprintf(stderr,
			"soak: HANG: no progress for %u s in phase %s; layer threads doing:", opt.watchdog_s,
			atomic_load(&phase));
		for (unsigned i = 0; i < opt.layer_threads && !opt.no_layer; i++) {
			const char *d = lt[i].doing;

			fprintf(stderr, " %s", d ? d : "-");
		}
		fprintf(stderr, "\nsoak: seconds %u seed %" PRIu64 " hangs 1\n", opt.seconds, opt.seed);
		abort();
	}
	return NULL;
}

static void add_faults(struct uswap *u, uint64_t f[5])
{
	struct uswap_stats st;

	uswap_stats(u, &st);
	for (unsigned t = 0; t < st.nr_tiers; t++) {
		f[0] += st.tier[t].faults_eio;
		f[1] += st.tier[t].faults_enospc;
		f[2] += st.tier[t].faults_etimedout;
		f[3] += st.tier[t].faults_delay;
		f[4] += st.tier[t].faults_flip;
	}
}

static void usage(void)
{
	fprintf(stderr,
		"usage: soak [--seconds N] [--seed N] [--faults RATES|none] [--layer-threads N] "
		"[--mm-threads N] [--watchdog S] [--no-layer] [--no-mm] [--no-redis]\n"
		"RATES: the options of a fault() tier, default %s\n",
		DEFAULT_FAULTS);
	exit(2);
}

static void parse_args(int argc, char **argv)
{
	const char *env = getenv("USWAP_FAULT_SEED");

	opt.seed = env && *env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) % 1000000;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--no-layer"))
			opt.no_layer = true;
		else if (!strcmp(a, "--no-mm"))
			opt.no_mm = true;
		else if (!strcmp(a, "--no-redis"))
			opt.no_redis = true;
		else if (!v)
			usage();
		else if (!strcmp(a, "--seconds"))
			opt.seconds = (unsigned)atoi(v), i++;
		else if (!strcmp(a, "--seed"))
			opt.seed = strtoull(v, NULL, 0), i++;
		else if (!strcmp(a, "--faults"))
			opt.faults = strcmp(v, "none") ? v : "", i++;
		else if (!strcmp(a, "--layer-threads"))
			opt.layer_threads = (unsigned)atoi(v), i++;
		else if (!strcmp(a, "--mm-threads"))
			opt.mm_threads = (unsigned)atoi(v), i++;
		else if (!strcmp(a, "--watchdog"))
			opt.watchdog_s = (unsigned)atoi(v), i++;
		else
			usage();
	}
	if (!opt.layer_threads || opt.layer_threads > MAX_THREADS || !opt.mm_threads ||
	    opt.mm_threads > MAX_THREADS)
		usage();
	faults_on = strstr(opt.faults, "eio=") || strstr(opt.faults, "enospc=") ||
		    strstr(opt.faults, "etimedout=") || strstr(opt.faults, "flip=");
}

/* "fault(INNER):RATES:seed=N" into @buf. */
static const char *wrap(char *buf, size_t len, const char *inner, uint64_t seed)
{
	snprintf(buf, len, "fault(%s)%s%s:seed=%" PRIu64, inner, *opt.faults ? ":" : "", opt.faults, seed);
	return buf;
}

int main(int argc, char **argv)
{
	struct lthread lt[MAX_THREADS];
	struct mthread mt[MAX_THREADS];
	struct rserver rs = {0};
	pthread_t wd, coord;
	uint64_t coord_rng, faults[5] = {0, 0, 0, 0, 0}, t0;
	char spec[512], a[160], b[160], c[160];
	struct sigaction sa = {.sa_sigaction = on_sigbus, .sa_flags = SA_SIGINFO | SA_NODEFER};
	int ret;

	parse_args(argc, argv);
	{
		pthread_rwlockattr_t ra;

		pthread_rwlockattr_init(&ra);
		pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
		pthread_rwlock_init(&span_lock, &ra);
		pthread_rwlockattr_destroy(&ra);
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("soak: seed %" PRIu64 " (--seed %" PRIu64 " or USWAP_FAULT_SEED=%" PRIu64
	       " replays), %u s, faults %s\n",
	       opt.seed, opt.seed, opt.seed, opt.seconds, *opt.faults ? opt.faults : "none");
	sigaction(SIGBUS, &sa, NULL); /* before the SIGBUS-mode instance, which passes foreign ones here */
	memset(lt, 0, sizeof(lt));
	memset(mt, 0, sizeof(mt));

	if (!opt.no_layer) {
		int n = snprintf(spec, sizeof(spec), "same,%s,%s",
				 wrap(a, sizeof(a), "zpool:lz4:max=16M", opt.seed),
				 wrap(b, sizeof(b), "file:size=512M", opt.seed + 1));

		if (!opt.no_redis && rserver_available() && !rserver_start(&rs, "noeviction", NULL)) {
			char r[64];

			snprintf(r, sizeof(r), "redis://127.0.0.1:%d", rs.port);
			snprintf(spec + n, sizeof(spec) - (size_t)n, ",%s",
				 wrap(c, sizeof(c), r, opt.seed + 2));
		}
		printf("soak: layer tiers %s\n", spec);
		ret = uswap_create(&layer, spec);
		if (ret) {
			fprintf(stderr, "soak: uswap_create: %s\n", uswap_errmsg());
			return 1;
		}
		layer_tiers = 3 + (strstr(spec, "redis") != NULL);
		for (size_t i = 0; i < NSLOTS; i++)
			pthread_mutex_init(&slots[i].lock, NULL);
	}
	if (!opt.no_mm) {
		for (unsigned k = 0; k < 2; k++) {
			struct uswap_mm_options o = {
				.limit_bytes = 8 << 20, .sigbus_mode = k, .nr_threads = 2};

			snprintf(spec, sizeof(spec), "same,%s,%s",
				 wrap(a, sizeof(a), "zpool:lz4:max=4M", opt.seed + 10 + 2 * k),
				 wrap(b, sizeof(b), "file:size=512M", opt.seed + 11 + 2 * k));
			o.tiers = spec;
			if (!k)
				printf("soak: mm tiers %s (and seeds +2 for the SIGBUS-mode instance)\n",
				       spec);
			ret = uswap_mm_create(&mms[k], &o);
			if (ret == -EPERM || ret == -EOPNOTSUPP) {
				printf("soak: no memory regions here: %s\n", uswap_errmsg());
				opt.no_mm = true;
				break;
			}
			if (ret) {
				fprintf(stderr, "soak: uswap_mm_create: %s\n", uswap_errmsg());
				return 1;
			}
		}
	}

	pthread_create(&wd, NULL, watchdog_main, lt);
	pthread_detach(wd);
	t0 = mono_ms();
	atomic_store(&phase, "run");
	for (unsigned i = 0; i < opt.layer_threads && !opt.no_layer; i++) {
		lt[i].idx = i;
		lt[i].rng = opt.seed * 1000 + i;
		lt[i].buf = malloc(MAX_FOLIO * PS);
		lt[i].want = malloc(MAX_FOLIO * PS);
		pthread_create(&lt[i].th, NULL, layer_main, &lt[i]);
	}
	coord_rng = opt.seed * 1000 + 999;
	for (unsigned i = 0; i < opt.mm_threads && !opt.no_mm; i++) {
		mt[i].idx = i;
		mt[i].rng = opt.seed * 1000 + 100 + i;
		mt[i].want = malloc(PS);
		pthread_create(&mt[i].th, NULL, mm_main, &mt[i]);
	}
	if (!opt.no_mm)
		pthread_create(&coord, NULL, mm_coord_main, &coord_rng);
	while (mono_ms() - t0 < opt.seconds * 1000ull) {
		usleep(100000);
		if (!opt.quiet && (mono_ms() - t0) % 60000 < 100)
			printf("soak: %" PRIu64 " s, %" PRIu64 " ops, %" PRIu64 " pages verified, %" PRIu64
			       " mismatches\n",
			       (mono_ms() - t0) / 1000, atomic_load(&progress), atomic_load(&n_verified),
			       atomic_load(&n_mismatches));
	}
	atomic_store(&stop, true);
	atomic_store(&phase, "stop");
	for (unsigned i = 0; i < opt.layer_threads && !opt.no_layer; i++)
		pthread_join(lt[i].th, NULL);
	for (unsigned i = 0; i < opt.mm_threads && !opt.no_mm; i++)
		pthread_join(mt[i].th, NULL);
	if (!opt.no_mm)
		pthread_join(coord, NULL);

	atomic_store(&phase, "final check");
	if (!opt.no_layer) {
		for (unsigned t = 0; t < layer_tiers; t++)
			uswap_swapon(layer, t);
		layer_final(&lt[0]);
		add_faults(layer, faults);
	}
	if (!opt.no_mm) {
		mm_final(&mt[0]);
		for (unsigned k = 0; k < 2; k++) {
			struct uswap_mm_stats ms;

			add_faults(uswap_mm_swap(mms[k]), faults);
			uswap_mm_stats(mms[k], &ms);
			printf("soak: mm %s: swapins %" PRIu64 " evictions %" PRIu64
			       " store_failures %" PRIu64 " load_failures %" PRIu64 " events unmap %" PRIu64
			       " remap %" PRIu64 " remove %" PRIu64 "\n",
			       k ? "sigbus mode" : "handler mode", ms.swapins, ms.evictions,
			       ms.store_failures, ms.load_failures, ms.events_unmap, ms.events_remap,
			       ms.events_remove);
		}
	}
	atomic_store(&phase, "teardown");
	if (!opt.no_layer)
		uswap_destroy(layer);
	for (unsigned k = 0; k < 2 && !opt.no_mm; k++)
		uswap_mm_destroy(mms[k]);
	if (rs.pid)
		rserver_kill(&rs);
	for (unsigned i = 0; i < MAX_THREADS; i++) {
		free(lt[i].buf);
		free(lt[i].want);
		free(mt[i].want);
	}
	while (nr_spans)
		span_drop(nr_spans - 1);

	printf("soak: failures store %" PRIu64 " load_eio %" PRIu64 " load_badmsg %" PRIu64
	       " region_sigbus %" PRIu64 " child_sigbus %" PRIu64 "; mm writes %" PRIu64 " forks %" PRIu64
	       " (child pages %" PRIu64 ") maps %" PRIu64 " unmaps %" PRIu64 " mremaps %" PRIu64
	       " discards %" PRIu64 "; violations %" PRIu64 "\n",
	       atomic_load(&n_store_fail), atomic_load(&n_load_eio), atomic_load(&n_load_badmsg),
	       atomic_load(&n_mm_sigbus), atomic_load(&n_child_sigbus), atomic_load(&n_mm_writes),
	       atomic_load(&n_forks), atomic_load(&n_child_verified), atomic_load(&n_maps),
	       atomic_load(&n_unmaps), atomic_load(&n_remaps), atomic_load(&n_discards),
	       atomic_load(&n_violations));
	printf("soak: seconds %u seed %" PRIu64 " ops %" PRIu64 " stores %" PRIu64 " loads %" PRIu64
	       " frees %" PRIu64 " writebacks %" PRIu64 " swapoffs %" PRIu64 " injected eio=%" PRIu64
	       " enospc=%" PRIu64 " etimedout=%" PRIu64 " delay=%" PRIu64 " flip=%" PRIu64
	       " pages_verified %" PRIu64 " mismatches %" PRIu64 " hangs 0\n",
	       opt.seconds, opt.seed, atomic_load(&progress), atomic_load(&n_stores), atomic_load(&n_loads),
	       atomic_load(&n_frees), atomic_load(&n_writebacks), atomic_load(&n_swapoffs), faults[0],
	       faults[1], faults[2], faults[3], faults[4], atomic_load(&n_verified),
	       atomic_load(&n_mismatches));
	return atomic_load(&n_mismatches) || atomic_load(&n_violations) ? 1 : 0;
}
