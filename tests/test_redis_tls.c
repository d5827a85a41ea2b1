/*
 * test_redis_tls.c - the remote tier over TLS (tls.c) and AUTH of an ACL user: a CA and certificates
 * made here with the openssl command, TLS-only redis-servers (--port 0) started here (tests/rserver.c).
 * Round trips byte for byte (reconnects and the lease thread's connections included), a wrong CA and a
 * missing client certificate refused at create with the reason, a plain client refused by a TLS port,
 * a user with its password accepted and a wrong password refused, a dead server's loads failing -EIO.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "uswap.h"

#include "../src/backend/backend.h"
#include "check.h"
#include "rserver.h"

static char certs[24];
static struct rserver srv; /* TLS only, an ACL user "alice" with password "wonderland" */

/* "redis://127.0.0.1:PORT:cacert=DIR/ca.crt" + @opts */
static char *spec_tls(char *buf, size_t len, const struct rserver *s, const char *ca, const char *opts)
{
	snprintf(buf, len, "redis://127.0.0.1:%d:cacert=%s/%s%s", s->port, certs, ca, opts);
	return buf;
}

/* redis-cli --tls against @s: 0 if it exited 0. */
static int cli(const struct rserver *s, const char *const *cmd)
{
	char port[16], ca[64], cert[64], key[64];
	const char *argv[32] = {
		"/usr/bin/redis-cli", "--tls", "--cacert", ca, "--cert", cert, "--key", key, "-h",
		"127.0.0.1",          "-p",    port};
	int argc = 12;

	snprintf(port, sizeof(port), "%d", s->port);
	snprintf(ca, sizeof(ca), "%s/ca.crt", certs);
	snprintf(cert, sizeof(cert), "%s/c.crt", certs);
	snprintf(key, sizeof(key), "%s/c.key", certs);
	for (int i = 0; cmd[i] && argc < 31; i++)
		argv[argc++] = cmd[i];
	argv[argc] = NULL;
	return rserver_run(argv);
}

static void roundtrip(struct uswap *u, uint64_t seed)
{
	static unsigned char pages[64 * PAGE_SIZE], back[64 * PAGE_SIZE];
	static const size_t sizes[] = {1, 3, 16, 64};
	uswap_id_t ids[4];

	for (size_t i = 0; i < 4; i++) {
		fill_pages(pages, sizes[i], PK_MIXED, seed_for(seed + i));
		CHECK_EQ(uswap_store(u, pages, sizes[i], &ids[i]), 0);
	}
	for (size_t i = 0; i < 4; i++) {
		fill_pages(pages, sizes[i], PK_MIXED, seed_for(seed + i));
		memset(back, 0, sizes[i] * PAGE_SIZE);
		CHECK_EQ(uswap_load(u, ids[i], back, sizes[i]), 0);
		CHECK_MEM(pages, back, sizes[i] * PAGE_SIZE);
		CHECK_EQ(uswap_free(u, ids[i]), 0);
	}
}

/* Pages over TLS come back byte-identical, also after the server dropped the connections. */
static void test_tls_roundtrip_and_reconnect(void)
{
	static const char *const kill_clients[] = {"CLIENT", "KILL", "TYPE", "normal", NULL};
	static const char *const alive[] = {"EXISTS", "tr:alive", NULL};
	struct uswap *u = NULL;
	char spec[128];

	CHECK_EQ(uswap_create(&u, spec_tls(spec, sizeof(spec), &srv, "ca.crt", ":prefix=tr:lease=2s")), 0);
	if (!u)
		return;
	roundtrip(u, 10);
	CHECK_EQ(cli(&srv, alive), 0);        /* the lease thread wrote it over a TLS connection of its own */
	CHECK_EQ(cli(&srv, kill_clients), 0); /* every connection of the tier, the lease thread's too */
	roundtrip(u, 20);                     /* a stale connection: reconnected through TLS */
	check_destroy(u);
	/* by host name: SNI and the certificate's DNS name */
	snprintf(spec, sizeof(spec), "redis://localhost:%d:tls:cacert=%s/ca.crt", srv.port, certs);
	u = NULL;
	CHECK_EQ(uswap_create(&u, spec), 0);
	if (u) {
		roundtrip(u, 30);
		check_destroy(u);
	}
}

