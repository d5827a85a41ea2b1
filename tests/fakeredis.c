/*
 * fakeredis.c - the fake Redis server of the bad-input tests; see fakeredis.h.
 *
 * One thread polls the listening socket, a stop pipe and every connection (non-blocking). A
 * connection's input is parsed into commands (RESP arrays of bulk strings, as hiredis sends them);
 * each gets its reply appended to the connection's output, which goes out as the socket takes it.
 * Everything the test sets (scripts, the mutator) and reads (counters, keys) is under the lock.
 */
#include "fakeredis.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS    64
#define MAX_SCRIPTS  16
#define MAX_ARGS     16
#define MAX_NAMES    32
#define TRICKLE_MS   20
#define FLOOD_CHUNK  65536
#define MUTATE_EXTRA 65536 /* room a mutator may add to a reply */

struct script {
	char cmd[32], key_has[64];
	bool any_key, used;
	unsigned skip, count, seen;
	unsigned char *reply;
	size_t len;
	enum fake_action action;
};

struct conn {
	int fd;
	enum fake_action state; /* FAKE_REPLY: serving; FAKE_CLOSE: closing once the output is out */
	unsigned char *in, *out;
	size_t in_len, in_cap, out_len, out_off, out_cap;
	uint64_t next_ms; /* FAKE_TRICKLE: when the next byte goes */
};

struct kv {
	char *key;
	size_t klen;
	unsigned char *val;
	size_t vlen;
	uint64_t expire_ms; /* 0: none */
};

