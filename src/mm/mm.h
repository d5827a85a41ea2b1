/*
 * mm.h - regions of program memory on userfaultfd, kept under a resident limit (internal).
 *
 * Who holds what:
 *  - The region table (sorted, non-overlapping) is guarded by tbl_lock, a writer-preferring rwlock.
 *    Fault handling, reclaim and REMOVE events take it for reading; anything that adds, removes,
 *    splits or moves a region (map, unmap, register, UNMAP/REMAP events) takes it for writing.
 *  - Each folio has a lock bit in its folio word. Page words of a folio change only under that lock,
 *    and a folio lock is only ever taken inside a read section of tbl_lock (so the writer, once in,
 *    knows that no folio is locked or waited on). Nobody holds two folio locks while waiting for one.
 *  - reclaim_lock serializes the clock hands (background thread and direct reclaim).
 *
 * Page states (one 64-bit word per page, region->pages[]):
 *  NONE     not mapped, no copy: the next touch is zero-filled
 *  PRESENT  mapped in the program's range
 *  SHADOW   inactive: out of the program's range, still in memory: copied into a slot of the
 *           instance's slot store (PG_SLOT), or moved (UFFDIO_MOVE) into the region's shadow range;
 *           a touch brings it back without a load (a soft fault)
 *  SWAPPED  only in the swap layer, as page idx of swap folio id
 * PG_POISON on a NONE page: its swap-in failed (the data is gone) and the kernel holds a poison
 * marker there, so every touch gets SIGBUS; it is never filled (a zero-fill would install zeros over
 * the marker: the program would read zeros for its data) until a discard or unmap drops it.
 * PG_CLEAN on a PRESENT or SHADOW page: the swap copy (id, idx) is still identical, and a PRESENT clean
 * page is write-protected (UFFDIO_COPY_MODE_WP), so that the first write reaches us and drops the copy.
 * Resident = PRESENT + SHADOW.
 */
#ifndef USWAP_MM_MM_H
#define USWAP_MM_MM_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>
#include <linux/types.h>

#include "util/fd.h"
#include "uswap.h"

#define MM_PAGE            4096ul
#define MM_PAGE_SHIFT      12
#define MM_FOLIO_MAX_SHIFT 9 /* 512 pages, 2 MiB */
#define MM_FOLIO_MAX       (MM_PAGE << MM_FOLIO_MAX_SHIFT)
/*
 * Default handler threads at most: every handler in poll() wakes on each fault (the uffd's wait
 * queue is not exclusive) and one read takes it, so on a large machine a handler per CPU would wake
 * dozens of threads per fault.
 */
#define MM_HANDLERS_MAX 8

enum { PG_NONE = 0, PG_PRESENT = 1, PG_SHADOW = 2, PG_SWAPPED = 3 };
#define PG_KIND_MASK 3ull
#define PG_CLEAN     4ull
#define PG_IDX_SHIFT 3
#define PG_IDX_MASK  (511ull << PG_IDX_SHIFT)
#define PG_ID_SHIFT  32
#define PG_POISON    (1ull << 12) /* on a NONE page, see above */
/* On a SHADOW page: its data is in slot pg_slot() of the slot store, not in the region's shadow. */
#define PG_SLOT       (1ull << 13)
#define PG_SLOT_SHIFT 14
#define PG_SLOT_BITS  18
#define PG_SLOT_MASK  (((1ull << PG_SLOT_BITS) - 1) << PG_SLOT_SHIFT)

