/*
 * redis.h - what the Redis tiers (redis.c) show of themselves beyond the ops vector: counters for
 * tests, and the connection uswap_gc() makes from a tier string.
 */
#ifndef USWAP_BACKEND_REDIS_H
#define USWAP_BACKEND_REDIS_H

struct backend;

/* redis.c: what the connections went through (redirects, reconnects), for tests. Return: 0, -EINVAL. */
struct rc_counters;
int redis_counters(struct backend *b, struct rc_counters *out);
/* redis.c: what the lease thread did (renewals, keys found missing), for tests. Return: 0, -EINVAL. */
struct lease_stats;
int redis_lease_stats(struct backend *b, struct lease_stats *out);
/*
 * redis.c: connect @rc to the servers of a "redis://..." or "redis-cluster://..." tier string (its
 * options as the tier takes them), for uswap_gc(). Return: 0, or -errno with err_set(); rcluster_close().
 */
struct rcluster;
int redis_servers_open(const char *tier, struct rcluster *rc);

#endif
