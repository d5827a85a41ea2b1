/*
 * main.c - the uswap command: dispatch to subcommands.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "uswap.h"

static const char usage[] =
	"usage: uswap COMMAND [ARGS]\n"
	"  run --limit SIZE|auto [--tiers SPEC] [--folio SIZE] [--stats-json FILE] -- PROGRAM [ARGS...]\n"
	"                        run PROGRAM with its anonymous memory under the limit\n"
	"  profile [--limits 100%,75%,50%,25%,10%] [--rounds N] [--json] [--svg FILE] -- PROGRAM [ARGS...]\n"
	"                        PROGRAM plainly, at each limit and under --limit auto: time,\n"
	"                        swap-ins, peak resident size, same output\n"
	"  stat PID [--watch] [--json]\n"
	"                        live statistics of a program under uswap run\n"
	"  gc redis://HOST:PORT[:OPTIONS] [--match PATTERN] [--dry-run]\n"
	"                        remove the remote pages of uswap instances that are no longer alive\n"
	"  bench core [--json] [--size SIZE] [--tiers SPEC] [--folio PAGES]\n"
	"                        store/load throughput of the swap layer against raw lz4\n"
	"  bench remote [--json] [--server HOST:PORT [--tls-server HOST:PORT --cacert FILE]] [--no-tls]\n"
	"                        the remote tier against a plain hiredis GET\n"
	"  bench file [--json] [--size SIZE]\n"
	"                        the swap-file tier against plain io_uring reads of the same file\n"
	"  bench mm [--json] [--size SIZE] [--limit SIZE] [--touches N] [--tiers SPEC]\n"
	"           [--fault-mode handler|sigbus]\n"
	"                        memory under a resident limit against plain memory and an exact LRU\n"
	"  help                  this text\n";

int cli_usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("uswap: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return 2;
}

double cli_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int cli_find_program(const char *prog, char *out, size_t len)
{
	if (strchr(prog, '/')) {
		snprintf(out, len, "%s", prog);
		return access(out, X_OK);
	}
	const char *path = getenv("PATH");
	if (!path)
		path = "/usr/local/bin:/usr/bin:/bin";
	while (*path) {
		const char *end = strchr(path, ':');
		size_t dl = end ? (size_t)(end - path) : strlen(path);

		snprintf(out, len, "%.*s/%s", (int)dl, dl ? path : ".", prog);
		if (!access(out, X_OK))
			return 0;
		path += dl + (end ? 1 : 0);
	}
	return -1;
}

static const struct {
	const char *name;
	int (*fn)(int argc, char **argv);
} benches[] = {
	{"core", bench_core},
	{"remote", bench_remote},
	{"file", bench_file},
	{"mm", bench_mm},
};

int cmd_bench(int argc, char **argv)
{
	if (argc < 2)
		return cli_usage_error("bench: which one? (core)");
	for (size_t i = 0; i < sizeof(benches) / sizeof(benches[0]); i++)
		if (!strcmp(argv[1], benches[i].name))
			return benches[i].fn(argc - 1, argv + 1);
	return cli_usage_error("bench: unknown benchmark \"%s\"", argv[1]);
}

int main(int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		fputs(usage, argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (!strcmp(argv[1], "bench"))
		return cmd_bench(argc - 1, argv + 1);
	if (!strcmp(argv[1], "run"))
		return cmd_run(argc - 1, argv + 1);
	if (!strcmp(argv[1], "profile"))
		return cmd_profile(argc - 1, argv + 1);
	if (!strcmp(argv[1], "stat"))
		return cmd_stat(argc - 1, argv + 1);
	if (!strcmp(argv[1], "gc"))
		return cmd_gc(argc - 1, argv + 1);
	cli_usage_error("unknown command \"%s\"", argv[1]);
	fputs(usage, stderr);
	return 2;
}
