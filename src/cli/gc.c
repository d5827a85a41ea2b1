/*
 * gc.c - `uswap gc TIER [--match PATTERN] [--dry-run]`: remove from a Redis server or cluster the keys
 * of uswap instances that are no longer alive (uswap_gc()), one line per instance found.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "uswap.h"

struct gc_tally {
	bool dry_run;
	unsigned dead;
};

static void gc_report(const struct uswap_gc_instance *in, void *arg)
{
	struct gc_tally *t = arg;

	t->dead += !in->alive;
	printf("%s  %" PRIu64 " keys  %s: %s\n", in->prefix, in->keys,
	       in->alive    ? "alive, left"
	       : t->dry_run ? "dead, would be removed"
			    : "dead, removed",
	       in->why);
}

int cmd_gc(int argc, char **argv)
{
	const char *tier = NULL, *match = NULL;
	struct gc_tally t = {false, 0};
	int64_t n;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--dry-run"))
			t.dry_run = true;
		else if (!strcmp(argv[i], "--match") && i + 1 < argc)
			match = argv[++i];
		else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			puts("usage: uswap gc redis://HOST:PORT[:OPTIONS] | "
			     "redis-cluster://HOST:PORT,...[:OPTIONS] "
			     "[--match PATTERN] [--dry-run]");
			return 0;
		} else if (!tier && argv[i][0] != '-')
			tier = argv[i];
		else
			return cli_usage_error(
				"gc: unexpected \"%s\" (usage: uswap gc TIER [--match PATTERN] [--dry-run])",
				argv[i]);
	}
	if (!tier)
		return cli_usage_error("gc: which server? (uswap gc redis://HOST:PORT)");
	n = uswap_gc(tier, match, t.dry_run, gc_report, &t);
	if (n < 0) {
		fprintf(stderr, "uswap: gc: %s\n", uswap_errmsg()[0] ? uswap_errmsg() : strerror((int)-n));
		return n == -EINVAL ? 2 : 1;
	}
	printf("%s %" PRId64 " keys of %u dead instance%s\n", t.dry_run ? "would remove" : "removed", n,
	       t.dead, t.dead == 1 ? "" : "s");
	return 0;
}
