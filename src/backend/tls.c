/*
 * tls.c - TLS for the remote tier beside hiredis 0.14; see tls.h.
 *
 * hiredis 0.14 (Debian 12's) reads and writes its socket itself and has no TLS. rcluster.c keeps its
 * redisContext for what does no I/O (formatting commands into obuf, parsing replies with its reader)
 * and, on a TLS connection, moves the bytes itself with tls_write() and tls_read() on the calling
 * thread: no thread, no copy through a socketpair, no extra wake-up per round trip. (The first
 * version ran hiredis over a socketpair with a pump thread per connection: a load's p50 went from
 * ~50 us to ~132 us on this project's 2-vCPU guest, two cross-thread wake-ups per round trip.)
 *
 * The socket is blocking with SO_RCVTIMEO/SO_SNDTIMEO (redisSetTimeout() sets them on it, as for a
 * plain connection), so a read that times out comes back as -1 with errno EAGAIN, and hiredis closes
 * it at redisFree(). The handshake runs non-blocking, within the connect timeout.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "tls.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/fd.h"

struct tls_conn {
	SSL *ssl;
	int sock;
};

/*
 * The socket BIO with send(MSG_NOSIGNAL) for write(): OpenSSL's own write()s, and a write to a
 * connection the server reset raises SIGPIPE, here often on a program's faulting thread.
 */
static BIO_METHOD *nosig_method;
static pthread_once_t nosig_once = PTHREAD_ONCE_INIT;

static int nosig_write(BIO *b, const char *buf, int len)
{
	ssize_t n = send((int)BIO_get_fd(b, NULL), buf, (size_t)len, MSG_NOSIGNAL);

	BIO_clear_retry_flags(b);
	if (n <= 0 && BIO_sock_should_retry((int)n))
		BIO_set_retry_write(b);
	return (int)n;
}

static void nosig_init(void)
{
	const BIO_METHOD *sock = BIO_s_socket();
	BIO_METHOD *m = BIO_meth_new(BIO_TYPE_SOCKET, "uswap socket");

	if (!m)
		return;
	if (BIO_meth_set_write(m, nosig_write) != 1 || BIO_meth_set_read(m, BIO_meth_get_read(sock)) != 1 ||
	    BIO_meth_set_puts(m, BIO_meth_get_puts(sock)) != 1 ||
	    BIO_meth_set_ctrl(m, BIO_meth_get_ctrl(sock)) != 1 ||
	    BIO_meth_set_create(m, BIO_meth_get_create(sock)) != 1 ||
	    BIO_meth_set_destroy(m, BIO_meth_get_destroy(sock)) != 1) {
		BIO_meth_free(m);
		return;
	}
	nosig_method = m; /* kept for the process' life */
}

/* @ssl on @sock through the no-SIGPIPE BIO. Return: 0, or -1. */
static int set_socket(SSL *ssl, int sock)
{
	BIO *b;

	pthread_once(&nosig_once, nosig_init);
	b = nosig_method ? BIO_new(nosig_method) : NULL;
	if (!b)
		return -1;
	BIO_set_fd(b, sock, BIO_NOCLOSE);
	SSL_set_bio(ssl, b, b);
	return 0;
}

int tls_ctx_new(SSL_CTX **out, const char *cacert, const char *cert, const char *key)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	char buf[160];

	if (!ctx)
		return -ENOMEM;
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	SSL_CTX_set_read_ahead(ctx,
			       1); /* a record header and its body in one recv(); only SSL_read() reads */
	ERR_clear_error();
	if (cacert && cacert[0] ? SSL_CTX_load_verify_locations(ctx, cacert, NULL) != 1
				: SSL_CTX_set_default_verify_paths(ctx) != 1) {
		ERR_error_string_n(ERR_peek_last_error(), buf, sizeof(buf));
		SSL_CTX_free(ctx);
		return err_set(-EINVAL, "redis: cannot load cacert=%s (%s)", cacert ? cacert : "(system)",
			       buf);
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
	return fd_keep(fd); /* before SSL knows its number (rcluster.c's node_dial() says why) */
}

