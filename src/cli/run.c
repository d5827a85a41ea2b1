/*
 * run.c - `uswap run [options] -- PROGRAM [ARGS...]`: check everything that can be checked before the
 * program starts (options, tier string, userfaultfd access, the program itself), then exec it with the
 * preload library and the environment that configures it, as our child; its exit status and its death
 * by a signal are passed on as ours.
 *
 * --limit is the memory budget of the program's anonymous pages: with the default tiers it covers the
 * resident pages and the compressed pool together (the pool's share starts at half and moves between
 * an eighth and half with what misses cost from the pool and from the file; the resident pages get
 * whatever the pool does not use); with --tiers it is the resident limit alone, and the
 * pool's own max= applies.
 */
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "util/live.h"
#include "uswap.h"

static const char run_usage[] =
	"usage: uswap run --limit SIZE|N%|auto[...] [--tiers SPEC] [--folio SIZE] [--fork-child own|plain] "
	"[--stats]\n"
	"                 [--stats-json FILE] -- PROGRAM [ARGS...]\n"
	"  --limit SIZE       memory for the program's anonymous pages: 512M, 2G, 25% of RAM (required);\n"
	"                     auto[:stall=PCT][:min=SIZE][:max=SIZE] finds it: lowered while the program\n"
	"                     waits on swap-ins for less than PCT of its time (1%), raised when more;\n"
	"                     SIZE:auto[:...] does so under a ceiling of SIZE\n"
	"  --tiers SPEC       tier stack (default: same, a compressed pool sharing the limit, from an\n"
	"                     eighth to half of it, an unnamed swap file); see uswap(1)\n"
	"  --folio SIZE       unit of eviction and swap-in, 4K..2M, a power of two (default 4K)\n"
	"  --fork-child MODE  a child forked without exec: own (an instance of its own, with the same\n"
	"                     limit, for the memory it adds; the default) or plain (unmanaged)\n"
	"  --stats            print a summary to stderr when the program exits\n"
	"  --stats-json FILE  write the summary to FILE as JSON\n"
	"Environment for the preload library alone: USWAP_LIMIT, USWAP_TIERS, USWAP_FOLIO, "
	"USWAP_FORK_CHILD,\n"
	"USWAP_STATS_JSON, USWAP_POOL_IN_LIMIT.\n";

/* The preload library: next to this binary (build tree), else in ../lib of it (installed). */
static int find_preload(char *out, size_t len)
{
	char self[PATH_MAX - 64];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	static const char *rel[] = {"libuswap-preload.so", "../lib/libuswap-preload.so",
				    "../lib/x86_64-linux-gnu/libuswap-preload.so"};

	if (n <= 0)
		return -1;
	self[n] = '\0';
	char *slash = strrchr(self, '/');
	if (!slash)
		return -1;
	*slash = '\0';
	for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
		snprintf(out, len, "%s/%s", self, rel[i]);
		if (!access(out, R_OK)) {
			char real[PATH_MAX];

			if (realpath(out, real) && strlen(real) < len)
				memcpy(out, real, strlen(real) + 1);
			return 0;
		}
	}
	return -1;
}

/*
 * What the preload cannot serve: a setuid/setgid program (the loader ignores LD_PRELOAD) and a static
 * binary (no loader at all). A script (#!) is fine: its interpreter gets the library.
 */
static const char *unservable(const char *path)
{
	struct stat st;
	Elf64_Ehdr eh;
	int fd;

	if (stat(path, &st))
		return "cannot be read";
	if (st.st_mode & (S_ISUID | S_ISGID))
		return "is setuid or setgid: the loader ignores LD_PRELOAD for it";
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL; /* execute-only: let exec tell */
	ssize_t n = pread(fd, &eh, sizeof(eh), 0);
	if (n >= 2 && !memcmp(&eh, "#!", 2)) {
		close(fd);
		return NULL;
	}
	if (n != (ssize_t)sizeof(eh) || memcmp(eh.e_ident, ELFMAG, SELFMAG) ||
	    eh.e_ident[EI_CLASS] != ELFCLASS64) {
		close(fd);
		return NULL;
	}
	bool dynamic = false;
	for (unsigned i = 0; i < eh.e_phnum; i++) {
		Elf64_Phdr ph;

		if (pread(fd, &ph, sizeof(ph), (off_t)(eh.e_phoff + (uint64_t)i * eh.e_phentsize)) !=
		    sizeof(ph))
			break;
		dynamic |= ph.p_type == PT_INTERP;
	}
	close(fd);
	return dynamic ? NULL : "is statically linked: there is no loader to preload uswap into it";
}

