/*
 * zpool.c - compressed RAM tier: lz4/zstd objects packed by size class into 64 KiB blocks.
 * One job: one tier behind the ops vector; its size classes, block LRU, compaction and capacity all
 * walk the same block table under the same lock.
 *
 * The pool is one virtual reservation of max bytes cut into blocks (64 KiB, or 16 KiB in a pool under
 * 64 MiB). A block serves one size class (objects of (i+1) * 16 bytes, or 64 in a small pool); objects
 * straddle the pages inside a block, so the only waste is rounding and the block tail. A new block's
 * pages are made present in one call; a pool of 64 MiB or more grows by 2 MiB chunks (a huge page where
 * the kernel has them). An emptied block stays present on a warm list (up to max/32, at most 8 MiB) for
 * the next block; beyond that, after compaction and when the pool empties, it goes back with
 * MADV_DONTNEED. Near max a block is touched lazily, page by page in order, so that the pool never
 * holds more than max. Each object starts with a 6-byte header (owner, compressed length): the owner
 * is how writeback and compaction name the page to core. Blocks sit on an LRU ordered by last
 * allocation: the tail block holds the coldest objects, and writing it back frees a whole block at once.
 *
 * Invariant: a live handle names one object whose header owner is non-zero; nr_used counts them per
 * block; committed counts the pages of populated blocks (warm ones included) and the pages below the
 * high water of lazy ones. Lock order: desc lock (core) -> zpool.lock. Loads read objects without the
 * lock: core holds the descriptor lock, so the object can neither be released nor relocated meanwhile.
 * Stores write an object's data after dropping the lock (no one reads it before it is published).
 * Called only through backend.c.
 */
#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "backend/backend.h"
#include "backend/codec.h"
#include "util/alloc.h"
#include "util/err.h"

/*
 * Geometry by pool size. A big pool: 64 KiB blocks and 256 classes 16 bytes apart (rounding waste < 16
 * bytes an object). A pool under ZP_CHUNKED_MIN: 16 KiB blocks and 64 classes 64 bytes apart, since
 * every class in use keeps a partly filled block, and 256 of 64 KiB would outweigh a few MiB of pool.
 */
#define ZP_BLOCK_SHIFT       16
#define ZP_SMALL_BLOCK_SHIFT 14
#define ZP_BLOCK_SIZE        (1u << ZP_BLOCK_SHIFT)
#define ZP_ALIGN             16u
#define ZP_SMALL_ALIGN       64u
#define ZP_NR_CLASSES        (PAGE_SIZE / ZP_ALIGN)
#define ZP_HDR               6u /* owner (4) + compressed length (2); a free object keeps owner 0 and its next slot */
#define ZP_SLOT_BITS         12                          /* 64 KiB / 16 */
#define ZP_MAX_BLOCKS        (1u << (32 - ZP_SLOT_BITS)) /* handles fit in 32 bits: 64 GiB of pool */
#define NIL                  UINT32_MAX
#define ZP_CHUNK_SIZE        (2u << 20)                      /* a pool that grows by whole huge pages */
#define ZP_CHUNK_BLOCKS      (ZP_CHUNK_SIZE / ZP_BLOCK_SIZE) /* chunked pools have 64 KiB blocks */
#define ZP_CHUNKED_MIN       (64ull << 20) /* smaller pools grow a block (or a page) at a time */

static_assert(ZP_BLOCK_SIZE / ZP_ALIGN <= (1u << ZP_SLOT_BITS), "slot index fits in a handle");
static_assert((1u << ZP_SMALL_BLOCK_SHIFT) >= PAGE_SIZE, "an object fits in a small block");

enum zblock_state { ZB_FREE, ZB_PARTIAL, ZB_FULL };

struct zblock {
	uint32_t lru_prev, lru_next; /* blocks in use, head = last allocated into */
	uint32_t prev, next;         /* class partial list; next links the free-block list */
	uint16_t cls;
	uint16_t nr_used;   /* live objects */
	uint16_t nr_alloc;  /* slots ever handed out: the high water; pages above it are untouched */
	uint16_t free_head; /* free slot + 1 below nr_alloc, 0 = none */
	uint8_t state;
	uint8_t populated; /* all its pages were made present when it was taken: all of them count */
};

struct zclass {
	uint32_t obj_size;
	uint32_t per_block;
	uint32_t head, tail; /* partial blocks: allocation takes the head, newly partial ones go last */
	uint32_t nr_blocks;
};

struct zpool {
	pthread_mutex_t lock;
	unsigned char *base;
	unsigned shift;       /* block size: 1 << shift */
	unsigned align;       /* class granularity */
	unsigned nr_classes;  /* PAGE_SIZE / align */
	uint32_t max_blocks;  /* reservation, from max= */
	uint32_t hwm;         /* blocks ever used */
	uint32_t free_blocks; /* blocks given back to the kernel: no pages */
	uint32_t warm_blocks; /* free blocks whose pages stay present (and counted in committed) */
	uint64_t warm_bytes, warm_max;
	bool chunked;       /* grows by whole 2 MiB chunks, huge pages where the kernel has them */
	unsigned char *map; /* the reservation; base is it aligned to a chunk */
	size_t map_len;
	uint32_t lru_head, lru_tail;
	_Atomic uint64_t max_bytes; /* the capacity now */
	uint64_t open_bytes;        /* max= at open: what blocks and address space were sized for */
	size_t reject_len;          /* compressed length above which a page is refused as incompressible */
	struct zblock *blocks;
	struct zclass cls[ZP_NR_CLASSES];
	uint64_t data_bytes;        /* compressed bytes held (headers not counted) */
	uint64_t obj_bytes;         /* bytes of live objects, rounding and headers included */
	_Atomic uint64_t committed; /* bytes of pool memory touched and not given back (read unlocked) */
	uint64_t nr_objs;
	struct codec codec;
};

static inline unsigned char *obj_ptr(struct zpool *zp, uint32_t blk, uint32_t slot)
{
	return zp->base + ((size_t)blk << zp->shift) + (size_t)slot * zp->cls[zp->blocks[blk].cls].obj_size;
}

