/*
 * test_lease.c - remote pages under a lease, with a redis-server started here (tests/rserver.c):
 * the keys of a client killed with SIGKILL leave by themselves within the lease; a client stopped
 * (SIGSTOP) for longer than a renewal period but less than the lease keeps every page, one stopped for
 * longer than the lease loses its pages (loads fail, never with wrong data); `uswap gc` removes the
 * keys of dead instances and leaves those of live ones. Leases of 2-4 s keep it to ~10 s.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis.h>

#include "uswap.h"

#include "../src/backend/backend.h"
#include "../src/backend/lease.h"
#include "../src/backend/redis.h"
#include "check.h"
#include "core/testhook.h"
#include "rserver.h"

#define NR_FOLIOS 16
#define FOLIO     4 /* pages: 64 keys a client */

static struct rserver srv;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void msleep(unsigned ms)
{
	nanosleep(&(struct timespec){ms / 1000, (long)(ms % 1000) * 1000000L}, NULL);
}

static long long count_keys(const char *pattern)
{
	redisContext *c = rserver_connect(&srv);
	redisReply *r = c ? redisCommand(c, "KEYS %s", pattern) : NULL;
	long long n = r && r->type == REDIS_REPLY_ARRAY ? (long long)r->elements : -1;

	if (r)
		freeReplyObject(r);
	if (c)
		redisFree(c);
	return n;
}

static long long pttl(const char *key)
{
	redisContext *c = rserver_connect(&srv);
	redisReply *r = c ? redisCommand(c, "PTTL %s", key) : NULL;
	long long n = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -3;

	if (r)
		freeReplyObject(r);
	if (c)
		redisFree(c);
	return n;
}

/* A client process: stores its pages, says 'S', then on 'L' loads them all and exits with the verdict. */
struct client {
	pid_t pid;
	int cmd, ack; /* parent's ends: write commands, read 'S' */
};

enum verdict { V_ALL_BACK = 0, V_SOME_EIO = 1, V_WRONG_DATA = 2, V_SETUP = 3, V_LOST_UNNOTICED = 4 };

static void client_main(const char *spec, int cmd, int ack, uint64_t seed)
{
	static unsigned char page[FOLIO * PAGE_SIZE], back[FOLIO * PAGE_SIZE];
	struct lease_stats ls = {0};
	uswap_id_t ids[NR_FOLIOS];
	struct uswap *u;
	int eio = 0, wrong = 0;
	char c;

	if (uswap_create(&u, spec))
		_exit(V_SETUP);
	for (int i = 0; i < NR_FOLIOS; i++) {
		fill_pages(page, FOLIO, PK_RANDOM, seed + (uint64_t)i);
		if (uswap_store(u, page, FOLIO, &ids[i]))
			_exit(V_SETUP);
	}
	if (write(ack, "S", 1) != 1 || read(cmd, &c, 1) != 1)
		_exit(V_SETUP);
	for (int i = 0; i < NR_FOLIOS; i++) {
		int ret;

		fill_pages(page, FOLIO, PK_RANDOM, seed + (uint64_t)i);
		memset(back, 0, sizeof(back));
		ret = uswap_load(u, ids[i], back, FOLIO);
		if (ret == -EIO)
			eio++;
		else if (ret || memcmp(page, back, sizeof(back)))
			wrong++;
	}
	if (eio) { /* two sweeps more: one of them ran wholly after SIGCONT and found the keys gone */
		redis_lease_stats(testhook_tier(u, 0), &ls);
		for (uint64_t s0 = ls.sweeps, t0 = now_ms(); ls.sweeps < s0 + 2 && now_ms() - t0 < 10000;) {
			msleep(20);
			redis_lease_stats(testhook_tier(u, 0), &ls);
		}
	}
	uswap_destroy(u);
	if (wrong)
		_exit(V_WRONG_DATA);
	if (eio)
		_exit(ls.missing ? V_SOME_EIO : V_LOST_UNNOTICED); /* the lease thread saw the keys go */
	_exit(V_ALL_BACK);
}

/* Start a client on @spec; return once its pages are stored. */
static int client_start(struct client *cl, const char *spec, uint64_t seed)
{
	int to_child[2], to_parent[2];
	char c;

	if (pipe(to_child) || pipe(to_parent))
		return -1;
	fflush(NULL);
	cl->pid = fork();
	if (cl->pid == 0) {
		close(to_child[1]);
		close(to_parent[0]);
		client_main(spec, to_child[0], to_parent[1], seed);
	}
	close(to_child[0]);
	close(to_parent[1]);
	cl->cmd = to_child[1];
	cl->ack = to_parent[0];
	if (cl->pid < 0 || read(cl->ack, &c, 1) != 1 || c != 'S')
		return -1;
	return 0;
}

