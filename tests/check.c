/*
 * check.c - the test runner of one binary, and what the tests share: page generators, test layers and
 * instances, and the running of programs (`uswap run`) with their files and summaries.
 */
#include "check.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/debug.h"
#include "mm/mm.h"
#include "util/csum.h"
#include "util/pagegen.h"
#include "uswap.h"

int check_failures;
const char *check_test = "";
uint64_t check_seed;

_Noreturn void check_skip(const char *why)
{
	printf("SKIP: %s\n", why);
	exit(77);
}

static char skip_reason[256]; /* of the running test; "" while it has not skipped */

void check_skip_test(const char *why)
{
	snprintf(skip_reason, sizeof(skip_reason), "%s", why);
}

/*
 * Each test prints "ok   NAME", "FAIL NAME" or "skip NAME: WHY" (tools/runtests.sh counts the three).
 * Return: 1 if any test failed; 77 (the binary skipped) if every test that ran skipped; else 0.
 */
int check_run(const struct test *tests, size_t n, int argc, char **argv)
{
	const char *env = getenv("USWAP_TEST_SEED");
	int failed_tests = 0, ran = 0, skipped = 0;
	char last_skip[256] = "";

	check_seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL);
	printf("seed %llu (USWAP_TEST_SEED=%llu reproduces)\n", (unsigned long long)check_seed,
	       (unsigned long long)check_seed);
	for (size_t i = 0; i < n; i++) {
		bool wanted = argc < 2;
		int before = check_failures;

		for (int a = 1; a < argc; a++)
			wanted |= !strcmp(argv[a], tests[i].name);
		if (!wanted)
			continue;
		check_test = tests[i].name;
		skip_reason[0] = '\0';
		tests[i].fn();
		ran++;
		if (check_failures != before) {
			printf("FAIL %s\n", tests[i].name);
			failed_tests++;
		} else if (skip_reason[0]) {
			printf("skip %s: %s\n", tests[i].name, skip_reason);
			snprintf(last_skip, sizeof(last_skip), "%s", skip_reason);
			skipped++;
		} else {
			printf("ok   %s\n", tests[i].name);
		}
		fflush(stdout);
	}
	if (failed_tests)
		return 1;
	if (ran && skipped == ran) {
		printf("SKIP: %s\n", last_skip);
		return 77;
	}
	return 0;
}

uint64_t seed_for(uint64_t x)
{
	return pagegen_mix(check_seed ^ (x * 0x9e3779b97f4a7c15ull));
}

void fill_page(void *p, enum page_kind kind, uint64_t seed)
{
	static const enum pagegen_kind map[] = {PG_ZERO, PG_SAME, PG_TEXT, PG_RANDOM};

	if (kind == PK_MIXED)
		kind = (enum page_kind)(seed % 4);
	pagegen_fill(p, map[kind], seed);
}

void fill_pages(void *p, size_t npages, enum page_kind kind, uint64_t seed)
{
	for (size_t i = 0; i < npages; i++)
		fill_page((unsigned char *)p + i * 4096, kind, pagegen_mix(seed + i));
}

/* ---- programs run by the tests ---- */

int check_cmd(char *const argv[], const char *out, const char *err)
{
	return check_cmd_rusage(argv, out, err, NULL);
}

int check_cmd_rusage(char *const argv[], const char *out, const char *err, struct rusage *ru)
{
	pid_t pid = fork();
	int st = -1;

	if (pid == 0) {
		setpgid(0, 0);
		int fd = open(out ? out : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0600);

		dup2(fd, 1);
		if (err) {
			int efd = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
			dup2(efd, 2);
		}
		execv(argv[0], argv);
		_exit(126);
	}
	setpgid(pid, pid);
	for (int waited = 0; wait4(pid, &st, WNOHANG, ru) == 0; waited++) {
		if (waited == CHECK_CMD_TIMEOUT_S * 10) {
			fprintf(stderr, "[%s] %s did not finish in %d s: killed\n", check_test, argv[0],
				CHECK_CMD_TIMEOUT_S);
			kill(-pid, SIGKILL);
			wait4(pid, &st, 0, ru);
			break;
		}
		usleep(100000);
	}
	return st;
}