static inline uint32_t hdr_owner(const unsigned char *o)
{
	uint32_t v;

	memcpy(&v, o, 4);
	return v;
}

static inline uint16_t hdr_len(const unsigned char *o)
{
	uint16_t v;

	memcpy(&v, o + 4, 2);
	return v;
}

static inline void hdr_set(unsigned char *o, uint32_t owner, uint16_t len)
{
	memcpy(o, &owner, 4);
	memcpy(o + 4, &len, 2);
}

static inline size_t block_bytes(const struct zpool *zp)
{
	return (size_t)1 << zp->shift;
}

static size_t block_committed(const struct zpool *zp, const struct zblock *b)
{
	size_t hw = (size_t)b->nr_alloc * zp->cls[b->cls].obj_size;

	return b->populated ? block_bytes(zp) : (hw + PAGE_SIZE - 1) / PAGE_SIZE * PAGE_SIZE;
}

/* ---- lists, all under zp->lock ---- */

static void lru_unlink(struct zpool *zp, uint32_t i)
{
	struct zblock *b = &zp->blocks[i];

	if (b->lru_prev != NIL)
		zp->blocks[b->lru_prev].lru_next = b->lru_next;
	else
		zp->lru_head = b->lru_next;
	if (b->lru_next != NIL)
		zp->blocks[b->lru_next].lru_prev = b->lru_prev;
	else
		zp->lru_tail = b->lru_prev;
}

static void lru_push_head(struct zpool *zp, uint32_t i)
{
	struct zblock *b = &zp->blocks[i];

	b->lru_prev = NIL;
	b->lru_next = zp->lru_head;
	if (zp->lru_head != NIL)
		zp->blocks[zp->lru_head].lru_prev = i;
	else
		zp->lru_tail = i;
	zp->lru_head = i;
}

static void partial_unlink(struct zpool *zp, uint32_t i)
{
	struct zblock *b = &zp->blocks[i];
	struct zclass *c = &zp->cls[b->cls];

	if (b->prev != NIL)
		zp->blocks[b->prev].next = b->next;
	else
		c->head = b->next;
	if (b->next != NIL)
		zp->blocks[b->next].prev = b->prev;
	else
		c->tail = b->prev;
}

static void partial_push(struct zpool *zp, uint32_t i, bool at_head)
{
	struct zblock *b = &zp->blocks[i];
	struct zclass *c = &zp->cls[b->cls];

	if (at_head) {
		b->prev = NIL;
		b->next = c->head;
		if (c->head != NIL)
			zp->blocks[c->head].prev = i;
		else
			c->tail = i;
		c->head = i;
	} else {
		b->next = NIL;
		b->prev = c->tail;
		if (c->tail != NIL)
			zp->blocks[c->tail].next = i;
		else
			c->head = i;
		c->tail = i;
	}
	b->state = ZB_PARTIAL;
}

/*
 * Make the pages of block @i present in one call, not faulted in one at a time as objects fill them (a
 * fault costs several times the call per page, and more on a virtual machine that maps each new page on
 * its first use). Near the limit the block fills lazily instead, so that the pool never holds more
 * than max. Return: whether it did.
 */
static bool block_populate(struct zpool *zp, uint32_t i)
{
	if (zp->committed + block_bytes(zp) > zp->max_bytes ||
	    umadvise(zp->base + ((size_t)i << zp->shift), block_bytes(zp), MADV_POPULATE_WRITE))
		return false;
	zp->committed += block_bytes(zp);
	return true;
}

/*
 * A big pool grows by a whole chunk of never-used blocks at a time: one 2 MiB huge page when the
 * kernel gives one (a single fault, a single TLB entry). Its other blocks wait on the warm list.
 * Return: whether it did; block @i (the chunk's first) is then populated.
 */
static bool chunk_populate(struct zpool *zp, uint32_t i)
{
	if (!zp->chunked || i % ZP_CHUNK_BLOCKS || i + ZP_CHUNK_BLOCKS > zp->max_blocks ||
	    zp->committed + ZP_CHUNK_SIZE > zp->max_bytes ||
	    umadvise(zp->base + ((size_t)i << zp->shift), ZP_CHUNK_SIZE, MADV_POPULATE_WRITE))
		return false;
	zp->committed += ZP_CHUNK_SIZE;
	for (uint32_t k = ZP_CHUNK_BLOCKS - 1; k > 0; k--) {
		struct zblock *w = &zp->blocks[i + k];

		w->state = ZB_FREE;
		w->populated = 1;
		w->next = zp->warm_blocks;
		zp->warm_blocks = i + k;
	}
	zp->warm_bytes += (uint64_t)(ZP_CHUNK_BLOCKS - 1) * ZP_BLOCK_SIZE;
	zp->hwm = i + ZP_CHUNK_BLOCKS;
	return true;
}

/* A fresh block for class @ci, or NIL when the pool is at its limit. */
static uint32_t block_new(struct zpool *zp, unsigned ci)
{
	bool populated = true;
	uint32_t i;
	struct zblock *b;

	if (zp->warm_blocks != NIL) { /* present and counted already */
		i = zp->warm_blocks;
		zp->warm_blocks = zp->blocks[i].next;
		zp->warm_bytes -= block_bytes(zp);
	} else if (zp->committed + PAGE_SIZE > zp->max_bytes) {
		/* The next block will touch at least one page: refuse at the limit, not beyond it. */
		return NIL;
	} else if (zp->free_blocks != NIL) {
		i = zp->free_blocks;
		zp->free_blocks = zp->blocks[i].next;
		populated = block_populate(zp, i);
	} else if (zp->hwm < zp->max_blocks) {
		i = zp->hwm;
		if (!chunk_populate(zp, i)) {
			zp->hwm++;
			populated = block_populate(zp, i);
		}
	} else {
		return NIL;
	}
	b = &zp->blocks[i];
	memset(b, 0, sizeof(*b));
	b->cls = (uint16_t)ci;
	b->populated = populated;
	zp->cls[ci].nr_blocks++;
	partial_push(zp, i, true);
	lru_push_head(zp, i);
	return i;
}

