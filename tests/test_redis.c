/*
 * test_redis.c - the remote tier on one server: key slots (rcluster.c), round
 * trips through a real redis-server started here (tests/rserver.c: killed at exit even when a check
 * fails), tampered values, db=, and a server that stops answering or dies mid-run.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <hiredis.h>

#include "uswap.h"

#include "../src/backend/backend.h"
#include "../src/backend/rcluster.h"
#include "check.h"
#include "core/testhook.h"
#include "rserver.h"

/*
 * The reclaim path allocates nothing: malloc is counted on the storing thread only (the tier's I/O
 * thread, where hiredis allocates, is not). Sanitizer builds keep their own malloc.
 */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define INTERPOSE 0
#else
#define INTERPOSE 1
static _Thread_local bool counting;
static _Thread_local unsigned long malloc_calls;
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);

void *malloc(size_t n)
{
	malloc_calls += counting;
	return __libc_malloc(n);
}

void *calloc(size_t a, size_t b)
{
	malloc_calls += counting;
	return __libc_calloc(a, b);
}

void *realloc(void *p, size_t n)
{
	malloc_calls += counting;
	return __libc_realloc(p, n);
}
#endif

static void test_key_slots(void)
{
	CHECK_EQ(rcluster_crc16("123456789", 9), 0x31c3); /* the cluster specification's check value */
	CHECK_EQ(rcluster_key_slot("foo", 3), 12182);
	CHECK_EQ(rcluster_key_slot("{user1000}.following", 20),
		 rcluster_key_slot("{user1000}.followers", 20));
	CHECK_EQ(rcluster_key_slot("{user1000}.following", 20), rcluster_key_slot("user1000", 8));
	CHECK_EQ(rcluster_key_slot("foo{}{bar}", 10), rcluster_crc16("foo{}{bar}", 10) % RC_SLOTS);
	CHECK_EQ(rcluster_key_slot("foo{{bar}}zap", 13), rcluster_key_slot("{bar", 4));
	CHECK_EQ(rcluster_key_slot("foo{bar}{zap}", 13), rcluster_key_slot("bar", 3));
	CHECK_EQ(rcluster_key_slot("", 0), 0);
}

static struct rserver srv;

static char *spec_for(char *buf, size_t len, const struct rserver *s, const char *opts)
{
	snprintf(buf, len, "redis://127.0.0.1:%d%s", s->port, opts);
	return buf;
}

static void test_redis_roundtrip_through_layer(void)
{
	static unsigned char pages[64 * PAGE_SIZE], back[64 * PAGE_SIZE];
	static const size_t sizes[] = {1, 4, 16, 64};
	uswap_id_t ids[4];
	struct uswap *u;
	char spec[96];

	CHECK_EQ(uswap_create(&u, spec_for(spec, sizeof(spec), &srv, ":prefix=t1")), 0);
	if (!u)
		return;
	for (size_t i = 0; i < 4; i++) {
		fill_pages(pages + 0, sizes[i], PK_MIXED, seed_for(i));
		CHECK_EQ(uswap_store(u, pages, sizes[i], &ids[i]), 0);
	}
	for (size_t i = 0; i < 4; i++) {
		fill_pages(pages, sizes[i], PK_MIXED, seed_for(i));
		memset(back, 0, sizes[i] * PAGE_SIZE);
		CHECK_EQ(uswap_load(u, ids[i], back, sizes[i]), 0);
		CHECK_MEM(pages, back, sizes[i] * PAGE_SIZE);
		CHECK_EQ(uswap_free(u, ids[i]), 0);
	}
	check_destroy(u);
}

/* The tier's I/O thread takes no signal the program blocks. */
static void test_redis_thread_blocks_signals(void)
{
	static unsigned char page[PAGE_SIZE], back[PAGE_SIZE];
	struct uswap *u;
	uswap_id_t id;
	char spec[96];

	CHECK_EQ(uswap_create(&u, spec_for(spec, sizeof(spec), &srv, ":prefix=sig")), 0);
	if (!u)
		return;
	fill_pages(page, 1, PK_RANDOM, seed_for(7));
	CHECK_EQ(uswap_store(u, page, 1, &id), 0);
	check_signals_stay_pending();
	CHECK_EQ(uswap_load(u, id, back, 1), 0);
	CHECK_MEM(page, back, PAGE_SIZE);
	CHECK_EQ(uswap_free(u, id), 0);
	check_destroy(u);
}