char *check_slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "r");
	char *buf = NULL;
	size_t cap = 0, n = 0;

	*len = 0;
	if (!f)
		return NULL;
	for (;;) {
		if (n == cap) {
			cap = cap ? cap * 2 : 65536;
			buf = realloc(buf, cap + 1);
		}
		size_t r = fread(buf + n, 1, cap - n, f);
		if (!r)
			break;
		n += r;
	}
	fclose(f);
	buf[n] = '\0';
	*len = n;
	return buf;
}

void check_write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	CHECK(f != NULL);
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

long long check_json_num(const char *json, const char *key)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = json ? strstr(json, pat) : NULL;
	return p ? atoll(p + strlen(pat)) : -1;
}

long long check_json_sum(const char *json, const char *key)
{
	char pat[64];
	long long sum = -1;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	for (const char *p = json; p && (p = strstr(p, pat)); p += strlen(pat))
		sum = (sum < 0 ? 0 : sum) + atoll(p + strlen(pat));
	return sum;
}

struct uswap *check_layer(const char *spec, int background)
{
	struct uswap_options o = {.tiers = spec, .no_background = !background};
	struct uswap *u = NULL;
	int ret = uswap_create_opts(&u, &o);

	if (ret) {
		fprintf(stderr, "[%s] layer \"%s\": %d %s\n", check_test, spec, ret, uswap_errmsg());
		check_failures++;
		return NULL;
	}
	return u;
}

void check_tier_stats(struct uswap *u, unsigned t, struct uswap_tier_stats *out)
{
	struct uswap_stats st;

	uswap_stats(u, &st);
	*out = st.tier[t];
}

/* ---- invariant walkers at the end of each test (DEBUG builds) ---- */

static void validated(int ret, const char *what, const char *file, int line)
{
	if (ret) {
		fprintf(stderr, "%s:%d: [%s] %s: %d %s\n", file, line, check_test, what, ret, uswap_errmsg());
		check_failures++;
	}
}

void check_validate_at(struct uswap *u, const char *file, int line)
{
#if USWAP_DEBUG
	validated(uswap_debug_validate(u), "uswap_debug_validate()", file, line);
#else
	(void)u, (void)file, (void)line, (void)validated;
#endif
}

void check_validate_mm_at(struct uswap_mm *m, const char *file, int line)
{
#if USWAP_DEBUG
	validated(mm_validate(m), "mm_validate()", file, line);
#else
	(void)m, (void)file, (void)line;
#endif
}

int check_debug_build(void)
{
#if USWAP_DEBUG
	return 1;
#else
	return 0;
#endif
}

/* ---- signals the program blocks stay the program's ---- */

static atomic_int handled_signals;

static void count_signal(int sig)
{
	(void)sig;
	atomic_fetch_add(&handled_signals, 1);
}

struct gate {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool open;
};

static void *wait_at_gate(void *p)
{
	struct gate *g = p;

	pthread_mutex_lock(&g->lock);
	while (!g->open)
		pthread_cond_wait(&g->cond, &g->lock);
	pthread_mutex_unlock(&g->lock);
	return NULL;
}

/* Threads of this process whose SigBlk in /proc lacks a signal of @set; each is named on stderr. */
static int threads_not_blocking(const sigset_t *set)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int bad = 0;

	if (!d)
		return -1;
	while ((e = readdir(d))) {
		char path[300], line[256], name[32] = "";
		unsigned long long blk = 0;
		bool seen = false;
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/status", e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue; /* a thread that ended meanwhile */
		while (fgets(line, sizeof(line), f)) {
			if (!strncmp(line, "Name:", 5))
				sscanf(line + 5, "%31s", name);
			if (!strncmp(line, "SigBlk:", 7))
				seen = sscanf(line + 7, "%llx", &blk) == 1;
		}
		fclose(f);
		for (int sig = 1; seen && sig < 64; sig++)
			if (sigismember(set, sig) && !(blk & (1ull << (sig - 1)))) {
				fprintf(stderr, "[%s] thread %s (%s) does not block signal %d\n", check_test,
					e->d_name, name, sig);
				bad++;
				break;
			}
	}
	closedir(d);
	return bad;
}

