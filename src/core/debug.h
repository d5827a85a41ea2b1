/*
 * debug.h - the swap layer's invariant walker and the look-ups mm_validate() needs (internal).
 *
 * Compiled in DEBUG builds (make DEBUG=1: USWAP_DEBUG set); in other builds every call is a stub that
 * checks nothing and returns 0. Context of all of them: a quiescent layer, i.e. no uswap_store(),
 * uswap_load*() or uswap_free*() running (the background mover is held off by move_lock).
 */
#ifndef USWAP_CORE_DEBUG_H
#define USWAP_CORE_DEBUG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "uswap.h"

/*
 * uswap_debug_validate() - walk the descriptor table and check it against itself and the tiers: the
 * run allocator's maps, counts and partial list; every used descriptor in exactly one folio run whose
 * head names its length and which has a live page; every live page in an existing tier, noted in its
 * cluster's tier bits; folios and pages per tier as counted; and each tier's own validator (a
 * backend's validate op), whose pages must be exactly the layer's live pages of that tier, handle for
 * handle. Return: 0, or -EUCLEAN with the first broken invariant on stderr (and in uswap_errmsg()).
 */
int uswap_debug_validate(struct uswap *u);

/*
 * uswap_debug_page_live() - whether page @idx of swap id @id is a live page of a live folio (the
 * descriptor @id is a folio head of more than @idx pages, and descriptor @id + @idx is live).
 */
bool uswap_debug_page_live(struct uswap *u, uswap_id_t id, unsigned idx);

/* Live pages of the layer (live descriptors), and the bound of descriptor numbers in use (ids < it). */
uint64_t uswap_debug_live_pages(struct uswap *u);
uint64_t uswap_debug_id_limit(struct uswap *u);

#endif
