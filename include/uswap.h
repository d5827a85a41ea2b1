/*
 * uswap.h - public API of uswap, a swap abstraction layer in user space.
 *
 * A layer (struct uswap) owns a stack of tiers (same-filled, compressed pool, ...). A folio of 1..512
 * contiguous 4 KiB pages is stored through the stack and named by a swap id; the id never changes while
 * the data moves between tiers (writeback, swapoff). Every call returns 0 (or a count) on success and a
 * negative errno on failure; uswap_errmsg() gives a sentence about the last failure of this thread.
 */
#ifndef USWAP_H
#define USWAP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define USWAP_PAGE_SIZE       4096u
#define USWAP_FOLIO_MAX_PAGES 512u /* 2 MiB */
#define USWAP_MAX_TIERS       7u
/*
 * With uswap_mm_options.pool_in_limit, the compressed pool's share of the limit starts at
 * 1/USWAP_POOL_SHARE_MAX_DIV and moves between 1/USWAP_POOL_SHARE_MIN_DIV and that.
 */
#define USWAP_POOL_SHARE_MIN_DIV 8u
#define USWAP_POOL_SHARE_MAX_DIV 2u
/* A buffer of this size holds any tier string uswap_default_tiers() writes. */
#define USWAP_TIERS_LEN 128u

struct uswap;

/* A swap id: 0 is never a valid id. */
typedef uint64_t uswap_id_t;

/* Options of uswap_create_opts(); zero means "default" for every field. */
struct uswap_options {
	const char *tiers;          /* tier string, see uswap_create() */
	uint64_t max_pages;         /* descriptor slab capacity in pages (default 2^28: 1 TiB swapped) */
	unsigned nr_ctx;            /* codec contexts = concurrent stores/loads (default 2 * CPUs) */
	unsigned no_background : 1; /* no writeback/compaction thread: the caller runs uswap_maintain() */
};

/*
 * uswap_create() - build a layer from a tier string.
 * @spec: comma-separated tiers in store order, each of the form "name[:arg[:key=value]...]", as
 *        in "same,zpool:lz4:max=256M" or in "zpool:zstd:max=25%:reject=90%,file". A tier of the
 *        form "fault(TIER)[:key=value...]" wraps TIER and injects faults into its calls, for tests and
 *        soaks: eio=, enospc=, etimedout= (percent of calls failed so), delay= (percent of calls that
 *        first sleep up to delay_ms=, default 10), flip= (percent of loads handed back with one bit
 *        flipped: the load then fails with -EBADMSG), seed= (else USWAP_FAULT_SEED, else the clock).
 *        E.g. "same,fault(zpool):eio=1%:seed=42,file" or "fault(file:size=1G):flip=0.1%".
 * Return: 0 and *out set; -EINVAL bad spec (uswap_errmsg() names the bad part); -ENOMEM.
 */
int uswap_create(struct uswap **out, const char *spec);
int uswap_create_opts(struct uswap **out, const struct uswap_options *opts);

/*
 * uswap_default_tiers() - write the default tier stack into @buf: pages that are one repeated word,
 * an lz4 pool, an unnamed swap file in $TMPDIR (else /var/tmp). With @limit_bytes 0 the pool may
 * hold up to a quarter of the machine's memory ("same,zpool:lz4,file"); otherwise up to
 * 1/USWAP_POOL_SHARE_MAX_DIV of @limit_bytes, the most an instance with pool_in_limit gives it.
 * uswap_create() with a NULL or "" spec, `uswap run` without --tiers and the preload library without
 * USWAP_TIERS all use this stack.
 * Return: the length of the string; -ENOSPC @len is too small (USWAP_TIERS_LEN is enough).
 */
int uswap_default_tiers(uint64_t limit_bytes, char *buf, size_t len);