static inline unsigned pg_kind(uint64_t w)
{
	return (unsigned)(w & PG_KIND_MASK);
}
static inline uint32_t pg_id(uint64_t w)
{
	return (uint32_t)(w >> PG_ID_SHIFT);
}
static inline unsigned pg_idx(uint64_t w)
{
	return (unsigned)((w & PG_IDX_MASK) >> PG_IDX_SHIFT);
}
static inline bool pg_has_copy(uint64_t w)
{
	return pg_kind(w) == PG_SWAPPED || (w & PG_CLEAN);
}
static inline uint64_t pg_make(unsigned kind, uint32_t id, unsigned idx, bool clean)
{
	return (uint64_t)id << PG_ID_SHIFT | (uint64_t)idx << PG_IDX_SHIFT | (clean ? PG_CLEAN : 0) | kind;
}
static inline bool pg_slotted(uint64_t w)
{
	return w & PG_SLOT;
}
static inline uint32_t pg_slot(uint64_t w)
{
	return (uint32_t)((w & PG_SLOT_MASK) >> PG_SLOT_SHIFT);
}
/* The word of a page going to slot @s: a SHADOW page that keeps its swap copy and clean bit. */
static inline uint64_t pg_to_slot(uint64_t w, uint32_t s)
{
	return (w & ~(PG_KIND_MASK | PG_SLOT_MASK)) | PG_SLOT | (uint64_t)s << PG_SLOT_SHIFT | PG_SHADOW;
}
/* The word of a SHADOW page leaving the shadow (its kind is set next), without its slot. */
static inline uint64_t pg_unslot(uint64_t w)
{
	return w & ~(PG_SLOT | PG_SLOT_MASK);
}
/* Page @b continues the swap run of page @a: same folio id, next index. */
static inline bool pg_copy_follows(uint64_t a, uint64_t b)
{
	return pg_id(a) == pg_id(b) && pg_idx(b) == pg_idx(a) + 1;
}

/* Folio word bits. */
#define FL_LOCK    1u
#define FL_WAIT    2u
#define FL_REF     4u  /* a fault touched the folio since the front hand last passed */
#define FL_PRESENT 8u  /* some page PRESENT */
#define FL_SHADOW  16u /* some page SHADOW */
#define FL_PINNED  32u /* the last demotion failed (shared with a fork child, mlocked...): skip a round */
#define FL_SWAPPED 64u /* some page SWAPPED */
#define FL_STALE   (1u << 27) /* a soft fault left shadow pages behind, not released yet */
/*
 * The folio's SWAPPED pages and its clean PRESENT/SHADOW pages, as folio_summarize() last counted
 * them: changed only with the page words (folio lock, or tbl_lock held for writing), so that the
 * instance's totals follow by differences and the statistics never walk the pages.
 */
#define FL_NSWAP_SHIFT  7
#define FL_NCLEAN_SHIFT 17
#define FL_NMASK        0x3ffu
#define FL_COUNTS       (FL_NMASK << FL_NSWAP_SHIFT | FL_NMASK << FL_NCLEAN_SHIFT)
static inline uint32_t fl_swapped(uint32_t f)
{
	return f >> FL_NSWAP_SHIFT & FL_NMASK;
}
static inline uint32_t fl_clean(uint32_t f)
{
	return f >> FL_NCLEAN_SHIFT & FL_NMASK;
}

struct mm_region {
	uintptr_t start, end; /* page aligned */
	uintptr_t shadow;     /* the page at start + i pages has its shadow at shadow + i pages */
	uintptr_t fbase;      /* start rounded down to the folio size: folio i begins at fbase + i folios */
	unsigned folio_shift; /* log2 pages per folio */
	unsigned owned : 1;   /* from uswap_map(): unmapped by us */
	uint64_t seq;         /* creation order: events read before it was made do not apply to it */
	size_t nr_pages, nr_folios;
	uint64_t *pages; /* nr_pages words, mm memory (never a registered range) */
	_Atomic uint64_t
		*groups; /* bit g: folios [g, g + 1) * FOLIO_GROUP may hold a present or shadow page */
	_Atomic uint32_t *folios; /* nr_folios words */
};

/*
 * Folios per bit of mm_region.groups. A set bit is a hint (the hands clear it when they find the
 * group empty), a clear one is a promise: folio_summarize() sets it whenever a folio of the group
 * has a present or shadow page. The hands skip empty groups, so a sparse mapping of hundreds of GiB
 * costs them a bit per 64 folios, not a word per folio.
 */
#define FOLIO_GROUP 64

static inline size_t region_page(const struct mm_region *r, uintptr_t addr)
{
	return (addr - r->start) >> MM_PAGE_SHIFT;
}
static inline size_t region_folio(const struct mm_region *r, uintptr_t addr)
{
	return (addr - r->fbase) >> (MM_PAGE_SHIFT + r->folio_shift);
}
/* Pages [*first, *end) of folio @fi inside the region. */
static inline void region_folio_pages(const struct mm_region *r, size_t fi, size_t *first, size_t *end)
{
	uintptr_t fs = r->fbase + (fi << (MM_PAGE_SHIFT + r->folio_shift));
	uintptr_t fe = fs + (MM_PAGE << r->folio_shift);

	if (fs < r->start)
		fs = r->start;
	if (fe > r->end)
		fe = r->end;
	*first = region_page(r, fs);
	*end = region_page(r, fe);
}
static inline uintptr_t region_addr(const struct mm_region *r, size_t page)
{
	return r->start + (page << MM_PAGE_SHIFT);
}
static inline uintptr_t region_shadow(const struct mm_region *r, size_t page)
{
	return r->shadow + (page << MM_PAGE_SHIFT);
}

