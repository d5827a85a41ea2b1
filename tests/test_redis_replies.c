/*
 * test_redis_replies.c - the remote tier against replies a real server never sends, from a fake Redis
 * server (tests/fakeredis.c) scripted per command: at open (AUTH, SELECT, CLUSTER INFO, CONFIG GET,
 * the alive key's SET), on stores (SET, WAIT), loads (GET), frees (DEL), lease renewals (PEXPIRE),
 * `uswap gc` (SCAN), and for the cluster client (CLUSTER SLOTS, MOVED, ASK). Replies of the wrong type,
 * errors, truncated ones followed by a close, garbage, huge declared lengths, silence, a trickle and a
 * flood. The rule for each: a clear error (naming the tier or server, and for a load the swap id), no
 * crash, no hang (the tier's timeout bounds every call; a watchdog turns a hang into a failure), and
 * nothing lost: a store that got a bad reply is reported as not stored, a load that got one fails
 * (never wrong data as success) and the page loads intact once the server answers well again. Then
 * the same under a memory region, and a fuzz of mutated replies (USWAP_FUZZ_SEED=N replays). A real
 * redis-server (tests/rserver.c) gives the error a real server does send: OOM at maxmemory.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <hiredis.h>

#include "uswap.h"

#include "../src/backend/rcluster.h"
#include "check.h"
#include "fakeredis.h"
#include "mutate.h"
#include "rserver.h"

/*
 * The tier's timeout here: each bad reply that is silence costs a store or a load this long, and a
 * server thread that has not run for this long (a loaded machine) looks like one that hangs.
 */
#define TIMEOUT_MS 500
#define PAGE_SIZE  USWAP_PAGE_SIZE

/* ---- a watchdog: a call that never returns fails the test instead of running into the runner's timeout */

static const char *guarded;

static void on_alarm(int sig)
{
	static const char msg[] = "\nhang: a call did not return within 120 s: ";

	(void)sig;
	if (write(2, msg, sizeof(msg) - 1) < 0 || write(2, guarded, strlen(guarded)) < 0 ||
	    write(2, "\n", 1) < 0)
		_exit(3);
	_exit(3);
}

static void guard(const char *what)
{
	guarded = what;
	signal(SIGALRM, on_alarm);
	alarm(120); /* many times what the tier's timeout allows a call; loaded sanitizer runs included */
}

static void unguard(void)
{
	alarm(0);
}

static void pause_ms(long ms)
{
	nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000}, NULL);
}

/*
 * A store once the server answers well again: after a failed connection the tier skips the server
 * for a while (a second; stores go to the next tier meanwhile), so it is offered again until taken.
 */
static int store_when_back(struct uswap *u, const void *page, uswap_id_t *id)
{
	int ret = -EIO;

	for (int i = 0; i < 400 && ret; i++) {
		ret = uswap_store(u, page, 1, id);
		if (ret)
			pause_ms(10);
	}
	return ret;
}

/* ---- bad replies ---- */

struct bad {
	const char *name;
	const char *reply; /* NULL: huge (filled in) */
	size_t len;        /* 0: strlen(reply) */
	enum fake_action action;
};

#define B(name, reply, action)                                                                               \
	{                                                                                                    \
		name, reply, 0, action                                                                       \
	}

/* Replies no command of the tier expects (each is wrong for SET, GET, DEL, PEXPIRE, WAIT alike or nearly). */
static const struct bad bad_replies[] = {
	B("array", "*1\r\n$2\r\nOK\r\n", FAKE_REPLY),
	B("empty array", "*0\r\n", FAKE_REPLY),
	B("nil array", "*-1\r\n", FAKE_REPLY),
	B("error", "-ERR injected failure\r\n", FAKE_REPLY),
	B("truncated then closed", "+O", FAKE_CLOSE),
	B("half a bulk then closed", "$4136\r\nabcdef", FAKE_CLOSE),
	B("closed without a reply", "", FAKE_CLOSE),
	B("no reply", "", FAKE_STALL),
	B("half a reply then silence", "$4136\r\nab", FAKE_STALL),
	B("huge bulk length then silence", "$999999999999\r\n", FAKE_STALL),
	B("huge array length then silence", "*999999999999\r\n", FAKE_STALL),
	B("huge bulk length then a flood", "$999999999999\r\n", FAKE_FLOOD),
	B("huge bulk length then a trickle", "$999999999999\r\n", FAKE_TRICKLE),
	B("a reply a byte at a time for ever", "$4136\r\n", FAKE_TRICKLE),
	B("garbage", "\x01\x02\xff garbage\r\n", FAKE_REPLY),
	B("garbage then silence", "hello world\r\n", FAKE_STALL),
	B("negative bulk length", "$-7\r\n", FAKE_REPLY),
	B("non-numeric length", "$abc\r\n", FAKE_REPLY),
	B("RESP3 null", "_\r\n", FAKE_REPLY),
	B("RESP3 double", ",1.5\r\n", FAKE_REPLY),
	B("RESP3 map", "%1\r\n+a\r\n+b\r\n", FAKE_REPLY),
	B("no CRLF", "+OK", FAKE_STALL),
	B("LF only", "+OK\n", FAKE_STALL),
};

/* Per command: replies of a type it does not take (in addition to the table above). */
static const struct bad set_wrong[] = {
	B("integer", ":1\r\n", FAKE_REPLY),
	B("bulk OK", "$2\r\nOK\r\n", FAKE_REPLY),
	B("nil", "$-1\r\n", FAKE_REPLY),
	B("out of memory", "-OOM command not allowed when used memory > 'maxmemory'.\r\n", FAKE_REPLY),
};

static const struct bad get_wrong[] = {
	B("integer", ":1\r\n", FAKE_REPLY),
	B("status", "+OK\r\n", FAKE_REPLY),
	B("short bulk", "$5\r\nhello\r\n", FAKE_REPLY),
	B("long bulk", NULL, FAKE_REPLY), /* 8 KiB */
	B("bulk of the right length, not a sealed page", NULL, FAKE_REPLY),
	B("nil", "$-1\r\n", FAKE_REPLY),
	B("MOVED outside a cluster", "-MOVED 1 127.0.0.1:1\r\n", FAKE_REPLY),
	B("LOADING", "-LOADING Redis is loading the dataset in memory\r\n", FAKE_REPLY),
};

static size_t bad_len(const struct bad *b)
{
	return b->len ? b->len : strlen(b->reply);
}

static char spec_buf[256];

static const char *spec_of(const struct fake_redis *f, const char *scheme, const char *opts)
{
	snprintf(spec_buf, sizeof(spec_buf), "%s://127.0.0.1:%d:timeout=%d%s", scheme, fake_port(f),
		 TIMEOUT_MS, opts);
	return spec_buf;
}

/* The message of the last call names the tier (its spec) or at least its server. */
static bool names_tier(const struct fake_redis *f)
{
	char hp[32];

	snprintf(hp, sizeof(hp), "127.0.0.1:%d", fake_port(f));
	return strstr(uswap_errmsg(), hp) != NULL;
}

static void script_bad(struct fake_redis *f, const char *cmd, const char *key_has, unsigned count,
		       const struct bad *b)
{
	static char big[8192 + 64];

	if (b->reply) {
		fake_script(f, cmd, key_has, 0, count, b->reply, bad_len(b), b->action);
		return;
	}
	/* a bulk: 8 KiB, or exactly the sealed size (4096 + 40) of noise */
	size_t n = strstr(b->name, "right length") ? 4136 : 8192;
	int h = snprintf(big, sizeof(big), "$%zu\r\n", n);

	fill_pages(big + h, 2, PK_RANDOM, seed_for(n));
	memcpy(big + h + n, "\r\n", 2);
	fake_script(f, cmd, key_has, 0, count, big, (size_t)h + n + 2, b->action);
}

