/*
 * test_soak.c - the soak (tests/soak.c) in short: 5 seconds with faults injected at every tier, and
 * 3 seconds with none (then not one call may fail). Each passes when the soak exits 0 and its last
 * line says no mismatch and no hang. `make soak` runs it long.
 */
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

/* Run the soak next to this binary with @args; its last line into @last. Return: its exit status. */
static int run_soak(const char *args, char *last, size_t len)
{
	char self[4096], cmd[8192], line[1024];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	FILE *f;
	int st;

	if (n <= 0)
		return -1;
	self[n] = '\0';
	*strrchr(self, '/') = '\0';
	snprintf(cmd, sizeof(cmd), "%s/soak %s 2>&1", self, args);
	f = popen(cmd, "r");
	if (!f)
		return -1;
	last[0] = '\0';
	while (fgets(line, sizeof(line), f)) {
		fputs(line, stderr);
		snprintf(last, len, "%s", line);
	}
	st = pclose(f);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void check_summary(const char *last)
{
	CHECK(!strncmp(last, "soak: seconds ", 14));
	CHECK(strstr(last, " mismatches 0 hangs 0") != NULL);
}

static void test_soak_faults(void)
{
	char last[1024];

	CHECK_EQ(run_soak("--seconds 5 --layer-threads 2 --mm-threads 2 --watchdog 60", last, sizeof(last)),
		 0);
	check_summary(last);
	CHECK(strstr(last, "injected eio=0 ") == NULL); /* faults were injected */
}

static void test_soak_no_faults(void)
{
	char last[1024];

	CHECK_EQ(
		run_soak(
			"--seconds 3 --layer-threads 2 --mm-threads 2 --watchdog 60 --faults none --no-redis",
			last, sizeof(last)),
		0);
	check_summary(last);
}

CHECK_MAIN(T(test_soak_faults), T(test_soak_no_faults))
