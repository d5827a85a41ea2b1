/*
 * rcluster.c - connections to one Redis server or a Redis Cluster; see rcluster.h.
 * The only file that calls hiredis: its replies and REDIS_ERR become 0/-errno here.
 * One job: a batch of commands to the right nodes, through redirects, failures and retries; the slot
 * map, the per-node pipelines and the retry policy share its node table.
 *
 * A batch runs in rounds. Each round routes every pending command by its key's slot (or to the node
 * an ASK named), appends it to that node's pipeline, flushes every pipeline, then reads the replies
 * node by node in the order they were sent. MOVED rewrites the slot map (and asks for a refresh),
 * ASK sends that one command again after ASKING; both go round again at once. A node whose
 * connection fails is dropped and remembered as down for a while; its commands stay pending for the
 * retry policy of rcluster_exec(). So is one that answers what was not asked (node_out_of_step()):
 * a pipeline whose replies must pair with their commands ends in a PING, and a reply must be whole
 * within the connection's timeout and RC_REPLY_MAX bytes (node_get_reply()).
 *
 * With tls, every connection (seeds, nodes learnt from CLUSTER SLOTS or a redirect, reconnects, the
 * lease thread's clone) is made by tls_connect(), and its I/O goes through node_flush() and
 * node_get_reply(): hiredis formats the commands into its buffer and parses the replies, tls.c moves
 * the bytes. Everything else is the same for both.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hiredis.h>

#include "rcluster.h"
#include "tls.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/fd.h"

#define RC_PENDING       1    /* cmd.result while the command still has to go (again) */
#define RC_MAX_REDIRECTS 16   /* redirect rounds per batch: a resharding moves a slot once */
#define RC_DOWN_MIN_MS   1000 /* a failed or replica-less node is skipped by stores this long (or timeout) */
#define RC_SLEEP_MAX_MS  200  /* longest pause between retry rounds of a load */
/* bytes read for one reply: the largest, CLUSTER SLOTS of a map cut into 16384 ranges, is ~5 MiB */
#define RC_REPLY_MAX (8u << 20)

/* CRC16 of one byte shifted through polynomial 0x1021, for each byte value: built once. */
static uint16_t crc16_table[256];
static pthread_once_t crc16_once = PTHREAD_ONCE_INIT;

static void crc16_init(void)
{
	for (unsigned v = 0; v < 256; v++) {
		uint16_t crc = (uint16_t)(v << 8);

		for (int bit = 0; bit < 8; bit++)
			crc = crc & 0x8000 ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
		crc16_table[v] = crc;
	}
}

uint16_t rcluster_crc16(const void *buf, size_t len)
{
	const unsigned char *p = buf;
	uint16_t crc = 0;

	pthread_once(&crc16_once, crc16_init);
	while (len--)
		crc = (uint16_t)(crc << 8) ^ crc16_table[(crc >> 8) ^ *p++];
	return crc;
}

unsigned rcluster_key_slot(const char *key, size_t len)
{
	const char *open = memchr(key, '{', len);

	if (open) {
		const char *close = memchr(open + 1, '}', len - (size_t)(open + 1 - key));

		if (close && close > open + 1)
			return rcluster_crc16(open + 1, (size_t)(close - open - 1)) & (RC_SLOTS - 1);
	}
	return rcluster_crc16(key, len) & (RC_SLOTS - 1);
}

static void sleep_ms(uint64_t ms)
{
	struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000};

	nanosleep(&ts, NULL);
}

static size_t rc_key(const struct rcluster *rc, const struct rc_cmd *cmd, char *out, size_t outlen)
{
	int n = cmd->name ? snprintf(out, outlen, "%s", cmd->name)
			  : snprintf(out, outlen, "%s%u", rc->prefix, (unsigned)cmd->key);

	return n < 0 ? 0 : (size_t)n < outlen ? (size_t)n : outlen - 1;
}

/* The index of node HOST:PORT, added if new. Return: index, or -1 if the table is full. */
static int node_find(struct rcluster *rc, const char *host, size_t hostlen, int port)
{
	unsigned i;

	if (hostlen >= sizeof(rc->nodes[0].host))
		return -1;
	for (i = 0; i < rc->nr_nodes; i++)
		if (rc->nodes[i].port == port && strlen(rc->nodes[i].host) == hostlen &&
		    !memcmp(rc->nodes[i].host, host, hostlen))
			return (int)i;
	if (rc->nr_nodes == RC_MAX_NODES)
		return -1;
	memset(&rc->nodes[i], 0, sizeof(rc->nodes[i]));
	memcpy(rc->nodes[i].host, host, hostlen);
	rc->nodes[i].host[hostlen] = '\0';
	rc->nodes[i].port = port;
	rc->nr_nodes++;
	return (int)i;
}