/*
 * A layer on @f, alone (a page it refuses stays with the caller) with two pages stored while the
 * server behaved. Return: the layer, or NULL (a failed check).
 */
static struct uswap *layer_with_pages(struct fake_redis *f, const char *opts, unsigned char *pages,
				      uswap_id_t *ids)
{
	struct uswap *u = NULL;
	int ret = -EIO;

	for (int tries = 0; tries < 5 && ret; tries++) /* a loaded machine: the server may answer late */
		ret = uswap_create(&u, spec_of(f, "redis", opts));
	if (ret) {
		fprintf(stderr, "[%s] %s: %d %s\n", check_test, spec_buf, ret, uswap_errmsg());
		CHECK_EQ(ret, 0);
		return NULL;
	}
	fill_pages(pages, 2, PK_RANDOM, seed_for(fake_port(f)));
	for (int i = 0; i < 2; i++)
		CHECK_EQ(store_when_back(u, pages + i * PAGE_SIZE, &ids[i]), 0);
	return u;
}

/*
 * Each page of @ids loads intact (the server answers well again). A load may still time out on a
 * loaded machine (the timeout is short, to keep the test short): a page is lost only if it never
 * comes back.
 */
static void pages_intact(struct uswap *u, const unsigned char *pages, const uswap_id_t *ids, int n)
{
	static unsigned char back[PAGE_SIZE];

	for (int i = 0; i < n; i++) {
		int ret = -EIO;

		for (int tries = 0; tries < 5 && ret; tries++) {
			memset(back, 0, PAGE_SIZE);
			ret = uswap_load(u, ids[i], back, 1);
			if (ret)
				fprintf(stderr, "[%s] after %s: load of swap id %llu: %d \"%s\"\n",
					check_test, guarded, (unsigned long long)ids[i], ret, uswap_errmsg());
		}
		CHECK_EQ(ret, 0);
		CHECK_MEM(pages + i * PAGE_SIZE, back, PAGE_SIZE);
	}
}

static void fake_up(struct fake_redis **f, bool cluster)
{
	if (fake_start(f, cluster))
		check_skip("cannot listen on a loopback port");
}

/* Stores whose SET gets a bad reply: refused (the caller keeps the page), the tier works again after. */
static void store_bad(struct fake_redis *f, const struct bad *b)
{
	static unsigned char pages[3 * PAGE_SIZE];
	uswap_id_t ids[3];
	struct uswap *u;
	int ret;

	u = layer_with_pages(f, ":prefix=st", pages, ids);
	if (!u)
		return;
	guard(b->name);
	script_bad(f, "SET", NULL, 0, b);
	fill_pages(pages + 2 * PAGE_SIZE, 1, PK_RANDOM, seed_for(3));
	ret = uswap_store(u, pages + 2 * PAGE_SIZE, 1, &ids[2]);
	if (ret >= 0 || !names_tier(f)) {
		fprintf(stderr, "[%s] SET answered with %s: store %d \"%s\"\n", check_test, b->name, ret,
			uswap_errmsg());
		CHECK(ret < 0);
		CHECK(names_tier(f));
	}
	fake_clear(f);
	/* the server answers well again: the tier takes pages, and the earlier ones are there */
	CHECK_EQ(store_when_back(u, pages + 2 * PAGE_SIZE, &ids[2]), 0);
	pages_intact(u, pages, ids, 3);
	check_destroy(u);
	unguard();
	if (fake_keys(f, "st")) { /* the refused SET's key, if it was set, was deleted again */
		fprintf(stderr, "[%s] SET answered with %s: %lu keys left on the server\n", check_test,
			b->name, fake_keys(f, "st"));
		CHECK_EQ(fake_keys(f, "st"), 0);
	}
}

static void store_bad_replies(void)
{
	struct fake_redis *f;

	fake_up(&f, false);
	for (size_t i = 0; i < sizeof(bad_replies) / sizeof(bad_replies[0]); i++)
		store_bad(f, &bad_replies[i]);
	for (size_t i = 0; i < sizeof(set_wrong) / sizeof(set_wrong[0]); i++)
		store_bad(f, &set_wrong[i]);
	fake_stop(f);
}

/* Loads whose GET gets a bad reply: -EIO naming the swap id, never data; intact once it answers well. */
static void load_bad(struct fake_redis *f, const struct bad *b)
{
	static unsigned char pages[2 * PAGE_SIZE], back[PAGE_SIZE];
	uswap_id_t ids[2];
	struct uswap *u;
	char id[32];
	int ret;

	u = layer_with_pages(f, ":prefix=ld", pages, ids);
	if (!u)
		return;
	guard(b->name);
	script_bad(f, "GET", NULL, 0, b);
	memset(back, 0, PAGE_SIZE);
	ret = uswap_load(u, ids[1], back, 1);
	snprintf(id, sizeof(id), "swap id %llu", (unsigned long long)ids[1]);
	if (ret != -EIO || !strstr(uswap_errmsg(), id) || !names_tier(f)) {
		fprintf(stderr, "[%s] GET answered with %s: load %d \"%s\"\n", check_test, b->name, ret,
			uswap_errmsg());
		CHECK_EQ(ret, -EIO);
		CHECK(strstr(uswap_errmsg(), id));
		CHECK(names_tier(f));
	}
	fake_clear(f);
	pages_intact(u, pages, ids, 2);
	check_destroy(u);
	unguard();
}

static void load_bad_replies(void)
{
	struct fake_redis *f;

	fake_up(&f, false);
	for (size_t i = 0; i < sizeof(bad_replies) / sizeof(bad_replies[0]); i++)
		load_bad(f, &bad_replies[i]);
	for (size_t i = 0; i < sizeof(get_wrong) / sizeof(get_wrong[0]); i++)
		load_bad(f, &get_wrong[i]);
	fake_stop(f);
}

/* A mutator that appends @append to the true reply of the next @left commands named @cmd. */
struct extra {
	const char *cmd, *append;
	int left;
};

static long append_reply(void *arg, const char *cmd, unsigned char *reply, size_t len, size_t cap,
			 enum fake_action *action)
{
	struct extra *e = arg;
	size_t n = strlen(e->append);

	(void)action;
	if (strcmp(cmd, e->cmd) || e->left <= 0 || len + n > cap)
		return -1;
	e->left--;
	memcpy(reply + len, e->append, n);
	return (long)(len + n);
}

/*
 * A reply more than was asked for (a server out of step with its client, a broken proxy): the
 * connection can no longer be trusted to pair replies with commands. Case 1: an integer after a
 * SET's +OK, which the next GET would take for its own. Case 2: a second +OK, which the next SET
 * would take for its acknowledgement while its own reply, a refusal, waits behind it: a page
 * reported stored that the server does not have. Either way, each page the tier reported stored
 * loads intact, and a page it refused is still the caller's.
 */
static void extra_replies(void)
{
	static const char *const appended[] = {":1\r\n", "+OK\r\n", "$-1\r\n", "-ERR stray\r\n"};
	static unsigned char pages[4 * PAGE_SIZE];
	struct fake_redis *f;

	fake_up(&f, false);
	for (size_t k = 0; k < sizeof(appended) / sizeof(appended[0]); k++) {
		struct extra e = {"SET", appended[k], 1};
		uswap_id_t ids[4];
		bool stored[4] = {true, true, false, false};
		struct uswap *u = layer_with_pages(f, ":prefix=ex", pages, ids);

		if (!u)
			continue;
		guard("a reply more than asked for");
		fake_mutate(f, append_reply, &e);
		fill_pages(pages + 2 * PAGE_SIZE, 2, PK_RANDOM, seed_for(40 + k));
		/* the SET answered twice */
		stored[2] = !uswap_store(u, pages + 2 * PAGE_SIZE, 1, &ids[2]);
		fake_clear(f);
		/* the next SET refused by the server (not carried out); it may arrive after the store returned */
		fake_script(f, "SET", NULL, 0, 1, "-OOM command not allowed\r\n", 26, FAKE_REPLY);
		stored[3] = !uswap_store(u, pages + 3 * PAGE_SIZE, 1, &ids[3]);
		for (int i = 0; i < 4; i++)
			if (stored[i])
				pages_intact(u, pages + i * PAGE_SIZE, &ids[i], 1);
		check_destroy(u);
		fake_clear(f); /* a refusal the SET never reached (the tier may send none) */
		unguard();
	}
	fake_stop(f);
}

