/*
 * test_profile.c - `uswap profile`: python3 holding ~60 MB profiled at 100% and 50% of its plain peak
 * and under --limit auto, with --json and --svg; every run's output is the plain run's, the JSON
 * holds the runs, and the SVG (parsed by python3's xml.etree) is well-formed with an <svg> root and one
 * circle per run whose <title> carries the JSON's time, placed by memory (and valid SVG 1.1 by the
 * DTD when w3c-sgml-lib is installed). A program that prints
 * something else under uswap (it sees USWAP_RUN) or exits differently makes the profile fail loudly;
 * bad options are refused before anything runs.
 */
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "uswap.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

static char uswap_bin[512], tmpdir[256] = "/tmp/uswap-profile-test.XXXXXX";

/* Run @argv with stdout to @out and stderr to @err; killed after 120 s. Return: wait status. */
static int run(char *const argv[], const char *out, const char *err)
{
	pid_t pid = fork();
	int st = -1;

	if (pid == 0) {
		setpgid(0, 0);
		int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600),
		    efd = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		dup2(fd, 1);
		dup2(efd, 2);
		execv(argv[0], argv);
		_exit(126);
	}
	setpgid(pid, pid);
	for (int waited = 0; waitpid(pid, &st, WNOHANG) == 0; waited++) {
		if (waited == 1200) {
			fprintf(stderr, "[%s] %s did not finish in 120 s: killed\n", check_test, argv[0]);
			kill(-pid, SIGKILL);
			waitpid(pid, &st, 0);
			break;
		}
		usleep(100000);
	}
	return st;
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf = NULL;
	size_t cap = 0;

	if (!f)
		return NULL;
	if (getdelim(&buf, &cap, '\0', f) < 0) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	return buf;
}

static unsigned count(const char *s, const char *what)
{
	unsigned n = 0;

	for (const char *p = s; p && (p = strstr(p, what)); p += strlen(what))
		n++;
	return n;
}

static void show(const char *path)
{
	char *s = slurp(path);

	fprintf(stderr, "[%s] %s:\n%s\n", check_test, path, s ? s : "(missing)");
	free(s);
}

/*
 * What the SVG must show, checked against the JSON by python3 (prints what is wrong, exits 1): a
 * well-formed <svg> root, one circle per run (class "run KIND", in the runs' order) whose <title>
 * says the run's time as the JSON has it; the limit runs further right the larger their limit, the
 * plain run at its peak, a slower run higher up.
 */
static const char svg_check[] =
	"import json, sys, xml.etree.ElementTree as ET\n"
	"ns = '{http://www.w3.org/2000/svg}'\n"
	"js = json.load(open(sys.argv[1]))\n"
	"root = ET.parse(sys.argv[2]).getroot()\n"
	"assert root.tag == ns + 'svg', root.tag\n"
	"assert root.get('version') == '1.1'\n"
	"pts = [c for c in root.iter(ns + 'circle') if (c.get('class') or '').startswith('run ')]\n"
	"runs = js['runs']\n"
	"assert len(pts) == len(runs), (len(pts), len(runs))\n"
	"for c, r in zip(pts, runs):\n"
	"    assert c.get('class').split()[1] == r['kind'], (c.get('class'), r['kind'])\n"
	"    t = c.find(ns + 'title').text\n"
	"    assert ('%.3f s' % r['seconds']) in t, (t, r['seconds'])\n"
	"lim = sorted([(r['limit_bytes'], float(c.get('cx'))) for c, r in zip(pts, runs) if r['kind'] == "
	"'limit'])\n"
	"assert len(lim) >= 2 and all(a[1] < b[1] for a, b in zip(lim, lim[1:])), lim\n"
	"plain = float(pts[0].get('cx'))\n"
	"assert all(x < plain for b, x in lim if b < js['plain_peak_bytes']), (lim, plain)\n"
	"by_time = sorted(zip([r['seconds'] for r in runs], [float(c.get('cy')) for c in pts]))\n"
	"assert all(a[1] >= b[1] for a, b in zip(by_time, by_time[1:])), by_time\n"
	"print('svg ok', len(pts))\n";

