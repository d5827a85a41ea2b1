/*
 * preload.c - LD_PRELOAD library of `uswap run`: puts a program's anonymous memory under one uswap_mm
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
/* Our mmap and mmap64 are two symbols: the header must not rename one into the other. */
#undef _FILE_OFFSET_BITS
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <mimalloc.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/auxv.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "uswap.h"
#include "util/fd.h"
#include "util/live.h"
#include "util/thread.h"

#define DEFAULT_TIERS "same,zpool:lz4,file"
#define DEFAULT_HEAP (64ull << 30)
#define DEFAULT_MIN_MAP (128u << 10)
#define ARENA_ALIGN (64ull << 20)

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

static struct uswap_mm *g_mm;
static pid_t g_pid;                /* the process g_mm serves (a fork child: until it has its own) */
static struct uswap_mm_options g_opts; /* a fork child's instance gets the same */
static bool g_fork_own = true;     /* USWAP_FORK_CHILD: own (default) or plain */
enum { ADOPT_NONE, ADOPT_PENDING, ADOPT_BUSY };
static _Atomic int g_adopt;        /* a fork child without an instance of its own yet */
static atomic_bool g_managing;     /* mmaps are registered (this process, instance up) */
static _Atomic int g_lock_future;  /* mlockall(MCL_FUTURE): mlock2() flags + 1 for new mappings */
static atomic_bool g_heap;         /* malloc goes to the arena */
static uintptr_t g_arena, g_arena_end;
static size_t g_min_map = DEFAULT_MIN_MAP;
static __thread int t_internal;    /* a library thread, or a call from here */

static struct live_stats *g_live;
static int32_t g_run_pid;          /* USWAP_RUN: the `uswap run` that collects our figures at the end */
static pthread_t g_live_thread;
static char g_stats_json[4096];
static char g_tiers[256];
static uint64_t g_budget; /* USWAP_POOL_IN_LIMIT: the limit covers the pool too */