static long long count_keys(redisContext *c, const char *pattern)
{
	redisReply *r = redisCommand(c, "KEYS %s", pattern);
	long long n = r && r->type == REDIS_REPLY_ARRAY ? (long long)r->elements : -1;

	if (r)
		freeReplyObject(r);
	return n;
}

static void test_redis_db_option_and_deletes(void)
{
	static unsigned char pages[8 * PAGE_SIZE], back[8 * PAGE_SIZE];
	redisContext *c = rserver_connect(&srv);
	struct uswap *u = NULL;
	uswap_id_t id;
	char spec[96];

	CHECK(c != NULL);
	if (!c)
		return;
	CHECK_EQ(uswap_create(&u, spec_for(spec, sizeof(spec), &srv, ":db=3:prefix=tdb")), 0);
	if (!u)
		goto out;
	fill_pages(pages, 8, PK_RANDOM, seed_for(5));
	CHECK_EQ(uswap_store(u, pages, 8, &id), 0);
	CHECK_EQ(count_keys(c, "tdb[0-9]*"), 0); /* not in db 0 */
	freeReplyObject(redisCommand(c, "SELECT 3"));
	CHECK_EQ(count_keys(c, "tdb[0-9]*"), 8);
	CHECK_EQ(uswap_load(u, id, back, 8), 0);
	CHECK_MEM(pages, back, 8 * PAGE_SIZE);
	CHECK_EQ(uswap_free(u, id), 0);
	check_destroy(u); /* sends the queued DELs */
	CHECK_EQ(count_keys(c, "tdb[0-9]*"), 0);
	freeReplyObject(redisCommand(c, "SELECT 0"));
	CHECK(uswap_create(&u, spec_for(spec, sizeof(spec), &srv, ":db=100000")) < 0); /* SELECT refused */
	CHECK(strstr(uswap_errmsg(), "SELECT") != NULL);
	CHECK(uswap_create(&u, spec_for(spec, sizeof(spec), &srv, ":db=x")) < 0);
out:
	redisFree(c);
}

static void test_redis_store_allocates_nothing(void)
{
	static unsigned char pages[16 * PAGE_SIZE];
	static uswap_id_t ids[200];
	struct uswap *u = NULL;
	char spec[96];

	CHECK_EQ(uswap_create(&u, spec_for(spec, sizeof(spec), &srv, ":prefix=talloc")), 0);
	if (!u)
		return;
	fill_pages(pages, 16, PK_RANDOM, seed_for(77));
	uswap_store(u, pages, 1, &ids[0]); /* the I/O thread's first connection is made */
	uswap_free(u, ids[0]);
#if INTERPOSE
	counting = true;
	void *volatile probe = malloc(16); /* the counter counts */

	free(probe);
	CHECK_EQ(malloc_calls, 1);
	malloc_calls = 0;
#endif
	for (int i = 0; i < 200; i++)
		CHECK_EQ(uswap_store(u, pages, 1 + i % 16, &ids[i]), 0);
#if INTERPOSE
	counting = false;
	CHECK_EQ(malloc_calls, 0);
#endif
	for (int i = 0; i < 200; i++)
		CHECK_EQ(uswap_free(u, ids[i]), 0);
	check_destroy(u);
}

/* replicas=1 on a server without replicas: WAIT never gets its acknowledgement, the pool takes the pages. */
static void test_redis_replicas_missing_pass_to_next_tier(void)
{
	static unsigned char page[PAGE_SIZE], back[PAGE_SIZE];
	struct uswap *u = NULL;
	unsigned tier = 9;
	uint64_t h = 0;
	uswap_id_t id;
	char spec[128];

	snprintf(spec, sizeof(spec), "redis://127.0.0.1:%d:prefix=trep:replicas=1:timeout=200,zpool:lz4",
		 srv.port);
	CHECK_EQ(uswap_create(&u, spec), 0);
	if (!u)
		return;
	for (int i = 0; i < 8; i++) {
		fill_page(page, PK_TEXT, seed_for(600 + i));
		CHECK_EQ(uswap_store(u, page, 1, &id), 0);
		CHECK_EQ(testhook_page(u, id, 0, &tier, &h), 0);
		CHECK_EQ(tier, 1);
		CHECK_EQ(uswap_load(u, id, back, 1), 0);
		CHECK_MEM(page, back, PAGE_SIZE);
	}
	check_destroy(u);
	redisContext *c = rserver_connect(&srv);

	CHECK(c != NULL);
	if (c) {
		CHECK_EQ(count_keys(c, "trep*"), 0); /* the unacknowledged SETs were deleted again */
		redisFree(c);
	}
}