/* A server whose certificate the given CA did not sign is refused at create, and says why. */
static void test_tls_refuses_wrong_ca_and_bad_files(void)
{
	struct uswap *u = NULL;
	char spec[128];

	CHECK(uswap_create(&u, spec_tls(spec, sizeof(spec), &srv, "x.crt", "")) < 0);
	CHECK(u == NULL);
	CHECK(strstr(uswap_errmsg(), "TLS handshake failed") != NULL);
	CHECK(strstr(uswap_errmsg(), "certificate verify failed") != NULL);
	CHECK(strstr(uswap_errmsg(), "redis: 127.0.0.1:") != NULL);
	printf("  wrong CA: %s\n", uswap_errmsg());
	/* no cacert=: the system's CAs do not know this one either */
	snprintf(spec, sizeof(spec), "redis://127.0.0.1:%d:tls", srv.port);
	CHECK(uswap_create(&u, spec) < 0);
	CHECK(strstr(uswap_errmsg(), "certificate verify failed") != NULL);
	CHECK(uswap_create(&u, spec_tls(spec, sizeof(spec), &srv, "nope.crt", "")) < 0);
	CHECK(strstr(uswap_errmsg(), "cannot load cacert=") != NULL);
	snprintf(spec, sizeof(spec), "redis://127.0.0.1:%d:key=%s/c.key", srv.port, certs);
	CHECK_EQ(uswap_create(&u, spec), -EINVAL);
	CHECK(strstr(uswap_errmsg(), "key= needs cert=") != NULL);
	snprintf(spec, sizeof(spec), "redis://127.0.0.1:%d:tls=1", srv.port);
	CHECK_EQ(uswap_create(&u, spec), -EINVAL);
}

/* A plain client meets a TLS-only port: refused at create, with a hint; nothing hangs. */
static void test_tls_plain_client_refused(void)
{
	struct uswap *u = NULL;
	char spec[128];

	snprintf(spec, sizeof(spec), "redis://127.0.0.1:%d:timeout=1000", srv.port);
	CHECK(uswap_create(&u, spec) < 0);
	CHECK(u == NULL);
	CHECK(strstr(uswap_errmsg(), "TLS port?") != NULL);
	printf("  plain client: %s\n", uswap_errmsg());
}

/* AUTH user password (ACL): the right password works, a wrong one is refused, user= needs one. */
static void test_tls_acl_user(void)
{
	struct uswap *u = NULL;
	char spec[128];

	setenv("USWAP_TEST_PW", "wonderland", 1);
	setenv("USWAP_TEST_BAD", "looking-glass", 1);
	CHECK_EQ(uswap_create(&u, spec_tls(spec, sizeof(spec), &srv, "ca.crt",
					   ":user=alice:password-env=USWAP_TEST_PW:prefix=acl")),
		 0);
	if (u) {
		roundtrip(u, 40);
		check_destroy(u);
	}
	u = NULL;
	CHECK_EQ(uswap_create(&u, spec_tls(spec, sizeof(spec), &srv, "ca.crt",
					   ":user=alice:password-env=USWAP_TEST_BAD")),
		 -EPERM);
	CHECK(strstr(uswap_errmsg(), "refused authentication of user alice") != NULL);
	CHECK_EQ(uswap_create(&u, spec_tls(spec, sizeof(spec), &srv, "ca.crt",
					   ":user=bob:password-env=USWAP_TEST_PW")),
		 -EPERM);
	CHECK_EQ(uswap_create(&u, spec_tls(spec, sizeof(spec), &srv, "ca.crt", ":user=alice")), -EINVAL);
	CHECK(strstr(uswap_errmsg(), "needs password-env=") != NULL);
	unsetenv("USWAP_TEST_PW");
	unsetenv("USWAP_TEST_BAD");
}

/* Mutual TLS: without a client certificate refused at create; with cert= and key= round trips. */
static void test_tls_mutual(void)
{
	struct rserver s;
	struct uswap *u = NULL;
	char spec[128];

	if (rserver_start_tls(&s, certs, true, "noeviction", NULL)) {
		CHECK(!"TLS redis-server (mutual) did not start");
		return;
	}
	CHECK(uswap_create(&u, spec_tls(spec, sizeof(spec), &s, "ca.crt", "")) < 0);
	CHECK(strstr(uswap_errmsg(), "client certificate") != NULL);
	printf("  no client certificate: %s\n", uswap_errmsg());
	snprintf(spec, sizeof(spec), "redis://127.0.0.1:%d:cacert=%s/ca.crt:cert=%s/c.crt:key=%s/c.key",
		 s.port, certs, certs, certs);
	u = NULL;
	CHECK_EQ(uswap_create(&u, spec), 0);
	if (u) {
		roundtrip(u, 50);
		check_destroy(u);
	}
	rserver_kill(&s);
}

