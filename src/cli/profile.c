/*
 * profile.c - `uswap profile [--limits LIST] -- PROGRAM [ARGS...]`: what a program's memory costs in time.
 * It runs the program once plainly (its peak resident size, wait4's ru_maxrss, is the reference the
 * N% limits are taken of), then under `uswap run` (this binary again) at each limit, then once under
 * --limit auto; every run gets the same stdin, and its exit status and stdout (SHA-256) must be the
 * plain run's: a run that differs is reported loudly and makes the exit status 1. The figures of
 * each run come from its --stats-json summary, summed over the program and the programs it started.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/profile.h"
#include "uswap.h"

static const char profile_usage[] =
	"usage: uswap profile [--limits LIST] [--auto SPEC|none] [--rounds N] [--timeout SECONDS|Nx]\n"
	"                     [--stdin FILE] [--tiers SPEC] [--json] [--svg FILE] -- PROGRAM [ARGS...]\n"
	"  runs PROGRAM plainly, then under `uswap run` at each limit and once under --limit auto, and\n"
	"  prints time, slowdown, swap-ins, pool and file use and peak resident size of each run; every\n"
	"  run's exit status and stdout must be the plain run's (exit status 1 when one differs)\n"
	"  --limits LIST      comma-separated: N% of the plain run's peak resident size, or sizes (64M);\n"
	"                     default 100%,75%,50%,25%,10%\n"
	"  --auto SPEC        the adaptive run's --limit (default auto; none: no such run)\n"
	"  --rounds N         run the whole set N times, alternating; times are medians (default 1)\n"
	"  --timeout T        stop a run under uswap after T seconds, or Nx the plain run's time (default\n"
	"                     10x, at least 10 s); a stopped run is reported, not counted as wrong\n"
	"  --stdin FILE       every run's standard input (default /dev/null)\n"
	"  --tiers SPEC       passed to uswap run\n"
	"  --json             the figures as one JSON object instead of the table\n"
	"  --svg FILE         a plot of time against memory, one point per run\n";

#define MAX_LIMITS 32
#define MIN_LIMIT  (4ull << 20) /* the smallest limit uswap run takes */

struct profile {
	char *const *cmd;
	const char *prog, *in_path, *tiers;
	char tmpdir[64];
	double timeout_s, timeout_x; /* one of them: seconds, or a multiple of the plain time */
	const struct prun *plain;
};

static volatile sig_atomic_t g_interrupted;

static void on_signal(int sig)
{
	g_interrupted = sig;
}

/* ---- the figures of a run's --stats-json (util/live.c print_one(): one object per process) ---- */

static uint64_t json_u64(const char *s, const char *key)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = strstr(s, pat);
	return p ? strtoull(p + strlen(pat), NULL, 10) : 0;
}

/* One process's object (up to the next one's start): its figures added to @r. */
static void add_process(struct prun *r, const char *seg, uint64_t *best_peak)
{
	uint64_t peak = json_u64(seg, "peak_resident_bytes");
	const char *t = strstr(seg, "\"tier\":[");

	r->swapins += json_u64(seg, "swapins");
	r->evicted_pages += json_u64(seg, "evicted_pages");
	r->stall_ms += json_u64(seg, "stall_ms");
	for (const char *s = t; s && (s = strstr(s, "{\"spec\":\""));) {
		const char *spec = s + 9;
		uint64_t used = json_u64(s, "used_bytes");

		if (!strncmp(spec, "zpool", 5))
			r->pool_bytes += used;
		else if (!strncmp(spec, "file", 4))
			r->file_bytes += used;
		s = spec;
	}
	if (r->hist && peak <= *best_peak)
		return;
	/* The limit history of the process that held the most: the one doing the work. */
	*best_peak = peak;
	r->managed_peak_bytes = peak;
	const char *h = strstr(seg, "\"limit_history\":{\"step_ms\":");
	const char *b = h ? strstr(h, "\"bytes\":[") : NULL;
	size_t n = 0;

	free(r->hist);
	r->hist = NULL;
	r->hist_n = 0;
	if (!b)
		return;
	r->hist_step_ms = (uint32_t)json_u64(h, "step_ms");
	for (const char *q = b + 9; *q && *q != ']'; q++)
		n += *q == ',';
	r->hist = calloc(n + 1, sizeof(*r->hist));
	if (!r->hist)
		return;
	for (const char *q = b + 8; q && *q != ']' && r->hist_n <= n; q = strpbrk(q + 1, ",]")) {
		if (q[1] == ']')
			break;
		r->hist[r->hist_n++] = strtoull(q + 1, NULL, 10);
	}
}

