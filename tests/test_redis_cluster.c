/*
 * test_redis_cluster.c - the remote tier on a Redis Cluster of 3 masters and 3 replicas started here on
 * loopback (tests/rserver.c kills them at exit, even when a check fails): routing by key slot,
 * ASK and MOVED while a slot migrates under a running layer, and a master killed with replicas=1
 * (no acknowledged page lost; stores the cluster cannot take go to the next tier).
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis.h>

#include "uswap.h"

#include "../src/backend/backend.h"
#include "../src/backend/rcluster.h"
#include "../src/backend/redis.h"
#include "check.h"
#include "core/testhook.h"
#include "rserver.h"

#define NR_NODES 6

static struct rserver node[NR_NODES];

static redisReply *cmd(int i, const char *fmt, ...)
{
	redisContext *c = rserver_connect(&node[i]);
	redisReply *r = NULL;
	va_list ap;

	if (!c)
		return NULL;
	va_start(ap, fmt);
	r = redisvCommand(c, fmt, ap);
	va_end(ap);
	redisFree(c);
	return r;
}

static void pause_ms(long ms)
{
	nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000}, NULL);
}

/*
 * Readiness of node @i: "cluster_state:ok" and every slot served by a healthy master (with
 * cluster-require-full-coverage no, the state is ok while a failed master's slots wait for failover).
 */
static bool cluster_ok(int i)
{
	redisReply *r = cmd(i, "CLUSTER INFO");
	bool ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_state:ok") &&
		  strstr(r->str, "cluster_slots_ok:16384");

	if (r)
		freeReplyObject(r);
	return ok;
}

/* Node @i's role line ("master"/"slave") and, for a master, its online replicas. */
static bool is_master(int i, int *replicas)
{
	redisReply *r = cmd(i, "INFO replication");
	bool master = false;
	const char *p;

	*replicas = 0;
	if (r && r->type == REDIS_REPLY_STRING) {
		master = strstr(r->str, "role:master") != NULL;
		for (p = r->str; (p = strstr(p, ",state=online,")); p++)
			(*replicas)++;
	}
	if (r)
		freeReplyObject(r);
	return master;
}

/* The node id of node @i. */
static void node_id(int i, char *id, size_t len)
{
	redisReply *r = cmd(i, "CLUSTER MYID");

	snprintf(id, len, "%s", r && r->type == REDIS_REPLY_STRING ? r->str : "");
	if (r)
		freeReplyObject(r);
}

/* Which node serves @slot, by port; -1 if none of ours. */
static int owner_of(int asked, unsigned slot)
{
	redisReply *r = cmd(asked, "CLUSTER SLOTS");
	int owner = -1;

	for (size_t e = 0; r && r->type == REDIS_REPLY_ARRAY && e < r->elements; e++) {
		redisReply *x = r->element[e];

		if (x->element[0]->integer <= (long long)slot && (long long)slot <= x->element[1]->integer)
			for (int i = 0; i < NR_NODES; i++)
				if (node[i].port == x->element[2]->element[1]->integer)
					owner = i;
	}
	if (r)
		freeReplyObject(r);
	return owner;
}

/* Wait (readiness, bounded) until every live node says ok and each live master has @replicas online. */
static bool wait_cluster(int replicas)
{
	for (int tries = 0; tries < 600; tries++) {
		bool ok = true;

		for (int i = 0; i < NR_NODES && ok; i++) {
			int n;

			if (!node[i].pid)
				continue;
			ok = cluster_ok(i) && (!is_master(i, &n) || n >= replicas);
		}
		if (ok)
			return true;
		pause_ms(50);
	}
	return false;
}

