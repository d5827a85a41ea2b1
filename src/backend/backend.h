/*
 * backend.h - the ops vector every tier implements, and the wrappers core calls.
 *
 * A backend stores runs of 4 KiB pages and names each stored page by a 64-bit handle (32 bits unless the
 * backend has BACKEND_INLINE: then the handle is the page itself, e.g. a fill word). Core never calls
 * b->ops->x directly: the backend_*() wrappers count statistics once for every backend.
 * Backends never call up into core; "owner" is an opaque cookie core passes down (the page's
 * descriptor number) so that cold()/sparse() can name pages and remote stores can bind data to it.
 * Faults are injected by a tier like any other (fault.c: "fault(TIER):eio=1%..."), which wraps
 * another through this same vector, as SQLite injects I/O errors through a VFS.
 */
#ifndef USWAP_BACKEND_H
#define USWAP_BACKEND_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "uswap.h"

#define PAGE_SIZE USWAP_PAGE_SIZE

enum backend_caps {
	BACKEND_INLINE = 1 << 0,  /* the handle holds the data: nothing to release, no checksum needed */
	BACKEND_LRU = 1 << 1,     /* cold() names its coldest pages, for writeback */
	BACKEND_COMPACT = 1 << 2, /* sparse() + relocate() reduce fragmentation */
	BACKEND_BATCH = 1 << 3,   /* stores may be buffered until flush() */
	BACKEND_DURABLE = 1 << 4, /* data outlives the process's memory (file, remote) */
	BACKEND_PACKED = 1 << 5,  /* peek() + store_obj(): compressed pages move between tiers as they are */
	BACKEND_SEEDS = 1 << 6, /* args begin "//HOST:PORT,HOST:PORT...": those commas do not end the tier */
	BACKEND_WRAPS = 1 << 7, /* args begin "(TIER)": the tier it wraps, whose commas do not end it */
};

/* The stored form of a page, as peek() hands it out and store_obj() takes it. */
enum obj_fmt {
	OBJ_PLAIN = 0, /* the 4 KiB page itself */
	OBJ_LZ4 = 1,   /* one lz4 block */
	OBJ_ZSTD = 2,  /* one magicless zstd frame */
};

struct backend;

/* What a backend learns about the layer at open(). */
struct backend_env {
	unsigned nr_ctx; /* concurrent callers to size per-caller state for (codec contexts, buffers) */
	bool is_last;    /* no tier below: refusing a page means it stays resident */
	bool check_only; /* parse and check the args, then return 0 having opened nothing */
};

struct uswap_backend_ops {
	const char *name;
	unsigned caps;
	/* Parse @args (the tier text after "name:", may be "") strictly; may allocate. */
	int (*open)(struct backend *b, const char *args, const struct backend_env *env);
	void (*close)(struct backend *b);
	/*
	 * Context: reclaim path, no allocation. Store a prefix of the @npages pages at @src, page i owned
	 * by @owner + i. Return: pages taken (0: refuses the first page: full, incompressible, not its
	 * kind) with handles[] filled for them, or -errno with nothing taken. On success the backend
	 * owns a copy; @src is the caller's again.
	 */
	ssize_t (*store)(struct backend *b, const void *src, size_t npages, uint32_t owner,
			 uint64_t *handles);
	/* Context: fault path. Fill npages * PAGE_SIZE bytes at @dst, or -EIO (nothing is trusted). */
	int (*load)(struct backend *b, uint32_t owner, const uint64_t *handles, size_t npages, void *dst);
	/*
	 * Optional: load() of pages that need not belong to one folio (page i owned by @owners[i]), in
	 * one round of I/O. Without it, backend_load_vec() calls load() page by page.
	 */
	int (*load_vec)(struct backend *b, const uint32_t *owners, const uint64_t *handles, size_t npages,
			void *dst);
	void (*release)(struct backend *b, uint32_t owner, uint64_t handle);
	int (*flush)(struct backend *b); /* optional: NULL = nothing buffered */
	/* BACKEND_LRU: owners of up to @max coldest pages, coldest first. */
	size_t (*cold)(struct backend *b, uint32_t *owners, size_t max);
	/* BACKEND_COMPACT: owners of pages worth moving to defragment, and the move itself. */
	size_t (*sparse)(struct backend *b, uint32_t *owners, size_t max);
	int (*relocate)(struct backend *b, uint32_t owner, uint64_t handle, uint64_t *new_handle);
	void (*stats)(struct backend *b, struct uswap_tier_stats *st); /* fills pages..meta_bytes */
	/* Optional: this process's memory that holds pages now (a pool's); lock-free, any context. */
	uint64_t (*mem_bytes)(struct backend *b);
	/*
	 * BACKEND_PACKED, for movers (writeback, swapoff): peek() copies page @handle as stored (at most
	 * PAGE_SIZE bytes) into @obj; Return: its length, *fmt its form, or -EIO. store_obj() takes such an
	 * object (no allocation); Return: 1 taken and *handle set, 0 refused (full, or a form it cannot
	 * hold: the caller offers the plain page), -errno. Objects may sit in a buffer until flush().
	 */
	ssize_t (*peek)(struct backend *b, uint32_t owner, uint64_t handle, void *obj, unsigned *fmt);
	int (*store_obj)(struct backend *b, const void *obj, size_t len, unsigned fmt, uint32_t owner,
			 uint64_t *handle);
	/*
	 * Optional, memory tiers: hold at most @bytes from now on, within what open() sized; what it holds
	 * beyond goes down by writeback. Return: the capacity now, in bytes.
	 */
	uint64_t (*set_capacity)(struct backend *b, uint64_t bytes);
	/*
	 * Optional, set in DEBUG builds only (USWAP_DEBUG): check the backend's own invariants, and call
	 * @held for every page it holds, which returns false when the layer does not know that page
	 * (owner not live in this tier, or with another handle). Context: quiescent: no store, load,
	 * release or move running. Return: pages held, or -EUCLEAN (the first broken invariant is on
	 * stderr, see err_invariant()).
	 */
	ssize_t (*validate)(struct backend *b, bool (*held)(void *arg, uint32_t owner, uint64_t handle),
			    void *arg);
};

