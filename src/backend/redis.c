/*
 * redis.c - remote tier: sealed pages in one Redis server, e.g. "redis://127.0.0.1:6379:prefix=us:".
 *
 * hiredis allocates per command and reply, so callers never touch it: store()/load() seal/open pages in
 * pre-allocated buffers and hand one batch to this tier's I/O thread, which pipelines the commands and
 * wakes the caller when Redis has acknowledged every one. Batches run one at a time (io.lock).
 * A page counts as stored only once SET (and WAIT, with replicas=N) answered. Keys: prefix + handle
 * (a per-tier sequence); the seal binds (owner, handle), so a stale or foreign value fails to open.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis.h>

#include "backend.h"
#include "seal.h"
#include "util/alloc.h"
#include "util/err.h"

#define REDIS_BATCH 64    /* pages per round trip */
#define REDIS_DEL_RING 4096
#define SEALED_SIZE (PAGE_SIZE + SEAL_OVERHEAD)

enum redis_op { OP_NONE, OP_SET, OP_GET, OP_STOP };

struct redis_tier {
	char host[64], prefix[32], password[128];
	int port, timeout_ms, replicas;
	struct sealer seal;
	redisContext *c; /* owned by the I/O thread after open */
	pthread_t thread;
	pthread_mutex_t batch_lock; /* one batch at a time */
	pthread_mutex_t lock;       /* protects the fields below */
	pthread_cond_t cond;
	enum redis_op op;
	size_t n;
	uint32_t keys[REDIS_BATCH];
	int result;
	bool done;
	uint32_t dels[REDIS_DEL_RING];
	size_t nr_dels;
	_Atomic uint32_t next_handle;
	unsigned char *sealed; /* REDIS_BATCH * SEALED_SIZE */
};

static int redis_connect(struct redis_tier *rt)
{
	struct timeval tv = { rt->timeout_ms / 1000, (rt->timeout_ms % 1000) * 1000 };
	redisReply *r;

	if (rt->c)
		redisFree(rt->c);
	rt->c = redisConnectWithTimeout(rt->host, rt->port, tv);
	if (!rt->c || rt->c->err)
		return -ECONNREFUSED;
	redisSetTimeout(rt->c, tv);
	if (rt->password[0]) {
		r = redisCommand(rt->c, "AUTH %s", rt->password);
		if (!r || r->type == REDIS_REPLY_ERROR) {
			if (r)
				freeReplyObject(r);
			return -EPERM;
		}
		freeReplyObject(r);
	}
	return 0;
}

/* A server that may evict keys would drop pages: only noeviction is accepted. */
static int redis_check_policy(struct redis_tier *rt)
{
	redisReply *r = redisCommand(rt->c, "CONFIG GET maxmemory-policy");
	int ret = -EPERM;

	if (!r)
		return -EIO;
	if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 && !strcmp(r->element[1]->str, "noeviction"))
		ret = 0;
	freeReplyObject(r);
	return ret;
}

/* I/O thread: one batch of pipelined commands, then the replies. Return: 0 or -EIO. */
static int redis_run(struct redis_tier *rt)
{
	redisReply *r;
	int ret = 0;
	size_t i, nd = rt->nr_dels, sent = 0;

	if (!rt->c || rt->c->err)
		if (redis_connect(rt))
			return -EIO;
	for (i = 0; i < rt->nr_dels; i++, sent++)
		redisAppendCommand(rt->c, "DEL %s%u", rt->prefix, (unsigned)rt->dels[i]);
	rt->nr_dels = 0;
	for (i = 0; i < rt->n; i++, sent++)
		if (rt->op == OP_SET)
			redisAppendCommand(rt->c, "SET %s%u %b", rt->prefix, (unsigned)rt->keys[i],
					   rt->sealed + i * SEALED_SIZE, (size_t)SEALED_SIZE);
		else
			redisAppendCommand(rt->c, "GET %s%u", rt->prefix, (unsigned)rt->keys[i]);
	if (rt->op == OP_SET && rt->replicas) {
		redisAppendCommand(rt->c, "WAIT %d %d", rt->replicas, rt->timeout_ms);
		sent++;
	}
	for (i = 0; i < sent; i++) {
		if (redisGetReply(rt->c, (void **)&r) != REDIS_OK)
			return -EIO;
		if (r->type == REDIS_REPLY_ERROR && i >= nd)
			ret = -EIO;
		if (rt->op == OP_GET && i >= nd) {
			if (r->type != REDIS_REPLY_STRING || r->len != SEALED_SIZE)
				ret = -EIO;
			else
				memcpy(rt->sealed + (i - nd) * SEALED_SIZE, r->str, SEALED_SIZE);
		}
		if (rt->op == OP_SET && rt->replicas && i == sent - 1 &&
		    (r->type != REDIS_REPLY_INTEGER || r->integer < rt->replicas))
			ret = -EIO;
		freeReplyObject(r);
	}
	return ret;
}