/* python3 filling ~60 MB: 100%, 50% and auto give the plain run's output; JSON and SVG agree. */
static void profile_python(void)
{
	char out[300], err[300], svg[300], chk_out[300], chk_err[300];

	snprintf(out, sizeof(out), "%s/profile.json", tmpdir);
	snprintf(err, sizeof(err), "%s/profile.err", tmpdir);
	snprintf(svg, sizeof(svg), "%s/profile.svg", tmpdir);
	snprintf(chk_out, sizeof(chk_out), "%s/check.out", tmpdir);
	snprintf(chk_err, sizeof(chk_err), "%s/check.err", tmpdir);
	char *argv[] = {uswap_bin,
			"profile",
			"--limits",
			"100%,50%",
			"--json",
			"--svg",
			svg,
			"--",
			"/usr/bin/python3",
			"-c",
			"import hashlib\n"
			"l = [bytes([i % 251]) * 1000 + str(i).encode() for i in range(60000)]\n"
			"h = hashlib.sha256()\n"
			"for x in l: h.update(x)\n"
			"print(len(l), h.hexdigest())\n",
			NULL};
	int st = run(argv, out, err);

	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	char *js = slurp(out);
	CHECK(js != NULL);
	if (!js || !WIFEXITED(st) || WEXITSTATUS(st)) {
		show(err);
		free(js);
		return;
	}
	CHECK(strstr(js, "\"all_ok\":true") != NULL);
	CHECK_EQ(count(js, "\"kind\":"), 4);
	CHECK_EQ(count(js, "\"kind\":\"plain\""), 1);
	CHECK_EQ(count(js, "\"kind\":\"limit\""), 2);
	CHECK_EQ(count(js, "\"kind\":\"auto\""), 1);
	CHECK_EQ(count(js, "\"output_ok\":true"), 4);
	CHECK_EQ(count(js, "\"stdout_bytes\":71,"), 4); /* "60000 " + 64 hex digits + "\n", each run */
	const char *peak = strstr(js, "\"plain_peak_bytes\":");
	CHECK(peak && atoll(peak + 19) > 60ll << 20); /* the plain run's VmHWM */
	/* at 50% of the plain peak the program's pages went through the layer */
	const char *half = strstr(js, "\"label\":\"50%\"");
	const char *sw = half ? strstr(half, "\"swapins\":") : NULL;
	CHECK(sw && atoll(sw + 10) > 0);

	char *chk[] = {"/usr/bin/python3", "-c", (char *)svg_check, out, svg, NULL};
	int cst = run(chk, chk_out, chk_err);
	CHECK(WIFEXITED(cst) && WEXITSTATUS(cst) == 0);
	if (!WIFEXITED(cst) || WEXITSTATUS(cst)) {
		show(chk_err);
		show(out);
		show(svg);
	}
	/* Valid SVG 1.1, where the DTD is at hand (Debian's w3c-sgml-lib; not a dependency) */
	static const char dtd[] = "/usr/share/xml/w3c-sgml-lib/schema/dtd/REC-SVG11-20110816/svg11.dtd";
	if (!access("/usr/bin/xmllint", X_OK) && !access(dtd, R_OK)) {
		char *lint[] = {"/usr/bin/xmllint", "--noout", "--dtdvalid", (char *)dtd, svg, NULL};
		int lst = run(lint, chk_out, chk_err);

		CHECK(WIFEXITED(lst) && WEXITSTATUS(lst) == 0);
		if (!WIFEXITED(lst) || WEXITSTATUS(lst))
			show(chk_err);
	}
	free(js);
}

/* Different output, then a different exit status, under uswap: exit status 1, WRONG said loudly. */
static void wrong_runs_fail(void)
{
	char out[300], err[300];
	char *differ[] = {uswap_bin,
			  "profile",
			  "--limits",
			  "16M",
			  "--auto",
			  "auto:min=16M",
			  "--json",
			  "--",
			  "/bin/sh",
			  "-c",
			  "if [ -n \"$USWAP_RUN\" ]; then echo under; else echo plain; fi",
			  NULL};
	char *status[] = {uswap_bin, "profile", "--limits", "16M", "--auto",
			  "none",    "--",      "/bin/sh",  "-c",  "echo same; [ -z \"$USWAP_RUN\" ]",
			  NULL};

	snprintf(out, sizeof(out), "%s/wrong.out", tmpdir);
	snprintf(err, sizeof(err), "%s/wrong.err", tmpdir);
	int st = run(differ, out, err);
	char *js = slurp(out), *e = slurp(err);

	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1);
	CHECK(js && strstr(js, "\"all_ok\":false"));
	CHECK_EQ(count(js, "\"output_ok\":false"), 2);
	CHECK(e && strstr(e, "WRONG RUN at --limit 16384K: stdout differs"));
	CHECK(e && strstr(e, "WRONG RUN at --limit auto:min=16M"));
	free(js);
	free(e);

	st = run(status, out, err);
	js = slurp(out);
	e = slurp(err);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1);
	CHECK(js && strstr(js, "WRONG")); /* the table's output column */
	CHECK(e && strstr(e, "wait status 0x100, plainly 0x0"));
	free(js);
	free(e);
}