/*
 * The program runs as our child so that its summary can be written whatever way it ends (exit(),
 * _exit() as shells do, a signal): we read its last published statistics, write them, remove the
 * live file, and end the way it ended: same exit status, or the same signal raised on ourselves.
 * Terminal signals reach the child through the process group; SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 sent
 * to us are passed on (`kill -USR1 $!` used to kill us, and so the program),
 * and a SIGKILL of ours kills the program too (PR_SET_PDEATHSIG).
 */
static pid_t g_child;

static void forward(int sig)
{
	if (g_child > 0)
		kill(g_child, sig);
}

/*
 * Statistics files no runner will collect: those of processes that no longer exist, if they are
 * ours, unless the `uswap run` they ran under still lives (it removes them itself).
 */
static void sweep_stale_live_files(void)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		struct live_stats l;
		char path[300];
		struct stat st;
		int pid, fd;

		if (strncmp(e->d_name, "uswap.", 6) || (pid = atoi(e->d_name + 6)) <= 0)
			continue;
		if (!kill(pid, 0) || errno != ESRCH)
			continue;
		snprintf(path, sizeof(path), "/dev/shm/%s", e->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0)
			continue;
		bool theirs = fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_uid != getuid() ||
			      (pread(fd, &l, sizeof(l), 0) == (ssize_t)sizeof(l) && l.magic == LIVE_MAGIC &&
			       l.run_pid > 0 && l.run_pid != (int)getpid() && !kill(l.run_pid, 0));
		close(fd);
		if (!theirs)
			unlink(path);
	}
	closedir(d);
}

/* Most swapping first. */
static int by_evictions(const void *a, const void *b)
{
	const struct live_stats *x = a, *y = b;
	uint64_t ex = x->mm.evicted_pages + x->mm.swapin_pages, ey = y->mm.evicted_pages + y->mm.swapin_pages;

	return (ex < ey) - (ex > ey);
}

#define SUMMARY_MAX_DESC 8

/*
 * The summary at exit: the program's own figures, and those of the processes it started (each
 * exec starts an instance of its own, with the same limit), the busiest first.
 */
static void summarize(int child, const char *stats, bool summary)
{
	struct live_stats *all = NULL, *main = NULL, *desc;
	size_t n = 0, nd = 0;

	live_collect((int)getpid(), &all, &n);
	for (size_t i = 0; i < n; i++)
		if (all[i].pid == child)
			main = &all[i];
	if (main && main != all) {
		struct live_stats t = *main;

		*main = all[0];
		all[0] = t;
		main = all;
	}
	desc = main ? all + 1 : all;
	nd = main ? n - 1 : n;
	if (nd > 1)
		qsort(desc, nd, sizeof(*desc), by_evictions);
	if (stats) {
		FILE *f = fopen(stats, "w");

		if (!f) {
			fprintf(stderr, "uswap: run: cannot write %s: %s\n", stats, strerror(errno));
		} else {
			if (main)
				live_print_json(f, main, desc, nd);
			else
				fprintf(f, "{\"pid\":%d,\"error\":\"no statistics were published\"}\n",
					child);
			fclose(f);
		}
	}
	if (summary && n) {
		size_t shown = 0;

		if (main) {
			fputs("uswap: ", stderr);
			live_print_text(stderr, main);
		}
		for (size_t i = 0; i < nd; i++) {
			if (desc[i].mm.evicted_pages + desc[i].mm.swapin_pages == 0)
				continue;
			if (!shown)
				fprintf(stderr, "uswap: programs it started that swapped (each with an "
						"instance and a "
						"limit of its own):\n");
			if (shown++ < SUMMARY_MAX_DESC) {
				fputs("uswap: ", stderr);
				live_print_text(stderr, &desc[i]);
			}
		}
		if (shown > SUMMARY_MAX_DESC)
			fprintf(stderr, "uswap: and %zu more that swapped\n", shown - SUMMARY_MAX_DESC);
	}
	/* Files of processes still running (a daemon the program left) stay for `uswap stat`. */
	for (size_t i = 0; i < n; i++) {
		char path[64];

		if (all[i].exited || (kill(all[i].pid, 0) && errno == ESRCH)) {
			snprintf(path, sizeof(path), LIVE_PATH_FMT, all[i].pid);
			unlink(path);
		}
	}
	free(all);
	sweep_stale_live_files();
}

