/*
 * lease.c - the remote tier's lease: renewal of its keys' TTL by a thread of the living process; see
 * lease.h.
 *
 * Sweeps start every period = lease_ms / LEASE_ROUNDS (a quarter of that after a failed one, at once
 * after one that took longer than the period) and renew keys in handle order, so a marked key is
 * renewed again about max(period, D) after the last time (at SET, or a PEXPIRE), D being how long
 * a sweep takes (a page stored during a sweep is renewed by its second pass, or by the next sweep).
 * A live key therefore expires only if the lease thread falls behind by more than lease - period
 * (three quarters of the lease: a stopped process, a starved thread, unreachable servers), or if a
 * sweep takes about as long as the lease (measured: ~4 us of CPU per key, client and server).
 *
 * The marks are a bitmap over the 32-bit handle space (512 MiB of address space, MAP_NORESERVE): the
 * tier's handles grow by one per stored page and are never reused, so the bits in use move up; the
 * pages of the map wholly below every live handle are given back as the sweeps pass them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lease.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/thread.h"

#define MAP_WORDS      (1ull << 26) /* 2^32 bits */
#define MAP_BYTES      (MAP_WORDS * sizeof(uint64_t))
#define WORDS_PER_PAGE (4096 / sizeof(uint64_t))

unsigned long long lease_proc_start(int pid)
{
	unsigned long long ticks = 0;
	char path[64], buf[1024], *p;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	p = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
	if (!p || p[1] != ' ' || p[2] == 'Z' || p[2] == 'X')
		return 0;                             /* a zombie is dead: killed, not yet reaped */
	for (int field = 2; p && field < 22; field++) /* ") S ..." is field 3; starttime is 22 */
		p = strchr(p + 1, ' ');
	if (!p || sscanf(p + 1, "%llu", &ticks) != 1)
		return 0;
	return ticks;
}

void lease_boot_id(char *out, size_t len)
{
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");

	out[0] = '\0';
	if (f) {
		if (!fgets(out, (int)len, f))
			out[0] = '\0';
		fclose(f);
	}
	out[strcspn(out, "\n")] = '\0';
	if (!out[0])
		snprintf(out, len, "-");
}

unsigned long long lease_pidns(void)
{
	struct stat st;

	return stat("/proc/self/ns/pid", &st) ? 0 : (unsigned long long)st.st_ino;
}

int lease_alive_parse(const char *val, size_t len, struct lease_alive *out)
{
	char buf[LEASE_ALIVE_LEN + 1];

	if (len > LEASE_ALIVE_LEN)
		return -EINVAL;
	memcpy(buf, val, len);
	buf[len] = '\0';
	memset(out, 0, sizeof(*out));
	if (sscanf(buf, "uswap-alive host=%71s boot=%39s pidns=%llu pid=%d start=%llu", out->host, out->boot,
		   &out->pidns, &out->pid, &out->start) != 5)
		return -EINVAL;
	return 0;
}

static void alive_value(struct lease *l)
{
	char host[72] = "-", boot[40];

	if (gethostname(host, sizeof(host) - 1) || !host[0])
		snprintf(host, sizeof(host), "-");
	host[strcspn(host, " ")] = '\0';
	lease_boot_id(boot, sizeof(boot));
	memset(l->alive_val, ' ', sizeof(l->alive_val));
	int n = snprintf(l->alive_val, sizeof(l->alive_val),
			 "uswap-alive host=%s boot=%s pidns=%llu pid=%d start=%llu lease_ms=%d", host, boot,
			 lease_pidns(), (int)getpid(), lease_proc_start((int)getpid()), l->lease_ms);

	if (n >= 0 && (size_t)n < sizeof(l->alive_val))
		l->alive_val[n] = ' '; /* a fixed length: GET reads exactly LEASE_ALIVE_LEN bytes */
}

/* SET of the alive key: first of every sweep, so that a server that restarted empty gets it back. */
static void alive_cmd(struct lease *l, struct rc_cmd *c)
{
	*c = (struct rc_cmd){.name = l->alive_key, .op = RC_SET, .buf = l->alive_val, .len = LEASE_ALIVE_LEN};
}

/* Context: lease thread. Run cmds[0..n), count what came back. Return: how many got no answer. */
static size_t renew(struct lease *l, size_t n)
{
	size_t failed = 0;

	if (!n)
		return 0;
	rcluster_exec(&l->rc, l->cmds, n, 0, 0);
	for (size_t i = 0; i < n; i++) {
		const struct rc_cmd *c = &l->cmds[i];

		if (c->name)
			failed += c->result != 0;
		else if (!c->result)
			atomic_fetch_add_explicit(&l->renewed, 1, memory_order_relaxed);
		else if (c->result == -ENOENT) {
			/* released meanwhile (the mark is gone first), or lost */
			uint64_t w = atomic_load_explicit(&l->map[c->key >> 6], memory_order_relaxed);

			if (w & (1ull << (c->key & 63)))
				atomic_fetch_add_explicit(&l->missing, 1, memory_order_relaxed);
		} else
			failed++;
	}
	return failed;
}

/*
 * Give back the pages of the map below every live handle: zero, wholly below @hi, checked again under
 * the store lock (a store marks its handles under it, so no mark can be in flight).
 */
static void give_back(struct lease *l, uint64_t hi)
{
	uint64_t w = l->lo_word;

	while ((w + WORDS_PER_PAGE) * 64 <= hi) {
		bool zero = true;

		for (uint64_t i = w; i < w + WORDS_PER_PAGE && zero; i++)
			zero = !atomic_load_explicit(&l->map[i], memory_order_relaxed);
		if (!zero)
			break;
		pthread_mutex_lock(l->store_lock);
		for (uint64_t i = w; i < w + WORDS_PER_PAGE && zero; i++)
			zero = !atomic_load_explicit(&l->map[i], memory_order_relaxed);
		if (zero)
			urelease_pages((void *)&l->map[w], 4096);
		pthread_mutex_unlock(l->store_lock);
		if (!zero)
			break;
		w += WORDS_PER_PAGE;
	}
	l->lo_word = w;
}

