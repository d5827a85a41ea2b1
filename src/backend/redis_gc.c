/*
 * redis_gc.c - uswap_gc(): remove from a Redis server or cluster the keys of uswap instances that are
 * no longer alive, for operators (`uswap gc`); see uswap.h for when an instance counts as dead.
 *
 * Keys are PREFIX + decimal handle and PREFIX + "alive" (redis.c, lease.c). Every master is SCANned
 * for @match, the keys grouped by instance, each instance judged by its alive key, then the keys of
 * the dead ones deleted. A key's prefix is found by taking off trailing digits, the longest run first
 * that leaves a prefix with an alive key ("t1" + "45"); with none, all of them. The alive key of an
 * instance is read after the SCAN: an instance writes it before its first page, so a page seen in the
 * SCAN never belongs to an instance whose alive key is not there yet. Runs on the caller's thread;
 * allocates (a copy of every key name seen).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "lease.h"
#include "rcluster.h"
#include "redis.h"
#include "util/alloc.h"
#include "util/err.h"

#define GC_DEL_BATCH 512
/* SCAN steps of COUNT 1000 on one node: 4G buckets, more than any server holds keys */
#define GC_SCAN_STEPS_MAX (1ul << 22)

/* *@arr of *@cap elements of @size bytes, twice as long (at least @min). Return: 0 or -ENOMEM. */
static int grow(void **arr, size_t *cap, size_t size, size_t min)
{
	size_t n = *cap ? 2 * *cap : min;
	void *bigger = ualloc(n * size);

	if (!bigger)
		return -ENOMEM;
	if (*cap)
		memcpy(bigger, *arr, *cap * size);
	ufree(*arr);
	*arr = bigger;
	*cap = n;
	return 0;
}

struct gc_inst {
	char prefix[RC_KEY_MAX];
	bool has_alive, alive;
	uint64_t keys;
	char why[RC_KEY_MAX + 64];
};

struct gc {
	struct rcluster rc;
	char **keys;
	size_t nr_keys, cap_keys;
	uint32_t *owner; /* per key: index into inst[], or UINT32_MAX: not ours */
	struct gc_inst *inst;
	size_t nr_inst, cap_inst;
	char host[72], boot[40];
	unsigned long long pidns;
	int err;
};

/* The node @c went to (the first seed if it went nowhere), for messages. */
static const struct rc_node *cmd_node(const struct gc *g, const struct rc_cmd *c)
{
	return &g->rc.nodes[c->node == RC_NO_NODE ? 0 : c->node];
}

