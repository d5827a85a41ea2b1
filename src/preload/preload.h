/*
 * preload.h - what the three files of the preload library share; hidden, so that nothing here is
 * exported to the program. preload.c: the environment, start and end, the fork child, live
 * statistics. heap.c: the arena, the cache of freed big blocks, the malloc family. intercept.c: mmap,
 * madvise, mlockall, the descriptors the library keeps, and the threads it starts.
 * Included first by each of them: mmap and mmap64 are two symbols here, so _FILE_OFFSET_BITS must
 * not rename one into the other in any system header.
 */
#ifndef USWAP_PRELOAD_H
#define USWAP_PRELOAD_H

#undef _FILE_OFFSET_BITS
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <unistd.h>

#include "uswap.h"

/* glibc's own allocator, for the library's memory and blocks from before the arena */
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

#pragma GCC visibility push(hidden)

#define DEFAULT_HEAP    (64ull << 30)
#define DEFAULT_MIN_MAP (128u << 10)
#define ARENA_ALIGN     (64ull << 20)
#define DISCARD_MIN     (128u << 10) /* a freed block this big is dropped (heap.c) */
#define PAGE_BYTES      4096u

/* preload.c */
extern struct uswap_mm *g_mm;
extern pid_t g_pid;                    /* the process g_mm serves (a fork child: until it has its own) */
extern struct uswap_mm_options g_opts; /* a fork child's instance gets the same */
extern bool g_fork_own;                /* USWAP_FORK_CHILD: own (default) or plain */
enum { ADOPT_NONE, ADOPT_PENDING, ADOPT_BUSY };
extern _Atomic int g_adopt;    /* a fork child without an instance of its own yet */
extern atomic_bool g_managing; /* mmaps are registered (this process, instance up) */
extern atomic_bool g_heap;     /* malloc goes to the arena */
extern uintptr_t g_arena, g_arena_end;
extern size_t g_min_map;
extern __thread int t_internal; /* a library thread, or a call from here */
struct live_stats;
extern struct live_stats *g_live; /* /dev/shm/uswap.PID, or NULL */

typedef void *(*mmap_fn)(void *, size_t, int, int, int, off_t);
typedef int (*pthread_create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
extern mmap_fn real_mmap;
extern pthread_create_fn real_pthread_create;

void *sys_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
void child_adopt(void);

/* Whether g_mm is this process's instance (not a fork child's inherited copy of its parent's). */
static inline bool ours(void)
{
	return getpid() == __atomic_load_n(&g_pid, __ATOMIC_ACQUIRE);
}

/* heap.c */
extern size_t g_cache_max;           /* bytes of freed big blocks kept (0 until the heap is up) */
extern _Atomic size_t g_child_alloc; /* a fork child's allocations since fork */
bool grow_arena(size_t need, bool plain_ok);
/* Where the dynamic linker's code is: its mallocs go to glibc's heap (see there). */
void find_ldso(void);
uintptr_t reserve_heap(uint64_t *heap, bool exact);
void cache_age(void);
void cache_lock(void);
void cache_unlock(void);

/* intercept.c */
/* When a core will be written: the core-dumping signals bring every page in first (see there). */
void dump_handlers_install(void);
extern _Atomic int g_lock_future; /* mlockall(MCL_FUTURE): mlock2() flags + 1 for new mappings */
extern bool g_discards_reported;

#pragma GCC visibility pop

#endif
