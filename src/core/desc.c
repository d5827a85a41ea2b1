/*
 * desc.c - the descriptor slab and its run allocator.
 * Invariant: a descriptor is live iff its bit is set in its cluster's used map; nr_free counts the
 * clear bits; a cluster with free bits below hwm is on the partial list. Lock: t->lock guards the
 * maps and lists; each descriptor's content is guarded by its own bit lock.
 */
#include "core/desc.h"

#include <errno.h>
#include <sched.h>
#include <string.h>

#include "util/alloc.h"

#define NIL UINT32_MAX

int desc_table_init(struct desc_table *t, uint64_t capacity)
{
	memset(t, 0, sizeof(*t));
	if (capacity < DESC_CLUSTER)
		capacity = DESC_CLUSTER;
	if (capacity > (1ull << 32) - DESC_CLUSTER)
		capacity = (1ull << 32) - DESC_CLUSTER; /* ids are 32-bit descriptor numbers */
	t->nr_clusters = (uint32_t)((capacity + DESC_CLUSTER - 1) / DESC_CLUSTER);
	t->descs = ureserve((size_t)t->nr_clusters * DESC_CLUSTER * sizeof(struct swap_desc));
	t->clusters = ureserve((size_t)t->nr_clusters * sizeof(struct desc_cluster));
	if (!t->descs || !t->clusters) {
		desc_table_destroy(t);
		return -ENOMEM;
	}
	t->partial = NIL;
	t->cur = NIL;
	pthread_mutex_init(&t->lock, NULL);
	return 0;
}

void desc_table_destroy(struct desc_table *t)
{
	uunreserve(t->descs, (size_t)t->nr_clusters * DESC_CLUSTER * sizeof(struct swap_desc));
	uunreserve(t->clusters, (size_t)t->nr_clusters * sizeof(struct desc_cluster));
	if (t->descs && t->clusters)
		pthread_mutex_destroy(&t->lock);
	t->descs = NULL;
	t->clusters = NULL;
}

uint64_t desc_table_bytes(const struct desc_table *t)
{
	return (uint64_t)atomic_load_explicit(&t->hwm, memory_order_relaxed) *
	       (DESC_CLUSTER * sizeof(struct swap_desc) + sizeof(struct desc_cluster));
}

bool desc_id_valid(const struct desc_table *t, uint64_t id)
{
	return id > 0 && id < (uint64_t)atomic_load_explicit(&t->hwm, memory_order_acquire) * DESC_CLUSTER;
}

static void list_add(struct desc_table *t, uint32_t ci)
{
	struct desc_cluster *c = &t->clusters[ci];

	c->prev = NIL;
	c->next = t->partial;
	if (t->partial != NIL)
		t->clusters[t->partial].prev = ci;
	t->partial = ci;
	c->on_list = 1;
}

static void list_del(struct desc_table *t, uint32_t ci)
{
	struct desc_cluster *c = &t->clusters[ci];

	if (c->prev != NIL)
		t->clusters[c->prev].next = c->next;
	else
		t->partial = c->next;
	if (c->next != NIL)
		t->clusters[c->next].prev = c->prev;
	c->on_list = 0;
}

static bool bit_test(const uint64_t *map, unsigned b)
{
	return map[b / 64] >> (b % 64) & 1;
}

/* First bit at or after @from equal to @val, or DESC_CLUSTER. */
static unsigned bit_next(const uint64_t *map, unsigned from, bool val)
{
	while (from < DESC_CLUSTER) {
		uint64_t w = val ? map[from / 64] : ~map[from / 64];

		w &= ~0ull << (from % 64);
		if (w)
			return (from & ~63u) + (unsigned)__builtin_ctzll(w);
		from = (from & ~63u) + 64;
	}
	return DESC_CLUSTER;
}

static void bits_set(uint64_t *map, unsigned start, unsigned n, bool val)
{
	for (unsigned b = start; b < start + n; b++) {
		if (val)
			map[b / 64] |= 1ull << (b % 64);
		else
			map[b / 64] &= ~(1ull << (b % 64));
	}
}

