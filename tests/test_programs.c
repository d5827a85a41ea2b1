/*
 * test_programs.c - real programs under `uswap run --limit` at a quarter or less of the memory they
 * use, each checking its own data: stress-ng's vm stressor (every method, --verify), zstd -T2
 * compressing 256 MiB and decompressing it (the bytes must come back, the compressed file must be a
 * plain run's), and redis-server loaded by redis-benchmark and with known values, every one read back.
 * Each run's summary (--stats-json) must show pages evicted and swapped in again, no load failed, so
 * no test passes without swapping. A program that is not installed skips its test ("skip NAME: WHY";
 * scripts/deps.sh installs them all).
 */
#include <errno.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "rserver.h"
#include "util/pagegen.h"
#include "uswap.h"

static char uswap_bin[512], tmpdir[256];

/* Whether @path is installed; if not, the running test skips, naming the Debian package. */
static bool have(const char *path, const char *package)
{
	char why[300];

	if (!access(path, X_OK))
		return true;
	snprintf(why, sizeof(why), "%s not installed (package %s; scripts/deps.sh installs it)", path,
		 package);
	check_skip_test(why);
	return false;
}

/*
 * `uswap run --limit @limit --stats-json @stats -- @cmd...` with stdout to @out and stderr to @err.
 * Return: its wait status (the program's, passed on).
 */
static int run_under(const char *limit, const char *stats, char *const cmd[], const char *out,
		     const char *err)
{
	char *argv[40] = {uswap_bin, "run", "--limit", (char *)limit, "--stats-json", (char *)stats, "--"};
	int n = 7;

	for (int i = 0; cmd[i] && n < 39; i++)
		argv[n++] = cmd[i];
	argv[n] = NULL;
	unlink(stats);
	return check_cmd(argv, out, err);
}

/*
 * The summary at @stats, over the program and every descendant with an instance: more than
 * @min_evicted pages went out, some came back in (swap-ins), and no load failed.
 */
static void check_swapped(const char *stats, long long min_evicted)
{
	size_t len;
	char *js = check_slurp(stats, &len);
	long long evicted = check_json_sum(js, "evicted_pages"), swapins = check_json_sum(js, "swapins");

	if (evicted <= min_evicted || swapins <= 0)
		fprintf(stderr,
			"[%s] not swapped as it must be (evicted %lld pages, want > %lld; %lld swap-ins): "
			"%s\n",
			check_test, evicted, min_evicted, swapins, js ? js : "(no summary)");
	CHECK(evicted > min_evicted);
	CHECK(swapins > 0);
	CHECK_EQ(check_json_sum(js, "load_failures"), 0);
	printf("  (%s: %lld pages evicted, %lld swap-ins)\n", check_test, evicted, swapins);
	free(js);
}

static void path_in(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/%s", tmpdir, name);
}

/* ---- stress-ng --vm --verify ---- */

/*
 * Two vm workers of 128 MiB each (stress-ng divides --vm-bytes among them; ~130 MiB anonymous each
 * plainly), every method in turn with --verify, for 25 s under a limit of a quarter of that, which
 * each forked worker gets for an instance of its own. stress-ng reports a pattern read back wrong as
 * "fail:" and exits non-zero ("unsuccessful run").
 */
#define STRESS_LIMIT "32M"

/*
 * A line of stress-ng's that reports trouble: "fail" or "error" anywhere (its fail: and error: levels,
 * "detected N bit errors", "stressor failed"), but for the "failed: 0" tally newer versions print.
 */
static bool stress_line_bad(const char *line)
{
	const char *tally = strstr(line, "failed: 0");

	if (tally && !strcmp(tally, "failed: 0\n") && !strcasestr(line, "error") &&
	    strcasestr(line, "fail") == tally)
		return false;
	return strcasestr(line, "fail") || strcasestr(line, "error");
}