static void *redis_thread(void *arg)
{
	struct redis_tier *rt = arg;

	pthread_mutex_lock(&rt->lock);
	for (;;) {
		while (rt->op == OP_NONE)
			pthread_cond_wait(&rt->cond, &rt->lock);
		if (rt->op == OP_STOP)
			break;
		rt->result = redis_run(rt);
		rt->op = OP_NONE;
		rt->done = true;
		pthread_cond_broadcast(&rt->cond);
	}
	pthread_mutex_unlock(&rt->lock);
	return NULL;
}

/*
 * Context: fault path, caller holds batch_lock, so the I/O thread is idle. Loads may allocate, so they
 * run the batch on the caller's thread: a hand-off would cost two cross-CPU wake-ups per fault.
 */
static int redis_run_inline(struct redis_tier *rt, size_t n)
{
	int ret;

	pthread_mutex_lock(&rt->lock);
	rt->op = OP_GET;
	rt->n = n;
	ret = redis_run(rt);
	rt->op = OP_NONE;
	pthread_mutex_unlock(&rt->lock);
	return ret;
}

/* Context: caller holds batch_lock. Hands the batch to the I/O thread and waits for its result. */
static int redis_submit(struct redis_tier *rt, enum redis_op op, size_t n)
{
	int ret;

	pthread_mutex_lock(&rt->lock);
	rt->op = op;
	rt->n = n;
	rt->done = false;
	pthread_cond_broadcast(&rt->cond);
	while (!rt->done)
		pthread_cond_wait(&rt->cond, &rt->lock);
	ret = rt->result;
	pthread_mutex_unlock(&rt->lock);
	return ret;
}

static ssize_t redis_store(struct backend *b, const void *src, size_t npages, uint32_t owner, uint64_t *handles)
{
	struct redis_tier *rt = b->priv;
	size_t n = npages < REDIS_BATCH ? npages : REDIS_BATCH;
	int ret = 0;

	pthread_mutex_lock(&rt->batch_lock);
	for (size_t i = 0; i < n && !ret; i++) {
		rt->keys[i] = atomic_fetch_add(&rt->next_handle, 1);
		ret = seal_page(&rt->seal, owner + (uint32_t)i, rt->keys[i], (const char *)src + i * PAGE_SIZE,
				PAGE_SIZE, rt->sealed + i * SEALED_SIZE);
	}
	if (!ret)
		ret = redis_submit(rt, OP_SET, n);
	pthread_mutex_unlock(&rt->batch_lock);
	if (ret)
		return ret;
	for (size_t i = 0; i < n; i++)
		handles[i] = rt->keys[i];
	return (ssize_t)n;
}

static int redis_load(struct backend *b, uint32_t owner, const uint64_t *handles, size_t npages, void *dst)
{
	struct redis_tier *rt = b->priv;
	int ret = 0;

	pthread_mutex_lock(&rt->batch_lock);
	for (size_t done = 0; done < npages && !ret;) {
		size_t n = npages - done < REDIS_BATCH ? npages - done : REDIS_BATCH;

		for (size_t i = 0; i < n; i++)
			rt->keys[i] = (uint32_t)handles[done + i];
		ret = redis_run_inline(rt, n);
		if (ret) /* one retry after a reconnect; then the fault path gets -EIO */
			ret = redis_run_inline(rt, n);
		for (size_t i = 0; i < n && !ret; i++)
			ret = seal_open(&rt->seal, owner + (uint32_t)(done + i), rt->keys[i],
					rt->sealed + i * SEALED_SIZE, SEALED_SIZE,
					(char *)dst + (done + i) * PAGE_SIZE);
		done += n;
	}
	pthread_mutex_unlock(&rt->batch_lock);
	return ret ? -EIO : 0;
}

/* Deletes are queued and go out with the next batch; a full queue is flushed now. */
static void redis_release(struct backend *b, uint32_t owner, uint64_t handle)
{
	struct redis_tier *rt = b->priv;
	bool full;

	(void)owner;
	pthread_mutex_lock(&rt->batch_lock);
	pthread_mutex_lock(&rt->lock);
	rt->dels[rt->nr_dels++] = (uint32_t)handle;
	full = rt->nr_dels == REDIS_DEL_RING;
	pthread_mutex_unlock(&rt->lock);
	if (full)
		redis_submit(rt, OP_GET, 0);
	pthread_mutex_unlock(&rt->batch_lock);
}

static int redis_flush(struct backend *b)
{
	struct redis_tier *rt = b->priv;
	int ret;

	pthread_mutex_lock(&rt->batch_lock);
	ret = redis_submit(rt, OP_GET, 0);
	pthread_mutex_unlock(&rt->batch_lock);
	return ret;
}

static void redis_free(struct redis_tier *rt)
{
	if (rt->c)
		redisFree(rt->c);
	seal_destroy(&rt->seal);
	ufree(rt->sealed);
	ufree(rt);
}

