/*
 * test_redis.c - the remote tier: page sealing (seal.c) and round trips through a real redis-server
 * started here on a free loopback port in a temp dir, killed at exit even when a check fails.
 */
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis.h>

#include "uswap.h"

#include "../src/backend/backend.h"
#include "../src/backend/seal.h"
#include "check.h"

static void test_seal_roundtrip_every_kind(void)
{
	static unsigned char page[PAGE_SIZE], sealed[PAGE_SIZE + SEAL_OVERHEAD], back[PAGE_SIZE];
	struct sealer s;

	CHECK_EQ(seal_init(&s), 0);
	for (int kind = PK_ZERO; kind <= PK_MIXED; kind++) {
		fill_page(page, kind, seed_for(kind));
		CHECK_EQ(seal_page(&s, 7, 1000 + kind, page, PAGE_SIZE, sealed), 0);
		CHECK(memcmp(sealed + SEAL_NONCE_BYTES, page, 64) != 0); /* not in the clear */
		memset(back, 0xa5, sizeof(back));
		CHECK_EQ(seal_open(&s, 7, 1000 + kind, sealed, sizeof(sealed), back), 0);
		CHECK_MEM(page, back, PAGE_SIZE);
	}
	seal_destroy(&s);
}

static void test_seal_rejects_wrong_binding_and_tamper(void)
{
	static unsigned char page[PAGE_SIZE], sealed[PAGE_SIZE + SEAL_OVERHEAD], back[PAGE_SIZE];
	struct sealer s, other;

	CHECK_EQ(seal_init(&s), 0);
	CHECK_EQ(seal_init(&other), 0);
	fill_page(page, PK_RANDOM, seed_for(42));
	CHECK_EQ(seal_page(&s, 3, 9, page, PAGE_SIZE, sealed), 0);
	CHECK_EQ(seal_open(&s, 4, 9, sealed, sizeof(sealed), back), -EIO);  /* another owner's value */
	CHECK_EQ(seal_open(&s, 3, 10, sealed, sizeof(sealed), back), -EIO); /* an older/newer version */
	CHECK_EQ(seal_open(&other, 3, 9, sealed, sizeof(sealed), back), -EIO); /* another key */
	CHECK_EQ(seal_open(&s, 3, 9, sealed, SEAL_OVERHEAD - 1, back), -EIO);
	for (size_t off = 0; off < sizeof(sealed); off += 517) {
		sealed[off] ^= 1;
		CHECK_EQ(seal_open(&s, 3, 9, sealed, sizeof(sealed), back), -EIO);
		sealed[off] ^= 1;
	}
	CHECK_EQ(seal_open(&s, 3, 9, sealed, sizeof(sealed), back), 0);
	CHECK_MEM(page, back, PAGE_SIZE);
	seal_destroy(&s);
	seal_destroy(&other);
}

static void test_seal_nonces_differ(void)
{
	static unsigned char page[PAGE_SIZE], a[PAGE_SIZE + SEAL_OVERHEAD], b[PAGE_SIZE + SEAL_OVERHEAD];
	struct sealer s;

	CHECK_EQ(seal_init(&s), 0);
	fill_page(page, PK_TEXT, seed_for(1));
	CHECK_EQ(seal_page(&s, 1, 1, page, PAGE_SIZE, a), 0);
	CHECK_EQ(seal_page(&s, 1, 1, page, PAGE_SIZE, b), 0);
	CHECK(memcmp(a, b, SEAL_NONCE_BYTES) != 0);
	CHECK(memcmp(a + SEAL_NONCE_BYTES, b + SEAL_NONCE_BYTES, PAGE_SIZE) != 0);
	seal_destroy(&s);
}

static pid_t server_pid;
static int server_port;
static char server_dir[] = "/tmp/uswap-redis-XXXXXX";

static void server_stop(void)
{
	if (server_pid > 0) {
		kill(server_pid, SIGKILL);
		waitpid(server_pid, NULL, 0);
		server_pid = 0;
	}
}

static int free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

	if (fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof(a)) && !getsockname(fd, (struct sockaddr *)&a, &len))
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

