/*
 * tls.c - TLS for the remote tier through a socketpair and a pump thread; see tls.h.
 *
 * hiredis 0.14 (Debian 12's) reads and writes its socket itself, so it cannot run over an SSL*. It
 * runs over any connected socket, though: it gets one end of a socketpair, and a thread per
 * connection ("uswap-tls") does the handshake and then moves bytes between the other end and the
 * SSL*. Both sockets of the pump are non-blocking and it sleeps in poll() on both; it owns the SSL*
 * alone. The handshake runs on that thread too, so every OpenSSL write to the server happens where
 * SIGPIPE is blocked (util/thread.c), never on a program's faulting thread.
 *
 * Life: tls_connect() starts the pump and waits for the handshake's result. A server-side failure
 * (reset, close_notify, a bad record) makes the pump shut the write side of the pair (hiredis reads
 * EOF, as from a dead server) and then discard what hiredis still writes, so hiredis never meets
 * EPIPE. tls_close(), after hiredis closed its end, shuts the pump's end down; the pump sees it, sends
 * close_notify if it can, and returns; tls_close() joins it and frees the rest.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "tls.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/thread.h"

#define TLS_BUF (64 * 1024) /* per direction: a 64-page pipeline is ~260 KiB, four TLS records per fill */

struct tls_conn {
	SSL *ssl;
	int sock;          /* TCP to the server, non-blocking */
	int fd;            /* the pump's end of the socketpair, non-blocking */
	int timeout_ms;    /* for the handshake */
	pthread_t thread;
	sem_t ready;       /* posted once the handshake is done, either way */
	int result;        /* of the handshake: 0 or -EPROTO */
	char why[160];
	size_t up_off, up_len, down_off, down_len;
	unsigned char up[TLS_BUF], down[TLS_BUF]; /* hiredis -> server, server -> hiredis */
};

int tls_ctx_new(SSL_CTX **out, const char *cacert, const char *cert, const char *key)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	char buf[160];

	if (!ctx)
		return -ENOMEM;
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	ERR_clear_error();
	if (cacert && cacert[0] ? SSL_CTX_load_verify_locations(ctx, cacert, NULL) != 1
				: SSL_CTX_set_default_verify_paths(ctx) != 1) {
		ERR_error_string_n(ERR_peek_last_error(), buf, sizeof(buf));
		SSL_CTX_free(ctx);
		return err_set(-EINVAL, "redis: cannot load cacert=%s (%s)", cacert ? cacert : "(system)", buf);
	}
	if (cert && cert[0]) {
		if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
			ERR_error_string_n(ERR_peek_last_error(), buf, sizeof(buf));
			SSL_CTX_free(ctx);
			return err_set(-EINVAL, "redis: cannot load cert=%s (%s)", cert, buf);
		}
		if (SSL_CTX_use_PrivateKey_file(ctx, key && key[0] ? key : cert, SSL_FILETYPE_PEM) != 1 ||
		    SSL_CTX_check_private_key(ctx) != 1) {
			ERR_error_string_n(ERR_peek_last_error(), buf, sizeof(buf));
			SSL_CTX_free(ctx);
			return err_set(-EINVAL, "redis: cannot use key=%s with cert=%s (%s)",
				       key && key[0] ? key : cert, cert, buf);
		}
	}
	*out = ctx;
	return 0;
}

void tls_ctx_ref(SSL_CTX *ctx)
{
	if (ctx)
		SSL_CTX_up_ref(ctx);
}

void tls_ctx_free(SSL_CTX *ctx)
{
	SSL_CTX_free(ctx);
}

static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	return fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ? -1 : 0;
}

/* Wait until @fd is ready for @events or @deadline passes. Return: true if ready. */
static bool wait_fd(int fd, short events, uint64_t deadline)
{
	for (;;) {
		uint64_t now = mono_ms();
		struct pollfd p = {fd, events, 0};
		int n;

		if (now >= deadline)
			return false;
		n = poll(&p, 1, (int)(deadline - now));
		if (n > 0)
			return true;
		if (n < 0 && errno != EINTR)
			return false;
	}
}

