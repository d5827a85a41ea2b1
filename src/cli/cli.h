/*
 * cli.h - subcommands of the uswap command. Each returns the process exit status
 * (0 ok, 1 failure, 2 bad usage).
 */
#ifndef USWAP_CLI_H
#define USWAP_CLI_H

int cmd_bench(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_stat(int argc, char **argv);
int cmd_gc(int argc, char **argv);
int cmd_profile(int argc, char **argv);
struct live_stats;
#include <stdio.h>
void live_print_text(FILE *f, const struct live_stats *l);
int live_read(int pid, struct live_stats *out);
/*
 * live_collect() - the statistics of every process run under the `uswap run` of pid @run_pid
 * (running or exited), sorted by pid, in *out (malloc'd, *nr of them). Return: 0; -ENOMEM.
 */
#include <stddef.h>
int live_collect(int run_pid, struct live_stats **out, size_t *nr);
int bench_core(int argc, char **argv);
int bench_remote(int argc, char **argv);
int bench_file(int argc, char **argv);
int bench_mm(int argc, char **argv);

/* Shared by subcommands: print to stderr "uswap: ..." and return 2. */
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
double cli_now(void);
/* cli_find_program() - PROGRAM as execvp() would find it, in @out. Return: 0; -1 not found. */
int cli_find_program(const char *prog, char *out, size_t len);

#endif