static void cluster_start(void)
{
	static const char *const extra[] = {"--cluster-enabled",
					    "yes",
					    "--cluster-config-file",
					    "nodes.conf",
					    "--cluster-node-timeout",
					    "1000",
					    "--repl-diskless-load",
					    "swapdb",
					    "--cluster-allow-replica-migration",
					    "no",
					    "--cluster-require-full-coverage",
					    "no",
					    NULL};
	char addr[NR_NODES][32];
	const char *argv[NR_NODES + 8] = {"/usr/bin/redis-cli", "--cluster", "create"};
	int argc = 3;

	if (!rserver_available())
		check_skip("redis-server or redis-cli not installed");
	for (int i = 0; i < NR_NODES; i++) {
		if (rserver_start(&node[i], "noeviction", extra))
			check_skip("redis-server did not come up");
		snprintf(addr[i], sizeof(addr[i]), "127.0.0.1:%d", node[i].port);
		argv[argc++] = addr[i];
	}
	argv[argc++] = "--cluster-replicas";
	argv[argc++] = "1";
	argv[argc++] = "--cluster-yes";
	argv[argc] = NULL;
	if (rserver_run(argv))
		check_skip("redis-cli --cluster create failed");
	if (!wait_cluster(1))
		check_skip("the cluster did not become ready");
}

/* Folio i: 1, 4 or 16 random pages. */
static size_t folio_pages(int i)
{
	return (size_t[]){1, 4, 16}[i % 3];
}

static void check_all(struct uswap *u, const uswap_id_t *ids, int nr, uint64_t salt, const char *when)
{
	static unsigned char want[16 * PAGE_SIZE], back[16 * PAGE_SIZE];
	int bad = 0;

	for (int i = 0; i < nr; i++) {
		size_t np = folio_pages(i);
		int ret;

		fill_pages(want, np, PK_RANDOM, seed_for(salt + (uint64_t)i));
		memset(back, 0, np * PAGE_SIZE);
		ret = uswap_load(u, ids[i], back, np);
		if (ret || memcmp(want, back, np * PAGE_SIZE)) {
			if (!bad++)
				fprintf(stderr, "%s: folio %d: %d %s\n", when, i, ret, uswap_errmsg());
		}
	}
	CHECK_EQ(bad, 0);
}

static long long keys_on(int i, const char *pattern)
{
	redisReply *r = cmd(i, "KEYS %s", pattern);
	long long n = r && r->type == REDIS_REPLY_ARRAY ? (long long)r->elements : 0;

	if (r)
		freeReplyObject(r);
	return n;
}

/*
 * Pages spread over the three masters by key slot; then one slot that holds our keys migrates to
 * another master while the layer runs: keys already moved answer ASK (the layer follows with ASKING),
 * and once the slot is handed over, MOVED (the layer refreshes its slot map). Every page reads back.
 */
