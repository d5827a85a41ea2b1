/*
 * redis.c - remote tier: sealed pages in one Redis server or a Redis Cluster, e.g.
 * "redis://127.0.0.1:6379:prefix=us" or "redis-cluster://10.0.0.1:7000,10.0.0.2:7000:replicas=1".
 *
 * hiredis allocates per command and reply, so callers never touch it: store() seals pages into a
 * pre-allocated buffer and hands the batch to this tier's I/O thread, which runs it through
 * rcluster.c (pipelined per node) and wakes the caller when Redis acknowledged every SET (and WAIT,
 * with replicas=N). Loads run on the faulting thread (see redis_run_inline()). Batches run one at a
 * time (batch_lock). Keys: prefix + handle (a per-tier sequence); the seal binds (owner, handle), so
 * a stale, foreign or altered value fails to open.
 *
 * Lease (lease.c): every SET carries PX lease_ms and a thread of this process renews the keys it holds,
 * so the pages of a process that dies without closing the tier leave the servers by themselves.
 *
 * An unreachable server: a store fails at once (its node is skipped for a while; the next tier or
 * the caller keeps the pages); a load retries with fresh connections and slot maps until its
 * timeout, then fails with -EIO. No call waits longer than about twice the timeout.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "lease.h"
#include "rcluster.h"
#include "redis.h"
#include "seal.h"
#include "util/thread.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/err.h"

#define REDIS_BATCH    64 /* pages per round trip */
#define REDIS_DEL_RING 4096
#define SEALED_SIZE    (PAGE_SIZE + SEAL_OVERHEAD)

enum redis_op { OP_NONE, OP_SET, OP_GET, OP_STOP };

struct redis_tier {
	struct rcluster rc; /* used by one batch at a time: under batch_lock */
	int replicas;
	struct sealer seal;
	pthread_t thread;
	pthread_mutex_t batch_lock; /* one batch at a time */
	pthread_mutex_t lock;       /* protects op..done */
	pthread_cond_t cond;
	enum redis_op op;
	size_t n;
	int result;
	bool done;
	uint32_t keys[REDIS_BATCH];
	int results[REDIS_BATCH];
	uint32_t dels[REDIS_DEL_RING]; /* released keys, deleted with the next batch; under batch_lock */
	size_t nr_dels;
	_Atomic uint64_t dels_dropped; /* keys left on an unreachable server (ring full) */
	_Atomic uint32_t next_handle;
	struct rc_cmd cmds[REDIS_DEL_RING + REDIS_BATCH];
	unsigned char *sealed; /* REDIS_BATCH * SEALED_SIZE */
	struct lease lease;    /* marks of the handles stored; its thread renews their TTL */
};

static void del_queue(struct redis_tier *rt, uint32_t key)
{
	if (rt->nr_dels < REDIS_DEL_RING)
		rt->dels[rt->nr_dels++] = key;
	else
		atomic_fetch_add(&rt->dels_dropped, 1);
}

/*
 * Context: caller holds batch_lock. The queued DELs, then @n SETs or GETs of keys[] (buffers in
 * sealed[]). Per-page results land in results[]. DELs that could not reach their node are queued
 * again. Return: 0 if every SET/GET succeeded, else -EIO.
 */