typedef void *(*mmap_fn)(void *, size_t, int, int, int, off_t);
typedef int (*pthread_create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
typedef size_t (*usable_fn)(void *);
static mmap_fn real_mmap;
static pthread_create_fn real_pthread_create;
static usable_fn real_usable_size;

static void *sys_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	if (real_mmap)
		return real_mmap(addr, len, prot, flags, fd, off);
	return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

/* Whether g_mm is this process's instance (not a fork child's inherited copy of its parent's). */
static inline bool ours(void)
{
	return getpid() == __atomic_load_n(&g_pid, __ATOMIC_ACQUIRE);
}

static void child_adopt(void);

/*
 * The arena is one reservation of USWAP_HEAP bytes, registered and handed to mimalloc in chunks that
 * double (1 GiB first): registering costs time in proportion to the range, and most programs are small.
 */
#define FIRST_CHUNK (1ull << 30)
static uint64_t g_managed; /* bytes of the arena registered and managed so far */
static pthread_mutex_t g_grow_lock = PTHREAD_MUTEX_INITIALIZER;

/*
 * @plain_ok: a chunk the instance cannot take (a fork child that stays plain, or a registration that
 * failed) is still handed to mimalloc, as plain memory: a malloc must not fail for that.
 */
static bool grow_arena(size_t need, bool plain_ok)
{
	static bool warned;
	bool grown = false, mine, managed;

	if (atomic_load_explicit(&g_adopt, memory_order_relaxed))
		child_adopt();
	t_internal++;
	pthread_mutex_lock(&g_grow_lock);
	uint64_t total = g_arena_end - g_arena, chunk = g_managed ? g_managed : FIRST_CHUNK;

	while (chunk < need + ARENA_ALIGN && chunk < total) /* need may be SIZE_MAX / 2: no doubling to 0 */
		chunk *= 2;
	if (chunk > total - g_managed)
		chunk = total - g_managed;
	/* The reservation is PROT_NONE (under strict overcommit only writable memory is charged). */
	if (chunk >= ARENA_ALIGN && !mprotect((void *)(g_arena + g_managed), chunk, PROT_READ | PROT_WRITE)) {
		mine = ours();
		managed = mine && !uswap_register(g_mm, (void *)(g_arena + g_managed), chunk, 0);
		if (!managed && mine && plain_ok && !warned) {
			warned = true;
			fprintf(stderr, "uswap: heap memory from %#lx stays unmanaged: %s\n",
				(unsigned long)(g_arena + g_managed), uswap_errmsg());
		}
		if ((managed || plain_ok) &&
		    mi_manage_os_memory((void *)(g_arena + g_managed), chunk, true, false, true, -1)) {
			g_managed += chunk;
			grown = true;
		}
	}
	pthread_mutex_unlock(&g_grow_lock);
	t_internal--;
	return grown;
}

static inline bool in_arena(const void *p)
{
	return (uintptr_t)p >= g_arena && (uintptr_t)p < g_arena_end;
}

static inline bool use_heap(void)
{
	return atomic_load_explicit(&g_heap, memory_order_relaxed) && !t_internal;
}

/*
 * The dynamic linker's own blocks (link maps and scope lists of dlopen()ed libraries, dynamic TLS)
 * come from glibc's heap, outside the limit: our threads read them whenever they call a function for
 * the first time (lazy binding walks the link maps), and one swapped out was a fault that only the
 * faulting handler could serve. python3's test_ctypes hung so (tests/test_run.c dlopen_global).
 * ld.so calls malloc, calloc, realloc and free only; free() goes by the address already.
 */
static uintptr_t g_ldso_text, g_ldso_text_end;

static void find_ldso(void)
{
	const ElfW(Ehdr) *eh = (const void *)getauxval(AT_BASE);

	if (!eh || memcmp(eh->e_ident, ELFMAG, SELFMAG))
		return; /* ld.so run as the program: its blocks stay in the arena */
	const ElfW(Phdr) *ph = (const void *)((uintptr_t)eh + eh->e_phoff);

	for (int i = 0; i < eh->e_phnum; i++)
		if (ph[i].p_type == PT_LOAD && (ph[i].p_flags & PF_X)) {
			g_ldso_text = (uintptr_t)eh + ph[i].p_vaddr;
			g_ldso_text_end = g_ldso_text + ph[i].p_memsz;
		}
}

static inline bool from_ldso(const void *ret)
{
	return (uintptr_t)ret - g_ldso_text < g_ldso_text_end - g_ldso_text;
}

/* ---- the malloc family ---- */

/*
 * mimalloc keeps the memory of freed blocks in the arena and never gives it back (the arena is handed
 * to it as committed memory), so freed memory would stay resident, count against the limit and be
 * swapped out and in again as if it held data. So a freed block of DISCARD_MIN or more is dropped
 * before mimalloc gets it back, as glibc unmaps its large blocks: its whole pages, but the one holding
 * its first bytes (mimalloc links free blocks through them), read as zero afterwards; the instance
 * hears of it as of any madvise() of the program. Not at once: dropping costs an event, and the next
 * use of the memory a zero-fill fault per few pages, so a program that allocates and frees the same
 * big buffer in a loop would pay that every time. Freed big blocks first wait in a small cache, where
 * a malloc that fits takes one back as it is; a block that waits CACHE_AGE_MS, or that newer ones
 * push out (CACHE_SLOTS blocks, and the bytes cache_cap() allows), is dropped and freed.
 */
#define DISCARD_MIN (128u << 10)
#define PAGE_BYTES 4096u
#define CACHE_SLOTS 32
#define CACHE_AGE_MS 1000

struct cached_block {
	void *p;
	size_t size;
	uint64_t at_ms;
};
static struct cached_block g_cache[CACHE_SLOTS]; /* oldest first */
static unsigned g_cache_n;
static size_t g_cache_bytes, g_cache_max; /* g_cache_max: 0 until the heap is up */
static pthread_mutex_t g_cache_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t coarse_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void discard_block(void *p, size_t size)
{
	uintptr_t a = ((uintptr_t)p + 64 + PAGE_BYTES - 1) & ~(uintptr_t)(PAGE_BYTES - 1);
	uintptr_t b = ((uintptr_t)p + size) & ~(uintptr_t)(PAGE_BYTES - 1);

	if (b > a)
		madvise((void *)a, b - a, MADV_DONTNEED);
	mi_free(p);
}

/* Context: g_cache_lock held. Move the oldest @n blocks to @out. */
static unsigned cache_pop_oldest(unsigned n, struct cached_block *out)
{
	for (unsigned i = 0; i < n; i++) {
		out[i] = g_cache[i];
		g_cache_bytes -= g_cache[i].size;
	}
	g_cache_n -= n;
	memmove(g_cache, g_cache + n, g_cache_n * sizeof(g_cache[0]));
	return n;
}

/* Drop the blocks that waited CACHE_AGE_MS. */
static void cache_age(void)
{
	struct cached_block old[CACHE_SLOTS];
	uint64_t now = coarse_ms();
	unsigned n = 0;

	pthread_mutex_lock(&g_cache_lock);
	while (n < g_cache_n && now - g_cache[n].at_ms >= CACHE_AGE_MS)
		n++;
	n = cache_pop_oldest(n, old);
	pthread_mutex_unlock(&g_cache_lock);
	for (unsigned i = 0; i < n; i++)
		discard_block(old[i].p, old[i].size);
}

/*
 * Bytes the cache may hold: while the resident pages are under 3/4 of their limit (as the last
 * statistics snapshot saw them), a quarter of the limit, since blocks waiting there push nothing out;
 * nearer the limit, g_cache_max.
 */
static size_t cache_cap(void)
{
	const struct live_stats *l = __atomic_load_n(&g_live, __ATOMIC_ACQUIRE);
	uint64_t limit = l ? __atomic_load_n(&l->mm.limit_bytes, __ATOMIC_RELAXED) : 0;

	if (limit && __atomic_load_n(&l->mm.resident_bytes, __ATOMIC_RELAXED) < limit / 4 * 3 &&
	    limit / 4 > g_cache_max)
		return (size_t)(limit / 4);
	return g_cache_max;
}

static void cache_put(void *p, size_t size)
{
	struct cached_block out[CACHE_SLOTS];
	uint64_t now = coarse_ms();
	size_t cap = cache_cap();
	unsigned n = 0;

	if (size > cap) {
		discard_block(p, size);
		return;
	}
	pthread_mutex_lock(&g_cache_lock);
	for (size_t bytes = g_cache_bytes; n < g_cache_n && (g_cache_n - n == CACHE_SLOTS ||
							       bytes + size > cap ||
							       now - g_cache[n].at_ms >= CACHE_AGE_MS);)
		bytes -= g_cache[n++].size;
	n = cache_pop_oldest(n, out);
	g_cache[g_cache_n++] = (struct cached_block){p, size, now};
	g_cache_bytes += size;
	pthread_mutex_unlock(&g_cache_lock);
	for (unsigned i = 0; i < n; i++)
		discard_block(out[i].p, out[i].size);
}

/* A cached block of @n bytes or more, but not twice as many (the newest that fits); NULL if none. */
static void *cache_take(size_t n)
{
	void *p = NULL;

	if (!__atomic_load_n(&g_cache_n, __ATOMIC_RELAXED)) /* a peek: a miss only costs a fresh block */
		return NULL;
	pthread_mutex_lock(&g_cache_lock);
	for (unsigned i = g_cache_n; i-- > 0;) {
		if (g_cache[i].size >= n && g_cache[i].size / 2 <= n) {
			p = g_cache[i].p;
			g_cache_bytes -= g_cache[i].size;
			g_cache_n--;
			memmove(g_cache + i, g_cache + i + 1, (g_cache_n - i) * sizeof(g_cache[0]));
			break;
		}
	}
	pthread_mutex_unlock(&g_cache_lock);
	return p;
}

/* At fork: no chunk half handed over, no cache half changed (see preload_init() for the order). */
static void cache_lock(void)
{
	pthread_mutex_lock(&g_grow_lock);
	pthread_mutex_lock(&g_cache_lock);
}

static void cache_unlock(void)
{
	pthread_mutex_unlock(&g_cache_lock);
	pthread_mutex_unlock(&g_grow_lock);
}

/*
 * A fork child without an instance of its own starts one at a big allocation, or once it allocated
 * ADOPT_AFTER since fork: until then what it touches stays plain, so not later than that. A child
 * that execs soon after fork (a shell's) allocates less and never pays for an instance.
 */
#define ADOPT_AFTER (2u << 20)
static _Atomic size_t g_child_alloc;

static inline void child_alloc(size_t n)
{
	if (atomic_load_explicit(&g_adopt, memory_order_relaxed) &&
	    (n >= DISCARD_MIN ||
	     atomic_fetch_add_explicit(&g_child_alloc, n, memory_order_relaxed) + n >= ADOPT_AFTER))
		child_adopt();
}

void *malloc(size_t n)
{
	void *p;

	if (!use_heap() || from_ldso(__builtin_return_address(0)))
		return __libc_malloc(n);
	child_alloc(n);
	if (n >= DISCARD_MIN && (p = cache_take(n)))
		return p;
	p = mi_malloc(n);
	if (!p && grow_arena(n, true))
		p = mi_malloc(n);
	return p ? p : __libc_malloc(n); /* past the arena: glibc's heap */
}

/*
 * Zero a big block without writing its whole pages: they are dropped (they read as zero and cost
 * nothing until touched), only the partial pages at its ends are written. mimalloc does not know
 * that memory a freed block gave back (discard_block()) is zero, and would write every page of it:
 * a program calloc()ing and freeing 512 MB six times, touching a page per MiB, took 9.3 s and 700K
 * evictions under 64M, 0.12 s plainly (glibc's calloc gets fresh pages from mmap()).
 */
static void *zero_block(void *p, size_t n)
{
	uintptr_t a = ((uintptr_t)p + PAGE_BYTES - 1) & ~(uintptr_t)(PAGE_BYTES - 1);
	uintptr_t b = ((uintptr_t)p + n) & ~(uintptr_t)(PAGE_BYTES - 1);

	if (b <= a || madvise((void *)a, b - a, MADV_DONTNEED))
		return memset(p, 0, n);
	memset(p, 0, a - (uintptr_t)p);
	memset((void *)b, 0, (uintptr_t)p + n - b);
	return p;
}

void *calloc(size_t a, size_t b)
{
	void *p;

	if (!use_heap() || from_ldso(__builtin_return_address(0)))
		return __libc_calloc(a, b);
	bool fits = b && a <= SIZE_MAX / b; /* else mi_calloc() refuses it */

	if (fits && a * b >= DISCARD_MIN) {
		child_alloc(a * b);
		p = cache_take(a * b);
		if (!p && !(p = mi_malloc(a * b)) && grow_arena(a * b, true))
			p = mi_malloc(a * b);
		return p ? zero_block(p, a * b) : __libc_calloc(a, b);
	}
	if (fits)
		child_alloc(a * b);
	p = mi_calloc(a, b);
	if (!p && fits && grow_arena(a * b, true))
		p = mi_calloc(a, b);
	return p ? p : __libc_calloc(a, b);
}

void free(void *p)
{
	size_t size;

	if (!p)
		return;
	if (!in_arena(p)) {
		__libc_free(p);
		return;
	}
	size = mi_usable_size(p);
	if (size >= DISCARD_MIN && !t_internal && g_cache_max)
		cache_put(p, size);
	else
		mi_free(p);
}

static size_t libc_usable(void *p)
{
	if (!real_usable_size)
		real_usable_size = (usable_fn)dlsym(RTLD_NEXT, "malloc_usable_size");
	return real_usable_size ? real_usable_size(p) : 0;
}

void *realloc(void *p, size_t n)
{
	if (from_ldso(__builtin_return_address(0)) && !in_arena(p))
		return __libc_realloc(p, n);
	if (!p)
		return malloc(n);
	if (in_arena(p)) {
		size_t have = mi_usable_size(p);
		void *q;

		/*
		 * A big block that moves: moved here, so that the old one is dropped as free() drops it.
		 * One that grows a little gets twice its size: glibc grows its big blocks in place
		 * (mremap()), and programs that add a little at a time rely on it; the arena's untouched
		 * pages cost no memory. (256 MB grown 64 KiB at a time: 40 s before, now 1.5 s as plainly.)
		 */
		if (have >= DISCARD_MIN && n && (n > have || n < have / 2) && !t_internal) {
			q = malloc(n > have && n - have < have ? 2 * have : n);
			if (!q)
				return NULL;
			memcpy(q, p, have < n ? have : n);
			free(p);
			return q;
		}
		q = mi_realloc(p, n);
		if (!q && n && grow_arena(n, true))
			q = mi_realloc(p, n);
		if (!q && n && (q = __libc_malloc(n))) {
			memcpy(q, p, have < n ? have : n);
			mi_free(p);
		}
		return q;
	}
	if (!use_heap())
		return __libc_realloc(p, n);
	/* a block from before the arena: it moves into it */
	void *q = malloc(n);
	size_t old = libc_usable(p);

	if (!q)
		return NULL;
	memcpy(q, p, old < n ? old : n);
	__libc_free(p);
	return q;
}

void *memalign(size_t align, size_t n)
{
	void *p;

	if (!use_heap())
		return __libc_memalign(align, n);
	child_alloc(n);
	p = mi_malloc_aligned(n, align);
	if (!p && grow_arena(n + align, true))
		p = mi_malloc_aligned(n, align);
	return p ? p : __libc_memalign(align, n);
}

void *aligned_alloc(size_t align, size_t n)
{
	return memalign(align, n);
}

int posix_memalign(void **out, size_t align, size_t n)
{
	void *p;

	if (align < sizeof(void *) || (align & (align - 1)))
		return EINVAL;
	p = memalign(align, n);
	if (!p && n)
		return ENOMEM;
	*out = p;
	return 0;
}

void *valloc(size_t n)
{
	return memalign(4096, n);
}

void *pvalloc(size_t n)
{
	return memalign(4096, (n + 4095) & ~(size_t)4095);
}

size_t malloc_usable_size(void *p)
{
	if (!p)
		return 0;
	return in_arena(p) ? mi_usable_size(p) : libc_usable(p);
}

/* ---- mappings ---- */

/*
 * Anonymous private memory made read-write at once, or reserved PROT_NONE to be made read-write
 * later with mprotect() (JavaScript engines, runtimes with their own heaps), up to MAX_RESERVATION:
 * beyond that a reservation is address space, not memory, and its tables would cost more than it
 * is worth. A part the program leaves PROT_NONE or read-only stays resident once touched.
 */
#define MAX_RESERVATION (4ull << 30)
static bool worth_managing(size_t len, int prot, int flags, int fd)
{
	if (fd != -1 || !(flags & MAP_ANONYMOUS) || (flags & MAP_TYPE) != MAP_PRIVATE ||
	    (flags & (MAP_STACK | MAP_GROWSDOWN | MAP_HUGETLB)) || len < g_min_map)
		return false;
	if (prot == PROT_NONE)
		return len <= MAX_RESERVATION;
	return prot == (PROT_READ | PROT_WRITE);
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	void *p = sys_mmap(addr, len, prot, flags, fd, off);
	bool managed = false;
	int lock;

	if (p == MAP_FAILED || t_internal)
		return p;
	if (atomic_load_explicit(&g_adopt, memory_order_relaxed) && worth_managing(len, prot, flags, fd))
		child_adopt();
	if (atomic_load_explicit(&g_managing, memory_order_relaxed) && ours()) {
		t_internal++;
		/*
		 * The new mapping may stand where a registered range was (MAP_FIXED over it, or an
		 * address a munmap() freed): the instance applies that range's event before the program
		 * touches the new pages, or reclaim could take them for the old range's.
		 */
		uswap_mm_sync(g_mm);
		if (worth_managing(len, prot, flags, fd)) /* refused: stays plain memory */
			managed = !uswap_register(g_mm, p, (len + 4095) & ~(size_t)4095, 0);
		t_internal--;
	}
	lock = atomic_load_explicit(&g_lock_future, memory_order_relaxed);
	if (lock && !managed)
		syscall(SYS_mlock2, p, len, lock - 1);
	return p;
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off64_t off)
{
	return mmap(addr, len, prot, flags, fd, (off_t)off);
}

/* ---- discards: the program's MADV_DONTNEED and MADV_FREE reach the instance first ---- */

/*
 * The instance is made with discards_reported: the kernel raises no REMOVE event for a madvise()
 * of a registered range (each event stopped the caller until a handler read it, and reclaim's own
 * zaps raised them too), so every discard the program makes through libc (its own, mimalloc's,
 * ours of freed blocks) goes through uswap_mm_discard(), which drops what the instance holds of
 * the range and zaps it with MADV_DONTNEED: MADV_FREE's "zero or old data" becomes zero at once.
 * A raw madvise system call on a registered range is not seen (docs/mm.md); USWAP_REMOVE_EVENTS=1
 * keeps the kernel's events instead.
 */
typedef int (*madvise_fn)(void *, size_t, int);
typedef ssize_t (*process_madvise_fn)(int, const struct iovec *, size_t, int, unsigned);
static madvise_fn real_madvise;
static process_madvise_fn real_process_madvise;
static bool g_discards_reported;

static bool discard_advice(int advice)
{
	return advice == MADV_DONTNEED || advice == MADV_FREE;
}

/* Return: 1 the instance took the discard (0 or -errno in *ret), 0 the kernel's alone. */
static int discard(void *addr, size_t len, int advice, int *ret)
{
	size_t l = (len + PAGE_BYTES - 1) & ~(size_t)(PAGE_BYTES - 1);

	if (!discard_advice(advice) || !g_discards_reported || ((uintptr_t)addr & (PAGE_BYTES - 1)) || !l ||
	    !atomic_load_explicit(&g_managing, memory_order_relaxed) || !ours())
		return 0;
	t_internal++;
	*ret = uswap_mm_discard(g_mm, addr, l);
	t_internal--;
	return 1;
}

int madvise(void *addr, size_t len, int advice)
{
	int ret;

	if (discard(addr, len, advice, &ret)) {
		if (!ret)
			return 0;
		errno = -ret;
		return -1;
	}
	if (!real_madvise)
		real_madvise = (madvise_fn)dlsym(RTLD_NEXT, "madvise");
	return real_madvise(addr, len, advice);
}

/* Whether @pidfd names this process (from its fdinfo: process_madvise() on oneself is rare). */
static bool pidfd_is_self(int pidfd)
{
	char path[64], line[128];
	bool self = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", pidfd);
	f = fopen(path, "re");
	if (!f)
		return false;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "Pid:", 4)) {
			self = atoi(line + 4) == (int)getpid();
			break;
		}
	fclose(f);
	return self;
}