int rcluster_add_seed(struct rcluster *rc, const char *hostport)
{
	const char *colon = strrchr(hostport, ':');
	char *end;
	long port;

	if (rc->nr_seeds == RC_MAX_SEEDS)
		return err_set(-ENOSPC, "redis: at most %d seed nodes", RC_MAX_SEEDS);
	if (!colon || colon == hostport)
		return err_set(-EINVAL, "redis: expected HOST:PORT, got '%s'", hostport);
	port = strtol(colon + 1, &end, 10);
	if (*end || port <= 0 || port > 65535)
		return err_set(-EINVAL, "redis: bad port in '%s'", hostport);
	if (node_find(rc, hostport, (size_t)(colon - hostport), (int)port) != (int)rc->nr_seeds)
		return err_set(-EINVAL, "redis: seed '%s' is given twice or too long", hostport);
	rc->nr_seeds++;
	return 0;
}

static struct timeval ms_tv(int ms)
{
	return (struct timeval){ms / 1000, (ms % 1000) * 1000};
}

static void node_drop(struct rc_node *nd)
{
	if (nd->c) {
		fd_forget(nd->c->fd);
		redisFree(nd->c); /* closes the socket, a TLS one too */
	}
	nd->c = NULL;
	tls_close(nd->tls);
	nd->tls = NULL;
}

/*
 * A hiredis context on a TCP connection, or with tls on a socket tls.c drives. Return: 0; -errno.
 * The socket is kept (util/fd.h): close-on-exec, high in the table, out of the program's sight, as the
 * instance's other descriptors are. hiredis opens it without close-on-exec: a program's exec'd
 * children inherited every connection, and the program saw them at its lowest free numbers.
 */
static int node_dial(struct rcluster *rc, struct rc_node *nd, int timeout_ms)
{
	int fd, ret;

	if (!rc->tls) {
		nd->c = redisConnectWithTimeout(nd->host, nd->port, ms_tv(timeout_ms));
		if (!nd->c || nd->c->err)
			return -ECONNREFUSED;
		nd->c->fd = fd_keep(nd->c->fd);
		return 0;
	}
	ret = tls_connect(rc->ssl_ctx, nd->host, nd->port, timeout_ms, &nd->tls, &fd, rc->tls_why,
			  sizeof(rc->tls_why));
	if (ret)
		return ret;
	nd->c = redisConnectFd(fd);
	if (!nd->c) {
		fd_close(fd);
		return -ENOMEM;
	}
	return nd->c->err ? -ECONNREFUSED : 0;
}

/* A failure on @nd: drop the connection, skip the node for a while, refresh the map before trusting it. */
static int down_ms(const struct rcluster *rc)
{
	return rc->timeout_ms > RC_DOWN_MIN_MS ? rc->timeout_ms : RC_DOWN_MIN_MS;
}

static void node_fail(struct rcluster *rc, struct rc_node *nd)
{
	node_drop(nd);
	nd->broken = true;
	nd->retry_at_ms = mono_ms() + (uint64_t)down_ms(rc);
	rc->n.conn_errors++;
	if (rc->cluster)
		rc->stale = true;
}

/* A failed TLS read or write, as hiredis would have recorded it on @c. */
static int tls_fail(redisContext *c, ssize_t n)
{
	c->err = n ? REDIS_ERR_IO : REDIS_ERR_EOF;
	snprintf(c->errstr, sizeof(c->errstr), "%s", n ? strerror(errno) : "Server closed the connection");
	return REDIS_ERR;
}

/* redisBufferWrite() of @nd's connection, over TLS when it is one. */
static int node_flush(struct rc_node *nd, int *done)
{
	redisContext *c = nd->c;
	ssize_t n;

	if (!nd->tls)
		return redisBufferWrite(c, done);
	if (c->err)
		return REDIS_ERR;
	if (sdslen(c->obuf)) {
		n = tls_write(nd->tls, c->obuf, sdslen(c->obuf));
		if (n <= 0)
			return tls_fail(c, n < 0 ? n : -1);
		sdsrange(c->obuf, (int)n, -1);
	}
	*done = !sdslen(c->obuf);
	return REDIS_OK;
}

/* One read of @nd's connection into its reader, over TLS when it is one. Return: bytes read; -1, c->err set. */
static ssize_t node_read(struct rc_node *nd)
{
	redisContext *c = nd->c;
	char buf[16384]; /* one TLS record */
	size_t before = c->reader->len;
	ssize_t n;

	if (!nd->tls)
		return redisBufferRead(c) == REDIS_OK ? (ssize_t)(c->reader->len - before) : -1;
	n = tls_read(nd->tls, buf, sizeof(buf));
	if (n <= 0) {
		tls_fail(c, n);
		return -1;
	}
	if (redisReaderFeed(c->reader, buf, (size_t)n) != REDIS_OK) {
		c->err = c->reader->err;
		snprintf(c->errstr, sizeof(c->errstr), "%s", c->reader->errstr);
		return -1;
	}
	return n;
}

/*
 * redisGetReply() of @nd's connection (flush, then read until a reply is whole), over TLS when it is
 * one, with the bounds hiredis lacks: the socket's timeout bounds each read, but a server that sends a
 * byte now and then, or streams bytes behind a huge declared length, would hold the caller (and fill
 * its memory) for ever. So a reply must be whole within the connection's timeout of the first wait
 * and RC_REPLY_MAX bytes; else the connection fails as on a timeout (REDIS_ERR_IO, errno EAGAIN).
 */
