/*
 * testhook.h - internals the tests reach (linked from libuswap.a; not exported by libuswap.so).
 */
#ifndef USWAP_TESTHOOK_H
#define USWAP_TESTHOOK_H

#include "core/layer.h"

/* zpool.c: flip a byte of the object behind @h. */
int zpool_corrupt(struct backend *b, uint64_t h);
/* zpool.c: write @owner into the header of the object behind @h (validator tests). */
int zpool_corrupt_owner(struct backend *b, uint64_t h, uint32_t owner);

static inline struct backend *testhook_tier(struct uswap *u, unsigned t)
{
	return t < u->nr_tiers ? &u->tier[t] : NULL;
}

/* Tier and handle of page @j of folio @id (for corruption tests). */
static inline int testhook_page(struct uswap *u, uswap_id_t id, unsigned j, unsigned *tier, uint64_t *h)
{
	struct swap_desc *d = desc_get(&u->descs, (uint32_t)(id + j));
	uint32_t m = atomic_load(&d->meta);

	if (!(m & DESC_LIVE))
		return -1;
	*tier = desc_tier(m);
	*h = d->handle;
	return 0;
}

#endif
