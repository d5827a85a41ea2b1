/*
 * live.c - the summary of a run as one JSON object: what `uswap stat --json` prints, what
 * `uswap run --stats-json` writes, and what the preload library writes for USWAP_STATS_JSON.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "util/live.h"

/*
 * What /proc/@pid/stat says: *state (R, S, Z, ...) and *start_ns, when the process started in ns of
 * CLOCK_REALTIME (to a clock tick; 0 if unknown). Return: 0; -ENOENT no such process; -errno.
 */
static int proc_info(int pid, char *state, uint64_t *start_ns)
{
	unsigned long long ticks = 0, btime = 0;
	char path[64], buf[1024], *p;
	long hz = sysconf(_SC_CLK_TCK);
	FILE *f;
	size_t n;

	*start_ns = 0;
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	p = strrchr(buf, ')'); /* comm may hold spaces and parentheses */
	if (!p || p[1] != ' ')
		return -EIO;
	*state = p[2];
	/* ") S ...": state is field 3, starttime field 22 */
	for (int field = 2; p && field < 22; field++)
		p = strchr(p + 1, ' ');
	if (!p || sscanf(p + 1, "%llu", &ticks) != 1 || hz <= 0)
		return 0;
	f = fopen("/proc/stat", "re");
	if (!f)
		return 0;
	while (fgets(buf, sizeof(buf), f))
		if (sscanf(buf, "btime %llu", &btime) == 1)
			break;
	fclose(f);
	if (btime)
		*start_ns = btime * 1000000000ull + ticks * (1000000000ull / (unsigned long long)hz);
	return 0;
}

bool live_dead(const struct live_stats *l)
{
	uint64_t started;
	char state = '?';
	int ret;

	if (l->exited || l->pid <= 0)
		return false;
	if (kill(l->pid, 0) && errno == ESRCH)
		return true;
	ret = proc_info(l->pid, &state, &started);
	if (ret)
		return ret == -ENOENT;    /* gone between the two looks */
	if (state == 'Z' || state == 'X') /* killed, not yet reaped */
		return true;
	/* A process with this pid that started well after the statistics did is another process. */
	return started && l->started_ns && started > l->started_ns + 2000000000ull;
}

void live_print_str(FILE *f, const char *s, size_t max)
{
	fputc('"', f);
	for (size_t i = 0; i < max && s[i]; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

void live_hist_add(struct live_hist *h, uint64_t ms, uint64_t limit)
{
	if (!h->step_ms)
		h->step_ms = 1000;
	if (ms < (uint64_t)h->n * h->step_ms)
		return;
	if (h->n == LIVE_HIST) {
		for (uint32_t i = 0; i < LIVE_HIST / 2; i++)
			h->limit[i] = h->limit[2 * i];
		h->n = LIVE_HIST / 2;
		h->step_ms *= 2;
		if (ms < (uint64_t)h->n * h->step_ms)
			return;
	}
	h->limit[h->n++] = limit;
}

static void print_one(FILE *f, const struct live_stats *l)
{
	const struct uswap_mm_stats *m = &l->mm;
	const struct uswap_stats *s = &l->swap;

	fprintf(f, "{\"pid\":%d,\"comm\":", l->pid);
	live_print_str(f, l->comm, sizeof(l->comm));
	fprintf(f, ",\"exited\":%s,", l->exited ? "true" : "false");
	if (l->exited == LIVE_DEAD)
		fputs("\"dead\":true,", f);
	fputs("\"tiers\":", f);
	live_print_str(f, l->tiers, sizeof(l->tiers));
	fprintf(f, ",\"budget_bytes\":%llu,\"pool_share_bytes\":%llu", (unsigned long long)l->budget_bytes,
		(unsigned long long)m->pool_share_bytes);
	fprintf(f,
		",\"limit_auto\":%s,\"peak_resident_bytes\":%llu,\"stall_ms\":%llu,\"limit_history\":{\"step_"
		"ms\":%u,"
		"\"bytes\":[",
		m->limit_auto ? "true" : "false", (unsigned long long)m->peak_resident_bytes,
		(unsigned long long)(m->stall_ns / 1000000), l->hist.step_ms ? l->hist.step_ms : 1000);
	for (uint32_t i = 0; i < l->hist.n && i < LIVE_HIST; i++)
		fprintf(f, "%s%llu", i ? "," : "", (unsigned long long)l->hist.limit[i]);
	fprintf(f, "]}");
	fprintf(f,
		",\"limit_bytes\":%llu,\"resident_bytes\":%llu,"
		"\"swapped_bytes\":%llu,\"swapins\":%llu,\"swapin_us_p50\":%.1f,\"swapin_us_p99\":%.1f,"
		"\"evictions\":%llu,\"evicted_pages\":%llu,\"clean_evictions\":%llu,\"swapin_pages\":%llu,"
		"\"readahead_pages\":%llu,"
		"\"soft_faults\":%llu,\"store_failures\":%llu,\"load_failures\":%llu,\"mm_meta_bytes\":%llu,"
		"\"swap_meta_bytes\":%llu,\"tier\":[",
		(unsigned long long)m->limit_bytes, (unsigned long long)m->resident_bytes,
		(unsigned long long)m->swapped_bytes, (unsigned long long)m->swapins, m->swapin_ns_p50 / 1e3,
		m->swapin_ns_p99 / 1e3, (unsigned long long)m->evictions,
		(unsigned long long)m->evicted_pages, (unsigned long long)m->clean_evictions,
		(unsigned long long)m->swapin_pages, (unsigned long long)m->readahead_pages,
		(unsigned long long)m->soft_faults, (unsigned long long)m->store_failures,
		(unsigned long long)m->load_failures, (unsigned long long)m->meta_bytes,
		(unsigned long long)s->meta_bytes);
	for (unsigned t = 0; t < s->nr_tiers; t++) {
		const struct uswap_tier_stats *ts = &s->tier[t];

		fprintf(f, "%s{\"spec\":", t ? "," : "");
		live_print_str(f, ts->spec, sizeof(ts->spec));
		fprintf(f,
			",\"pages\":%llu,\"data_bytes\":%llu,\"used_bytes\":%llu,\"stores\":%llu,"
			"\"loads\":%llu,\"load_ms\":%llu,\"writeback_in\":%llu,\"writeback_out\":%llu,"
			"\"errors\":%llu}",
			(unsigned long long)ts->pages, (unsigned long long)ts->data_bytes,
			(unsigned long long)ts->used_bytes, (unsigned long long)ts->stores,
			(unsigned long long)ts->loads, (unsigned long long)(ts->load_ns / 1000000),
			(unsigned long long)ts->writeback_in, (unsigned long long)ts->writeback_out,
			(unsigned long long)ts->errors);
	}
	fprintf(f, "]");
}

void live_print_json(FILE *f, const struct live_stats *l, const struct live_stats *desc, size_t nr_desc)
{
	print_one(f, l);
	if (nr_desc) {
		fprintf(f, ",\"descendants\":[");
		for (size_t i = 0; i < nr_desc; i++) {
			fputs(i ? "," : "", f);
			print_one(f, &desc[i]);
			fputc('}', f);
		}
		fputc(']', f);
	}
	fputs("}\n", f);
}