static int node_get_reply(struct rc_node *nd, redisReply **out)
{
	redisContext *c = nd->c;
	uint64_t start;
	size_t got = 0;
	void *r = NULL;
	int done = 0;
	ssize_t n;

	if (redisGetReplyFromReader(c, &r) != REDIS_OK)
		return REDIS_ERR;
	start = r ? 0 : mono_ms();
	while (!r) {
		while (!done)
			if (node_flush(nd, &done) != REDIS_OK)
				return REDIS_ERR;
		n = node_read(nd);
		if (n < 0)
			return REDIS_ERR;
		got += (size_t)n;
		if (redisGetReplyFromReader(c, &r) != REDIS_OK)
			return REDIS_ERR;
		if (!r && (got > RC_REPLY_MAX || mono_ms() - start >= (uint64_t)nd->io_timeout_ms)) {
			c->err = REDIS_ERR_IO;
			errno = EAGAIN;
			snprintf(c->errstr, sizeof(c->errstr), "no whole reply in %zu bytes and %llu ms", got,
				 (unsigned long long)(mono_ms() - start));
			return REDIS_ERR;
		}
	}
	*out = r;
	return REDIS_OK;
}

/* Bytes @nd's reader holds past the replies taken: replies nobody asked for (see node_out_of_step()). */
static bool node_has_extra(const struct rc_node *nd)
{
	return nd->c && nd->c->reader->pos < nd->c->reader->len;
}

/*
 * redisCommand() on @nd: one command, waiting for its reply. Return: the reply, or NULL (c->err set;
 * also when more came than the one reply: the next command would take the rest for its own).
 */
static redisReply *node_vcommand(struct rc_node *nd, const char *fmt, ...)
{
	redisReply *r = NULL;
	va_list ap;
	int ret;

	va_start(ap, fmt);
	ret = redisvAppendCommand(nd->c, fmt, ap);
	va_end(ap);
	if (ret != REDIS_OK || node_get_reply(nd, &r) != REDIS_OK)
		return NULL;
	if (node_has_extra(nd)) {
		freeReplyObject(r);
		nd->c->err = REDIS_ERR_PROTOCOL;
		snprintf(nd->c->errstr, sizeof(nd->c->errstr), "more than one reply to one command");
		return NULL;
	}
	return r;
}

/* The server ended the connection or sent no RESP, as a TLS-only port does to a plain client. */
static bool nd_closed(const struct rc_node *nd)
{
	return nd->c && (nd->c->err == REDIS_ERR_EOF || nd->c->err == REDIS_ERR_IO ||
			 nd->c->err == REDIS_ERR_PROTOCOL);
}

/* One command, waiting for its reply (open and refresh only). Return: the reply or NULL. */
static redisReply *node_command(struct rc_node *nd, const char *fmt, const char *arg)
{
	return arg ? node_vcommand(nd, fmt, arg) : node_vcommand(nd, fmt);
}

/* Socket timeouts of @nd for this round: a load never waits past its deadline. Return: 0 or -EIO. */
static int node_set_timeout(struct rc_node *nd, int ms)
{
	if (ms == nd->io_timeout_ms)
		return 0;
	if (redisSetTimeout(nd->c, ms_tv(ms)) != REDIS_OK)
		return -EIO;
	nd->io_timeout_ms = ms;
	return 0;
}

/*
 * Return: 0; -ECONNREFUSED; -EPROTO TLS handshake or certificate refused (rc->tls_why says why);
 * -EPERM authentication refused; -EINVAL SELECT refused.
 */
static int node_connect(struct rcluster *rc, struct rc_node *nd, int timeout_ms)
{
	redisReply *r;
	char db[16];
	int ret;

	node_drop(nd);
	ret = node_dial(rc, nd, timeout_ms);
	if (ret) {
		node_drop(nd);
		return ret == -EPROTO ? ret : -ECONNREFUSED;
	}
	nd->io_timeout_ms = 0;
	if (node_set_timeout(nd, timeout_ms)) {
		node_drop(nd);
		return -ECONNREFUSED;
	}
	rc->n.reconnects++;
	if (rc->password[0]) {
		r = rc->user[0] ? node_vcommand(nd, "AUTH %s %s", rc->user, rc->password)
				: node_command(nd, "AUTH %s", rc->password);
		if (!r || r->type == REDIS_REPLY_ERROR) {
			if (r)
				freeReplyObject(r);
			node_drop(nd);
			return r ? -EPERM : -ECONNREFUSED;
		}
		freeReplyObject(r);
	}
	if (rc->db) {
		snprintf(db, sizeof(db), "%d", rc->db);
		r = node_command(nd, "SELECT %s", db);
		if (!r || r->type == REDIS_REPLY_ERROR) {
			if (r)
				freeReplyObject(r);
			node_drop(nd);
			return r ? -EINVAL : -ECONNREFUSED;
		}
		freeReplyObject(r);
	}
	return 0;
}

