/*
 * bench_remote.c - `uswap bench remote [--json] [--server HOST:PORT] [--no-tls]`: the Redis tier
 * against plain hiredis on the same server, in one run, and the tier over TLS beside the tier in the
 * clear. Without --server it starts its own redis-server on a free loopback port in a temp dir (no
 * persistence), listening on a second port with TLS (a CA and certificate made there with the openssl
 * command), and kills it at the end. With --server, the TLS pass needs --tls-server HOST:PORT and
 * --cacert FILE (the same server's TLS port).
 */
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis.h>
#include <sodium.h>

#include "cli/cli.h"
#include "uswap.h"

#define PG     USWAP_PAGE_SIZE
#define NR_LAT 2000
#define FOLIO  64

static double now_us(void)
{
	return cli_now() * 1e6;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return v[n / 2];
}

static int free_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

	if (fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof(a)) &&
	    !getsockname(fd, (struct sockaddr *)&a, &len))
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

/* Run @argv in @dir, output to /dev/null. Return: 0 if it exited 0. */
static int run_in(const char *dir, const char *const *argv)
{
	pid_t pid = fork();
	int st;

	if (!pid) {
		if (chdir(dir) || !freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr))
			_exit(127);
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && !WEXITSTATUS(st) ? 0 : -1;
}

/* A CA (ca.crt) and a certificate it signed for 127.0.0.1 (s.crt, s.key) in @dir. Return: 0 or -1. */
static int make_certs(const char *dir)
{
	static const char *const ca[] = {"openssl",
					 "req",
					 "-x509",
					 "-newkey",
					 "ec",
					 "-pkeyopt",
					 "ec_paramgen_curve:prime256v1",
					 "-nodes",
					 "-keyout",
					 "ca.key",
					 "-out",
					 "ca.crt",
					 "-days",
					 "1",
					 "-subj",
					 "/CN=uswap bench CA",
					 NULL};
	static const char *const srv[] = {"openssl",
					  "req",
					  "-x509",
					  "-newkey",
					  "ec",
					  "-pkeyopt",
					  "ec_paramgen_curve:prime256v1",
					  "-nodes",
					  "-keyout",
					  "s.key",
					  "-out",
					  "s.crt",
					  "-days",
					  "1",
					  "-subj",
					  "/CN=localhost",
					  "-CA",
					  "ca.crt",
					  "-CAkey",
					  "ca.key",
					  "-addext",
					  "subjectAltName=IP:127.0.0.1",
					  NULL};

	return run_in(dir, ca) || run_in(dir, srv) ? -1 : 0;
}