static void read_stats(struct prun *r, const char *path)
{
	FILE *f = fopen(path, "r");
	char *js = NULL, *p, *next;
	size_t cap = 0;
	uint64_t best = 0;

	if (!f)
		return;
	ssize_t len = getdelim(&js, &cap, '\0', f);
	fclose(f);
	if (len <= 0 || !strstr(js, "\"peak_resident_bytes\":")) {
		free(js);
		return;
	}
	r->have_stats = true;
	for (p = strstr(js, "{\"pid\":"); p; p = next) {
		next = strstr(p + 1, "{\"pid\":");
		if (next)
			*next = '\0';
		add_process(r, p, &best);
		if (next)
			*next = '{';
	}
	free(js);
	/*
	 * The first sample is the start (the ceiling), before any look at the stall: a program that
	 * ends before the second has no history to speak of (hist_n counts the samples after it).
	 */
	if (r->hist_n < 2) {
		r->hist_n = 0;
		return;
	}
	long double sum = 0;

	r->hist_lowest = UINT64_MAX;
	for (uint32_t i = 1; i < r->hist_n; i++) {
		sum += r->hist[i];
		if (r->hist[i] < r->hist_lowest)
			r->hist_lowest = r->hist[i];
	}
	r->hist_final = r->hist[r->hist_n - 1];
	r->hist_mean = (uint64_t)(sum / (r->hist_n - 1));
}

/* ---- one run ---- */

/* The last lines of a run's stderr, for a run that went wrong. */
static void show_tail(const char *path)
{
	FILE *f = fopen(path, "r");
	char *lines[10] = {0}, buf[512];
	unsigned n = 0;

	if (!f)
		return;
	while (fgets(buf, sizeof(buf), f)) {
		free(lines[n % 10]);
		lines[n++ % 10] = strdup(buf);
	}
	fclose(f);
	if (n)
		fprintf(stderr, "uswap: profile:   its stderr ended with:\n");
	for (unsigned i = n > 10 ? n - 10 : 0; i < n; i++) {
		fprintf(stderr, "    %s", lines[i % 10] ? lines[i % 10] : "\n");
		free(lines[i % 10]);
		lines[i % 10] = NULL;
	}
}

static void stop_group(pid_t pid, double now, double *term_at, bool *killed)
{
	if (!*term_at) {
		kill(-pid, SIGTERM);
		*term_at = now;
	} else if (!*killed && now - *term_at > 5) {
		kill(-pid, SIGKILL);
		*killed = true;
	}
}

/*
 * Run @argv (the program at @path) in a process group of its own, stdin from the profile's
 * input, stdout hashed, stderr to @err_path; stopped at @deadline_s after the start (0: never). What
 * the program leaves running after it exits is killed with its group.
 * Return: 0; -1 it could not be started, or the profile was interrupted.
 */