/* The slot map from one node's CLUSTER SLOTS. Return: 0, or -EIO (nothing changed). */
static int slots_from(struct rcluster *rc, struct rc_node *nd)
{
	redisReply *r = node_command(nd, "CLUSTER SLOTS", NULL);
	int ret = -EIO;

	if (!r)
		return -EIO;
	if (r->type != REDIS_REPLY_ARRAY || !r->elements)
		goto out;
	for (size_t i = 0; i < r->elements; i++) {
		redisReply *e = r->element[i];

		if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
		    e->element[0]->type != REDIS_REPLY_INTEGER ||
		    e->element[1]->type != REDIS_REPLY_INTEGER || e->element[2]->type != REDIS_REPLY_ARRAY ||
		    e->element[2]->elements < 2 || e->element[2]->element[0]->type != REDIS_REPLY_STRING ||
		    e->element[2]->element[1]->type != REDIS_REPLY_INTEGER || e->element[0]->integer < 0 ||
		    e->element[1]->integer >= RC_SLOTS || e->element[0]->integer > e->element[1]->integer ||
		    e->element[2]->element[1]->integer < 1 || e->element[2]->element[1]->integer > 65535)
			goto out; /* a port out of range, cut to an int, could name another server's */
	}
	memset(rc->slot_node, RC_NO_NODE, sizeof(rc->slot_node));
	for (size_t i = 0; i < r->elements; i++) {
		redisReply *e = r->element[i], *m = e->element[2];
		const char *host = m->element[0]->str;
		size_t hostlen = m->element[0]->len;
		int idx;

		if (!hostlen || !strcmp(host, "?")) { /* "the host you asked" */
			host = nd->host;
			hostlen = strlen(host);
		}
		idx = node_find(rc, host, hostlen, (int)m->element[1]->integer);
		if (idx < 0)
			continue; /* those slots stay unknown: their commands fail this batch */
		for (long long s = e->element[0]->integer; s <= e->element[1]->integer; s++)
			rc->slot_node[s] = (uint8_t)idx;
	}
	rc->stale = false;
	rc->n.refreshes++;
	ret = 0;
out:
	freeReplyObject(r);
	return ret;
}

/*
 * Ask the nodes for the slot map: first those connected, then those not known to be down, then the
 * rest, each waited for at most @io_ms. A node that fails here is marked down like in a batch.
 * Return: 0 or -EIO.
 */
static int refresh_slots(struct rcluster *rc, int io_ms)
{
	uint64_t now = mono_ms();

	for (int pass = 0; pass < 3; pass++) {
		for (unsigned i = 0; i < rc->nr_nodes; i++) {
			struct rc_node *nd = &rc->nodes[i];
			bool connected = nd->c != NULL, down = nd->retry_at_ms > now;

			if ((pass == 0) != connected || (pass == 1 && down) || (pass == 2 && !down))
				continue;
			if ((!connected && node_connect(rc, nd, io_ms)) || node_set_timeout(nd, io_ms)) {
				node_fail(rc, nd);
				continue;
			}
			if (!slots_from(rc, nd))
				return 0;
			if (!nd->c || nd->c->err)
				node_fail(rc, nd);
		}
	}
	return -EIO;
}

/* A server that may evict keys would drop pages: only noeviction is accepted. */
static int node_check_policy(struct rcluster *rc, struct rc_node *nd)
{
	redisReply *r;
	int ret = -EIO;

	if (!nd->c && node_connect(rc, nd, rc->timeout_ms))
		return err_set(-ECONNREFUSED, "redis: cannot connect to %s:%d", nd->host, nd->port);
	r = node_command(nd, "CONFIG GET maxmemory-policy", NULL);
	if (!r)
		return err_set(-EIO, "redis: %s:%d does not answer CONFIG GET", nd->host, nd->port);
	if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->type == REDIS_REPLY_STRING)
		ret = strcmp(r->element[1]->str, "noeviction") ? -EPERM : 0;
	if (ret == -EPERM)
		err_set(-EPERM,
			"redis: %s:%d may evict keys (maxmemory-policy %s): set maxmemory-policy noeviction",
			nd->host, nd->port, r->element[1]->str);
	else if (ret)
		err_set(-EIO, "redis: %s:%d: unexpected answer to CONFIG GET maxmemory-policy", nd->host,
			nd->port);
	freeReplyObject(r);
	return ret;
}

