/*
 * tls.h - TLS connections beside hiredis 0.14, which has no TLS of its own: the handshake here, then
 * rcluster.c formats and parses with hiredis and moves the bytes with tls_write()/tls_read(). Used by
 * rcluster.c only.
 */
#ifndef USWAP_TLS_H
#define USWAP_TLS_H

#include <stddef.h>
#include <sys/types.h>

struct ssl_ctx_st;
struct tls_conn;

/*
 * tls_ctx_new() - a client context that verifies servers against the PEM bundle @cacert (NULL: the
 * system's), presenting the certificate @cert with the key @key (NULL: none; mutual TLS).
 * Return: 0; -EINVAL a file that cannot be read or a key that does not match (err_set names it).
 */
int tls_ctx_new(struct ssl_ctx_st **out, const char *cacert, const char *cert, const char *key);
/* One more owner of @ctx (a clone's connections); tls_ctx_free() drops one. Both accept NULL. */
void tls_ctx_ref(struct ssl_ctx_st *ctx);
void tls_ctx_free(struct ssl_ctx_st *ctx);

/*
 * tls_connect() - TCP connection to @host:@port and TLS handshake (certificate and host name checked),
 * both within @timeout_ms. *@fd is the connected socket, blocking: give it to redisConnectFd(), which
 * owns it from then on (redisSetTimeout() sets its timeouts, redisFree() closes it).
 * Return: 0; -ECONNREFUSED no TCP connection; -EPROTO the handshake or the certificate failed (@why,
 * @whylen: the reason, e.g. "certificate verify failed: self-signed certificate in certificate chain");
 * -ENOMEM.
 */
int tls_connect(struct ssl_ctx_st *ctx, const char *host, int port, int timeout_ms, struct tls_conn **out,
		int *fd, char *why, size_t whylen);
/*
 * tls_write(), tls_read() - one SSL_write()/SSL_read() of at most @len bytes, blocking up to the
 * socket's timeouts. Return: bytes moved; tls_read() 0 at the server's close_notify; -1 with errno
 * EAGAIN (timeout), ECONNRESET (the connection ended), EPROTO (a bad record) or the socket's.
 */
ssize_t tls_write(struct tls_conn *t, const void *buf, size_t len);
ssize_t tls_read(struct tls_conn *t, void *buf, size_t len);
/* Free the TLS state of a connection whose socket redisFree() closed. NULL is a no-op. */
void tls_close(struct tls_conn *t);

#endif