/* A non-blocking TCP connection to @host:@port within @timeout_ms. Return: the socket, or -1. */
static int tcp_connect(const char *host, int port, int timeout_ms)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res, *a;
	uint64_t deadline = mono_ms() + (uint64_t)timeout_ms;
	char ps[8];
	int fd = -1, one = 1;

	snprintf(ps, sizeof(ps), "%d", port);
	if (getaddrinfo(host, ps, &hints, &res))
		return -1;
	for (a = res; a; a = a->ai_next) {
		int soerr = 0;
		socklen_t len = sizeof(soerr);

		fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
		if (fd < 0)
			continue;
		if (!connect(fd, a->ai_addr, a->ai_addrlen) ||
		    (errno == EINPROGRESS && wait_fd(fd, POLLOUT, deadline) &&
		     !getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) && !soerr))
			break;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd >= 0)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

/* The handshake, on the pump thread. Return: 0 or -EPROTO (t->why says why). */
static int handshake(struct tls_conn *t)
{
	uint64_t deadline = mono_ms() + (uint64_t)t->timeout_ms;
	unsigned long e;
	long v;
	int n;

	for (;;) {
		ERR_clear_error();
		n = SSL_connect(t->ssl);
		if (n == 1)
			return 0;
		switch (SSL_get_error(t->ssl, n)) {
		case SSL_ERROR_WANT_READ:
			if (wait_fd(t->sock, POLLIN, deadline))
				continue;
			snprintf(t->why, sizeof(t->why), "no TLS handshake within %d ms (not a TLS port?)",
				 t->timeout_ms);
			return -EPROTO;
		case SSL_ERROR_WANT_WRITE:
			if (wait_fd(t->sock, POLLOUT, deadline))
				continue;
			snprintf(t->why, sizeof(t->why), "no TLS handshake within %d ms", t->timeout_ms);
			return -EPROTO;
		default:
			break;
		}
		break;
	}
	v = SSL_get_verify_result(t->ssl);
	e = ERR_peek_last_error();
	if (v != X509_V_OK)
		snprintf(t->why, sizeof(t->why), "certificate verify failed: %s", X509_verify_cert_error_string(v));
	else if (e)
		ERR_error_string_n(e, t->why, sizeof(t->why));
	else
		snprintf(t->why, sizeof(t->why), "the server closed the connection in the TLS handshake");
	return -EPROTO;
}

/* One step of the SSL side: 0 progress or wait (*ev says for what), -1 the connection is over. */
static int ssl_step(SSL *ssl, int n, short *ev)
{
	switch (SSL_get_error(ssl, n)) {
	case SSL_ERROR_WANT_READ:
		*ev |= POLLIN;
		return 0;
	case SSL_ERROR_WANT_WRITE:
		*ev |= POLLOUT;
		return 0;
	default:
		return -1;
	}
}

/* Move bytes both ways until either side ends. Return: true if hiredis' side ended (a clean close). */
static bool pump(struct tls_conn *t)
{
	for (;;) {
		struct pollfd p[2] = {{t->sock, 0, 0}, {t->fd, 0, 0}};
		bool progress = false;
		ssize_t r;
		int n;

		if (!t->up_len) {
			r = read(t->fd, t->up, sizeof(t->up));
			if (r > 0) {
				t->up_off = 0;
				t->up_len = (size_t)r;
				progress = true;
			} else if (!r || (errno != EAGAIN && errno != EINTR)) {
				return true;
			} else {
				p[1].events |= POLLIN;
			}
		}
		if (t->up_len) {
			n = SSL_write(t->ssl, t->up + t->up_off, (int)(t->up_len - t->up_off));
			if (n > 0) {
				t->up_off += (size_t)n;
				if (t->up_off == t->up_len)
					t->up_len = 0;
				progress = true;
			} else if (ssl_step(t->ssl, n, &p[0].events)) {
				return false;
			}
		}
		if (!t->down_len) {
			n = SSL_read(t->ssl, t->down, sizeof(t->down));
			if (n > 0) {
				t->down_off = 0;
				t->down_len = (size_t)n;
				progress = true;
			} else if (ssl_step(t->ssl, n, &p[0].events)) {
				return false;
			}
		}
		if (t->down_len) {
			r = send(t->fd, t->down + t->down_off, t->down_len - t->down_off, MSG_NOSIGNAL);
			if (r > 0) {
				t->down_off += (size_t)r;
				if (t->down_off == t->down_len)
					t->down_len = 0;
				progress = true;
			} else if (errno == EAGAIN || errno == EINTR) {
				p[1].events |= POLLOUT;
			} else {
				return true;
			}
		}
		if (progress)
			continue;
		if (!p[0].events)
			p[0].fd = -1; /* only hiredis' side can move: the pair's HUP still ends the wait */
		if (poll(p, 2, -1) < 0 && errno != EINTR)
			return false;
		if (p[1].revents & (POLLHUP | POLLERR))
			return true;
	}
}