/*
 * uswap_check_tiers() - parse @spec as uswap_create() does, without its side effects: no file is
 * created (a named file's directory and a block device are checked for access), no thread started,
 * no server contacted. NULL or "" is the default stack.
 * Return: 0; -EINVAL bad spec, with the message uswap_create() would give (uswap_errmsg()); -EACCES,
 * -ENOENT, -EEXIST a file tier's path cannot be used; -ENOMEM.
 */
int uswap_check_tiers(const char *spec);

/* uswap_destroy() - free every swap id and the layer. Context: no other call may be running on @u. */
void uswap_destroy(struct uswap *u);

/*
 * uswap_store() - store @npages pages from @src through the tier stack.
 * Context: reclaim path; allocates no memory. On failure nothing is kept and the caller still owns
 * the only copy of the data.
 * Return: 0 and *id set; -EINVAL bad npages; -ENOSPC no tier took a page (full or incompressible
 * with no tier below); -EIO every tier that could take a page failed; -ENOMEM no descriptors left.
 */
int uswap_store(struct uswap *u, const void *src, size_t npages, uswap_id_t *id);

/*
 * uswap_load() - copy the folio @id (all its pages) into @dst, which holds @npages pages.
 * uswap_load_pages() - copy pages [first, first + n) of the folio @id into @dst.
 * The id stays valid: a load does not free it.
 * Return: 0; -ENOENT @id is not a live swap id; -EINVAL @npages or the range does not match the folio;
 * -EBADMSG the data does not match its checksum; -EIO the tier failed to read it.
 */
int uswap_load(struct uswap *u, uswap_id_t id, void *dst, size_t npages);
int uswap_load_pages(struct uswap *u, uswap_id_t id, size_t first, size_t n, void *dst);

/*
 * uswap_load_vec() - best effort, for readahead: copy page @idx[i] of folio @ids[i] into page i of
 * @dst, for a prefix of the @n pages (at most USWAP_FOLIO_MAX_PAGES), with the pages of each run in one
 * tier read in one round of I/O. The prefix ends at the first page that is not live or whose
 * descriptor is busy (a mover has it): no waiting. The ids stay valid.
 * Return: pages loaded; -EBADMSG / -EIO as uswap_load(), and then nothing is loaded.
 */
ssize_t uswap_load_vec(struct uswap *u, const uswap_id_t *ids, const uint32_t *idx, size_t n, void *dst);

/*
 * uswap_free() - release the folio @id and its storage. uswap_free_pages() releases a part of it
 * (the rest of the folio stays loadable page by page; the folio ends when its last page is freed).
 * Return: 0; -ENOENT not a live id; -EINVAL bad range.
 */
int uswap_free(struct uswap *u, uswap_id_t id);
int uswap_free_pages(struct uswap *u, uswap_id_t id, size_t first, size_t n);

/* uswap_folio_pages() - number of pages of folio @id, or -ENOENT. */
ssize_t uswap_folio_pages(struct uswap *u, uswap_id_t id);

/*
 * uswap_swapoff() - move everything tier @tier holds to the other tiers, while the layer stays in use,
 * and take no new stores into it. uswap_swapon() takes stores again.
 * Return: 0; -EINVAL no such tier; -ENOSPC some pages could not be placed elsewhere (they stay in the
 * tier, intact, and the tier stays off); -EIO a read failed (the page stays where it was).
 */
int uswap_swapoff(struct uswap *u, unsigned tier);
int uswap_swapon(struct uswap *u, unsigned tier);

/*
 * uswap_writeback() - move up to @max_pages of the coldest pages of tier @tier to the tiers below it.
 * Return: pages moved (>= 0); -EINVAL no such tier or no tier below; -EOPNOTSUPP tier keeps no LRU.
 */
ssize_t uswap_writeback(struct uswap *u, unsigned tier, size_t max_pages);

/*
 * uswap_maintain() - one round of background work: writeback of tiers over their high watermark and
 * compaction of fragmented pools. The layer's own thread calls it unless no_background is set.
 * Return: pages moved or compacted (>= 0).
 */
