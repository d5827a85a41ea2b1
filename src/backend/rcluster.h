/*
 * rcluster.h - connections to one Redis server or a Redis Cluster: key slots, pipelined command
 * batches routed per node, MOVED/ASK redirects, reconnects and retries within a deadline.
 *
 * Used by redis.c only, from one thread at a time (the tier serialises batches). Allocates (hiredis
 * does per command and reply): never call it from the reclaim path itself.
 */
#ifndef USWAP_RCLUSTER_H
#define USWAP_RCLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RC_SLOTS     16384
#define RC_MAX_NODES 32 /* masters and replicas ever seen; a failover promotes one already known */
#define RC_MAX_SEEDS 8

struct redisContext;
struct ssl_ctx_st;
struct tls_conn;

struct rc_node {
	char host[64];
	int port;
	struct redisContext *c;
	struct tls_conn *tls;   /* with tls: the pump behind c (tls.c) */
	uint64_t retry_at_ms;   /* after a failure: stores skip this node until then */
	int io_timeout_ms;      /* as set on c: the tier's timeout, or less when a load's deadline is near */
	uint64_t thin_until_ms; /* WAIT found too few replicas: stores skip this node until then */
	/* per round, while a batch runs */
	unsigned nr_sent, nr_sets, nr_named; /* named: the alive key, uswap_gc()'s commands */
	bool ping_sent, wait_sent, broken;
};

/*
 * RC_SET carries PX lease_ms when the lease is on; RC_PEXPIRE gives a key lease_ms more (result
 * -ENOENT: no such key).
 */
enum rc_op { RC_SET, RC_GET, RC_DEL, RC_PEXPIRE };

#define RC_KEY_MAX 256 /* bytes of a key name, prefix included */

/* One command of a batch: SET/GET/DEL/PEXPIRE of the key prefix + decimal @key, or of @name. */
struct rc_cmd {
	uint32_t key;
	const char *name; /* NULL: prefix + @key; else the whole key name (the alive key, uswap_gc()) */
	uint8_t op;       /* enum rc_op */
	uint8_t node;     /* this round's target */
	bool asking;      /* this round goes to an ASK target, after ASKING */
	int result;       /* after rcluster_exec(): 0; -ENOENT no such key; -EIO; -EHOSTUNREACH */
	void *buf;        /* SET: @len bytes sent; GET: exactly @len bytes received */
	size_t len;
};

struct rc_counters {
	uint64_t moved, ask, reconnects, refreshes, retry_rounds, conn_errors;
	uint64_t out_of_step; /* connections failed for a reply nobody asked for (node_out_of_step()) */
};

struct rcluster {
	bool cluster; /* false: one server, nodes[0] holds every slot, no redirects */
	char prefix[32], password[128];
	char user[64]; /* with password: AUTH user password (an ACL user), else AUTH password */
	bool tls;      /* every connection is TLS, verified against cacert (else the system's CAs) */
	char cacert[128], cert[128], key[128]; /* PEM files; cert/key: a client certificate (mutual TLS) */
	struct ssl_ctx_st *ssl_ctx; /* with tls: made by rcluster_open(), shared by clones (refcounted) */
	char tls_why[160];          /* the last handshake's failure, for rcluster_open()'s message */
	int db, timeout_ms;
	int lease_ms;                /* > 0: SETs carry PX lease_ms, PEXPIRE gives lease_ms */
	unsigned nr_nodes, nr_seeds; /* nodes[0..nr_seeds) are the configured seeds */
	struct rc_node nodes[RC_MAX_NODES];
	uint8_t slot_node[RC_SLOTS]; /* node index, or RC_NO_NODE */
	bool stale;                  /* the slot map needs a refresh before the next round */
	struct rc_counters n;
};

#define RC_NO_NODE 0xff

/* CRC16-CCITT (XMODEM) as Redis Cluster uses it; crc16("123456789") == 0x31c3. */
uint16_t rcluster_crc16(const void *buf, size_t len);
/* The slot of @key: CRC16 of the whole key, or of the first non-empty {hash tag}, mod 16384. */
unsigned rcluster_key_slot(const char *key, size_t len);

/* Return: 0; -EINVAL malformed "HOST:PORT" (err_set names it); -ENOSPC too many seeds. */
int rcluster_add_seed(struct rcluster *rc, const char *hostport);
/*
 * Connect (AUTH, SELECT db), learn the slot map in cluster mode, and check every master's
 * maxmemory-policy. Return: 0; -ECONNREFUSED no seed answers; -EPERM refused authentication or an
 * evicting server; -EPROTO a TLS handshake or certificate failed; -EINVAL an unreadable cacert=, cert=
 * or key=; -EIO a bad answer. err_set() says which.
 */
int rcluster_open(struct rcluster *rc);
void rcluster_close(struct rcluster *rc);
/*
 * Run @n commands, pipelined per node (all nodes' pipelines are in flight together). With @replicas,
 * each node that took SETs is sent WAIT @replicas, and its SETs fail unless that many replicas
 * acknowledged. Redirects are followed at once. Other failures (connection lost, CLUSTERDOWN,
 * TRYAGAIN, LOADING) are retried with a fresh connection and slot map until @deadline_ms (monotonic
 * clock); with @deadline_ms == 0 (stores: the next tier is better than waiting) only a stale
 * connection is retried, once, and a node that just failed is skipped for a while.
 * Return: 0 if every command's result is 0, else -EIO; each cmd's result says more.
 */
int rcluster_exec(struct rcluster *rc, struct rc_cmd *cmds, size_t n, int replicas, uint64_t deadline_ms);
/*
 * rcluster_retry_now() - forget that nodes failed: the next rcluster_exec() tries each again instead of
 * skipping it for a while (the lease thread, whose renewals have a schedule of their own).
 */
void rcluster_retry_now(struct rcluster *rc);
/*
 * rcluster_clone() - @dst talks to the same servers as the opened @src (its options, nodes and slot
 * map) over connections of its own, made when first used; for a second thread. Allocates nothing.
 */
void rcluster_clone(struct rcluster *dst, const struct rcluster *src);
/* The masters (nodes that serve slots) as node indexes into @out (RC_MAX_NODES). Return: how many. */
unsigned rcluster_masters(const struct rcluster *rc, uint8_t *out);
/*
 * rcluster_scan() - one SCAN step on node @node: keys matching @match from *@cursor on, each passed
 * to @fn (with its length); *@cursor becomes the next cursor (0: done). Return: 0; -EIO.
 */
int rcluster_scan(struct rcluster *rc, unsigned node, unsigned long long *cursor, const char *match,
		  void (*fn)(const char *key, size_t len, void *arg), void *arg);

#endif
