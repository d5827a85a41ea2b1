/*
 * file.h - what the file tier (file.c) shows of itself beyond the ops vector: its layout, for tests.
 */
#ifndef USWAP_BACKEND_FILE_H
#define USWAP_BACKEND_FILE_H

#include <stdint.h>

struct backend;

/* file.c: how the swap file is laid out now (tests and `uswap bench file`). */
struct file_layout {
	uint32_t clusters, clusters_in_use, clusters_free_backed, clusters_packed;
	uint64_t used_pages, used_sectors; /* plain pages; 512-byte sectors of packed objects */
	uint64_t split_stores;             /* folios that found no contiguous run and were split */
	uint64_t punched_clusters, punch_calls;
	uint64_t staged_pages,
		stage_writes; /* plain pages staged for write-behind; requests that wrote them */
	uint32_t staged_now;  /* pages in the stage now, freed ones included */
	int fd;
};
int file_layout(struct backend *b, struct file_layout *l);

#endif
