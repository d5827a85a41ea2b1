/*
 * cli.h - subcommands of the uswap command. Each returns the process exit status
 * (0 ok, 1 failure, 2 bad usage).
 */
#ifndef USWAP_CLI_H
#define USWAP_CLI_H

int cmd_bench(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_stat(int argc, char **argv);
struct live_stats;
#include <stdio.h>
void live_print_text(FILE *f, const struct live_stats *l);
int live_read(int pid, struct live_stats *out);
int bench_core(int argc, char **argv);
int bench_remote(int argc, char **argv);
int bench_file(int argc, char **argv);
int bench_mm(int argc, char **argv);

/* Shared by subcommands: print to stderr "uswap: ..." and return 2. */
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
double cli_now(void);

#endif