/* Give the pages of free block @i back to the kernel and put it on the free list. */
static void block_release(struct zpool *zp, uint32_t i)
{
	struct zblock *b = &zp->blocks[i];

	zp->committed -= block_committed(zp, b);
	urelease_pages(zp->base + ((size_t)i << zp->shift), block_bytes(zp));
	b->populated = 0;
	b->nr_alloc = 0;
	b->next = zp->free_blocks;
	zp->free_blocks = i;
}

/*
 * An emptied block whose pages are present stays so on the warm list, up to warm_max bytes, for the
 * next block: writeback empties blocks while stores take new ones, and giving pages back to take new
 * ones costs a flush and fresh faults each time. An empty pool keeps nothing, nor does compaction
 * (@keep false), whose point is to give memory back.
 */
static void block_free(struct zpool *zp, uint32_t i, bool keep)
{
	struct zblock *b = &zp->blocks[i];

	if (b->state == ZB_PARTIAL)
		partial_unlink(zp, i);
	lru_unlink(zp, i);
	zp->cls[b->cls].nr_blocks--;
	b->state = ZB_FREE;
	if (keep && b->populated && zp->nr_objs && zp->warm_bytes + block_bytes(zp) <= zp->warm_max) {
		b->next = zp->warm_blocks;
		zp->warm_blocks = i;
		zp->warm_bytes += block_bytes(zp);
		return;
	}
	if (zp->nr_objs) {
		block_release(zp, i);
		return;
	}
	/*
	 * Empty: every page goes back in one call, which also frees the page tables of huge pages split
	 * by single-block releases, and the pool starts over: it grows again by whole huge pages. Every
	 * block in use holds an object, so none is left on the lists that the high water forgets.
	 */
	assert(zp->lru_head == NIL);
	urelease_pages(zp->base, (size_t)zp->hwm << zp->shift);
	zp->hwm = 0;
	zp->committed = 0;
	zp->free_blocks = zp->warm_blocks = NIL;
	zp->warm_bytes = 0;
}

/* Take a slot in block @i (which has one). Return: the slot. */
static uint32_t block_take(struct zpool *zp, uint32_t i)
{
	struct zblock *b = &zp->blocks[i];
	struct zclass *c = &zp->cls[b->cls];
	uint32_t slot;

	if (b->free_head) {
		slot = b->free_head - 1u;
		b->free_head = hdr_len(obj_ptr(zp, i, slot));
	} else {
		size_t before = block_committed(zp, b);

		slot = b->nr_alloc++;
		zp->committed += block_committed(zp, b) - before;
	}
	b->nr_used++;
	if (!b->free_head && b->nr_alloc == c->per_block) {
		partial_unlink(zp, i);
		b->state = ZB_FULL;
	}
	return slot;
}

/* Bytes of pool memory that taking a fresh slot (above the high water) of block @i would touch. */
static size_t zpool_growth(const struct zpool *zp, uint32_t i)
{
	const struct zblock *b = &zp->blocks[i];
	size_t obj = zp->cls[b->cls].obj_size, hw = (size_t)b->nr_alloc * obj;

	if (b->populated)
		return 0;

	return (hw + obj + PAGE_SIZE - 1) / PAGE_SIZE * PAGE_SIZE -
	       (hw + PAGE_SIZE - 1) / PAGE_SIZE * PAGE_SIZE;
}

/* Allocate an object of class @ci outside block @avoid. Return: handle, or NIL when full. */
static uint32_t zpool_alloc(struct zpool *zp, unsigned ci, uint32_t avoid, bool may_grow)
{
	struct zclass *c = &zp->cls[ci];
	uint32_t i = c->head;

	if (i == avoid && i != NIL)
		i = zp->blocks[i].next;
	if (i == NIL) {
		if (!may_grow)
			return NIL;
		/*
		 * A fresh block has room for its first slot: block_new() refused at the limit. It is not
		 * looked at again: max_bytes is set without the lock, and a fresh block refused by a second
		 * look at a capacity that shrank meanwhile stayed listed holding nothing, which the reset
		 * of an emptied pool then forgot (a later handle named a block above the high water).
		 */
		i = block_new(zp, ci);
		if (i == NIL)
			return NIL;
	} else if (!zp->blocks[i].free_head && zpool_growth(zp, i) + zp->committed > zp->max_bytes) {
		return NIL; /* the next slot would touch a page beyond the limit */
	}
	if (zp->lru_head != i) {
		lru_unlink(zp, i);
		lru_push_head(zp, i);
	}
	return i << ZP_SLOT_BITS | block_take(zp, i);
}

static void zpool_free_obj(struct zpool *zp, uint32_t blk, uint32_t slot, bool keep)
{
	struct zblock *b = &zp->blocks[blk];
	struct zclass *c = &zp->cls[b->cls];
	unsigned char *o = obj_ptr(zp, blk, slot);

	zp->data_bytes -= hdr_len(o);
	zp->obj_bytes -= c->obj_size;
	zp->nr_objs--;
	hdr_set(o, 0, b->free_head);
	b->free_head = (uint16_t)(slot + 1);
	if (--b->nr_used == 0) {
		block_free(zp, blk, keep);
		return;
	}
	if (b->state == ZB_FULL)
		partial_push(zp, blk, false);
}

static inline unsigned class_of(const struct zpool *zp, size_t clen)
{
	return (unsigned)((ZP_HDR + clen + zp->align - 1) / zp->align - 1);
}

/*
 * handle_ok_unlocked() - the check of the lock-free load path. It reads only what cannot change while
 * the caller holds the descriptor lock of @owner: the block's class (set when the block was made, and
 * the block lives while it holds our object) and the object's header; never the list fields or the
 * high water, which other objects' stores and frees change under zp->lock.
 */
static bool handle_ok_unlocked(struct zpool *zp, uint64_t h, uint32_t owner)
{
	uint32_t blk = (uint32_t)(h >> ZP_SLOT_BITS), slot = h & ((1u << ZP_SLOT_BITS) - 1);

	if (h > UINT32_MAX || blk >= zp->max_blocks || slot >= zp->cls[zp->blocks[blk].cls].per_block)
		return false;
	return hdr_owner(obj_ptr(zp, blk, slot)) == owner;
}

