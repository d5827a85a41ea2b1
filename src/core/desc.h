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

#define DESC_LOCK          1u
#define DESC_LIVE          2u
#define DESC_HEAD          4u
#define DESC_TIER_SHIFT    3
#define DESC_TIER_MASK     (7u << DESC_TIER_SHIFT)
#define DESC_NPAGES_SHIFT  6
#define DESC_NPAGES_MASK   (1023u << DESC_NPAGES_SHIFT)
#define DESC_VERSION_SHIFT 16

#define DESC_CLUSTER 512u

struct desc_cluster {
	uint64_t used[DESC_CLUSTER / 64];
	uint32_t prev, next; /* partial-cluster list */
	uint16_t nr_free;
	uint8_t on_list;
	_Atomic uint8_t
		tiers; /* bit t: a page of tier t may be here (set after publish, cleared by swapoff) */
};

struct desc_table {
	struct swap_desc *descs; /* capacity entries, reserved; touched as clusters come into use */
	struct desc_cluster *clusters;
	uint32_t nr_clusters; /* capacity / DESC_CLUSTER */
	_Atomic uint32_t hwm; /* clusters ever used; grows under lock, read without it */
	uint32_t partial;     /* head of clusters with free descriptors, in use before */
	uint32_t cur;         /* cluster the last allocation came from */
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

/*
 * desc_note_tier() - record that descriptor @id now holds a page of tier @tier, after its meta is
 * published: swapoff of a tier scans only the clusters whose bit is set, so its cost follows what
 * the tier holds (in 512-descriptor clusters), not everything swapped.
 */
static inline void desc_note_tier(struct desc_table *t, uint32_t id, unsigned tier)
{
	atomic_fetch_or_explicit(&t->clusters[id / DESC_CLUSTER].tiers, (uint8_t)(1u << tier),
				 memory_order_release);
}

/* Clusters ever used (the scan range of swapoff), and whether cluster @ci may hold pages of @tier. */
static inline uint32_t desc_nr_clusters(struct desc_table *t)
{
	return atomic_load_explicit(&t->hwm, memory_order_acquire);
}

static inline bool desc_tier_bit(struct desc_table *t, uint32_t ci, unsigned tier)
{
	return atomic_load_explicit(&t->clusters[ci].tiers, memory_order_acquire) & (1u << tier);
}

/*
 * The backend's 64-bit handle of a page: for a BACKEND_INLINE tier it is (handle << 32 | csum), else
 * the 32-bit handle. Written under the descriptor lock; swapoff reads handles without it to sort a
 * tier's pages (a stale one only costs order), hence the relaxed atomic accesses.
 */
static inline uint64_t desc_handle(const struct swap_desc *d, bool inline_tier)
{
	uint32_t h = __atomic_load_n(&d->handle, __ATOMIC_RELAXED);

	return inline_tier ? (uint64_t)h << 32 | d->csum : h;
}

static inline void desc_set_handle(struct swap_desc *d, bool inline_tier, uint64_t h, uint32_t csum)
{
	if (inline_tier) {
		d->csum = (uint32_t)h;
		__atomic_store_n(&d->handle, (uint32_t)(h >> 32), __ATOMIC_RELAXED);
	} else {
		assert(h <= UINT32_MAX);
		d->csum = csum;
		__atomic_store_n(&d->handle, (uint32_t)h, __ATOMIC_RELAXED);
	}
}

/* desc_take_tier_bit() - clear and return whether cluster @ci may hold pages of @tier (swapoff). */
static inline bool desc_take_tier_bit(struct desc_table *t, uint32_t ci, unsigned tier)
{
	uint8_t bit = (uint8_t)(1u << tier);

	return atomic_fetch_and_explicit(&t->clusters[ci].tiers, (uint8_t)~bit, memory_order_acq_rel) & bit;
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
