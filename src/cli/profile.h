/*
 * profile.h - what `uswap profile` (profile.c, the runs), its table and JSON (profile_print.c) and its
 * plot (profile_svg.c) share: one run of the program and the figures measured of it.
 */
#ifndef USWAP_CLI_PROFILE_H
#define USWAP_CLI_PROFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum prun_kind { PRUN_PLAIN, PRUN_LIMIT, PRUN_AUTO };

#define MAX_ROUNDS 15

struct prun {
	enum prun_kind kind;
	char label[48];       /* "plain", "50% 256.0M", "64M", "auto" */
	char limit_arg[64];   /* what `uswap run --limit` gets ("" for the plain run) */
	uint64_t limit_bytes; /* PRUN_LIMIT: the limit */

	/* measured from outside */
	double secs;           /* wall time from fork to the runner's exit */
	int status;            /* wait status */
	bool timed_out;        /* stopped at --timeout */
	uint64_t maxrss_bytes; /* wait4's ru_maxrss: the largest process of the run (VmHWM) */
	uint64_t stdout_bytes;
	unsigned char sha256[32]; /* of stdout */
	bool output_ok;           /* same exit status and stdout as the plain run */
	unsigned nr_rounds;       /* --rounds: secs is the median of round_secs */
	double round_secs[MAX_ROUNDS];

	/* from the run's --stats-json, summed over the program and the programs it started */
	bool have_stats;
	uint64_t swapins, evicted_pages, pool_bytes, file_bytes, stall_ms;
	uint64_t managed_peak_bytes; /* peak_resident_bytes of the process that held the most */
	/* that process's limit history: hist[0] is the start, before any look at the stall; hist_n is 0
	 * when there is no sample after it. lowest, final and mean are of the samples after it. */
	uint32_t hist_step_ms, hist_n;
	uint64_t *hist;
	uint64_t hist_lowest, hist_final, hist_mean;
};

double profile_mib(uint64_t bytes);
/* profile_hex() - @h as 64 hex digits and a NUL in @out. */
void profile_hex(char out[65], const unsigned char h[32]);
/* profile_outcome() - the table's output column: reference, VARIES, ok, WRONG, TIMEOUT. */
const char *profile_outcome(const struct prun *r);
/* profile_print_table() - @n runs, the plain run first, as a table on @f. */
void profile_print_table(FILE *f, const struct prun *runs, size_t n);
/*
 * profile_print_json() - the same as one JSON object: @cmd, @ref_peak (the first plain run's peak, of
 * which the N% limits were taken), @all_ok and the runs.
 */
void profile_print_json(FILE *f, char *const cmd[], const struct prun *runs, size_t n, uint64_t ref_peak,
			bool all_ok);
/*
 * profile_svg() - the runs as a plot on @f: time against memory (the limit; the plain run's peak; the
 * auto run's mean limit), one circle per run (class "run plain", "run limit" or "run auto", its
 * figures in its <title>), axes with ticks. @title is printed as text (escaped).
 */
void profile_svg(FILE *f, const struct prun *runs, size_t n, const char *title);

#endif
