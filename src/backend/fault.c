/*
 * fault.c - the fault() tier: wraps another tier and makes its calls fail, return late or hand back
 * altered bytes, at rates and from a seed given in the tier string, as SQLite injects I/O errors
 * through a VFS. "fault(zpool:lz4:max=64M):eio=1%:enospc=1%:etimedout=1%:delay=1%:flip=0.1%:seed=42".
 *
 * It goes through the same ops vector as every backend: core sees a tier with the wrapped one's
 * capabilities and optional calls (each instance has its own copy of the vector, so that a NULL
 * member of the wrapped tier stays NULL here), its handles and its statistics, plus the faults it
 * injected, by kind. Draws are a hash of the seed and a call counter: the same seed gives the same
 * sequence of draws (which call meets which draw depends on scheduling when several threads call).
 * Tests also arm a deterministic fault, the nth next store or load (backend_inject()).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/err.h"

enum fault_kind { FK_EIO, FK_ENOSPC, FK_ETIMEDOUT, FK_DELAY, FK_FLIP, FK_NR };
static const char *const kind_key[FK_NR] = {"eio", "enospc", "etimedout", "delay", "flip"};
static const int kind_err[FK_ETIMEDOUT + 1] = {-EIO, -ENOSPC, -ETIMEDOUT};

#define PPM              1000000u /* rates are parts per million of calls */
#define DELAY_MS_DEFAULT 10u      /* a delayed call sleeps up to this long */
#define DELAY_MS_MAX     10000u

/* A deterministic fault armed by a test: the nth next call fails with err (and every one after: sticky). */
struct fault_nth {
	_Atomic long nth; /* 1 = the next call; 0 = off; each call counts down */
	_Atomic int err;  /* atomic: a test may re-arm or disarm while loads run */
	_Atomic bool sticky;
};

struct fault_tier {
	struct uswap_backend_ops ops; /* this instance's vector: fault_backend_ops shaped like the inner's */
	struct backend inner;
	uint32_t ppm[FK_NR];
	uint32_t delay_ms;
	uint64_t seed;
	_Atomic uint64_t calls;
	_Atomic uint64_t injected[FK_NR];
	struct fault_nth store_nth, load_nth;
};

/* splitmix64's finalizer: every bit of @x reaches every bit of the result. */
static uint64_t mix(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* Field @i (0..2) of draw @r as a roll in [0, PPM). */
static uint32_t roll(uint64_t r, unsigned i)
{
	return (uint32_t)((((r >> (20 * i)) & 0xfffff) * PPM) >> 20);
}

static bool nth_fires(struct fault_nth *f)
{
	long n = atomic_load_explicit(&f->nth, memory_order_relaxed);

	while (n > 0) {
		if (n == 1 && atomic_load_explicit(&f->sticky, memory_order_relaxed))
			return true;
		if (atomic_compare_exchange_weak(&f->nth, &n, n - 1))
			return n == 1;
	}
	return false;
}

static int count_err(struct fault_tier *f, int err)
{
	enum fault_kind k = err == -ENOSPC ? FK_ENOSPC : err == -ETIMEDOUT ? FK_ETIMEDOUT : FK_EIO;

	atomic_fetch_add_explicit(&f->injected[k], 1, memory_order_relaxed);
	return err;
}

/*
 * The fault, if any, of one call: the armed nth fault of its side (@nth, NULL for neither), a delay,
 * an error. Return: 0 (go on; *draw set: a load decides its flipped bit by it) or -errno to return.
 */
static int fault_draw(struct fault_tier *f, struct fault_nth *nth, uint64_t *draw)
{
	uint64_t r = mix(f->seed + atomic_fetch_add_explicit(&f->calls, 1, memory_order_relaxed) *
					   0x9e3779b97f4a7c15ull);
	uint32_t e = roll(r, 0), lim = 0;

	if (nth && nth_fires(nth))
		return count_err(f, atomic_load_explicit(&nth->err, memory_order_relaxed));
	if (roll(r, 1) < f->ppm[FK_DELAY]) {
		uint64_t ns = mix(r) % ((uint64_t)f->delay_ms * 1000000 + 1);
		struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000),
				      .tv_nsec = (long)(ns % 1000000000)};

		atomic_fetch_add_explicit(&f->injected[FK_DELAY], 1, memory_order_relaxed);
		nanosleep(&ts, NULL);
	}
	for (unsigned k = FK_EIO; k <= FK_ETIMEDOUT; k++) {
		lim += f->ppm[k];
		if (e < lim)
			return count_err(f, kind_err[k]);
	}
	*draw = r;
	return 0;
}