int rcluster_open(struct rcluster *rc)
{
	const char *tier = rc->cluster ? "redis-cluster" : "redis";
	bool checked[RC_MAX_NODES] = {false};
	int ret = -ECONNREFUSED;

	if (rc->tls && !rc->ssl_ctx) {
		ret = tls_ctx_new(&rc->ssl_ctx, rc->cacert, rc->cert, rc->key);
		if (ret)
			return ret;
		ret = -ECONNREFUSED;
	}
	for (unsigned i = 0; i < rc->nr_seeds && ret; i++) {
		ret = node_connect(rc, &rc->nodes[i], rc->timeout_ms);
		if (ret == -EPROTO)
			return err_set(ret, "%s: %s:%d: TLS handshake failed: %s", tier, rc->nodes[i].host,
				       rc->nodes[i].port, rc->tls_why);
		if (ret == -EPERM)
			return err_set(ret, "redis: %s:%d refused authentication%s%s", rc->nodes[i].host,
				       rc->nodes[i].port, rc->user[0] ? " of user " : "", rc->user);
		if (ret == -EINVAL)
			return err_set(ret, "redis: %s:%d refused SELECT %d", rc->nodes[i].host,
				       rc->nodes[i].port, rc->db);
	}
	if (ret)
		return err_set(ret, "redis: cannot connect to %s:%d%s", rc->nodes[0].host, rc->nodes[0].port,
			       rc->nr_seeds > 1 ? " or any other seed" : "");
	if (!rc->cluster) {
		redisReply *r = node_command(&rc->nodes[0], "CLUSTER INFO", NULL);
		bool is_node =
			r &&
			r->type == REDIS_REPLY_STRING; /* elsewhere an error: "cluster support disabled" */

		if (r)
			freeReplyObject(r);
		if (!r && rc->tls && nd_closed(&rc->nodes[0]))
			return err_set(-EPROTO,
				       "redis: %s:%d: %s after the TLS handshake (does it want a client "
				       "certificate? "
				       "cert=, key=)",
				       rc->nodes[0].host, rc->nodes[0].port, rc->nodes[0].c->errstr);
		if (!r && !rc->tls && nd_closed(&rc->nodes[0]))
			return err_set(-ECONNREFUSED,
				       "redis: %s:%d: %s at the first command (a TLS port? add tls)",
				       rc->nodes[0].host, rc->nodes[0].port, rc->nodes[0].c->errstr);
		if (is_node) /* it would answer MOVED for most keys */
			return err_set(-EINVAL, "redis: %s:%d is a cluster node: use redis-cluster://",
				       rc->nodes[0].host, rc->nodes[0].port);
		memset(rc->slot_node, 0, sizeof(rc->slot_node));
	} else {
		if (refresh_slots(rc, rc->timeout_ms))
			return err_set(
				-EIO,
				"redis: no seed answers CLUSTER SLOTS with a map of the cluster (is %s:%d a "
				"cluster node?)",
				rc->nodes[0].host, rc->nodes[0].port);
		for (unsigned s = 0; s < RC_SLOTS; s++)
			if (rc->slot_node[s] == RC_NO_NODE)
				return err_set(-EIO, "redis: the cluster serves no node for slot %u", s);
	}
	for (unsigned s = 0; s < RC_SLOTS; s++) {
		unsigned idx = rc->slot_node[s];

		if (checked[idx])
			continue;
		checked[idx] = true;
		ret = node_check_policy(rc, &rc->nodes[idx]);
		if (ret)
			return ret;
	}
	return 0;
}

void rcluster_close(struct rcluster *rc)
{
	for (unsigned i = 0; i < rc->nr_nodes; i++)
		node_drop(&rc->nodes[i]);
	tls_ctx_free(rc->ssl_ctx);
	rc->ssl_ctx = NULL;
}

/* What a round saw, for the retry policy. */
struct round_info {
	bool redirected, failed, stale_conn, conn_failed;
};

/* "MOVED 3999 127.0.0.1:6381" / "ASK ...": the target node's index, or -1. */
static int redirect_target(struct rcluster *rc, const struct rc_node *from, const char *err, unsigned *slot)
{
	const char *sp = strchr(err, ' '), *addr, *colon;
	char *end;
	long s, port;

	if (!sp)
		return -1;
	s = strtol(sp + 1, &end, 10);
	if (*end != ' ' || s < 0 || s >= RC_SLOTS)
		return -1;
	addr = end + 1;
	colon = strrchr(addr, ':');
	if (!colon)
		return -1;
	port = strtol(colon + 1, &end, 10);
	if (port <= 0 || port > 65535)
		return -1;
	*slot = (unsigned)s;
	if (colon == addr) /* no host: the one that answered */
		return node_find(rc, from->host, strlen(from->host), (int)port);
	return node_find(rc, addr, (size_t)(colon - addr), (int)port);
}

/* A connection that died while reading (EOF, reset) rather than timing out: worth one quick retry. */
static bool conn_was_stale(const struct rc_node *nd)
{
	return nd->c && (nd->c->err == REDIS_ERR_EOF || (nd->c->err == REDIS_ERR_IO && errno != EAGAIN));
}

/*
 * Classify one reply to @cmd, sent to node @from. Return: false if no server in step with its client
 * sends it: a type the command never gets (an error is always one it may get); the command stays
 * pending, and the caller fails the connection (see node_out_of_step()).
 */
static bool take_reply(struct rcluster *rc, struct rc_cmd *cmd, const struct rc_node *from, redisReply *r,
		       struct round_info *ri)
{
	unsigned slot;
	int idx;

