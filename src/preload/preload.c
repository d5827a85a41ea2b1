/*
 * preload.c - LD_PRELOAD library of `uswap run` (with heap.c and intercept.c; preload.h says which
 * file does what): puts a program's anonymous memory under one uswap_mm
 * instance configured from the environment (USWAP_LIMIT, USWAP_TIERS, USWAP_FOLIO, USWAP_HEAP,
 * USWAP_STATS_JSON, USWAP_MIN_MAP, USWAP_POOL_IN_LIMIT); without USWAP_LIMIT it does nothing.
 *
 * What is managed:
 *  - the malloc family, glibc's main arena included: it is served by mimalloc from one big reservation
 *    (USWAP_HEAP, default 64 GiB of address space) registered with the instance in doubling chunks. glibc's own malloc
 *    calls brk and mmap through internal symbols that cannot be interposed, so it is replaced rather
 *    than watched. Memory malloc'd before the instance existed stays glibc's and is freed there.
 *  - anonymous private read-write mmaps of USWAP_MIN_MAP bytes or more (128 KiB), registered as they
 *    are made, and PROT_NONE reservations of that size up to 4 GiB (the parts a program later makes
 *    read-write with mprotect() are its heap); munmap, mremap and madvise of them reach the instance
 *    as userfaultfd events.
 * The library's own memory never is: its threads (created while the instance starts) and every call
 * made from here carry a thread-local mark, and under the mark malloc is glibc's and mmap is plain.
 * A fork child starts with plain copies (the instance brings in every page the child gets before
 * fork). The first time it asks for new memory (a new arena chunk, a mapping worth managing, a block
 * of DISCARD_MIN or more, or ADOPT_AFTER in all) it starts an instance of its own with the same
 * options, which takes over the ranges the parent had: what the child inherited stays plain (shared
 * with the parent until written), what it touches anew is under its limit (USWAP_FORK_CHILD=plain:
 * the child stays unmanaged). A child that execs starts its own instance from the inherited
 * environment.
 * Live statistics: /dev/shm/uswap.PID (see util/live.h), for `uswap stat`. Under `uswap run` (USWAP_RUN
 * names it) the file outlives the process: the runner sums up every process it ran, then removes them.
 */
#include "preload/preload.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <mimalloc.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>

#include "util/live.h"
#include "util/clock.h"
#include "util/thread.h"

struct uswap_mm *g_mm;
pid_t g_pid;
struct uswap_mm_options g_opts;
bool g_fork_own = true;
_Atomic int g_adopt;
atomic_bool g_managing;
atomic_bool g_heap;
uintptr_t g_arena, g_arena_end;
size_t g_min_map = DEFAULT_MIN_MAP;
__thread int t_internal;
mmap_fn real_mmap;
pthread_create_fn real_pthread_create;

struct live_stats *g_live;
static int32_t g_run_pid; /* USWAP_RUN: the `uswap run` that collects our figures at the end */
static pthread_t g_live_thread;
static char g_stats_json[4096];
static char g_tiers[256];
static bool g_budget; /* the limit covers the pool too (USWAP_POOL_IN_LIMIT, the default tiers) */

void *sys_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	if (real_mmap)
		return real_mmap(addr, len, prot, flags, fd, off);
	return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

/* ---- statistics ---- */

static void live_update(void)
{
	struct uswap_mm_stats ms;
	struct uswap_stats ss;

	uswap_mm_stats(g_mm, &ms);
	uswap_stats(uswap_mm_swap(g_mm), &ss);
	g_live->seq++;
	__sync_synchronize(); /* seqlock: the reader is another process */
	g_live->mm = ms;
	g_live->swap = ss;
	g_live->budget_bytes = g_budget ? ms.budget_bytes : 0;
	live_hist_add(&g_live->hist, (wall_ns() - g_live->started_ns) / 1000000,
		      ms.budget_bytes ? ms.budget_bytes : ms.limit_bytes);
	g_live->updated_ns = wall_ns();
	__sync_synchronize(); /* seqlock: the reader is another process */
	g_live->seq++;
}

