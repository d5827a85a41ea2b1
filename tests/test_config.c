/*
 * test_config.c - tier strings and sizes: good ones build a working layer, bad ones are refused with a
 * message that names the bad part, by parsing alone as by building; the default stack.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "uswap.h"

static void good_strings_work(void)
{
	static const char *good[] = {
		"same",
		"zpool",
		"same,zpool:lz4:max=256M",
		"same,zpool:zstd:level=3:max=25%:reject=90%",
		"zpool:zstd=7",
		"same,zpool:lz4:max=64K,zpool:zstd",
		"same,zpool:lz4:reject=100%,file:size=64M",
		"same,fault(zpool:lz4:max=64M):eio=1%:enospc=1%:etimedout=1%:delay=1%:flip=0.1%:seed=42,"
		"fault(file:size=64M)",
		/* seeded: the faults each call meets are the same in every run */
		"fault(fault(zpool:zstd):eio=5:seed=7):flip=0.0001%:delay_ms=0:seed=7",
		"fault(same):eio=100%,zpool",
	};
	unsigned char *page = aligned_alloc(4096, 4096), *back = aligned_alloc(4096, 4096);

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		struct uswap *u = NULL;
		uswap_id_t id;
		CHECK_EQ(uswap_check_tiers(good[i]), 0);
		int ret = uswap_create(&u, good[i]);

		if (ret) {
			fprintf(stderr, "\"%s\": %d %s\n", good[i], ret, uswap_errmsg());
			CHECK_EQ(ret, 0);
			continue;
		}
		fill_page(page, PK_SAME,
			  seed_for(i)); /* every stack above can hold a same-filled or text page */
		if (!strncmp(good[i], "zpool", 5))
			fill_page(page, PK_TEXT, seed_for(i));
		CHECK_EQ(uswap_store(u, page, 1, &id), 0);
		CHECK_EQ(uswap_load(u, id, back, 1), 0);
		CHECK_MEM(back, page, 4096);
		check_destroy(u);
	}
	/* NULL and "" mean the default stack */
	struct uswap *u = NULL;
	CHECK_EQ(uswap_create(&u, NULL), 0);
	if (u) {
		struct uswap_stats st;
		uswap_stats(u, &st);
		CHECK_EQ(st.nr_tiers, 3);
		CHECK(!strcmp(st.tier[0].name, "same"));
		CHECK(!strcmp(st.tier[1].name, "zpool"));
		CHECK(!strcmp(st.tier[2].name, "file"));
		check_destroy(u);
	}
	free(page);
	free(back);
}

struct bad {
	const char *spec;
	const char *names; /* a part of the message: the bad piece */
};

static void bad_strings_are_refused(void)
{
	static const struct bad bad[] = {
		{"bogus", "\"bogus\""},
		{"same,bogus:x", "\"bogus\""},
		{"same,", "comma"},
		{",same", "empty tier"},
		{"same,,zpool", "empty tier"},
		{"zpool:lz5", "\"lz5\""},
		{"zpool:max=abc", "\"abc\""},
		{"zpool:max=1K", "\"1K\""},
		{"zpool:max=", "max"},
		{"zpool:max=12Q", "\"12Q\""},
		{"zpool:zstd=25", "\"25\""},
		{"zpool:zstd:level=0", "\"0\""},
		{"zpool:level=3", "level"},
		{"zpool:reject=5%", "\"5%\""},
		{"zpool:reject=90", "\"90\""},
		{"zpool:lz4:colour=blue", "\"colour\""},
		{"same:foo", "foo"},
		{"file:size=banana", "banana"},
		{"file:/proc/no/such/dir/x.swap", "/proc/no/such/dir/x.swap"},
		{"same,same,same,same,same,same,same,same", "at most"},
		{"fault(zpool", "not closed"},
		{"same,zpool)", "closes no"},
		{"fault:eio=1%", "parentheses"},
		{"fault()", "parentheses"},
		{"same(zpool)", "wraps no"},
		{"fault(zpool):eio=101%", "\"101%\""},
		{"fault(zpool):eio=0.00001%", "\"0.00001%\""},
		{"fault(zpool):colour=1", "\"colour\""},
		{"fault(same):flip=1%", "checksum"},
		{"fault(same,zpool)", "more than one tier"},
		{"fault(zpool)eio=1", "':' expected"},
		{"fault(zpool):eio=60%:enospc=50%", "exceed"},
		{"fault(zpool):seed=x", "\"x\""},
		{"fault(zpool:lz5)", "\"lz5\""},
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct uswap *u = NULL;
		char checked[256];
		int cret = uswap_check_tiers(bad[i].spec);

		/* parsing alone refuses it with the message building it gives */
		snprintf(checked, sizeof(checked), "%s", uswap_errmsg());
		int ret = uswap_create(&u, bad[i].spec);

		CHECK_EQ(cret, ret);
		if (strcmp(checked, uswap_errmsg())) {
			fprintf(stderr, "\"%s\": checked \"%s\", built \"%s\"\n", bad[i].spec, checked,
				uswap_errmsg());
			CHECK(!strcmp(checked, uswap_errmsg()));
		}

		if (ret == 0) {
			fprintf(stderr, "\"%s\" was accepted\n", bad[i].spec);
			check_destroy(u);
		}
		CHECK(ret == -EINVAL || ret == -ENOENT || ret == -EACCES);
		CHECK(u == NULL);
		if (!strstr(uswap_errmsg(), bad[i].names)) {
			fprintf(stderr, "\"%s\": message \"%s\" does not name \"%s\"\n", bad[i].spec,
				uswap_errmsg(), bad[i].names);
			CHECK(strstr(uswap_errmsg(), bad[i].names));
		}
	}
	/* empty is not an error (default stack), but bad options are */
	struct uswap_options o = {.tiers = "zpool", .max_pages = 1};
	struct uswap *u = NULL;
	int ret = uswap_create_opts(&u, &o);
	if (!ret)
		check_destroy(u);
	CHECK(ret == 0 || ret == -EINVAL);
}