/* A TLS server that dies: load and store fail with -EIO, as over plain TCP; no SIGPIPE ends the test. */
static void test_tls_server_dies(void)
{
	static unsigned char page[PAGE_SIZE], back[PAGE_SIZE];
	struct rserver s;
	struct uswap *u = NULL;
	char spec[128];
	uswap_id_t id;

	if (rserver_start_tls(&s, certs, false, "noeviction", NULL)) {
		CHECK(!"TLS redis-server did not start");
		return;
	}
	CHECK_EQ(uswap_create(&u, spec_tls(spec, sizeof(spec), &s, "ca.crt", ":timeout=300")), 0);
	if (!u)
		goto out;
	fill_page(page, PK_RANDOM, seed_for(60));
	CHECK_EQ(uswap_store(u, page, 1, &id), 0);
	kill(s.pid, SIGKILL);
	CHECK_EQ(uswap_load(u, id, back, 1), -EIO);
	CHECK_EQ(uswap_store(u, page, 1, &id), -EIO);
	check_destroy(u);
out:
	rserver_kill(&s);
}

/* A cluster of three TLS-only masters: nodes learnt from CLUSTER SLOTS are reached over TLS too. */
static void test_tls_cluster(void)
{
	static const char *const extra[] = {"--cluster-enabled",
					    "yes",
					    "--cluster-config-file",
					    "nodes.conf",
					    "--tls-cluster",
					    "yes",
					    "--cluster-node-timeout",
					    "1000",
					    NULL};
	struct rserver n[3];
	struct uswap *u = NULL;
	char addr[3][32], ca[64], cert[64], key[64], spec[128];
	const char *argv[20] = {"/usr/bin/redis-cli", "--tls", "--cacert", ca, "--cert", cert, "--key", key,
				"--cluster",          "create"};
	int argc = 10, started = 0;

	snprintf(ca, sizeof(ca), "%s/ca.crt", certs);
	snprintf(cert, sizeof(cert), "%s/c.crt", certs);
	snprintf(key, sizeof(key), "%s/c.key", certs);
	for (; started < 3; started++) {
		if (rserver_start_tls(&n[started], certs, false, "noeviction", extra)) {
			CHECK(!"TLS cluster node did not start");
			goto out;
		}
		snprintf(addr[started], sizeof(addr[started]), "127.0.0.1:%d", n[started].port);
		argv[argc++] = addr[started];
	}
	argv[argc++] = "--cluster-yes";
	argv[argc] = NULL;
	CHECK_EQ(rserver_run(argv), 0);
	snprintf(spec, sizeof(spec), "redis-cluster://127.0.0.1:%d:cacert=%s/ca.crt:prefix={t}x", n[0].port,
		 certs);
	/* one hash tag: every key in the slot of "t" (15891: the third master, not the seed) */
	for (int i = 0; i < 100 && uswap_create(&u, spec); i++) /* until every node knows every slot */
		nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
	CHECK(u != NULL);
	if (u) {
		roundtrip(u, 70);
		check_destroy(u);
	}
	snprintf(spec, sizeof(spec), "redis-cluster://127.0.0.1:%d:cacert=%s/ca.crt:prefix=cx", n[1].port,
		 certs);
	u = NULL;
	CHECK_EQ(uswap_create(&u, spec), 0); /* keys over all three masters */
	if (u) {
		roundtrip(u, 80);
		check_destroy(u);
	}
out:
	while (started--)
		rserver_kill(&n[started]);
}

static void test_redis_tls_suite(void)
{
	static const char *const acl[] = {"--user", "alice", "on", ">wonderland", "~*", "&*", "+@all", NULL};

	if (!rserver_available())
		check_skip("redis-server or redis-cli not installed");
	if (rserver_make_certs(certs))
		check_skip("cannot make test certificates with openssl");
	if (rserver_start_tls(&srv, certs, false, "noeviction", acl))
		check_skip("redis-server did not come up with TLS (built without it?)");
	test_tls_roundtrip_and_reconnect();
	test_tls_refuses_wrong_ca_and_bad_files();
	test_tls_plain_client_refused();
	test_tls_acl_user();
	test_tls_mutual();
	test_tls_server_dies();
	rserver_kill(&srv);
	test_tls_cluster();
}

CHECK_MAIN(T(test_redis_tls_suite))
