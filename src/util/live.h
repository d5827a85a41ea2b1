/*
 * live.h - the live statistics a program under `uswap run` publishes and `uswap stat PID` reads: one
 * shared file /dev/shm/uswap.PID (mode 0600), rewritten in place by the preload library every
 * LIVE_PERIOD_MS. A reader copies it and retries while @seq is odd or changed (a seqlock).
 */
#ifndef USWAP_UTIL_LIVE_H
#define USWAP_UTIL_LIVE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "uswap.h"

#define LIVE_MAGIC     0x7573776170737434ull /* "uswapst4" */
#define LIVE_PERIOD_MS 500
#define LIVE_PATH_FMT  "/dev/shm/uswap.%d"
#define LIVE_HIST      120 /* samples of the limit's history */

/*
 * The limit over the run (it moves under --limit auto): sample i was taken i * step_ms after the
 * start. When the samples fill up, every other one goes and the step doubles, so the history always
 * spans the whole run.
 */
struct live_hist {
	uint32_t n, step_ms;
	uint64_t limit[LIVE_HIST]; /* budget_bytes, or limit_bytes without a budget */
};

/* live_hist_add() - record @limit at @ms after the start (ignored until the next sample is due). */
void live_hist_add(struct live_hist *h, uint64_t ms, uint64_t limit);

struct live_stats {
	uint64_t magic;
	volatile uint64_t seq; /* odd while being written */
	int32_t pid;
	uint32_t exited;     /* 1: it exited; a reader sets LIVE_DEAD in its copy (see live_dead()) */
	int32_t run_pid;     /* the `uswap run` this process runs under (0: none) */
	char comm[16];       /* the program's name, as in /proc/PID/comm */
	uint64_t updated_ns; /* CLOCK_REALTIME */
	uint64_t started_ns;
	char tiers[256];
	uint64_t budget_bytes; /* resident pages and pool within it (mm.limit_bytes: their share); 0: none */
	struct uswap_mm_stats mm;
	struct uswap_stats swap;
	struct live_hist hist;
};

#define LIVE_DEAD 2 /* exited as a reader marks it: the process died without exiting (SIGKILL, a crash) */

/*
 * live_dead() - whether the process of @l is gone without having exited: its pid is free, or names a
 * process started after @l's statistics began (the pid was reused). A file for which this holds will
 * never be updated or removed by its writer.
 */
bool live_dead(const struct live_stats *l);

/* live_print_str() - at most @max bytes of @s as a JSON string (quotes, backslashes, control bytes escaped). */
void live_print_str(FILE *f, const char *s, size_t max);

/*
 * live_print_json() - @l as one line of JSON on @f, with @nr_desc more processes of the same
 * `uswap run` (@desc) as its "descendants" array when @nr_desc > 0.
 */
void live_print_json(FILE *f, const struct live_stats *l, const struct live_stats *desc, size_t nr_desc);

#endif
