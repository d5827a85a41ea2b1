/*
 * test_config_fuzz.c - the parsers of what users write, fed inputs mutated from valid ones
 * (tests/mutate.c; the seed is printed, USWAP_FUZZ_SEED=N replays, USWAP_FUZZ_SCALE=N runs N times
 * longer): tier strings (uswap_check_tiers(), and uswap_create()/uswap_destroy() with a page stored
 * and loaded through what builds), sizes (uswap_parse_size() against a reference parser of the
 * documented grammar), limits (uswap_parse_limit()) and USWAP_FAULT_SEED. Each input is accepted, or
 * refused with a negative errno and a message; nothing crashes, and in the ASan build nothing leaks.
 */
#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "mutate.h"
#include "uswap.h"

#define SPEC_CAP 192

static char tmpdir[64];

/* @s with its non-printable bytes escaped, for a failure message. */
static const char *shown(const char *s, size_t len)
{
	static char out[4 * SPEC_CAP + 8];
	size_t o = 0;

	for (size_t i = 0; i < len && o + 5 < sizeof(out); i++) {
		unsigned char c = (unsigned char)s[i];

		if (isprint(c) && c != '"' && c != '\\')
			out[o++] = (char)c;
		else
			o += (size_t)snprintf(out + o, sizeof(out) - o, "\\x%02x", c);
	}
	out[o] = '\0';
	return out;
}

/* A refusal: a negative errno and a message (it may quote the input, bytes and all). */
static bool clear_refusal(int ret)
{
	return ret < 0 && ret >= -4095 && uswap_errmsg()[0];
}

static const char *const tier_dict[] = {
	",",
	":",
	"(",
	")",
	"=",
	"%",
	"same",
	"zpool",
	"file",
	"fault(",
	"redis://",
	"redis-cluster://",
	"lz4",
	"zstd",
	"zstd=",
	"level=",
	"max=",
	"reject=",
	"size=",
	"encrypt",
	"eio=",
	"enospc=",
	"etimedout=",
	"delay=",
	"delay_ms=",
	"flip=",
	"seed=",
	"prefix=",
	"timeout=",
	"replicas=",
	"db=",
	"lease=",
	"password-env=",
	"user=",
	"tls",
	"cacert=",
	"127.0.0.1:",
	"0",
	"1",
	"-1",
	"100%",
	"101%",
	"0.0001%",
	"0.00001%",
	"99999999999999999999",
	"18446744073709551615",
	"18446744073709551616",
	"9223372036854775807",
	"4294967296",
	"1e308",
	"nan",
	"inf",
	"0x10",
	"1T",
	"16E",
	"64K",
	"KiB",
	"",
};

/* Valid strings; "@" stands for the test's own directory. */
static const char *const tier_corpus[] = {
	"same",
	"zpool",
	"file",
	"same,zpool:lz4:max=256M",
	"same,zpool:zstd:level=3:max=25%:reject=90%",
	"zpool:zstd=7",
	"same,zpool:lz4:max=64K,zpool:zstd",
	"same,zpool:lz4:reject=100%,file:size=64M",
	"file:@/a.swap:size=8M:encrypt",
	"same,fault(zpool:lz4:max=64M):eio=1%:enospc=1%:etimedout=1%:flip=0.1%:seed=42,fault(file:size=64M)",
	"fault(fault(zpool:zstd):eio=5:seed=7):flip=0.0001%:delay_ms=0:seed=7",
	"fault(same):eio=100%,zpool",
	"redis://127.0.0.1:6379:prefix=us:timeout=500:replicas=1:db=2:lease=30s",
	"redis-cluster://127.0.0.1:7000,127.0.0.1:7001:replicas=1:lease=1h",
	"same,redis://127.0.0.1:1:tls:password-env=HOME,zpool",
	"fault(redis-cluster://127.0.0.1:7000,127.0.0.1:7001):eio=1%",
};

static char corpus_buf[sizeof(tier_corpus) / sizeof(tier_corpus[0])][SPEC_CAP];
static const char *corpus[sizeof(tier_corpus) / sizeof(tier_corpus[0])];

static void setup(void);

static void corpus_init(void)
{
	if (!tmpdir[0])
		setup();
	for (size_t i = 0; i < sizeof(tier_corpus) / sizeof(tier_corpus[0]); i++) {
		const char *at = strchr(tier_corpus[i], '@');

		if (at)
			snprintf(corpus_buf[i], SPEC_CAP, "%.*s%s%s", (int)(at - tier_corpus[i]),
				 tier_corpus[i], tmpdir, at + 1);
		else
			snprintf(corpus_buf[i], SPEC_CAP, "%s", tier_corpus[i]);
		corpus[i] = corpus_buf[i];
	}
}