/* A latency histogram: log2 buckets of nanoseconds with 4 linear steps each. */
#define MM_HIST_BUCKETS 160
struct mm_hist {
	_Atomic uint64_t n[MM_HIST_BUCKETS];
};
uint64_t hist_percentile(const struct mm_hist *h, double p);

struct mm_handler {
	struct uswap_mm *m;
	pthread_t th;
	int cpu;              /* pinned CPU, -1 none */
	unsigned char *stage; /* MM_FOLIO_MAX bytes for loads, mm memory */
	bool started;
};

/* A fault's round trip besides the handler's work: what a waiting thread pays on top (docs/results.md#fault-floor). */
/* limit_auto's defaults: the share of wall time a program may wait (1%), the lowest limit. */
#define AUTO_STALL_PPM    10000
#define AUTO_MIN_BYTES    (16ull << 20)
#define MM_FAULT_ROUND_NS 10000

struct mm_counters {
	_Atomic uint64_t zero_fills, swapins, swapin_pages, readahead_pages, soft_faults, wp_faults,
		evictions, evicted_pages, clean_evictions, demotions, store_failures, load_failures,
		direct_reclaims, events_remove, events_unmap, events_remap, untracked_faults, busy_folios,
		retries, sigbus_faults, reclaim_ns, store_ns, stall_ns, load_retries;
};

/* A range of addresses [start, end). */
struct mm_range {
	uintptr_t start, end;
};

struct uswap_mm {
	struct uswap *swap;
	int uffd;        /* the program's ranges: MISSING | WP, events REMOVE, UNMAP, REMAP */
	int uffd_shadow; /* shadow ranges: MISSING with SIGBUS (never touched while empty), no events */
	int stop_fd;     /* eventfd: handlers and the reclaimer leave */
	/*
	 * What the kernel lets us use, probed at start; each is opened when used and closed after (an
	 * instance holds no descriptor for them): a pidfd of ourselves for process_madvise() (many ranges
	 * released with one TLB flush; pidfd_self: the kernel takes PIDFD_SELF_THREAD_GROUP, Linux 6.14,
	 * and no pidfd is opened), /proc/self/pagemap (which pages a failed move really moved; else
	 * mincore), /proc/self/maps (where a vma ends, when a range crosses one: PROCMAP_QUERY).
	 */
	bool have_pidfd, pidfd_self, have_pagemap, have_maps;
	pid_t pid; /* the process that created it: a fork child must not use it */

	pthread_rwlock_t tbl_lock;
	struct mm_region **tbl;
	unsigned nr_regions, tbl_cap;
	_Atomic uint64_t seq;

	/* The limit and its watermarks (reclaim.c sets them). */
	_Atomic uint64_t limit_pages, high_pages, low_pages, inactive_target_pages;
	_Atomic uint64_t resident, inactive; /* pages */
	_Atomic uint64_t swapped, clean;     /* pages, the sums of the folio words' counts */
	_Atomic uint64_t budget_pages;       /* pool_in_limit: resident + the layer's memory (0: no limit) */
	/*
	 * pool_in_limit: the memory the pool may hold now (its capacity), moved by reclaim.c's
	 * pool_balance() between an eighth and half of the budget; 0 when no tier holds memory.
	 */
	_Atomic uint64_t pool_target_bytes, balance_next_ms;
	_Atomic unsigned pool_share; /* the pool's share of the budget, in 16ths (reclaim.c) */
	pthread_mutex_t bal_lock;    /* try-locked by whoever looks; protects the bal_ fields */
	uint64_t bal_mem_ns, bal_mem_loads, bal_deep_ns, bal_deep_loads;
	unsigned bal_idle; /* looks in a row that found the tiers below the pool idle */
	bool pool_in_limit;
	/*
	 * The program reports its discards (uswap_mm_discard()); uffd raises no REMOVE events, so a
	 * page we hold as PRESENT stays mapped until we zap it, and reclaim takes pages out of the
	 * program's range in batches (copy, then one process_madvise() per batch).
	 */
	bool discards_reported;
	_Atomic unsigned inactive_pct;
	unsigned folio_shift;  /* default of regions */
	unsigned fault_around; /* pages zero-filled around a first touch */