static void *live_main(void *arg)
{
	(void)arg;
	for (;;) {
		struct timespec ts = {0, LIVE_PERIOD_MS * 1000000L};

		if (getpid() != g_pid)
			return NULL;
		cache_age();
		live_update();
		nanosleep(&ts, NULL);
	}
	return NULL;
}

static void live_start(void)
{
	char path[64];
	int fd;

	snprintf(path, sizeof(path), LIVE_PATH_FMT, (int)g_pid);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return;
	if (ftruncate(fd, sizeof(struct live_stats))) {
		close(fd);
		unlink(path);
		return;
	}
	g_live = sys_mmap(NULL, sizeof(struct live_stats), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (g_live == MAP_FAILED) {
		g_live = NULL;
		unlink(path);
		return;
	}
	g_live->magic = LIVE_MAGIC;
	g_live->pid = (int32_t)g_pid;
	g_live->run_pid = g_run_pid;
	prctl(PR_GET_NAME, g_live->comm);
	g_live->started_ns = wall_ns();
	snprintf(g_live->tiers, sizeof(g_live->tiers), "%s", g_tiers);
	live_update();
	if (thread_start(&g_live_thread, "uswap-live", live_main, NULL) == 0)
		pthread_detach(g_live_thread);
}

static void write_stats_json(void)
{
	struct live_stats l = {.magic = LIVE_MAGIC, .pid = (int32_t)g_pid, .exited = 1};
	FILE *f;

	if (!g_stats_json[0])
		return;
	f = fopen(g_stats_json, "w");
	if (!f) {
		fprintf(stderr, "uswap: cannot write %s: %s\n", g_stats_json, strerror(errno));
		return;
	}
	snprintf(l.tiers, sizeof(l.tiers), "%s", g_tiers);
	uswap_mm_stats(g_mm, &l.mm);
	l.budget_bytes = g_budget ? l.mm.budget_bytes : 0;
	if (g_live)
		l.hist = g_live->hist;
	uswap_stats(uswap_mm_swap(g_mm), &l.swap);
	live_print_json(f, &l, NULL, 0);
	fclose(f);
}

/* ---- start and end ---- */

static void fork_child(void)
{
	/* The instance belongs to the parent: the child's memory is plain until it has its own. */
	atomic_store(&g_managing, false);
	g_live = NULL;
	g_stats_json[0] = '\0'; /* the summary is the program's */
	atomic_store(&g_child_alloc, 0);
	atomic_store(&g_lock_future, 0); /* mlockall(MCL_FUTURE) is not inherited */
	atomic_store(&g_adopt, g_fork_own ? ADOPT_PENDING : ADOPT_NONE);
}

/*
 * A fork child's own instance, started by the first thread that asks for new memory; the others wait
 * for it. It takes over the ranges the parent's instance had at fork (uswap_mm_adopt_forked()).
 * Failing that, the child stays plain.
 */
void child_adopt(void)
{
	int want = ADOPT_PENDING;
	struct uswap_mm *m;

	if (!atomic_compare_exchange_strong(&g_adopt, &want, ADOPT_BUSY)) {
		while (atomic_load(&g_adopt) == ADOPT_BUSY)
			sched_yield();
		return;
	}
	t_internal++;
	if (!uswap_mm_create(&m, &g_opts)) {
		uswap_mm_adopt_forked(m, g_mm);
		g_mm = m;
		__atomic_store_n(&g_pid, getpid(), __ATOMIC_RELEASE);
		live_start();
		atomic_store(&g_managing, true);
	} else {
		fprintf(stderr, "uswap: forked child %d stays unmanaged: %s\n", (int)getpid(),
			uswap_errmsg());
	}
	t_internal--;
	atomic_store(&g_adopt, ADOPT_NONE);
}

/*
 * An instance holds descriptors for life: two userfaultfds, an eventfd, the swap file and its io_uring
 * rings (10 with the default tiers; more with a Redis tier), and opens a few for a moment (a pidfd,
 * /proc/self/pagemap and maps).
 * They are moved high in the table, but under a low RLIMIT_NOFILE there is no room above the
 * program's own: they would be the ones it needs. Then the program runs unmanaged, said once.
 */
#define INSTANCE_FDS 16
#define FD_HEADROOM  16

/* Descriptors this process may still open under its soft RLIMIT_NOFILE (LONG_MAX: no limit). */
static long free_fds(void)
{
	struct rlimit rl;
	char buf[4096];
	long nr_open = 0;
	int dir;

	if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur == RLIM_INFINITY)
		return LONG_MAX;
	dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dir < 0)
		return LONG_MAX;
	for (;;) {
		long n = syscall(SYS_getdents64, dir, buf, sizeof(buf));

		if (n <= 0)
			break;
		for (long off = 0; off < n;) {
			const struct {
				uint64_t ino;
				int64_t off;
				unsigned short reclen;
				unsigned char type;
				char name[];
			} *d = (const void *)(buf + off);

			nr_open += d->name[0] != '.';
			off += d->reclen;
		}
	}
	close(dir);
	return (long)rl.rlim_cur - (nr_open - 1); /* the directory's own descriptor is gone again */
}

