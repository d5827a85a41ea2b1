/*
 * rserver.c - redis-server processes for the remote-tier tests; see rserver.h.
 */
#include "rserver.h"

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_SERVERS 16

static struct rserver *live[MAX_SERVERS];
static bool cleanup_armed;

bool rserver_available(void)
{
	return !access("/usr/bin/redis-server", X_OK) && !access("/usr/bin/redis-cli", X_OK);
}

static bool port_free(int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((uint16_t)port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	bool ok = fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof(a));

	if (fd >= 0)
		close(fd);
	return ok;
}

int rserver_pick_port(void)
{
	static unsigned next;
	unsigned base = (unsigned)getpid() * 37u;

	for (unsigned i = 0; i < 1000; i++) {
		int port = 17000 + (int)((base + next++) % 1000);

		if (port_free(port) && port_free(port + 10000))
			return port;
	}
	return -1;
}

static void rm_tree(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[512];

	if (!d)
		return;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (unlink(path))
			rm_tree(path);
	}
	closedir(d);
	rmdir(dir);
}

void rserver_kill(struct rserver *s)
{
	if (s->pid > 0) {
		kill(s->pid, SIGKILL);
		waitpid(s->pid, NULL, 0);
		s->pid = 0;
	}
	if (s->dir[0]) {
		rm_tree(s->dir);
		s->dir[0] = '\0';
	}
	for (int i = 0; i < MAX_SERVERS; i++)
		if (live[i] == s)
			live[i] = NULL;
}

static void kill_all(void)
{
	for (int i = 0; i < MAX_SERVERS; i++)
		if (live[i])
			rserver_kill(live[i]);
}

/* A test killed by the runner's timeout still stops its servers (a crash: PR_SET_PDEATHSIG does). */
static void on_signal(int sig)
{
	kill_all();
	signal(sig, SIG_DFL);
	raise(sig);
}

redisContext *rserver_connect(const struct rserver *s)
{
	struct timeval tv = {5, 0};
	redisContext *c = redisConnectWithTimeout("127.0.0.1", s->port, tv);

	if (c && !c->err) {
		redisSetTimeout(c, tv);
		return c;
	}
	if (c)
		redisFree(c);
	return NULL;
}

static pid_t spawn(const char *const *argv, bool quiet)
{
	pid_t parent = getpid(), pid = fork();

	if (pid)
		return pid;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(127);
	if (quiet) {
		int fd = open("/dev/null", O_RDWR);

		dup2(fd, 0);
		dup2(fd, 1);
		dup2(fd, 2);
	}
	execv(argv[0], (char *const *)argv);
	_exit(127);
}