static bool handle_ok(struct zpool *zp, uint64_t h, uint32_t owner)
{
	uint32_t blk = (uint32_t)(h >> ZP_SLOT_BITS), slot = h & ((1u << ZP_SLOT_BITS) - 1);

	if (h > UINT32_MAX || blk >= zp->hwm || zp->blocks[blk].state == ZB_FREE ||
	    slot >= zp->blocks[blk].nr_alloc)
		return false;
	return hdr_owner(obj_ptr(zp, blk, slot)) == owner;
}

/* ---- ops ---- */

static int zpool_open(struct backend *b, const char *args, const struct backend_env *env)
{
	struct zpool *zp;
	char key[32], val[64];
	enum codec_kind kind = CODEC_LZ4;
	int level = 3, ret;
	bool level_set = false;
	unsigned reject_pct = 90;
	uint64_t max = 0;

	while (backend_next_arg(&args, key, sizeof(key), val, sizeof(val))) {
		if (!strcmp(key, "lz4") && !val[0]) {
			kind = CODEC_LZ4;
		} else if (!strcmp(key, "zstd")) {
			kind = CODEC_ZSTD;
			if (val[0]) { /* zstd=LEVEL */
				char *end;
				long l = strtol(val, &end, 10);

				if (*end || l < 1 || l > 19)
					return err_set(-EINVAL, "tier \"%s\": zstd level \"%s\" is not 1..19",
						       b->spec, val);
				level = (int)l;
				level_set = true;
			}
		} else if (!strcmp(key, "level")) {
			char *end;
			long l = strtol(val, &end, 10);

			if (!val[0] || *end || l < 1 || l > 19)
				return err_set(-EINVAL, "tier \"%s\": level \"%s\" is not 1..19", b->spec,
					       val);
			level = (int)l;
			level_set = true;
		} else if (!strcmp(key, "max")) {
			if (uswap_parse_size(val, 1, &max) || max < ZP_BLOCK_SIZE)
				return err_set(
					-EINVAL,
					"tier \"%s\": max \"%s\" is not a size of 64K or more (256M, 25%%)",
					b->spec, val);
		} else if (!strcmp(key, "reject")) {
			char *end;
			long p = strtol(val, &end, 10);

			if (!val[0] || strcmp(end, "%") || p < 10 || p > 100)
				return err_set(-EINVAL,
					       "tier \"%s\": reject \"%s\" is not a percentage 10%%..100%%",
					       b->spec, val);
			reject_pct = (unsigned)p;
		} else {
			return err_set(-EINVAL,
				       "tier \"%s\": unknown zpool option \"%s\" (lz4, zstd[=LEVEL], "
				       "level=N, max=SIZE, reject=N%%)",
				       b->spec, key);
		}
	}
	if (level_set && kind != CODEC_ZSTD)
		return err_set(-EINVAL, "tier \"%s\": level= needs zstd", b->spec);
	if (env->check_only)
		return 0;
	if (!max)
		uswap_parse_size("25%", 1, &max);

	zp = ualloc_zero(sizeof(*zp));
	if (!zp)
		return -ENOMEM;
	zp->max_bytes = zp->open_bytes = max;
	/*
	 * Memory is bounded by committed pages, not by blocks: a block costs only the pages below its high
	 * water. Reserve one spare block per size class so that a small pool, whose classes each hold a
	 * partly touched block, still fills up to max instead of running out of blocks first.
	 */
	zp->chunked = max >= ZP_CHUNKED_MIN;
	zp->shift = zp->chunked ? ZP_BLOCK_SHIFT : ZP_SMALL_BLOCK_SHIFT;
	zp->align = zp->chunked ? ZP_ALIGN : ZP_SMALL_ALIGN;
	zp->nr_classes = PAGE_SIZE / zp->align;
	zp->max_blocks = (uint32_t)((max + block_bytes(zp) - 1) >> zp->shift) + zp->nr_classes;
	if (zp->max_blocks > ZP_MAX_BLOCKS)
		zp->max_blocks = ZP_MAX_BLOCKS;
	zp->reject_len = (size_t)PAGE_SIZE * reject_pct / 100;
	if (zp->reject_len > PAGE_SIZE - ZP_HDR)
		zp->reject_len = PAGE_SIZE - ZP_HDR; /* an object never exceeds a page */
	zp->free_blocks = zp->warm_blocks = zp->lru_head = zp->lru_tail = NIL;
	zp->warm_max = zp->chunked ? (max / 32 < (8u << 20) ? max / 32 : (8u << 20)) : 0;
	for (unsigned i = 0; i < zp->nr_classes; i++) {
		zp->cls[i].obj_size = (i + 1) * zp->align;
		zp->cls[i].per_block = (uint32_t)(block_bytes(zp) / zp->cls[i].obj_size);
		zp->cls[i].head = zp->cls[i].tail = NIL;
	}
	ret = -ENOMEM;
	zp->blocks = ureserve((size_t)zp->max_blocks * sizeof(struct zblock));
	zp->map_len = ((size_t)zp->max_blocks << zp->shift) + ZP_CHUNK_SIZE;
	zp->map = ureserve(zp->map_len);
	if (!zp->blocks || !zp->map)
		goto out_free;
	zp->base =
		(unsigned char *)(((uintptr_t)zp->map + ZP_CHUNK_SIZE - 1) & ~(uintptr_t)(ZP_CHUNK_SIZE - 1));
	if (zp->chunked)
		umadvise(zp->base, (size_t)zp->max_blocks << zp->shift, MADV_HUGEPAGE); /* advice only */
	ret = codec_init(&zp->codec, kind, level, env->nr_ctx);
	if (ret)
		goto out_free;
	pthread_mutex_init(&zp->lock, NULL);
	b->priv = zp;
	return 0;

out_free:
	uunreserve(zp->blocks, (size_t)zp->max_blocks * sizeof(struct zblock));
	uunreserve(zp->map, zp->map_len);
	ufree(zp);
	return ret;
}

static void zpool_close(struct backend *b)
{
	struct zpool *zp = b->priv;

	if (!zp)
		return;
	codec_destroy(&zp->codec);
	pthread_mutex_destroy(&zp->lock);
	uunreserve(zp->blocks, (size_t)zp->max_blocks * sizeof(struct zblock));
	uunreserve(zp->map, zp->map_len);
	ufree(zp);
	b->priv = NULL;
}