static int redis_read_secret(const char *key, const char *val, char *out, size_t outlen)
{
	if (!strcmp(key, "password-env")) {
		const char *p = getenv(val);

		if (!p)
			return err_set(-EINVAL, "redis: password-env=%s is not set", val);
		snprintf(out, outlen, "%s", p);
		return 0;
	}
	FILE *f = fopen(val, "re");

	if (!f || !fgets(out, (int)outlen, f)) {
		if (f)
			fclose(f);
		return err_set(-EINVAL, "redis: cannot read password-file=%s", val);
	}
	fclose(f);
	out[strcspn(out, "\r\n")] = '\0';
	return 0;
}

/* args: "//HOST:PORT[:prefix=P][:timeout=MS][:replicas=N][:password-env=V|password-file=F]" */
static int redis_open(struct backend *b, const char *args, const struct backend_env *env)
{
	struct redis_tier *rt;
	char key[32], val[256];
	int ret;

	(void)env;
	if (strncmp(args, "//", 2))
		return err_set(-EINVAL, "redis: expected redis://HOST:PORT, got '%s'", args);
	args += 2;
	rt = ualloc_zero(sizeof(*rt));
	if (!rt)
		return -ENOMEM;
	rt->sealed = ualloc(REDIS_BATCH * SEALED_SIZE);
	if (!rt->sealed) {
		ufree(rt);
		return -ENOMEM;
	}
	snprintf(rt->prefix, sizeof(rt->prefix), "uswap:%d:", (int)getpid());
	rt->timeout_ms = 2000;
	if (!backend_next_arg(&args, key, sizeof(key), val, sizeof(val)) || !key[0]) {
		ret = err_set(-EINVAL, "redis: missing host");
		goto out_free;
	}
	snprintf(rt->host, sizeof(rt->host), "%s", key);
	if (!backend_next_arg(&args, key, sizeof(key), val, sizeof(val)) || (rt->port = atoi(key)) <= 0 ||
	    rt->port > 65535) {
		ret = err_set(-EINVAL, "redis: missing or bad port after %s", rt->host);
		goto out_free;
	}
	while (backend_next_arg(&args, key, sizeof(key), val, sizeof(val))) {
		if (!strcmp(key, "prefix") && val[0] && strlen(val) < sizeof(rt->prefix))
			memcpy(rt->prefix, val, strlen(val) + 1);
		else if (!strcmp(key, "timeout") && atoi(val) > 0)
			rt->timeout_ms = atoi(val);
		else if (!strcmp(key, "replicas") && atoi(val) >= 0)
			rt->replicas = atoi(val);
		else if ((!strcmp(key, "password-env") || !strcmp(key, "password-file")) && val[0]) {
			ret = redis_read_secret(key, val, rt->password, sizeof(rt->password));
			if (ret)
				goto out_free;
		} else {
			ret = err_set(-EINVAL, "redis: unknown or malformed option '%s'", key);
			goto out_free;
		}
	}
	ret = seal_init(&rt->seal);
	if (ret)
		goto out_free;
	ret = redis_connect(rt);
	if (ret) {
		ret = err_set(ret, "redis: cannot connect to %s:%d%s", rt->host, rt->port,
			      ret == -EPERM ? " (authentication refused)" : "");
		goto out_free;
	}
	ret = redis_check_policy(rt);
	if (ret) {
		ret = err_set(ret, "redis: %s:%d may evict keys: set maxmemory-policy noeviction", rt->host,
			      rt->port);
		goto out_free;
	}
	pthread_mutex_init(&rt->lock, NULL);
	pthread_mutex_init(&rt->batch_lock, NULL);
	pthread_cond_init(&rt->cond, NULL);
	ret = -pthread_create(&rt->thread, NULL, redis_thread, rt);
	if (ret)
		goto out_free;
	b->priv = rt;
	return 0;
out_free:
	redis_free(rt);
	return ret;
}

static void redis_close(struct backend *b)
{
	struct redis_tier *rt = b->priv;

	if (!rt)
		return;
	redis_flush(b);
	pthread_mutex_lock(&rt->lock);
	rt->op = OP_STOP;
	pthread_cond_broadcast(&rt->cond);
	pthread_mutex_unlock(&rt->lock);
	pthread_join(rt->thread, NULL);
	redis_free(rt);
	b->priv = NULL;
}

static void redis_stats(struct backend *b, struct uswap_tier_stats *st)
{
	st->pages = atomic_load(&b->nr_pages);
	st->data_bytes = st->pages * PAGE_SIZE;
	st->used_bytes = st->pages * SEALED_SIZE;
	st->meta_bytes = sizeof(struct redis_tier) + REDIS_BATCH * SEALED_SIZE;
}

const struct uswap_backend_ops redis_backend_ops = {
	.name = "redis",
	.caps = BACKEND_DURABLE,
	.open = redis_open,
	.close = redis_close,
	.store = redis_store,
	.load = redis_load,
	.release = redis_release,
	.flush = redis_flush,
	.stats = redis_stats,
};