/*
 * One sweep: the alive key, then a PEXPIRE for every marked key, in handle order: the keys marked when
 * it starts, then once more those stored meanwhile (so a page stored during a long sweep does not
 * wait for the whole next one). Return: commands that got no answer.
 */
static size_t sweep(struct lease *l)
{
	uint64_t t0 = mono_ns(), hi0 = atomic_load(l->next_handle), keys = 0;
	size_t n = 1, failed = 0;

	/*
	 * A node the last sweep failed on is tried again now: a failed sweep is retried after a quarter
	 * of a period, and a node skipped for the stores' while (1 s or the timeout) would outlast a short
	 * lease (lease=1s: its keys expired after one bad reply). Within a sweep, a failed node is skipped.
	 */
	rcluster_retry_now(&l->rc);
	alive_cmd(l, &l->cmds[0]);
	for (int pass = 0; pass < 2; pass++) {
		/* the second pass starts again at the word where the first ended: it may have more bits now */
		uint64_t hi = pass ? atomic_load(l->next_handle) : hi0, w = pass ? hi0 / 64 : l->lo_word;

		if (pass && hi == hi0)
			break;
		for (; w * 64 < hi; w++) {
			uint64_t bits = atomic_load_explicit(&l->map[w], memory_order_relaxed);

			while (bits) {
				unsigned b = (unsigned)__builtin_ctzll(bits);

				bits &= bits - 1;
				l->cmds[n++] =
					(struct rc_cmd){.key = (uint32_t)(w * 64 + b), .op = RC_PEXPIRE};
				keys++;
				if (n == LEASE_SLICE + 1) {
					failed += renew(l, n);
					n = 0;
				}
			}
		}
	}
	failed += renew(l, n);
	give_back(l, hi0);
	atomic_store(&l->last_sweep_ns, mono_ns() - t0);
	atomic_store(&l->last_sweep_keys, keys);
	atomic_fetch_add(&l->sweeps, 1);
	atomic_fetch_add(&l->failed, failed);
	return failed;
}

static void *lease_main(void *arg)
{
	struct lease *l = arg;
	uint64_t period = (uint64_t)l->lease_ms / LEASE_ROUNDS, next = mono_ms() + period;

	pthread_mutex_lock(&l->lock);
	while (!l->stop) {
		uint64_t now = mono_ms();

		if (now < next) {
			struct timespec ts;

			clock_gettime(CLOCK_MONOTONIC, &ts);
			ts.tv_sec += (time_t)((next - now) / 1000);
			ts.tv_nsec += (long)((next - now) % 1000) * 1000000L;
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&l->cond, &l->lock, &ts);
			continue;
		}
		pthread_mutex_unlock(&l->lock);
		/* the period counts from a sweep's start; a failed one is tried again after a quarter */
		next = now + (sweep(l) ? period / 4 : period);
		pthread_mutex_lock(&l->lock);
	}
	pthread_mutex_unlock(&l->lock);
	return NULL;
}

int lease_open(struct lease *l, const struct rcluster *rc, pthread_mutex_t *store_lock,
	       _Atomic uint32_t *next_handle)
{
	pthread_condattr_t ca;
	int ret;

	l->map = ureserve(MAP_BYTES);
	if (!l->map)
		return -ENOMEM;
	rcluster_clone(&l->rc, rc);
	l->store_lock = store_lock;
	l->next_handle = next_handle;
	l->lease_ms = rc->lease_ms;
	snprintf(l->alive_key, sizeof(l->alive_key), "%salive", rc->prefix);
	alive_value(l);
	alive_cmd(l, &l->cmds[0]);
	rcluster_exec(&l->rc, l->cmds, 1, 0, 0);
	if (l->cmds[0].result) {
		const struct rc_node *nd = &l->rc.nodes[l->cmds[0].node == RC_NO_NODE ? 0 : l->cmds[0].node];

		return err_set(-EIO, "redis: cannot write the alive key %s to %s:%d", l->alive_key, nd->host,
			       nd->port);
	}
	pthread_mutex_init(&l->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&l->cond, &ca);
	pthread_condattr_destroy(&ca);
	ret = thread_start(&l->thread, "uswap-lease", lease_main, l);
	if (ret)
		return ret;
	l->started = true;
	return 0;
}

void lease_close(struct lease *l)
{
	if (!l->started)
		return;
	pthread_mutex_lock(&l->lock);
	l->stop = true;
	pthread_cond_broadcast(&l->cond);
	pthread_mutex_unlock(&l->lock);
	pthread_join(l->thread, NULL);
	l->started = false;
	l->cmds[0] = (struct rc_cmd){.name = l->alive_key, .op = RC_DEL};
	rcluster_exec(&l->rc, l->cmds, 1, 0, 0);
}

void lease_free(struct lease *l)
{
	rcluster_close(&l->rc);
	memset(l->rc.password, 0, sizeof(l->rc.password));
	uunreserve((void *)l->map, MAP_BYTES);
	l->map = NULL;
}

void lease_get_stats(struct lease *l, struct lease_stats *out)
{
	out->sweeps = atomic_load(&l->sweeps);
	out->renewed = atomic_load(&l->renewed);
	out->missing = atomic_load(&l->missing);
	out->failed = atomic_load(&l->failed);
	out->last_sweep_ns = atomic_load(&l->last_sweep_ns);
	out->last_sweep_keys = atomic_load(&l->last_sweep_keys);
}