static ssize_t zpool_store(struct backend *b, const void *src, size_t npages, uint32_t owner,
			   uint64_t *handles)
{
	struct zpool *zp = b->priv;
	const unsigned char *s = src;
	struct codec_ctx *x = codec_get(&zp->codec);
	size_t i;

	for (i = 0; i < npages; i++) {
		size_t clen = codec_compress(&zp->codec, x, s + i * PAGE_SIZE, x->buf, zp->reject_len);
		unsigned ci;
		uint32_t h;

		if (!clen)
			break; /* incompressible: the next tier's */
		ci = class_of(zp, clen);
		pthread_mutex_lock(&zp->lock);
		h = zpool_alloc(zp, ci, NIL, true);
		if (h == NIL) {
			pthread_mutex_unlock(&zp->lock);
			atomic_store_explicit(&b->full, true, memory_order_relaxed);
			break;
		}
		unsigned char *o = obj_ptr(zp, h >> ZP_SLOT_BITS, h & ((1u << ZP_SLOT_BITS) - 1));

		hdr_set(o, owner + (uint32_t)i, (uint16_t)clen);
		zp->data_bytes += clen;
		zp->obj_bytes += zp->cls[ci].obj_size;
		zp->nr_objs++;
		pthread_mutex_unlock(&zp->lock);
		/*
		 * The data goes in unlocked: until the caller publishes the page no one reads it (a mover
		 * that finds the owner in the header skips a descriptor that is not live), and the object
		 * keeps its block in use.
		 */
		memcpy(o + ZP_HDR, x->buf, clen);
		handles[i] = h;
	}
	codec_put(x);
	return (ssize_t)i;
}

static int zpool_load(struct backend *b, uint32_t owner, const uint64_t *handles, size_t npages, void *dst)
{
	struct zpool *zp = b->priv;
	struct codec_ctx *x = codec_needs_ctx_to_load(&zp->codec) ? codec_get(&zp->codec) : NULL;
	int ret = 0;

	for (size_t i = 0; i < npages && !ret; i++) {
		uint32_t blk = (uint32_t)(handles[i] >> ZP_SLOT_BITS);
		const unsigned char *o;

		if (!handle_ok_unlocked(zp, handles[i], owner + (uint32_t)i)) {
			ret = -EIO;
			break;
		}
		o = obj_ptr(zp, blk, handles[i] & ((1u << ZP_SLOT_BITS) - 1));
		ret = codec_decompress(&zp->codec, x, o + ZP_HDR, hdr_len(o),
				       (unsigned char *)dst + i * PAGE_SIZE);
	}
	if (x)
		codec_put(x);
	return ret;
}

/*
 * A release must name a live object of page @owner. When it does not, the assertion that follows is
 * preceded by what the handle names (its block's state and slots, the high water, the header's owner)
 * and the pool's totals, so that one occurrence says which invariant broke. Context: zp->lock held.
 */
static void release_check(struct zpool *zp, uint64_t h, uint32_t owner)
{
	uint32_t blk = (uint32_t)(h >> ZP_SLOT_BITS), slot = h & ((1u << ZP_SLOT_BITS) - 1);
	const struct zblock *b;

	if (handle_ok(zp, h, owner))
		return;
	b = h > UINT32_MAX || blk >= zp->max_blocks ? NULL : &zp->blocks[blk];
	if (!b)
		err_invariant("zpool: release of handle %#llx for page %u: beyond the %u blocks reserved",
			      (unsigned long long)h, owner, zp->max_blocks);
	else
		err_invariant(
			"zpool: release of handle %#llx (block %u slot %u) for page %u: block state %u, "
			"class %u, %u used of %u slots taken, header owner %u; high water %u blocks, "
			"%llu objects, committed %llu of %llu bytes",
			(unsigned long long)h, blk, slot, owner, b->state, b->cls, b->nr_used, b->nr_alloc,
			slot < zp->cls[b->cls].per_block ? hdr_owner(obj_ptr(zp, blk, slot)) : 0, zp->hwm,
			(unsigned long long)zp->nr_objs, (unsigned long long)zp->committed,
			(unsigned long long)zp->max_bytes);
	assert(!"zpool_release: the handle names no live object of its page");
}

static void zpool_release(struct backend *b, uint32_t owner, uint64_t h)
{
	struct zpool *zp = b->priv;

	pthread_mutex_lock(&zp->lock);
	release_check(zp, h, owner);
	zpool_free_obj(zp, (uint32_t)(h >> ZP_SLOT_BITS), h & ((1u << ZP_SLOT_BITS) - 1), true);
	pthread_mutex_unlock(&zp->lock);
}

/* Owners of the live objects of block @i, appended to @owners. */
static size_t block_owners(struct zpool *zp, uint32_t i, uint32_t *owners, size_t n, size_t max)
{
	struct zblock *b = &zp->blocks[i];

	for (uint32_t s = 0; s < b->nr_alloc && n < max; s++) {
		uint32_t o = hdr_owner(obj_ptr(zp, i, s));

		if (o)
			owners[n++] = o;
	}
	return n;
}

static size_t zpool_cold(struct backend *b, uint32_t *owners, size_t max)
{
	struct zpool *zp = b->priv;
	size_t n = 0;

	pthread_mutex_lock(&zp->lock);
	for (uint32_t i = zp->lru_tail; i != NIL && n < max; i = zp->blocks[i].lru_prev)
		n = block_owners(zp, i, owners, n, max);
	pthread_mutex_unlock(&zp->lock);
	return n;
}

/*
 * Fragmentation is memory held by free slots of partial blocks. When it passes both 1 MiB and 1/8 of
 * the pool, name the objects of the emptiest partial blocks (never a class's head, where allocation
 * happens): relocating them into fuller blocks empties whole blocks.
 */