/* After a load that succeeded: maybe flip one bit of the @len bytes at @buf (core's checksum must catch it). */
static void fault_flip(struct fault_tier *f, uint64_t r, void *buf, size_t len)
{
	uint64_t bit;

	if (!len || roll(r, 2) >= f->ppm[FK_FLIP])
		return;
	bit = mix(r ^ 0x5851f42d4c957f2dull) % (len * 8);
	((unsigned char *)buf)[bit / 8] ^= (unsigned char)(1u << (bit % 8));
	atomic_fetch_add_explicit(&f->injected[FK_FLIP], 1, memory_order_relaxed);
}

/* "1%", "0.1%", "0.0001", "100": a percentage (the sign optional), at most 4 decimals. Return: ppm or -1. */
static long parse_pct(const char *s)
{
	long ppm = 0, scale = 10000;
	size_t i = 0;

	if (!(s[i] >= '0' && s[i] <= '9'))
		return -1;
	for (; s[i] >= '0' && s[i] <= '9'; i++)
		if ((ppm = ppm * 10 + (s[i] - '0') * 10000) > (long)PPM)
			return -1;
	if (s[i] == '.') {
		for (i++; s[i] >= '0' && s[i] <= '9'; i++) {
			scale /= 10;
			if (!scale)
				return -1;
			ppm += (s[i] - '0') * scale;
		}
	}
	if (s[i] == '%')
		i++;
	return s[i] || ppm > (long)PPM ? -1 : ppm;
}

static bool parse_u64(const char *s, uint64_t *out)
{
	char *end;

	if (!(*s >= '0' && *s <= '9'))
		return false;
	errno = 0;
	*out = strtoull(s, &end, 0);
	return !errno && !*end;
}

/* The options after "(TIER)": ":key=value..." into @f. */
static int parse_opts(struct backend *b, const char *opts, struct fault_tier *f, bool *seeded)
{
	char key[16], val[32];
	uint32_t errs = 0;

	f->delay_ms = DELAY_MS_DEFAULT;
	if (*opts && *opts++ != ':')
		return err_set(-EINVAL, "tier \"%s\": ':' expected after the wrapped tier, got \"%s\"",
			       b->spec, opts - 1);
	while (backend_next_arg(&opts, key, sizeof(key), val, sizeof(val))) {
		unsigned k;
		uint64_t v;

		for (k = 0; k < FK_NR && strcmp(key, kind_key[k]); k++)
			;
		if (k < FK_NR) {
			long ppm = parse_pct(val);

			if (ppm < 0)
				return err_set(-EINVAL, "tier \"%s\": %s=\"%s\" is not a percentage 0..100",
					       b->spec, key, val);
			f->ppm[k] = (uint32_t)ppm;
		} else if (!strcmp(key, "delay_ms")) {
			if (!parse_u64(val, &v) || v > DELAY_MS_MAX)
				return err_set(-EINVAL, "tier \"%s\": delay_ms=\"%s\" is not 0..%u", b->spec,
					       val, DELAY_MS_MAX);
			f->delay_ms = (uint32_t)v;
		} else if (!strcmp(key, "seed")) {
			if (!parse_u64(val, &f->seed))
				return err_set(-EINVAL, "tier \"%s\": seed=\"%s\" is not a number", b->spec,
					       val);
			*seeded = true;
		} else {
			return err_set(
				-EINVAL,
				"tier \"%s\": unknown option \"%s\" (eio, enospc, etimedout, delay, flip, "
				"delay_ms, seed)",
				b->spec, key);
		}
	}
	for (unsigned k = FK_EIO; k <= FK_ETIMEDOUT; k++)
		errs += f->ppm[k];
	if (errs > PPM)
		return err_set(-EINVAL, "tier \"%s\": eio + enospc + etimedout exceed 100%%", b->spec);
	return 0;
}