static int run_one(struct profile *p, struct prun *r, const char *path, char *const argv[],
		   const char *err_path, double deadline_s)
{
	int out[2], in, err, pfd;
	crypto_hash_sha256_state sha;
	unsigned char buf[65536];
	double start, exit_at = 0, term_at = 0;
	bool exited = false, eof = false, killed = false;
	struct rusage ru;

	in = open(p->in_path, O_RDONLY | O_CLOEXEC);
	if (in < 0) {
		fprintf(stderr, "uswap: profile: %s: %s\n", p->in_path, strerror(errno));
		return -1;
	}
	err = open(err_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (err < 0 || pipe2(out, O_CLOEXEC)) {
		fprintf(stderr, "uswap: profile: %s: %s\n", err_path, strerror(errno));
		close(in);
		if (err >= 0)
			close(err);
		return -1;
	}
	start = cli_now();
	pid_t pid = fork();
	if (pid == 0) {
		setpgid(0, 0);
		dup2(in, 0);
		dup2(out[1], 1);
		dup2(err, 2);
		signal(SIGPIPE, SIG_DFL);
		execv(path, argv);
		fprintf(stderr, "uswap: profile: cannot execute %s: %s\n", path, strerror(errno));
		_exit(127);
	}
	close(in);
	close(err);
	close(out[1]);
	if (pid < 0) {
		fprintf(stderr, "uswap: profile: fork: %s\n", strerror(errno));
		close(out[0]);
		return -1;
	}
	setpgid(pid, pid);
	/* The process's exit wakes poll() (a pidfd); without one, look every 10 ms. */
	pfd = (int)syscall(SYS_pidfd_open, pid, 0);
	crypto_hash_sha256_init(&sha);
	r->stdout_bytes = 0;
	for (;;) {
		struct pollfd fds[2] = {{eof ? -1 : out[0], POLLIN, 0}, {exited ? -1 : pfd, POLLIN, 0}};
		double now = cli_now();
		int wait_ms = pfd >= 0 ? 500 : 10;

		if (exited && (eof || now - exit_at > 2)) /* a process it left holds stdout open */
			break;
		if (!exited && (g_interrupted || (deadline_s > 0 && now - start > deadline_s))) {
			r->timed_out = !g_interrupted;
			stop_group(pid, now, &term_at, &killed);
		}
		poll(fds, 2, wait_ms);
		if (!eof && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
			ssize_t n = read(out[0], buf, sizeof(buf));

			if (n > 0) {
				crypto_hash_sha256_update(&sha, buf, (unsigned long long)n);
				r->stdout_bytes += (uint64_t)n;
			} else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
				eof = true;
			}
		}
		if (!exited && wait4(pid, &r->status, WNOHANG, &ru) == pid) {
			exited = true;
			exit_at = cli_now();
			r->secs = exit_at - start;
			r->maxrss_bytes = (uint64_t)ru.ru_maxrss * 1024;
		}
	}
	kill(-pid, SIGKILL);
	crypto_hash_sha256_final(&sha, r->sha256);
	close(out[0]);
	if (pfd >= 0)
		close(pfd);
	return g_interrupted ? -1 : 0;
}

/*
 * Run @r: plainly (a later round's plain run) or under `uswap run --limit r->limit_arg`; then compare
 * it with the first plain run, loudly when it differs.
 */