	/* Reclaim. */
	pthread_mutex_t reclaim_lock; /* the hands */
	uintptr_t front, back;        /* clock hands: addresses of the next folio to look at */
	pthread_mutex_t kick_lock;
	pthread_cond_t kick;
	_Atomic bool reclaim_sleeping; /* set before the reclaimer checks whether to sleep */
	bool stopping;
	pthread_t reclaimer;
	bool reclaimer_started;
	_Atomic int forking;
	_Atomic uint64_t direct_stall_until_ms; /* CLOCK_MONOTONIC ms; see reclaim_run() */
	_Atomic uint64_t peak_resident;         /* pages */
	/* limit_auto (reclaim.c's auto_tick(), the reclaimer's alone): bounds, target, last look */
	bool limit_auto;
	unsigned auto_stall_ppm, auto_hold;
	uint64_t auto_avg_ppm, auto_prev_use;
	_Atomic uint64_t auto_max_bytes; /* the ceiling (uswap_mm_set_limit()) */
	uint64_t auto_min_bytes, auto_next_ms, auto_prev_ms, auto_prev_stall;
	_Atomic uintptr_t ra_next; /* where a sequential run of swap-ins would fault next */
	_Atomic unsigned ra_pages; /* swap-in readahead window, pages (0: off) */
#define FT_STREAMS 8
	_Atomic uintptr_t ft_end[FT_STREAMS]; /* where recent first touches ended (see ft_sequential()) */
	_Atomic unsigned ft_next;             /* the entry a new stream of first touches replaces */
	_Atomic int wp_score; /* > 0: clean pages pay off; < 0: their first write faults too often */
#define WP_SCORE_MAX  256     /* |wp_score| stays within this */
#define WP_FAULT_COST 4       /* a write fault on a clean page scores -4, a clean eviction +1 */
	_Atomic uint64_t wp_probe;

	/*
	 * Shadow pages that soft faults copied back and left behind (demote.c's stale_add()), released
	 * together: their folios are FL_STALE until then.
	 */
#define STALE_RANGES   64
#define STALE_PAGES    256
#define RELEASE_RANGES 64 /* ranges a release of evicted shadow pages takes with them */
	pthread_mutex_t stale_lock;
	struct iovec stale_iov[STALE_RANGES];
	struct mm_region *stale_r[STALE_RANGES];
	size_t stale_fi[STALE_RANGES];
	_Atomic unsigned nr_stale; /* written under stale_lock, read without it to skip an empty list */
	size_t stale_pages;

	/*
	 * The slot store (region.c): where batched demotion copies inactive pages, slot_max pages of
	 * address space (mm memory, never registered), populated as used. A free slot stays populated
	 * (warm) so that the next demotion copies into it without a page fault and eviction frees it
	 * without a zap (no TLB flush); beyond slot_spare_max() warm ones, the extra are zapped (cold).
	 * slot_stack: [0, slot_warm) warm free slots, [slot_max - slot_cold, slot_max) cold ones;
	 * slots from slot_next on were never used. NULL slot_base: no store (the window copies into
	 * the region's shadow range with UFFDIO_COPY).
	 */
#define SLOTS_MAX (1u << PG_SLOT_BITS) /* 1 GiB of inactive pages */
	unsigned char *slot_base;
	uint32_t *slot_stack;
	uint32_t slot_max, slot_warm, slot_cold, slot_next;
	pthread_mutex_t slot_lock;

	pthread_mutex_t ev_lock;     /* serializes read() of uffd and numbers the events read */
	uint64_t ev_read;            /* events read so far; protected by ev_lock */
	_Atomic uint64_t ev_applied; /* events applied, in read order (see apply_event()) */