/* Start redis-server with @policy; wait until it answers PING (readiness, not timing). */
static void server_start(const char *policy)
{
	char port[16];

	if (access("/usr/bin/redis-server", X_OK))
		check_skip("redis-server not installed");
	if (!mkdtemp(server_dir))
		check_skip("mkdtemp failed");
	server_port = free_port();
	snprintf(port, sizeof(port), "%d", server_port);
	server_pid = fork();
	if (!server_pid) {
		execl("/usr/bin/redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1", "--dir",
		      server_dir, "--save", "", "--appendonly", "no", "--maxmemory-policy", policy,
		      "--loglevel", "warning", "--logfile", "redis.log", (char *)NULL);
		_exit(127);
	}
	atexit(server_stop);
	for (int i = 0; i < 500; i++) {
		redisContext *c = redisConnect("127.0.0.1", server_port);
		bool up = c && !c->err;

		if (c)
			redisFree(c);
		if (up)
			return;
		nanosleep(&(struct timespec){ 0, 10 * 1000 * 1000 }, NULL);
	}
	check_skip("redis-server did not come up");
}

static void test_redis_roundtrip_through_layer(void)
{
	static unsigned char pages[64 * PAGE_SIZE], back[64 * PAGE_SIZE];
	static const size_t sizes[] = { 1, 4, 16, 64 };
	uswap_id_t ids[4];
	struct uswap *u;
	char spec[96];

	snprintf(spec, sizeof(spec), "redis://127.0.0.1:%d:prefix=t1", server_port);
	CHECK_EQ(uswap_create(&u, spec), 0);
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
	uswap_destroy(u);
}

static void test_redis_refuses_evicting_server_and_bad_specs(void)
{
	struct uswap *u = NULL;
	char spec[96];
	redisContext *c = redisConnect("127.0.0.1", server_port);
	redisReply *r;

	CHECK(c && !c->err);
	r = redisCommand(c, "CONFIG SET maxmemory-policy allkeys-lru");
	freeReplyObject(r);
	snprintf(spec, sizeof(spec), "redis://127.0.0.1:%d", server_port);
	CHECK(uswap_create(&u, spec) < 0);
	r = redisCommand(c, "CONFIG SET maxmemory-policy noeviction");
	freeReplyObject(r);
	redisFree(c);
	CHECK(uswap_create(&u, "redis://127.0.0.1") < 0);
	CHECK(uswap_create(&u, "redis:127.0.0.1:1") < 0);
	snprintf(spec, sizeof(spec), "redis://127.0.0.1:%d:bogus=1", server_port);
	CHECK(uswap_create(&u, spec) < 0);
	snprintf(spec, sizeof(spec), "redis://127.0.0.1:%d", free_port()); /* nobody listens there */
	CHECK(uswap_create(&u, spec) < 0);
}

static void test_redis_value_swapped_on_server_is_rejected(void)
{
	static unsigned char pages[2 * PAGE_SIZE], back[2 * PAGE_SIZE];
	uswap_id_t a, b;
	struct uswap *u;
	char spec[96];

	snprintf(spec, sizeof(spec), "redis://127.0.0.1:%d:prefix=t3", server_port);
	CHECK_EQ(uswap_create(&u, spec), 0);
	if (!u)
		return;
	fill_pages(pages, 2, PK_RANDOM, seed_for(99));
	CHECK_EQ(uswap_store(u, pages, 1, &a), 0);
	CHECK_EQ(uswap_store(u, pages + PAGE_SIZE, 1, &b), 0);
	/* an attacker with access to the server copies page b's value over page a's key */
	redisContext *c = redisConnect("127.0.0.1", server_port);
	redisReply *r = redisCommand(c, "KEYS t3*");

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
	uswap_destroy(u);
}

static void test_redis_suite(void)
{
	server_start("noeviction");
	test_redis_roundtrip_through_layer();
	test_redis_value_swapped_on_server_is_rejected();
	test_redis_refuses_evicting_server_and_bad_specs();
	server_stop();
}

CHECK_MAIN(T(test_seal_roundtrip_every_kind), T(test_seal_rejects_wrong_binding_and_tamper),
	   T(test_seal_nonces_differ), T(test_redis_suite))