void check_signals_stay_pending(void)
{
	struct sigaction sa = {.sa_handler = count_signal}, old1, old2;
	struct gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false};
	struct timespec wait_5s = {5, 0};
	sigset_t both, one, old_mask, pending;
	pthread_t th[2];
	int started = 0;

	atomic_store(&handled_signals, 0);
	sigaction(SIGUSR1, &sa, &old1);
	sigaction(SIGUSR2, &sa, &old2);
	sigemptyset(&both);
	sigaddset(&both, SIGUSR1);
	sigaddset(&both, SIGUSR2);
	pthread_sigmask(SIG_BLOCK, &both, &old_mask);
	for (int i = 0; i < 2; i++) /* they inherit the mask */
		if (!pthread_create(&th[started], NULL, wait_at_gate, &g))
			started++;
	CHECK_EQ(started, 2);
	CHECK_EQ(threads_not_blocking(&both), 0);

	/* sigwait() of a blocked signal */
	CHECK_EQ(kill(getpid(), SIGUSR1), 0);
	sigemptyset(&pending);
	sigpending(&pending);
	CHECK(sigismember(&pending, SIGUSR1));
	sigemptyset(&one);
	sigaddset(&one, SIGUSR1);
	CHECK_EQ(sigtimedwait(&one, NULL, &wait_5s), SIGUSR1);

	/* a signalfd of a blocked signal */
	sigemptyset(&one);
	sigaddset(&one, SIGUSR2);
	int fd = signalfd(-1, &one, SFD_CLOEXEC);
	CHECK(fd >= 0);
	if (fd >= 0) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		struct signalfd_siginfo si = {0};

		CHECK_EQ(kill(getpid(), SIGUSR2), 0);
		CHECK_EQ(poll(&pfd, 1, 5000), 1);
		if (pfd.revents & POLLIN)
			CHECK_EQ(read(fd, &si, sizeof(si)), sizeof(si));
		CHECK_EQ(si.ssi_signo, SIGUSR2);
		close(fd);
	}
	CHECK_EQ(atomic_load(&handled_signals), 0);

	pthread_mutex_lock(&g.lock);
	g.open = true;
	pthread_cond_broadcast(&g.cond);
	pthread_mutex_unlock(&g.lock);
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
	sigaction(SIGUSR1, &old1, NULL);
	sigaction(SIGUSR2, &old2, NULL);
}

/* ---- memory regions for tests ---- */

struct uswap_mm *check_mm_new(const struct uswap_mm_options *o)
{
	struct uswap_mm *m = NULL;
	int ret = uswap_mm_create(&m, o);

	if (ret == -EPERM || ret == -EOPNOTSUPP)
		check_skip(uswap_errmsg());
	CHECK_EQ(ret, 0);
	if (ret)
		fprintf(stderr, "uswap_mm_create: %s\n", uswap_errmsg());
	return m;
}

uint32_t check_put_page(unsigned char *p, size_t i, uint64_t v)
{
	fill_page(p, PK_MIXED, seed_for(i * 1000003 + v));
	return csum_buf(p, 4096);
}

size_t check_verify_pages(const unsigned char *base, size_t first, size_t end, const uint32_t *sums)
{
	size_t bad = 0;

	for (size_t i = first; i < end; i++)
		if (csum_buf(base + i * 4096, 4096) != sums[i] && bad++ < 5)
			fprintf(stderr, "[%s] page %zu differs\n", check_test, i);
	return bad;
}

unsigned char *check_map_filled(struct uswap_mm *m, size_t n, size_t folio_bytes, uint32_t *sums)
{
	unsigned char *p = NULL;

	CHECK_EQ(uswap_map(m, n * 4096, folio_bytes, (void **)&p), 0);
	for (size_t i = 0; p && i < n; i++)
		sums[i] = check_put_page(p + i * 4096, i, 0);
	return p;
}

uint64_t check_swap_pages(struct uswap_mm *m)
{
	struct uswap_stats st;

	uswap_stats(uswap_mm_swap(m), &st);
	return st.pages;
}

int check_page_is_zero(const unsigned char *p)
{
	for (size_t i = 0; i < 4096; i++)
		if (p[i])
			return 0;
	return 1;
}