static void test_redis_refuses_evicting_server_and_bad_specs(void)
{
	struct uswap *u = NULL;
	char spec[160];
	redisContext *c = rserver_connect(&srv);
	redisReply *r;

	CHECK(c != NULL);
	if (!c)
		return;
	r = redisCommand(c, "CONFIG SET maxmemory-policy allkeys-lru");
	freeReplyObject(r);
	CHECK(uswap_create(&u, spec_for(spec, sizeof(spec), &srv, "")) < 0);
	CHECK(strstr(uswap_errmsg(), "noeviction") != NULL);
	r = redisCommand(c, "CONFIG SET maxmemory-policy noeviction");
	freeReplyObject(r);
	redisFree(c);
	CHECK(uswap_create(&u, "redis://127.0.0.1") < 0);
	CHECK(uswap_create(&u, "redis:127.0.0.1:1") < 0);
	CHECK(uswap_create(&u, spec_for(spec, sizeof(spec), &srv, ":bogus=1")) < 0);
	CHECK(uswap_create(&u, spec_for(spec, sizeof(spec), &srv, ":timeout=0")) < 0);
	CHECK(uswap_create(&u, spec_for(spec, sizeof(spec), &srv, ",127.0.0.1:1")) <
	      0); /* a list: cluster only */
	CHECK(uswap_create(&u, "redis-cluster://127.0.0.1:1:db=2") < 0);
	CHECK(strstr(uswap_errmsg(), "db=0") != NULL);
	/* the seeds' commas are not tier breaks: the tier is named and its connection refused */
	CHECK(uswap_create(&u, "redis-cluster://127.0.0.1:1,127.0.0.1:2:prefix=x,zpool:lz4") < 0);
	CHECK(strstr(uswap_errmsg(), "cannot connect to 127.0.0.1:1 or any other seed") != NULL);
	CHECK(uswap_create(&u, "same,redis-cluster://127.0.0.1:1,zpool:lz4") < 0);
	CHECK(strstr(uswap_errmsg(), "cannot connect") != NULL);
	snprintf(spec, sizeof(spec), "redis-cluster://127.0.0.1:%d", srv.port); /* not a cluster node */
	CHECK(uswap_create(&u, spec) < 0);
	CHECK(strstr(uswap_errmsg(), "CLUSTER SLOTS") != NULL);
	CHECK(uswap_create(&u, spec_for(spec, sizeof(spec), &srv, ":password-env=USWAP_NO_SUCH_VAR")) < 0);
}

/* An attacker with access to the server copies page b's value over page a's key. */
static void test_redis_value_swapped_on_server_is_rejected(void)
{
	static unsigned char pages[2 * PAGE_SIZE], back[2 * PAGE_SIZE];
	uswap_id_t a, b;
	struct uswap *u;
	char spec[96];

	CHECK_EQ(uswap_create(&u, spec_for(spec, sizeof(spec), &srv, ":prefix=t3")), 0);
	if (!u)
		return;
	fill_pages(pages, 2, PK_RANDOM, seed_for(99));
	CHECK_EQ(uswap_store(u, pages, 1, &a), 0);
	CHECK_EQ(uswap_store(u, pages + PAGE_SIZE, 1, &b), 0);
	redisContext *c = rserver_connect(&srv);
	redisReply *r = redisCommand(c, "KEYS t3[0-9]*");

	CHECK_EQ(r->elements, 2);
	if (r->elements == 2) {
		redisReply *v = redisCommand(c, "GET %s", r->element[1]->str);
		redisReply *s = redisCommand(c, "SET %s %b", r->element[0]->str, v->str, v->len);

		freeReplyObject(s);
		freeReplyObject(v);
	}
	freeReplyObject(r);
	redisFree(c);
	int ra = uswap_load(u, a, back, 1), rb = uswap_load(u, b, back + PAGE_SIZE, 1);

	CHECK(ra < 0 || rb < 0); /* whichever key was overwritten fails to open */
	check_destroy(u);
}