/* What a layer that opened despite a reply it did not like must do: store and load a page intact. */
static void layer_works(struct uswap *u, const char *what)
{
	static unsigned char page[PAGE_SIZE], back[PAGE_SIZE];
	uswap_id_t id;
	int ret;

	fill_pages(page, 1, PK_RANDOM, seed_for(11));
	ret = store_when_back(u, page, &id);
	if (ret) {
		fprintf(stderr, "[%s] opened after %s, then: store %d \"%s\"\n", check_test, what, ret,
			uswap_errmsg());
		CHECK_EQ(ret, 0);
		return;
	}
	pages_intact(u, page, &id, 1);
	(void)back;
}

/* The commands a tier sends as it opens; each is answered badly in turn. */
static const struct {
	const char *cmd, *key_has, *opts;
} open_cmds[] = {
	{"AUTH", NULL, ":password-env=USWAP_FAKE_PASSWORD"},
	{"AUTH", NULL, ":user=u:password-env=USWAP_FAKE_PASSWORD"},
	{"SELECT", NULL, ":db=3"},
	{"CLUSTER INFO", NULL, ""},
	{"CONFIG GET", NULL, ""},
	{"SET", "alive", ""}, /* the alive key, written before the first page */
};

static const struct bad open_wrong[] = {
	B("integer", ":1\r\n", FAKE_REPLY),
	B("status", "+OK\r\n", FAKE_REPLY),
	B("bulk", "$10\r\nnoeviction\r\n", FAKE_REPLY),
	B("nil", "$-1\r\n", FAKE_REPLY),
	B("two replies", "+OK\r\n+OK\r\n", FAKE_REPLY),
	B("policy not a string", "*2\r\n$16\r\nmaxmemory-policy\r\n:1\r\n", FAKE_REPLY),
	B("policy with a NUL", "*2\r\n$16\r\nmaxmemory-policy\r\n$11\r\nnoeviction\0\r\n", FAKE_REPLY),
	B("policy evicting", "*2\r\n$16\r\nmaxmemory-policy\r\n$11\r\nallkeys-lru\r\n", FAKE_REPLY),
	B("policy array of 3", "*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n", FAKE_REPLY),
	B("cluster info", "$16\r\ncluster_state:ok\r\n", FAKE_REPLY),
};

/*
 * A tier opens against a server that answers one of its opening commands badly: it is refused with
 * a message naming the server, or (a reply it may fairly take, like an integer for CLUSTER INFO:
 * not a cluster node) it opens and works. Nothing hangs, nothing leaks.
 */
static void open_bad(struct fake_redis *f, unsigned c, const struct bad *b)
{
	struct uswap *u = NULL;
	char what[128], opts[96];
	int ret;

	snprintf(what, sizeof(what), "%s answered with %s", open_cmds[c].cmd, b->name);
	guard(what);
	script_bad(f, open_cmds[c].cmd, open_cmds[c].key_has, 0, b);
	snprintf(opts, sizeof(opts), "%s:timeout=150", open_cmds[c].opts); /* 198 opens, many silent */
	ret = uswap_create(&u, spec_of(f, "redis", opts));
	fake_clear(f);
	if (ret) {
		if (ret > 0 || !names_tier(f)) {
			fprintf(stderr, "[%s] %s: create %d \"%s\"\n", check_test, what, ret, uswap_errmsg());
			CHECK(ret < 0);
			CHECK(names_tier(f));
		}
		CHECK(u == NULL);
	} else {
		layer_works(u, what);
		check_destroy(u);
	}
	unguard();
}

static void open_bad_replies(void)
{
	struct fake_redis *f;

	setenv("USWAP_FAKE_PASSWORD", "secret", 1);
	fake_up(&f, false);
	for (unsigned c = 0; c < sizeof(open_cmds) / sizeof(open_cmds[0]); c++) {
		for (size_t i = 0; i < sizeof(bad_replies) / sizeof(bad_replies[0]); i++)
			open_bad(f, c, &bad_replies[i]);
		for (size_t i = 0; i < sizeof(open_wrong) / sizeof(open_wrong[0]); i++)
			open_bad(f, c, &open_wrong[i]);
	}
	CHECK_EQ(fake_keys(f, NULL), 0); /* what opened and closed took its alive key with it */
	fake_stop(f);
}

/* Wait (bounded) until the server has seen @n more commands named @cmd than @since. Return: whether it has. */
static bool wait_count(struct fake_redis *f, const char *cmd, unsigned long since, unsigned long n)
{
	for (int i = 0; i < 2000; i++) {
		if (fake_count(f, cmd) >= since + n)
			return true;
		pause_ms(5);
	}
	return false;
}

static const struct bad lease_wrong[] = {
	B("status", "+OK\r\n", FAKE_REPLY),
	B("error", "-ERR injected failure\r\n", FAKE_REPLY),
	B("bulk", "$1\r\n1\r\n", FAKE_REPLY),
	B("truncated then closed", ":", FAKE_CLOSE),
	B("no reply", "", FAKE_STALL),
	B("garbage", "\x01\x02\xff garbage\r\n", FAKE_REPLY),
	B("huge bulk length then a flood", "$999999999999\r\n", FAKE_FLOOD),
	B("two replies", ":1\r\n:1\r\n", FAKE_REPLY),
};

/*
 * Lease renewals (PEXPIRE, and the alive key's SET at each sweep) answered badly, for one sweep: the
 * lease thread neither crashes nor hangs, and the pages are still there when it has renewed them since
 * (lease=1s: renewals every 250 ms, retried 62 ms after a failure; a key lives 1 s past its last
 * renewal; timeout=300 ms, what a silent server costs a sweep). The tier's own stores and loads, on connections of their own, go on meanwhile.
 */
static void lease_bad_replies(void)
{
	static unsigned char pages[2 * PAGE_SIZE];
	struct fake_redis *f;
	uswap_id_t ids[2];
	struct uswap *u;

	fake_up(&f, false);
	u = layer_with_pages(f, ":prefix=le:lease=1s:timeout=300", pages, ids);
	for (size_t i = 0; u && i < sizeof(lease_wrong) / sizeof(lease_wrong[0]); i++) {
		unsigned long seen = fake_count(f, "PEXPIRE");
		char what[96];

		snprintf(what, sizeof(what), "PEXPIRE answered with %s", lease_wrong[i].name);
		guard(what);
		script_bad(f, "PEXPIRE", NULL, 1, &lease_wrong[i]);
		script_bad(f, "SET", "alive", 1, &lease_wrong[i]);
		CHECK(wait_count(f, "PEXPIRE", seen, 1));
		fake_clear(f);
		pages_intact(u, pages, ids, 2); /* on the tier's connection, not the lease's */
		/* two renewals answered well later, the pages are there */
		seen = fake_count(f, "PEXPIRE");
		CHECK(wait_count(f, "PEXPIRE", seen, 4));
		if (fake_keys(f, "le") < 3) {
			fprintf(stderr, "[%s] after %s: %lu keys left of 3\n", check_test, what,
				fake_keys(f, "le"));
			CHECK_EQ(fake_keys(f, "le"), 3);
		}
		pages_intact(u, pages, ids, 2);
		unguard();
	}
	if (u)
		check_destroy(u);
	fake_stop(f);
}

