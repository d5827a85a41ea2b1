/*
 * lease.h - the remote tier's lease: its keys carry a TTL (PX lease_ms at SET) that a thread of the
 * living process renews, so the pages of a process that died without closing (SIGKILL, a crash)
 * leave the servers by themselves within lease_ms; and one alive key per instance, prefix + "alive",
 * that names the process (host, boot, pid, start time) for `uswap gc`.
 *
 * The tier marks a handle when Redis acknowledged its SET and unmarks it at release, both under its
 * batch lock; the lease thread reads the marks without it and renews every marked key each
 * lease_ms / LEASE_ROUNDS, with PEXPIRE pipelines over connections of its own (rcluster_clone()), so
 * neither the store path nor loads wait for a refresh.
 */
#ifndef USWAP_LEASE_H
#define USWAP_LEASE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "rcluster.h"

#define LEASE_DEFAULT_MS (5 * 60 * 1000)
#define LEASE_MIN_MS     1000
#define LEASE_MAX_MS     (24 * 3600 * 1000)
/*
 * Refreshes per lease: a key is renewed every lease/4, so the lease thread may be late by up to
 * three quarters of the lease (a stopped process, a starved thread, a server that did not answer
 * two sweeps) before a live process loses a page.
 */
#define LEASE_ROUNDS 4
#define LEASE_SLICE  1024 /* PEXPIREs per pipeline */
#define LEASE_ALIVE_LEN                                                                                      \
	256 /* bytes of the alive key's value: "uswap-alive host=H boot=B pidns=N pid=P start=S ..." */

struct lease_stats {
	uint64_t sweeps;  /* rounds over every marked key */
	uint64_t renewed; /* PEXPIREs that found their key */
	uint64_t missing; /* marked keys found gone: the page is lost (expired, or the server lost it) */
	uint64_t failed;  /* PEXPIREs that got no answer (node unreachable): retried sooner */
	uint64_t last_sweep_ns, last_sweep_keys;
};

struct lease {
	struct rcluster rc;          /* the lease thread's own connections */
	_Atomic uint64_t *map;       /* a bit per handle: stored and not yet released */
	uint64_t lo_word;            /* words below are zero and their pages given back; lease thread only */
	pthread_mutex_t *store_lock; /* the tier's batch lock: held while handles are taken and marked */
	_Atomic uint32_t *next_handle; /* the tier's handle sequence */
	int lease_ms;
	char alive_key[RC_KEY_MAX];
	char alive_val[LEASE_ALIVE_LEN];
	pthread_t thread;
	bool started, stop; /* stop: under lock */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	_Atomic uint64_t sweeps, renewed, missing, failed, last_sweep_ns, last_sweep_keys;
	struct rc_cmd cmds[LEASE_SLICE + 1];
};

/*
 * lease_open() - reserve the marks, clone @rc's connections, write the alive key (from the calling
 * thread: when this returns 0 the key is on the server) and start the lease thread.
 * Return: 0; -ENOMEM; -EIO the alive key could not be written (err_set() says so); -errno of
 * pthread_create().
 */
int lease_open(struct lease *l, const struct rcluster *rc, pthread_mutex_t *store_lock,
	       _Atomic uint32_t *next_handle);
/* lease_close() - stop the thread and delete the alive key (a clean end). Then lease_free(). */
void lease_close(struct lease *l);
void lease_free(struct lease *l);

/* Context: store path or release, under *store_lock. No allocation. */
static inline void lease_mark(struct lease *l, uint32_t handle)
{
	atomic_fetch_or_explicit(&l->map[handle >> 6], 1ull << (handle & 63), memory_order_relaxed);
}

static inline void lease_unmark(struct lease *l, uint32_t handle)
{
	atomic_fetch_and_explicit(&l->map[handle >> 6], ~(1ull << (handle & 63)), memory_order_relaxed);
}

void lease_get_stats(struct lease *l, struct lease_stats *out);

/*
 * lease_alive_parse() - the fields of an alive key's value. Return: 0; -EINVAL not one.
 * lease_proc_start() - when process @pid started, in clock ticks after boot (/proc/PID/stat field 22);
 * 0: no such process. lease_boot_id() - this boot's id (/proc/sys/kernel/random/boot_id).
 */
struct lease_alive {
	char host[72], boot[40];
	unsigned long long pidns; /* inode of /proc/PID/ns/pid */
	int pid;
	unsigned long long start;
};
int lease_alive_parse(const char *val, size_t len, struct lease_alive *out);
unsigned long long lease_proc_start(int pid);
unsigned long long lease_pidns(void);
void lease_boot_id(char *out, size_t len);

#endif