/* redis-cli as an operator would use it: a byte changed in place, a value replaced, a key deleted. */
static void test_redis_tampered_with_redis_cli(void)
{
	static unsigned char pages[3 * PAGE_SIZE], back[PAGE_SIZE];
	char spec[96], port[16], key[3][64];
	uswap_id_t ids[3];
	struct uswap *u;
	unsigned tier = 0;
	uint64_t h = 0;

	CHECK_EQ(uswap_create(&u, spec_for(spec, sizeof(spec), &srv, ":prefix=t4-")), 0);
	if (!u)
		return;
	snprintf(port, sizeof(port), "%d", srv.port);
	fill_pages(pages, 3, PK_TEXT, seed_for(7));
	for (int i = 0; i < 3; i++) {
		CHECK_EQ(uswap_store(u, pages + i * PAGE_SIZE, 1, &ids[i]), 0);
		CHECK_EQ(testhook_page(u, ids[i], 0, &tier, &h), 0);
		snprintf(key[i], sizeof(key[i]), "t4-%u", (unsigned)h);
		CHECK_EQ(uswap_load(u, ids[i], back, 1), 0); /* intact before */
	}
	/* The byte written must differ from the one stored (ciphertext: 1 time in 256 it is "x" already). */
	redisContext *c = rserver_connect(&srv);
	redisReply *was = c ? redisCommand(c, "GETRANGE %s 2000 2000", key[0]) : NULL;
	char byte[2] = "x";

	CHECK(was && was->type == REDIS_REPLY_STRING && was->len == 1);
	if (was && was->type == REDIS_REPLY_STRING && was->len == 1 && was->str[0] == 'x')
		byte[0] = 'y';
	if (was)
		freeReplyObject(was);
	if (c)
		redisFree(c);
	const char *flip[] = {"/usr/bin/redis-cli", "-p", port, "SETRANGE", key[0], "2000", byte, NULL};
	const char *repl[] = {"/usr/bin/redis-cli", "-p", port, "SET", key[1], "not a page", NULL};
	const char *del[] = {"/usr/bin/redis-cli", "-p", port, "DEL", key[2], NULL};

	CHECK_EQ(rserver_run(flip), 0);
	CHECK_EQ(rserver_run(repl), 0);
	CHECK_EQ(rserver_run(del), 0);
	for (int i = 0; i < 3; i++) {
		memset(back, 0, PAGE_SIZE);
		CHECK_EQ(uswap_load(u, ids[i], back, 1), -EIO);
		CHECK(strstr(uswap_errmsg(), "swap id") != NULL);
		CHECK(memcmp(back, pages + i * PAGE_SIZE, PAGE_SIZE) != 0 ||
		      i == 0); /* never the page silently */
	}
	check_destroy(u);
}

/*
 * The server stops answering (SIGSTOP), comes back, then dies (SIGKILL), under two stacks:
 * A "same,zpool,redis": redis is last, so a refused store leaves the page with the caller;
 * B "redis,zpool": stores pass to the pool. Pages in the other tiers stay intact throughout;
 * loads of the server's pages fail with an error naming the swap id, and nothing hangs (the
 * timeout bounds every call).
 */