static int redis_run(struct redis_tier *rt, enum redis_op op, size_t n)
{
	size_t nd = rt->nr_dels, i;
	uint64_t deadline = 0;
	int ret = 0;

	for (i = 0; i < nd; i++)
		rt->cmds[i] = (struct rc_cmd){.key = rt->dels[i], .op = RC_DEL};
	rt->nr_dels = 0;
	for (i = 0; i < n; i++)
		rt->cmds[nd + i] = (struct rc_cmd){.key = rt->keys[i],
						   .op = op == OP_SET ? RC_SET : RC_GET,
						   .buf = rt->sealed + i * SEALED_SIZE,
						   .len = SEALED_SIZE};
	if (op == OP_GET && n) /* a load waits for a server that comes back; a store goes elsewhere */
		deadline = mono_ms() + (uint64_t)rt->rc.timeout_ms;
	if (!nd && !n)
		return 0;
	rcluster_exec(&rt->rc, rt->cmds, nd + n, op == OP_SET ? rt->replicas : 0, deadline);
	for (i = 0; i < nd; i++)
		if (rt->cmds[i].result == -EHOSTUNREACH)
			del_queue(rt, rt->cmds[i].key);
	for (i = 0; i < n; i++) {
		rt->results[i] = rt->cmds[nd + i].result;
		if (rt->results[i])
			ret = -EIO;
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
		rt->result = redis_run(rt, rt->op, rt->n);
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
	ret = redis_run(rt, OP_GET, n);
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

/*
 * Takes the longest prefix of pages whose SETs Redis acknowledged (and replicas, with replicas=N);
 * pages after the first failure are deleted again with the next batch.
 */
static ssize_t redis_store(struct backend *b, const void *src, size_t npages, uint32_t owner,
			   uint64_t *handles)
{
	struct redis_tier *rt = b->priv;
	size_t n = npages < REDIS_BATCH ? npages : REDIS_BATCH, taken = 0;
	int ret = 0;

	pthread_mutex_lock(&rt->batch_lock);
	for (size_t i = 0; i < n && !ret; i++) {
		rt->keys[i] = atomic_fetch_add(&rt->next_handle, 1);
		ret = seal_page(&rt->seal, owner + (uint32_t)i, rt->keys[i],
				(const char *)src + i * PAGE_SIZE, PAGE_SIZE, rt->sealed + i * SEALED_SIZE);
	}
	if (ret)
		goto out_unlock;
	redis_submit(rt, OP_SET, n);
	while (taken < n && !rt->results[taken])
		taken++;
	for (size_t i = taken; i < n; i++)
		del_queue(rt, rt->keys[i]); /* it may be there, or half-replicated, or arrive late */
	for (size_t i = 0; i < taken; i++) {
		lease_mark(&rt->lease, rt->keys[i]);
		handles[i] = rt->keys[i];
	}
	ret = taken ? 0 : -EIO;
out_unlock:
	pthread_mutex_unlock(&rt->batch_lock);
	return ret ? ret : (ssize_t)taken;
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

	(void)owner;
	pthread_mutex_lock(&rt->batch_lock);
	lease_unmark(&rt->lease,
		     (uint32_t)handle); /* before the DEL: a renewal that misses it is not a loss */
	del_queue(rt, (uint32_t)handle);
	if (rt->nr_dels == REDIS_DEL_RING)
		redis_submit(rt, OP_GET, 0);
	pthread_mutex_unlock(&rt->batch_lock);
}

static int redis_flush(struct backend *b)
{
	struct redis_tier *rt = b->priv;
	int ret;

	pthread_mutex_lock(&rt->batch_lock);
	ret = redis_submit(rt, OP_GET, 0);
	if (!ret && rt->nr_dels)
		ret = -EIO; /* some DELs did not reach their node */
	pthread_mutex_unlock(&rt->batch_lock);
	return ret;
}

static void redis_free(struct redis_tier *rt)
{
	lease_close(&rt->lease);
	lease_free(&rt->lease);
	rcluster_close(&rt->rc);
	seal_destroy(&rt->seal);
	memset(rt->rc.password, 0, sizeof(rt->rc.password));
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

/* "HOST:PORT" (cluster: "HOST:PORT,HOST:PORT..."), then ':' before the options or the end. */
static int redis_parse_seeds(struct rcluster *rc, const char **args)
{
	const char *s = *args;
	int ret;

	for (;;) {
		const char *colon = strchr(s, ':');
		size_t digits = colon ? strspn(colon + 1, "0123456789") : 0;
		char hp[96];

		if (!colon || colon == s || !digits || colon + 1 + digits - s >= (long)sizeof(hp))
			return err_set(-EINVAL, "redis: expected HOST:PORT, got '%s'", s);
		snprintf(hp, sizeof(hp), "%.*s", (int)(colon + 1 + digits - s), s);
		ret = rcluster_add_seed(rc, hp);
		if (ret)
			return ret;
		s = colon + 1 + digits;
		if (*s == ',' && rc->cluster) {
			s++;
			continue;
		}
		if (*s && *s != ':')
			return err_set(-EINVAL, "redis: unexpected '%s' after %s", s, hp);
		*args = *s ? s + 1 : s;
		return 0;
	}
}

/* "30s", "5m", "1h", "1500ms"; a bare number is seconds. */
static bool parse_duration_ms(const char *val, int min, int max, int *out)
{
	char *end;
	double v = strtod(val, &end), unit;

	if (end == val)
		return false;
	if (!*end || !strcmp(end, "s"))
		unit = 1000;
	else if (!strcmp(end, "ms"))
		unit = 1;
	else if (!strcmp(end, "m"))
		unit = 60000;
	else if (!strcmp(end, "h"))
		unit = 3600000;
	else
		return false;
	v *= unit;
	if (!(v >= min && v <= max)) /* NaN too */
		return false;
	*out = (int)v;
	return true;
}

static bool parse_int(const char *val, int min, int max, int *out)
{
	char *end;
	long v = strtol(val, &end, 10);

	if (!val[0] || *end || v < min || v > max)
		return false;
	*out = (int)v;
	return true;
}

/*
 * args: "//SEEDS[:prefix=P][:timeout=MS][:replicas=N][:db=N][:lease=T][:password-env=V|password-file=F]
 * [:user=NAME][:tls][:cacert=F][:cert=F][:key=F]", SEEDS one HOST:PORT, or for a cluster a
 * comma-separated list of them; into @rc and *@replicas. cacert=, cert= and key= imply tls.
 */
static int redis_parse(struct rcluster *rc, int *replicas, const char *args, bool cluster)
{
	char key[32], val[256];
	int ret;

	if (strncmp(args, "//", 2))
		return err_set(-EINVAL, "redis: expected %s://HOST:PORT, got '%s'",
			       cluster ? "redis-cluster" : "redis", args);
	args += 2;
	rc->cluster = cluster;
	snprintf(rc->prefix, sizeof(rc->prefix), "uswap:%d:", (int)getpid());
	rc->timeout_ms = 2000;
	rc->lease_ms = LEASE_DEFAULT_MS;
	ret = redis_parse_seeds(rc, &args);
	if (ret)
		return ret;
	while (backend_next_arg(&args, key, sizeof(key), val, sizeof(val))) {
		if (!strcmp(key, "prefix") && val[0] && strlen(val) < sizeof(rc->prefix))
			memcpy(rc->prefix, val, strlen(val) + 1);
		else if (!strcmp(key, "timeout") && parse_int(val, 1, 3600 * 1000, &rc->timeout_ms))
			;
		else if (!strcmp(key, "replicas") && parse_int(val, 0, 64, replicas))
			;
		else if (!strcmp(key, "lease") &&
			 parse_duration_ms(val, LEASE_MIN_MS, LEASE_MAX_MS, &rc->lease_ms))
			;
		else if (!strcmp(key, "db") && parse_int(val, 0, 1 << 20, &rc->db)) {
			if (cluster && rc->db)
				return err_set(-EINVAL, "redis-cluster: a cluster has only db=0");
		} else if ((!strcmp(key, "password-env") || !strcmp(key, "password-file")) && val[0]) {
			ret = redis_read_secret(key, val, rc->password, sizeof(rc->password));
			if (ret)
				return ret;
		} else if (!strcmp(key, "user") && val[0] && strlen(val) < sizeof(rc->user)) {
			memcpy(rc->user, val, strlen(val) + 1);
		} else if (!strcmp(key, "tls") && !val[0]) {
			rc->tls = true;
		} else if (!strcmp(key, "cacert") && val[0] && strlen(val) < sizeof(rc->cacert)) {
			memcpy(rc->cacert, val, strlen(val) + 1);
			rc->tls = true;
		} else if (!strcmp(key, "cert") && val[0] && strlen(val) < sizeof(rc->cert)) {
			memcpy(rc->cert, val, strlen(val) + 1);
			rc->tls = true;
		} else if (!strcmp(key, "key") && val[0] && strlen(val) < sizeof(rc->key)) {
			memcpy(rc->key, val, strlen(val) + 1);
			rc->tls = true;
		} else {
			return err_set(-EINVAL, "redis: unknown or malformed option '%s'", key);
		}
	}
	if (rc->user[0] && !rc->password[0])
		return err_set(-EINVAL, "redis: user=%s needs password-env= or password-file=", rc->user);
	if (rc->key[0] && !rc->cert[0])
		return err_set(-EINVAL, "redis: key= needs cert= (the client certificate)");
	return 0;
}

static int redis_open_common(struct backend *b, const char *args, bool cluster, bool check_only)
{
	struct redis_tier *rt;
	int ret;

	rt = ualloc_zero(sizeof(*rt));
	if (!rt)
		return -ENOMEM;
	rt->sealed = ualloc(REDIS_BATCH * SEALED_SIZE);
	if (!rt->sealed) {
		ufree(rt);
		return -ENOMEM;
	}
	ret = redis_parse(&rt->rc, &rt->replicas, args, cluster);
	if (ret || check_only)
		goto out_free;
	ret = seal_init(&rt->seal);
	if (ret)
		goto out_free;
	ret = rcluster_open(&rt->rc);
	if (ret)
		goto out_free;
	pthread_mutex_init(&rt->lock, NULL);
	pthread_mutex_init(&rt->batch_lock, NULL);
	pthread_cond_init(&rt->cond, NULL);
	ret = lease_open(&rt->lease, &rt->rc, &rt->batch_lock, &rt->next_handle);
	if (ret)
		goto out_free;
	ret = thread_start(&rt->thread, "uswap-redis", redis_thread, rt);
	if (ret)
		goto out_free;
	b->priv = rt;
	return 0;
out_free:
	redis_free(rt);
	return ret;
}

int redis_servers_open(const char *tier, struct rcluster *rc)
{
	int replicas = 0, ret;

	memset(rc, 0, sizeof(*rc));
	if (!strncmp(tier, "redis-cluster:", 14))
		ret = redis_parse(rc, &replicas, tier + 14, true);
	else if (!strncmp(tier, "redis:", 6))
		ret = redis_parse(rc, &replicas, tier + 6, false);
	else
		ret = err_set(-EINVAL,
			      "expected redis://HOST:PORT or redis-cluster://HOST:PORT,..., got '%s'", tier);
	rc->lease_ms = 0;
	if (!ret)
		ret = rcluster_open(rc);
	memset(rc->password, 0, sizeof(rc->password));
	if (ret)
		rcluster_close(rc);
	return ret;
}

static int redis_open(struct backend *b, const char *args, const struct backend_env *env)
{
	return redis_open_common(b, args, false, env->check_only);
}

static int redis_cluster_open(struct backend *b, const char *args, const struct backend_env *env)
{
	return redis_open_common(b, args, true, env->check_only);
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
	redis_free(rt); /* the lease thread stops and the alive key goes last */
	b->priv = NULL;
}

static void redis_stats(struct backend *b, struct uswap_tier_stats *st)
{
	st->pages = atomic_load(&b->nr_pages);
	st->data_bytes = st->pages * PAGE_SIZE;
	st->used_bytes = st->pages * SEALED_SIZE;
	st->meta_bytes = sizeof(struct redis_tier) + REDIS_BATCH * SEALED_SIZE;
}

int redis_lease_stats(struct backend *b, struct lease_stats *out)
{
	if (b->ops != &redis_backend_ops && b->ops != &redis_cluster_backend_ops)
		return -EINVAL;
	lease_get_stats(&((struct redis_tier *)b->priv)->lease, out);
	return 0;
}

int redis_counters(struct backend *b, struct rc_counters *out)
{
	struct redis_tier *rt = b->priv;

	if (b->ops != &redis_backend_ops && b->ops != &redis_cluster_backend_ops)
		return -EINVAL;
	pthread_mutex_lock(&rt->batch_lock);
	*out = rt->rc.n;
	pthread_mutex_unlock(&rt->batch_lock);
	return 0;
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

const struct uswap_backend_ops redis_cluster_backend_ops = {
	.name = "redis-cluster",
	.caps = BACKEND_DURABLE | BACKEND_SEEDS,
	.open = redis_cluster_open,
	.close = redis_close,
	.store = redis_store,
	.load = redis_load,
	.release = redis_release,
	.flush = redis_flush,
	.stats = redis_stats,
};