static size_t zpool_sparse(struct backend *b, uint32_t *owners, size_t max)
{
	struct zpool *zp = b->priv;
	size_t n = 0;
	uint64_t waste;

	pthread_mutex_lock(&zp->lock);
	waste = zp->committed - zp->warm_bytes - zp->obj_bytes;
	if (waste < (1u << 20) || waste < zp->committed / 8)
		goto out_unlock;
	for (unsigned ci = 0; ci < zp->nr_classes && n < max; ci++) {
		struct zclass *c = &zp->cls[ci];

		for (uint32_t i = c->tail; i != NIL && i != c->head && n < max; i = zp->blocks[i].prev)
			if (zp->blocks[i].nr_used <= c->per_block / 2)
				n = block_owners(zp, i, owners, n, max);
	}
out_unlock:
	pthread_mutex_unlock(&zp->lock);
	return n;
}

static int zpool_relocate(struct backend *b, uint32_t owner, uint64_t h, uint64_t *new_handle)
{
	struct zpool *zp = b->priv;
	uint32_t blk = (uint32_t)(h >> ZP_SLOT_BITS), slot = h & ((1u << ZP_SLOT_BITS) - 1), nh;
	const unsigned char *o;
	unsigned ci;
	int ret = 0;

	pthread_mutex_lock(&zp->lock);
	if (!handle_ok(zp, h, owner)) {
		ret = -EINVAL;
		goto out_unlock;
	}
	ci = zp->blocks[blk].cls;
	nh = zpool_alloc(zp, ci, blk, false);
	if (nh == NIL) {
		ret = -ENOSPC;
		goto out_unlock;
	}
	o = obj_ptr(zp, blk, slot);
	memcpy(obj_ptr(zp, nh >> ZP_SLOT_BITS, nh & ((1u << ZP_SLOT_BITS) - 1)), o, ZP_HDR + hdr_len(o));
	zp->data_bytes += hdr_len(o);
	zp->obj_bytes += zp->cls[ci].obj_size;
	zp->nr_objs++;
	zpool_free_obj(zp, blk, slot, false);
	*new_handle = nh;
out_unlock:
	pthread_mutex_unlock(&zp->lock);
	return ret;
}

static void zpool_stats(struct backend *b, struct uswap_tier_stats *st)
{
	struct zpool *zp = b->priv;

	pthread_mutex_lock(&zp->lock);
	st->data_bytes = zp->data_bytes;
	st->used_bytes = zp->committed;
	st->capacity_bytes = zp->max_bytes;
	st->meta_bytes = (uint64_t)zp->hwm * sizeof(struct zblock) + sizeof(*zp);
	pthread_mutex_unlock(&zp->lock);
}

static uint64_t zpool_mem_bytes(struct backend *b)
{
	struct zpool *zp = b->priv;

	return atomic_load_explicit(&zp->committed, memory_order_relaxed);
}

static unsigned zpool_fmt(const struct zpool *zp)
{
	return zp->codec.kind == CODEC_LZ4 ? OBJ_LZ4 : OBJ_ZSTD;
}

/* The compressed object as it is, for a tier that keeps it compressed. Context: caller holds the page's descriptor. */
static ssize_t zpool_peek(struct backend *b, uint32_t owner, uint64_t h, void *obj, unsigned *fmt)
{
	struct zpool *zp = b->priv;
	const unsigned char *o;

	if (!handle_ok_unlocked(zp, h, owner))
		return -EIO;
	o = obj_ptr(zp, (uint32_t)(h >> ZP_SLOT_BITS), h & ((1u << ZP_SLOT_BITS) - 1));
	memcpy(obj, o + ZP_HDR, hdr_len(o));
	*fmt = zpool_fmt(zp);
	return hdr_len(o);
}

/* Take back an object this pool's codec made (swapoff of a tier below): no compression. */
static int zpool_store_obj(struct backend *b, const void *obj, size_t len, unsigned fmt, uint32_t owner,
			   uint64_t *handle)
{
	struct zpool *zp = b->priv;
	unsigned char *o;
	unsigned ci;
	uint32_t h;

	if (fmt != zpool_fmt(zp) || !len || len > zp->reject_len)
		return 0;
	ci = class_of(zp, len);
	pthread_mutex_lock(&zp->lock);
	h = zpool_alloc(zp, ci, NIL, true);
	if (h == NIL) {
		pthread_mutex_unlock(&zp->lock);
		return 0;
	}
	o = obj_ptr(zp, h >> ZP_SLOT_BITS, h & ((1u << ZP_SLOT_BITS) - 1));
	hdr_set(o, owner, (uint16_t)len);
	zp->data_bytes += len;
	zp->obj_bytes += zp->cls[ci].obj_size;
	zp->nr_objs++;
	pthread_mutex_unlock(&zp->lock);
	memcpy(o + ZP_HDR, obj, len); /* unlocked, as in zpool_store() */
	*handle = h;
	return 1;
}

#if USWAP_DEBUG
/* Where zpool_validate() found a block: on the LRU (in use), the warm list or the free list. */
enum { ZV_LRU = 1, ZV_WARM = 2, ZV_FREE = 4, ZV_PARTIAL = 8 };

/*
 * Walk list @head of blocks linked by @next (the warm or the free list), tagging each with @tag.
 * Return: 0 or -EUCLEAN (a block out of range, on two lists, or a cycle).
 */
static int zv_free_list(struct zpool *zp, uint8_t *tags, uint32_t head, uint8_t tag, const char *name,
			uint32_t *count)
{
	*count = 0;
	for (uint32_t i = head; i != NIL; i = zp->blocks[i].next) {
		struct zblock *b;

		if (i >= zp->hwm)
			return err_invariant("zpool: block %u on the %s list is above the high water %u", i,
					     name, zp->hwm);
		if (tags[i])
			return err_invariant("zpool: block %u on the %s list is on another list (tags %#x)",
					     i, name, tags[i]);
		tags[i] = tag;
		b = &zp->blocks[i];
		if (b->state != ZB_FREE)
			return err_invariant("zpool: block %u on the %s list has state %u", i, name,
					     b->state);
		if (tag == ZV_WARM && !b->populated)
			return err_invariant("zpool: warm block %u is not populated", i);
		if (tag == ZV_FREE && (b->populated || b->nr_alloc))
			return err_invariant("zpool: released block %u is populated (%u) or has slots (%u)",
					     i, b->populated, b->nr_alloc);
		++*count;
	}
	return 0;
}