/* The handshake, non-blocking. Return: 0 or -EPROTO (@why says why). */
static int handshake(SSL *ssl, int sock, int timeout_ms, char *why, size_t whylen)
{
	uint64_t deadline = mono_ms() + (uint64_t)timeout_ms;
	unsigned long e;
	long v;
	int n;

	for (;;) {
		ERR_clear_error();
		n = SSL_connect(ssl);
		if (n == 1)
			return 0;
		switch (SSL_get_error(ssl, n)) {
		case SSL_ERROR_WANT_READ:
			if (wait_fd(sock, POLLIN, deadline))
				continue;
			snprintf(why, whylen, "no TLS handshake within %d ms (not a TLS port?)", timeout_ms);
			return -EPROTO;
		case SSL_ERROR_WANT_WRITE:
			if (wait_fd(sock, POLLOUT, deadline))
				continue;
			snprintf(why, whylen, "no TLS handshake within %d ms", timeout_ms);
			return -EPROTO;
		default:
			break;
		}
		break;
	}
	v = SSL_get_verify_result(ssl);
	e = ERR_peek_last_error();
	if (v != X509_V_OK)
		snprintf(why, whylen, "certificate verify failed: %s", X509_verify_cert_error_string(v));
	else if (e)
		ERR_error_string_n(e, why, whylen);
	else
		snprintf(why, whylen, "the server closed the connection in the TLS handshake");
	return -EPROTO;
}

int tls_connect(SSL_CTX *ctx, const char *host, int port, int timeout_ms, struct tls_conn **out, int *fd,
		char *why, size_t whylen)
{
	struct tls_conn *t = ualloc_zero(sizeof(*t));
	unsigned char ip[16];
	int ret = -ENOMEM, fl;

	if (!t)
		return -ENOMEM;
	t->sock = tcp_connect(host, port, timeout_ms);
	if (t->sock < 0) {
		ufree(t);
		return -ECONNREFUSED;
	}
	t->ssl = SSL_new(ctx);
	if (!t->ssl || set_socket(t->ssl, t->sock))
		goto out_free;
	/* the name checked is the one configured (or learnt from CLUSTER SLOTS): an IP or a DNS name */
	if (inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1) {
		if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(t->ssl), host) != 1)
			goto out_free;
	} else if (SSL_set_tlsext_host_name(t->ssl, host) != 1 || SSL_set1_host(t->ssl, host) != 1) {
		goto out_free;
	}
	ret = handshake(t->ssl, t->sock, timeout_ms, why, whylen);
	if (ret)
		goto out_free;
	fl = fcntl(t->sock, F_GETFL);
	if (fl < 0 || fcntl(t->sock, F_SETFL, fl & ~O_NONBLOCK) < 0) {
		ret = -ECONNREFUSED;
		goto out_free;
	}
	*fd = t->sock;
	*out = t;
	return 0;
out_free:
	if (t->ssl)
		SSL_free(t->ssl);
	fd_close(t->sock);
	ufree(t);
	return ret;
}

/* -1 with errno: EAGAIN a timeout, ECONNRESET the connection ended, EPROTO a bad record. */
static int tls_error(SSL *ssl, int n)
{
	int err = SSL_get_error(ssl, n), saved = errno;

	ERR_clear_error();
	switch (err) {
	case SSL_ERROR_WANT_READ: /* the socket's timeout */
	case SSL_ERROR_WANT_WRITE:
		errno = EAGAIN;
		break;
	case SSL_ERROR_ZERO_RETURN:
		errno = ECONNRESET;
		break;
	case SSL_ERROR_SYSCALL: /* errno 0: EOF without close_notify */
		errno = saved ? saved : ECONNRESET;
		break;
	default:
		errno = EPROTO;
		break;
	}
	return -1;
}

ssize_t tls_write(struct tls_conn *t, const void *buf, size_t len)
{
	int n = SSL_write(t->ssl, buf, len > INT_MAX ? INT_MAX : (int)len);

	return n > 0 ? n : tls_error(t->ssl, n);
}

ssize_t tls_read(struct tls_conn *t, void *buf, size_t len)
{
	int n = SSL_read(t->ssl, buf, len > INT_MAX ? INT_MAX : (int)len);

	if (n > 0)
		return n;
	if (SSL_get_error(t->ssl, n) == SSL_ERROR_ZERO_RETURN) {
		ERR_clear_error();
		return 0;
	}
	return tls_error(t->ssl, n);
}

void tls_close(struct tls_conn *t)
{
	if (!t)
		return;
	SSL_free(t->ssl); /* the socket is hiredis': redisFree() closed it */
	ufree(t);
}
