/*
 * backend.c - the registry of backends and the wrappers core calls: statistics sit here, once,
 * instead of in every backend. Faults are injected by the fault() tier (fault.c), not here.
 */
#include "backend/backend.h"
#include "util/clock.h"
#include "util/err.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* Store order does not matter here; the tier string decides it. New backends add one line. */
_Thread_local unsigned backend_stream;

static const struct uswap_backend_ops *const registry[] = {
	&same_backend_ops,  &zpool_backend_ops,         &file_backend_ops,
	&redis_backend_ops, &redis_cluster_backend_ops, &fault_backend_ops,
};

#define NR_BACKENDS (sizeof(registry) / sizeof(registry[0]))

const struct uswap_backend_ops *backend_lookup(const char *name, size_t len)
{
	for (size_t i = 0; i < NR_BACKENDS; i++)
		if (strlen(registry[i]->name) == len && !memcmp(registry[i]->name, name, len))
			return registry[i];
	return NULL;
}

const char *backend_names(void)
{
	static char names[128];

	if (!names[0]) {
		size_t off = 0;

		for (size_t i = 0; i < NR_BACKENDS && off < sizeof(names); i++)
			off += snprintf(names + off, sizeof(names) - off, "%s%s", i ? ", " : "",
					registry[i]->name);
	}
	return names;
}

int backend_open_spec(struct backend *b, const char *spec, size_t len, const struct backend_env *env)
{
	size_t namelen = strcspn(spec, ":(,");
	const struct uswap_backend_ops *ops;
	char args[sizeof(b->spec)];

	if (namelen > len)
		namelen = len;
	ops = backend_lookup(spec, namelen);
	if (!ops)
		return err_set(-EINVAL, "unknown tier \"%.*s\" in \"%.*s\" (known: %s)", (int)namelen, spec,
			       (int)len, spec, backend_names());
	if (len >= sizeof(b->spec))
		return err_set(-EINVAL, "tier \"%.*s...\" is too long", 32, spec);
	if (namelen < len && spec[namelen] == ',')
		return err_set(-EINVAL, "\"%.*s\" is more than one tier", (int)len, spec);
	if (namelen < len && spec[namelen] == '(' && !(ops->caps & BACKEND_WRAPS))
		return err_set(-EINVAL, "tier \"%.*s\" wraps no other tier (no '(' after %s)", (int)len, spec,
			       ops->name);
	if (ops->caps & BACKEND_WRAPS && (namelen == len || spec[namelen] != '('))
		return err_set(-EINVAL,
			       "tier \"%.*s\": %s wraps a tier, named in parentheses: %s(zpool:lz4)...",
			       (int)len, spec, ops->name, ops->name);
	snprintf(b->spec, sizeof(b->spec), "%.*s", (int)len, spec);
	/* "name:args" gives "args"; "name(TIER)..." gives "(TIER)..." */
	snprintf(args, sizeof(args), "%.*s", (int)(len - namelen - (namelen < len && spec[namelen] == ':')),
		 spec + namelen + (namelen < len && spec[namelen] == ':'));
	return backend_open(b, ops, args, env);
}

int backend_open(struct backend *b, const struct uswap_backend_ops *ops, const char *args,
		 const struct backend_env *env)
{
	b->ops = ops;
	return ops->open(b, args ? args : "", env);
}

void backend_close(struct backend *b)
{
	if (b->ops && b->ops->close)
		b->ops->close(b);
	b->ops = NULL;
}

ssize_t backend_store(struct backend *b, const void *src, size_t npages, uint32_t owner, uint64_t *handles)
{
	ssize_t n;

	if (atomic_load_explicit(&b->off, memory_order_relaxed))
		return 0;
	n = b->ops->store(b, src, npages, owner, handles);
	if (n > 0) {
		atomic_fetch_add_explicit(&b->stores, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&b->nr_pages, (uint64_t)n, memory_order_relaxed);
	} else if (n == 0 || n == -ENOSPC) {
		atomic_fetch_add_explicit(&b->rejects, 1, memory_order_relaxed);
	} else {
		atomic_fetch_add_explicit(&b->errors, 1, memory_order_relaxed);
	}
	return n;
}

/* A load's result, counted: an error, or one load. */
static int load_counted(struct backend *b, int ret)
{
	atomic_fetch_add_explicit(ret ? &b->errors : &b->loads, 1, memory_order_relaxed);
	return ret;
}

/* The time of a load, for the balance of a memory budget between a pool and the tiers below it. */
static int load_timed(struct backend *b, int ret, uint64_t t0)
{
	atomic_fetch_add_explicit(&b->load_ns, mono_ns() - t0, memory_order_relaxed);
	return load_counted(b, ret);
}

int backend_load(struct backend *b, uint32_t owner, const uint64_t *handles, size_t npages, void *dst)
{
	uint64_t t0 = mono_ns();

	return load_timed(b, b->ops->load(b, owner, handles, npages, dst), t0);
}