ssize_t uswap_maintain(struct uswap *u);

struct uswap_tier_stats {
	char name[16];           /* backend name: "same", "zpool", ... */
	char spec[112];          /* the tier as configured */
	uint64_t pages;          /* pages held now */
	uint64_t data_bytes;     /* bytes of page data held (compressed size for zpool) */
	uint64_t used_bytes;     /* memory or space the tier uses to hold them, its bookkeeping included */
	uint64_t capacity_bytes; /* 0 = unbounded */
	uint64_t meta_bytes;     /* the tier's own metadata (allocator bookkeeping) */
	uint64_t stores, loads, rejects, errors;
	uint64_t writeback_in, writeback_out; /* pages received from above / pushed below */
	uint64_t load_ns;                     /* time spent loading */
	uint64_t split_stores;                /* folios stored in pieces: no free run held them (file) */
	uint64_t released_bytes;              /* space handed back to the system (file: holes punched) */
	uint32_t off;                         /* 1 after uswap_swapoff() */
	uint32_t in_memory;                   /* 1: holds pages in this process's memory (a pool) */
	/*
	 * A fault() tier (see uswap_create()): the seed of its draws (give it back as seed= or
	 * USWAP_FAULT_SEED to replay), and the faults it injected by kind: calls failed with EIO, ENOSPC,
	 * ETIMEDOUT, calls delayed, loads handed back with a flipped bit. 0 for other tiers.
	 */
	uint64_t fault_seed;
	uint64_t faults_eio, faults_enospc, faults_etimedout, faults_delay, faults_flip;
};

struct uswap_stats {
	uint64_t pages;                /* pages held by the layer now */
	uint64_t folios;               /* live swap ids */
	uint64_t stores, loads, frees; /* calls that succeeded */
	uint64_t store_failures;       /* stores no tier took */
	uint64_t csum_errors;          /* loads whose data did not match its checksum */
	uint64_t io_errors;            /* loads a tier failed */
	uint64_t desc_bytes;           /* descriptor slab and its allocator, as touched */
	uint64_t meta_bytes;           /* desc_bytes + every tier's meta_bytes */
	unsigned nr_tiers;
	struct uswap_tier_stats tier[USWAP_MAX_TIERS];
};

/* uswap_stats() - a snapshot of the counters. Return: 0. */
int uswap_stats(struct uswap *u, struct uswap_stats *st);

/*
 * uswap_tier_loads() - loads tier @tier has served so far (0: no such tier). One relaxed atomic read,
 * cheap enough to call around a single access to tell which tier a swap-in came from.
 */
uint64_t uswap_tier_loads(struct uswap *u, unsigned tier);

/*
 * uswap_mem_capacity() - cap the memory the memory tiers (compressed pools) may hold at @bytes, each
 * within the max= it was opened with; what they hold beyond goes down to the next tier by writeback.
 * Return: the capacity now in bytes (> 0); -EOPNOTSUPP no tier holds pages in memory.
 */
int64_t uswap_mem_capacity(struct uswap *u, uint64_t bytes);

/*
 * uswap_mem_bytes() - memory of this process that the tiers hold pages in now (a compressed pool's
 * touched pages); swap files and remote stores count nothing. Lock-free, cheap, any context.
 */
uint64_t uswap_mem_bytes(struct uswap *u);