/* Tell the client to load everything; Return: its verdict, or -1. */
static int client_finish(struct client *cl)
{
	int st = 0;

	if (write(cl->cmd, "L", 1) != 1)
		kill(cl->pid, SIGKILL);
	waitpid(cl->pid, &st, 0);
	close(cl->cmd);
	close(cl->ack);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Poll until @pattern matches no key, at most @max_ms. Return: ms it took, or -1. */
static long wait_no_keys(const char *pattern, uint64_t max_ms)
{
	uint64_t t0 = now_ms();

	while (count_keys(pattern) != 0) {
		if (now_ms() - t0 > max_ms)
			return -1;
		msleep(50);
	}
	return (long)(now_ms() - t0);
}

/*
 * Two clients with lease=2s: A is killed with SIGKILL, B stopped with SIGSTOP for longer than the
 * lease. A's keys, alive key included, are gone within the lease (plus the server's expiry cycle);
 * B's pages are gone too, and once continued its loads fail with -EIO, never with other data.
 */
static void test_lease_killed_client_leaves_nothing(void)
{
	struct client a, b;
	char spec[160];
	long ms;

	snprintf(spec, sizeof(spec), "redis://127.0.0.1:%d:prefix=lka-:lease=2s", srv.port);
	CHECK_EQ(client_start(&a, spec, seed_for(1)), 0);
	snprintf(spec, sizeof(spec), "redis://127.0.0.1:%d:prefix=lkb-:lease=2s", srv.port);
	CHECK_EQ(client_start(&b, spec, seed_for(2)), 0);
	CHECK_EQ(count_keys("lka-[0-9]*"), NR_FOLIOS * FOLIO);
	CHECK_EQ(count_keys("lka-alive"), 1);
	long long t = pttl("lka-0");

	CHECK(t > 0 && t <= 2000); /* a lease, not a key for ever */
	kill(a.pid, SIGKILL);
	kill(b.pid, SIGSTOP);
	ms = wait_no_keys("lka-*", 2000 + 3000);
	CHECK(ms >= 0);
	fprintf(stderr, "     killed client's keys gone %ld ms after SIGKILL (lease 2000 ms)\n", ms);
	CHECK(wait_no_keys("lkb-*", 3000) >= 0); /* the stopped one's: gone by now too */
	kill(b.pid, SIGCONT);
	CHECK_EQ(client_finish(&b), V_SOME_EIO);
	waitpid(a.pid, NULL, 0);
	close(a.cmd);
	close(a.ack);
}

/*
 * lease=4s renews every second. A client stopped for 2 s (two renewal periods, half the lease) keeps
 * every key, and once continued loads every page intact.
 */
static void test_lease_stopped_client_keeps_pages(void)
{
	struct client c;
	char spec[160];

	snprintf(spec, sizeof(spec), "redis://127.0.0.1:%d:prefix=lks-:lease=4s", srv.port);
	CHECK_EQ(client_start(&c, spec, seed_for(3)), 0);
	kill(c.pid, SIGSTOP);
	msleep(2000);
	long long t = pttl("lks-0");

	CHECK(t > 0 && t < 4000 - 1000); /* nobody renewed it while stopped */
	CHECK_EQ(count_keys("lks-[0-9]*"), NR_FOLIOS * FOLIO);
	kill(c.pid, SIGCONT);
	CHECK_EQ(client_finish(&c), V_ALL_BACK);
	CHECK_EQ(count_keys("lks-*"), 0); /* a clean exit took its alive key too */
}

/* A live layer in this process renews its keys: after three leases every page is still there. */
static void test_lease_live_layer_renews(void)
{
	static unsigned char page[PAGE_SIZE], back[PAGE_SIZE];
	struct lease_stats ls = {0};
	uswap_id_t ids[8];
	struct uswap *u;
	char spec[160];

	snprintf(spec, sizeof(spec), "redis://127.0.0.1:%d:prefix=lkl-:lease=1s", srv.port);
	CHECK_EQ(uswap_create(&u, spec), 0);
	if (!u)
		return;
	for (int i = 0; i < 8; i++) {
		fill_page(page, PK_RANDOM, seed_for(40 + (uint64_t)i));
		CHECK_EQ(uswap_store(u, page, 1, &ids[i]), 0);
	}
	CHECK_EQ(uswap_free(u, ids[7]), 0); /* a released page is not renewed */
	msleep(3000);
	for (int i = 0; i < 7; i++) {
		fill_page(page, PK_RANDOM, seed_for(40 + (uint64_t)i));
		CHECK_EQ(uswap_load(u, ids[i], back, 1), 0);
		CHECK_MEM(page, back, PAGE_SIZE);
	}
	CHECK_EQ(redis_lease_stats(testhook_tier(u, 0), &ls), 0);
	CHECK(ls.sweeps >= 6);
	CHECK_EQ(ls.missing, 0);
	CHECK_EQ(ls.last_sweep_keys, 7);
	uswap_destroy(u);
	CHECK(uswap_create(&u, "redis://127.0.0.1:1:lease=0") < 0); /* below 1 s */
	CHECK(strstr(uswap_errmsg(), "lease") != NULL);
	CHECK(uswap_create(&u, "redis://127.0.0.1:1:lease=5x") < 0);
	CHECK(uswap_check_tiers("redis://127.0.0.1:1:lease=nan") < 0);
	CHECK(uswap_check_tiers("redis://127.0.0.1:1:lease=25h") < 0);
	CHECK_EQ(uswap_check_tiers("redis://127.0.0.1:1:lease=1500ms"), 0);
	CHECK_EQ(uswap_check_tiers("redis://127.0.0.1:1:lease=10m"), 0);
}

static void set_raw(const char *key, const char *val, size_t len)
{
	redisContext *c = rserver_connect(&srv);
	redisReply *r = c ? redisCommand(c, "SET %s %b", key, val, len) : NULL;

	CHECK(r && r->type == REDIS_REPLY_STATUS);
	if (r)
		freeReplyObject(r);
	if (c)
		redisFree(c);
}

struct seen {
	int dead, alive;
	char dead_why[256];
};

static void on_instance(const struct uswap_gc_instance *in, void *arg)
{
	struct seen *s = arg;

	if (in->alive) {
		s->alive++;
	} else {
		s->dead++;
		snprintf(s->dead_why, sizeof(s->dead_why), "%s", in->why);
	}
}

/*
 * uswap gc with four instances on the server: a client killed with SIGKILL (default prefix
 * uswap:PID:, lease 1 h: its keys would stay an hour), this process's own live layer, an instance of
 * another host (an alive key written by hand) and keys without an alive key. The killed client's
 * keys and the keys without an owner go; the others stay, and this process's pages still load.
 */
static void test_gc_removes_dead_instances_only(void)
{
	static unsigned char page[PAGE_SIZE], back[PAGE_SIZE];
	char spec[160], pattern[64], alive[LEASE_ALIVE_LEN];
	struct seen s = {0};
	struct uswap *u = NULL;
	struct client k;
	uswap_id_t id;

	snprintf(spec, sizeof(spec), "redis://127.0.0.1:%d:lease=1h", srv.port);
	CHECK_EQ(client_start(&k, spec, seed_for(5)), 0);
	kill(k.pid, SIGKILL);
	waitpid(k.pid, NULL, 0);
	close(k.cmd);
	close(k.ack);
	snprintf(pattern, sizeof(pattern), "uswap:%d:*", (int)k.pid);
	CHECK_EQ(count_keys(pattern), NR_FOLIOS * FOLIO + 1);
	CHECK_EQ(uswap_create(&u, spec), 0); /* ours: uswap:OURPID: */
	if (!u)
		return;
	fill_page(page, PK_RANDOM, seed_for(6));
	CHECK_EQ(uswap_store(u, page, 1, &id), 0);
	memset(alive, ' ', sizeof(alive));
	memcpy(alive, "uswap-alive host=elsewhere boot=x pidns=1 pid=4 start=5", 56);
	set_raw("uswap:4:alive", alive, sizeof(alive));
	set_raw("uswap:4:1", "x", 1);
	set_raw("uswap:5:1", "x", 1); /* no alive key */
	set_raw("uswap:5:2", "x", 1);
	set_raw("other:7", "x", 1); /* not matched */

	CHECK_EQ(uswap_gc(spec, NULL, 1, on_instance, &s), NR_FOLIOS * FOLIO + 1 + 2); /* dry run */
	CHECK_EQ(s.dead, 2);
	CHECK_EQ(s.alive, 2);
	CHECK_EQ(count_keys(pattern), NR_FOLIOS * FOLIO + 1);
	memset(&s, 0, sizeof(s));
	CHECK_EQ(uswap_gc(spec, NULL, 0, on_instance, &s), NR_FOLIOS * FOLIO + 1 + 2);
	CHECK_EQ(count_keys(pattern), 0);
	CHECK_EQ(count_keys("uswap:5:*"), 0);
	CHECK_EQ(count_keys("uswap:4:*"), 2);
	CHECK_EQ(count_keys("other:*"), 1);
	snprintf(pattern, sizeof(pattern), "uswap:%d:*", (int)getpid());
	CHECK_EQ(count_keys(pattern), 2);
	CHECK_EQ(uswap_load(u, id, back, 1), 0);
	CHECK_MEM(page, back, PAGE_SIZE);

	/* the command, as an operator runs it: nothing dead is left */
	char exe[PATH_MAX], out[PATH_MAX + 32];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	if (n > 0) {
		exe[n] = '\0';
		*strrchr(exe, '/') = '\0';
		snprintf(out, sizeof(out), "%s/../uswap", exe);
		char *argv[] = {out, "gc", spec, NULL};

		CHECK_EQ(rserver_run((const char *const *)argv), 0);
		char *bad[] = {out, "gc", "redis:nowhere", NULL};

		CHECK_EQ(rserver_run((const char *const *)bad), 2);
	}
	uswap_destroy(u);
	CHECK_EQ(count_keys(pattern), 0);
}

static void test_lease_suite(void)
{
	if (!rserver_available())
		check_skip("redis-server or redis-cli not installed");
	if (rserver_start(&srv, "noeviction", NULL))
		check_skip("redis-server did not come up");
	test_lease_killed_client_leaves_nothing();
	test_lease_stopped_client_keeps_pages();
	test_lease_live_layer_renews();
	test_gc_removes_dead_instances_only();
	rserver_kill(&srv);
}

CHECK_MAIN(T(test_lease_suite))