	struct mm_handler *handlers;
	unsigned nr_handlers;
	cpu_set_t cpus; /* the process's CPUs at create, handlers pinned to them in turn; empty: unpinned */
	/*
	 * SIGBUS mode (uswap_mm_options.sigbus_mode): uffd reports no faults, the faulting thread gets
	 * SIGBUS and resolves its own fault in sigbus.c's signal handler, with a staging buffer taken
	 * from this pool (nr_stages of MM_FOLIO_MAX, mm memory; busy[i] set while one is in use), as
	 * does uswap_prefault() in either mode.
	 */
	bool sigbus;
	unsigned nr_stages;
	unsigned char **stages;
	_Atomic bool *stage_busy;
	unsigned char *zero;       /* MM_FOLIO_MAX of zeros, read-only */
	unsigned char *fork_stage; /* staging for the fork path */

	struct mm_counters c;
	struct mm_hist swapin_hist;
	_Atomic uint64_t meta_bytes; /* page and folio words, region table */

	struct uswap_mm *next_mm; /* list of live instances, for fork */
	/* The regions at the last fork(), as a child finds them: uswap_mm_adopt_forked() (mm memory). */
	struct mm_range *fork_ranges;
	size_t nr_fork_ranges, fork_ranges_cap;
};

/*
 * Internal calls, by file, in the one-way order of docs/mm.md: a file calls only files below it.
 * mm.c (the public calls) is on top and exports nothing here.
 */

/* fork.c: the atfork handlers serve every instance tracked here. */
void fork_track(struct uswap_mm *m);
void fork_untrack(struct uswap_mm *m);
int fork_dump_prepare(struct uswap_mm *m, const struct timespec *deadline);

/*
 * sigbus.c. SIGBUS mode: the process-wide SIGBUS handler serves faults on the regions of the instances
 * registered here (at most MM_SIGBUS_MAX); other SIGBUS signals go to the handler the program had
 * before (or the default action). sigbus_add(): -EOPNOTSUPP (no fault flags on this architecture),
 * -EMFILE (too many instances), or 0. sigbus_del(): before the instance goes. sigbus_child(): in a
 * fork child, forget them all (the child's memory is plain).
 */
#define MM_SIGBUS_MAX 16
int sigbus_add(struct uswap_mm *m);
void sigbus_del(struct uswap_mm *m);
void sigbus_child(void);

/* fault.c */
int fault_start(struct uswap_mm *m);
void fault_stop(struct uswap_mm *m);
/*
 * A fault at @addr: @wp a write to a write-protected page, else a missing page (@write: by a write).
 * From a handler (@stage its own), or in SIGBUS mode from the faulting thread. @adopt: a fault in no
 * region may adopt the vma around it (a range that grew in place) or be served a zero page; in
 * SIGBUS mode only a vma that holds one of our regions is adopted, and an address our uffd does not
 * cover is left alone. Return: 0 (served: the access can be retried), -ENOENT not ours.
 */
int fault_resolve(struct uswap_mm *m, unsigned char *stage, uintptr_t addr, bool wp, bool write, bool adopt);
/*
 * Wait until every event the handlers have read (munmap, mremap, madvise of registered ranges) is
 * applied to the region table. Context: no tbl_lock or folio lock held. After a munmap() returns,
 * fault_settle() makes the statistics reflect it.
 */
void fault_settle(struct uswap_mm *m);
/* A staging buffer of MM_FOLIO_MAX from the instance's pool (SIGBUS-mode faults, prefaults), and back. */
unsigned char *fault_stage_get(struct uswap_mm *m, unsigned *slot);
void fault_stage_put(struct uswap_mm *m, unsigned slot);
/* uswap_prefault() of [start, end), page aligned. Context: no lock held. Return: 0 or -EAGAIN. */
int fault_prefault(struct uswap_mm *m, uintptr_t start, uintptr_t end);
/* uswap_mm_discard() of [start, end), page aligned. Context: no lock held. Return: 0 or -errno. */
int fault_discard(struct uswap_mm *m, uintptr_t start, uintptr_t end);
uint64_t hist_percentile(const struct mm_hist *h, double p);

/* swapin.c */
/*
 * Bring every page of folio @fi in (NONE pages zero-filled, SWAPPED loaded, SHADOW moved back).
 * @write: the access is a write (copies are dropped, pages mapped writable); otherwise copies are
 * kept and clean pages mapped write-protected. @wake: each install wakes the threads waiting in what it
 * filled. Context: folio locked, tbl_lock read. Return: 0 (every page in), or
 * -EAGAIN (the kernel's mappings are changing: retry after the events) or another -errno.
 */