ssize_t process_madvise(int pidfd, const struct iovec *iov, size_t n, int advice, unsigned flags)
{
	if (discard_advice(advice) && g_discards_reported && !flags && pidfd_is_self(pidfd)) {
		ssize_t done = 0;

		for (size_t i = 0; i < n; i++) {
			int ret;

			if (!discard(iov[i].iov_base, iov[i].iov_len, advice, &ret))
				ret = syscall(SYS_madvise, iov[i].iov_base, iov[i].iov_len, advice) ? -errno : 0;
			if (ret) {
				if (done)
					return done;
				errno = -ret;
				return -1;
			}
			done += (ssize_t)iov[i].iov_len;
		}
		return done;
	}
	if (!real_process_madvise)
		real_process_madvise = (process_madvise_fn)dlsym(RTLD_NEXT, "process_madvise");
	if (!real_process_madvise)
		return syscall(SYS_process_madvise, pidfd, iov, n, advice, flags);
	return real_process_madvise(pidfd, iov, n, advice, flags);
}

/* ---- locked memory ---- */

/*
 * The kernel's mlockall() faults in every page of every mapping it locks: the heap's whole
 * reservation and every registered range, gigabytes of zeros that reclaim could then not move (a
 * locked page cannot go to an unlocked shadow). So under an instance mlockall() locks what is not
 * under the limit: file mappings, the stack and glibc's brk heap now (MCL_CURRENT), and (MCL_FUTURE)
 * the mappings the program makes later that the instance does not manage. Memory under the limit
 * stays swappable: the program runs under `uswap run --limit` by the operator's choice, and is told
 * so once. mlock() of a range is the kernel's: those pages stay resident, over the limit if need be.
 * As with the kernel's, locks are not inherited by a fork child.
 */