static const char *seed_env = "USWAP_FAULT_SEED";

/* Without seed=, USWAP_FAULT_SEED; without either, one from the clock (the statistics show it). */
static int pick_seed(struct backend *b, struct fault_tier *f)
{
	const char *env = getenv(seed_env);

	if (env && *env) {
		if (!parse_u64(env, &f->seed))
			return err_set(-EINVAL, "tier \"%s\": %s=\"%s\" is not a number", b->spec, seed_env,
				       env);
		return 0;
	}
	f->seed = mix(wall_ns() ^ (uint64_t)getpid() << 32) % 1000000000;
	return 0;
}

static int fault_open(struct backend *b, const char *args, const struct backend_env *env);
static void fault_close(struct backend *b);
static ssize_t fault_store(struct backend *b, const void *src, size_t npages, uint32_t owner,
			   uint64_t *handles);
static int fault_load(struct backend *b, uint32_t owner, const uint64_t *handles, size_t npages, void *dst);
static int fault_load_vec(struct backend *b, const uint32_t *owners, const uint64_t *handles, size_t npages,
			  void *dst);
static void fault_release(struct backend *b, uint32_t owner, uint64_t handle);
static int fault_flush(struct backend *b);
static size_t fault_cold(struct backend *b, uint32_t *owners, size_t max);
static size_t fault_sparse(struct backend *b, uint32_t *owners, size_t max);
static int fault_relocate(struct backend *b, uint32_t owner, uint64_t handle, uint64_t *new_handle);
static void fault_stats(struct backend *b, struct uswap_tier_stats *st);
static uint64_t fault_mem_bytes(struct backend *b);
static ssize_t fault_peek(struct backend *b, uint32_t owner, uint64_t handle, void *obj, unsigned *fmt);
static int fault_store_obj(struct backend *b, const void *obj, size_t len, unsigned fmt, uint32_t owner,
			   uint64_t *handle);
static uint64_t fault_set_capacity(struct backend *b, uint64_t bytes);

const struct uswap_backend_ops fault_backend_ops = {
	.name = "fault",
	.caps = BACKEND_WRAPS,
	.open = fault_open,
	.close = fault_close,
	.store = fault_store,
	.load = fault_load,
	.load_vec = fault_load_vec,
	.release = fault_release,
	.flush = fault_flush,
	.cold = fault_cold,
	.sparse = fault_sparse,
	.relocate = fault_relocate,
	.stats = fault_stats,
	.mem_bytes = fault_mem_bytes,
	.peek = fault_peek,
	.store_obj = fault_store_obj,
	.set_capacity = fault_set_capacity,
};

/* This instance's vector: the wrapped tier's name and capabilities, and NULL where it has NULL. */
static void shape_ops(struct fault_tier *f)
{
	const struct uswap_backend_ops *in = f->inner.ops;
	struct uswap_backend_ops *o = &f->ops;

	*o = fault_backend_ops;
	o->name = in->name;
	o->caps = in->caps & ~(unsigned)(BACKEND_SEEDS | BACKEND_WRAPS);
#define KEEP_IF(member)                                                                                      \
	do {                                                                                                 \
		if (!in->member)                                                                             \
			o->member = NULL;                                                                    \
	} while (0)
	KEEP_IF(load_vec);
	KEEP_IF(release);
	KEEP_IF(flush);
	KEEP_IF(cold);
	KEEP_IF(sparse);
	KEEP_IF(relocate);
	KEEP_IF(stats);
	KEEP_IF(mem_bytes);
	KEEP_IF(peek);
	KEEP_IF(store_obj);
	KEEP_IF(set_capacity);
#undef KEEP_IF
}