struct fake_redis {
	int lfd, port, stop_pipe[2];
	bool cluster;
	pthread_t thread;
	pthread_mutex_t lock;
	struct script scripts[MAX_SCRIPTS];
	fake_mutate_fn mutate;
	void *mutate_arg;
	struct conn conns[MAX_CONNS];
	struct kv *kvs;
	size_t nr_kvs, cap_kvs;
	char names[MAX_NAMES][32];
	unsigned long name_counts[MAX_NAMES], all_count, accepted, closed;
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- byte buffers ---- */

static void grow(unsigned char **buf, size_t *cap, size_t need)
{
	size_t n = *cap ? *cap : 4096;

	if (need <= *cap)
		return;
	while (n < need)
		n *= 2;
	*buf = realloc(*buf, n);
	if (!*buf)
		abort(); /* a test helper: out of memory ends the test */
	*cap = n;
}

struct out {
	unsigned char *b;
	size_t len, cap;
};

static void put(struct out *o, const void *p, size_t n)
{
	if (!n)
		return;
	grow(&o->b, &o->cap, o->len + n);
	memcpy(o->b + o->len, p, n);
	o->len += n;
}

static void putf(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(struct out *o, const char *fmt, ...)
{
	char tmp[256];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	put(o, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

static void put_bulk(struct out *o, const void *p, size_t n)
{
	putf(o, "$%zu\r\n", n);
	put(o, p, n);
	put(o, "\r\n", 2);
}

/* ---- the key space ---- */

static bool kv_del(struct fake_redis *f, const char *key, size_t klen);

/* The live key @key (one whose time is up is deleted, as Redis does on access), or NULL. */
static struct kv *kv_find(struct fake_redis *f, const char *key, size_t klen)
{
	for (size_t i = 0; i < f->nr_kvs; i++) {
		struct kv *e = &f->kvs[i];

		if (e->klen != klen || memcmp(e->key, key, klen))
			continue;
		if (e->expire_ms && e->expire_ms <= now_ms()) {
			kv_del(f, key, klen);
			return NULL;
		}
		return e;
	}
	return NULL;
}

/* Keys whose time is up go (what Redis's active expiry does). */
static void kv_expire(struct fake_redis *f)
{
	uint64_t now = now_ms();

	for (size_t i = 0; i < f->nr_kvs;)
		if (f->kvs[i].expire_ms && f->kvs[i].expire_ms <= now)
			kv_del(f, f->kvs[i].key, f->kvs[i].klen);
		else
			i++;
}

static void kv_set(struct fake_redis *f, const char *key, size_t klen, const void *val, size_t vlen)
{
	struct kv *e = kv_find(f, key, klen);

	if (!e) {
		if (f->nr_kvs == f->cap_kvs) {
			f->cap_kvs = f->cap_kvs ? 2 * f->cap_kvs : 256;
			f->kvs = realloc(f->kvs, f->cap_kvs * sizeof(*f->kvs));
			if (!f->kvs)
				abort();
		}
		e = &f->kvs[f->nr_kvs++];
		e->key = malloc(klen + 1);
		if (!e->key)
			abort();
		memcpy(e->key, key, klen);
		e->key[klen] = '\0';
		e->klen = klen;
	} else {
		free(e->val);
	}
	e->val = malloc(vlen ? vlen : 1);
	if (!e->val)
		abort();
	memcpy(e->val, val, vlen);
	e->vlen = vlen;
	e->expire_ms = 0;
}

static bool kv_del(struct fake_redis *f, const char *key, size_t klen)
{
	for (size_t i = 0; i < f->nr_kvs; i++) {
		struct kv *e = &f->kvs[i];

		if (e->klen != klen || memcmp(e->key, key, klen))
			continue;
		free(e->key);
		free(e->val);
		*e = f->kvs[--f->nr_kvs];
		return true;
	}
	return false;
}

/* ---- commands ---- */

struct cmd {
	int argc;
	const char *argv[MAX_ARGS];
	size_t lens[MAX_ARGS];
	char name[32]; /* upper case; "CLUSTER SLOTS", "CONFIG GET" with their subcommand */
};

static bool arg_is(const struct cmd *c, int i, const char *s)
{
	return i < c->argc && c->lens[i] == strlen(s) && !strncasecmp(c->argv[i], s, c->lens[i]);
}

static uint64_t arg_num(const struct cmd *c, int i)
{
	char tmp[24];

	snprintf(tmp, sizeof(tmp), "%.*s", (int)(c->lens[i] < 23 ? c->lens[i] : 23), c->argv[i]);
	return strtoull(tmp, NULL, 10);
}

static void count_name(struct fake_redis *f, const char *name)
{
	int i;

	f->all_count++;
	for (i = 0; i < MAX_NAMES && f->names[i][0]; i++)
		if (!strcmp(f->names[i], name))
			break;
	if (i == MAX_NAMES)
		return;
	if (!f->names[i][0])
		snprintf(f->names[i], sizeof(f->names[i]), "%s", name);
	f->name_counts[i]++;
}

/* The reply of a real server (as far as the tier needs one), the command carried out. */
static void execute(struct fake_redis *f, const struct cmd *c, struct out *o)
{
	const char *n = c->name;

	if (!strcmp(n, "PING")) {
		putf(o, "+PONG\r\n");
	} else if (!strcmp(n, "AUTH") || !strcmp(n, "SELECT") || !strcmp(n, "ASKING")) {
		putf(o, "+OK\r\n");
	} else if (!strcmp(n, "ECHO") && c->argc == 2) {
		put_bulk(o, c->argv[1], c->lens[1]);
	} else if (!strcmp(n, "CONFIG GET") && arg_is(c, 2, "maxmemory-policy")) {
		putf(o, "*2\r\n$16\r\nmaxmemory-policy\r\n$10\r\nnoeviction\r\n");
	} else if (!strcmp(n, "CLUSTER INFO")) {
		static const char info[] = "cluster_state:ok\r\ncluster_slots_assigned:16384\r\n"
					   "cluster_slots_ok:16384\r\ncluster_known_nodes:1\r\n";

		if (f->cluster)
			put_bulk(o, info, sizeof(info) - 1);
		else
			putf(o, "-ERR This instance has cluster support disabled\r\n");
	} else if (!strcmp(n, "CLUSTER SLOTS") && f->cluster) {
		putf(o, "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:%d\r\n$40\r\n%040d\r\n",
		     f->port, f->port);
	} else if (!strcmp(n, "SET") && c->argc >= 3) {
		kv_set(f, c->argv[1], c->lens[1], c->argv[2], c->lens[2]);
		if (arg_is(c, 3, "PX") && c->argc == 5)
			kv_find(f, c->argv[1], c->lens[1])->expire_ms = now_ms() + arg_num(c, 4);
		putf(o, "+OK\r\n");
	} else if (!strcmp(n, "GET") && c->argc == 2) {
		struct kv *e = kv_find(f, c->argv[1], c->lens[1]);

		if (e)
			put_bulk(o, e->val, e->vlen);
		else
			putf(o, "$-1\r\n");
	} else if (!strcmp(n, "DEL") || !strcmp(n, "EXISTS")) {
		long long k = 0;

		for (int i = 1; i < c->argc; i++)
			k += n[0] == 'D' ? kv_del(f, c->argv[i], c->lens[i])
					 : kv_find(f, c->argv[i], c->lens[i]) != NULL;
		putf(o, ":%lld\r\n", k);
	} else if (!strcmp(n, "PEXPIRE") && c->argc == 3) {
		struct kv *e = kv_find(f, c->argv[1], c->lens[1]);

		if (e)
			e->expire_ms = now_ms() + arg_num(c, 2);
		putf(o, ":%d\r\n", e != NULL);
	} else if (!strcmp(n, "WAIT")) {
		putf(o, ":0\r\n"); /* no replicas */
	} else if (!strcmp(n, "SCAN") && arg_is(c, 2, "MATCH") && c->argc >= 4) {
		char pat[256];
		size_t k = 0;

		snprintf(pat, sizeof(pat), "%.*s", (int)c->lens[3], c->argv[3]);
		kv_expire(f);
		for (size_t i = 0; i < f->nr_kvs; i++)
			k += !fnmatch(pat, f->kvs[i].key, 0);
		putf(o, "*2\r\n$1\r\n0\r\n*%zu\r\n", k);
		for (size_t i = 0; i < f->nr_kvs; i++)
			if (!fnmatch(pat, f->kvs[i].key, 0))
				put_bulk(o, f->kvs[i].key, f->kvs[i].klen);
	} else {
		putf(o, "-ERR unknown command '%s'\r\n", n);
	}
}

static struct script *script_for(struct fake_redis *f, const struct cmd *c)
{
	for (int i = 0; i < MAX_SCRIPTS; i++) {
		struct script *s = &f->scripts[i];

		if (!s->used || (strcmp(s->cmd, "*") && strcmp(s->cmd, c->name)) ||
		    (s->count && s->seen >= s->skip + s->count))
			continue; /* another command's, or spent: the next script may take it */
		if (!s->any_key &&
		    (c->argc < 2 || !memmem(c->argv[1], c->lens[1], s->key_has, strlen(s->key_has))))
			continue;
		return s;
	}
	return NULL;
}

/* One command of @cn: its reply appended to the connection's output. */
static void serve(struct fake_redis *f, struct conn *cn, struct cmd *c)
{
	struct out o = {cn->out, cn->out_len, cn->out_cap};
	struct script *s;
	size_t start = o.len;

	snprintf(c->name, sizeof(c->name), "%.*s", (int)(c->lens[0] < 15 ? c->lens[0] : 15), c->argv[0]);
	if ((!strcasecmp(c->name, "CLUSTER") || !strcasecmp(c->name, "CONFIG")) && c->argc > 1)
		snprintf(c->name + strlen(c->name), sizeof(c->name) - strlen(c->name), " %.*s",
			 (int)(c->lens[1] < 15 ? c->lens[1] : 15), c->argv[1]);
	for (char *p = c->name; *p; p++)
		*p = (char)toupper((unsigned char)*p);
	count_name(f, c->name);
	if (getenv("FAKE_DEBUG"))
		fprintf(stderr, "fake: %d %s %.*s\n", cn->fd, c->name, c->argc > 1 ? (int)c->lens[1] : 0,
			c->argc > 1 ? c->argv[1] : "");
	s = script_for(f, c);
	if (s && s->seen++ >= s->skip && (!s->count || s->seen <= s->skip + s->count)) {
		put(&o, s->reply, s->len);
		cn->state = s->action;
	} else {
		execute(f, c, &o);
		if (f->mutate) {
			enum fake_action act = FAKE_REPLY;
			size_t len = o.len - start;

			grow(&o.b, &o.cap, o.len + len + MUTATE_EXTRA);
			long n =
				f->mutate(f->mutate_arg, c->name, o.b + start, len, len + MUTATE_EXTRA, &act);

			if (n >= 0)
				o.len = start + (size_t)n;
			cn->state = act;
		}
	}
	cn->out = o.b;
	cn->out_len = o.len;
	cn->out_cap = o.cap;
	if (cn->state == FAKE_TRICKLE) /* what is to trickle stays in the output; it goes a byte a tick */
		cn->next_ms = now_ms();
}

/* A decimal line at @p ending in CRLF within @end. Return: the byte after it, or NULL (incomplete). */
static const unsigned char *read_num(const unsigned char *p, const unsigned char *end, long long *v,
				     bool *bad)
{
	const unsigned char *nl = memchr(p, '\n', (size_t)(end - p));
	char tmp[24], *e;

	if (!nl)
		return NULL;
	if (nl == p || nl[-1] != '\r' || (size_t)(nl - p) > sizeof(tmp)) {
		*bad = true;
		return NULL;
	}
	snprintf(tmp, sizeof(tmp), "%.*s", (int)(nl - 1 - p), (const char *)p);
	*v = strtoll(tmp, &e, 10);
	if (*e || !tmp[0])
		*bad = true;
	return nl + 1;
}

/* Parse and serve the whole commands in @cn's input. Return: false if it is not RESP (close it). */
static bool parse_input(struct fake_redis *f, struct conn *cn)
{
	size_t used = 0;

	while (cn->state == FAKE_REPLY && used < cn->in_len) {
		const unsigned char *p = cn->in + used, *end = cn->in + cn->in_len;
		struct cmd c = {0};
		long long argc, len;
		bool bad = false;

		if (*p != '*')
			return false;
		p = read_num(p + 1, end, &argc, &bad);
		if (bad || (p && (argc < 1 || argc > MAX_ARGS)))
			return false;
		for (long long i = 0; p && i < argc; i++) {
			if (p >= end)
				p = NULL;
			else if (*p != '$')
				return false;
			else
				p = read_num(p + 1, end, &len, &bad);
			if (bad || (p && (len < 0 || len > (64 << 20))))
				return false;
			if (p && (size_t)(end - p) < (size_t)len + 2)
				p = NULL;
			if (p) {
				c.argv[i] = (const char *)p;
				c.lens[i] = (size_t)len;
				p += len + 2;
			}
		}
		if (!p)
			break; /* incomplete: wait for more */
		c.argc = (int)argc;
		serve(f, cn, &c);
		used = (size_t)(p - cn->in);
	}
	memmove(cn->in, cn->in + used, cn->in_len - used);
	cn->in_len -= used;
	return true;
}

static void conn_close(struct conn *cn)
{
	if (cn->fd >= 0)
		close(cn->fd);
	free(cn->in);
	free(cn->out);
	memset(cn, 0, sizeof(*cn));
	cn->fd = -1;
}

/* Send what the socket takes: all that is due (a byte, when trickling); filler when flooding. */
static bool conn_send(struct conn *cn, uint64_t now)
{
	static const char filler[FLOOD_CHUNK] = {'x'};
	size_t n = cn->out_len - cn->out_off;
	ssize_t w;

	if (cn->state == FAKE_FLOOD && !n) {
		w = send(cn->fd, filler, sizeof(filler), MSG_NOSIGNAL | MSG_DONTWAIT);
		return w >= 0 || errno == EAGAIN;
	}
	if (cn->state == FAKE_TRICKLE) {
		if (now < cn->next_ms)
			return true;
		cn->next_ms = now + TRICKLE_MS;
		if (!n)
			return send(cn->fd, "x", 1, MSG_NOSIGNAL | MSG_DONTWAIT) >= 0 || errno == EAGAIN;
		n = 1;
	}
	if (!n)
		return true;
	w = send(cn->fd, cn->out + cn->out_off, n, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (w < 0)
		return errno == EAGAIN;
	cn->out_off += (size_t)w;
	if (cn->out_off == cn->out_len)
		cn->out_off = cn->out_len = 0;
	return true;
}

static void *fake_thread(void *arg)
{
	struct fake_redis *f = arg;
	struct pollfd pfd[MAX_CONNS + 2];
	int map[MAX_CONNS + 2];

	for (;;) {
		int nfds = 2, timeout = -1;
		uint64_t now;

		pfd[0] = (struct pollfd){.fd = f->stop_pipe[0], .events = POLLIN};
		pfd[1] = (struct pollfd){.fd = f->lfd, .events = POLLIN};
		for (int i = 0; i < MAX_CONNS; i++) {
			struct conn *cn = &f->conns[i];
			short ev = 0;

			if (cn->fd < 0)
				continue;
			if (cn->state == FAKE_REPLY || cn->state == FAKE_STALL)
				ev |= POLLIN; /* a stalled one is read only to see it closed */
			if (cn->out_len > cn->out_off || cn->state == FAKE_FLOOD)
				ev |= POLLOUT;
			if (cn->state == FAKE_TRICKLE)
				timeout = TRICKLE_MS;
			map[nfds] = i;
			pfd[nfds++] = (struct pollfd){.fd = cn->fd, .events = ev};
		}
		if (poll(pfd, (nfds_t)nfds, timeout) < 0 && errno != EINTR)
			break;
		if (pfd[0].revents)
			break;
		pthread_mutex_lock(&f->lock);
		if (pfd[1].revents & POLLIN) {
			int fd = accept4(f->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

			for (int i = 0; fd >= 0 && i < MAX_CONNS; i++)
				if (f->conns[i].fd < 0) {
					f->conns[i].fd = fd;
					f->conns[i].state = FAKE_REPLY;
					fd = -1;
					f->accepted++;
				}
			if (fd >= 0)
				close(fd);
		}
		now = now_ms();
		for (int k = 2; k < nfds; k++) {
			struct conn *cn = &f->conns[map[k]];
			bool ok = true;

			if (pfd[k].revents & (POLLIN | POLLHUP | POLLERR)) {
				ssize_t r;

				grow(&cn->in, &cn->in_cap, cn->in_len + 65536);
				r = recv(cn->fd, cn->in + cn->in_len, cn->in_cap - cn->in_len, MSG_DONTWAIT);
				if (r == 0 || (r < 0 && errno != EAGAIN))
					ok = false;
				else if (r > 0 && cn->state == FAKE_STALL)
					cn->in_len = 0; /* swallowed */
				else if (r > 0)
					cn->in_len += (size_t)r;
				if (ok && cn->state == FAKE_REPLY && !parse_input(f, cn))
					ok = false;
			}
			if (ok)
				ok = conn_send(cn, now);
			if (ok && cn->state == FAKE_CLOSE && cn->out_len == cn->out_off)
				ok = false;
			if (!ok) {
				if (getenv("FAKE_DEBUG"))
					fprintf(stderr, "fake: close %d\n", cn->fd);
				conn_close(cn);
				f->closed++;
			}
		}
		pthread_mutex_unlock(&f->lock);
	}
	return NULL;
}

int fake_start(struct fake_redis **out, bool cluster)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t alen = sizeof(a);
	struct fake_redis *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	f->cluster = cluster;
	for (int i = 0; i < MAX_CONNS; i++)
		f->conns[i].fd = -1;
	f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (f->lfd < 0 || bind(f->lfd, (struct sockaddr *)&a, sizeof(a)) || listen(f->lfd, 64) ||
	    getsockname(f->lfd, (struct sockaddr *)&a, &alen) || pipe2(f->stop_pipe, O_CLOEXEC)) {
		if (f->lfd >= 0)
			close(f->lfd);
		free(f);
		return -1;
	}
	f->port = ntohs(a.sin_port);
	pthread_mutex_init(&f->lock, NULL);
	if (pthread_create(&f->thread, NULL, fake_thread, f)) {
		close(f->lfd);
		close(f->stop_pipe[0]);
		close(f->stop_pipe[1]);
		free(f);
		return -1;
	}
	*out = f;
	return 0;
}

int fake_port(const struct fake_redis *f)
{
	return f->port;
}

void fake_clear(struct fake_redis *f)
{
	pthread_mutex_lock(&f->lock);
	for (int i = 0; i < MAX_SCRIPTS; i++) {
		free(f->scripts[i].reply);
		memset(&f->scripts[i], 0, sizeof(f->scripts[i]));
	}
	f->mutate = NULL;
	pthread_mutex_unlock(&f->lock);
}

void fake_stop(struct fake_redis *f)
{
	if (!f)
		return;
	if (write(f->stop_pipe[1], "x", 1) != 1)
		abort();
	pthread_join(f->thread, NULL);
	fake_clear(f);
	for (int i = 0; i < MAX_CONNS; i++)
		if (f->conns[i].fd >= 0)
			conn_close(&f->conns[i]);
	for (size_t i = 0; i < f->nr_kvs; i++) {
		free(f->kvs[i].key);
		free(f->kvs[i].val);
	}
	free(f->kvs);
	close(f->lfd);
	close(f->stop_pipe[0]);
	close(f->stop_pipe[1]);
	pthread_mutex_destroy(&f->lock);
	free(f);
}

void fake_script(struct fake_redis *f, const char *cmd, const char *key_has, unsigned skip, unsigned count,
		 const void *reply, size_t len, enum fake_action action)
{
	struct script *s = NULL;

	pthread_mutex_lock(&f->lock);
	for (int i = 0; i < MAX_SCRIPTS && !s; i++)
		if (f->scripts[i].used && !strcmp(f->scripts[i].cmd, cmd) &&
		    f->scripts[i].any_key == !key_has &&
		    (!key_has || !strcmp(f->scripts[i].key_has, key_has)))
			s = &f->scripts[i];
	for (int i = 0; i < MAX_SCRIPTS && !s; i++)
		if (!f->scripts[i].used)
			s = &f->scripts[i];
	if (!s)
		abort(); /* more scripts than a test needs */
	free(s->reply);
	memset(s, 0, sizeof(*s));
	s->used = true;
	snprintf(s->cmd, sizeof(s->cmd), "%s", cmd);
	s->any_key = !key_has;
	snprintf(s->key_has, sizeof(s->key_has), "%s", key_has ? key_has : "");
	s->skip = skip;
	s->count = count;
	s->reply = malloc(len ? len : 1);
	if (!s->reply)
		abort();
	memcpy(s->reply, reply, len);
	s->len = len;
	s->action = action;
	pthread_mutex_unlock(&f->lock);
}

void fake_mutate(struct fake_redis *f, fake_mutate_fn fn, void *arg)
{
	pthread_mutex_lock(&f->lock);
	f->mutate = fn;
	f->mutate_arg = arg;
	pthread_mutex_unlock(&f->lock);
}

unsigned long fake_count(struct fake_redis *f, const char *cmd)
{
	unsigned long n = 0;

	pthread_mutex_lock(&f->lock);
	if (!strcmp(cmd, "*"))
		n = f->all_count;
	for (int i = 0; i < MAX_NAMES && f->names[i][0] && !n; i++)
		if (!strcmp(f->names[i], cmd))
			n = f->name_counts[i];
	pthread_mutex_unlock(&f->lock);
	return n;
}

unsigned long fake_connections(struct fake_redis *f, unsigned long *closed)
{
	unsigned long n;

	pthread_mutex_lock(&f->lock);
	n = f->accepted;
	if (closed)
		*closed = f->closed;
	pthread_mutex_unlock(&f->lock);
	return n;
}

unsigned long fake_keys(struct fake_redis *f, const char *has)
{
	unsigned long n = 0;

	pthread_mutex_lock(&f->lock);
	kv_expire(f);
	for (size_t i = 0; i < f->nr_kvs; i++)
		n += !has || strstr(f->kvs[i].key, has);
	pthread_mutex_unlock(&f->lock);
	return n;
}