int swapin_folio(struct uswap_mm *m, unsigned char *stage, struct mm_region *r, size_t fi, bool write,
		 bool wake);
/* Whole swapped folios from @f0 in one batch (readahead, fork); see swapin.c. */
#define SWAPIN_RUN_MAX (MM_FOLIO_MAX / MM_PAGE)
size_t swapin_run(struct uswap_mm *m, unsigned char *stage, struct mm_region *r, size_t f0, size_t max,
		  bool keep, size_t *nf);
/*
 * A missing-page fault on untouched folio @fi that continues a stream of first touches: zero-fill it
 * with the untouched folios around it (fault-around). Return: true if done; false: take it alone.
 * Context: folio locked, tbl_lock read.
 */
bool swapin_around(struct uswap_mm *m, struct mm_region *r, size_t fi);
/* After a swap-in of folio @fi: read ahead if it continues a forward run. Context: tbl_lock read. */
void swapin_readahead(struct uswap_mm *m, unsigned char *stage, struct mm_region *r, size_t fi);

/* demote.c */
/*
 * Pages [shadow, shadow + n pages) of folio @fi of @r were copied back to the program: leave them to
 * be released with others, and the folio FL_STALE until then. Context: folio locked, tbl_lock held.
 */
void stale_add(struct uswap_mm *m, struct mm_region *r, size_t fi, uintptr_t shadow, size_t n);
/*
 * Release the stale shadow pages, and @n more ranges with them (one process_madvise() for all).
 * Context: tbl_lock held (read or write).
 */
void stale_release(struct uswap_mm *m, const struct iovec *more, unsigned n);
#define MAX_COW 16 /* ranges shared with a fork child noted per hand advance, for cow_break() */
struct hand_result {
	size_t pages;   /* demoted or evicted */
	size_t touched; /* folios whose reference bit was cleared: progress of a kind */
	size_t met;     /* folios the hand could act on (resident / inactive), whatever came of it */
	uintptr_t cow[MAX_COW];
	size_t cow_len[MAX_COW];
	unsigned nr_cow;
};

#define WINDOW_PAGES  512 /* span of a batch: the pages it write-protects for a moment */
#define WINDOW_FOLIOS 128 /* victims in a batch */

struct demote_window {
	struct mm_region *r;
	size_t first, end; /* pages of r: the first victim's first page, the last one's end */
	size_t fi[WINDOW_FOLIOS];
	unsigned n;
	size_t pages; /* present pages of the victims, when added */
};
/* The window @w may take folio @fi of @r (same region, within WINDOW_PAGES, room left). */
bool demote_window_fits(const struct demote_window *w, struct mm_region *r, size_t fi);
/* Add folio @fi (present, unreferenced, locked by the caller) to @w. */
void demote_window_add(struct demote_window *w, struct mm_region *r, size_t fi);
/* Demote the window's folios and unlock them; see demote.c. Return: pages demoted. */
size_t demote_window_flush(struct uswap_mm *m, struct demote_window *w, struct hand_result *res);
/*
 * The front hand found folio @fi present, unreferenced and locked: demote it, with the folios after it
 * that can go in the same move, and unlock them. Return: the last folio handled.
 */
size_t demote_front(struct uswap_mm *m, struct mm_region *r, size_t fi, size_t want, size_t *scanned,
		    struct hand_result *res);

/* reclaim.c */
/* The limit and its watermarks, in pages (0: no limit). */
void reclaim_set_limit(struct uswap_mm *m, uint64_t limit_pages, unsigned inactive_pct);
/* Set the limit (with pool_in_limit, the budget) to @limit_bytes; wake the reclaimer if over it. */
void reclaim_limit(struct uswap_mm *m, uint64_t limit_bytes);
/*
 * pool_in_limit: set the resident limit to what the swap layer's memory (the compressed pool) leaves
 * of the budget, never less than half of it. Return: true if the limit changed.
 */