static void stress_ng_vm(void)
{
	char out[300], err[300], stats[300], line[512];
	char *cmd[] = {"/usr/bin/stress-ng", "--vm",        "2",        "--vm-bytes", "256M",
		       "--vm-method",        "all",         "--verify", "--timeout",  "25s",
		       "--metrics-brief",    "--temp-path", tmpdir,     NULL};
	unsigned long long bogo_ops = 0;
	bool completed = false;

	if (!have(cmd[0], "stress-ng"))
		return;
	path_in(out, sizeof(out), "stress.out");
	path_in(err, sizeof(err), "stress.err");
	path_in(stats, sizeof(stats), "stress.json");
	int st = run_under(STRESS_LIMIT, stats, cmd, out, err);

	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	const char *files[] = {out, err};
	for (int f = 0; f < 2; f++) {
		FILE *in = fopen(files[f], "r");

		CHECK(in != NULL);
		while (in && fgets(line, sizeof(line), in)) {
			char *m = strstr(line, "] vm ");

			if (stress_line_bad(line)) {
				fprintf(stderr, "[%s] stress-ng: %s", check_test, line);
				CHECK(!stress_line_bad(line));
			}
			completed |=
				strstr(line, "successful run completed") && !strstr(line, "unsuccessful");
			if (m && strstr(line, "metrc:"))
				bogo_ops = strtoull(m + 5, NULL, 10);
		}
		if (in)
			fclose(in);
	}
	if (!completed || !bogo_ops)
		fprintf(stderr,
			"[%s] stress-ng: want \"successful run completed\" and a metrics line with vm bogo "
			"ops\n",
			check_test);
	CHECK(completed);
	CHECK(bogo_ops > 0);
	/* more pages went out than both buffers hold */
	check_swapped(stats, 2 * (128 << 20) / 4096);
}

/* ---- zstd -T2: compress and decompress under the limit ---- */

#define ZSTD_LIMIT     "64M"
#define ZSTD_DATA_MIB  256
#define ZSTD_MIN_RSS_K (3 * 64 * 1024) /* plain peak of each run, KiB: over three times the limit */

/*
 * @mib MiB of pages of the standard mix (10% zero, 10% same-filled, 60% text, 20% random; ~2.2:1 with
 * zstd -3) where half the pages of the second half repeat the page 128 MiB before: --long=28 finds
 * them, so the compressor and the decompressor both read data that is far back, long since evicted.
 */
static int write_data(const char *path, size_t mib)
{
	size_t n = mib << 8;
	FILE *f = fopen(path, "w");
	static unsigned char page[4096];

	if (!f)
		return -errno;
	for (size_t i = 0; i < n; i++) {
		size_t j = i >= n / 2 && (pagegen_mix(seed_for(i)) & 1) ? i - n / 2 : i;
		uint64_t s = seed_for(j);

		pagegen_fill(page, pagegen_mix_kind(s), s);
		if (fwrite(page, 1, sizeof(page), f) != sizeof(page))
			break;
	}
	return fclose(f) ? -errno : 0;
}

/* The offset of the first byte where files @a and @b differ (the shorter one's length), or -1. */
static long long files_differ(const char *a, const char *b)
{
	static unsigned char x[1 << 20], y[1 << 20];
	FILE *fa = fopen(a, "r"), *fb = fopen(b, "r");
	long long off = 0, diff = -1;

	if (!fa || !fb)
		diff = 0;
	while (diff < 0) {
		size_t na = fread(x, 1, sizeof(x), fa), nb = fread(y, 1, sizeof(y), fb);
		size_t m = na < nb ? na : nb, d = check_memdiff(x, y, m);

		if (d != (size_t)-1)
			diff = off + (long long)d;
		else if (na != nb)
			diff = off + (long long)m;
		else if (!na)
			break;
		off += (long long)m;
	}
	if (fa)
		fclose(fa);
	if (fb)
		fclose(fb);
	return diff;
}

/*
 * zstd -3 --long=28 -T2 (two compression threads, a 256 MiB window: ~290 MB resident plainly) and
 * zstd -d --long=28 (~265 MB plainly), each once plainly and once under --limit 64M. Under uswap the
 * compressed file must be the plain run's (zstd's output does not depend on timing), the decompressed
 * one the input, byte for byte.
 */