/* A mutated tier string into @out (NUL-terminated; it may hold other NULs, which end it early). */
static void next_spec(struct mutator *m, char *out)
{
	const char *base = corpus[mut_below(m, m->nr_corpus)];
	size_t len = strlen(base);

	memcpy(out, base, len);
	len = mut_mutate(m, (unsigned char *)out, len, SPEC_CAP - 1, 3, 1);
	out[len] = '\0';
}

/*
 * Building is left to strings that neither reach out (a Redis tier: a host name would be looked up),
 * nor sleep (delay=), nor name a path outside the test's directory.
 */
static bool buildable(const char *s)
{
	char copy[SPEC_CAP], dir[80], *p;
	size_t dl;

	if (strstr(s, "redis") || strstr(s, "delay") || strchr(s, '\\'))
		return false;
	snprintf(copy, sizeof(copy), "%s", s);
	dl = (size_t)snprintf(dir, sizeof(dir), "%s/", tmpdir);
	while ((p = strstr(copy, dir))) /* a file directly in the test's directory is fine */
		memmove(p + 1, p + dl, strlen(p + dl) + 1);
	return !strchr(copy, '/');
}

static struct mutator tier_mutator(const char *test)
{
	struct mutator m;

	MUT_START(&m, test, tier_dict, corpus);
	return m;
}

/* Parsing alone: every mutated string is accepted or refused with a message. */
static void tier_strings_checked(void)
{
	struct mutator m = tier_mutator("tier_strings_checked");
	unsigned long n = mut_iterations(20000), accepted = 0;
	char spec[SPEC_CAP];

	corpus_init();
	for (unsigned long i = 0; i < n; i++) {
		int ret;

		next_spec(&m, spec);
		ret = uswap_check_tiers(spec);
		if (!ret) {
			accepted++;
			continue;
		}
		if (!clear_refusal(ret)) {
			fprintf(stderr, "iteration %lu: \"%s\": %d \"%s\"\n", i, shown(spec, strlen(spec)),
				ret, uswap_errmsg());
			CHECK(clear_refusal(ret));
		}
	}
	printf("tier_strings_checked: %lu strings, %lu accepted\n", n, accepted);
	CHECK(accepted > 0 && accepted < n); /* the mutator reaches both sides */
}

/*
 * Building agrees with parsing alone (same verdict, same message when refused); a layer that builds
 * stores a page and gives it back intact (or, under a fault() tier, fails to with an error).
 */
static void tier_strings_built(void)
{
	struct mutator m = tier_mutator("tier_strings_built");
	unsigned long n = mut_iterations(1500), built = 0, tried = 0;
	unsigned char *page = aligned_alloc(4096, 4096), *back = aligned_alloc(4096, 4096);
	char spec[SPEC_CAP], checked[512];

	corpus_init();
	for (unsigned long i = 0; i < n; i++) {
		struct uswap *u = NULL;
		uswap_id_t id;
		int cret, ret;

		next_spec(&m, spec);
		if (!buildable(spec))
			continue;
		tried++;
		cret = uswap_check_tiers(spec);
		snprintf(checked, sizeof(checked), "%s", uswap_errmsg());
		ret = uswap_create(&u, spec);
		if ((cret == 0) != (ret == 0) || (ret && (cret != ret || strcmp(checked, uswap_errmsg())))) {
			fprintf(stderr, "iteration %lu: \"%s\": checked %d \"%s\", built %d \"%s\"\n", i,
				shown(spec, strlen(spec)), cret, checked, ret, uswap_errmsg());
			CHECK_EQ(ret, cret);
		}
		if (ret) {
			CHECK(u == NULL);
			if (!clear_refusal(ret)) {
				fprintf(stderr, "iteration %lu: \"%s\": %d \"%s\"\n", i,
					shown(spec, strlen(spec)), ret, uswap_errmsg());
				CHECK(clear_refusal(ret));
			}
			continue;
		}
		built++;
		fill_page(page, i % 2 ? PK_TEXT : PK_SAME, seed_for(i));
		ret = uswap_store(u, page, 1, &id);
		if (!ret) {
			memset(back, 0, 4096);
			ret = uswap_load(u, id, back, 1);
			if (!ret)
				CHECK_MEM(page, back, 4096);
			else
				CHECK(clear_refusal(ret) && strstr(uswap_errmsg(), "swap id"));
			CHECK_EQ(uswap_free(u, id), 0);
		} else {
			CHECK(clear_refusal(ret));
		}
		check_destroy(u);
	}
	printf("tier_strings_built: %lu strings built, of %lu tried\n", built, tried);
	CHECK(built > 0);
	free(page);
	free(back);
}

