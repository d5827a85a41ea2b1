/*
 * tls.h - TLS connections for hiredis 0.14, which has no TLS of its own: the caller gets one end of a
 * socketpair to hand to redisConnectFd(), and a pump thread moves the bytes between the other end
 * and an OpenSSL connection to the server. Used by rcluster.c only.
 */
#ifndef USWAP_TLS_H
#define USWAP_TLS_H

#include <stddef.h>

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
 * both within @timeout_ms; then the pump starts. *@fd is the caller's end: plain bytes, blocking, to be
 * closed by the caller (redisFree() does) before tls_close(). The pump shuts the write side of that end
 * (the reader sees EOF) when the server's side fails.
 * Return: 0; -ECONNREFUSED no TCP connection; -EPROTO the handshake or the certificate failed (@why,
 * @whylen: the reason, e.g. "certificate verify failed: self-signed certificate in certificate chain");
 * -ENOMEM; -EAGAIN no thread.
 */
int tls_connect(struct ssl_ctx_st *ctx, const char *host, int port, int timeout_ms, struct tls_conn **out,
		int *fd, char *why, size_t whylen);
/* Stop the pump (after the caller's end is closed), close the TLS connection, free @t. NULL is a no-op. */
void tls_close(struct tls_conn *t);

#endif