bool reclaim_budget_apply(struct uswap_mm *m);
/* pool_in_limit: the pool's first share of the budget (half), or none if no tier holds memory. */
void reclaim_budget_init(struct uswap_mm *m);
int reclaim_start(struct uswap_mm *m);
void reclaim_stop(struct uswap_mm *m);
/* Wake the reclaimer if resident is above the high watermark. */
void reclaim_kick(struct uswap_mm *m);
/* Reclaim until resident <= @target or no progress. Return: pages released. */
size_t reclaim_run(struct uswap_mm *m, uint64_t target, bool direct);
/* Direct reclaim from a faulting thread (SIGBUS mode); see reclaim.c. */
size_t reclaim_direct(struct uswap_mm *m);

/*
 * validate.c (DEBUG builds; a stub returning 0 in others): check the region table, every page and
 * folio word, the instance's counters and the swap layer under it (uswap_debug_validate()) against
 * each other. Context: quiescent (no fault resolved, no reclaim running, the program not touching
 * region memory); it takes reclaim_lock and tbl_lock for writing. Return: 0, or -EUCLEAN with the
 * first broken invariant on stderr, naming the region and page.
 */
int mm_validate(struct uswap_mm *m);

/* region.c */
int region_table_init(struct uswap_mm *m);
void region_table_destroy(struct uswap_mm *m);
struct mm_region *region_find(struct uswap_mm *m, uintptr_t addr);
/* Index of the first region whose end is above @addr (nr_regions if none). */
unsigned region_after(struct uswap_mm *m, uintptr_t addr);
/* Context: tbl_lock held for writing. Creates, registers and inserts; the range must be unregistered. */
int region_add(struct uswap_mm *m, uintptr_t start, uintptr_t end, unsigned folio_shift, bool owned,
	       bool scan_present, struct mm_region **out);
/* Context: tbl_lock held for writing. Forget [start, end): free copies, drop shadow pages. */
void region_forget(struct uswap_mm *m, uintptr_t start, uintptr_t end);
/* Context: tbl_lock for writing. The kernel moved [from, from + len) to @to (mremap). */
int region_remap(struct uswap_mm *m, uintptr_t from, uintptr_t to, size_t len);
/*
 * Context: tbl_lock for writing. A fault at @addr in no region: adopt the registered vma around it;
 * @grown_only: only a vma that holds a region whole (one that grew in place), else -ENOENT.
 */
int region_adopt(struct uswap_mm *m, uintptr_t addr, bool grown_only);
/*
 * The vmas marked MADV_DONTFORK (a child does not get them), from /proc/self/smaps, merged where
 * adjacent, sorted, at most @max (the rest are left out). Return: how many.
 */
size_t region_dontfork_ranges(struct mm_range *out, size_t max);
/*
 * The copies of folio @fi's clean pages are stale from now on: drop them and lift the folio's write
 * protection. *had: it had clean pages. Context: folio locked. Return: 0 (waiters woken) or -errno.
 */
int folio_unprotect(struct uswap_mm *m, struct mm_region *r, size_t fi, bool *had);
/*
 * folio_unprotect() every folio over [start, end) of one region, as a write fault would, before a
 * write the kernel makes for us (MADV_POPULATE_WRITE): in SIGBUS mode that fails with EFAULT on a
 * protected page. Not counted as a fault. Context: no lock held.
 */
void region_unprotect(struct uswap_mm *m, uintptr_t start, uintptr_t end);

/* page.c */
void *mm_map_mem(size_t len); /* mm's own memory: mmap, never registered */
void mm_unmap_mem(void *p, size_t len);
void folio_lock(_Atomic uint32_t *f);
bool folio_trylock(_Atomic uint32_t *f);
void folio_unlock(_Atomic uint32_t *f);
/*
 * Recompute the folio word's FL_PRESENT / FL_SHADOW / FL_SWAPPED and counts from the pages, and the
 * instance's swapped and clean totals with them. Every change of page words ends with it.
 * Context: folio locked (or tbl_lock held for writing).
 */
void folio_summarize(struct uswap_mm *m, struct mm_region *r, size_t fi);
/*
 * The slot store (see struct uswap_mm). slot_get(): up to @n (at most 64) free slots into @out,
 * warm ones first, in ascending order (runs of a folio stay contiguous when they can); Return: how
 * many (fewer when the store is full). slot_put(): @n slots free again (warm; the extra beyond the
 * spare are zapped).
 */
