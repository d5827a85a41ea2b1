/*
 * debug.c - the swap layer's invariant walker (DEBUG builds): the descriptor table against itself,
 * against the tiers' page counts, and against what each tier says it holds (mimalloc's
 * mi_assert_expensive walkers, SQLite's integrity checks). Other builds get stubs that return 0.
 */
#include "core/debug.h"

#include <errno.h>

#include "core/layer.h"
#include "util/err.h"

#if USWAP_DEBUG

static bool used_bit(const struct desc_cluster *c, unsigned b)
{
	return c->used[b / 64] >> (b % 64) & 1;
}

static uint32_t desc_meta(struct uswap *u, uint32_t id)
{
	return atomic_load_explicit(&desc_get(&u->descs, id)->meta, memory_order_acquire);
}

/*
 * The run allocator: per cluster, nr_free counts the clear bits of its map and it is on the partial
 * list iff it has one; the list is well linked; nr_used counts the set bits. Context: t->lock held.
 */
static int validate_alloc(struct desc_table *t, uint32_t hwm)
{
	uint64_t used = 0;
	uint32_t on_list = 0, listed = 0, prev = UINT32_MAX;

	if (hwm > t->nr_clusters)
		return err_invariant("descriptors: %u clusters in use of %u", hwm, t->nr_clusters);
	if (hwm && !used_bit(&t->clusters[0], 0))
		return err_invariant("descriptors: id 0 (never valid) is not kept taken");
	for (uint32_t ci = 0; ci < hwm; ci++) {
		const struct desc_cluster *c = &t->clusters[ci];
		unsigned pop = 0;

		for (unsigned w = 0; w < DESC_CLUSTER / 64; w++)
			pop += (unsigned)__builtin_popcountll(c->used[w]);
		if (c->nr_free != DESC_CLUSTER - pop || c->on_list != (c->nr_free > 0))
			return err_invariant(
				"descriptors: cluster %u has %u free in its map, nr_free %u, on the "
				"partial list: %u",
				ci, DESC_CLUSTER - pop, c->nr_free, c->on_list);
		on_list += c->on_list;
		used += pop;
	}
	if (used != t->nr_used)
		return err_invariant("descriptors: %llu in use in the maps, nr_used %llu",
				     (unsigned long long)used, (unsigned long long)t->nr_used);
	for (uint32_t ci = t->partial; ci != UINT32_MAX; prev = ci, ci = t->clusters[ci].next) {
		if (ci >= hwm || !t->clusters[ci].on_list || t->clusters[ci].prev != prev || ++listed > hwm)
			return err_invariant("descriptors: partial list: cluster %u (prev %u, expected %u; "
					     "on_list %u; %u clusters in use)",
					     ci, ci < hwm ? t->clusters[ci].prev : 0, prev,
					     ci < hwm ? t->clusters[ci].on_list : 0, hwm);
	}
	if (listed != on_list)
		return err_invariant("descriptors: %u clusters on the partial list, %u marked so", listed,
				     on_list);
	if (t->cur != UINT32_MAX && t->cur >= hwm)
		return err_invariant("descriptors: current cluster %u of %u in use", t->cur, hwm);
	return 0;
}

/*
 * The runs: every used descriptor belongs to exactly one folio, a run of one cluster that begins at
 * a head naming its length and has a live page; a descriptor outside every run is neither live nor a
 * head; no descriptor is locked; every live page is in a tier of the stack, noted in its cluster's
 * tier bits. Counts live pages per tier and folios. Context: t->lock held.
 */
static int validate_runs(struct uswap *u, uint32_t hwm, uint64_t *per_tier, uint64_t *folios)
{
	struct desc_table *t = &u->descs;

	for (uint32_t ci = 0; ci < hwm; ci++) {
		struct desc_cluster *c = &t->clusters[ci];
		uint8_t tiers = atomic_load(&c->tiers);
		unsigned b = ci ? 0 : 1; /* id 0 is taken for good, never a folio */

		while (b < DESC_CLUSTER) {
			uint32_t id = ci * DESC_CLUSTER + b, m = desc_meta(u, id), n, live = 0;

			if (m & DESC_LOCK)
				return err_invariant("descriptor %u is locked at a quiescent point", id);
			if (!used_bit(c, b)) {
				if (m & (DESC_LIVE | DESC_HEAD))
					return err_invariant(
						"descriptor %u is free in its cluster's map but %s", id,
						m & DESC_HEAD ? "a folio head" : "live");
				b++;
				continue;
			}
			if (!(m & DESC_HEAD))
				return err_invariant(
					"descriptor %u is in use but in no folio (no head before it)", id);
			n = desc_npages(m);
			if (b + n > DESC_CLUSTER)
				return err_invariant("folio %u of %u pages crosses its cluster's end", id, n);
			for (uint32_t j = 0; j < n; j++) {
				uint32_t mj = desc_meta(u, id + j);
				unsigned tier = desc_tier(mj);

				if (!used_bit(c, b + j) || (j && (mj & DESC_HEAD)) || (mj & DESC_LOCK))
					return err_invariant("folio %u: page %u (descriptor %u) is %s", id, j,
							     id + j,
							     !used_bit(c, b + j) ? "free in the map"
							     : mj & DESC_LOCK    ? "locked"
										 : "another folio's head");
				if (!(mj & DESC_LIVE))
					continue;
				if (tier >= u->nr_tiers)
					return err_invariant("folio %u: page %u is in tier %u of %u", id, j,
							     tier, u->nr_tiers);
				if (!(tiers & 1u << tier))
					return err_invariant(
						"folio %u: page %u is in tier %u, which cluster %u does "
						"not note (swapoff would miss it)",
						id, j, tier, ci);
				per_tier[tier]++;
				live++;
			}
			if (!live)
				return err_invariant(
					"folio %u of %u pages has no live page but was not freed", id, n);
			++*folios;
			b += n;
		}
	}
	return 0;
}

