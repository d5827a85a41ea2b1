/*
 * alloc.h - every allocation of the library goes through here so that it can be counted per thread
 * (tests prove that the reclaim path allocates nothing) and the big regions come from mmap.
 */
#ifndef USWAP_UTIL_ALLOC_H
#define USWAP_UTIL_ALLOC_H

#include <stddef.h>
#include <stdint.h>

void *ualloc(size_t size);
void *ualloc_zero(size_t size);
void *ualloc_aligned(size_t align, size_t size);
void ufree(void *p);

/*
 * Big reservations: anonymous, private, MAP_NORESERVE; pages cost memory only once touched.
 * ureserve() returns NULL on failure. urelease_pages() gives touched pages back (MADV_DONTNEED).
 */
void *ureserve(size_t size);
void uunreserve(void *p, size_t size);
void urelease_pages(void *p, size_t size);

/*
 * madvise() as the system call, never through a symbol a preloaded program may interpose (under
 * `uswap run` the preload library's madvise() reports discards to the instance). Return: 0 or -errno.
 */
int umadvise(void *p, size_t size, int advice);

/* Allocation calls made by this thread, through ualloc*() and ureserve(). */
uint64_t ualloc_count(void);

#endif
