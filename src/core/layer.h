/*
 * layer.h - struct uswap, shared by the files of core/ (and by tests through testhook.h).
 */
#ifndef USWAP_LAYER_H
#define USWAP_LAYER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "backend/backend.h"
#include "core/desc.h"
#include "uswap.h"

#define MOVE_BATCH 256 /* owners asked of a tier per writeback/compaction round */

struct uswap {
	struct desc_table descs;
	unsigned nr_tiers;
	struct backend tier[USWAP_MAX_TIERS];
	_Atomic uint64_t stores, loads, frees, store_failures, csum_errors, io_errors, folios;

	/* Movers (writeback, swapoff, compaction) take move_lock and use these buffers. */
	pthread_mutex_t move_lock;
	unsigned char *move_buf;  /* two pages: a page as its tier stores it, and the plain page */
	unsigned char *move_buf2; /* the same for swapoff's second mover */
	uint32_t *move_owners;    /* MOVE_BATCH */

	/* Background maintenance thread. */
	pthread_t bg;
	bool bg_running;
	pthread_mutex_t bg_lock;
	pthread_cond_t bg_cond;
	bool bg_stop;
	_Atomic bool bg_kicked;
};

/* config.c: parse @spec and open its tiers into u->tier[]. Return: 0 or -errno with err_set(). */
int config_open_tiers(struct uswap *u, const char *spec, unsigned nr_ctx, bool check_only);

/* move.c */
void move_kick(struct uswap *u);
int move_start(struct uswap *u);
void move_stop(struct uswap *u);
/*
 * move_page() - move page @id out of tier @from into the first tier that takes it among tiers
 * [@first, nr_tiers) other than @from. @wait: block on the descriptor lock instead of skipping.
 * @buf: two pages of the caller's (u->move_buf, or move_buf2 for swapoff's second mover).
 * Context: caller holds move_lock. Return: 1 moved; 0 skipped (busy or no longer there); -ENOSPC no
 * tier took it; -EIO / -EBADMSG the read failed (the page stays where it was).
 */
int move_page(struct uswap *u, uint32_t id, unsigned from, unsigned first, bool wait, unsigned char *buf);

#endif