/* --rounds 3: every configuration three times; its time is the median of its rounds. */
static void rounds_take_medians(void)
{
	char out[300], err[300];
	char *argv[] = {uswap_bin, "profile", "--rounds", "3",       "--limits", "16M",       "--auto",
			"none",    "--json",  "--",       "/bin/sh", "-c",       "echo same", NULL};

	snprintf(out, sizeof(out), "%s/rounds.out", tmpdir);
	snprintf(err, sizeof(err), "%s/rounds.err", tmpdir);
	int st = run(argv, out, err);
	char *js = slurp(out);

	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK(js && strstr(js, "\"rounds\":3,") && strstr(js, "\"all_ok\":true"));
	CHECK_EQ(count(js, "\"seconds_rounds\":["), 2);
	for (const char *r = js; r && (r = strstr(r, "\"seconds\":")); r++) {
		double med = atof(r + 10), t[3];
		const char *q = strstr(r, "\"seconds_rounds\":[");

		CHECK(q && sscanf(q + 18, "%lf,%lf,%lf", &t[0], &t[1], &t[2]) == 3);
		if (!q)
			break;
		unsigned below = 0, above = 0;
		for (int i = 0; i < 3; i++) {
			below += t[i] < med;
			above += t[i] > med;
		}
		CHECK(below <= 1 && above <= 1); /* med is one of them, the middle one */
		CHECK(t[0] == med || t[1] == med || t[2] == med);
	}
	free(js);
}

/* Refused with exit status 2 before any run. */
static void bad_options(void)
{
	char out[300], err[300];
	static const char *bad[][2] = {
		{"--limits", "0%"}, {"--limits", "2M"},  {"--limits", "fifty"},       {"--auto", "64M"},
		{"--timeout", "0"}, {"--timeout", "3y"}, {"--stdin", "/nonexistent"}, {"--tiers", "nosuch"}};

	snprintf(out, sizeof(out), "%s/bad.out", tmpdir);
	snprintf(err, sizeof(err), "%s/bad.err", tmpdir);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char *argv[] = {uswap_bin,   "profile", (char *)bad[i][0], (char *)bad[i][1], "--",
				"/bin/true", NULL};
		int st = run(argv, out, err);

		if (!WIFEXITED(st) || WEXITSTATUS(st) != 2)
			fprintf(stderr, "[%s] %s %s: wait status 0x%x\n", check_test, bad[i][0], bad[i][1],
				(unsigned)st);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2);
	}
	char *none[] = {uswap_bin, "profile", "--", "/nonexistent/program", NULL};
	int st = run(none, out, err);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 127);
}

int main(int argc, char **argv)
{
	static const struct test tests[] = {T(bad_options), T(wrong_runs_fail), T(rounds_take_medians),
					    T(profile_python)};
	const char *build = getenv("BUILD");

	snprintf(uswap_bin, sizeof(uswap_bin), "%s/uswap", build && *build ? build : "build");
	if (SANITIZED)
		check_skip("a sanitizer build's preload library cannot go into uninstrumented programs");
	if (access(uswap_bin, X_OK))
		check_skip("no uswap binary in $BUILD");
	if (uswap_mm_check())
		check_skip("no userfaultfd access");
	if (access("/usr/bin/python3", X_OK))
		check_skip("python3 missing (scripts/deps.sh installs it)");
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	int ret = check_run(tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
	char cmd[400];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	if (system(cmd))
		fprintf(stderr, "cannot remove %s\n", tmpdir);
	return ret;
}