int slot_init(struct uswap_mm *m);
void slot_fini(struct uswap_mm *m);
size_t slot_get(struct uswap_mm *m, size_t n, uint32_t *out);
void slot_put(struct uswap_mm *m, const uint32_t *s, size_t n);
static inline uintptr_t slot_addr(const struct uswap_mm *m, uint32_t s)
{
	return (uintptr_t)m->slot_base + ((uintptr_t)s << MM_PAGE_SHIFT);
}
/* Where the data of SHADOW page @i of @r is: its slot, or its place in the region's shadow range. */
static inline uintptr_t page_shadow(const struct uswap_mm *m, const struct mm_region *r, size_t i)
{
	return pg_slotted(r->pages[i]) ? slot_addr(m, pg_slot(r->pages[i])) : region_shadow(r, i);
}
/* Shadow page @j continues a run of @i's (same kind of place, next address): one copy takes both. */
static inline bool shadow_follows(const struct uswap_mm *m, const struct mm_region *r, size_t i, size_t j)
{
	return pg_slotted(r->pages[i]) == pg_slotted(r->pages[j]) &&
	       page_shadow(m, r, j) == page_shadow(m, r, i) + MM_PAGE;
}
/* Release the swap copies of pages [first, end) that have one (runs). */
void pages_put_copies(struct uswap_mm *m, struct mm_region *r, size_t first, size_t end);
/* Drop pages [first, end) of the region to NONE, whatever they are; accounting follows. */
void pages_drop(struct uswap_mm *m, struct mm_region *r, size_t first, size_t end);
/*
 * Zap @n ranges of our own address space (shadow pages, or program pages copied to the shadow) with
 * one process_madvise(): one TLB flush for all of them.
 */
struct iovec;
void ranges_zap(struct uswap_mm *m, const struct iovec *iov, unsigned n);

/* uffd.c: 0 or -errno; *done = bytes done, also on a partial failure. */
/* A userfaultfd with @features, or -EPERM with a message that says how to get access. */
int uffd_open(__u64 features, int *out);
/* Whether this kernel's userfaultfd has everything mm needs; the message names what is missing. */
int uffd_check(void);
/* Register [start, len) with @mode; -EOPNOTSUPP (unregistered again) if it lacks @need_ioctls. */
int uffd_register(int uffd, uintptr_t start, size_t len, __u64 mode, __u64 need_ioctls);
int uffd_copy(int uffd, uintptr_t dst, const void *src, size_t len, bool wp, bool wake, size_t *done);
/* uffd_copy() into the program's range, split where a vma ends. */
int uffd_copy_vmas(struct uswap_mm *m, uintptr_t dst, const void *src, size_t len, bool wp, bool wake,
		   size_t *done);
/* Where a page is after uffd_move(). */
enum { MV_LEFT, MV_MOVED, MV_HOLE };
#define MV_MAX_PAGES (1u << MM_FOLIO_MAX_SHIFT)
int uffd_move(struct uswap_mm *m, int uffd, uintptr_t dst, uintptr_t src, size_t n, bool wake, uint8_t *st);
int uffd_wake(int uffd, uintptr_t start, size_t len);
int uffd_unprotect(int uffd, uintptr_t start, size_t len);
/* Write-protect [start, start + len): the threads that write there wait for uffd_unprotect(). */
int uffd_protect(int uffd, uintptr_t start, size_t len);
/*
 * Which of @n pages from @addr are mapped (present, or in the kernel's swap), into @out[j] (0/1).
 * Return: 0; -1 no mapping, or no way to tell.
 */
int uffd_pages_mapped(struct uswap_mm *m, uintptr_t addr, size_t n, const uint8_t *need, uint8_t *out);
/* A page whose data cannot be read back: later accesses get SIGBUS, as with a swap read error. */
void uffd_poison(int uffd, uintptr_t addr, size_t len);

/* Close the instance's descriptors (kept high by util/fd.c) and forget them. */
static inline void mm_close_fds(struct uswap_mm *m)
{
	fd_close(m->uffd);
	fd_close(m->uffd_shadow);
	fd_close(m->stop_fd);
	m->uffd = m->uffd_shadow = m->stop_fd = -1;
}

/* A fork child must not use its parent's instance. */
static inline bool mm_in_child(const struct uswap_mm *m)
{
	return m->pid != getpid();
}

static inline uint64_t mm_pages(uint64_t bytes)
{
	return (bytes + MM_PAGE - 1) >> MM_PAGE_SHIFT;
}

#endif