/*
 * Memory regions (mm): program memory registered with userfaultfd and kept under a resident limit.
 * Pages beyond the limit are evicted through a swap layer that the instance owns (built from @tiers)
 * and come back on the next touch, from any thread, also when the kernel touches them (read(2) into
 * swapped memory works). Needs userfaultfd with kernel-mode faults (root, CAP_SYS_PTRACE,
 * vm.unprivileged_userfaultfd=1 or access to /dev/userfaultfd) and Linux 6.8 (UFFDIO_MOVE).
 * Fork: uswap_mm brings every page of the parent in before fork(), so the child starts with plain
 * memory holding exactly the parent's data; the child must not use the parent's instance, but an
 * instance it creates can take over the parent's ranges (uswap_mm_adopt_forked()).
 *
 * SIGBUS mode (option sigbus_mode, x86-64): the faulting thread resolves its own fault in a SIGBUS
 * handler instead of sleeping while a handler thread does it (no thread is woken: cheaper faults; the
 * handler needs ~40 KiB of the thread's stack). But the kernel can then no longer wait for a page on
 * the program's behalf: a system call that reads or writes a page of a region that is not in memory
 * (read(2) into it, write(2) from it, a futex word in it) fails with EFAULT, and a thread that blocks
 * SIGBUS is killed by such a fault. Call uswap_prefault() on such a buffer first (and retry on EFAULT: reclaim may
 * take it back meanwhile). The instance installs a process-wide SIGBUS handler; a SIGBUS that is
 * not one of its faults goes to the handler the program had installed before (or the default
 * action), so the program must not replace that handler while the instance lives.
 */
struct uswap_mm;

/* Options of uswap_mm_create(); zero means "default" for every field. */
struct uswap_mm_options {
	uint64_t limit_bytes; /* resident limit of all regions (0: none) */
	const char *tiers;    /* tier string (uswap_create()); NULL: uswap_default_tiers(limit_bytes) */
	size_t folio_bytes;   /* default folio of regions: 4 KiB..2 MiB, a power of two (4 KiB) */
	unsigned nr_threads;  /* fault handler threads (one per CPU this process may use, up to 8; pinned) */
	unsigned
		fault_around_pages; /* a first touch zero-fills up to this many untouched pages (16; 1 off) */
	unsigned inactive_percent;  /* share of the limit kept inactive for second chances (12) */
	uint64_t max_swap_pages;    /* the swap layer's descriptor capacity (its default) */
	unsigned sigbus_mode;       /* 1: faults resolved by the faulting thread (see above) */
	unsigned pool_in_limit;     /* 1: limit_bytes bounds resident pages and uswap_mem_bytes() together */
	/*
	 * 1: the program discards registered memory only through uswap_mm_discard() (never a plain
	 * madvise(MADV_DONTNEED/MADV_FREE) of a registered range: its pages could come back with old
	 * data). The kernel then raises no remove events, and reclaim takes pages out of the program's
	 * ranges in batches, one TLB flush per batch instead of one per run of pages. `uswap run` sets
	 * it: its preload library turns the program's madvise() calls into uswap_mm_discard().
	 */
	unsigned discards_reported;
	/*
	 * 1: the limit finds itself. It starts at limit_bytes (a ceiling it never passes; 0: none) and,
	 * once a second, goes down while the program's threads wait on swap-ins and soft faults for less
	 * than auto_stall_ppm of the wall time, and up at once when they wait more, never below
	 * auto_min_bytes. uswap_mm_set_limit() then sets the ceiling.
	 */
	unsigned limit_auto;
	unsigned auto_stall_ppm; /* target share of the wall time spent waiting (10000 = 1%, the default) */
	uint64_t auto_min_bytes; /* floor of the limit (16 MiB) */
};

/*
 * uswap_parse_limit() - a limit as a user writes it, into @o's limit fields: "512M", "25%" (of RAM),
 * "auto[:stall=PCT][:min=SIZE][:max=SIZE]" (a limit that finds itself, see limit_auto), or
 * "SIZE:auto[:...]" (the same under a ceiling of SIZE).
 * Return: 0; -EINVAL, uswap_errmsg() names the bad part.
 */
int uswap_parse_limit(const char *s, struct uswap_mm_options *o);