/* Start of @n free descriptors in cluster @ci, or -1. */
static int cluster_fit(struct desc_table *t, uint32_t ci, unsigned n)
{
	struct desc_cluster *c = &t->clusters[ci];
	unsigned pos = 0;

	if (c->nr_free < n)
		return -1;
	while (pos + n <= DESC_CLUSTER) {
		unsigned z = bit_next(c->used, pos, false), o;

		if (z + n > DESC_CLUSTER)
			return -1;
		o = bit_next(c->used, z, true);
		if (o - z >= n)
			return (int)z;
		pos = o;
	}
	return -1;
}

static uint32_t take(struct desc_table *t, uint32_t ci, unsigned start, unsigned n)
{
	struct desc_cluster *c = &t->clusters[ci];

	bits_set(c->used, start, n, true);
	c->nr_free -= n;
	if (!c->nr_free && c->on_list)
		list_del(t, ci);
	t->cur = ci;
	t->nr_used += n;
	return ci * DESC_CLUSTER + start;
}

/* Partial clusters tried before a fresh one is opened: keeps allocation O(1) yet fills holes. */
#define DESC_SCAN_PARTIAL 8

uint32_t desc_alloc(struct desc_table *t, unsigned n)
{
	uint32_t id = 0, ci;
	int start;
	unsigned tried = 0;

	assert(n >= 1 && n <= DESC_CLUSTER);
	pthread_mutex_lock(&t->lock);
	if (t->cur != NIL && (start = cluster_fit(t, t->cur, n)) >= 0) {
		id = take(t, t->cur, (unsigned)start, n);
		goto out_unlock;
	}
	for (ci = t->partial; ci != NIL && tried < DESC_SCAN_PARTIAL; ci = t->clusters[ci].next, tried++) {
		if ((start = cluster_fit(t, ci, n)) >= 0) {
			id = take(t, ci, (unsigned)start, n);
			goto out_unlock;
		}
	}
	while (t->hwm < t->nr_clusters) {
		ci = t->hwm;
		memset(&t->clusters[ci], 0, sizeof(t->clusters[ci])); /* before lock-free readers see it */
		t->clusters[ci].nr_free = DESC_CLUSTER;
		atomic_store_explicit(&t->hwm, ci + 1, memory_order_release);
		list_add(t, ci);
		if (ci == 0) /* id 0 is never valid */
			take(t, 0, 0, 1);
		if ((start = cluster_fit(t, ci, n)) >= 0) {
			id = take(t, ci, (unsigned)start, n);
			goto out_unlock;
		}
	}
	for (ci = t->partial; ci != NIL; ci = t->clusters[ci].next) { /* slab full: the long way */
		if ((start = cluster_fit(t, ci, n)) >= 0) {
			id = take(t, ci, (unsigned)start, n);
			break;
		}
	}
out_unlock:
	pthread_mutex_unlock(&t->lock);
	return id;
}

void desc_free(struct desc_table *t, uint32_t id, unsigned n)
{
	uint32_t ci = id / DESC_CLUSTER;
	struct desc_cluster *c = &t->clusters[ci];

	pthread_mutex_lock(&t->lock);
	assert(bit_test(c->used, id % DESC_CLUSTER));
	bits_set(c->used, id % DESC_CLUSTER, n, false);
	c->nr_free += n;
	t->nr_used -= n;
	if (!c->on_list)
		list_add(t, ci);
	pthread_mutex_unlock(&t->lock);
}

uint32_t desc_lock(struct swap_desc *d)
{
	uint32_t m;

	for (unsigned spins = 0;; spins++) {
		m = atomic_load_explicit(&d->meta, memory_order_relaxed);
		if (!(m & DESC_LOCK) &&
		    atomic_compare_exchange_weak_explicit(&d->meta, &m, m | DESC_LOCK, memory_order_acquire,
							  memory_order_relaxed))
			return m;
		if (spins > 64)
			sched_yield();
	}
}

bool desc_trylock(struct swap_desc *d, uint32_t *meta)
{
	uint32_t m = atomic_load_explicit(&d->meta, memory_order_relaxed);

	if (m & DESC_LOCK)
		return false;
	if (!atomic_compare_exchange_strong_explicit(&d->meta, &m, m | DESC_LOCK, memory_order_acquire,
						     memory_order_relaxed))
		return false;
	*meta = m;
	return true;
}
