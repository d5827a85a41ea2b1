/*
 * file.c - swap-file tier: 4 KiB slots in an O_DIRECT file (unnamed O_TMPFILE by default).
 * First increment: synchronous pread/pwrite under one mutex and a first-fit slot bitmap that keeps
 * a folio's pages contiguous. io_uring batching, clusters and PUNCH_HOLE are still to come.
 * Invariant: a set bit in map names a slot holding one live page. Handles are slot numbers.
 */

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "../util/alloc.h"
#include "../util/err.h"



#define FILE_BOUNCE_PAGES 512 /* one largest folio */

struct file_tier {
	int fd;
	uint32_t nr_slots, nr_used, hint;
	uint64_t *map;
	void *bounce; /* aligned: callers' buffers may not be, O_DIRECT needs it */
	pthread_mutex_t lock;
};

static bool slot_used(struct file_tier *f, uint32_t s)
{
	return f->map[s / 64] >> (s % 64) & 1;
}

static void slot_set(struct file_tier *f, uint32_t s, bool on)
{
	if (on)
		f->map[s / 64] |= 1ULL << (s % 64);
	else
		f->map[s / 64] &= ~(1ULL << (s % 64));
}

static int file_open(struct backend *b, const char *args, const struct backend_env *env)
{
	char key[32], val[256], path[256] = "";
	uint64_t size = 4ULL << 30;
	struct file_tier *f;
	const char *dir;
	(void)env;

	while (backend_next_arg(&args, key, sizeof(key), val, sizeof(val))) {
		if (!strcmp(key, "size") && val[0]) {
			if (uswap_parse_size(val, 0, &size) || size < PAGE_SIZE)
				return err_set(-EINVAL, "file: bad size '%s'", val);
		} else if (key[0] == '/' && !val[0]) {
			snprintf(path, sizeof(path), "%s", key);
		} else {
			return err_set(-EINVAL, "file: unknown option '%s'", key);
		}
	}
	f = ualloc_zero(sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->nr_slots = (uint32_t)(size / PAGE_SIZE);
	f->map = ualloc_zero((f->nr_slots + 63) / 64 * 8);
	f->bounce = ualloc_aligned(PAGE_SIZE, FILE_BOUNCE_PAGES * PAGE_SIZE);
	if (!f->map || !f->bounce)
		goto out_free;
	if (path[0]) {
		f->fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0600);
	} else {
		dir = getenv("TMPDIR");
		if (!dir || !dir[0])
			dir = "/var/tmp";
		f->fd = open(dir, O_RDWR | O_TMPFILE | O_DIRECT | O_CLOEXEC, 0600);
	}
	if (f->fd < 0) {
		int e = -errno;

		ufree(f->map);
		ufree(f->bounce);
		ufree(f);
		return err_set(e, "file: cannot open '%s': %s", path[0] ? path : "tmpfile", strerror(-e));
	}
	pthread_mutex_init(&f->lock, NULL);
	b->priv = f;
	return 0;
out_free:
	ufree(f->map);
	ufree(f->bounce);
	ufree(f);
	return -ENOMEM;
}

static void file_close(struct backend *b)
{
	struct file_tier *f = b->priv;

	close(f->fd);
	pthread_mutex_destroy(&f->lock);
	ufree(f->map);
	ufree(f->bounce);
	ufree(f);
	b->priv = NULL;
}

/* First run of @n free slots from the hint, wrapping once; UINT32_MAX if none. Lock held. */
static uint32_t find_run(struct file_tier *f, uint32_t n)
{
	for (uint32_t pass = 0, s = f->hint; pass < 2; pass++, s = 0) {
		uint32_t run = 0;

		for (; s < f->nr_slots; s++) {
			run = slot_used(f, s) ? 0 : run + 1;
			if (run == n)
				return s + 1 - n;
		}
	}
	return UINT32_MAX;
}

static ssize_t file_store(struct backend *b, const void *src, size_t npages, uint32_t owner, uint64_t *handles)
{
	struct file_tier *f = b->priv;
	uint32_t s;
	ssize_t ret;
	(void)owner;

	if (npages > FILE_BOUNCE_PAGES)
		npages = FILE_BOUNCE_PAGES;
	pthread_mutex_lock(&f->lock);
	s = find_run(f, (uint32_t)npages);
	if (s == UINT32_MAX) {
		pthread_mutex_unlock(&f->lock);
		return -ENOSPC;
	}
	memcpy(f->bounce, src, npages * PAGE_SIZE);
	ret = pwrite(f->fd, f->bounce, npages * PAGE_SIZE, (off_t)s * PAGE_SIZE);
	if (ret != (ssize_t)(npages * PAGE_SIZE)) {
		pthread_mutex_unlock(&f->lock);
		return ret < 0 && errno == ENOSPC ? -ENOSPC : -EIO;
	}
	for (size_t i = 0; i < npages; i++) {
		slot_set(f, s + (uint32_t)i, true);
		handles[i] = s + i;
	}
	f->nr_used += (uint32_t)npages;
	f->hint = s + (uint32_t)npages;
	pthread_mutex_unlock(&f->lock);
	return (ssize_t)npages;
}

static int file_load(struct backend *b, uint32_t owner, const uint64_t *handles, size_t npages, void *dst)
{
	struct file_tier *f = b->priv;
	int ret = 0;
	(void)owner;

	pthread_mutex_lock(&f->lock);
	for (size_t i = 0; i < npages;) {
		size_t n = 1;

		while (i + n < npages && n < FILE_BOUNCE_PAGES && handles[i + n] == handles[i] + n)
			n++;
		if (pread(f->fd, f->bounce, n * PAGE_SIZE, (off_t)handles[i] * PAGE_SIZE) !=
		    (ssize_t)(n * PAGE_SIZE)) {
			ret = -EIO;
			break;
		}
		memcpy((char *)dst + i * PAGE_SIZE, f->bounce, n * PAGE_SIZE);
		i += n;
	}
	pthread_mutex_unlock(&f->lock);
	return ret;
}

static void file_release(struct backend *b, uint32_t owner, uint64_t handle)
{
	struct file_tier *f = b->priv;
	(void)owner;

	pthread_mutex_lock(&f->lock);
	slot_set(f, (uint32_t)handle, false);
	f->nr_used--;
	pthread_mutex_unlock(&f->lock);
}

static void file_stats(struct backend *b, struct uswap_tier_stats *st)
{
	struct file_tier *f = b->priv;

	pthread_mutex_lock(&f->lock);
	st->pages = f->nr_used;
	st->data_bytes = (uint64_t)f->nr_used * PAGE_SIZE;
	st->used_bytes = st->data_bytes;
	st->capacity_bytes = (uint64_t)f->nr_slots * PAGE_SIZE;
	st->meta_bytes = (f->nr_slots + 63) / 64 * 8;
	pthread_mutex_unlock(&f->lock);
}

const struct uswap_backend_ops file_backend_ops = {
	.name = "file",
	.caps = BACKEND_DURABLE,
	.open = file_open,
	.close = file_close,
	.store = file_store,
	.load = file_load,
	.release = file_release,
	.stats = file_stats,
};
