/*
 * same.c - same-filled tier: a page whose 8-byte words are all equal is kept as that word, inside its
 * descriptor (BACKEND_INLINE). Nothing to allocate, nothing to release.
 */
#include <errno.h>
#include <string.h>

#include "backend/backend.h"
#include "util/err.h"

static int same_open(struct backend *b, const char *args, const struct backend_env *env)
{
	(void)env;
	if (*args)
		return err_set(-EINVAL, "tier \"%s\": same takes no arguments (got \"%s\")", b->spec, args);
	return 0;
}

static bool page_word(const unsigned char *p, uint64_t *word)
{
	uint64_t first, w;

	memcpy(&first, p, 8);
	for (size_t i = 8; i < PAGE_SIZE; i += 8) {
		memcpy(&w, p + i, 8);
		if (w != first)
			return false;
	}
	*word = first;
	return true;
}

static ssize_t same_store(struct backend *b, const void *src, size_t npages, uint32_t owner,
			  uint64_t *handles)
{
	const unsigned char *p = src;
	size_t i;

	(void)b;
	(void)owner;
	for (i = 0; i < npages; i++)
		if (!page_word(p + i * PAGE_SIZE, &handles[i]))
			break;
	return (ssize_t)i;
}

static int same_load(struct backend *b, uint32_t owner, const uint64_t *handles, size_t npages, void *dst)
{
	unsigned char *d = dst;

	(void)b;
	(void)owner;
	for (size_t i = 0; i < npages; i++) {
		uint64_t w = handles[i];

		if (w == 0) {
			memset(d + i * PAGE_SIZE, 0, PAGE_SIZE);
			continue;
		}
		for (size_t off = 0; off < PAGE_SIZE; off += 8)
			memcpy(d + i * PAGE_SIZE + off, &w, 8);
	}
	return 0;
}

static void same_stats(struct backend *b, struct uswap_tier_stats *st)
{
	(void)b;
	(void)st; /* holds no bytes: the data is the handle */
}

const struct uswap_backend_ops same_backend_ops = {
	.name = "same",
	.caps = BACKEND_INLINE,
	.open = same_open,
	.store = same_store,
	.load = same_load,
	.stats = same_stats,
};