static void test_cluster_spread_and_redirects(void)
{
	enum { NR = 48 };
	static unsigned char pages[16 * PAGE_SIZE];
	uswap_id_t ids[NR];
	struct rc_counters cnt = {0};
	char spec[112], src_id[64], dst_id[64], key[64];
	int masters[3], nm = 0, src = -1, dst = -1, n;
	unsigned slot = 0;
	struct uswap *u, *bad = NULL;

	snprintf(spec, sizeof(spec),
		 "redis-cluster://127.0.0.1:%d,127.0.0.1:%d:prefix=c1-:replicas=1:timeout=5000", node[0].port,
		 node[3].port);
	CHECK_EQ(uswap_create(&u, spec), 0);
	if (!u)
		return;
	snprintf(key, sizeof(key), "redis://127.0.0.1:%d", node[0].port); /* not the way to a cluster */
	CHECK(uswap_create(&bad, key) < 0);
	CHECK(strstr(uswap_errmsg(), "use redis-cluster://") != NULL);
	for (int i = 0; i < NR; i++) {
		fill_pages(pages, folio_pages(i), PK_RANDOM, seed_for(1000 + (uint64_t)i));
		CHECK_EQ(uswap_store(u, pages, folio_pages(i), &ids[i]), 0);
	}
	for (int i = 0; i < NR_NODES; i++)
		if (is_master(i, &n) && nm < 3)
			masters[nm++] = i;
	CHECK_EQ(nm, 3);
	for (int m = 0; m < nm; m++)
		CHECK(keys_on(masters[m], "c1-*") > 0); /* every master holds some */
	/* our slot function agrees with the server's on our own keys */
	for (unsigned k = 0; k < 200; k += 7) {
		redisReply *r;

		snprintf(key, sizeof(key), "c1-%u", k);
		r = cmd(0, "CLUSTER KEYSLOT %s", key);
		CHECK(r && r->type == REDIS_REPLY_INTEGER);
		if (r) {
			CHECK_EQ(r->integer, rcluster_key_slot(key, strlen(key)));
			freeReplyObject(r);
		}
	}
	check_all(u, ids, NR, 1000, "before resharding");

	/* a slot with our keys, its master, and another master */
	for (unsigned k = 0; k < 400 && src < 0; k++) {
		redisReply *r;

		snprintf(key, sizeof(key), "c1-%u", k);
		slot = rcluster_key_slot(key, strlen(key));
		src = owner_of(0, slot);
		r = src >= 0 ? cmd(src, "CLUSTER COUNTKEYSINSLOT %u", slot) : NULL;
		if (!r || r->type != REDIS_REPLY_INTEGER || r->integer < 1)
			src = -1;
		if (r)
			freeReplyObject(r);
	}
	CHECK(src >= 0);
	if (src < 0)
		goto out;
	for (int m = 0; m < nm; m++)
		if (masters[m] != src)
			dst = masters[m];
	node_id(src, src_id, sizeof(src_id));
	node_id(dst, dst_id, sizeof(dst_id));
	freeReplyObject(cmd(dst, "CLUSTER SETSLOT %u IMPORTING %s", slot, src_id));
	freeReplyObject(cmd(src, "CLUSTER SETSLOT %u MIGRATING %s", slot, dst_id));
	/* move one key of the slot: any others stay until the hand-over */
	redisReply *keys = cmd(src, "CLUSTER GETKEYSINSLOT %u 100", slot);

	CHECK(keys && keys->elements >= 1);
	if (keys && keys->elements >= 1) {
		redisReply *r =
			cmd(src, "MIGRATE 127.0.0.1 %d %s 0 5000", node[dst].port, keys->element[0]->str);

		CHECK(r && r->type == REDIS_REPLY_STATUS);
		if (r)
			freeReplyObject(r);
	}
	check_all(u, ids, NR, 1000, "while the slot migrates");
	CHECK_EQ(redis_counters(testhook_tier(u, 0), &cnt), 0);
	CHECK(cnt.ask > 0);
	/* the rest of the slot's keys, then the hand-over to every master */
	for (size_t k = 1; keys && k < keys->elements; k++) {
		redisReply *r =
			cmd(src, "MIGRATE 127.0.0.1 %d %s 0 5000", node[dst].port, keys->element[k]->str);

		CHECK(r && r->type == REDIS_REPLY_STATUS);
		if (r)
			freeReplyObject(r);
	}
	if (keys)
		freeReplyObject(keys);
	for (int m = 0; m < nm; m++)
		freeReplyObject(cmd(masters[m], "CLUSTER SETSLOT %u NODE %s", slot, dst_id));
	CHECK_EQ(keys_on(src, "c1-*") + keys_on(dst, "c1-*") > 0, 1);
	check_all(u, ids, NR, 1000, "after the slot moved");
	CHECK_EQ(redis_counters(testhook_tier(u, 0), &cnt), 0);
	CHECK(cnt.moved > 0);
	/* stores keep working after the move, and frees delete every key */
	for (int i = 0; i < NR; i++) {
		CHECK_EQ(uswap_free(u, ids[i]), 0);
		fill_pages(pages, folio_pages(i), PK_RANDOM, seed_for(2000 + (uint64_t)i));
		CHECK_EQ(uswap_store(u, pages, folio_pages(i), &ids[i]), 0);
	}
	check_all(u, ids, NR, 2000, "stored after the move");
	/* uswap gc on every master: keys without an alive key go, this live instance's stay */
	for (int k = 0; k < 30; k++) {
		snprintf(key, sizeof(key), "uswap:5:%d", k);
		int owner = owner_of(0, rcluster_key_slot(key, strlen(key)));

		if (owner >= 0)
			freeReplyObject(cmd(owner, "SET %s x", key));
	}
	CHECK_EQ(uswap_gc(spec, "c1-*", 0, NULL, NULL), 0);
	CHECK_EQ(uswap_gc(spec, NULL, 0, NULL, NULL), 30);
	for (int m = 0; m < nm; m++)
		CHECK_EQ(keys_on(masters[m], "uswap:5:*"), 0);
	check_all(u, ids, NR, 2000, "after uswap gc");
	for (int i = 0; i < NR; i++)
		CHECK_EQ(uswap_free(u, ids[i]), 0);
out:
	check_destroy(u);
	for (int m = 0; m < nm; m++)
		CHECK_EQ(keys_on(masters[m], "c1-*"), 0);
}

