/*
 * stat.c - `uswap stat PID [--watch] [--json]`: the live statistics of a program under `uswap run`,
 * read from the shared file its preload library rewrites every LIVE_PERIOD_MS (util/live.h). The PID of a
 * `uswap run` shows every process it runs.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "util/live.h"

static int snapshot(const struct live_stats *shm, struct live_stats *out)
{
	for (int tries = 0; tries < 100; tries++) {
		uint64_t s1 = shm->seq;

		__sync_synchronize(); /* a full barrier: the writer is another process */
		memcpy(out, shm, sizeof(*out));
		__sync_synchronize(); /* a full barrier: the writer is another process */
		if (!(s1 & 1) && s1 == shm->seq)
			return 0;
		usleep(1000);
	}
	return -EAGAIN;
}

static double mib(uint64_t b)
{
	return (double)b / 1048576.0;
}

/* The limit's history as one line of marks, low to high (UTF-8 blocks where the locale takes them). */
static void print_hist(FILE *f, const struct live_hist *h)
{
	static const char *blocks[] = {"\u2581", "\u2582", "\u2583", "\u2584",
				       "\u2585", "\u2586", "\u2587", "\u2588"};
	static const char ascii[] = "_.-~=+*#";
	const char *lang = getenv("LC_ALL");
	uint64_t lo = UINT64_MAX, hi = 0;
	bool utf8;

	if (!lang || !*lang)
		lang = getenv("LC_CTYPE");
	if (!lang || !*lang)
		lang = getenv("LANG");
	utf8 = lang && (strstr(lang, "UTF-8") || strstr(lang, "utf8"));
	for (uint32_t i = 1; i < h->n && i < LIVE_HIST; i++) { /* sample 0: before the first look */
		lo = h->limit[i] < lo ? h->limit[i] : lo;
		hi = h->limit[i] > hi ? h->limit[i] : hi;
	}
	if (h->n < 2)
		return;
	fprintf(f, "  limit over the run (a mark every %.0f s, %.1f to %.1f MiB): ", h->step_ms / 1000.0,
		mib(lo), mib(hi));
	for (uint32_t i = 1; i < h->n && i < LIVE_HIST; i++) {
		unsigned k = hi > lo ? (unsigned)((h->limit[i] - lo) * 7 / (hi - lo)) : 3;

		if (utf8)
			fputs(blocks[k], f);
		else
			fputc(ascii[k], f);
	}
	fputc('\n', f);
}