int backend_load_vec(struct backend *b, const uint32_t *owners, const uint64_t *handles, size_t npages,
		     void *dst)
{
	uint64_t t0 = mono_ns();
	int ret = 0;

	if (b->ops->load_vec)
		return load_timed(b, b->ops->load_vec(b, owners, handles, npages, dst), t0);
	for (size_t i = 0; i < npages && !ret; i++)
		ret = b->ops->load(b, owners[i], handles + i, 1, (char *)dst + i * PAGE_SIZE);
	return load_timed(b, ret, t0);
}

void backend_release(struct backend *b, uint32_t owner, uint64_t handle)
{
	if (b->ops->release)
		b->ops->release(b, owner, handle);
	atomic_fetch_sub_explicit(&b->nr_pages, 1, memory_order_relaxed);
}

int backend_flush(struct backend *b)
{
	return b->ops->flush ? b->ops->flush(b) : 0;
}

size_t backend_cold(struct backend *b, uint32_t *owners, size_t max)
{
	return backend_has(b, BACKEND_LRU) ? b->ops->cold(b, owners, max) : 0;
}

size_t backend_sparse(struct backend *b, uint32_t *owners, size_t max)
{
	return backend_has(b, BACKEND_COMPACT) ? b->ops->sparse(b, owners, max) : 0;
}

int backend_relocate(struct backend *b, uint32_t owner, uint64_t handle, uint64_t *new_handle)
{
	if (!backend_has(b, BACKEND_COMPACT))
		return -EOPNOTSUPP;
	return b->ops->relocate(b, owner, handle, new_handle);
}

void backend_stats(struct backend *b, struct uswap_tier_stats *st)
{
	memset(st, 0, sizeof(*st));
	snprintf(st->name, sizeof(st->name), "%s", b->ops->name);
	snprintf(st->spec, sizeof(st->spec), "%s", b->spec);
	if (b->ops->stats)
		b->ops->stats(b, st);
	st->pages = atomic_load(&b->nr_pages);
	st->stores = atomic_load(&b->stores);
	st->loads = atomic_load(&b->loads);
	st->rejects = atomic_load(&b->rejects);
	st->errors = atomic_load(&b->errors);
	st->writeback_in = atomic_load(&b->wb_in);
	st->writeback_out = atomic_load(&b->wb_out);
	st->off = atomic_load(&b->off);
	st->load_ns = atomic_load(&b->load_ns);
	st->in_memory = b->ops->mem_bytes != NULL;
}

uint64_t backend_set_capacity(struct backend *b, uint64_t bytes)
{
	return b->ops->set_capacity ? b->ops->set_capacity(b, bytes) : 0;
}

ssize_t backend_validate(struct backend *b, bool (*held)(void *arg, uint32_t owner, uint64_t handle),
			 void *arg)
{
	return b->ops->validate ? b->ops->validate(b, held, arg) : -EOPNOTSUPP;
}

ssize_t backend_peek(struct backend *b, uint32_t owner, uint64_t handle, void *obj, unsigned *fmt)
{
	ssize_t n;

	if (!backend_has(b, BACKEND_PACKED))
		return -EOPNOTSUPP;
	n = b->ops->peek(b, owner, handle, obj, fmt);
	if (n < 0)
		atomic_fetch_add_explicit(&b->errors, 1, memory_order_relaxed);
	return n;
}

int backend_store_obj(struct backend *b, const void *obj, size_t len, unsigned fmt, uint32_t owner,
		      uint64_t *handle)
{
	int ret;

	if (!backend_has(b, BACKEND_PACKED) || atomic_load_explicit(&b->off, memory_order_relaxed))
		return 0;
	ret = b->ops->store_obj(b, obj, len, fmt, owner, handle);
	if (ret > 0) {
		atomic_fetch_add_explicit(&b->stores, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&b->nr_pages, 1, memory_order_relaxed);
	} else if (ret == 0 || ret == -ENOSPC) {
		atomic_fetch_add_explicit(&b->rejects, 1, memory_order_relaxed);
	} else {
		atomic_fetch_add_explicit(&b->errors, 1, memory_order_relaxed);
	}
	return ret;
}

bool backend_next_arg(const char **args, char *key, size_t keylen, char *val, size_t vallen)
{
	const char *s = *args, *end, *eq;
	size_t klen;

	if (!*s)
		return false;
	end = strchr(s, ':');
	if (!end)
		end = s + strlen(s);
	eq = memchr(s, '=', (size_t)(end - s));
	klen = (size_t)((eq ? eq : end) - s);
	if (klen >= keylen)
		klen = keylen - 1;
	memcpy(key, s, klen);
	key[klen] = '\0';
	val[0] = '\0';
	if (eq) {
		size_t vlen = (size_t)(end - eq - 1);

		if (vlen >= vallen)
			vlen = vallen - 1;
		memcpy(val, eq + 1, vlen);
		val[vlen] = '\0';
	}
	*args = *end ? end + 1 : end;
	return true;
}
