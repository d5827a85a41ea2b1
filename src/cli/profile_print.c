/*
 * profile_print.c - what `uswap profile` prints of its runs: the table, or one JSON object (--json).
 */
#include <stdint.h>
#include <stdio.h>
#include <sys/wait.h>

#include "cli/profile.h"
#include "util/live.h"

double profile_mib(uint64_t b)
{
	return (double)b / 1048576.0;
}

void profile_hex(char out[65], const unsigned char h[32])
{
	for (int i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", h[i]);
}

const char *profile_outcome(const struct prun *r)
{
	if (r->kind == PRUN_PLAIN)
		return r->output_ok ? "reference" : "VARIES";
	if (r->timed_out)
		return "TIMEOUT";
	return r->output_ok ? "ok" : "WRONG";
}

void profile_print_table(FILE *f, const struct prun *runs, size_t n)
{
	const struct prun *pl = &runs[0];

	fprintf(f, "%-16s %10s %9s %9s %10s %9s %9s %9s  %s\n", "run", "limit MiB", "time s", "slowdown",
		"swap-ins", "pool MiB", "file MiB", "peak MiB", "output");
	for (size_t i = 0; i < n; i++) {
		const struct prun *r = &runs[i];
		char lim[32] = "-", sw[24] = "-", pool[24] = "-", file[24] = "-";

		if (r->kind == PRUN_LIMIT)
			snprintf(lim, sizeof(lim), "%.1f", profile_mib(r->limit_bytes));
		else if (r->kind == PRUN_AUTO && r->hist_n)
			snprintf(lim, sizeof(lim), "~%.1f", profile_mib(r->hist_mean));
		if (r->have_stats) {
			snprintf(sw, sizeof(sw), "%llu", (unsigned long long)r->swapins);
			snprintf(pool, sizeof(pool), "%.1f", profile_mib(r->pool_bytes));
			snprintf(file, sizeof(file), "%.1f", profile_mib(r->file_bytes));
		}
		fprintf(f, "%-16.16s %10s %9.2f %8.2fx %10s %9s %9s %9.1f  %s\n", r->label, lim, r->secs,
			pl->secs > 0 ? r->secs / pl->secs : 0.0, sw, pool, file, profile_mib(r->maxrss_bytes),
			profile_outcome(r));
	}
	for (size_t i = 1; i < n; i++) {
		const struct prun *r = &runs[i];

		if (r->kind != PRUN_AUTO)
			continue;
		if (!r->hist_n) {
			fprintf(f,
				"%s: no limit history (the limit moves once a second; the run was shorter)\n",
				r->label);
			continue;
		}
		fprintf(f,
			"%s: limit lowest %.1f MiB, final %.1f MiB, mean %.1f MiB (%u samples, %.0f s "
			"apart); "
			"stalled %llu ms; peak resident %.1f MiB (plainly %.1f)\n",
			r->label, profile_mib(r->hist_lowest), profile_mib(r->hist_final),
			profile_mib(r->hist_mean), r->hist_n - 1, r->hist_step_ms / 1000.0,
			(unsigned long long)r->stall_ms, profile_mib(r->maxrss_bytes),
			profile_mib(pl->maxrss_bytes));
	}
	if (pl->nr_rounds > 1)
		fprintf(f,
			"times: the median of %u rounds, run alternately (the other figures: of that run); "
			"output: of every round\n",
			pl->nr_rounds);
}

void profile_print_json(FILE *f, char *const cmd[], const struct prun *runs, size_t n, uint64_t ref_peak,
			bool all_ok)
{
	static const char *kinds[] = {"plain", "limit", "auto"};
	const struct prun *pl = &runs[0];

	fprintf(f, "{\"command\":[");
	for (size_t i = 0; cmd[i]; i++) {
		fputs(i ? "," : "", f);
		live_print_str(f, cmd[i], SIZE_MAX);
	}
	fprintf(f,
		"],\"rounds\":%u,\"plain_seconds\":%.3f,\"plain_peak_bytes\":%llu,\"all_ok\":%s,\"runs\":[",
		pl->nr_rounds, pl->secs, (unsigned long long)ref_peak, all_ok ? "true" : "false");
	for (size_t i = 0; i < n; i++) {
		const struct prun *r = &runs[i];
		char h[65];

		profile_hex(h, r->sha256);
		fprintf(f, "%s{\"label\":", i ? "," : "");
		live_print_str(f, r->label, SIZE_MAX);
		fprintf(f, ",\"kind\":\"%s\",\"limit\":", kinds[r->kind]);
		live_print_str(f, r->limit_arg, SIZE_MAX);
		fprintf(f,
			",\"limit_bytes\":%llu,\"seconds\":%.3f,\"slowdown\":%.3f,\"exit_status\":%d,"
			"\"signal\":%d,"
			"\"timed_out\":%s,\"stdout_bytes\":%llu,\"stdout_sha256\":\"%s\",\"output_ok\":%s,"
			"\"peak_rss_bytes\":%llu",
			(unsigned long long)r->limit_bytes, r->secs, pl->secs > 0 ? r->secs / pl->secs : 0.0,
			WIFEXITED(r->status) ? WEXITSTATUS(r->status) : -1,
			WIFSIGNALED(r->status) ? WTERMSIG(r->status) : 0, r->timed_out ? "true" : "false",
			(unsigned long long)r->stdout_bytes, h, r->output_ok ? "true" : "false",
			(unsigned long long)r->maxrss_bytes);
		if (r->have_stats)
			fprintf(f,
				",\"swapins\":%llu,\"evicted_pages\":%llu,\"pool_bytes\":%llu,\"file_bytes\":"
				"%llu,"
				"\"stall_ms\":%llu,\"peak_resident_bytes\":%llu",
				(unsigned long long)r->swapins, (unsigned long long)r->evicted_pages,
				(unsigned long long)r->pool_bytes, (unsigned long long)r->file_bytes,
				(unsigned long long)r->stall_ms, (unsigned long long)r->managed_peak_bytes);
		if (r->kind == PRUN_AUTO && r->hist_n) {
			fprintf(f,
				",\"limit_lowest_bytes\":%llu,\"limit_final_bytes\":%llu,\"limit_mean_"
				"bytes\":%llu,"
				"\"limit_history\":{\"step_ms\":%u,\"bytes\":[",
				(unsigned long long)r->hist_lowest, (unsigned long long)r->hist_final,
				(unsigned long long)r->hist_mean, r->hist_step_ms);
			for (uint32_t j = 0; j < r->hist_n; j++)
				fprintf(f, "%s%llu", j ? "," : "", (unsigned long long)r->hist[j]);
			fprintf(f, "]}");
		}
		if (r->nr_rounds > 1) {
			fprintf(f, ",\"seconds_rounds\":[");
			for (unsigned j = 0; j < r->nr_rounds; j++)
				fprintf(f, "%s%.3f", j ? "," : "", r->round_secs[j]);
			fputc(']', f);
		}
		fputc('}', f);
	}
	fprintf(f, "]}\n");
}