static _Noreturn void fail(const char *what, int err)
{
	fprintf(stderr, "uswap: cannot put this program under uswap: %s: %s\n", what,
		uswap_errmsg()[0] ? uswap_errmsg() : strerror(-err));
	_exit(2);
}

__attribute__((constructor(101))) static void preload_init(void)
{
	const char *lim = getenv("USWAP_LIMIT"), *s;
	struct uswap_mm_options o = {0};
	uint64_t heap = DEFAULT_HEAP, v;
	bool heap_given = false;
	int ret;

	if (!lim || !*lim)
		return;
	find_ldso();
	if (free_fds() < INSTANCE_FDS + FD_HEADROOM) {
		fprintf(stderr,
			"uswap: pid %d runs unmanaged: RLIMIT_NOFILE leaves it %ld free descriptors, and an "
			"instance would hold up to %d of them\n",
			(int)getpid(), free_fds(), INSTANCE_FDS);
		return;
	}
	real_mmap = (mmap_fn)dlsym(RTLD_NEXT, "mmap");
	real_pthread_create = (pthread_create_fn)dlsym(RTLD_NEXT, "pthread_create");
	t_internal = 1;
	g_pid = getpid();
	if (uswap_parse_limit(lim, &o))
		fail("USWAP_LIMIT", -EINVAL);
	/* The default stack puts the pool inside the limit; USWAP_POOL_IN_LIMIT says otherwise. */
	s = getenv("USWAP_TIERS");
	if (s && *s)
		snprintf(g_tiers, sizeof(g_tiers), "%s", s);
	else
		uswap_default_tiers(o.limit_bytes, g_tiers, sizeof(g_tiers));
	o.tiers = g_tiers;
	o.pool_in_limit = !(s && *s);
	if ((s = getenv("USWAP_POOL_IN_LIMIT")) && *s)
		o.pool_in_limit = atoi(s) != 0;
	g_budget = o.pool_in_limit; /* the budget itself moves under limit_auto: read from the statistics */
	if ((s = getenv("USWAP_FOLIO")) && *s) {
		if (uswap_parse_size(s, 0, &v))
			fail("USWAP_FOLIO", -EINVAL);
		o.folio_bytes = (size_t)v;
	}
	if ((s = getenv("USWAP_HEAP")) && *s) {
		if (uswap_parse_size(s, 0, &heap) || heap < ARENA_ALIGN)
			fail("USWAP_HEAP", -EINVAL);
		heap_given = true;
	}
	if ((s = getenv("USWAP_MIN_MAP")) && *s) {
		if (uswap_parse_size(s, 0, &v))
			fail("USWAP_MIN_MAP", -EINVAL);
		g_min_map = (size_t)v;
	}
	if ((s = getenv("USWAP_FORK_CHILD")) && *s) {
		if (strcmp(s, "own") && strcmp(s, "plain"))
			fail("USWAP_FORK_CHILD (own or plain)", -EINVAL);
		g_fork_own = !strcmp(s, "own");
	}
	if ((s = getenv("USWAP_RUN")) && *s)
		g_run_pid = (int32_t)atoi(s);
	/* The summary is the program's: `uswap run` names its pid, so children do not overwrite it. */
	if ((s = getenv("USWAP_STATS_JSON")) && *s) {
		const char *who = getenv("USWAP_STATS_PID");

		if (!who || !*who || atoi(who) == (int)g_pid)
			snprintf(g_stats_json, sizeof(g_stats_json), "%s", s);
	}

	/*
	 * Registered before the instance's own handlers, so that at fork this one runs last: the
	 * instance's (which read /proc and may allocate) never meet the cache locked.
	 */
	pthread_atfork(cache_lock, cache_unlock, cache_unlock);
	o.discards_reported = !((s = getenv("USWAP_REMOVE_EVENTS")) && *s && atoi(s));
	g_discards_reported = o.discards_reported;
	g_opts = o;
	ret = uswap_mm_create(&g_mm, &o);
	/*
	 * No userfaultfd for this process: `uswap run` checked its own user, so this is a program
	 * started as another one (su, a daemon dropping root, subprocess's user=). It runs as it would
	 * plainly, as under a low RLIMIT_NOFILE; nothing is set up yet.
	 */
	if (ret == -EPERM) {
		fprintf(stderr, "uswap: pid %d runs unmanaged: %s\n", (int)getpid(), uswap_errmsg());
		g_mm = NULL;
		t_internal = 0;
		return;
	}
	if (ret)
		fail("starting the instance", ret);

	/* The heap: one aligned reservation, registered, then handed to mimalloc as its only memory. */
	uintptr_t base = reserve_heap(&heap, heap_given);

	if (!base)
		fail(heap_given ? "reserving USWAP_HEAP" : "reserving the heap (see ulimit -v)", -ENOMEM);
	mi_option_set(mi_option_limit_os_alloc, 1);
	g_arena = base;
	g_arena_end = base + heap;
	if (!grow_arena(0, false))
		fail("registering the heap", -ENOMEM);
	pthread_atfork(NULL, NULL, fork_child);
	/* freed big blocks waiting to be dropped: a sixteenth of the limit, 4 to 32 MiB */
	g_cache_max = o.limit_bytes / 16 < (4u << 20)    ? 4u << 20
		      : o.limit_bytes / 16 > (32u << 20) ? 32u << 20
							 : (size_t)(o.limit_bytes / 16);
	live_start();
	dump_handlers_install();
	atomic_store(&g_heap, true);
	atomic_store(&g_managing, true);
	t_internal = 0;
}

__attribute__((destructor)) static void preload_fini(void)
{
	char path[64];

	if (!g_mm || getpid() != g_pid)
		return;
	t_internal = 1;
	write_stats_json();
	if (g_live) {
		live_update();
		g_live->exited = 1;
	}
	/*
	 * `uswap run` reads the last figures after we are gone, and removes the file: those of its own
	 * child, and of the programs started under it that swapped (a build may start thousands that
	 * did not, and each file is memory in /dev/shm).
	 */
	bool keep =
		g_run_pid && !kill(g_run_pid, 0) &&
		(getppid() == g_run_pid || (g_live && g_live->mm.evicted_pages + g_live->mm.swapin_pages));
	if (!keep) {
		snprintf(path, sizeof(path), LIVE_PATH_FMT, (int)g_pid);
		unlink(path);
	}
	/* The instance stays: other destructors may still use the program's memory; exit takes it all. */
}