void live_print_text(FILE *f, const struct live_stats *l)
{
	const struct uswap_mm_stats *m = &l->mm;
	const struct uswap_stats *s = &l->swap;

	fprintf(f, "pid %d (%.*s)%s  tiers %s\n", l->pid, (int)sizeof(l->comm), l->comm,
		l->exited == LIVE_DEAD ? " (dead: killed or crashed; its last figures)"
		: l->exited            ? " (exited)"
				       : "",
		l->tiers);
	fprintf(f, "  resident %.1f MiB of %.1f MiB limit (", mib(m->resident_bytes), mib(m->limit_bytes));
	if (l->budget_bytes && m->limit_bytes)
		fprintf(f, "%.1f MiB less the pool's %.1f; ", mib(l->budget_bytes),
			mib(l->budget_bytes - m->limit_bytes));
	fprintf(f, "inactive %.1f), swapped %.1f MiB, regions %llu (%.1f MiB)\n", mib(m->inactive_bytes),
		mib(m->swapped_bytes), (unsigned long long)m->regions, mib(m->region_bytes));
	fprintf(f,
		"  swap-ins %llu (%llu pages, %llu read ahead), p50 %.1f us, p99 %.1f us; soft faults %llu; "
		"evictions %llu (%llu pages, %llu clean); store failures %llu, load failures %llu\n",
		(unsigned long long)m->swapins, (unsigned long long)m->swapin_pages,
		(unsigned long long)m->readahead_pages, m->swapin_ns_p50 / 1e3, m->swapin_ns_p99 / 1e3,
		(unsigned long long)m->soft_faults, (unsigned long long)m->evictions,
		(unsigned long long)m->evicted_pages, (unsigned long long)m->clean_evictions,
		(unsigned long long)m->store_failures, (unsigned long long)m->load_failures);
	fprintf(f, "  %-28s %10s %10s %10s %6s %10s %10s %9s %9s %7s\n", "tier", "pages", "data MiB",
		"used MiB", "ratio", "stores", "loads", "wb in", "wb out", "errors");
	for (unsigned t = 0; t < s->nr_tiers; t++) {
		const struct uswap_tier_stats *ts = &s->tier[t];
		double ratio = ts->data_bytes ? (double)ts->pages * 4096.0 / (double)ts->data_bytes : 0;

		fprintf(f, "  %-28.28s %10llu %10.1f %10.1f %6.2f %10llu %10llu %9llu %9llu %7llu\n",
			ts->spec, (unsigned long long)ts->pages, mib(ts->data_bytes), mib(ts->used_bytes),
			ratio, (unsigned long long)ts->stores, (unsigned long long)ts->loads,
			(unsigned long long)ts->writeback_in, (unsigned long long)ts->writeback_out,
			(unsigned long long)ts->errors);
	}
	fprintf(f, "  metadata: swap layer %.2f MiB, mm %.2f MiB\n", mib(s->meta_bytes), mib(m->meta_bytes));
	if (m->limit_auto) {
		double run_s =
			l->updated_ns > l->started_ns ? (double)(l->updated_ns - l->started_ns) / 1e9 : 0;

		fprintf(f,
			"  limit auto: %.1f MiB now, peak resident %.1f MiB, waited %.2f s on swap-ins "
			"(%.2f%% of %.0f s)\n",
			mib(l->budget_bytes ? l->budget_bytes : m->limit_bytes), mib(m->peak_resident_bytes),
			(double)m->stall_ns / 1e9, run_s > 0 ? (double)m->stall_ns / 1e9 / run_s * 100 : 0,
			run_s);
		print_hist(f, &l->hist);
	}
}