struct backend {
	const struct uswap_backend_ops *ops;
	void *priv;
	unsigned index;   /* position in the stack */
	char spec[112];   /* as configured, for stats and messages */
	_Atomic bool off; /* swapped off: takes no stores */
	/* refused a store for want of room (not for an incompressible page): writeback wanted */
	_Atomic bool full;
	_Atomic uint64_t nr_pages, stores, loads, rejects, errors, wb_in, wb_out;
	_Atomic uint64_t load_ns; /* time spent in load() and load_vec() */
};

/* The backends a tier string may name. */
const struct uswap_backend_ops *backend_lookup(const char *name, size_t len);
/* "same, zpool, ..." for messages. */
const char *backend_names(void);

/*
 * backend_open_spec() - open the one tier "name[:args]" or "name(TIER)[:args]" of @len bytes at @spec
 * into @b (its spec recorded for stats and messages). config.c splits a tier string into such tiers;
 * fault.c opens the tier it wraps with it. Return: 0; -EINVAL unknown name (message set); open()'s error.
 */
int backend_open_spec(struct backend *b, const char *spec, size_t len, const struct backend_env *env);
int backend_open(struct backend *b, const struct uswap_backend_ops *ops, const char *args,
		 const struct backend_env *env);
void backend_close(struct backend *b);
ssize_t backend_store(struct backend *b, const void *src, size_t npages, uint32_t owner, uint64_t *handles);
int backend_load(struct backend *b, uint32_t owner, const uint64_t *handles, size_t npages, void *dst);
int backend_load_vec(struct backend *b, const uint32_t *owners, const uint64_t *handles, size_t npages,
		     void *dst);
void backend_release(struct backend *b, uint32_t owner, uint64_t handle);
/* set_capacity() if the backend has it. Return: the capacity now, 0 without it. */
uint64_t backend_set_capacity(struct backend *b, uint64_t bytes);
int backend_flush(struct backend *b);
size_t backend_cold(struct backend *b, uint32_t *owners, size_t max);
size_t backend_sparse(struct backend *b, uint32_t *owners, size_t max);
int backend_relocate(struct backend *b, uint32_t owner, uint64_t handle, uint64_t *new_handle);
void backend_stats(struct backend *b, struct uswap_tier_stats *st);
ssize_t backend_peek(struct backend *b, uint32_t owner, uint64_t handle, void *obj, unsigned *fmt);
/*
 * Movers that peek side by side (swapoff runs two) each set their own number here, 0 or 1, so that a
 * tier reading ahead keeps one stream of windows per mover. 0 for every other thread.
 */
extern _Thread_local unsigned backend_stream;
int backend_store_obj(struct backend *b, const void *obj, size_t len, unsigned fmt, uint32_t owner,
		      uint64_t *handle);

static inline bool backend_has(const struct backend *b, unsigned cap)
{
	return b->ops->caps & cap;
}

/* The validate op if the backend has one. Return: what it returns, or -EOPNOTSUPP without it. */
ssize_t backend_validate(struct backend *b, bool (*held)(void *arg, uint32_t owner, uint64_t handle),
			 void *arg);

/*
 * fault.c, for tests: from now, the @nth next store (load) of the fault() tier @b fails with @err;
 * @sticky: and every one after; @nth 0: off. Stores are store() and store_obj(), loads are load(),
 * load_vec() and peek(). Return: 0; -EINVAL @b is not a fault() tier.
 */
int backend_inject(struct backend *b, bool on_store, long nth, int err, bool sticky);
/* The tier a fault() tier wraps (recursively), or @b itself: for calls that reach one backend's internals. */
struct backend *backend_unwrap(struct backend *b);

/* Arguments "a:b=c:d": next field into @key (and @val after '=', or NULL); returns false at the end. */
bool backend_next_arg(const char **args, char *key, size_t keylen, char *val, size_t vallen);

extern const struct uswap_backend_ops same_backend_ops;
extern const struct uswap_backend_ops zpool_backend_ops;
extern const struct uswap_backend_ops file_backend_ops;
extern const struct uswap_backend_ops redis_backend_ops;
extern const struct uswap_backend_ops redis_cluster_backend_ops;
extern const struct uswap_backend_ops fault_backend_ops;

#endif