/* Keys of an instance without an alive key (dead, for `uswap gc`), written as a client would. */
static void plant_dead(struct fake_redis *f)
{
	redisContext *c = redisConnect("127.0.0.1", fake_port(f));

	CHECK(c && !c->err);
	for (int i = 0; c && !c->err && i < 2; i++) {
		redisReply *r = redisCommand(c, "SET gc2-%d x", i);

		CHECK(r && r->type == REDIS_REPLY_STATUS);
		if (r)
			freeReplyObject(r);
	}
	if (c)
		redisFree(c);
}

static const struct bad gc_wrong[] = {
	B("integer", ":1\r\n", FAKE_REPLY),
	B("SCAN without keys", "*1\r\n$1\r\n0\r\n", FAKE_REPLY),
	B("SCAN cursor an integer", "*2\r\n:0\r\n*0\r\n", FAKE_REPLY),
	B("SCAN keys not strings", "*2\r\n$1\r\n0\r\n*2\r\n:1\r\n*0\r\n", FAKE_REPLY),
	B("SCAN keys of 300 bytes", NULL, FAKE_REPLY),
	B("status", "+OK\r\n", FAKE_REPLY),
	B("SCAN cursor never 0", "*2\r\n$1\r\n7\r\n*0\r\n", FAKE_REPLY),
};

/*
 * `uswap gc` (uswap_gc()) against a server that answers SCAN, the alive keys' GET or DEL badly: it fails with a message naming the server, or removes what is dead; a live
 * instance's pages are never removed.
 */
static void gc_bad(struct fake_redis *f, const char *cmd, const char *key_has, const struct bad *b,
		   struct uswap *live, const unsigned char *pages, const uswap_id_t *ids)
{
	static char scan_big[1024];
	char what[128];
	int64_t ret;

	snprintf(what, sizeof(what), "%s answered with %s", cmd, b->name);
	guard(what);
	plant_dead(f);
	if (!strcmp(b->name, "SCAN keys of 300 bytes")) {
		char key[301];

		memset(key, 'k', 300);
		key[300] = '\0';
		snprintf(scan_big, sizeof(scan_big), "*2\r\n$1\r\n0\r\n*1\r\n$300\r\n%s\r\n", key);
		fake_script(f, cmd, key_has, 0, 0, scan_big, strlen(scan_big), FAKE_REPLY);
	} else {
		script_bad(f, cmd, key_has, 0, b);
	}
	ret = uswap_gc(spec_of(f, "redis", ""), "gc*", 0, NULL, NULL);
	fake_clear(f);
	if (ret < 0 && !names_tier(f)) {
		fprintf(stderr, "[%s] %s: gc %lld \"%s\"\n", check_test, what, (long long)ret,
			uswap_errmsg());
		CHECK(names_tier(f));
	}
	CHECK(ret <= 2); /* the dead instance's two keys at most */
	pages_intact(live, pages, ids, 2);
	unguard();
}

static void gc_bad_replies(void)
{
	static unsigned char pages[2 * PAGE_SIZE];
	struct fake_redis *f;
	uswap_id_t ids[2];
	struct uswap *u;

	fake_up(&f, false);
	u = layer_with_pages(f, ":prefix=gc1-", pages, ids);
	if (!u) {
		fake_stop(f);
		return;
	}
	/* nothing matches: nothing to do (keys found: none, UBSan's qsort(NULL, 0) before) */
	CHECK_EQ(uswap_gc(spec_of(f, "redis", ""), "nothing*", 0, NULL, NULL), 0);
	/* with good replies: the dead instance's keys go, the live one's stay */
	plant_dead(f);
	CHECK_EQ(uswap_gc(spec_of(f, "redis", ""), "gc*", 0, NULL, NULL), 2);
	CHECK_EQ(fake_keys(f, "gc2-"), 0);
	CHECK_EQ(fake_keys(f, "gc1-"), 3);
	for (size_t i = 0; i < sizeof(bad_replies) / sizeof(bad_replies[0]); i++) {
		gc_bad(f, "SCAN", NULL, &bad_replies[i], u, pages, ids);
		if (strcmp(bad_replies[i].name, "nil array") && strcmp(bad_replies[i].name, "error"))
			gc_bad(f, "GET", "alive", &bad_replies[i], u, pages, ids);
		gc_bad(f, "DEL", NULL, &bad_replies[i], u, pages, ids);
	}
	for (size_t i = 0; i < sizeof(gc_wrong) / sizeof(gc_wrong[0]); i++) {
		gc_bad(f, "SCAN", NULL, &gc_wrong[i], u, pages, ids);
		gc_bad(f, "GET", "alive", &gc_wrong[i], u, pages, ids);
		gc_bad(f, "DEL", NULL, &gc_wrong[i], u, pages, ids);
	}
	check_destroy(u);
	fake_stop(f);
}

/*
 * A server one reply behind after SCAN (a nil first, then each reply one command late): the alive
 * key's GET takes the nil for its own ("no alive key": the instance is dead, its keys go), and no
 * reply is ever left over when a round has read its own. gc must not remove a live instance's
 * pages for it.
 */
struct lag {
	bool on;
	unsigned char prev[8192];
	size_t prev_len;
};

static long lag_after_scan(void *arg, const char *cmd, unsigned char *reply, size_t len, size_t cap,
			   enum fake_action *action)
{
	static unsigned char cur[8192];
	struct lag *l = arg;
	size_t n = l->prev_len;

	(void)action;
	if (!l->on) {
		l->on = !strcmp(cmd, "SCAN");
		memcpy(l->prev, "$-1\r\n", 5);
		l->prev_len = 5;
		return -1;
	}
	if (len > sizeof(cur) || n > cap)
		return -1;
	memcpy(cur, reply, len);
	memcpy(reply, l->prev, n);
	memcpy(l->prev, cur, len);
	l->prev_len = len;
	return (long)n;
}

static void gc_reply_behind(void)
{
	static unsigned char pages[2 * PAGE_SIZE];
	static struct lag lag;
	unsigned long closed, now_closed = 0;
	struct fake_redis *f;
	uswap_id_t ids[2];
	struct uswap *u;
	int64_t ret;

	fake_up(&f, false);
	u = layer_with_pages(f, ":prefix=gc1-", pages, ids);
	if (u) {
		guard("a server one reply behind");
		plant_dead(f);
		memset(&lag, 0, sizeof(lag));
		fake_mutate(f, lag_after_scan, &lag);
		fake_connections(f, &closed);
		ret = uswap_gc(spec_of(f, "redis", ""), "gc*", 0, NULL, NULL);
		/* gc's connection is closed once the server has carried out all it sent (DELs too) */
		for (int i = 0; i < 2000 && (fake_connections(f, &now_closed), now_closed == closed); i++)
			pause_ms(5);
		fake_clear(f);
		CHECK(ret < 0 && names_tier(f));
		CHECK_EQ(fake_keys(f, "gc1-"), 3);
		pages_intact(u, pages, ids, 2);
		unguard();
		check_destroy(u);
	}
	fake_stop(f);
}

/* ---- the cluster client ---- */

/* A message that names a server: the fake one, or one a bad map or redirect named. */
static bool names_a_server(void)
{
	return strstr(uswap_errmsg(), "127.0.0.1:") || strstr(uswap_errmsg(), "redis");
}

static char slots_buf[4096];

