/*
 * alloc.c - counting allocator front end: malloc and mmap, counted per thread.
 */
#include "util/alloc.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static _Thread_local uint64_t nr_alloc;

uint64_t ualloc_count(void)
{
	return nr_alloc;
}

void *ualloc(size_t size)
{
	nr_alloc++;
	return malloc(size);
}

void *ualloc_zero(size_t size)
{
	nr_alloc++;
	return calloc(1, size);
}

void *ualloc_aligned(size_t align, size_t size)
{
	void *p;

	nr_alloc++;
	if (posix_memalign(&p, align, size))
		return NULL;
	return p;
}

void ufree(void *p)
{
	free(p);
}

void *ureserve(size_t size)
{
	void *p;

	nr_alloc++;
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	umadvise(p, size,
		 MADV_DONTDUMP); /* the layer's tables and buffers: not the program's, not in a core */
	return p;
}

void uunreserve(void *p, size_t size)
{
	if (p)
		munmap(p, size);
}

int umadvise(void *p, size_t size, int advice)
{
	return syscall(SYS_madvise, p, size, advice) ? -errno : 0;
}

void urelease_pages(void *p, size_t size)
{
	umadvise(p, size, MADV_DONTNEED);
}