/*
 * A master stops answering (SIGSTOP) for a while (its replica told not to take over). Nothing hangs: a
 * load of one of its pages fails with -EIO within the timeout, pages of the other masters load (cluster-require-full-coverage no: else the whole cluster answers CLUSTERDOWN until the
 * failover), stores go to the next tier; no load ever returns wrong data. After SIGCONT every page
 * loads again.
 */
static void test_cluster_master_stopped(void)
{
	enum { NR = 30 };
	static unsigned char page[PAGE_SIZE], back[PAGE_SIZE];
	uswap_id_t ids[NR], id;
	char spec[112], key[32];
	int victim = -1, n, failed = 0, elsewhere_ok = 0, elsewhere = 0;
	unsigned tier = 9;
	uint64_t h = 0;
	struct uswap *u;

	snprintf(spec, sizeof(spec),
		 "redis-cluster://127.0.0.1:%d:prefix=c3-:replicas=1:timeout=300,zpool:lz4", node[2].port);
	CHECK_EQ(uswap_create(&u, spec), 0);
	if (!u)
		return;
	for (int i = 0; i < NR; i++) {
		fill_page(page, PK_TEXT, seed_for(6000 + (uint64_t)i));
		CHECK_EQ(uswap_store(u, page, 1, &ids[i]), 0);
	}
	for (int i = 0; i < NR_NODES && victim < 0; i++)
		if (is_master(i, &n) && keys_on(i, "c3-*") > 0)
			victim = i;
	CHECK(victim >= 0);
	if (victim < 0)
		goto out;
	for (int i = 0; i < NR_NODES; i++) /* the stopped master stays the owner of its slots */
		freeReplyObject(cmd(i, "CONFIG SET cluster-replica-no-failover yes"));
	kill(node[victim].pid, SIGSTOP);
	for (int i = 0; i < NR; i++) {
		int ret, owner;

		CHECK_EQ(testhook_page(u, ids[i], 0, &tier, &h), 0);
		snprintf(key, sizeof(key), "c3-%u", (unsigned)h);
		owner = owner_of(victim == 0 ? 1 : 0, rcluster_key_slot(key, strlen(key)));
		fill_page(page, PK_TEXT, seed_for(6000 + (uint64_t)i));
		memset(back, 0, PAGE_SIZE);
		ret = uswap_load(u, ids[i], back, 1);
		CHECK(ret == 0 || ret == -EIO);
		if (!ret)
			CHECK_MEM(page, back, PAGE_SIZE);
		failed += ret != 0;
		if (owner != victim) {
			elsewhere++;
			elsewhere_ok += !ret;
		}
	}
	CHECK(elsewhere > 0 && elsewhere < NR);
	CHECK_EQ(elsewhere_ok, elsewhere);
	CHECK_EQ(failed, NR - elsewhere);
	for (int i = 0; i < 8; i++) { /* every store lands somewhere and reads back */
		fill_page(page, PK_TEXT, seed_for(6100 + (uint64_t)i));
		CHECK_EQ(uswap_store(u, page, 1, &id), 0);
		CHECK_EQ(uswap_load(u, id, back, 1), 0);
		CHECK_MEM(page, back, PAGE_SIZE);
		CHECK_EQ(uswap_free(u, id), 0);
	}
	kill(node[victim].pid, SIGCONT);
	for (int i = 0; i < NR_NODES; i++)
		freeReplyObject(cmd(i, "CONFIG SET cluster-replica-no-failover no"));
	CHECK(wait_cluster(1));
	for (int i = 0; i < NR; i++) {
		fill_page(page, PK_TEXT, seed_for(6000 + (uint64_t)i));
		CHECK_EQ(uswap_load(u, ids[i], back, 1), 0);
		CHECK_MEM(page, back, PAGE_SIZE);
	}
	printf("  master stopped: %d of %d loads failed, %d of %d on other masters all loaded\n", failed, NR,
	       elsewhere_ok, elsewhere);
out:
	check_destroy(u);
}