/*
 * uswap_mm_check() - whether this process may use memory regions: a userfaultfd that serves
 * kernel-mode faults (root, CAP_SYS_PTRACE, read/write access to /dev/userfaultfd, or
 * vm.unprivileged_userfaultfd=1) with every feature uswap_mm_create() needs. Opens nothing that lasts.
 * Return: 0; -EPERM not allowed (uswap_errmsg() says what to change); -EOPNOTSUPP the kernel lacks a
 * feature (named).
 */
int uswap_mm_check(void);

/*
 * uswap_mm_create() - start an instance: its swap layer, its userfaultfds, fault handler threads
 * (pinned one per CPU) and a reclaim thread.
 * Return: 0 and *out set; -EPERM userfaultfd is not available for kernel-mode faults to this process
 * (uswap_errmsg() says what to change); -EOPNOTSUPP the kernel lacks UFFDIO_MOVE or write-protection
 * of anonymous memory; -EINVAL bad option or tier string; -ENOMEM.
 */
int uswap_mm_create(struct uswap_mm **out, const struct uswap_mm_options *opts);

/*
 * uswap_mm_destroy() - stop the threads; memory from uswap_map() is unmapped, ranges given to
 * uswap_register() get all their pages back and are plain memory again; then the swap layer goes.
 * Context: no other thread may use @m or its regions any more.
 */
void uswap_mm_destroy(struct uswap_mm *m);

/*
 * uswap_map() - @len bytes (rounded up to pages) of memory that behaves like private anonymous memory
 * (zero on first touch) under the limit of @m. @folio_bytes: unit of eviction and swap-in for this
 * region (0: the instance's default); the mapping is aligned to it.
 * Return: 0 and *out set; -EINVAL bad length or folio; -ENOMEM; -ECHILD called in a fork child.
 */
int uswap_map(struct uswap_mm *m, size_t len, size_t folio_bytes, void **out);

/* uswap_unmap() - like munmap() of [addr, addr + len), and every swapped page of it is freed. Return: 0; -EINVAL. */
int uswap_unmap(struct uswap_mm *m, void *addr, size_t len);

/*
 * uswap_register() - put an existing private anonymous read-write range under @m. Pages it holds
 * now count as resident. After this, munmap(), mremap() and madvise(MADV_DONTNEED/MADV_FREE) of the
 * range by the program are followed (the kernel reports them). @addr and @len: page aligned.
 * Return: 0; -EINVAL misaligned or bad folio; -EEXIST overlaps a range @m already has; -EBUSY
 * another userfaultfd has it; -ENOMEM.
 */
int uswap_register(struct uswap_mm *m, void *addr, size_t len, size_t folio_bytes);

/*
 * uswap_prefault() - bring every page of [addr, addr + len) that lies in a region of @m in, mapped
 * writable (as a write by the program would), in the caller's thread: before a system call uses the
 * buffer in SIGBUS mode, or to swap a range in ahead of use in any mode. The pages stay until
 * reclaim takes them again like any other. Return: 0; -EAGAIN some pages could not be brought in
 * (a read-only part of a region); -EINVAL bad range; -ECHILD called in a fork child.
 */
int uswap_prefault(struct uswap_mm *m, void *addr, size_t len);

/*
 * uswap_mm_adopt_forked() - in a fork child, put the ranges that @parent (the parent's instance, as
 * the child inherited it; the child must not use it otherwise) had at fork() under @m, an instance the
 * child created. The pages the child inherited stay plain memory, neither counted nor evicted: they
 * are shared with the parent until either writes them, and evicting them would free nothing. The
 * pages the child touches first from then on are under @m's limit. Ranges the child did not get
 * (MADV_DONTFORK) are skipped. Return: how many ranges @m took (>= 0); -EINVAL @m is not this
 * process's instance or @parent is not its parent's.
 */
int uswap_mm_adopt_forked(struct uswap_mm *m, struct uswap_mm *parent);

/* uswap_unregister() - bring every page of the range back in and let it be plain memory. Return: 0; -EINVAL. */
int uswap_unregister(struct uswap_mm *m, void *addr, size_t len);