static int run_checked(struct profile *p, struct prun *r, unsigned idx)
{
	char stats[128], err[128], *argv[16 + 4096];
	size_t n = 0;
	double deadline = p->timeout_s;
	int ret;

	snprintf(stats, sizeof(stats), "%s/stats.%u.json", p->tmpdir, idx);
	snprintf(err, sizeof(err), "%s/stderr.%u", p->tmpdir, idx);
	if (!deadline) {
		deadline = p->timeout_x * p->plain->secs;
		if (deadline < 10)
			deadline = 10;
	}
	argv[n++] = "uswap";
	argv[n++] = "run";
	argv[n++] = "--limit";
	argv[n++] = r->limit_arg;
	argv[n++] = "--stats-json";
	argv[n++] = stats;
	if (p->tiers) {
		argv[n++] = "--tiers";
		argv[n++] = (char *)p->tiers;
	}
	argv[n++] = "--";
	for (size_t i = 0; p->cmd[i] && n < sizeof(argv) / sizeof(argv[0]) - 1; i++)
		argv[n++] = p->cmd[i];
	argv[n] = NULL;
	if (r->kind == PRUN_PLAIN)
		ret = run_one(p, r, p->prog, p->cmd, err, 0);
	else
		ret = run_one(p, r, "/proc/self/exe", argv, err, deadline);
	if (ret) {
		unlink(err);
		return ret;
	}
	if (r->kind != PRUN_PLAIN)
		read_stats(r, stats);
	unlink(stats);

	const struct prun *pl = p->plain;
	r->output_ok = !r->timed_out && r->status == pl->status && r->stdout_bytes == pl->stdout_bytes &&
		       !memcmp(r->sha256, pl->sha256, sizeof(r->sha256));
	if (r->timed_out) {
		fprintf(stderr, "uswap: profile: %s: stopped after %.0f s (--timeout)\n", r->label, deadline);
	} else if (!r->output_ok) {
		char a[65], b[65];

		profile_hex(a, r->sha256);
		profile_hex(b, pl->sha256);
		if (r->kind == PRUN_PLAIN)
			fprintf(stderr, "uswap: profile: the program is not deterministic: a plain run ended "
					"differently from the first: ");
		else
			fprintf(stderr, "uswap: profile: WRONG RUN at --limit %s: ", r->limit_arg);
		if (r->status != pl->status)
			fprintf(stderr, "wait status 0x%x, plainly 0x%x\n", (unsigned)r->status,
				(unsigned)pl->status);
		else
			fprintf(stderr,
				"stdout differs from the plain run's (%llu bytes, sha256 %s; plainly %llu "
				"bytes, %s)\n",
				(unsigned long long)r->stdout_bytes, a, (unsigned long long)pl->stdout_bytes,
				b);
	}
	if (r->timed_out || !r->output_ok)
		show_tail(err);
	else if (!r->have_stats && r->kind != PRUN_PLAIN)
		fprintf(stderr, "uswap: profile: %s: no statistics were published\n", r->label);
	unlink(err);
	return 0;
}

static int by_secs(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/*
 * The figures shown for each of @n configurations run in @rounds rounds (@all, round by round): the
 * run of the median time (the lower one of an even count), its output_ok and timed_out those of every
 * round, and every round's time in round_secs.
 */
static void pick_medians(const struct prun *all, size_t n, unsigned rounds, struct prun *rep)
{
	for (size_t k = 0; k < n; k++) {
		double sorted[MAX_ROUNDS];
		unsigned m = 0;

		for (unsigned j = 0; j < rounds; j++)
			sorted[j] = all[j * n + k].secs;
		qsort(sorted, rounds, sizeof(sorted[0]), by_secs);
		while (all[m * n + k].secs != sorted[(rounds - 1) / 2])
			m++;
		rep[k] = all[m * n + k];
		rep[k].nr_rounds = rounds;
		for (unsigned j = 0; j < rounds; j++) {
			const struct prun *r = &all[j * n + k];

			rep[k].round_secs[j] = r->secs;
			rep[k].output_ok &= r->output_ok;
			rep[k].timed_out |= r->timed_out;
		}
	}
}

/* ---- the command ---- */

/* --limits: each "N%" of the plain peak (resolved after the plain run) or a size. */
static int parse_limits(const char *list, struct prun *runs, size_t *n, double *pct)
{
	char *copy = strdup(list), *save = NULL;

	if (!copy)
		return -ENOMEM;
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		struct prun *r = &runs[*n];
		size_t l = strlen(tok);
		char *end;

		if (*n >= MAX_LIMITS) {
			free(copy);
			return cli_usage_error("profile: --limits: at most %d", MAX_LIMITS);
		}
		memset(r, 0, sizeof(*r));
		r->kind = PRUN_LIMIT;
		snprintf(r->label, sizeof(r->label), "%s", tok);
		pct[*n] = 0;
		if (l > 1 && tok[l - 1] == '%') {
			pct[*n] = strtod(tok, &end);
			if (end != tok + l - 1 || !(pct[*n] > 0 && pct[*n] <= 1000)) {
				free(copy);
				return cli_usage_error(
					"profile: --limits: \"%s\" is not a percentage (1%%..1000%%)", tok);
			}
		} else if (uswap_parse_size(tok, 0, &r->limit_bytes) || r->limit_bytes < MIN_LIMIT) {
			free(copy);
			return cli_usage_error(
				"profile: --limits: \"%s\" is neither N%% nor a size of 4M or more", tok);
		}
		(*n)++;
	}
	free(copy);
	return *n ? 0 : cli_usage_error("profile: --limits: an empty list");
}