/*
 * replicas=1: a store counts once a replica has it (WAIT). Kill a master: after its replica takes
 * over, every page stored before reads back. The promoted master has no replica left, so stores
 * whose keys land on it are refused and go to the next tier (a pool, for these compressible pages).
 */
static void test_cluster_master_killed_no_page_lost(void)
{
	enum { NR = 48, NR_AFTER = 60 };
	static unsigned char pages[16 * PAGE_SIZE], back[PAGE_SIZE];
	uswap_id_t ids[NR], after[NR_AFTER];
	struct rc_counters cnt = {0};
	int victim = -1, n, in_pool = 0, in_cluster = 0;
	char spec[112];
	struct uswap *u;

	snprintf(spec, sizeof(spec),
		 "redis-cluster://127.0.0.1:%d:prefix=c2-:replicas=1:timeout=3000,zpool:lz4", node[1].port);
	CHECK_EQ(uswap_create(&u, spec), 0);
	if (!u)
		return;
	for (int i = 0; i < NR; i++) {
		fill_pages(pages, folio_pages(i), PK_RANDOM, seed_for(3000 + (uint64_t)i));
		CHECK_EQ(uswap_store(u, pages, folio_pages(i), &ids[i]), 0);
	}
	for (int i = 0; i < NR_NODES && victim < 0; i++)
		if (is_master(i, &n) && keys_on(i, "c2-*") > 0)
			victim = i;
	CHECK(victim >= 0);
	if (victim < 0)
		goto out;
	kill(node[victim].pid, SIGKILL);
	waitpid(node[victim].pid, NULL, 0);
	node[victim].pid = 0;
	/* a load now may ride out the failover or fail with an error, but never returns wrong data */
	fill_pages(pages, 1, PK_RANDOM, seed_for(3000));
	if (!uswap_load(u, ids[0], back, 1))
		CHECK_MEM(pages, back, PAGE_SIZE);
	CHECK(wait_cluster(0));
	check_all(u, ids, NR, 3000, "after the failover");
	CHECK_EQ(redis_counters(testhook_tier(u, 0), &cnt), 0);
	CHECK(cnt.conn_errors > 0);
	for (int i = 0; i < NR_AFTER; i++) {
		unsigned tier = 9;
		uint64_t h;

		fill_pages(pages, 1, PK_TEXT, seed_for(4000 + (uint64_t)i));
		CHECK_EQ(uswap_store(u, pages, 1, &after[i]), 0);
		CHECK_EQ(testhook_page(u, after[i], 0, &tier, &h), 0);
		in_cluster += tier == 0;
		in_pool += tier == 1;
		CHECK_EQ(uswap_load(u, after[i], back, 1), 0);
		CHECK_MEM(pages, back, PAGE_SIZE);
	}
	CHECK(in_pool > 0);    /* keys of the replica-less master */
	CHECK(in_cluster > 0); /* the other two masters still have replicas */
	CHECK_EQ(in_pool + in_cluster, NR_AFTER);
out:
	check_destroy(u);
}

static void test_cluster_suite(void)
{
	cluster_start();
	test_cluster_spread_and_redirects();
	test_cluster_master_stopped();
	test_cluster_master_killed_no_page_lost();
	for (int i = 0; i < NR_NODES; i++)
		rserver_kill(&node[i]);
}

CHECK_MAIN(T(test_cluster_suite))