/* Lock every file mapping, the stack and the brk heap with mlock2() @how. Return: 0 or -errno. */
static int lock_current(int how)
{
	struct span {
		uintptr_t a, b;
	} *v = NULL, *nv;
	size_t n = 0, cap = 0, len = 0;
	char *line = NULL;
	int ret = 0;
	FILE *f;

	t_internal++;
	f = fopen("/proc/self/maps", "re");
	if (!f) {
		ret = -errno;
		goto out;
	}
	/* all spans first: locking splits and merges the mappings the file lists */
	while (getline(&line, &len, f) > 0) {
		unsigned long a, b;
		int at = 0;

		if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &a, &b, &at) < 2 || !at)
			continue;
		const char *path = line + at;

		if (path[0] != '/' && strncmp(path, "[stack]", 7) && strncmp(path, "[heap]", 6))
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			if (!(nv = realloc(v, cap * sizeof(*v)))) {
				ret = -ENOMEM;
				break;
			}
			v = nv;
		}
		v[n++] = (struct span){ a, b };
	}
	fclose(f);
	for (size_t i = 0; i < n && !ret; i++)
		if (syscall(SYS_mlock2, v[i].a, v[i].b - v[i].a, how))
			ret = -errno;
out:
	free(v);
	free(line);
	t_internal--;
	return ret;
}

