/*
 * test_tree.c - facts about the source tree that keep its layers apart: the command (src/cli) reaches
 * the library through the public header only, and no file grows past one job's size unless its header
 * says why it is one job. Reads the tree this binary was built from (two directories above it).
 */
#include <dirent.h>
#include <limits.h>
#include <stdbool.h>
#include <unistd.h>

#include "check.h"

#define BIG_LINES 800

static char root[PATH_MAX];

static void find_root(void)
{
	ssize_t n = readlink("/proc/self/exe", root, sizeof(root) - 1);

	if (n <= 0)
		check_skip("cannot read /proc/self/exe");
	root[n] = 0;
	for (int up = 0; up < 3; up++) { /* ROOT/BUILD/tests/test_tree */
		char *slash = strrchr(root, '/');

		if (!slash)
			check_skip("no source tree above the binary");
		*slash = 0;
	}
	char probe[PATH_MAX + 32];

	snprintf(probe, sizeof(probe), "%s/include/uswap.h", root);
	if (access(probe, R_OK))
		check_skip("the source tree is not next to the binary");
}

/* Calls @fn for every regular file of ROOT/@dir whose name ends in .c or .h. */
static unsigned each_source(const char *dir, void (*fn)(const char *path, const char *name))
{
	char path[PATH_MAX * 2];
	struct dirent *e;
	unsigned n = 0;

	snprintf(path, sizeof(path), "%s/%s", root, dir);
	DIR *d = opendir(path);

	CHECK(d != NULL);
	while (d && (e = readdir(d))) {
		size_t l = strlen(e->d_name);

		if (l < 3 || e->d_name[0] == '.' ||
		    (strcmp(e->d_name + l - 2, ".c") && strcmp(e->d_name + l - 2, ".h")))
			continue;
		snprintf(path, sizeof(path), "%s/%s/%s", root, dir, e->d_name);
		fn(path, e->d_name);
		n++;
	}
	if (d)
		closedir(d);
	return n;
}

/*
 * What src/cli may include in quotes: the public header, its own headers, and two plain helpers of
 * util/ that see no state of the library (the page generator of the benches, and the format of the
 * live statistics file that the preload writes and `uswap stat` reads).
 */
static bool cli_may_include(const char *h)
{
	return !strcmp(h, "uswap.h") || !strncmp(h, "cli/", 4) || !strcmp(h, "util/pagegen.h") ||
	       !strcmp(h, "util/live.h");
}

static void check_cli_includes(const char *path, const char *name)
{
	char line[512], inc[256];
	FILE *f = fopen(path, "r");

	CHECK(f != NULL);
	while (f && fgets(line, sizeof(line), f)) {
		if (sscanf(line, " #include \"%255[^\"]\"", inc) == 1 && !cli_may_include(inc)) {
			fprintf(stderr, "src/cli/%s includes \"%s\": the command uses the public header\n",
				name, inc);
			CHECK(cli_may_include(inc));
		}
	}
	if (f)
		fclose(f);
}

static void cli_uses_public_header(void)
{
	CHECK(each_source("src/cli", check_cli_includes) > 0);
}

/* A file over BIG_LINES lines says in its first comment why it is one job ("One job: ..."). */
static void check_size(const char *path, const char *name)
{
	char line[512];
	unsigned lines = 0;
	bool says = false, in_head = true;
	FILE *f = fopen(path, "r");

	CHECK(f != NULL);
	while (f && fgets(line, sizeof(line), f)) {
		lines++;
		if (in_head && strstr(line, "One job:"))
			says = true;
		if (strstr(line, "*/"))
			in_head = false;
	}
	if (f)
		fclose(f);
	if (lines > BIG_LINES && !says) {
		fprintf(stderr, "%s: %u lines and no \"One job:\" in its header\n", name, lines);
		CHECK(lines <= BIG_LINES || says);
	}
}

static void files_are_one_job(void)
{
	static const char *dirs[] = {"src/core",    "src/backend", "src/mm",
				     "src/preload", "src/util",    "src/cli"};

	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++)
		CHECK(each_source(dirs[i], check_size) > 0);
}

/* The mm files keep to their size without exception: their one-way order is in docs/mm.md. */
static void check_mm_size(const char *path, const char *name)
{
	char line[512];
	unsigned lines = 0;
	FILE *f = fopen(path, "r");

	while (f && fgets(line, sizeof(line), f))
		lines++;
	if (f)
		fclose(f);
	if (lines > BIG_LINES)
		fprintf(stderr, "src/mm/%s: %u lines\n", name, lines);
	CHECK(lines <= BIG_LINES);
}

static void mm_files_are_small(void)
{
	CHECK(each_source("src/mm", check_mm_size) > 0);
}

int main(int argc, char **argv)
{
	static const struct test tests[] = {T(cli_uses_public_header), T(files_are_one_job),
					    T(mm_files_are_small)};

	find_root();
	return check_run(tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