/* uswap_mm_set_limit() - change the resident limit (0: none); reclaim starts at once if over. Return: 0. */
int uswap_mm_set_limit(struct uswap_mm *m, uint64_t limit_bytes);

/*
 * uswap_mm_shrink() - evict now, in the caller's thread, until at most @target_bytes are resident.
 * Return: bytes released (>= 0); -ECHILD called in a fork child.
 */
ssize_t uswap_mm_shrink(struct uswap_mm *m, uint64_t target_bytes);

/*
 * uswap_mm_discard() - madvise(MADV_DONTNEED) of [addr, addr + len) that @m hears of first: every
 * page of the range reads zero afterwards, swapped ones included, and their copies are freed. Parts
 * of the range that are not registered are advised as well. Required instead of madvise() for
 * registered ranges when uswap_mm_options.discards_reported is set; works in either case.
 * Return: 0; -EINVAL misaligned; -ECHILD called in a fork child; -errno of madvise().
 */
int uswap_mm_discard(struct uswap_mm *m, void *addr, size_t len);

/*
 * uswap_mm_sync() - wait until @m has applied what the kernel told it of the caller's past munmap(),
 * mremap() and madvise() calls on registered ranges. Call it after mapping memory where a registered
 * range was (mmap with MAP_FIXED over one, or at an address a munmap() freed) and before touching
 * it: until then, reclaim may take the new mapping's pages for the old range's.
 * Return: 0; -ECHILD called in a fork child.
 */
int uswap_mm_sync(struct uswap_mm *m);

/*
 * uswap_mm_prepare_dump() - bring every swapped and inactive page of @m back into the program's
 * ranges and stop reclaim for good, so that a core dump about to be written holds the program's
 * data (the kernel writes a page that is not mapped as zeros, and the fault handlers are gone by
 * then). For the handler of a fatal signal: no allocation, no error message; waits at most 2 s for
 * a lock the dying thread may hold. The instance serves faults afterwards, but never evicts again.
 * Return: 0; -ENOMEM more than @max_bytes are swapped (nothing done); -ETIMEDOUT; -ECHILD.
 */
int uswap_mm_prepare_dump(struct uswap_mm *m, uint64_t max_bytes);

/* uswap_mm_swap() - the swap layer of @m (for uswap_stats(), uswap_swapoff(), ...). */
struct uswap *uswap_mm_swap(struct uswap_mm *m);

struct uswap_mm_stats {
	uint64_t limit_bytes; /* 0: none */
	uint64_t
		budget_bytes; /* pool_in_limit: resident pages and pool together (limit_bytes is the pages' share); else limit_bytes */
	uint64_t limit_auto;          /* 1: the limit finds itself (uswap_mm_options.limit_auto) */
	uint64_t resident_bytes;      /* pages of the regions in memory (mapped + inactive) */
	uint64_t peak_resident_bytes; /* the most resident_bytes has been */
	uint64_t
		stall_ns; /* time the program's threads waited on swap-ins and soft faults (handler time plus a round trip each) */
	uint64_t inactive_bytes; /* resident but moved out of the program's view, waiting to go */
	uint64_t swapped_bytes;  /* pages of the regions held only by the swap layer */
	uint64_t clean_bytes;    /* resident pages that also keep a valid swap copy */
	uint64_t regions, region_bytes;
	uint64_t zero_fills;               /* pages zero-filled on first touch (fault-around included) */
	uint64_t swapins, swapin_pages;    /* folio loads from the swap layer, and their pages */
	uint64_t readahead_pages;          /* ... of which loaded ahead of a sequential run of swap-ins */
	uint64_t soft_faults;              /* inactive folios a touch brought back without a load */
	uint64_t wp_faults;                /* first writes to clean pages (their swap copy is dropped) */
	uint64_t demotions;                /* folios moved to the inactive list */
	uint64_t evictions, evicted_pages; /* folios released (stored, or clean) */
	uint64_t clean_evictions;          /* ... of which released without a store */
	uint64_t store_failures;           /* evictions no tier took: the folio stayed resident */
	uint64_t load_failures;   /* swap-ins whose data could not be read: pages poisoned (SIGBUS) */
	uint64_t load_retries;    /* loads tried again after an error that may pass (I/O, timeout) */
	uint64_t direct_reclaims; /* fault handlers that found resident over the limit and reclaimed */
	uint64_t events_remove, events_unmap, events_remap; /* madvise, munmap, mremap seen */
	uint64_t untracked_faults;             /* faults outside every region (served a zero page) */
	uint64_t sigbus_faults;                /* faults the faulting thread resolved itself (SIGBUS mode) */
	uint64_t swapin_ns_p50, swapin_ns_p99; /* fault handler time of faults that loaded */
	uint64_t reclaim_ns;                   /* time the clock hands ran (reclaimer and direct reclaim) */
	uint64_t reclaim_store_ns; /* ... of which in the swap layer's store (compression, tier I/O) */
	uint64_t
		pool_share_bytes; /* pool_in_limit: what the pool may hold of the limit now (moves with misses) */
	uint64_t meta_bytes;      /* mm's own bookkeeping: page and folio state, region table */
	uint64_t buffer_bytes; /* staging buffers of the fault path (address space, touched lazily) */
};