/* redis-server on @port, and with @tls_port > 0 also TLS on it (certificates in @dir). */
static pid_t spawn_server(char *dir, int *port, int *tls_port)
{
	char ps[16], tps[16], cert[64], key[64], ca[64];
	pid_t pid;

	*port = free_port();
	if (*port < 0 || !mkdtemp(dir))
		return -1;
	if (*tls_port) {
		*tls_port = free_port();
		if (*tls_port < 0 || make_certs(dir)) {
			fprintf(stderr, "uswap: bench remote: no certificates (openssl): no TLS pass\n");
			*tls_port = 0;
		}
	}
	snprintf(ps, sizeof(ps), "%d", *port);
	snprintf(tps, sizeof(tps), "%d", *tls_port);
	snprintf(cert, sizeof(cert), "%s/s.crt", dir);
	snprintf(key, sizeof(key), "%s/s.key", dir);
	snprintf(ca, sizeof(ca), "%s/ca.crt", dir);
	pid = fork();
	if (!pid) {
		if (*tls_port)
			execlp("redis-server", "redis-server", "--port", ps, "--bind", "127.0.0.1", "--dir",
			       dir, "--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction",
			       "--logfile", "redis.log", "--tls-port", tps, "--tls-cert-file", cert,
			       "--tls-key-file", key, "--tls-ca-cert-file", ca, "--tls-auth-clients", "no",
			       (char *)NULL);
		else
			execlp("redis-server", "redis-server", "--port", ps, "--bind", "127.0.0.1", "--dir",
			       dir, "--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction",
			       "--logfile", "redis.log", (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 500 && pid > 0; i++) {
		redisContext *c = redisConnect("127.0.0.1", *port);
		bool up = c && !c->err;

		if (c)
			redisFree(c);
		if (up)
			return pid;
		nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
	}
	return -1;
}

/* Remove what the bench put in @dir: certificates, the server's log. */
static void clean_dir(const char *dir)
{
	static const char *const files[] = {"redis.log", "ca.crt", "ca.key", "s.crt", "s.key"};
	char path[96];

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
		unlink(path);
	}
	rmdir(dir);
}

int bench_remote(int argc, char **argv)
{
	static unsigned char pages[FOLIO * PG], back[FOLIO * PG],
		sealed[PG + crypto_aead_xchacha20poly1305_ietf_ABYTES];
	static double lat[NR_LAT], lat1[2][NR_LAT];
	static uswap_id_t ids[2][2048 + 256];
	char host[64] = "127.0.0.1", tls_host[64] = "127.0.0.1", dir[] = "/tmp/uswap-bench-redis-XXXXXX";
	char spec[2][160], cacert[96] = "";
	int port = 0, tls_port = 0, ret = 1, nr = 1;
	bool json = false, no_tls = false;
	pid_t pid = 0;
	double t, get_us, load_us[2] = {0, 0}, st_mb[2] = {0, 0}, st1_mb[2] = {0, 0}, st_us[2] = {0, 0},
			  st1_us[2] = {0, 0}, enc_mb;
	struct uswap *u[2] = {NULL, NULL};
	unsigned char key[crypto_aead_xchacha20poly1305_ietf_KEYBYTES];
	unsigned char nonce[crypto_aead_xchacha20poly1305_ietf_NPUBBYTES] = {0};

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = true;
		else if (!strcmp(argv[i], "--no-tls"))
			no_tls = true;
		else if (!strcmp(argv[i], "--server") && i + 1 < argc &&
			 sscanf(argv[++i], "%63[^:]:%d", host, &port) == 2)
			;
		else if (!strcmp(argv[i], "--tls-server") && i + 1 < argc &&
			 sscanf(argv[++i], "%63[^:]:%d", tls_host, &tls_port) == 2)
			;
		else if (!strcmp(argv[i], "--cacert") && i + 1 < argc && strlen(argv[i + 1]) < sizeof(cacert))
			snprintf(cacert, sizeof(cacert), "%s", argv[++i]);
		else
			return cli_usage_error("bench remote: unknown or malformed argument \"%s\"", argv[i]);
	}
	if (!port) {
		tls_port = !no_tls; /* asks spawn_server() for a TLS port */
		pid = spawn_server(dir, &port, &tls_port);
		if (pid <= 0) {
			fprintf(stderr, "uswap: bench remote: cannot start redis-server (install "
					"redis-server or pass --server)\n");
			return 1;
		}
		snprintf(cacert, sizeof(cacert), "%s/ca.crt", dir);
	} else if (tls_port && !cacert[0]) {
		return cli_usage_error("bench remote: --tls-server needs --cacert FILE");
	}
	for (size_t i = 0; i < sizeof(pages); i++)
		pages[i] = (unsigned char)(i * 2654435761u >> 13);

	snprintf(spec[0], sizeof(spec[0]), "redis://%s:%d:prefix=uswap-bench", host, port);
	snprintf(spec[1], sizeof(spec[1]), "redis://%s:%d:prefix=uswap-bench-tls:cacert=%s", tls_host,
		 tls_port, cacert);
	nr = tls_port && !no_tls ? 2 : 1;
	for (int k = 0; k < nr; k++)
		if (uswap_create(&u[k], spec[k])) {
			fprintf(stderr, "uswap: bench remote: %s\n", uswap_errmsg());
			goto out_destroy;
		}
	/*
	 * Each pair is measured interleaved, so that both sides see the same machine: on two vCPUs a round
	 * trip costs ten times more when an idle vCPU must be woken (docs/results.md#remote-tier), and that
	 * changes from one second to the next. Stores: 8 rounds of 32 pipelined 64-page folios (one round
	 * trip each, 64 MiB in all) and 256 single pages (one round trip each, 8 MiB in all), in the clear
	 * and then over TLS in each round; nothing is freed until the end, so no queued DEL rides along.
	 */
	for (int r = 0; r < 8; r++) {
		for (int k = 0; k < nr; k++) {
			t = now_us();
			for (int i = r * 32; i < (r + 1) * 32; i++)
				if (uswap_store(u[k], pages, FOLIO, &ids[k][2048 + i]))
					goto out_destroy;
			st_us[k] += now_us() - t;
		}
		for (int k = 0; k < nr; k++) {
			t = now_us();
			for (int i = r * 256; i < (r + 1) * 256; i++)
				if (uswap_store(u[k], pages + (i % FOLIO) * PG, 1, &ids[k][i]))
					goto out_destroy;
			st1_us[k] += now_us() - t;
		}
	}
	for (int k = 0; k < nr; k++) {
		st_mb[k] = 256.0 * FOLIO * PG / st_us[k];
		st1_mb[k] = 2048.0 * PG / st1_us[k];
	}
	/* loads: a plain hiredis GET of a 4 KiB value (the floor), then a layer load of one page, in turn */
	redisContext *c = redisConnect(host, port);
	if (!c || c->err) {
		fprintf(stderr, "uswap: bench remote: cannot connect to %s:%d\n", host, port);
		if (c)
			redisFree(c);
		goto out_destroy;
	}
	freeReplyObject(redisCommand(c, "SET uswap-bench-floor %b", pages, (size_t)PG));
	for (int i = 0; i < NR_LAT; i++) {
		t = now_us();
		freeReplyObject(redisCommand(c, "GET uswap-bench-floor"));
		lat[i] = now_us() - t;
		for (int k = 0; k < nr; k++) {
			t = now_us();
			if (uswap_load(u[k], ids[k][i], back, 1)) {
				redisFree(c);
				goto out_destroy;
			}
			lat1[k][i] = now_us() - t;
		}
	}
	freeReplyObject(redisCommand(c, "DEL uswap-bench-floor"));
	redisFree(c);
	get_us = median(lat, NR_LAT);
	for (int k = 0; k < nr; k++) {
		load_us[k] = median(lat1[k], NR_LAT);
		for (int i = 0; i < 2048 + 256; i++)
			uswap_free(u[k], ids[k][i]);
	}
	/* The remote tier's sealing, as libsodium does it: XChaCha20-Poly1305 over each page, 16 bytes of
	 * associated data binding it to its owner and handle. */
	if (sodium_init() < 0)
		goto out_destroy;
	crypto_aead_xchacha20poly1305_ietf_keygen(key);
	t = now_us();
	for (int i = 0; i < 20000; i++) {
		uint64_t ad[2] = {1, (uint64_t)i};

		memcpy(nonce, &ad[1], sizeof(ad[1]));
		crypto_aead_xchacha20poly1305_ietf_encrypt(sealed, NULL, pages + (i % FOLIO) * PG, PG,
							   (const unsigned char *)ad, sizeof(ad), NULL, nonce,
							   key);
	}
	enc_mb = 20000.0 * PG / (now_us() - t);
	sodium_memzero(key, sizeof(key));
	if (json) {
		printf("{\"redis_get_4k_us\": %.2f, \"load_4k_p50_us\": %.2f, \"load_vs_get\": %.3f, "
		       "\"store_mb_s\": %.1f, \"store_mb_s_unpipelined\": %.1f, "
		       "\"pipelined_vs_unpipelined\": %.2f, "
		       "\"encrypt_mb_s\": %.1f",
		       get_us, load_us[0], load_us[0] / get_us, st_mb[0], st1_mb[0], st_mb[0] / st1_mb[0],
		       enc_mb);
		if (nr == 2)
			printf(", \"tls_load_4k_p50_us\": %.2f, \"tls_store_mb_s\": %.1f, "
			       "\"tls_store_mb_s_unpipelined\": %.1f, \"tls_vs_plain_load\": %.3f, "
			       "\"tls_vs_plain_store\": %.3f",
			       load_us[1], st_mb[1], st1_mb[1], load_us[1] / load_us[0], st_mb[1] / st_mb[0]);
		printf("}\n");
	} else {
		printf("redis GET 4k p50 %.2f us, layer load 4k p50 %.2f us (%.2fx)\nstore %.1f MB/s "
		       "pipelined, "
		       "%.1f MB/s unpipelined (%.1fx)\nencrypt %.1f MB/s\n",
		       get_us, load_us[0], load_us[0] / get_us, st_mb[0], st1_mb[0], st_mb[0] / st1_mb[0],
		       enc_mb);
		if (nr == 2)
			printf("TLS: layer load 4k p50 %.2f us (%.2fx plain), store %.1f MB/s pipelined "
			       "(%.2fx plain), "
			       "%.1f MB/s unpipelined\n",
			       load_us[1], load_us[1] / load_us[0], st_mb[1], st_mb[1] / st_mb[0], st1_mb[1]);
	}
	ret = 0;
out_destroy:
	if (ret)
		fprintf(stderr, "uswap: bench remote: %s\n", uswap_errmsg());
	for (int k = 0; k < 2; k++)
		if (u[k])
			uswap_destroy(u[k]);
	if (pid > 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		clean_dir(dir);
	}
	return ret;
}