	cmd->asking = false; /* an ASK holds for one attempt */
	if (r->type == REDIS_REPLY_ERROR) {
		if (rc->cluster && (!strncmp(r->str, "MOVED ", 6) || !strncmp(r->str, "ASK ", 4))) {
			idx = redirect_target(rc, from, r->str, &slot);
			if (idx < 0) {
				cmd->result = -EIO;
				return true;
			}
			ri->redirected = true;
			if (r->str[0] == 'M') {
				rc->slot_node[slot] = (uint8_t)idx;
				rc->stale = true; /* a moved slot rarely moves alone */
				rc->n.moved++;
			} else {
				cmd->node = (uint8_t)idx;
				cmd->asking = true;
				rc->n.ask++;
			}
			return true;
		}
		if (!strncmp(r->str, "TRYAGAIN", 8) || !strncmp(r->str, "CLUSTERDOWN", 11) ||
		    !strncmp(r->str, "LOADING", 7) || !strncmp(r->str, "MASTERDOWN", 10) ||
		    !strncmp(r->str, "READONLY", 8)) {
			ri->failed = true; /* a failover or resharding in progress: later */
			if (rc->cluster)
				rc->stale = true;
			return true;
		}
		cmd->result = -EIO;
		return true;
	}
	switch (cmd->op) {
	case RC_GET:
		if (r->type == REDIS_REPLY_NIL)
			cmd->result = -ENOENT;
		else if (r->type != REDIS_REPLY_STRING)
			return false;
		else if ((size_t)r->len == cmd->len) {
			memcpy(cmd->buf, r->str, cmd->len);
			cmd->result = 0;
		} else
			cmd->result = -EIO; /* another value under our key: the seal would refuse it too */
		return true;
	case RC_SET:
		if (r->type != REDIS_REPLY_STATUS || r->len != 2 || memcmp(r->str, "OK", 2))
			return false;
		cmd->result = 0;
		return true;
	case RC_PEXPIRE:
		if (r->type != REDIS_REPLY_INTEGER)
			return false;
		cmd->result = r->integer ? 0 : -ENOENT;
		return true;
	default:
		if (r->type != REDIS_REPLY_INTEGER)
			return false;
		cmd->result = 0;
		return true;
	}
}

/*
 * Node @i answered what was not asked (a reply of the wrong type, or more replies than commands): its
 * replies may be paired with the wrong commands: a SET may have taken another's +OK for its own while
 * its own reply was a refusal, a GET a stray nil for "no such key" (which uswap_gc() takes for a dead
 * instance). The connection is failed, and every reply it gave to this batch counts as none: the
 * commands are pending again (a load tries them again, a store refuses its pages and deletes them).
 */
static void node_out_of_step(struct rcluster *rc, unsigned i, struct rc_cmd *cmds, size_t n,
			     struct round_info *ri)
{
	ri->failed = true;
	rc->n.out_of_step++;
	node_fail(rc, &rc->nodes[i]);
	for (size_t j = 0; j < n; j++)
		if (cmds[j].node == i)
			cmds[j].result = RC_PENDING;
}

/* Read one reply from @nd; on failure the node is failed and NULL returned. */
static redisReply *node_reply(struct rcluster *rc, struct rc_node *nd, struct round_info *ri)
{
	redisReply *r;

	if (nd->broken)
		return NULL;
	if (node_get_reply(nd, &r) == REDIS_OK && r)
		return r;
	ri->failed = true;
	if (conn_was_stale(nd))
		ri->stale_conn = true;
	node_fail(rc, nd);
	return NULL;
}

/* How long one socket operation may wait: the tier's timeout, or what is left before a load's deadline. */
static int io_budget(const struct rcluster *rc, uint64_t deadline_ms, uint64_t now)
{
	if (!deadline_ms || deadline_ms >= now + (uint64_t)rc->timeout_ms)
		return rc->timeout_ms;
	return deadline_ms > now ? (int)(deadline_ms - now) : 1;
}

static void round_run(struct rcluster *rc, struct rc_cmd *cmds, size_t n, int replicas, uint64_t deadline_ms,
		      struct round_info *ri)
{
	uint64_t now = mono_ms();
	bool skip_down = !deadline_ms;
	int io_ms = io_budget(rc, deadline_ms, now);
	int wait_ms = rc->timeout_ms / 2 > 0 ? rc->timeout_ms / 2 : 1; /* WAIT 0 would block forever */
	char key[RC_KEY_MAX];
	size_t len;