/* @args: "(TIER)[:key=value...]". */
static int fault_open(struct backend *b, const char *args, const struct backend_env *env)
{
	struct fault_tier tmp, *f = &tmp;
	size_t close_at, depth = 0;
	bool seeded = false;
	int ret;

	for (close_at = 0; args[close_at]; close_at++) {
		if (args[close_at] == '(')
			depth++;
		else if (args[close_at] == ')' && !--depth)
			break;
	}
	if (args[0] != '(' || !args[close_at] || close_at == 1)
		return err_set(-EINVAL,
			       "tier \"%s\": name the wrapped tier in parentheses: fault(zpool:lz4)...",
			       b->spec);
	memset(&tmp, 0, sizeof(tmp));
	ret = parse_opts(b, args + close_at + 1, &tmp, &seeded);
	if (!ret && !seeded)
		ret = pick_seed(b, &tmp);
	if (ret)
		return ret;
	if (!env->check_only) {
		f = ualloc_aligned(64, sizeof(*f));
		if (!f)
			return -ENOMEM;
		memcpy(f, &tmp, sizeof(*f));
	}
	f->inner.index = b->index;
	ret = backend_open_spec(&f->inner, args + 1, close_at - 1, env);
	if (ret)
		goto out_free;
	if (f->ppm[FK_FLIP] && f->inner.ops->caps & BACKEND_INLINE) {
		ret = err_set(-EINVAL,
			      "tier \"%s\": flip= needs a tier whose pages carry a checksum (%s keeps "
			      "its pages in their descriptors)",
			      b->spec, f->inner.ops->name);
		goto out_close;
	}
	if (env->check_only)
		return 0; /* the wrapped tier opened nothing either */
	shape_ops(f);
	b->priv = f;
	b->ops = &f->ops;
	return 0;

out_close:
	if (!env->check_only)
		backend_close(&f->inner);
out_free:
	if (f != &tmp)
		ufree(f);
	return ret;
}

static void fault_close(struct backend *b)
{
	struct fault_tier *f = b->priv;

	backend_close(&f->inner);
	ufree(f);
	b->priv = NULL;
}

/* The wrapped tier refused a store for want of room: core reads that from this tier. */
static void pass_full(struct backend *b, struct fault_tier *f)
{
	if (atomic_exchange_explicit(&f->inner.full, false, memory_order_relaxed))
		atomic_store_explicit(&b->full, true, memory_order_relaxed);
}

static ssize_t fault_store(struct backend *b, const void *src, size_t npages, uint32_t owner,
			   uint64_t *handles)
{
	struct fault_tier *f = b->priv;
	uint64_t r = 0;
	int ret = fault_draw(f, &f->store_nth, &r);
	ssize_t n;

	if (ret)
		return ret;
	n = f->inner.ops->store(&f->inner, src, npages, owner, handles);
	pass_full(b, f);
	return n;
}

static int fault_load(struct backend *b, uint32_t owner, const uint64_t *handles, size_t npages, void *dst)
{
	struct fault_tier *f = b->priv;
	uint64_t r = 0;
	int ret = fault_draw(f, &f->load_nth, &r);

	if (!ret)
		ret = f->inner.ops->load(&f->inner, owner, handles, npages, dst);
	if (!ret)
		fault_flip(f, r, dst, npages * PAGE_SIZE);
	return ret;
}

static int fault_load_vec(struct backend *b, const uint32_t *owners, const uint64_t *handles, size_t npages,
			  void *dst)
{
	struct fault_tier *f = b->priv;
	uint64_t r = 0;
	int ret = fault_draw(f, &f->load_nth, &r);

	if (!ret)
		ret = f->inner.ops->load_vec(&f->inner, owners, handles, npages, dst);
	if (!ret)
		fault_flip(f, r, dst, npages * PAGE_SIZE);
	return ret;
}