int mlockall(int flags)
{
	static atomic_bool told;
	int how = flags & MCL_ONFAULT ? MLOCK_ONFAULT : 0, ret;

	if (!g_arena || t_internal)
		return (int)syscall(SYS_mlockall, flags);
	if ((flags & ~(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT)) || !(flags & (MCL_CURRENT | MCL_FUTURE))) {
		errno = EINVAL;
		return -1;
	}
	if (!atomic_exchange(&told, true))
		fprintf(stderr, "uswap: pid %d called mlockall(): its heap and the mappings under the limit "
				"stay swappable, the rest is locked\n", (int)getpid());
	atomic_store(&g_lock_future, flags & MCL_FUTURE ? how + 1 : 0);
	if ((flags & MCL_CURRENT) && (ret = lock_current(how))) {
		errno = -ret;
		return -1;
	}
	return 0;
}

int munlockall(void)
{
	atomic_store(&g_lock_future, 0);
	return (int)syscall(SYS_munlockall);
}

/* ---- descriptors the library keeps (util/fd.h) ---- */

/*
 * A close-all loop (daemons, closefrom(), close_range()) leaves the instance's descriptors open, and
 * a dup2() onto one fails with EBUSY (as when it races with an open()). They sit high in the table,
 * so a program picking small numbers (a shell's `exec 6>file`) never meets them.
 */