/* CLUSTER SLOTS with one entry per range [@lo, @hi] of @n, hosts and ports from @host and @port. */
static const char *slots_of(int n, const int *lo, const int *hi, const char *const *host,
			    const long long *port)
{
	size_t o = (size_t)snprintf(slots_buf, sizeof(slots_buf), "*%d\r\n", n);

	for (int i = 0; i < n; i++)
		o += (size_t)snprintf(slots_buf + o, sizeof(slots_buf) - o,
				      "*3\r\n:%d\r\n:%d\r\n*2\r\n$%zu\r\n%s\r\n:%lld\r\n", lo[i], hi[i],
				      strlen(host[i]), host[i], port[i]);
	return slots_buf;
}

/*
 * CLUSTER SLOTS answered badly as a cluster tier opens: refused with a message naming a server (a
 * map the client cannot use: not an array, fields of the wrong type, slots out of range or not
 * covered, ports out of range, hosts too long, more nodes than it keeps, nodes where nothing
 * listens), or, for a map it may fairly use ("" or "?" for the host asked), opened and working.
 */
static void cluster_bad_slots(void)
{
	static const int lo1[] = {0}, hi1[] = {16383}, lo2[] = {0, 101}, hi2[] = {100, 16383};
	static const char *const here[] = {"127.0.0.1", "127.0.0.1"}, *const empty[] = {""},
				 *const quest[] = {"?"};
	static char longhost[120];
	const char *const longh[] = {longhost};
	struct fake_redis *f;
	char what[160];

	fake_up(&f, true);
	memset(longhost, 'h', sizeof(longhost) - 1);
	long long p = fake_port(f), ports[][1] = {{0}, {-1}, {65536}, {(1LL << 32) + p}, {1}};
	static struct {
		const char *name;
		char reply[4096];
	} maps[40];
	int nm = 0;

#define MAP(label, text)                                                                                     \
	do {                                                                                                 \
		const char *t_ = (text);                                                                     \
		maps[nm].name = label;                                                                       \
		memcpy(maps[nm].reply, t_, strlen(t_) + 1);                                                  \
		nm++;                                                                                        \
	} while (0)
	MAP("no entries", "*0\r\n");
	MAP("entries not arrays", "*1\r\n:1\r\n");
	MAP("entry of two fields", "*1\r\n*2\r\n:0\r\n:16383\r\n");
	MAP("slot not an integer", "*1\r\n*3\r\n$1\r\n0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:1\r\n");
	MAP("node not an array", "*1\r\n*3\r\n:0\r\n:16383\r\n$9\r\n127.0.0.1\r\n");
	MAP("node of one field", "*1\r\n*3\r\n:0\r\n:16383\r\n*1\r\n$9\r\n127.0.0.1\r\n");
	MAP("host an integer", "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n:1\r\n:7000\r\n");
	MAP("port a string", "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n$4\r\n7000\r\n");
	MAP("slot -1", slots_of(1, (int[]){-1}, hi1, here, &p));
	MAP("slot 16384", slots_of(1, lo1, (int[]){16384}, here, &p));
	MAP("start after end", slots_of(1, (int[]){16383}, (int[]){0}, here, &p));
	MAP("slots 101.. only", slots_of(1, (int[]){101}, hi1, here, &p));
	MAP("0..100 on a node where nothing listens", slots_of(2, lo2, hi2, here, (long long[]){1, p}));
	for (size_t i = 0; i < sizeof(ports) / sizeof(ports[0]); i++) {
		static char label[5][48];

		snprintf(label[i], sizeof(label[i]), "port %lld", ports[i][0]);
		MAP(label[i], slots_of(1, lo1, hi1, here, ports[i]));
	}
	MAP("host of 119 bytes", slots_of(1, lo1, hi1, longh, &p));
	MAP("host empty (the one asked)", slots_of(1, lo1, hi1, empty, &p));
	MAP("host ? (the one asked)", slots_of(1, lo1, hi1, quest, &p));
	{
		/* 40 nodes of 400 slots each (and the rest): more than the 32 a client keeps */
		static char big[4096];
		size_t o = (size_t)snprintf(big, sizeof(big), "*41\r\n");

		for (int i = 0; i < 41; i++)
			o += (size_t)snprintf(big + o, sizeof(big) - o,
					      "*3\r\n:%d\r\n:%d\r\n*2\r\n$9\r\n127.0.0.1\r\n:%lld\r\n",
					      i * 400, i == 40 ? 16383 : i * 400 + 399,
					      i ? 20000 + (long long)i : p);
		MAP("41 nodes", big);
	}
	for (int i = 0; i < nm; i++) {
		struct bad b = {maps[i].name, maps[i].reply, 0, FAKE_REPLY};
		struct uswap *u = NULL;
		int ret;

		snprintf(what, sizeof(what), "CLUSTER SLOTS answered with %s", maps[i].name);
		guard(what);
		script_bad(f, "CLUSTER SLOTS", NULL, 0, &b);
		ret = uswap_create(&u, spec_of(f, "redis-cluster", ":timeout=150"));
		fake_clear(f);
		if (!strncmp(maps[i].name, "port ", 5) && !ret) {
			fprintf(stderr, "[%s] %s: the client took it (for port %d?)\n", check_test, what,
				(int)p);
			CHECK(ret < 0); /* a port out of range is not one in range */
		}
		if (ret) {
			if (ret > 0 || !names_a_server()) {
				fprintf(stderr, "[%s] %s: create %d \"%s\"\n", check_test, what, ret,
					uswap_errmsg());
				CHECK(names_a_server());
			}
		} else {
			layer_works(u, what);
			check_destroy(u);
		}
		unguard();
	}
	for (size_t i = 0; i < sizeof(bad_replies) / sizeof(bad_replies[0]); i++) {
		struct uswap *u = NULL;

		snprintf(what, sizeof(what), "CLUSTER SLOTS answered with %s", bad_replies[i].name);
		guard(what);
		script_bad(f, "CLUSTER SLOTS", NULL, 0, &bad_replies[i]);
		CHECK(uswap_create(&u, spec_of(f, "redis-cluster", ":timeout=150")) < 0);
		fake_clear(f);
		CHECK(names_a_server());
		if (u)
			check_destroy(u);
		unguard();
	}
	fake_stop(f);
#undef MAP
}

/* A mutator that answers every GET with MOVED to a new address (127.0.0.2, port 20000 up). */
static long moved_anywhere(void *arg, const char *cmd, unsigned char *reply, size_t len, size_t cap,
			   enum fake_action *action)
{
	_Atomic unsigned *next = arg; /* read by the test's thread meanwhile */

	(void)len, (void)action;
	if (strcmp(cmd, "GET"))
		return -1;
	return snprintf((char *)reply, cap, "-MOVED 1 127.0.0.2:%u\r\n",
			20000 + atomic_fetch_add(next, 1) % 40000);
}

/*
 * The cluster client redirected badly: MOVED and ASK to where nothing listens, to itself for ever,
 * malformed, to more nodes than it keeps; ASKING answered badly; a failover that never ends; and a
 * redirect to nowhere while CLUSTER SLOTS answers badly. A load fails with -EIO naming the swap id
 * within its timeout, a store is refused naming the tier, and once the node answers well the pages
 * load intact and the tier takes pages again.
 */
