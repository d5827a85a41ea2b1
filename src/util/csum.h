/*
 * csum.h - the page checksum kept in every swap descriptor.
 */
#ifndef USWAP_UTIL_CSUM_H
#define USWAP_UTIL_CSUM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * csum_page() - 32-bit checksum of @len bytes (a multiple of 32), computed in one pass that also tells
 * whether every 8-byte word is equal (*same set, *word the value). Four independent multiply-xor lanes
 * keep it near memory speed; a single changed bit always changes the lane it falls in.
 */
uint32_t csum_page(const void *p, size_t len, bool *same, uint64_t *word);

/* csum_buf() - the same checksum without the same-filled test. */
uint32_t csum_buf(const void *p, size_t len);

#endif