/* uswap_mm_stats() - a snapshot. Return: 0. */
int uswap_mm_stats(struct uswap_mm *m, struct uswap_mm_stats *st);

/*
 * Remote tiers keep their pages under a lease: keys carry a TTL (lease=, default 5 minutes) that a
 * thread of the living process renews, and one alive key per instance, PREFIX + "alive", names the
 * process (host, boot, pid namespace, pid, start time). uswap_gc() removes the keys of instances that
 * are no longer alive without waiting for their lease to run out: an instance is dead when its
 * alive key names a process of this host (same boot, same pid namespace) that is gone or is another
 * process now, or when it has no alive key at all (its lease ran out, or its keys were written without
 * one). An alive key of another host is trusted until its TTL ends it.
 */
struct uswap_gc_instance {
	const char *prefix; /* the instance's key prefix, e.g. "uswap:4242:" */
	uint64_t keys;      /* its keys found (the alive key included) */
	int alive;          /* 1: left alone; 0: its keys removed (or, with dry_run, would be) */
	const char *why;    /* e.g. "pid 4242 is gone from this host" */
};

/*
 * uswap_gc() - remove from a Redis server or cluster the keys of uswap instances that are no longer
 * alive (see above). @tier: a redis:// or redis-cluster:// tier string (servers, db=, timeout=,
 * password-env= or password-file=; prefix= and lease= do not matter). @match: the keys to look at,
 * a SCAN pattern (NULL: "uswap:*", every default prefix). @dry_run: report, remove nothing.
 * @report: called once per instance found (NULL: none).
 * Return: keys removed (with dry_run: that would be); -EINVAL bad tier string; -ECONNREFUSED no
 * server answers; -EIO a SCAN or DEL failed (keys removed until then stay removed); -ENOMEM.
 */
int64_t uswap_gc(const char *tier, const char *match, int dry_run,
		 void (*report)(const struct uswap_gc_instance *in, void *arg), void *arg);

/* uswap_errmsg() - the message of this thread's last failed call ("" if none). */
const char *uswap_errmsg(void);

/*
 * uswap_parse_size() - a size in bytes from "4096", "64K", "256M", "8G", "1T" (K = 1024; "KiB" and "KB"
 * are the same), or "N%" (1..100) of physical RAM when @pct_ok.
 * Return: 0 and *bytes set; -EINVAL not such a size, or it does not fit in 64 bits.
 */
int uswap_parse_size(const char *s, int pct_ok, uint64_t *bytes);

#ifdef __cplusplus
}
#endif
#endif