static void gc_collect(const char *key, size_t len, void *arg)
{
	struct gc *g = arg;

	if (g->err || len >= RC_KEY_MAX - 8)
		return;
	if (g->nr_keys == g->cap_keys && grow((void **)&g->keys, &g->cap_keys, sizeof(*g->keys), 4096)) {
		g->err = -ENOMEM;
		return;
	}
	char *copy = ualloc(len + 1);

	if (!copy) {
		g->err = -ENOMEM;
		return;
	}
	memcpy(copy, key, len);
	copy[len] = '\0';
	g->keys[g->nr_keys++] = copy;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Whether the process an alive key names is alive; @why says how that was decided. */
static bool judge(struct gc *g, const struct lease_alive *a, char *why, size_t len)
{
	unsigned long long start;

	if (strcmp(a->host, g->host)) {
		snprintf(why, len, "alive key of pid %d on host %s (trusted until its lease ends)", a->pid,
			 a->host);
		return true;
	}
	if (strcmp(a->boot, g->boot)) {
		snprintf(why, len, "pid %d ran on this host before it rebooted", a->pid);
		return false;
	}
	if (a->pidns != g->pidns) {
		snprintf(why, len,
			 "alive key of pid %d in another pid namespace (trusted until its lease ends)",
			 a->pid);
		return true;
	}
	start = lease_proc_start(a->pid);
	if (!start) {
		snprintf(why, len, "pid %d is gone from this host", a->pid);
		return false;
	}
	if (start != a->start) {
		snprintf(why, len, "pid %d now names another process", a->pid);
		return false;
	}
	snprintf(why, len, "pid %d runs on this host", a->pid);
	return true;
}

/*
 * The instance of prefix @p: found, or added after reading its alive key (an instance without one is
 * added too, so that each prefix is read once). Return: its index, or -errno.
 */
static long inst_get(struct gc *g, const char *p)
{
	struct rc_cmd cmd;
	char name[RC_KEY_MAX], val[LEASE_ALIVE_LEN];
	struct gc_inst *in;

	for (size_t i = 0; i < g->nr_inst; i++) /* instances are few */
		if (!strcmp(g->inst[i].prefix, p))
			return (long)i;
	if (g->nr_inst == g->cap_inst && grow((void **)&g->inst, &g->cap_inst, sizeof(*g->inst), 16))
		return -ENOMEM;
	in = &g->inst[g->nr_inst];
	memset(in, 0, sizeof(*in));
	snprintf(in->prefix, sizeof(in->prefix), "%s", p);
	snprintf(name, sizeof(name), "%salive", p);
	cmd = (struct rc_cmd){.name = name, .op = RC_GET, .buf = val, .len = sizeof(val)};
	rcluster_exec(&g->rc, &cmd, 1, 0, 0);
	if (cmd.result == -ENOENT) {
		snprintf(in->why, sizeof(in->why), "no alive key (its lease ran out, or it never had one)");
	} else {
		struct lease_alive a;

		in->has_alive = true;
		if (cmd.result == -EHOSTUNREACH)
			return err_set(-EIO, "gc: cannot read %s from %s:%d", name, cmd_node(g, &cmd)->host,
				       cmd_node(g, &cmd)->port);
		if (cmd.result || lease_alive_parse(val, sizeof(val), &a)) {
			in->alive = true; /* not ours to judge */
			snprintf(in->why, sizeof(in->why), "%s is not a uswap alive key", name);
		} else {
			in->alive = judge(g, &a, in->why, sizeof(in->why));
		}
	}
	return (long)g->nr_inst++;
}

/* The instance key @k belongs to: UINT32_MAX if not one of ours, or -errno. */
static long owner_of(struct gc *g, const char *k)
{
	size_t len = strlen(k), digits = 0;
	char p[RC_KEY_MAX];
	long idx, fallback = -1;

	if (len > 5 && !strcmp(k + len - 5, "alive")) {
		snprintf(p, sizeof(p), "%.*s", (int)(len - 5), k);
		return inst_get(g, p);
	}
	while (digits < len && k[len - 1 - digits] >= '0' && k[len - 1 - digits] <= '9')
		digits++;
	if (!digits || digits == len)
		return UINT32_MAX;
	for (size_t d = 1; d <= digits; d++) { /* "t145": "t14", "t1", "t" */
		snprintf(p, sizeof(p), "%.*s", (int)(len - d), k);
		idx = inst_get(g, p);
		if (idx < 0)
			return idx;
		if (g->inst[idx].has_alive)
			return idx;
		fallback = idx;
	}
	return fallback; /* no alive key under any split: all digits were the handle */
}

static int gc_delete(struct gc *g, int64_t *removed)
{
	struct rc_cmd cmds[GC_DEL_BATCH];
	size_t n = 0;
	int ret = 0;

	for (size_t i = 0; i <= g->nr_keys; i++) {
		if (i < g->nr_keys && g->owner[i] != UINT32_MAX && !g->inst[g->owner[i]].alive)
			cmds[n++] = (struct rc_cmd){.name = g->keys[i], .op = RC_DEL};
		if (n == GC_DEL_BATCH || (i == g->nr_keys && n)) {
			rcluster_exec(&g->rc, cmds, n, 0, 0);
			for (size_t j = 0; j < n; j++) {
				if (cmds[j].result)
					ret = err_set(-EIO, "gc: DEL %s on %s:%d failed", cmds[j].name,
						      cmd_node(g, &cmds[j])->host,
						      cmd_node(g, &cmds[j])->port);
				else
					(*removed)++;
			}
			n = 0;
		}
	}
	return ret;
}

int64_t uswap_gc(const char *tier, const char *match, int dry_run,
		 void (*report)(const struct uswap_gc_instance *in, void *arg), void *arg)
{
	struct gc *g = ualloc_zero(sizeof(*g));
	uint8_t masters[RC_MAX_NODES];
	int64_t removed = 0;
	unsigned nm;
	int ret;

	if (!g)
		return -ENOMEM;
	ret = redis_servers_open(tier, &g->rc);
	if (ret) {
		ufree(g);
		return ret;
	}
	if (gethostname(g->host, sizeof(g->host) - 1) || !g->host[0])
		snprintf(g->host, sizeof(g->host), "-");
	g->host[strcspn(g->host, " ")] = '\0';
	lease_boot_id(g->boot, sizeof(g->boot));
	g->pidns = lease_pidns();
	nm = rcluster_masters(&g->rc, masters);
	for (unsigned m = 0; m < nm && !ret; m++) {
		const struct rc_node *nd = &g->rc.nodes[masters[m]];
		unsigned long long cursor = 0, sent;
		unsigned long steps = 0;

		do {
			sent = cursor;
			ret = rcluster_scan(&g->rc, masters[m], &cursor, match ? match : "uswap:*",
					    gc_collect, g);
			/* a cursor moves on at every step, and a SCAN ends: a server that says otherwise
			 * would keep us here for ever */
			if (!ret && cursor && (cursor == sent || ++steps > GC_SCAN_STEPS_MAX))
				ret = err_set(
					-EIO,
					"gc: the SCAN of %s:%d does not end (cursor %llu after %lu steps)",
					nd->host, nd->port, cursor, steps);
		} while (!ret && !g->err && cursor);
	}
	if (!ret && g->err)
		ret = g->err;
	if (ret)
		goto out;
	if (g->nr_keys) /* none found: keys is NULL, which qsort() must not get even for 0 */
		qsort(g->keys, g->nr_keys, sizeof(*g->keys), cmp_str);
	g->owner = ualloc_zero((g->nr_keys + 1) * sizeof(*g->owner));
	if (!g->owner) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < g->nr_keys; i++) {
		if (i && !strcmp(g->keys[i], g->keys[i - 1])) { /* SCAN may name a key twice */
			g->owner[i] = UINT32_MAX;
			continue;
		}
		long idx = owner_of(g, g->keys[i]);

		if (idx < 0) {
			ret = (int)idx;
			goto out;
		}
		g->owner[i] = (uint32_t)idx;
		if (idx != UINT32_MAX)
			g->inst[idx].keys++;
	}
	if (dry_run) {
		for (size_t i = 0; i < g->nr_keys; i++)
			removed += g->owner[i] != UINT32_MAX && !g->inst[g->owner[i]].alive;
	} else {
		ret = gc_delete(g, &removed);
	}
	for (size_t i = 0; report && i < g->nr_inst; i++) {
		struct uswap_gc_instance in = {g->inst[i].prefix, g->inst[i].keys, g->inst[i].alive,
					       g->inst[i].why};

		if (in.keys)
			report(&in, arg);
	}
out:
	rcluster_close(&g->rc);
	for (size_t i = 0; i < g->nr_keys; i++)
		ufree(g->keys[i]);
	ufree(g->keys);
	ufree(g->owner);
	ufree(g->inst);
	ufree(g);
	return ret ? ret : removed;
}