static void cluster_bad_redirects(void)
{
	static unsigned char pages[3 * PAGE_SIZE], back[PAGE_SIZE];
	static char self_moved[64], self_ask[64], far[300], nowhere[64];
	static _Atomic unsigned moved_next;
	struct fake_redis *f;
	uswap_id_t ids[3];
	struct uswap *u = NULL;
	char id[32], what[128];
	int ret = -EIO;

	fake_up(&f, true);
	for (int tries = 0; tries < 5 && ret; tries++)
		ret = uswap_create(&u, spec_of(f, "redis-cluster", ":prefix=cr"));
	CHECK_EQ(ret, 0);
	if (ret) {
		fake_stop(f);
		return;
	}
	fill_pages(pages, 3, PK_RANDOM, seed_for(31));
	for (int i = 0; i < 2; i++)
		CHECK_EQ(store_when_back(u, pages + i * PAGE_SIZE, &ids[i]), 0);
	/* the slot of page 1's key ("cr1": handles count from 0), which a redirect must name to move it */
	unsigned slot = rcluster_key_slot("cr1", 3);

	snprintf(self_moved, sizeof(self_moved), "-MOVED %u 127.0.0.1:%d\r\n", slot, fake_port(f));
	snprintf(self_ask, sizeof(self_ask), "-ASK %u 127.0.0.1:%d\r\n", slot, fake_port(f));
	snprintf(nowhere, sizeof(nowhere), "-MOVED %u 127.0.0.1:1\r\n", slot);
	memset(far, 'h', sizeof(far));
	memcpy(far, "-MOVED 1 ", 9);
	memcpy(far + sizeof(far) - 10, ":7000\r\n", 8);
	const struct bad redirects[] = {
		B("MOVED to where nothing listens", nowhere, FAKE_REPLY),
		B("ASK to where nothing listens", "-ASK 1 127.0.0.1:1\r\n", FAKE_REPLY),
		B("MOVED without a host", "-MOVED 1 :1\r\n", FAKE_REPLY),
		B("MOVED alone", "-MOVED\r\n", FAKE_REPLY),
		B("MOVED to slot x", "-MOVED x 127.0.0.1:1\r\n", FAKE_REPLY),
		B("MOVED to slot 99999", "-MOVED 99999 127.0.0.1:1\r\n", FAKE_REPLY),
		B("MOVED without a port", "-MOVED 1 127.0.0.1\r\n", FAKE_REPLY),
		B("MOVED to port 0", "-MOVED 1 127.0.0.1:0\r\n", FAKE_REPLY),
		B("MOVED to port 99999", "-MOVED 1 127.0.0.1:99999\r\n", FAKE_REPLY),
		B("MOVED to a host of 280 bytes", far, FAKE_REPLY),
		B("MOVED to itself for ever", self_moved, FAKE_REPLY),
		B("ASK to itself for ever", self_ask, FAKE_REPLY),
		B("TRYAGAIN for ever", "-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
		  FAKE_REPLY),
		B("CLUSTERDOWN for ever", "-CLUSTERDOWN The cluster is down\r\n", FAKE_REPLY),
	};

	snprintf(id, sizeof(id), "swap id %llu", (unsigned long long)ids[1]);
	for (size_t i = 0; i < sizeof(redirects) / sizeof(redirects[0]); i++) {
		snprintf(what, sizeof(what), "GET answered with %s", redirects[i].name);
		guard(what);
		script_bad(f, "GET", NULL, 0, &redirects[i]);
		ret = uswap_load(u, ids[1], back, 1);
		if (ret != -EIO || !strstr(uswap_errmsg(), id)) {
			fprintf(stderr, "[%s] %s: load %d \"%s\"\n", check_test, what, ret, uswap_errmsg());
			CHECK_EQ(ret, -EIO);
		}
		script_bad(f, "SET", NULL, 0, &redirects[i]);
		ret = uswap_store(u, pages + 2 * PAGE_SIZE, 1, &ids[2]);
		if (ret >= 0 || !names_tier(f)) {
			fprintf(stderr, "[%s] SET answered with %s: store %d \"%s\"\n", check_test,
				redirects[i].name, ret, uswap_errmsg());
			CHECK(ret < 0);
		}
		fake_clear(f);
		pages_intact(u, pages, ids, 2);
		unguard();
	}
	/* ASKING answered badly: the ASK is not followed on that connection */
	guard("ASKING answered badly");
	script_bad(f, "GET", NULL, 1, &(struct bad)B("ASK to itself", self_ask, FAKE_REPLY));
	fake_script(f, "ASKING", NULL, 0, 0, ":1\r\n", 4, FAKE_REPLY);
	ret = uswap_load(u, ids[1], back, 1);
	CHECK(ret == 0 || ret == -EIO);
	CHECK(ret || !memcmp(pages + PAGE_SIZE, back, PAGE_SIZE));
	fake_clear(f);
	pages_intact(u, pages, ids, 2);
	unguard();
	/* MOVED to 200 different nodes: more than the client keeps; the node it knows still serves */
	guard("MOVED to 200 nodes");
	fake_mutate(f, moved_anywhere, &moved_next);
	for (int i = 0; i < 200 && atomic_load(&moved_next) < 200; i++)
		CHECK_EQ(uswap_load(u, ids[1], back, 1), -EIO);
	fake_clear(f);
	pages_intact(u, pages, ids, 2);
	unguard();
	/* a redirect to nowhere once, while CLUSTER SLOTS answers with garbage: the old map stays */
	guard("MOVED to nowhere, CLUSTER SLOTS garbage");
	fake_script(f, "GET", NULL, 0, 1, nowhere, strlen(nowhere), FAKE_REPLY);
	fake_script(f, "CLUSTER SLOTS", NULL, 0, 0, "*1\r\n:7\r\n", 8, FAKE_REPLY);
	CHECK_EQ(uswap_load(u, ids[1], back, 1), -EIO);
	fake_clear(f);
	pages_intact(u, pages, ids, 2);
	CHECK_EQ(store_when_back(u, pages + 2 * PAGE_SIZE, &ids[2]), 0);
	pages_intact(u, pages, ids, 3);
	unguard();
	check_destroy(u);
	fake_stop(f);
}

static uint64_t tier_pages(struct uswap *u, unsigned t)
{
	struct uswap_stats st;

	uswap_stats(u, &st);
	return st.tier[t].pages;
}

/*
 * replicas=1: each store's SETs are followed by WAIT 1, whose integer says how many replicas have
 * them. Answered badly, the pages count as not stored remotely: the next tier (a pool) takes them,
 * and they load intact.
 */
static struct uswap *wait_layer(struct fake_redis *f)
{
	struct uswap *u = NULL;
	int ret = -EIO;

	snprintf(spec_buf, sizeof(spec_buf), "redis://127.0.0.1:%d:timeout=%d:prefix=wt:replicas=1,zpool:lz4",
		 fake_port(f), TIMEOUT_MS);
	for (int tries = 0; tries < 5 && ret; tries++)
		ret = uswap_create(&u, spec_buf);
	CHECK_EQ(ret, 0);
	return u;
}

static void wait_bad_replies(void)
{
	static unsigned char page[PAGE_SIZE];
	struct fake_redis *f;
	struct uswap *u;
	uswap_id_t id;

	fake_up(&f, false);
	/* one replica acknowledged: the page is remote */
	u = wait_layer(f);
	fake_script(f, "WAIT", NULL, 0, 0, ":1\r\n", 4, FAKE_REPLY);
	fill_pages(page, 1, PK_TEXT, seed_for(51)); /* the pool takes text */
	CHECK(u && !uswap_store(u, page, 1, &id) && tier_pages(u, 0) == 1);
	if (u) {
		pages_intact(u, page, &id, 1);
		check_destroy(u);
	}
	fake_clear(f);
	/* a fresh layer for each: after a WAIT that fails, stores skip the server for a while */
	for (size_t i = 0; i < sizeof(bad_replies) / sizeof(bad_replies[0]); i++) {
		u = wait_layer(f);
		if (!u)
			continue;
		guard(bad_replies[i].name);
		script_bad(f, "WAIT", NULL, 0, &bad_replies[i]);
		fill_pages(page, 1, PK_TEXT, seed_for(52 + i));
		CHECK_EQ(uswap_store(u, page, 1, &id), 0);
		if (tier_pages(u, 0)) {
			fprintf(stderr, "[%s] WAIT answered with %s: the page counts as remote\n", check_test,
				bad_replies[i].name);
			CHECK_EQ(tier_pages(u, 0), 0);
		}
		fake_clear(f);
		pages_intact(u, page, &id, 1);
		check_destroy(u);
		unguard();
	}
	CHECK(fake_count(f, "WAIT") > sizeof(bad_replies) / sizeof(bad_replies[0]));
	fake_stop(f);
}