	for (unsigned i = 0; i < rc->nr_nodes; i++) {
		rc->nodes[i].nr_sent = rc->nodes[i].nr_sets = rc->nodes[i].nr_named = 0;
		rc->nodes[i].ping_sent = rc->nodes[i].wait_sent = rc->nodes[i].broken = false;
	}
	for (size_t i = 0; i < n; i++) {
		struct rc_cmd *cmd = &cmds[i];
		struct rc_node *nd;

		if (cmd->result != RC_PENDING)
			continue;
		len = rc_key(rc, cmd, key, sizeof(key));
		if (!rc->cluster)
			cmd->node = 0;
		else if (!cmd->asking)
			cmd->node = rc->slot_node[rcluster_key_slot(key, len)];
		if (cmd->node == RC_NO_NODE) {
			ri->failed = true;
			rc->stale = true;
			continue;
		}
		nd = &rc->nodes[cmd->node];
		if (nd->broken)
			continue;
		if (skip_down && replicas && cmd->op == RC_SET && nd->thin_until_ms > now) {
			cmd->result = -EIO; /* it would wait for replicas it lacks: the next tier now */
			continue;
		}
		if (!nd->c) {
			if (skip_down && nd->retry_at_ms > now) {
				nd->broken = true; /* not failed again: keep its retry time */
				ri->failed = true;
				continue;
			}
			if (node_connect(rc, nd, io_ms)) {
				ri->failed = ri->conn_failed = true;
				node_fail(rc, nd);
				continue;
			}
		}
		if (node_set_timeout(nd, io_ms)) {
			ri->failed = true;
			node_fail(rc, nd);
			continue;
		}
		if (cmd->asking)
			redisAppendCommand(nd->c, "ASKING");
		if (cmd->op == RC_SET && rc->lease_ms > 0)
			redisAppendCommand(nd->c, "SET %b %b PX %d", key, len, cmd->buf, cmd->len,
					   rc->lease_ms);
		else if (cmd->op == RC_SET)
			redisAppendCommand(nd->c, "SET %b %b", key, len, cmd->buf, cmd->len);
		else if (cmd->op == RC_PEXPIRE)
			redisAppendCommand(nd->c, "PEXPIRE %b %d", key, len, rc->lease_ms);
		else
			redisAppendCommand(nd->c, cmd->op == RC_GET ? "GET %b" : "DEL %b", key, len);
		nd->nr_sent++;
		nd->nr_sets += cmd->op == RC_SET;
		nd->nr_named += cmd->name != NULL;
	}
	for (unsigned i = 0; i < rc->nr_nodes; i++) {
		struct rc_node *nd = &rc->nodes[i];
		int done = 0;

		if (!nd->nr_sent || nd->broken)
			continue;
		/*
		 * A PING after what a reply must be paired with for sure (a SET's acknowledgement, what
		 * uswap_gc() decides on): a reply nobody asked for, before or among them, shifts a +OK
		 * or another reply into its place (node_out_of_step()). A load's GET needs none: its page
		 * is sealed to its key.
		 */
		if (nd->nr_sets || nd->nr_named) {
			redisAppendCommand(nd->c, "PING");
			nd->ping_sent = true;
		}
		if (replicas && nd->nr_sets) {
			redisAppendCommand(nd->c, "WAIT %d %d", replicas, wait_ms);
			nd->wait_sent = true;
		}
		while (!done)
			if (node_flush(nd, &done) != REDIS_OK) {
				ri->failed = true;
				if (conn_was_stale(nd))
					ri->stale_conn = true;
				node_fail(rc, nd);
				break;
			}
	}
	/* replies: per node in the order sent, which is the order of cmds[] */
	for (size_t i = 0; i < n; i++) {
		struct rc_cmd *cmd = &cmds[i];
		struct rc_node *nd;
		redisReply *r;

		if (cmd->result != RC_PENDING || cmd->node == RC_NO_NODE)
			continue;
		nd = &rc->nodes[cmd->node];
		if (!nd->nr_sent || nd->broken)
			continue; /* never sent, or lost with its connection: pending */
		if (cmd->asking) {
			r = node_reply(rc, nd, ri);
			if (!r)
				continue;
			bool ok = r->type == REDIS_REPLY_STATUS; /* +OK to ASKING */

			freeReplyObject(r);
			if (!ok) {
				node_out_of_step(rc, cmd->node, cmds, n, ri);
				continue;
			}
		}
		r = node_reply(rc, nd, ri);
		if (!r)
			continue;
		if (!take_reply(rc, cmd, nd, r, ri))
			node_out_of_step(rc, cmd->node, cmds, n, ri);
		freeReplyObject(r);
	}
	for (unsigned i = 0; i < rc->nr_nodes; i++) {
		struct rc_node *nd = &rc->nodes[i];
		redisReply *r;

		if (!nd->ping_sent || !(r = node_reply(rc, nd, ri)))
			continue;
		if (r->type != REDIS_REPLY_STATUS || strcmp(r->str, "PONG")) {
			nd->wait_sent = false;
			node_out_of_step(rc, i, cmds, n, ri);
		}
		freeReplyObject(r);
	}
	for (unsigned i = 0; i < rc->nr_nodes; i++) {
		struct rc_node *nd = &rc->nodes[i];
		redisReply *r;
		int res;

		if (!nd->wait_sent)
			continue;
		r = node_reply(rc, nd, ri);
		if (r && r->type != REDIS_REPLY_INTEGER && r->type != REDIS_REPLY_ERROR) {
			freeReplyObject(r);
			node_out_of_step(rc, i, cmds, n, ri);
			continue;
		}
		/* no answer: unknown whether replicas have them, send them again; too few: refuse them */
		res = !r ? RC_PENDING : r->type == REDIS_REPLY_INTEGER && r->integer >= replicas ? 0 : -EIO;
		if (r)
			freeReplyObject(r);
		if (res == -EIO)
			nd->thin_until_ms = mono_ms() + (uint64_t)down_ms(rc);
		if (res)
			for (size_t j = 0; j < n; j++)
				if (cmds[j].op == RC_SET && cmds[j].node == i && !cmds[j].result)
					cmds[j].result = res;
	}
	/* every reply asked for is read: bytes left over are replies nobody asked for */
	for (unsigned i = 0; i < rc->nr_nodes; i++) {
		struct rc_node *nd = &rc->nodes[i];

		if (nd->nr_sent && !nd->broken && node_has_extra(nd))
			node_out_of_step(rc, i, cmds, n, ri);
	}
}