/*
 * The slots of in-use block @i: live objects (owner set, a length of its class) and the free chain
 * (owner 0, each once, below the high water) partition [0, nr_alloc). Adds to the totals.
 */
static int zv_block(struct zpool *zp, uint32_t i, bool (*held)(void *, uint32_t, uint64_t), void *arg,
		    uint64_t *data, uint32_t *live)
{
	struct zblock *b = &zp->blocks[i];
	struct zclass *c = &zp->cls[b->cls];
	uint64_t seen[(ZP_BLOCK_SIZE / ZP_ALIGN) / 64] = {0};
	uint32_t nfree = 0, nlive = 0;

	if (b->nr_alloc > c->per_block || b->nr_used > b->nr_alloc || !b->nr_used)
		return err_invariant("zpool: block %u of class %u: %u used of %u slots taken, %u per block",
				     i, b->cls, b->nr_used, b->nr_alloc, c->per_block);
	if ((b->state == ZB_FULL) != (!b->free_head && b->nr_alloc == c->per_block))
		return err_invariant("zpool: block %u is %s with free head %u and %u of %u slots taken", i,
				     b->state == ZB_FULL ? "full" : "partial", b->free_head, b->nr_alloc,
				     c->per_block);
	for (uint32_t f = b->free_head; f; f = hdr_len(obj_ptr(zp, i, f - 1))) {
		uint32_t s = f - 1;

		if (s >= b->nr_alloc || seen[s / 64] >> (s % 64) & 1)
			return err_invariant("zpool: block %u: free slot %u is above the high water %u or "
					     "twice on the free chain",
					     i, s, b->nr_alloc);
		if (hdr_owner(obj_ptr(zp, i, s)))
			return err_invariant("zpool: block %u: slot %u on the free chain has owner %u", i, s,
					     hdr_owner(obj_ptr(zp, i, s)));
		seen[s / 64] |= 1ull << (s % 64);
		nfree++;
	}
	for (uint32_t s = 0; s < b->nr_alloc; s++) {
		const unsigned char *o = obj_ptr(zp, i, s);
		uint32_t owner = hdr_owner(o);
		uint16_t len = hdr_len(o);
		uint64_t h = (uint64_t)i << ZP_SLOT_BITS | s;

		if (!owner) {
			if (!(seen[s / 64] >> (s % 64) & 1))
				return err_invariant(
					"zpool: block %u: slot %u has no owner and is not on the free "
					"chain",
					i, s);
			continue;
		}
		if (!len || len > zp->reject_len || class_of(zp, len) != b->cls)
			return err_invariant(
				"zpool: block %u slot %u (owner %u): length %u does not belong in "
				"class %u (reject above %zu)",
				i, s, owner, len, b->cls, zp->reject_len);
		if (held && !held(arg, owner, h))
			return err_invariant(
				"zpool: handle %#llx (block %u slot %u) holds a page of owner %u "
				"that the layer does not know there",
				(unsigned long long)h, i, s, owner);
		*data += len;
		nlive++;
	}
	if (nlive != b->nr_used || nfree != (uint32_t)(b->nr_alloc - b->nr_used))
		return err_invariant(
			"zpool: block %u: %u live objects and %u free slots, but nr_used %u of %u "
			"taken",
			i, nlive, nfree, b->nr_used, b->nr_alloc);
	*live += nlive;
	return 0;
}

/*
 * zpool_validate() - the pool's invariants, under its lock: every block below the high water on
 * exactly one of the LRU (in use), the warm list (free, present) and the free list (free, given
 * back); both LRU directions agree; each class's partial list holds exactly its in-use blocks that
 * are not full, and its block count is right; each in-use block's slots split into live objects
 * (an owner, a length of the block's class) and the free chain; the totals (objects, data and object
 * bytes) add up; committed is what the in-use blocks touched plus the warm blocks, within the size
 * the pool was opened with. Calls @held for every live object. Return: objects, or -EUCLEAN.
 */