typedef int (*close_fn)(int);
static close_fn real_close;

int close(int fd)
{
	if (!t_internal && fd_kept(fd))
		return 0;
	if (!real_close)
		real_close = (close_fn)dlsym(RTLD_NEXT, "close");
	return real_close ? real_close(fd) : (int)syscall(SYS_close, fd);
}

int close_range(unsigned first, unsigned last, int flags)
{
	if (!t_internal && !(flags & CLOSE_RANGE_CLOEXEC)) {
		/* the gaps between kept descriptors, one call each */
		for (int k; first <= last && first < INT_MAX && (k = fd_kept_from((int)first)) >= 0 &&
			    (unsigned)k <= last;
		     first = (unsigned)k + 1) {
			if ((unsigned)k > first && syscall(SYS_close_range, first, (unsigned)k - 1, flags))
				return -1;
		}
		if (first > last)
			return 0;
	}
	return (int)syscall(SYS_close_range, first, last, flags);
}

void closefrom(int low)
{
	close_range((unsigned)(low < 0 ? 0 : low), ~0u, 0);
}

int dup2(int old, int new)
{
	if (!t_internal && old != new && fd_kept(new)) {
		errno = EBUSY;
		return -1;
	}
	return (int)syscall(SYS_dup2, old, new);
}