/*
 * Frees: the DELs go out with the next batch. Answered badly, nothing crashes or hangs; a store in
 * that batch is taken or refused, and what was taken loads intact.
 */
static void del_bad_replies(void)
{
	static unsigned char pages[4 * PAGE_SIZE];
	struct fake_redis *f;
	uswap_id_t ids[4];
	struct uswap *u;

	fake_up(&f, false);
	u = layer_with_pages(f, ":prefix=dl", pages, ids);
	for (size_t i = 0; u && i < sizeof(bad_replies) / sizeof(bad_replies[0]); i++) {
		bool stored;

		guard(bad_replies[i].name);
		fill_pages(pages + 2 * PAGE_SIZE, 2, PK_RANDOM, seed_for(70 + i));
		CHECK_EQ(store_when_back(u, pages + 2 * PAGE_SIZE, &ids[2]), 0);
		script_bad(f, "DEL", NULL, 0, &bad_replies[i]);
		CHECK_EQ(uswap_free(u, ids[2]), 0);
		stored = !uswap_store(u, pages + 3 * PAGE_SIZE, 1, &ids[3]); /* the DEL goes with it */
		fake_clear(f);
		pages_intact(u, pages, ids, 2);
		if (stored) {
			pages_intact(u, pages + 3 * PAGE_SIZE, &ids[3], 1);
			CHECK_EQ(uswap_free(u, ids[3]), 0);
		}
		unguard();
	}
	if (u)
		check_destroy(u);
	fake_stop(f);
}

/* ---- replies mutated at random (tests/mutate.c) ---- */

static const char *const resp_dict[] = {
	"\r\n",
	"+OK\r\n",
	"+PONG\r\n",
	":1\r\n",
	":0\r\n",
	"$-1\r\n",
	"*-1\r\n",
	"*1\r\n",
	"*2\r\n",
	"$0\r\n\r\n",
	"$4136\r\n",
	"$4137\r\n",
	"$999999999999\r\n",
	"*999999999999\r\n",
	"-ERR fuzz\r\n",
	"-MOVED 1 127.0.0.1:1\r\n",
	"-ASK 1 127.0.0.1:1\r\n",
	"-TRYAGAIN\r\n",
	"-LOADING\r\n",
	"_\r\n",
	"%1\r\n",
	"\n",
	"\r",
	"-",
	"+",
	":",
	"$",
	"*",
};

struct fuzz {
	struct mutator m;
	unsigned pct; /* replies mutated, percent */
	unsigned long mutated, closed, stalled;
};

/* Context: the fake server's thread (under its lock). */
static long mutate_reply(void *arg, const char *cmd, unsigned char *reply, size_t len, size_t cap,
			 enum fake_action *action)
{
	struct fuzz *z = arg;
	unsigned roll = (unsigned)mut_below(&z->m, 1000);

	if (strcmp(cmd, "GET") && strcmp(cmd, "SET") && strcmp(cmd, "DEL") && strcmp(cmd, "PING") &&
	    strcmp(cmd, "CLUSTER SLOTS") && strcmp(cmd, "ASKING"))
		return -1;
	if (roll >= z->pct * 10)
		return -1;
	z->mutated++;
	if (roll % 50 == 0) {
		*action = FAKE_CLOSE;
		z->closed++;
	} else if (roll % 50 == 1) {
		*action = FAKE_STALL;
		z->stalled++;
	}
	return (long)mut_mutate(&z->m, reply, len, cap < 8192 ? cap : 8192, 3, 0);
}

#define FUZZ_SLOTS 64

/*
 * Stores, loads and frees at random while the server mutates a share of its replies to GET, SET,
 * DEL, PING (and, for a cluster, CLUSTER SLOTS and ASKING): byte flips, inserts, deletes, cuts,
 * splices of RESP fragments, now and then a close or silence; and a tenth of the stores meet a SET
 * the server refuses. Every call returns; a store that
 * fails says so naming the tier; a load that succeeds gives the page stored, one that fails names
 * the swap id; and once the server answers well, every page a store reported stored loads intact.
 */
static void fuzz_run(bool cluster, const char *test)
{
	static unsigned char pages[FUZZ_SLOTS][PAGE_SIZE], back[PAGE_SIZE];
	static uswap_id_t ids[FUZZ_SLOTS];
	static bool live[FUZZ_SLOTS];
	static struct fuzz z;
	unsigned long n = mut_iterations(250), stores = 0, refused = 0, loads = 0, failed = 0;
	struct mutator ops;
	struct fake_redis *f;
	struct uswap *u = NULL;
	int ret = -EIO;
	char spec[160];

	mut_init(&ops, mut_seed(test));
	mut_init(&z.m, mut_rand(&ops));
	z.m.dict = resp_dict;
	z.m.nr_dict = sizeof(resp_dict) / sizeof(resp_dict[0]);
	z.pct = 25;
	z.mutated = z.closed = z.stalled = 0;
	memset(live, 0, sizeof(live));
	fake_up(&f, cluster);
	snprintf(spec, sizeof(spec), "%s://127.0.0.1:%d:timeout=100:prefix=fz",
		 cluster ? "redis-cluster" : "redis", fake_port(f));
	for (int tries = 0; tries < 5 && ret; tries++)
		ret = uswap_create(&u, spec);
	CHECK_EQ(ret, 0);
	if (ret) {
		fake_stop(f);
		return;
	}
	guard(test);
	/* the pages first, as the server behaves: a failed connection keeps stores off a server for a second */
	for (unsigned s = 0; s < FUZZ_SLOTS; s++) {
		fill_pages(pages[s], 1, PK_RANDOM, mut_rand(&ops));
		live[s] = !store_when_back(u, pages[s], &ids[s]);
		CHECK(live[s]);
	}
	fake_mutate(f, mutate_reply, &z);
	for (unsigned long i = 0; i < n; i++) {
		unsigned s = (unsigned)mut_below(&ops, FUZZ_SLOTS), op = (unsigned)mut_below(&ops, 10);

		if (!live[s]) {
			fill_pages(pages[s], 1, PK_RANDOM, mut_rand(&ops));
			if (op == 0) /* a SET the server refuses (not carried out), as at maxmemory */
				fake_script(f, "SET", NULL, 0, 1, "-OOM command not allowed\r\n", 26,
					    FAKE_REPLY);
			ret = uswap_store(u, pages[s], 1, &ids[s]);
			stores++;
			live[s] = !ret;
			if (ret) {
				refused++;
				if (ret > 0 || !names_tier(f)) {
					fprintf(stderr, "[%s] iteration %lu: store %d \"%s\"\n", test, i, ret,
						uswap_errmsg());
					CHECK(names_tier(f));
				}
			}
		} else if (op < 9) {
			char id[32];

			memset(back, 0, PAGE_SIZE);
			ret = uswap_load(u, ids[s], back, 1);
			loads++;
			snprintf(id, sizeof(id), "swap id %llu", (unsigned long long)ids[s]);
			if (!ret) {
				CHECK_MEM(pages[s], back, PAGE_SIZE); /* never wrong data as success */
			} else {
				failed++;
				if (ret != -EIO || !strstr(uswap_errmsg(), id)) {
					fprintf(stderr, "[%s] iteration %lu: load %d \"%s\"\n", test, i, ret,
						uswap_errmsg());
					CHECK_EQ(ret, -EIO);
				}
			}
		} else {
			CHECK_EQ(uswap_free(u, ids[s]), 0);
			live[s] = false;
		}
	}
	fake_clear(f);
	printf("%s: %lu calls: %lu stores (%lu refused), %lu loads (%lu failed); %lu replies mutated (%lu "
	       "closed, %lu silent)\n",
	       test, n, stores, refused, loads, failed, z.mutated, z.closed, z.stalled);
	/* nothing lost: every page reported stored is there */
	for (unsigned s = 0; s < FUZZ_SLOTS; s++)
		if (live[s])
			pages_intact(u, pages[s], &ids[s], 1);
	check_destroy(u);
	unguard();
	fake_stop(f);
	CHECK(z.mutated > 0);
}