struct held_ctx {
	struct uswap *u;
	unsigned tier;
};

/* A tier's validator names a page: the layer must have @owner live in that tier, with @handle. */
static bool desc_held(void *arg, uint32_t owner, uint64_t handle)
{
	struct held_ctx *c = arg;
	struct swap_desc *d;
	uint32_t m;

	if (!desc_id_valid(&c->u->descs, owner))
		return false;
	d = desc_get(&c->u->descs, owner);
	m = atomic_load_explicit(&d->meta, memory_order_acquire);
	return (m & DESC_LIVE) && desc_tier(m) == c->tier &&
	       desc_handle(d, backend_has(&c->u->tier[c->tier], BACKEND_INLINE)) == handle;
}

/*
 * Context: quiescent (see debug.h). move_lock keeps the background mover out; the table lock is
 * held over the walk of the descriptors, each tier takes its own lock in its validator.
 */
int uswap_debug_validate(struct uswap *u)
{
	uint64_t per_tier[USWAP_MAX_TIERS] = {0}, folios = 0;
	uint32_t hwm;
	int ret;

	pthread_mutex_lock(&u->move_lock);
	pthread_mutex_lock(&u->descs.lock);
	hwm = atomic_load(&u->descs.hwm);
	ret = validate_alloc(&u->descs, hwm);
	if (!ret)
		ret = validate_runs(u, hwm, per_tier, &folios);
	pthread_mutex_unlock(&u->descs.lock);
	if (ret)
		goto out_unlock;
	if (folios != atomic_load(&u->folios)) {
		ret = err_invariant("%llu folios in the descriptor table, %llu counted",
				    (unsigned long long)folios, (unsigned long long)atomic_load(&u->folios));
		goto out_unlock;
	}
	for (unsigned t = 0; t < u->nr_tiers; t++) {
		struct backend *b = &u->tier[t];
		struct held_ctx ctx = {u, t};
		ssize_t n;

		if (per_tier[t] != atomic_load(&b->nr_pages)) {
			ret = err_invariant("tier %u (%s): %llu live descriptors, nr_pages %llu", t, b->spec,
					    (unsigned long long)per_tier[t],
					    (unsigned long long)atomic_load(&b->nr_pages));
			goto out_unlock;
		}
		n = backend_validate(b, desc_held, &ctx);
		if (n == -EOPNOTSUPP)
			continue;
		if (n < 0) {
			ret = (int)n;
			goto out_unlock;
		}
		/* each of its pages is a distinct live descriptor of the tier: equal counts, the same pages */
		if ((uint64_t)n != per_tier[t]) {
			ret = err_invariant("tier %u (%s) holds %zd pages, the layer has %llu there", t,
					    b->spec, n, (unsigned long long)per_tier[t]);
			goto out_unlock;
		}
	}
out_unlock:
	pthread_mutex_unlock(&u->move_lock);
	return ret;
}

bool uswap_debug_page_live(struct uswap *u, uswap_id_t id, unsigned idx)
{
	uint32_t m;

	if (!desc_id_valid(&u->descs, id) || !desc_id_valid(&u->descs, id + idx))
		return false;
	m = desc_meta(u, (uint32_t)id);
	return (m & DESC_HEAD) && idx < desc_npages(m) && (desc_meta(u, (uint32_t)(id + idx)) & DESC_LIVE);
}

uint64_t uswap_debug_live_pages(struct uswap *u)
{
	uint64_t n = 0;

	for (uint64_t id = 1; desc_id_valid(&u->descs, id); id++)
		n += !!(desc_meta(u, (uint32_t)id) & DESC_LIVE);
	return n;
}

uint64_t uswap_debug_id_limit(struct uswap *u)
{
	return (uint64_t)atomic_load(&u->descs.hwm) * DESC_CLUSTER;
}

#else /* !USWAP_DEBUG: nothing is checked */

int uswap_debug_validate(struct uswap *u)
{
	(void)u;
	return 0;
}

bool uswap_debug_page_live(struct uswap *u, uswap_id_t id, unsigned idx)
{
	(void)u;
	(void)id;
	(void)idx;
	return true;
}

uint64_t uswap_debug_live_pages(struct uswap *u)
{
	(void)u;
	return 0;
}

uint64_t uswap_debug_id_limit(struct uswap *u)
{
	(void)u;
	return 0;
}

#endif