/* The default stack: one composition, from the limit; what it writes builds a layer. */
static void default_stack(void)
{
	char buf[USWAP_TIERS_LEN], small[8];
	struct uswap *u = NULL;

	CHECK(uswap_default_tiers(0, buf, sizeof(buf)) == (int)strlen(buf));
	CHECK(!strcmp(buf, "same,zpool:lz4,file"));
	CHECK(uswap_default_tiers(96ull << 20, buf, sizeof(buf)) > 0);
	CHECK(!strcmp(buf, "same,zpool:lz4:max=49152K,file")); /* half of the limit */
	CHECK_EQ(uswap_default_tiers(1ull << 40, small, sizeof(small)), -ENOSPC);
	CHECK_EQ(uswap_check_tiers(buf), 0);
	CHECK_EQ(uswap_check_tiers(NULL), 0);
	CHECK_EQ(uswap_check_tiers(""), 0);
	CHECK_EQ(uswap_create(&u, buf), 0);
	if (u) {
		struct uswap_stats st;

		uswap_stats(u, &st);
		CHECK_EQ(st.nr_tiers, 3);
		CHECK_EQ(st.tier[1].capacity_bytes, 48ull << 20);
		check_destroy(u);
	}
}

/*
 * Checking has no side effect: a named swap file is not created, and a Redis tier is not contacted
 * (a port nothing listens on passes the check, and building it fails).
 */
static void check_has_no_side_effect(void)
{
	char path[64], spec[128];
	struct uswap *u = NULL;
	struct stat st;

	snprintf(path, sizeof(path), "/var/tmp/uswap-check-%d.swap", (int)getpid());
	snprintf(spec, sizeof(spec), "same,file:%s:size=64M", path);
	CHECK_EQ(uswap_check_tiers(spec), 0);
	CHECK(stat(path, &st) == -1 && errno == ENOENT);
	/* an existing file is refused by both */
	int fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0600);

	CHECK(fd >= 0);
	close(fd);
	CHECK(uswap_check_tiers(spec) < 0);
	CHECK(uswap_create(&u, spec) < 0);
	unlink(path);
	CHECK_EQ(uswap_check_tiers("same,redis://127.0.0.1:1:timeout=200"), 0);
	CHECK(uswap_create(&u, "same,redis://127.0.0.1:1:timeout=200") < 0);
	CHECK(uswap_check_tiers("same,redis://127.0.0.1:1:colour=blue") == -EINVAL);
}

static void sizes(void)
{
	static const struct {
		const char *s;
		uint64_t bytes;
	} good[] = {
		{"4096", 4096},     {"64K", 65536},     {"64k", 65536}, {"256M", 256ull << 20},
		{"8G", 8ull << 30}, {"1T", 1ull << 40}, {"0", 0},
	};
	static const char *bad[] = {
		"", "K", "-1", "12Q", "1.5G", "4096 ", " 4096", "99999999999999999999", "20000000T"};
	uint64_t b;

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		b = 1;
		CHECK_EQ(uswap_parse_size(good[i].s, 0, &b), 0);
		CHECK_EQ(b, good[i].bytes);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int ret = uswap_parse_size(bad[i], 0, &b);

		if (ret != -EINVAL)
			fprintf(stderr, "size \"%s\" gave %d\n", bad[i], ret);
		CHECK_EQ(ret, -EINVAL);
	}
	CHECK_EQ(uswap_parse_size("25%", 0, &b), -EINVAL); /* percent only where allowed */
	CHECK_EQ(uswap_parse_size("25%", 1, &b), 0);
	CHECK(b > 0);
	uint64_t full;
	CHECK_EQ(uswap_parse_size("100%", 1, &full), 0);
	CHECK(b <= full / 4 + 4096 && b + 4096 >= full / 4);
	CHECK_EQ(uswap_parse_size("101%", 1, &b), -EINVAL);
	CHECK_EQ(uswap_parse_size("0%", 1, &b), -EINVAL);
}

CHECK_MAIN(T(good_strings_work), T(bad_strings_are_refused), T(default_stack), T(check_has_no_side_effect),
	   T(sizes))