static void zstd_round_trip(void)
{
	char data[300], pz[300], uz[300], pback[300], uback[300], cstats[300], dstats[300];
	struct rusage ru_c = {0}, ru_d = {0};

	if (!have("/usr/bin/zstd", "zstd"))
		return;
	path_in(data, sizeof(data), "data");
	path_in(pz, sizeof(pz), "plain.zst");
	path_in(uz, sizeof(uz), "under.zst");
	path_in(pback, sizeof(pback), "plain.back");
	path_in(uback, sizeof(uback), "under.back");
	path_in(cstats, sizeof(cstats), "zstd-c.json");
	path_in(dstats, sizeof(dstats), "zstd-d.json");
	CHECK_EQ(write_data(data, ZSTD_DATA_MIB), 0);

	char *plain_c[] = {"/usr/bin/zstd", "-q", "-f", "-3", "--long=28", "-T2", data, "-o", pz, NULL};
	char *plain_d[] = {"/usr/bin/zstd", "-q", "-d", "-f", "--long=28", pz, "-o", pback, NULL};
	CHECK_EQ(check_cmd_rusage(plain_c, NULL, NULL, &ru_c), 0);
	CHECK_EQ(check_cmd_rusage(plain_d, NULL, NULL, &ru_d), 0);
	CHECK_EQ(files_differ(pback, data), -1);
	/* the settings make zstd use far more than the limit, or the test would say little */
	CHECK(ru_c.ru_maxrss > ZSTD_MIN_RSS_K);
	CHECK(ru_d.ru_maxrss > ZSTD_MIN_RSS_K);
	printf("  (zstd plainly: compress %ld MiB, decompress %ld MiB peak resident; limit %s)\n",
	       ru_c.ru_maxrss >> 10, ru_d.ru_maxrss >> 10, ZSTD_LIMIT);
	unlink(pback);

	char *under_c[] = {"/usr/bin/zstd", "-q", "-f", "-3", "--long=28", "-T2", data, "-o", uz, NULL};
	char *under_d[] = {"/usr/bin/zstd", "-q", "-d", "-f", "--long=28", uz, "-o", uback, NULL};
	CHECK_EQ(run_under(ZSTD_LIMIT, cstats, under_c, NULL, NULL), 0);
	check_swapped(cstats, (ZSTD_DATA_MIB / 2) << 8);
	long long d = files_differ(uz, pz);
	if (d >= 0)
		fprintf(stderr, "[%s] compressed under uswap, zstd's output differs at byte %lld\n",
			check_test, d);
	CHECK_EQ(d, -1);

	CHECK_EQ(run_under(ZSTD_LIMIT, dstats, under_d, NULL, NULL), 0);
	check_swapped(dstats, (ZSTD_DATA_MIB / 2) << 8);
	d = files_differ(uback, data);
	if (d >= 0)
		fprintf(stderr, "[%s] decompressed under uswap, the data differs at byte %lld\n", check_test,
			d);
	CHECK_EQ(d, -1);
	unlink(data);
	unlink(pz);
	unlink(uz);
	unlink(uback);
}

/* ---- redis-server: redis-benchmark, then known values read back ---- */

#define REDIS_LIMIT    "64M"
#define REDIS_KEYS     150000 /* ~170 MB of our values */
#define REDIS_BATCH    1000
#define BENCH_VALUE    1000 /* bytes, and the same as a string: */
#define BENCH_VALUE_S  "1000"
#define BENCH_KEYSPACE "100000" /* ~86K distinct keys from 200K SETs: ~95 MB */

/* The value of key v:@i: 256..2048 bytes of a text-like page (three in four) or a random one. */
static size_t redis_value(uint64_t i, unsigned char *page, const unsigned char **v)
{
	uint64_t s = seed_for(i);
	size_t len = 256 + s % 1793;

	fill_page(page, (s >> 11) % 4 ? PK_TEXT : PK_RANDOM, s);
	*v = page + (s >> 32) % (4096 - len + 1);
	return len;
}

static long long dbsize(redisContext *c)
{
	redisReply *r = c ? redisCommand(c, "DBSIZE") : NULL;
	long long n = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;

	if (r)
		freeReplyObject(r);
	return n;
}