int rcluster_exec(struct rcluster *rc, struct rc_cmd *cmds, size_t n, int replicas, uint64_t deadline_ms)
{
	unsigned redirects = 0, pause_ms = 2;
	bool stale_retried = false;
	size_t pending = n;
	int ret = 0;

	for (size_t i = 0; i < n; i++) {
		cmds[i].result = RC_PENDING;
		cmds[i].asking = false;
		cmds[i].node = RC_NO_NODE;
	}
	for (;;) {
		struct round_info ri = {false, false, false, false};
		uint64_t now = mono_ms();

		if (rc->cluster && rc->stale) /* a load's refresh waits no longer than its deadline */
			refresh_slots(rc, io_budget(rc, deadline_ms, now));
		round_run(rc, cmds, n, replicas, deadline_ms, &ri);
		pending = 0;
		for (size_t i = 0; i < n; i++)
			pending += cmds[i].result == RC_PENDING;
		if (!pending)
			break;
		if (ri.redirected && redirects++ < RC_MAX_REDIRECTS)
			continue;
		if (deadline_ms) {
			now = mono_ms();
			if (now >= deadline_ms)
				break;
			sleep_ms(deadline_ms - now < pause_ms ? deadline_ms - now : pause_ms);
			pause_ms = pause_ms * 2 < RC_SLEEP_MAX_MS ? pause_ms * 2 : RC_SLEEP_MAX_MS;
			rc->n.retry_rounds++;
			if (rc->cluster)
				rc->stale = true;
			continue;
		}
		if (ri.stale_conn && !ri.conn_failed && !stale_retried) {
			stale_retried = true;
			rc->n.retry_rounds++;
			rcluster_retry_now(rc); /* it was only an old connection */
			continue;
		}
		break;
	}
	for (size_t i = 0; i < n; i++) {
		if (cmds[i].result == RC_PENDING)
			cmds[i].result = -EHOSTUNREACH;
		if (cmds[i].result)
			ret = -EIO;
	}
	return ret;
}

void rcluster_retry_now(struct rcluster *rc)
{
	for (unsigned i = 0; i < rc->nr_nodes; i++)
		rc->nodes[i].retry_at_ms = 0;
}

void rcluster_clone(struct rcluster *dst, const struct rcluster *src)
{
	memcpy(dst, src, sizeof(*dst));
	for (unsigned i = 0; i < dst->nr_nodes; i++) {
		dst->nodes[i].c = NULL;
		dst->nodes[i].tls = NULL;
		dst->nodes[i].retry_at_ms = 0;
		dst->nodes[i].io_timeout_ms = 0;
	}
	memset(&dst->n, 0, sizeof(dst->n));
	tls_ctx_ref(dst->ssl_ctx);
}

unsigned rcluster_masters(const struct rcluster *rc, uint8_t *out)
{
	bool seen[RC_MAX_NODES] = {false};
	unsigned n = 0;

	for (unsigned s = 0; s < RC_SLOTS; s++) {
		unsigned idx = rc->slot_node[s];

		if (idx != RC_NO_NODE && !seen[idx]) {
			seen[idx] = true;
			out[n++] = (uint8_t)idx;
		}
	}
	return n;
}

int rcluster_scan(struct rcluster *rc, unsigned node, unsigned long long *cursor, const char *match,
		  void (*fn)(const char *key, size_t len, void *arg), void *arg)
{
	struct rc_node *nd = &rc->nodes[node];
	redisReply *r;
	char cur[24];
	int ret = -EIO;

	if (!nd->c && node_connect(rc, nd, rc->timeout_ms))
		return err_set(-EIO, "redis: cannot connect to %s:%d", nd->host, nd->port);
	snprintf(cur, sizeof(cur), "%llu", *cursor);
	r = node_vcommand(nd, "SCAN %s MATCH %s COUNT 1000", cur, match);
	if (!r) {
		node_drop(nd);
		return err_set(-EIO, "redis: %s:%d: SCAN failed", nd->host, nd->port);
	}
	if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[0]->type == REDIS_REPLY_STRING &&
	    r->element[1]->type == REDIS_REPLY_ARRAY) {
		*cursor = strtoull(r->element[0]->str, NULL, 10);
		for (size_t i = 0; i < r->element[1]->elements; i++) {
			redisReply *k = r->element[1]->element[i];

			if (k->type == REDIS_REPLY_STRING)
				fn(k->str, k->len, arg);
		}
		ret = 0;
	} else {
		err_set(-EIO, "redis: %s:%d: unexpected answer to SCAN", nd->host, nd->port);
	}
	freeReplyObject(r);
	return ret;
}