int cmd_profile(int argc, char **argv)
{
	const char *limits = "100%,75%,50%,25%,10%", *auto_spec = "auto", *svg = NULL, *timeout = "10x";
	struct profile p = {.in_path = "/dev/null"};
	struct prun runs[MAX_LIMITS + 2];
	double pct[MAX_LIMITS];
	size_t nl = 0, n = 0;
	bool json = false;
	const char *rounds_arg = "1";
	unsigned rounds;
	char prog[PATH_MAX];
	int i, ret = 0;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--")) {
			i++;
			break;
		}
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			fputs(profile_usage, stdout);
			return 0;
		}
		if (a[0] != '-')
			break;
		if (!strcmp(a, "--json")) {
			json = true;
			continue;
		}
		if (!v)
			return cli_usage_error("profile: option %s needs a value\n%s", a, profile_usage);
		if (!strcmp(a, "--limits"))
			limits = v;
		else if (!strcmp(a, "--auto"))
			auto_spec = v;
		else if (!strcmp(a, "--timeout"))
			timeout = v;
		else if (!strcmp(a, "--stdin"))
			p.in_path = v;
		else if (!strcmp(a, "--tiers"))
			p.tiers = v;
		else if (!strcmp(a, "--svg"))
			svg = v;
		else if (!strcmp(a, "--rounds"))
			rounds_arg = v;
		else
			return cli_usage_error("profile: unknown option \"%s\"\n%s", a, profile_usage);
		i++;
	}
	if (i >= argc)
		return cli_usage_error("profile: no PROGRAM to run\n%s", profile_usage);
	p.cmd = argv + i;
	p.prog = prog;

	/* Everything checked before the first run. */
	memset(runs, 0, sizeof(runs));
	runs[0].kind = PRUN_PLAIN;
	snprintf(runs[0].label, sizeof(runs[0].label), "plain");
	if ((ret = parse_limits(limits, runs + 1, &nl, pct)))
		return ret;
	n = 1 + nl;
	if (strcmp(auto_spec, "none")) {
		struct uswap_mm_options o = {0};

		if (uswap_parse_limit(auto_spec, &o) || !o.limit_auto)
			return cli_usage_error(
				"profile: --auto \"%s\": not an auto limit (auto[:stall=PCT][:min=SIZE]"
				"[:max=SIZE] or SIZE:auto[...])",
				auto_spec);
		runs[n].kind = PRUN_AUTO;
		snprintf(runs[n].label, sizeof(runs[n].label), "%s", auto_spec);
		snprintf(runs[n].limit_arg, sizeof(runs[n].limit_arg), "%s", auto_spec);
		n++;
	}
	{
		size_t l = strlen(timeout);
		char *end;
		double t = strtod(timeout, &end);

		if (!(t > 0) || (end != timeout + l && !(end == timeout + l - 1 && timeout[l - 1] == 'x')))
			return cli_usage_error(
				"profile: --timeout \"%s\": seconds, or Nx the plain run's time", timeout);
		if (*end == 'x')
			p.timeout_x = t;
		else
			p.timeout_s = t;
	}
	{
		char *end;
		unsigned long r = strtoul(rounds_arg, &end, 10);

		if (*end || !*rounds_arg || r < 1 || r > MAX_ROUNDS)
			return cli_usage_error("profile: --rounds \"%s\": 1 to %d", rounds_arg, MAX_ROUNDS);
		rounds = (unsigned)r;
	}
	if (p.tiers && uswap_check_tiers(p.tiers))
		return cli_usage_error("profile: --tiers: %s", uswap_errmsg());
	if (access(p.in_path, R_OK))
		return cli_usage_error("profile: --stdin %s: %s", p.in_path, strerror(errno));
	if (uswap_mm_check()) {
		fprintf(stderr, "uswap: profile: %s\n", uswap_errmsg());
		return 2;
	}
	if (cli_find_program(p.cmd[0], prog, sizeof(prog))) {
		fprintf(stderr, "uswap: profile: %s: command not found\n", p.cmd[0]);
		return 127;
	}
	if (sodium_init() < 0)
		return 1;
	snprintf(p.tmpdir, sizeof(p.tmpdir), "/tmp/uswap-profile.XXXXXX");
	if (!mkdtemp(p.tmpdir)) {
		fprintf(stderr, "uswap: profile: mkdtemp: %s\n", strerror(errno));
		return 1;
	}
	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);

	/* Round by round: the plain run, each limit, auto; the first plain run is the reference. */
	struct prun *all = calloc(n * rounds, sizeof(*all));
	bool all_ok = true;

	if (!all) {
		ret = 1;
		goto out;
	}
	for (unsigned j = 0; j < rounds; j++) {
		for (size_t k = 0; k < n; k++) {
			struct prun *r = &all[j * n + k];

			*r = runs[k];
			if (rounds > 1)
				fprintf(stderr, "uswap: profile: round %u of %u, ", j + 1, rounds);
			else
				fprintf(stderr, "uswap: profile: ");
			if (k)
				fprintf(stderr, "run %zu of %zu: --limit %s\n", k, n - 1, r->limit_arg);
			else
				fprintf(stderr, "plain run\n");
			if (!j && !k) {
				char err[128];

				snprintf(err, sizeof(err), "%s/stderr.plain", p.tmpdir);
				ret = run_one(&p, r, prog, p.cmd, err, 0);
				unlink(err);
				r->output_ok = true;
				p.plain = r;
			} else {
				ret = run_checked(&p, r, (unsigned)(j * n + k));
			}
			if (ret) {
				ret = g_interrupted ? 128 + g_interrupted : 1;
				goto out_all;
			}
			fprintf(stderr, "uswap: profile: %s: %.2f s, peak %.1f MiB, %s\n", r->label, r->secs,
				profile_mib(r->maxrss_bytes), profile_outcome(r));
			all_ok &= r->output_ok || r->timed_out;
			if (j || k)
				continue;
			/* The limits in % are of the first plain run's peak. */
			for (size_t l = 0; l < nl; l++) {
				struct prun *c = &runs[1 + l];

				if (pct[l] > 0) {
					c->limit_bytes = (uint64_t)((double)r->maxrss_bytes * pct[l] / 100.0);
					if (c->limit_bytes < MIN_LIMIT) {
						fprintf(stderr,
							"uswap: profile: %s of the plain peak is under 4 "
							"MiB: 4M "
							"instead\n",
							c->label);
						c->limit_bytes = MIN_LIMIT;
					}
				}
				c->limit_bytes &= ~4095ull;
				snprintf(c->limit_arg, sizeof(c->limit_arg), "%lluK",
					 (unsigned long long)(c->limit_bytes >> 10));
			}
		}
	}
	pick_medians(all, n, rounds, runs);
	if (json)
		profile_print_json(stdout, p.cmd, runs, n, all[0].maxrss_bytes, all_ok);
	else
		profile_print_table(stdout, runs, n);
	if (svg) {
		FILE *f = fopen(svg, "w");
		char title[256] = "";

		for (size_t k = 0; p.cmd[k] && strlen(title) < sizeof(title) - 2; k++)
			snprintf(title + strlen(title), sizeof(title) - strlen(title), "%s%s", k ? " " : "",
				 p.cmd[k]);
		if (!f) {
			fprintf(stderr, "uswap: profile: cannot write %s: %s\n", svg, strerror(errno));
			ret = 1;
		} else {
			profile_svg(f, runs, n, title);
			if (fclose(f)) {
				fprintf(stderr, "uswap: profile: writing %s: %s\n", svg, strerror(errno));
				ret = 1;
			}
		}
	}
	if (!all_ok) {
		fprintf(stderr,
			"uswap: profile: WRONG: a run under uswap ended differently from the plain run\n");
		ret = 1;
	}
out_all:
	for (size_t k = 0; k < n * rounds; k++)
		free(all[k].hist);
	free(all);
out:
	rmdir(p.tmpdir);
	return ret;
}