/* INFO memory's used_memory (what jemalloc holds for the data): the dataset, whatever is resident. */
static long long used_memory(redisContext *c)
{
	redisReply *r = c ? redisCommand(c, "INFO memory") : NULL;
	const char *p = r && r->str ? strstr(r->str, "used_memory:") : NULL;
	long long n = p ? atoll(p + strlen("used_memory:")) : -1;

	if (r)
		freeReplyObject(r);
	return n;
}

/* SET every v:i to its value, REDIS_BATCH commands a pipeline. Return: the replies that were not OK. */
static long set_values(redisContext *c)
{
	static unsigned char page[4096];
	long bad = 0;

	for (long first = 0; c && first < REDIS_KEYS; first += REDIS_BATCH) {
		for (long i = first; i < first + REDIS_BATCH; i++) {
			const unsigned char *v;
			size_t len = redis_value((uint64_t)i, page, &v);

			redisAppendCommand(c, "SET v:%ld %b", i, v, len);
		}
		for (long i = first; i < first + REDIS_BATCH; i++) {
			redisReply *r = NULL;

			if (redisGetReply(c, (void **)&r) != REDIS_OK || !r ||
			    r->type != REDIS_REPLY_STATUS || strcmp(r->str, "OK"))
				bad++;
			if (r)
				freeReplyObject(r);
		}
	}
	return c ? bad : REDIS_KEYS;
}

/* GET every v:i and compare it with its value. Return: the keys that came back wrong or not at all. */
static long check_values(redisContext *c)
{
	static unsigned char page[4096];
	long bad = 0;

	for (long first = 0; c && first < REDIS_KEYS; first += REDIS_BATCH) {
		for (long i = first; i < first + REDIS_BATCH; i++)
			redisAppendCommand(c, "GET v:%ld", i);
		for (long i = first; i < first + REDIS_BATCH; i++) {
			redisReply *r = NULL;
			const unsigned char *v;
			size_t len = redis_value((uint64_t)i, page, &v);
			bool ok = redisGetReply(c, (void **)&r) == REDIS_OK && r &&
				  r->type == REDIS_REPLY_STRING && r->len == len && !memcmp(r->str, v, len);

			if (!ok && bad++ < 5)
				fprintf(stderr, "[%s] v:%ld came back wrong (%zu bytes, got %zu)\n",
					check_test, i, len, r ? r->len : 0);
			if (r)
				freeReplyObject(r);
		}
	}
	return c ? bad : REDIS_KEYS;
}

/*
 * Every key:* that redis-benchmark set: redis-benchmark sends one payload for all of them (its random
 * bytes are made once per run), so each must be BENCH_VALUE bytes, the same as the first. Return: the
 * keys seen; *@bad those that differ.
 */
static long check_bench_values(redisContext *c, long *bad)
{
	char cursor[32] = "0", first[BENCH_VALUE];
	bool have_first = false;
	long keys = 0;

	*bad = 0;
	do {
		redisReply *r = c ? redisCommand(c, "SCAN %s MATCH key:* COUNT 1000", cursor) : NULL;

		if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
			(*bad)++;
			if (r)
				freeReplyObject(r);
			break;
		}
		snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
		redisReply *k = r->element[1];
		for (size_t i = 0; i < k->elements; i++)
			redisAppendCommand(c, "GET %b", k->element[i]->str, k->element[i]->len);
		for (size_t i = 0; i < k->elements; i++) {
			redisReply *g = NULL;
			bool ok = redisGetReply(c, (void **)&g) == REDIS_OK && g &&
				  g->type == REDIS_REPLY_STRING && g->len == BENCH_VALUE;

			if (ok && !have_first) {
				memcpy(first, g->str, BENCH_VALUE);
				have_first = true;
			}
			if (!ok || memcmp(g->str, first, BENCH_VALUE))
				(*bad)++;
			keys++;
			if (g)
				freeReplyObject(g);
		}
		freeReplyObject(r);
	} while (strcmp(cursor, "0"));
	return keys;
}

/*
 * After the known values: redis-benchmark on top, then the dataset must be over three times the
 * limit, every known value read back right, every benchmark value the same bytes, and nothing else.
 */
