/*
 * rserver.h - redis-server processes for the remote-tier tests: each on a free loopback port in
 * 17000..17999 (its cluster bus port, +10000, free too) and its own temp dir; killed and removed at
 * exit, and killed by the kernel if the test process dies first.
 */
#ifndef USWAP_TEST_RSERVER_H
#define USWAP_TEST_RSERVER_H

#include <stdbool.h>
#include <sys/types.h>

#include <hiredis.h>

struct rserver {
	pid_t pid;
	int port;
	char dir[40];
	const char *tls_dir; /* rserver_start_tls(): its certificates */
	bool tls_mutual;
};

/* True when redis-server (and redis-cli) are installed. */
bool rserver_available(void);
/*
 * Start one server with --maxmemory-policy @policy and the NULL-terminated @extra arguments, and wait
 * until it answers PING. Return: 0, or -1 (it did not come up).
 */
int rserver_start(struct rserver *s, const char *policy, const char *const *extra);
/* The same, with the server started by the NULL-terminated command @wrap (e.g. `uswap run ... --`). */
int rserver_start_wrapped(struct rserver *s, const char *const *wrap, const char *policy,
			  const char *const *extra);
/*
 * rserver_start_tls() - the same, TLS only (--port 0): --tls-port, the server certificate and key
 * @certdir/s.crt, s.key, clients verified against @certdir/ca.crt when @mutual (else not asked for one).
 * Readiness is a `redis-cli --tls` PING.
 */
int rserver_start_tls(struct rserver *s, const char *certdir, bool mutual, const char *policy,
		      const char *const *extra);
/*
 * rserver_make_certs() - with the openssl command, in a new temp dir (@dir, 24 bytes): a CA (ca.crt,
 * ca.key), a server certificate it signed for 127.0.0.1 and localhost (s.crt, s.key), a client
 * certificate it signed (c.crt, c.key), and another CA that signed nothing here (x.crt). Removed at
 * exit. Return: 0, or -1 (no openssl, or it failed).
 */
int rserver_make_certs(char *dir);
/* SIGKILL it (no shutdown, no save), reap it, remove its dir. Idempotent. */
void rserver_kill(struct rserver *s);
/* A blocking connection with a 5 s timeout, or NULL. */
redisContext *rserver_connect(const struct rserver *s);
/* A port in 17000..17999 whose bus port is free too, spread by pid so parallel runs rarely meet; -1. */
int rserver_pick_port(void);
/* Run redis-cli (or any program) @argv with output to /dev/null. Return: its exit status, -1. */
int rserver_run(const char *const *argv);

#endif