int dup3(int old, int new, int flags)
{
	if (!t_internal && old != new && fd_kept(new)) {
		errno = EBUSY;
		return -1;
	}
	return (int)syscall(SYS_dup3, old, new, flags);
}

/* ---- threads the library starts carry the mark ---- */

struct tramp {
	void *(*fn)(void *);
	void *arg;
};

static void *tramp_main(void *p)
{
	struct tramp t = *(struct tramp *)p;

	__libc_free(p);
	t_internal = 1;
	return t.fn(t.arg);
}

int pthread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
	if (!real_pthread_create)
		real_pthread_create = (pthread_create_fn)dlsym(RTLD_NEXT, "pthread_create");
	real_close = (close_fn)dlsym(RTLD_NEXT, "close");
	if (!t_internal)
		return real_pthread_create(th, attr, fn, arg);
	struct tramp *t = __libc_malloc(sizeof(*t));

	if (!t)
		return EAGAIN;
	t->fn = fn;
	t->arg = arg;
	int ret = real_pthread_create(th, attr, tramp_main, t);
	if (ret)
		__libc_free(t);
	return ret;
}

/* ---- statistics ---- */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

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
	g_live->updated_ns = now_ns();
	__sync_synchronize(); /* seqlock: the reader is another process */
	g_live->seq++;
}

static void *live_main(void *arg)
{
	(void)arg;
	for (;;) {
		struct timespec ts = { 0, LIVE_PERIOD_MS * 1000000L };

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
	g_live->started_ns = now_ns();
	snprintf(g_live->tiers, sizeof(g_live->tiers), "%s", g_tiers);
	g_live->budget_bytes = g_budget;
	live_update();
	if (thread_start(&g_live_thread, "uswap-live", live_main, NULL) == 0)
		pthread_detach(g_live_thread);
}

static void write_stats_json(void)
{
	struct live_stats l = { .magic = LIVE_MAGIC, .pid = (int32_t)g_pid, .exited = 1 };
	FILE *f;

	if (!g_stats_json[0])
		return;
	f = fopen(g_stats_json, "w");
	if (!f) {
		fprintf(stderr, "uswap: cannot write %s: %s\n", g_stats_json, strerror(errno));
		return;
	}
	snprintf(l.tiers, sizeof(l.tiers), "%s", g_tiers);
	l.budget_bytes = g_budget;
	uswap_mm_stats(g_mm, &l.mm);
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
static void child_adopt(void)
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
		fprintf(stderr, "uswap: forked child %d stays unmanaged: %s\n", (int)getpid(), uswap_errmsg());
	}
	t_internal--;
	atomic_store(&g_adopt, ADOPT_NONE);
}