static void test_redis_server_stops_then_dies(void)
{
	enum { NR = 6 };
	static unsigned char page[PAGE_SIZE], back[PAGE_SIZE];
	uswap_id_t ida[NR], idb[NR], id;
	struct uswap *a = NULL, *b = NULL;
	struct rserver s;
	char spec[160];
	unsigned tier = 0;
	uint64_t h = 0;

	if (rserver_start(&s, "noeviction", NULL)) {
		CHECK(!"redis-server did not start");
		return;
	}
	snprintf(spec, sizeof(spec), "same,zpool:lz4,redis://127.0.0.1:%d:prefix=ka:timeout=300", s.port);
	CHECK_EQ(uswap_create(&a, spec), 0);
	snprintf(spec, sizeof(spec), "redis://127.0.0.1:%d:prefix=kb:timeout=300,zpool:lz4", s.port);
	CHECK_EQ(uswap_create(&b, spec), 0);
	if (!a || !b)
		goto out;
	/* A: i % 3 == 0 same-filled -> same, 1 text -> zpool, 2 random -> redis; B: all redis */
	for (int i = 0; i < NR; i++) {
		fill_page(page, i % 3 == 0 ? PK_SAME : i % 3 == 1 ? PK_TEXT : PK_RANDOM, seed_for(100 + i));
		CHECK_EQ(uswap_store(a, page, 1, &ida[i]), 0);
		CHECK_EQ(testhook_page(a, ida[i], 0, &tier, &h), 0);
		CHECK_EQ(tier, (unsigned)(i % 3));
		fill_page(page, PK_TEXT, seed_for(200 + i));
		CHECK_EQ(uswap_store(b, page, 1, &idb[i]), 0);
		CHECK_EQ(testhook_page(b, idb[i], 0, &tier, &h), 0);
		CHECK_EQ(tier, 0);
	}
	for (int round = 0; round < 2; round++) {
		kill(s.pid, round ? SIGKILL : SIGSTOP);
		for (int i = 0; i < NR; i++) {
			int ret;

			fill_page(page,
				  i % 3 == 0   ? PK_SAME
				  : i % 3 == 1 ? PK_TEXT
					       : PK_RANDOM,
				  seed_for(100 + i));
			ret = uswap_load(a, ida[i], back, 1);
			if (i % 3 == 2) {
				CHECK_EQ(ret, -EIO);
				CHECK(strstr(uswap_errmsg(), "swap id") != NULL);
			} else {
				CHECK_EQ(ret, 0);
				CHECK_MEM(page, back, PAGE_SIZE);
			}
			CHECK_EQ(uswap_load(b, idb[i], back, 1), -EIO);
		}
		/* A: a random page has no tier left and stays with the caller, unchanged */
		fill_page(page, PK_RANDOM, seed_for(300));
		memcpy(back, page, PAGE_SIZE);
		CHECK(uswap_store(a, page, 1, &id) < 0);
		CHECK_MEM(page, back, PAGE_SIZE);
		/* B: stores pass to the pool and come back intact */
		for (int i = 0; i < 4; i++) {
			fill_page(page, PK_TEXT, seed_for(400 + i));
			CHECK_EQ(uswap_store(b, page, 1, &id), 0);
			CHECK_EQ(testhook_page(b, id, 0, &tier, &h), 0);
			CHECK_EQ(tier, 1);
			CHECK_EQ(uswap_load(b, id, back, 1), 0);
			CHECK_MEM(page, back, PAGE_SIZE);
			CHECK_EQ(uswap_free(b, id), 0);
		}
		if (round)
			break;
		/* it answers again: every page is back, and the tier takes stores again */
		kill(s.pid, SIGCONT);
		for (int i = 0; i < NR; i++) {
			fill_page(page,
				  i % 3 == 0   ? PK_SAME
				  : i % 3 == 1 ? PK_TEXT
					       : PK_RANDOM,
				  seed_for(100 + i));
			CHECK_EQ(uswap_load(a, ida[i], back, 1), 0);
			CHECK_MEM(page, back, PAGE_SIZE);
			fill_page(page, PK_TEXT, seed_for(200 + i));
			CHECK_EQ(uswap_load(b, idb[i], back, 1), 0);
			CHECK_MEM(page, back, PAGE_SIZE);
		}
		fill_page(page, PK_RANDOM, seed_for(301));
		CHECK_EQ(uswap_store(a, page, 1, &id), 0);
		CHECK_EQ(uswap_load(a, id, back, 1), 0);
		CHECK_MEM(page, back, PAGE_SIZE);
		CHECK_EQ(uswap_free(a, id), 0);
	}
out:
	if (a)
		check_destroy(a); /* its DELs cannot go anywhere: destroy must not hang either */
	if (b)
		check_destroy(b);
	rserver_kill(&s);
}

static void test_redis_suite(void)
{
	if (!rserver_available())
		check_skip("redis-server or redis-cli not installed");
	if (rserver_start(&srv, "noeviction", NULL))
		check_skip("redis-server did not come up");
	test_redis_roundtrip_through_layer();
	test_redis_thread_blocks_signals();
	test_redis_store_allocates_nothing();
	test_redis_db_option_and_deletes();
	test_redis_value_swapped_on_server_is_rejected();
	test_redis_tampered_with_redis_cli();
	test_redis_replicas_missing_pass_to_next_tier();
	test_redis_refuses_evicting_server_and_bad_specs();
	test_redis_server_stops_then_dies();
	rserver_kill(&srv);
}

CHECK_MAIN(T(test_key_slots), T(test_redis_suite))
