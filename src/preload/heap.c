/*
 * heap.c - the preload library's heap: one reservation (the arena) registered with the instance in
 * growing chunks and handed to mimalloc, which serves the whole malloc family; freed big blocks wait
 * in a small cache, then are dropped so that their memory leaves the limit.
 */
#include "preload/preload.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <mimalloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

#include "util/live.h"
#include "util/clock.h"

typedef size_t (*usable_fn)(void *);
static usable_fn real_usable_size;

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
bool grow_arena(size_t need, bool plain_ok)
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

void find_ldso(void)
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
#define CACHE_SLOTS  32
#define CACHE_AGE_MS 1000

struct cached_block {
	void *p;
	size_t size;
	uint64_t at_ms;
};
static struct cached_block g_cache[CACHE_SLOTS]; /* oldest first */
static unsigned g_cache_n;
static size_t g_cache_bytes;
size_t g_cache_max;
static pthread_mutex_t g_cache_lock = PTHREAD_MUTEX_INITIALIZER;

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
void cache_age(void)
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
	for (size_t bytes = g_cache_bytes;
	     n < g_cache_n &&
	     (g_cache_n - n == CACHE_SLOTS || bytes + size > cap || now - g_cache[n].at_ms >= CACHE_AGE_MS);)
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
void cache_lock(void)
{
	pthread_mutex_lock(&g_grow_lock);
	pthread_mutex_lock(&g_cache_lock);
}

void cache_unlock(void)
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
_Atomic size_t g_child_alloc;

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
 * that memory a freed block gave back (discard_block()) is zero, and would write every page of it,
 * making it resident and dirty where glibc's calloc gets fresh pages from mmap()
 * (docs/results.md#2026-12-06-realloc-growth-and-calloc).
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
		 * pages cost no memory, and copies are logarithmic (docs/results.md#preload-library).
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
uintptr_t reserve_heap(uint64_t *heap, bool exact)
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
		raw = sys_mmap(NULL, *heap + ARENA_ALIGN, PROT_NONE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
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