/* The process's address space in use, from /proc/self/statm (0 if unknown). */
static uint64_t vm_size(void)
{
	char buf[128];
	int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);

	if (fd >= 0)
		close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	return strtoull(buf, NULL, 10) * (uint64_t)sysconf(_SC_PAGESIZE);
}

/*
 * Reserve the heap: *@heap bytes, aligned to ARENA_ALIGN. Unless the size was asked for (@exact), it
 * is made to fit an address-space limit (RLIMIT_AS, `ulimit -v`): a quarter of the room left, since
 * each byte managed also has a shadow byte and the program needs room of its own; and halved while
 * the kernel refuses it. It is PROT_NONE until grow_arena() hands a chunk over (a strict overcommit
 * policy charges writable memory only). Past the arena, malloc is glibc's (unmanaged).
 * Return: the base, or 0.
 */
static uintptr_t reserve_heap(uint64_t *heap, bool exact)
{
	struct rlimit rl;
	unsigned char *raw;

	*heap = (*heap + ARENA_ALIGN - 1) & ~(ARENA_ALIGN - 1);
	if (!exact && !getrlimit(RLIMIT_AS, &rl) && rl.rlim_cur != RLIM_INFINITY) {
		uint64_t used = vm_size(), room = rl.rlim_cur > used ? (rl.rlim_cur - used) / 4 : 0;

		if (*heap > room)
			*heap = room & ~(ARENA_ALIGN - 1);
	}
	for (;;) {
		if (*heap < ARENA_ALIGN)
			return 0;
		raw = sys_mmap(NULL, *heap + ARENA_ALIGN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (raw != MAP_FAILED)
			break;
		if (exact || errno != ENOMEM)
			return 0;
		*heap = (*heap / 2) & ~(ARENA_ALIGN - 1);
	}
	uintptr_t base = ((uintptr_t)raw + ARENA_ALIGN - 1) & ~(uintptr_t)(ARENA_ALIGN - 1);

	if (base > (uintptr_t)raw)
		munmap(raw, base - (uintptr_t)raw);
	munmap((void *)(base + *heap), (uintptr_t)raw + *heap + ARENA_ALIGN - (base + *heap));
	return base;
}

/*
 * An instance holds descriptors for life: two userfaultfds, a pidfd, /proc/self/pagemap and maps, an
 * eventfd, the swap file and its io_uring rings (13 with the default tiers; more with a Redis tier).
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
	struct uswap_mm_options o = { 0 };
	uint64_t heap = DEFAULT_HEAP, v;
	bool heap_given = false;
	int ret;

	if (!lim || !*lim)
		return;
	find_ldso();
	if (free_fds() < INSTANCE_FDS + FD_HEADROOM) {
		fprintf(stderr, "uswap: pid %d runs unmanaged: RLIMIT_NOFILE leaves it %ld free descriptors, and an "
				"instance would hold up to %d of them\n",
			(int)getpid(), free_fds(), INSTANCE_FDS);
		return;
	}
	real_mmap = (mmap_fn)dlsym(RTLD_NEXT, "mmap");
	real_pthread_create = (pthread_create_fn)dlsym(RTLD_NEXT, "pthread_create");
	t_internal = 1;
	g_pid = getpid();
	if (uswap_parse_size(lim, 1, &o.limit_bytes) || !o.limit_bytes)
		fail("USWAP_LIMIT", -EINVAL);
	if ((s = getenv("USWAP_POOL_IN_LIMIT")) && *s)
		o.pool_in_limit = atoi(s) != 0;
	g_budget = o.pool_in_limit ? o.limit_bytes : 0;
	s = getenv("USWAP_TIERS");
	snprintf(g_tiers, sizeof(g_tiers), "%s", s && *s ? s : DEFAULT_TIERS);
	o.tiers = g_tiers;
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
	g_cache_max = o.limit_bytes / 16 < (4u << 20)	 ? 4u << 20
		      : o.limit_bytes / 16 > (32u << 20) ? 32u << 20
							 : (size_t)(o.limit_bytes / 16);
	live_start();
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
	bool keep = g_run_pid && !kill(g_run_pid, 0) &&
		    (getppid() == g_run_pid || (g_live && g_live->mm.evicted_pages + g_live->mm.swapin_pages));
	if (!keep) {
		snprintf(path, sizeof(path), LIVE_PATH_FMT, (int)g_pid);
		unlink(path);
	}
	/* The instance stays: other destructors may still use the program's memory; exit takes it all. */
}