/* live_read() - a consistent copy of the statistics of @pid. Return: 0; -ENOENT none; -EAGAIN busy. */
int live_read(int pid, struct live_stats *out)
{
	char path[64];
	int fd, ret;

	snprintf(path, sizeof(path), LIVE_PATH_FMT, pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -ENOENT;
	const struct live_stats *shm = mmap(NULL, sizeof(*shm), PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (shm == MAP_FAILED)
		return -ENOENT;
	ret = shm->magic == LIVE_MAGIC ? snapshot(shm, out) : -ENOENT;
	munmap((void *)shm, sizeof(*shm));
	return ret;
}

static int by_pid(const void *a, const void *b)
{
	const struct live_stats *x = a, *y = b;

	return (x->pid > y->pid) - (x->pid < y->pid);
}

int live_collect(int run_pid, struct live_stats **out, size_t *nr)
{
	DIR *d = opendir("/dev/shm");
	struct live_stats *all = NULL;
	size_t n = 0, cap = 0;
	struct dirent *e;

	*out = NULL;
	*nr = 0;
	if (!d)
		return 0;
	while ((e = readdir(d))) {
		struct stat st;
		char path[300];
		int fd;

		if (strncmp(e->d_name, "uswap.", 6) || atoi(e->d_name + 6) <= 0)
			continue;
		snprintf(path, sizeof(path), "/dev/shm/%s", e->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0)
			continue;
		if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_uid != getuid() ||
		    st.st_size < (off_t)sizeof(struct live_stats)) {
			close(fd);
			continue;
		}
		const struct live_stats *shm = mmap(NULL, sizeof(*shm), PROT_READ, MAP_SHARED, fd, 0);
		close(fd);
		if (shm == MAP_FAILED)
			continue;
		if (shm->magic == LIVE_MAGIC && shm->run_pid == run_pid) {
			if (n == cap) {
				struct live_stats *bigger =
					realloc(all, (cap = cap ? 2 * cap : 8) * sizeof(*all));

				if (!bigger) {
					munmap((void *)shm, sizeof(*shm));
					free(all);
					closedir(d);
					return -ENOMEM;
				}
				all = bigger;
			}
			if (!snapshot(shm, &all[n]))
				n++;
		}
		munmap((void *)shm, sizeof(*shm));
	}
	closedir(d);
	if (n)
		qsort(all, n, sizeof(*all), by_pid);
	*out = all;
	*nr = n;
	return 0;
}

/*
 * A process that died without exiting (SIGKILL, a crash) left its file: it is marked dead in @l,
 * the file removed (nobody else will), and stderr told. Return: whether it was dead.
 */
static bool forget_if_dead(struct live_stats *l)
{
	char path[64];

	if (!live_dead(l))
		return false;
	l->exited = LIVE_DEAD;
	snprintf(path, sizeof(path), LIVE_PATH_FMT, l->pid);
	if (!unlink(path))
		fprintf(stderr, "uswap: stat: pid %d died without exiting (killed or crashed): removed %s\n",
			l->pid, path);
	return true;
}

/* `uswap stat PID` of a `uswap run`: every process it runs (a program may start others). */
static int stat_run(int pid, bool watch, bool json)
{
	for (;;) {
		struct live_stats *all;
		size_t n;

		if (live_collect(pid, &all, &n) || !n) {
			free(all);
			fprintf(stderr,
				"uswap: stat: no statistics for pid %d: is it running under `uswap run`?\n",
				pid);
			return 1;
		}
		if (watch && !json)
			fputs("\033[H\033[2J", stdout);
		for (size_t i = 0; i < n; i++)
			forget_if_dead(&all[i]);
		for (size_t i = 0; i < n; i++) {
			if (json)
				live_print_json(stdout, &all[i], NULL, 0);
			else
				live_print_text(stdout, &all[i]);
		}
		fflush(stdout);
		free(all);
		if (!watch || kill(pid, 0))
			return 0;
		sleep(1);
	}
}

int cmd_stat(int argc, char **argv)
{
	bool watch = false, json = false;
	int pid = 0;
	char path[64];

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--watch"))
			watch = true;
		else if (!strcmp(argv[i], "--json"))
			json = true;
		else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			puts("usage: uswap stat PID [--watch] [--json]");
			return 0;
		} else if (!pid && atoi(argv[i]) > 0)
			pid = atoi(argv[i]);
		else
			return cli_usage_error(
				"stat: unexpected \"%s\" (usage: uswap stat PID [--watch] [--json])",
				argv[i]);
	}
	if (!pid)
		return cli_usage_error("stat: which PID?");
	snprintf(path, sizeof(path), LIVE_PATH_FMT, pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT)
		return stat_run(pid, watch, json);
	if (fd < 0) {
		fprintf(stderr,
			"uswap: stat: no statistics for pid %d (%s): is it running under `uswap run`?\n", pid,
			strerror(errno));
		return 1;
	}
	const struct live_stats *shm = mmap(NULL, sizeof(*shm), PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (shm == MAP_FAILED || shm->magic != LIVE_MAGIC) {
		fprintf(stderr, "uswap: stat: %s is not a uswap statistics file\n", path);
		return 1;
	}
	for (;;) {
		struct live_stats l;

		if (snapshot(shm, &l)) {
			fprintf(stderr, "uswap: stat: the statistics kept changing; try again\n");
			return 1;
		}
		if (watch && !json)
			fputs("\033[H\033[2J", stdout);
		bool dead = forget_if_dead(&l);

		if (json)
			live_print_json(stdout, &l, NULL, 0);
		else
			live_print_text(stdout, &l);
		fflush(stdout);
		if (dead)
			return 1;
		if (!watch || l.exited || kill(pid, 0))
			break;
		sleep(1);
	}
	return 0;
}