static ssize_t zpool_validate(struct backend *b, bool (*held)(void *arg, uint32_t owner, uint64_t handle),
			      void *arg)
{
	struct zpool *zp = b->priv;
	uint32_t nr_lru = 0, nr_warm = 0, nr_free = 0, prev = NIL, live = 0;
	uint32_t per_class[ZP_NR_CLASSES] = {0};
	uint64_t data = 0, obj = 0, committed = 0;
	uint8_t *tags = NULL;
	ssize_t ret = 0;

	pthread_mutex_lock(&zp->lock);
	if (zp->hwm > zp->max_blocks) {
		ret = err_invariant("zpool: high water %u above %u blocks", zp->hwm, zp->max_blocks);
		goto out_unlock;
	}
	tags = ualloc_zero(zp->hwm + 1);
	if (!tags) {
		ret = -ENOMEM;
		goto out_unlock;
	}
	for (uint32_t i = zp->lru_head; i != NIL; prev = i, i = zp->blocks[i].lru_next) {
		struct zblock *blk;

		if (i >= zp->hwm || tags[i]) {
			ret = err_invariant("zpool: LRU block %u above the high water %u, or a cycle", i,
					    zp->hwm);
			goto out_unlock;
		}
		tags[i] = ZV_LRU;
		blk = &zp->blocks[i];
		if (blk->lru_prev != prev || blk->state == ZB_FREE || blk->cls >= zp->nr_classes) {
			ret = err_invariant("zpool: LRU block %u: prev %u (expected %u), state %u, class %u",
					    i, blk->lru_prev, prev, blk->state, blk->cls);
			goto out_unlock;
		}
		nr_lru++;
		per_class[blk->cls]++;
	}
	if (zp->lru_tail != prev) {
		ret = err_invariant("zpool: LRU tail %u, but the list ends at %u", zp->lru_tail, prev);
		goto out_unlock;
	}
	ret = zv_free_list(zp, tags, zp->warm_blocks, ZV_WARM, "warm", &nr_warm);
	if (!ret)
		ret = zv_free_list(zp, tags, zp->free_blocks, ZV_FREE, "free", &nr_free);
	if (ret)
		goto out_unlock;
	if (nr_lru + nr_warm + nr_free != zp->hwm) {
		ret = err_invariant(
			"zpool: %u blocks in use, %u warm and %u released, but the high water is %u", nr_lru,
			nr_warm, nr_free, zp->hwm);
		goto out_unlock;
	}
	if (zp->warm_bytes != (uint64_t)nr_warm * block_bytes(zp)) {
		ret = err_invariant("zpool: warm_bytes %llu for %u warm blocks",
				    (unsigned long long)zp->warm_bytes, nr_warm);
		goto out_unlock;
	}
	for (unsigned ci = 0; ci < zp->nr_classes; ci++) {
		struct zclass *c = &zp->cls[ci];

		prev = NIL;
		for (uint32_t i = c->head; i != NIL; prev = i, i = zp->blocks[i].next) {
			struct zblock *blk = &zp->blocks[i];

			if (i >= zp->hwm || tags[i] != ZV_LRU || blk->cls != ci || blk->state != ZB_PARTIAL ||
			    blk->prev != prev) {
				ret = err_invariant(
					"zpool: class %u partial list: block %u (tags %#x, class %u, "
					"state %u, prev %u, expected %u)",
					ci, i, i < zp->hwm ? tags[i] : 0, blk->cls, blk->state, blk->prev,
					prev);
				goto out_unlock;
			}
			tags[i] |= ZV_PARTIAL;
		}
		if (c->tail != prev || c->nr_blocks != per_class[ci]) {
			ret = err_invariant(
				"zpool: class %u: tail %u (list ends at %u), %u blocks (counted %u)", ci,
				c->tail, prev, c->nr_blocks, per_class[ci]);
			goto out_unlock;
		}
	}
	for (uint32_t i = 0; i < zp->hwm; i++) {
		struct zblock *blk = &zp->blocks[i];

		if (tags[i] == ZV_WARM) {
			committed += block_bytes(zp);
			continue;
		}
		if (!(tags[i] & ZV_LRU))
			continue;
		if ((blk->state == ZB_PARTIAL) != !!(tags[i] & ZV_PARTIAL)) {
			ret = err_invariant(
				"zpool: block %u has state %u but is %son its class's partial list", i,
				blk->state, tags[i] & ZV_PARTIAL ? "" : "not ");
			goto out_unlock;
		}
		ret = zv_block(zp, i, held, arg, &data, &live);
		if (ret)
			goto out_unlock;
		obj += (uint64_t)blk->nr_used * zp->cls[blk->cls].obj_size;
		committed += block_committed(zp, blk);
	}
	if (live != zp->nr_objs || data != zp->data_bytes || obj != zp->obj_bytes) {
		ret = err_invariant(
			"zpool: %u objects of %llu data bytes (%llu with rounding), counted as %llu "
			"of %llu (%llu)",
			live, (unsigned long long)data, (unsigned long long)obj,
			(unsigned long long)zp->nr_objs, (unsigned long long)zp->data_bytes,
			(unsigned long long)zp->obj_bytes);
		goto out_unlock;
	}
	if (committed != zp->committed || committed > zp->open_bytes || zp->max_bytes > zp->open_bytes) {
		ret = err_invariant(
			"zpool: committed %llu, blocks add up to %llu; capacity %llu, opened with "
			"%llu",
			(unsigned long long)zp->committed, (unsigned long long)committed,
			(unsigned long long)zp->max_bytes, (unsigned long long)zp->open_bytes);
		goto out_unlock;
	}
	ret = live;
out_unlock:
	pthread_mutex_unlock(&zp->lock);
	ufree(tags);
	return ret;
}
#endif

/* Test hook: flip one byte of the object @h holds (its compressed data). */
int zpool_corrupt(struct backend *b, uint64_t h)
{
	struct zpool *zp = b->priv;
	unsigned char *o;

	if (b->ops != &zpool_backend_ops || h > UINT32_MAX)
		return -EINVAL;
	o = obj_ptr(zp, (uint32_t)(h >> ZP_SLOT_BITS), h & ((1u << ZP_SLOT_BITS) - 1));
	o[ZP_HDR + hdr_len(o) - 1] ^= 0x5a; /* lz4 always ends in literals: still decodes */
	return 0;
}

/* Test hook: write @owner into the header of the object @h holds (what zpool_validate() must catch). */
int zpool_corrupt_owner(struct backend *b, uint64_t h, uint32_t owner)
{
	struct zpool *zp = b->priv;
	unsigned char *o;

	if (b->ops != &zpool_backend_ops || h > UINT32_MAX)
		return -EINVAL;
	o = obj_ptr(zp, (uint32_t)(h >> ZP_SLOT_BITS), h & ((1u << ZP_SLOT_BITS) - 1));
	hdr_set(o, owner, hdr_len(o));
	return 0;
}

/* At least a chunk: a pool that cannot hold one object of each class is of no use. */
static uint64_t zpool_set_capacity(struct backend *b, uint64_t bytes)
{
	struct zpool *zp = b->priv;
	uint64_t floor = zp->chunked ? ZP_CHUNK_SIZE : (uint64_t)PAGE_SIZE * zp->nr_classes;

	if (bytes > zp->open_bytes)
		bytes = zp->open_bytes;
	if (bytes < floor)
		bytes = floor < zp->open_bytes ? floor : zp->open_bytes;
	atomic_store(&zp->max_bytes, bytes);
	return bytes;
}

const struct uswap_backend_ops zpool_backend_ops = {
	.name = "zpool",
	.caps = BACKEND_LRU | BACKEND_COMPACT | BACKEND_PACKED,
	.open = zpool_open,
	.close = zpool_close,
	.store = zpool_store,
	.load = zpool_load,
	.release = zpool_release,
	.cold = zpool_cold,
	.sparse = zpool_sparse,
	.relocate = zpool_relocate,
	.stats = zpool_stats,
	.mem_bytes = zpool_mem_bytes,
	.peek = zpool_peek,
	.store_obj = zpool_store_obj,
	.set_capacity = zpool_set_capacity,
#if USWAP_DEBUG
	.validate = zpool_validate,
#endif
};