static void check_dataset(redisContext *c, int server_port, uint64_t limit)
{
	char port[16];

	snprintf(port, sizeof(port), "%d", server_port);
	char *bench[] = {"/usr/bin/redis-benchmark",
			 "-h",
			 "127.0.0.1",
			 "-p",
			 port,
			 "-t",
			 "set",
			 "-n",
			 "200000",
			 "-r",
			 BENCH_KEYSPACE,
			 "-d",
			 BENCH_VALUE_S,
			 "-P",
			 "16",
			 "-q",
			 NULL};
	CHECK_EQ(check_cmd(bench, NULL, NULL), 0);

	long long used = used_memory(c);
	printf("  (redis: used_memory %lld MiB under a limit of %s)\n", used >> 20, REDIS_LIMIT);
	CHECK(used > 3 * (long long)limit);
	CHECK_EQ(check_values(c), 0);
	long bench_bad, bench_keys = check_bench_values(c, &bench_bad);
	CHECK(bench_keys > 50000);
	CHECK_EQ(bench_bad, 0);
	CHECK_EQ(dbsize(c), REDIS_KEYS + bench_keys);
}

/*
 * redis-server under --limit 64M: REDIS_KEYS known values (256..2048 bytes) set through a pipeline,
 * then redis-benchmark's 200K SETs of 1000 bytes over 100K keys on top, ~270 MB of data in all (INFO's
 * used_memory must exceed three times the limit); then every value read back and compared, and the
 * server shut down with SHUTDOWN NOSAVE (exit 0, passed on by uswap run).
 */
static void redis_dataset(void)
{
	char stats[300];
	const char *wrap[] = {uswap_bin, "run", "--limit", REDIS_LIMIT, "--stats-json", stats, "--", NULL};
	uint64_t limit = 0;
	struct rserver s = {0};
	int st = -1;

	if (!have("/usr/bin/redis-server", "redis-server") ||
	    !have("/usr/bin/redis-benchmark", "redis-tools"))
		return;
	CHECK_EQ(uswap_parse_size(REDIS_LIMIT, 1, &limit), 0);
	path_in(stats, sizeof(stats), "redis.json");
	unlink(stats);
	CHECK_EQ(rserver_start_wrapped(&s, wrap, "noeviction", NULL), 0);
	redisContext *c = rserver_connect(&s);
	CHECK(c != NULL);
	if (c)
		redisSetTimeout(c, (struct timeval){120, 0});
	long set_bad = set_values(c);
	CHECK_EQ(set_bad, 0);
	if (!set_bad) /* else the server is gone or hung: shut it down, and fail */
		check_dataset(c, s.port, limit);
	redisReply *r = c ? redisCommand(c, "SHUTDOWN NOSAVE") : NULL; /* no reply: the connection drops */
	if (r)
		freeReplyObject(r);
	if (c)
		redisFree(c);
	for (int i = 0; i < 600 && s.pid > 0; i++) { /* 60 s, then rserver_kill() kills it */
		if (waitpid(s.pid, &st, WNOHANG) == s.pid)
			s.pid = 0;
		else
			usleep(100000);
	}
	if (s.pid > 0)
		fprintf(stderr, "[%s] redis-server under uswap run did not exit after SHUTDOWN: killed\n",
			check_test);
	CHECK(s.pid == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	check_swapped(stats, (long long)(2 * limit / 4096));
	rserver_kill(&s);
}

static const struct test tests[] = {
	T(stress_ng_vm),
	T(zstd_round_trip),
	T(redis_dataset),
};

int main(int argc, char **argv)
{
	const char *build = getenv("BUILD");
	char cmd[400];

	snprintf(uswap_bin, sizeof(uswap_bin), "%s/uswap", build && *build ? build : "build");
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/uswap-programs-test.XXXXXX");
	if (CHECK_SANITIZED)
		check_skip("a sanitizer build's preload library cannot go into uninstrumented programs");
	if (access(uswap_bin, X_OK))
		check_skip("no uswap binary in $BUILD");
	if (uswap_mm_check())
		check_skip("no userfaultfd access (root, /dev/userfaultfd or vm.unprivileged_userfaultfd=1)");
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	int ret = check_run(tests, sizeof(tests) / sizeof(tests[0]), argc, argv);

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	if (system(cmd))
		fprintf(stderr, "cannot remove %s\n", tmpdir);
	return ret;
}