static void fault_release(struct backend *b, uint32_t owner, uint64_t handle)
{
	struct fault_tier *f = b->priv;

	f->inner.ops->release(&f->inner, owner, handle);
}

static int fault_flush(struct backend *b)
{
	struct fault_tier *f = b->priv;

	return f->inner.ops->flush(&f->inner);
}

static size_t fault_cold(struct backend *b, uint32_t *owners, size_t max)
{
	struct fault_tier *f = b->priv;

	return f->inner.ops->cold(&f->inner, owners, max);
}

static size_t fault_sparse(struct backend *b, uint32_t *owners, size_t max)
{
	struct fault_tier *f = b->priv;

	return f->inner.ops->sparse(&f->inner, owners, max);
}

static int fault_relocate(struct backend *b, uint32_t owner, uint64_t handle, uint64_t *new_handle)
{
	struct fault_tier *f = b->priv;
	uint64_t r = 0;
	int ret = fault_draw(f, NULL, &r);

	return ret ? ret : f->inner.ops->relocate(&f->inner, owner, handle, new_handle);
}

static void fault_stats(struct backend *b, struct uswap_tier_stats *st)
{
	struct fault_tier *f = b->priv;

	/* a tier that reads its own page count (redis) finds the one core keeps on this tier */
	atomic_store(&f->inner.nr_pages, atomic_load(&b->nr_pages));
	f->inner.ops->stats(&f->inner, st);
	st->fault_seed = f->seed;
	st->faults_eio = atomic_load(&f->injected[FK_EIO]);
	st->faults_enospc = atomic_load(&f->injected[FK_ENOSPC]);
	st->faults_etimedout = atomic_load(&f->injected[FK_ETIMEDOUT]);
	st->faults_delay = atomic_load(&f->injected[FK_DELAY]);
	st->faults_flip = atomic_load(&f->injected[FK_FLIP]);
}

static uint64_t fault_mem_bytes(struct backend *b)
{
	struct fault_tier *f = b->priv;

	return f->inner.ops->mem_bytes(&f->inner);
}

static ssize_t fault_peek(struct backend *b, uint32_t owner, uint64_t handle, void *obj, unsigned *fmt)
{
	struct fault_tier *f = b->priv;
	uint64_t r = 0;
	int ret = fault_draw(f, &f->load_nth, &r);
	ssize_t n;

	if (ret)
		return ret;
	n = f->inner.ops->peek(&f->inner, owner, handle, obj, fmt);
	if (n > 0)
		fault_flip(f, r, obj, (size_t)n);
	return n;
}

static int fault_store_obj(struct backend *b, const void *obj, size_t len, unsigned fmt, uint32_t owner,
			   uint64_t *handle)
{
	struct fault_tier *f = b->priv;
	uint64_t r = 0;
	int ret = fault_draw(f, &f->store_nth, &r);

	if (ret)
		return ret;
	ret = f->inner.ops->store_obj(&f->inner, obj, len, fmt, owner, handle);
	pass_full(b, f);
	return ret;
}

static uint64_t fault_set_capacity(struct backend *b, uint64_t bytes)
{
	struct fault_tier *f = b->priv;

	return f->inner.ops->set_capacity(&f->inner, bytes);
}

static bool is_fault_tier(const struct backend *b)
{
	return b && b->ops && b->ops->open == fault_open;
}

int backend_inject(struct backend *b, bool on_store, long nth, int err, bool sticky)
{
	struct fault_tier *f;
	struct fault_nth *n;

	if (!is_fault_tier(b))
		return -EINVAL;
	f = b->priv;
	n = on_store ? &f->store_nth : &f->load_nth;
	atomic_store_explicit(&n->err, err, memory_order_relaxed);
	atomic_store_explicit(&n->sticky, sticky, memory_order_relaxed);
	atomic_store(&n->nth, nth);
	return 0;
}

struct backend *backend_unwrap(struct backend *b)
{
	while (is_fault_tier(b))
		b = &((struct fault_tier *)b->priv)->inner;
	return b;
}