static void *pump_main(void *arg)
{
	struct tls_conn *t = arg;
	char sink[4096];

	t->result = handshake(t);
	sem_post(&t->ready);
	if (t->result)
		return NULL;
	if (pump(t)) {
		SSL_shutdown(t->ssl); /* close_notify, if the socket takes it now; no wait for the answer */
		return NULL;
	}
	/* the server's side failed: hiredis reads EOF; what it still writes is dropped until it closes */
	shutdown(t->fd, SHUT_WR);
	for (;;) {
		struct pollfd p = {t->fd, POLLIN, 0};
		ssize_t r = read(t->fd, sink, sizeof(sink));

		if (!r || (r < 0 && errno != EAGAIN && errno != EINTR))
			return NULL;
		if (r < 0)
			poll(&p, 1, -1);
	}
}

int tls_connect(SSL_CTX *ctx, const char *host, int port, int timeout_ms, struct tls_conn **out, int *fd,
		char *why, size_t whylen)
{
	struct tls_conn *t = ualloc_zero(sizeof(*t));
	unsigned char ip[16];
	int sv[2], ret;

	if (!t)
		return -ENOMEM;
	t->timeout_ms = timeout_ms;
	t->sock = tcp_connect(host, port, timeout_ms);
	if (t->sock < 0) {
		ufree(t);
		return -ECONNREFUSED;
	}
	ret = -ENOMEM;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		goto out_sock;
	t->fd = sv[1];
	if (set_nonblock(t->fd))
		goto out_pair;
	t->ssl = SSL_new(ctx);
	if (!t->ssl || SSL_set_fd(t->ssl, t->sock) != 1)
		goto out_pair;
	/* the name checked is the one configured (or learnt from CLUSTER SLOTS): an IP or a DNS name */
	if (inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1) {
		if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(t->ssl), host) != 1)
			goto out_pair;
	} else if (SSL_set_tlsext_host_name(t->ssl, host) != 1 || SSL_set1_host(t->ssl, host) != 1) {
		goto out_pair;
	}
	sem_init(&t->ready, 0, 0);
	ret = thread_start(&t->thread, "uswap-tls", pump_main, t);
	if (ret)
		goto out_sem;
	while (sem_wait(&t->ready) && errno == EINTR)
		;
	if (t->result) {
		pthread_join(t->thread, NULL);
		snprintf(why, whylen, "%s", t->why);
		ret = t->result;
		goto out_sem;
	}
	*fd = sv[0];
	*out = t;
	return 0;
out_sem:
	sem_destroy(&t->ready);
out_pair:
	if (t->ssl)
		SSL_free(t->ssl);
	close(sv[0]);
	close(sv[1]);
out_sock:
	close(t->sock);
	ufree(t);
	return ret;
}

void tls_close(struct tls_conn *t)
{
	if (!t)
		return;
	shutdown(t->fd, SHUT_RDWR); /* wakes the pump if hiredis' close did not */
	pthread_join(t->thread, NULL);
	sem_destroy(&t->ready);
	SSL_free(t->ssl);
	close(t->sock);
	close(t->fd);
	ufree(t);
}
