/*
 * bench_remote.c - `uswap bench remote [--json] [--server HOST:PORT]`: the Redis tier against plain
 * hiredis on the same server, in one run. Without --server it starts its own redis-server on a free
 * loopback port in a temp dir (no persistence) and kills it at the end.
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

#define PG USWAP_PAGE_SIZE
#define NR_LAT 2000
#define FOLIO 64

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

static pid_t spawn_server(char *dir, int *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	char ps[16];
	pid_t pid;

	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) || getsockname(fd, (struct sockaddr *)&a, &len))
		return -1;
	close(fd);
	*port = ntohs(a.sin_port);
	if (!mkdtemp(dir))
		return -1;
	snprintf(ps, sizeof(ps), "%d", *port);
	pid = fork();
	if (!pid) {
		execlp("redis-server", "redis-server", "--port", ps, "--bind", "127.0.0.1", "--dir", dir, "--save", "",
		       "--appendonly", "no", "--maxmemory-policy", "noeviction", "--logfile", "redis.log",
		       (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 500 && pid > 0; i++) {
		redisContext *c = redisConnect("127.0.0.1", *port);
		bool up = c && !c->err;

		if (c)
			redisFree(c);
		if (up)
			return pid;
		nanosleep(&(struct timespec){ 0, 10 * 1000 * 1000 }, NULL);
	}
	return -1;
}

int bench_remote(int argc, char **argv)
{
	static unsigned char pages[FOLIO * PG], back[FOLIO * PG], sealed[PG + crypto_aead_xchacha20poly1305_ietf_ABYTES];
	static double lat[NR_LAT], lat1[NR_LAT];
	static uswap_id_t ids[2048 + 256];
	char host[64] = "127.0.0.1", dir[] = "/tmp/uswap-bench-redis-XXXXXX", spec[128];
	int port = 0, ret = 1;
	bool json = false;
	pid_t pid = 0;
	double t, get_us, load_us, st_mb, st1_mb, st_us, st1_us, enc_mb;
	struct uswap *u = NULL;
	unsigned char key[crypto_aead_xchacha20poly1305_ietf_KEYBYTES];
	unsigned char nonce[crypto_aead_xchacha20poly1305_ietf_NPUBBYTES] = {0};

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = true;
		else if (!strcmp(argv[i], "--server") && i + 1 < argc && sscanf(argv[++i], "%63[^:]:%d", host, &port) == 2)
			;
		else
			return cli_usage_error("bench remote: unknown or malformed argument \"%s\"", argv[i]);
	}
	if (!port) {
		pid = spawn_server(dir, &port);
		if (pid <= 0) {
			fprintf(stderr, "uswap: bench remote: cannot start redis-server (install redis-server or pass --server)\n");
			return 1;
		}
	}
	for (size_t i = 0; i < sizeof(pages); i++)
		pages[i] = (unsigned char)(i * 2654435761u >> 13);

	snprintf(spec, sizeof(spec), "redis://%s:%d:prefix=uswap-bench", host, port);
	if (uswap_create(&u, spec)) {
		fprintf(stderr, "uswap: bench remote: %s\n", uswap_errmsg());
		goto out;
	}
	/*
	 * Each pair is measured interleaved, so that both sides see the same machine: on two vCPUs a round
	 * trip costs ten times more when an idle vCPU must be woken (docs/results.md#remote-tier), and that
	 * changes from one second to the next. Stores: 8 rounds of 32 pipelined 64-page folios (one round
	 * trip each, 64 MiB in all) and 256 single pages (one round trip each, 8 MiB in all); nothing is
	 * freed until the end, so no queued DEL rides along.
	 */
	st_us = st1_us = 0;
	for (int r = 0; r < 8; r++) {
		t = now_us();
		for (int i = r * 32; i < (r + 1) * 32; i++)
			if (uswap_store(u, pages, FOLIO, &ids[2048 + i]))
				goto out_destroy;
		st_us += now_us() - t;
		t = now_us();
		for (int i = r * 256; i < (r + 1) * 256; i++)
			if (uswap_store(u, pages + (i % FOLIO) * PG, 1, &ids[i]))
				goto out_destroy;
		st1_us += now_us() - t;
	}
	st_mb = 256.0 * FOLIO * PG / st_us;
	st1_mb = 2048.0 * PG / st1_us;
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
		t = now_us();
		if (uswap_load(u, ids[i], back, 1)) {
			redisFree(c);
			goto out_destroy;
		}
		lat1[i] = now_us() - t;
	}
	freeReplyObject(redisCommand(c, "DEL uswap-bench-floor"));
	redisFree(c);
	get_us = median(lat, NR_LAT);
	load_us = median(lat1, NR_LAT);
	for (int i = 0; i < 2048 + 256; i++)
		uswap_free(u, ids[i]);
	/* The remote tier's sealing, as libsodium does it: XChaCha20-Poly1305 over each page, 16 bytes of
	 * associated data binding it to its owner and handle. */
	if (sodium_init() < 0)
		goto out_destroy;
	crypto_aead_xchacha20poly1305_ietf_keygen(key);
	t = now_us();
	for (int i = 0; i < 20000; i++) {
		uint64_t ad[2] = { 1, (uint64_t)i };

		memcpy(nonce, &ad[1], sizeof(ad[1]));
		crypto_aead_xchacha20poly1305_ietf_encrypt(sealed, NULL, pages + (i % FOLIO) * PG, PG,
							   (const unsigned char *)ad, sizeof(ad), NULL, nonce, key);
	}
	enc_mb = 20000.0 * PG / (now_us() - t);
	sodium_memzero(key, sizeof(key));
	if (json)
		printf("{\"redis_get_4k_us\": %.2f, \"load_4k_p50_us\": %.2f, \"load_vs_get\": %.3f, "
		       "\"store_mb_s\": %.1f, \"store_mb_s_unpipelined\": %.1f, \"pipelined_vs_unpipelined\": %.2f, "
		       "\"encrypt_mb_s\": %.1f}\n",
		       get_us, load_us, load_us / get_us, st_mb, st1_mb, st_mb / st1_mb, enc_mb);
	else
		printf("redis GET 4k p50 %.2f us, layer load 4k p50 %.2f us (%.2fx)\nstore %.1f MB/s pipelined, "
		       "%.1f MB/s unpipelined (%.1fx)\nencrypt %.1f MB/s\n",
		       get_us, load_us, load_us / get_us, st_mb, st1_mb, st_mb / st1_mb, enc_mb);
	ret = 0;
out_destroy:
	if (ret)
		fprintf(stderr, "uswap: bench remote: %s\n", uswap_errmsg());
	uswap_destroy(u);
out:
	if (pid > 0) {
		char log[sizeof(dir) + 16];

		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		snprintf(log, sizeof(log), "%s/redis.log", dir);
		unlink(log);
		rmdir(dir);
	}
	return ret;
}
