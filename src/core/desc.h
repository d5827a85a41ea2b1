/*
 * desc.h - swap descriptors: one per swapped page, 12 bytes, in a slab reserved at create time.
 *
 * The swap id of a folio is the number of its first page's descriptor; the folio's pages have the
 * descriptors that follow, so the slab is also the index: id -> descriptor is one multiplication.
 * Descriptors of a folio are allocated as one contiguous run by a cluster allocator (512 per cluster,
 * a bitmap each); a freed run goes back to its cluster.
 */
#ifndef USWAP_DESC_H
#define USWAP_DESC_H

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/*
 * meta: bit 0 lock, bit 1 live, bit 2 folio head, bits 3-5 tier, bits 6-15 folio pages - 1 (head
 * only), bits 16-31 version (bumped on each store and move; remote tiers bind data to it).
 * For a BACKEND_INLINE tier, (handle << 32 | csum) is the 64-bit handle itself.
 */
struct swap_desc {
	_Atomic uint32_t meta;
	uint32_t csum;   /* checksum of the page's 4 KiB */
	uint32_t handle; /* the backend's name for the page */
};
static_assert(sizeof(struct swap_desc) == 12, "descriptor budget: 12 of the 16 bytes a page may cost");

#define DESC_LOCK 1u
#define DESC_LIVE 2u
#define DESC_HEAD 4u
#define DESC_TIER_SHIFT 3
#define DESC_TIER_MASK (7u << DESC_TIER_SHIFT)
#define DESC_NPAGES_SHIFT 6
#define DESC_NPAGES_MASK (1023u << DESC_NPAGES_SHIFT)
#define DESC_VERSION_SHIFT 16

#define DESC_CLUSTER 512u

struct desc_cluster {
	uint64_t used[DESC_CLUSTER / 64];
	uint32_t prev, next; /* partial-cluster list */
	uint16_t nr_free;
	uint8_t on_list;
};

struct desc_table {
	struct swap_desc *descs; /* capacity entries, reserved; touched as clusters come into use */
	struct desc_cluster *clusters;
	uint32_t nr_clusters;     /* capacity / DESC_CLUSTER */
	_Atomic uint32_t hwm;     /* clusters ever used; grows under lock, read without it */
	uint32_t partial;         /* head of clusters with free descriptors, in use before */
	uint32_t cur;             /* cluster the last allocation came from */
	uint64_t nr_used;
	pthread_mutex_t lock;
};

int desc_table_init(struct desc_table *t, uint64_t capacity);
void desc_table_destroy(struct desc_table *t);
/* Context: reclaim path; no allocation. Return: first id of a run of @n, or 0 when the slab is full. */
uint32_t desc_alloc(struct desc_table *t, unsigned n);
void desc_free(struct desc_table *t, uint32_t id, unsigned n);
/* Bytes of the slab and its allocator that have been touched. */
uint64_t desc_table_bytes(const struct desc_table *t);
bool desc_id_valid(const struct desc_table *t, uint64_t id);

static inline struct swap_desc *desc_get(struct desc_table *t, uint32_t id)
{
	return &t->descs[id];
}

static inline unsigned desc_tier(uint32_t meta)
{
	return (meta & DESC_TIER_MASK) >> DESC_TIER_SHIFT;
}

static inline unsigned desc_npages(uint32_t meta)
{
	return ((meta & DESC_NPAGES_MASK) >> DESC_NPAGES_SHIFT) + 1;
}

static inline uint16_t desc_version(uint32_t meta)
{
	return (uint16_t)(meta >> DESC_VERSION_SHIFT);
}

/* Bit lock on one descriptor. desc_lock() returns meta as it was (lock bit clear). */
uint32_t desc_lock(struct swap_desc *d);
bool desc_trylock(struct swap_desc *d, uint32_t *meta);
static inline void desc_unlock(struct swap_desc *d, uint32_t meta)
{
	atomic_store_explicit(&d->meta, meta & ~DESC_LOCK, memory_order_release);
}

#endif