static int run_and_wait(const char *prog, char *const argv[], const char *stats, bool summary)
{
	struct sigaction sa = {.sa_handler = forward}, ign = {.sa_handler = SIG_IGN}, old_int, old_quit;
	int st;
	char me[32];
	pid_t runner = getpid();
	sigset_t pass, old_mask;

	snprintf(me, sizeof(me), "%d", (int)runner);
	/* A signal to pass on that comes before we can forward it waits (blocked) instead of killing us alone. */
	sigemptyset(&pass);
	sigaddset(&pass, SIGTERM);
	sigaddset(&pass, SIGHUP);
	sigaddset(&pass, SIGUSR1);
	sigaddset(&pass, SIGUSR2);
	sigprocmask(SIG_BLOCK, &pass, &old_mask);
	sigaction(SIGINT, &ign, &old_int);
	sigaction(SIGQUIT, &ign, &old_quit);
	g_child = fork();
	if (g_child < 0) {
		fprintf(stderr, "uswap: run: fork: %s\n", strerror(errno));
		sigprocmask(SIG_SETMASK, &old_mask, NULL);
		return 1;
	}
	if (g_child == 0) {
		/*
		 * A runner killed by a signal it cannot pass on (SIGKILL) takes the program with it, as
		 * if the signal had reached the program: it never runs on with nobody to report for it.
		 */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != runner)
			_exit(128 + SIGKILL);
		setenv("USWAP_RUN", me, 1); /* our pid: the processes' statistics files wait for us */
		sigaction(SIGINT, &old_int, NULL);
		sigaction(SIGQUIT, &old_quit, NULL);
		sigprocmask(SIG_SETMASK, &old_mask, NULL);
		execv(prog, argv);
		fprintf(stderr, "uswap: run: cannot execute %s: %s\n", prog, strerror(errno));
		_exit(errno == ENOENT ? 127 : 126);
	}
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	sigaction(SIGUSR1, &sa, NULL);
	sigaction(SIGUSR2, &sa, NULL);
	sigprocmask(SIG_SETMASK, &old_mask, NULL);
	while (waitpid(g_child, &st, 0) < 0 && errno == EINTR)
		;
	summarize((int)g_child, stats, summary);
	if (WIFSIGNALED(st)) {
		int sig = WTERMSIG(st);
		struct rlimit no_core = {0, 0};

		/*
		 * Not a core of our own: the program's is the one wanted, and with the default pattern
		 * ("core" in the current directory) ours, written after it, replaced it. A shell then
		 * says "Aborted" where it said "Aborted (core dumped)": the kernel sets that bit of our
		 * wait status only for a core it wrote.
		 */
		prctl(PR_SET_DUMPABLE, 0);
		setrlimit(RLIMIT_CORE, &no_core);
		signal(sig, SIG_DFL);
		sigset_t set;
		sigemptyset(&set);
		sigaddset(&set, sig);
		sigprocmask(SIG_UNBLOCK, &set, NULL);
		raise(sig);
		return 128 + sig;
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

int cmd_run(int argc, char **argv)
{
	const char *limit = NULL, *tiers = NULL, *folio = NULL, *stats = NULL, *fork_child = NULL;
	bool summary = false;
	struct uswap_mm_options lo = {0};
	uint64_t folio_bytes = 0;
	char preload[PATH_MAX], prog[PATH_MAX], num[128];
	int i;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--")) {
			i++;
			break;
		}
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			fputs(run_usage, stdout);
			return 0;
		}
		if (a[0] != '-')
			break; /* PROGRAM without "--" */
		if (!strcmp(a, "--stats")) {
			summary = true;
			continue;
		}
		if (!v)
			return cli_usage_error("run: option %s needs a value\n%s", a, run_usage);
		if (!strcmp(a, "--limit"))
			limit = v;
		else if (!strcmp(a, "--tiers"))
			tiers = v;
		else if (!strcmp(a, "--folio"))
			folio = v;
		else if (!strcmp(a, "--stats-json"))
			stats = v;
		else if (!strcmp(a, "--fork-child"))
			fork_child = v;
		else
			return cli_usage_error("run: unknown option \"%s\"\n%s", a, run_usage);
		i++;
	}
	if (i >= argc)
		return cli_usage_error("run: no PROGRAM to run\n%s", run_usage);
	if (!limit)
		return cli_usage_error("run: --limit is required (e.g. --limit 512M or --limit 25%%)");
	if (uswap_parse_limit(limit, &lo))
		return cli_usage_error("run: --limit: %s", uswap_errmsg());
	if ((lo.limit_bytes && lo.limit_bytes < (4u << 20)) ||
	    (lo.auto_min_bytes && lo.auto_min_bytes < (4u << 20)))
		return cli_usage_error("run: --limit \"%s\": a limit of 4M or more", limit);
	if (folio && (uswap_parse_size(folio, 0, &folio_bytes) || folio_bytes < 4096 ||
		      folio_bytes > (2u << 20) || (folio_bytes & (folio_bytes - 1))))
		return cli_usage_error("run: --folio \"%s\" is not a power of two from 4K to 2M", folio);
	if (fork_child && strcmp(fork_child, "own") && strcmp(fork_child, "plain"))
		return cli_usage_error("run: --fork-child \"%s\" is neither own nor plain", fork_child);
	/* Checked by parsing alone: no swap file made, no server contacted before the program runs. */
	if (tiers && uswap_check_tiers(tiers)) {
		fprintf(stderr, "uswap: run: --tiers: %s\n", uswap_errmsg());
		return 2;
	}
	/* The library's own check: the system call, then /dev/userfaultfd, then the features. */
	if (uswap_mm_check()) {
		fprintf(stderr, "uswap: run: %s\n", uswap_errmsg());
		return 2;
	}
	if (find_preload(preload, sizeof(preload))) {
		fprintf(stderr,
			"uswap: run: libuswap-preload.so not found next to this program or in ../lib\n");
		return 2;
	}
	if (cli_find_program(argv[i], prog, sizeof(prog))) {
		fprintf(stderr, "uswap: run: %s: command not found\n", argv[i]);
		return 127;
	}
	const char *why = unservable(prog);
	if (why) {
		fprintf(stderr, "uswap: run: %s %s\n", prog, why);
		return 2;
	}

	snprintf(num, sizeof(num), "%s", limit);
	setenv("USWAP_LIMIT", num, 1);
	/* Without --tiers the preload asks the library for the default stack, the pool inside the limit. */
	if (tiers)
		setenv("USWAP_TIERS", tiers, 1);
	else
		unsetenv("USWAP_TIERS");
	unsetenv("USWAP_POOL_IN_LIMIT");
	if (folio)
		setenv("USWAP_FOLIO", folio, 1);
	if (fork_child)
		setenv("USWAP_FORK_CHILD", fork_child, 1);
	const char *old = getenv("LD_PRELOAD");
	if (old && *old) {
		size_t l = strlen(preload) + strlen(old) + 2;
		char *both = malloc(l);

		if (!both)
			return 1;
		snprintf(both, l, "%s:%s", preload, old);
		setenv("LD_PRELOAD", both, 1);
	} else {
		setenv("LD_PRELOAD", preload, 1);
	}
	return run_and_wait(prog, argv + i, stats, summary);
}