static void fuzz_replies(void)
{
	fuzz_run(false, "fuzz_replies");
}

static void fuzz_replies_cluster(void)
{
	fuzz_run(true, "fuzz_replies_cluster");
}

/* ---- memory regions over a tier that goes bad ---- */

/*
 * A region of 256 pages under a 64-page limit, its pages evicted to the fake server; then the
 * server goes bad: every SET is answered badly (an OOM refusal, the wrong type, garbage, silence,
 * a closed connection), and the first GETs of each round too (an error, then garbage: a load tries
 * again, and so does the swap-in). Half the pages are rewritten and reclaim runs: the stores fail,
 * and those pages stay resident. Every page reads back as last written throughout, none is poisoned.
 */
static void mm_over_bad_server(void)
{
	static const struct bad sets[] = {
		B("out of memory", "-OOM command not allowed when used memory > 'maxmemory'.\r\n",
		  FAKE_REPLY),
		B("integer", ":1\r\n", FAKE_REPLY),
		B("garbage", "\x01\x02\xff garbage\r\n", FAKE_REPLY),
		B("no reply", "", FAKE_STALL),
		B("closed without a reply", "", FAKE_CLOSE),
	};
	const size_t n = 256;
	uint32_t *sums = calloc(n, sizeof(*sums));
	struct uswap_mm_options o = {.limit_bytes = 64 * PAGE_SIZE};
	struct uswap_mm_stats st;
	struct fake_redis *f;
	struct uswap_mm *m;
	unsigned char *p;
	char spec[128];

	fake_up(&f, false);
	snprintf(spec, sizeof(spec), "redis://127.0.0.1:%d:timeout=300:prefix=mm", fake_port(f));
	o.tiers = spec;
	m = check_mm_new(&o); /* skips where userfaultfd is not allowed */
	guard("memory regions over a server that goes bad");
	p = m ? check_map_filled(m, n, 0, sums) : NULL;
	if (!p)
		goto out;
	uswap_mm_shrink(m, 0);
	CHECK(check_swap_pages(m) > 0);
	CHECK_EQ(check_verify_pages(p, 0, n, sums), 0);
	for (size_t k = 0; k < sizeof(sets) / sizeof(sets[0]); k++) {
		uswap_mm_shrink(m, 0);
		script_bad(f, "SET", NULL, 0, &sets[k]);
		fake_script(f, "GET", NULL, 0, 1, "-ERR injected\r\n", 15, FAKE_REPLY);
		fake_script(f, "GET", "mm", 1, 1, "\x01garbage\r\n", 10, FAKE_REPLY);
		for (size_t i = k % 2; i < n; i += 2)
			sums[i] = check_put_page(p + i * PAGE_SIZE, i, k + 1);
		uswap_mm_shrink(m, 0); /* the rewritten pages cannot go: they stay */
		if (check_verify_pages(p, 0, n, sums)) {
			fprintf(stderr, "[%s] with SET answered with %s\n", check_test, sets[k].name);
			CHECK(!"every page reads back as last written");
		}
		fake_clear(f);
	}
	uswap_mm_stats(m, &st);
	printf("mm_over_bad_server: %llu swap-ins, %llu loads tried again, %llu stores failed\n",
	       (unsigned long long)st.swapins, (unsigned long long)st.load_retries,
	       (unsigned long long)st.store_failures);
	CHECK(st.store_failures > 0);
	CHECK(st.load_retries > 0);
	CHECK_EQ(st.load_failures, 0);
	/* the server answers well again: pages go out and come back */
	for (int i = 0; i < 400 && (uswap_mm_shrink(m, 0), check_swap_pages(m) < n / 2); i++)
		pause_ms(10);
	CHECK(check_swap_pages(m) >= n / 2);
	CHECK_EQ(check_verify_pages(p, 0, n, sums), 0);
	uswap_mm_stats(m, &st);
	CHECK_EQ(st.load_failures, 0);
out:
	unguard();
	if (m)
		check_mm_destroy(m);
	fake_stop(f);
	free(sums);
}

/* ---- a real server's refusal ---- */

/*
 * A real redis-server at its maxmemory (noeviction) refuses SETs with -OOM, the one bad answer here a
 * real server gives: the store is refused naming the tier, the caller keeps the page, every page
 * stored before loads intact; once pages are freed (DEL is allowed at maxmemory) stores are taken
 * again.
 */
static void real_server_out_of_memory(void)
{
	static const char *const extra[] = {"--maxmemory", "3mb", NULL};
	enum { MAX = 2000 };
	static unsigned char pages[MAX][PAGE_SIZE], copy[PAGE_SIZE];
	static uswap_id_t ids[MAX];
	struct uswap *u = NULL;
	struct rserver srv;
	char spec[128], hp[32];
	int n = 0, ret = 0;

	if (!rserver_available()) {
		printf("real_server_out_of_memory: no redis-server, nothing to do\n");
		return;
	}
	if (rserver_start(&srv, "noeviction", extra)) {
		CHECK(!"redis-server started");
		return;
	}
	snprintf(spec, sizeof(spec), "redis://127.0.0.1:%d:prefix=oom:timeout=2000", srv.port);
	snprintf(hp, sizeof(hp), "127.0.0.1:%d", srv.port);
	CHECK_EQ(uswap_create(&u, spec), 0);
	guard("a real server at maxmemory");
	while (u && n < MAX) {
		fill_pages(pages[n], 1, PK_RANDOM, seed_for(9000 + n));
		memcpy(copy, pages[n], PAGE_SIZE);
		ret = uswap_store(u, pages[n], 1, &ids[n]);
		if (ret)
			break;
		n++;
	}
	printf("real_server_out_of_memory: %d pages stored before the first refusal\n", n);
	CHECK(n > 0 && n < MAX);
	CHECK(ret < 0);
	CHECK(strstr(uswap_errmsg(), hp) != NULL);
	CHECK_MEM(copy, pages[n], PAGE_SIZE);
	for (int i = 0; u && i < n; i++)
		pages_intact(u, pages[i], &ids[i], 1);
	/* room again: half the pages freed (their DELs go with the next store) */
	for (int i = 0; u && i < n; i += 2)
		CHECK_EQ(uswap_free(u, ids[i]), 0);
	for (int tries = 0; u && tries < 5 && ret; tries++)
		ret = uswap_store(u, pages[n], 1, &ids[n]);
	CHECK_EQ(ret, 0);
	if (u && !ret)
		pages_intact(u, pages[n], &ids[n], 1);
	for (int i = 1; u && i < n; i += 2)
		pages_intact(u, pages[i], &ids[i], 1);
	unguard();
	if (u)
		check_destroy(u);
	rserver_kill(&srv);
}

CHECK_MAIN(T(store_bad_replies), T(load_bad_replies), T(extra_replies), T(open_bad_replies),
	   T(lease_bad_replies), T(gc_bad_replies), T(gc_reply_behind), T(cluster_bad_slots),
	   T(cluster_bad_redirects), T(wait_bad_replies), T(del_bad_replies), T(fuzz_replies),
	   T(fuzz_replies_cluster), T(mm_over_bad_server), T(real_server_out_of_memory))