/* The documented grammar of a size: DIGITS [K|M|G|T [B|iB]] (any case), or DIGITS% of 1..100. */
static int ref_parse_size(const char *s, int pct_ok, uint64_t *bytes)
{
	uint64_t v = 0, mul = 1;
	const char *p = s;

	if (!isdigit((unsigned char)*p))
		return -EINVAL;
	for (; isdigit((unsigned char)*p); p++) {
		if (v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
			return -EINVAL;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	if (*p == '%') {
		if (!pct_ok || p[1] || v < 1 || v > 100)
			return -EINVAL;
		*bytes = 1; /* a share of the machine's memory: only the verdict is compared */
		return 0;
	}
	switch (toupper((unsigned char)*p)) {
	case 'K':
		mul = 1ull << 10;
		break;
	case 'M':
		mul = 1ull << 20;
		break;
	case 'G':
		mul = 1ull << 30;
		break;
	case 'T':
		mul = 1ull << 40;
		break;
	}
	if (mul > 1) {
		p++;
		if (toupper((unsigned char)p[0]) == 'I' && toupper((unsigned char)p[1]) == 'B')
			p += 2;
		else if (toupper((unsigned char)p[0]) == 'B')
			p++;
	}
	if (*p || v > UINT64_MAX / mul)
		return -EINVAL;
	*bytes = v * mul;
	return 0;
}

static const char *const size_dict[] = {
	"K",           "M",        "G", "T", "KiB", "MB", "b", "i", "%", "0", "9", "18446744073709551615",
	"17179869184", "16777216", "-", "+", " ",   ".",  "e"};
static const char *const size_corpus[] = {"4096", "64K", "256M", "8G",   "1T",        "25%",
					  "1KiB", "2mb", "0",    "100%", "16777215T", "18446744073709551615"};

static void sizes_match_reference(void)
{
	struct mutator m;
	unsigned long n = mut_iterations(50000), good = 0;
	char s[48];

	MUT_START(&m, "sizes_match_reference", size_dict, size_corpus);
	for (unsigned long i = 0; i < n; i++) {
		const char *base = size_corpus[mut_below(&m, m.nr_corpus)];
		size_t len = strlen(base);
		int pct_ok = (int)(i & 1), ret, want;
		uint64_t got = 0, exp = 0;

		memcpy(s, base, len);
		len = mut_mutate(&m, (unsigned char *)s, len, sizeof(s) - 1, 3, 1);
		s[len] = '\0';
		ret = uswap_parse_size(s, pct_ok, &got);
		want = ref_parse_size(s, pct_ok, &exp);
		if (ret != want || (!ret && !strchr(s, '%') && got != exp)) {
			fprintf(stderr, "iteration %lu: size \"%s\" (pct_ok %d): %d %llu, expected %d %llu\n",
				i, shown(s, len), pct_ok, ret, (unsigned long long)got, want,
				(unsigned long long)exp);
			CHECK_EQ(ret, want);
		}
		good += !ret;
	}
	printf("sizes_match_reference: %lu sizes, %lu valid\n", n, good);
	CHECK(good > 0 && good < n);
}

static const char *const limit_dict[] = {"auto",
					 ":",
					 "stall=",
					 "min=",
					 "max=",
					 "=",
					 "%",
					 "0.01%",
					 "50%",
					 "51%",
					 "0.001%",
					 "nan%",
					 "inf%",
					 "1e2%",
					 "16M",
					 "0",
					 "99999999999999999999",
					 "18446744073709551615",
					 "T",
					 ""};
static const char *const limit_corpus[] = {
	"512M",         "25%", "auto", "auto:stall=1%:min=16M:max=2G", "4G:auto", "1G:auto:stall=0.5%",
	"auto:min=64M", "100%"};

/* A limit is accepted with something to hold to, or refused with a message naming it. */
static void limits_parse_or_refuse(void)
{
	struct mutator m;
	unsigned long n = mut_iterations(30000), good = 0;
	char s[160];

	MUT_START(&m, "limits_parse_or_refuse", limit_dict, limit_corpus);
	for (unsigned long i = 0; i < n; i++) {
		const char *base = limit_corpus[mut_below(&m, m.nr_corpus)];
		struct uswap_mm_options o;
		size_t len = strlen(base);
		int ret;

		memset(&o, 0, sizeof(o));
		memcpy(s, base, len);
		len = mut_mutate(&m, (unsigned char *)s, len, sizeof(s) - 1, 4, 1);
		s[len] = '\0';
		ret = uswap_parse_limit(s, &o);
		if (ret) {
			if (ret != -EINVAL || !strstr(uswap_errmsg(), "limit \"")) {
				fprintf(stderr, "iteration %lu: limit \"%s\": %d \"%s\"\n", i, shown(s, len),
					ret, uswap_errmsg());
				CHECK_EQ(ret, -EINVAL);
			}
			continue;
		}
		good++;
		CHECK(o.limit_bytes > 0 || o.limit_auto);
		CHECK(!o.limit_auto || !o.limit_bytes || !o.auto_min_bytes ||
		      o.auto_min_bytes <= o.limit_bytes);
		CHECK(!o.limit_auto || !o.auto_stall_ppm ||
		      (o.auto_stall_ppm >= 100 && o.auto_stall_ppm <= 500000));
		if (!o.limit_auto && o.auto_stall_ppm + o.auto_min_bytes) {
			fprintf(stderr, "iteration %lu: limit \"%s\" without auto set auto fields\n", i,
				shown(s, len));
			CHECK(!o.auto_stall_ppm && !o.auto_min_bytes);
		}
	}
	printf("limits_parse_or_refuse: %lu limits, %lu valid\n", n, good);
	CHECK(good > 0 && good < n);
	CHECK(uswap_parse_limit(NULL, &(struct uswap_mm_options){0}) == -EINVAL);
}

/* USWAP_FAULT_SEED, read by a fault() tier without seed=: a number, or a refusal naming it. */
static void fault_seed_env(void)
{
	static const char *const seeds[] = {"42", "0", "0x2a", "18446744073709551615"};
	static const char *const dict[] = {"-", "x", "0x", "99999999999999999999", " ", "+", "e"};
	struct mutator m;
	unsigned long n = mut_iterations(3000);
	char s[64];

	MUT_START(&m, "fault_seed_env", dict, seeds);
	for (unsigned long i = 0; i < n; i++) {
		const char *base = seeds[mut_below(&m, m.nr_corpus)];
		size_t len = strlen(base);
		int ret;

		memcpy(s, base, len);
		len = mut_mutate(&m, (unsigned char *)s, len, sizeof(s) - 1, 3, 1);
		s[len] = '\0';
		setenv("USWAP_FAULT_SEED", s, 1);
		ret = uswap_check_tiers("fault(zpool)");
		if (ret && (ret != -EINVAL || !strstr(uswap_errmsg(), "USWAP_FAULT_SEED"))) {
			fprintf(stderr, "iteration %lu: USWAP_FAULT_SEED=\"%s\": %d \"%s\"\n", i,
				shown(s, len), ret, uswap_errmsg());
			CHECK(!ret);
		}
	}
	unsetenv("USWAP_FAULT_SEED");
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

/* Each variable of the preload library with values it takes (the first ones of a line, mutated). */
static const struct {
	const char *name, *values[4];
} env_vars[] = {
	{"USWAP_LIMIT", {"64M", "25%", "auto:min=16M", "32M:auto:stall=0.5%"}},
	{"USWAP_TIERS",
	 {"same,zpool:lz4,file", "zpool:zstd:max=16M", "same,fault(zpool):eio=1%:seed=3", "file"}},
	{"USWAP_FOLIO", {"4K", "64K", "2M", "16K"}},
	{"USWAP_HEAP", {"1G", "256M", "4G", "64M"}},
	{"USWAP_MIN_MAP", {"128K", "1M", "4096", "64K"}},
	{"USWAP_FORK_CHILD", {"own", "plain", "own", "plain"}},
	{"USWAP_POOL_IN_LIMIT", {"0", "1", "00", "1"}},
	{"USWAP_REMOVE_EVENTS", {"0", "1", "01", "0"}},
};
static const char *env_corpus[sizeof(env_vars) / sizeof(env_vars[0]) * 4];

/*
 * The preload library's environment (USWAP_LIMIT and the variables beside it), mutated: a program
 * started with it runs (managed or not) and exits as it would, or is refused with exit status 2 and
 * a "uswap:" message; it is never killed by a signal. Not in sanitizer builds: their preload
 * library cannot go into an uninstrumented program.
 */
static void preload_environment(void)
{
	char exe[PATH_MAX], lib[PATH_MAX + 32], *slash;
	ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	unsigned long n = mut_iterations(100), refused = 0;
	struct mutator m;

	if (SANITIZED || len <= 0) {
		printf("preload_environment: not in a sanitizer build\n");
		return;
	}
	exe[len] = '\0';
	slash = strrchr(exe, '/');
	*slash = '\0';
	slash = strrchr(exe, '/'); /* BUILD/tests/test_config_fuzz: BUILD/libuswap-preload.so */
	*slash = '\0';
	snprintf(lib, sizeof(lib), "%s/libuswap-preload.so", exe);
	if (access(lib, R_OK) || access("/bin/true", X_OK)) {
		printf("preload_environment: no %s or /bin/true\n", lib);
		return;
	}
	for (size_t v = 0; v < sizeof(env_corpus) / sizeof(env_corpus[0]); v++)
		env_corpus[v] = env_vars[v / 4].values[v % 4];
	MUT_START(&m, "preload_environment", limit_dict, env_corpus);
	for (unsigned long i = 0; i < n; i++) {
		char vals[3][96], errpath[96];
		const char *names[3];
		int st = 0, fd;
		pid_t pid;

		for (int k = 0; k < 3; k++) {
			size_t var = k ? 1 + mut_below(&m, sizeof(env_vars) / sizeof(env_vars[0]) - 1) : 0;
			const char *base = env_vars[var].values[mut_below(&m, 4)];
			size_t l = strlen(base);

			names[k] = env_vars[var].name;
			memcpy(vals[k], base, l);
			if (mut_below(&m, 2)) /* half the values as they are: the others are then reached */
				l = mut_mutate(&m, (unsigned char *)vals[k], l, sizeof(vals[k]) - 1, 2, 1);
			vals[k][l] = '\0';
			vals[k][strcspn(vals[k], "\n")] = '\0';
			if (strstr(vals[k], "redis") || strstr(vals[k], "delay") || strchr(vals[k], '/'))
				snprintf(vals[k], sizeof(vals[k]), "%s", base); /* nothing that reaches out */
		}
		snprintf(errpath, sizeof(errpath), "%s/env.err", tmpdir);
		pid = fork();
		if (!pid) {
			fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
			dup2(fd, 2);
			setenv("LD_PRELOAD", lib, 1);
			for (int k = 0; k < 3; k++)
				setenv(names[k], vals[k], 1);
			execl("/bin/true", "true", (char *)NULL);
			_exit(127);
		}
		CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
		refused += WIFEXITED(st) && WEXITSTATUS(st) == 2;
		if (!WIFEXITED(st) || (WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != 2)) {
			fprintf(stderr, "iteration %lu: %s=\"%s\" %s=\"%s\" %s=\"%s\": status %#x\n", i,
				names[0], shown(vals[0], strlen(vals[0])), names[1],
				shown(vals[1], strlen(vals[1])), names[2], shown(vals[2], strlen(vals[2])),
				st);
			CHECK(WIFEXITED(st) && (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == 2));
		}
		unlink(errpath);
	}
	printf("preload_environment: %lu programs, %lu refused their environment\n", n, refused);
}

static void setup(void)
{
	if (tmpdir[0])
		return;
	snprintf(tmpdir, sizeof(tmpdir), "/var/tmp/uswap-fuzz-XXXXXX");
	if (!mkdtemp(tmpdir))
		check_skip("no temporary directory in /var/tmp");
	setenv("TMPDIR", tmpdir, 1);
}

static void teardown(void)
{
	if (!tmpdir[0])
		return;
	/* named swap files lose their names at open: the directory is empty unless a check failed */
	if (rmdir(tmpdir)) {
		fprintf(stderr, "%s is not empty\n", tmpdir);
		CHECK(!"the test directory is empty");
	}
}

CHECK_MAIN(T(setup), T(tier_strings_checked), T(tier_strings_built), T(sizes_match_reference),
	   T(limits_parse_or_refuse), T(fault_seed_env), T(preload_environment), T(teardown))