int rserver_run(const char *const *argv)
{
	pid_t pid = spawn(argv, true);
	int st;

	if (pid < 0 || waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A TLS server answers PING to redis-cli --tls (with the client certificate for a mutual one). */
static bool tls_pings(const struct rserver *s)
{
	char port[16], ca[64], cert[64], key[64];
	const char *argv[] = {
		"/usr/bin/redis-cli", "--tls", "--cacert", ca,     "--cert", cert, "--key", key, "-h",
		"127.0.0.1",          "-p",    port,       "PING", NULL};

	snprintf(port, sizeof(port), "%d", s->port);
	snprintf(ca, sizeof(ca), "%s/ca.crt", s->tls_dir);
	snprintf(cert, sizeof(cert), "%s/c.crt", s->tls_dir);
	snprintf(key, sizeof(key), "%s/c.key", s->tls_dir);
	return rserver_run(argv) == 0;
}

static int start_once(struct rserver *s, const char *const *wrap, const char *policy,
		      const char *const *extra)
{
	const char *argv[64], *args[48] = {"/usr/bin/redis-server",
					   "--port",
					   NULL,
					   "--bind",
					   "127.0.0.1",
					   "--dir",
					   s->dir,
					   "--save",
					   "",
					   "--appendonly",
					   "no",
					   "--maxmemory-policy",
					   policy,
					   "--loglevel",
					   "warning",
					   "--logfile",
					   "redis.log",
					   "--daemonize",
					   "no"};
	char port[16], cert[64], key[64], ca[64];
	int argc = 0, nargs = 19;

	s->port = rserver_pick_port();
	if (s->port < 0)
		return -1;
	snprintf(port, sizeof(port), "%d", s->port);
	args[2] = port;
	if (s->tls_dir) {
		snprintf(cert, sizeof(cert), "%s/s.crt", s->tls_dir);
		snprintf(key, sizeof(key), "%s/s.key", s->tls_dir);
		snprintf(ca, sizeof(ca), "%s/ca.crt", s->tls_dir);
		args[2] = "0";
		args[nargs++] = "--tls-port";
		args[nargs++] = port;
		args[nargs++] = "--tls-cert-file";
		args[nargs++] = cert;
		args[nargs++] = "--tls-key-file";
		args[nargs++] = key;
		args[nargs++] = "--tls-ca-cert-file";
		args[nargs++] = ca;
		args[nargs++] = "--tls-auth-clients";
		args[nargs++] = s->tls_mutual ? "yes" : "no";
	}
	for (int i = 0; extra && extra[i] && nargs < 47; i++)
		args[nargs++] = extra[i];
	for (int i = 0; wrap && wrap[i] && argc < 15; i++)
		argv[argc++] = wrap[i];
	for (int i = 0; i < nargs; i++)
		argv[argc++] = args[i];
	argv[argc] = NULL;
	s->pid = spawn(argv, true);
	if (s->pid < 0)
		return -1;
	for (int i = 0; i < 1000; i++) { /* readiness: it answers PING, or it has exited */
		redisContext *c = s->tls_dir ? NULL : rserver_connect(s);
		redisReply *r = c ? redisCommand(c, "PING") : NULL;
		bool up = s->tls_dir ? tls_pings(s) : r && r->type == REDIS_REPLY_STATUS;

		if (r)
			freeReplyObject(r);
		if (c)
			redisFree(c);
		if (up)
			return 0;
		if (waitpid(s->pid, NULL, WNOHANG) == s->pid) {
			s->pid = 0;
			return -1;
		}
		nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
	}
	return -1;
}

int rserver_start(struct rserver *s, const char *policy, const char *const *extra)
{
	return rserver_start_wrapped(s, NULL, policy, extra);
}

static int start(struct rserver *s, const char *const *wrap, const char *certdir, bool mutual,
		 const char *policy, const char *const *extra);

int rserver_start_wrapped(struct rserver *s, const char *const *wrap, const char *policy,
			  const char *const *extra)
{
	return start(s, wrap, NULL, false, policy, extra);
}

int rserver_start_tls(struct rserver *s, const char *certdir, bool mutual, const char *policy,
		      const char *const *extra)
{
	return start(s, NULL, certdir, mutual, policy, extra);
}

#define MAX_CERT_DIRS 4
static char cert_dirs[MAX_CERT_DIRS][24];

static void rm_cert_dirs(void)
{
	for (int i = 0; i < MAX_CERT_DIRS; i++)
		if (cert_dirs[i][0])
			rm_tree(cert_dirs[i]);
}

int rserver_make_certs(char *dir)
{
	static const char *const cmds[][24] = {
		{"/usr/bin/openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
		 "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days",
		 "2", "-subj", "/CN=uswap test CA", NULL},
		{"/usr/bin/openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
		 "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", "x.key", "-out", "x.crt", "-days", "2",
		 "-subj", "/CN=another CA", NULL},
		{"/usr/bin/openssl",
		 "req",
		 "-x509",
		 "-newkey",
		 "ec",
		 "-pkeyopt",
		 "ec_paramgen_curve:prime256v1",
		 "-nodes",
		 "-keyout",
		 "s.key",
		 "-out",
		 "s.crt",
		 "-days",
		 "2",
		 "-subj",
		 "/CN=localhost",
		 "-CA",
		 "ca.crt",
		 "-CAkey",
		 "ca.key",
		 "-addext",
		 "subjectAltName=IP:127.0.0.1,DNS:localhost",
		 NULL},
		{"/usr/bin/openssl",
		 "req",
		 "-x509",
		 "-newkey",
		 "ec",
		 "-pkeyopt",
		 "ec_paramgen_curve:prime256v1",
		 "-nodes",
		 "-keyout",
		 "c.key",
		 "-out",
		 "c.crt",
		 "-days",
		 "2",
		 "-subj",
		 "/CN=uswap client",
		 "-CA",
		 "ca.crt",
		 "-CAkey",
		 "ca.key",
		 NULL},
	};
	char cwd[512];
	int slot = -1, ret = 0;

	for (int i = 0; i < MAX_CERT_DIRS && slot < 0; i++)
		if (!cert_dirs[i][0])
			slot = i;
	if (slot < 0 || access("/usr/bin/openssl", X_OK) || !getcwd(cwd, sizeof(cwd)))
		return -1;
	snprintf(dir, 24, "/tmp/utXXXXXX");
	if (!mkdtemp(dir))
		return -1;
	if (slot == 0)
		atexit(rm_cert_dirs);
	snprintf(cert_dirs[slot], sizeof(cert_dirs[slot]), "%s", dir);
	if (chdir(dir))
		return -1;
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]) && !ret; i++)
		ret = rserver_run(cmds[i]) ? -1 : 0;
	if (chdir(cwd))
		ret = -1;
	return ret;
}

static int start(struct rserver *s, const char *const *wrap, const char *certdir, bool mutual,
		 const char *policy, const char *const *extra)
{
	int slot = -1;

	for (int i = 0; i < MAX_SERVERS && slot < 0; i++)
		if (!live[i])
			slot = i;
	if (slot < 0)
		return -1;
	if (!cleanup_armed) {
		cleanup_armed = true;
		atexit(kill_all);
		signal(SIGTERM, on_signal);
		signal(SIGINT, on_signal);
	}
	memset(s, 0, sizeof(*s));
	s->tls_dir = certdir;
	s->tls_mutual = mutual;
	snprintf(s->dir, sizeof(s->dir), "/tmp/uswap-redis-XXXXXX");
	if (!mkdtemp(s->dir)) {
		s->dir[0] = '\0';
		return -1;
	}
	live[slot] = s;
	for (int attempt = 0; attempt < 5; attempt++) { /* another process may take the port first */
		if (!start_once(s, wrap, policy, extra))
			return 0;
		if (s->pid > 0) {
			kill(s->pid, SIGKILL);
			waitpid(s->pid, NULL, 0);
			s->pid = 0;
		}
	}
	rserver_kill(s);
	return -1;
}
