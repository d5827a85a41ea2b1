/*
 * test_run.c - `uswap run` with real programs from Debian's packages: each runs once plainly and once
 * under a limit well below what it uses, and the two outputs must be identical; the summary written
 * with --stats-json must show that pages really went through the swap layer. Also: a program that
 * forks and execs, a multithreaded one, awk started by a shell (its figures among the descendants),
 * a heap on a PROT_NONE reservation committed with mprotect() (python3 through ctypes, and node),
 * exit status and death by signal passed through, bad options, and redis-server forking for BGSAVE
 * while most of its data is swapped.
 */
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "rserver.h"
#include "uswap.h"

static char uswap_bin[512], tmpdir[256];

/* check_cmd() as user @uid (group @uid too), with stderr to @err: the files are opened before the switch. */
static int run_as(uid_t uid, char *const argv[], const char *out, const char *err)
{
	pid_t pid = fork();
	int st = -1;

	if (pid == 0) {
		int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644),
		    efd = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		dup2(fd, 1);
		dup2(efd, 2);
		if (setgroups(0, NULL) || setgid(uid) || setuid(uid))
			_exit(125);
		execv(argv[0], argv);
		_exit(126);
	}
	for (int waited = 0; waitpid(pid, &st, WNOHANG) == 0; waited++) {
		if (waited == CHECK_CMD_TIMEOUT_S * 10) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			break;
		}
		usleep(100000);
	}
	return st;
}

/*
 * The same command plainly and under `uswap run --limit LIMIT [OPTS...]`: same exit status, same
 * output.
 */
/* The program's output under uswap (@under) is the plain run's (@plain), byte for byte, and not empty. */
static void check_same_files(const char *plain, const char *under)
{
	size_t la, lb;
	char *a = check_slurp(plain, &la), *b = check_slurp(under, &lb);

	CHECK(a && b && la > 0);
	CHECK_EQ(lb, la);
	if (a && b && la == lb)
		CHECK_MEM(b, a, la);
	free(a);
	free(b);
}

static void same_output_opts(const char *limit, char *const opts[], char *const cmd[], bool expect_swapping)
{
	char plain_out[300], under_out[300], stats[300], *argv[32];
	int n = 0, st_plain, st_under;

	snprintf(plain_out, sizeof(plain_out), "%s/plain.out", tmpdir);
	snprintf(under_out, sizeof(under_out), "%s/under.out", tmpdir);
	snprintf(stats, sizeof(stats), "%s/stats.json", tmpdir);
	unlink(stats);
	st_plain = check_cmd(cmd, plain_out, NULL);
	argv[n++] = uswap_bin;
	argv[n++] = "run";
	argv[n++] = "--limit";
	argv[n++] = (char *)limit;
	argv[n++] = "--stats-json";
	argv[n++] = stats;
	for (int i = 0; opts && opts[i] && n < 20; i++)
		argv[n++] = opts[i];
	argv[n++] = "--";
	for (int i = 0; cmd[i] && n < 31; i++)
		argv[n++] = cmd[i];
	argv[n] = NULL;
	st_under = check_cmd(argv, under_out, NULL);
	CHECK_EQ(st_under, st_plain);
	CHECK(WIFEXITED(st_plain) && WEXITSTATUS(st_plain) == 0);

	check_same_files(plain_out, under_out);

	size_t ls;
	char *js = check_slurp(stats, &ls);
	CHECK(js != NULL);
	if (expect_swapping) {
		if (check_json_num(js, "evicted_pages") <= 0 || check_json_num(js, "swapins") <= 0)
			fprintf(stderr, "[%s] no swapping seen: %s\n", check_test, js ? js : "(no stats)");
		CHECK(check_json_num(js, "evicted_pages") > 0);
		CHECK(check_json_num(js, "swapins") > 0);
		CHECK_EQ(check_json_num(js, "load_failures"), 0);
	}
	/* Default tiers: the limit is a budget for resident pages and the pool, the pool up to half. */
	uint64_t budget = 0;
	CHECK_EQ(uswap_parse_size(limit, 1, &budget), 0);
	CHECK_EQ(check_json_num(js, "budget_bytes"), (long long)budget);
	CHECK(check_json_num(js, "limit_bytes") <= (long long)budget);
	CHECK(check_json_num(js, "limit_bytes") >= (long long)(budget - budget / 2 - 4096));
	free(js);
}

static void same_output(const char *limit, char *const cmd[], bool expect_swapping)
{
	same_output_opts(limit, NULL, cmd, expect_swapping);
}

/*
 * After same_output(): the summary must show more than @pages pages evicted, i.e. memory the whole
 * program could not have held under its limit went through the layer (its own heap was managed).
 */
static void check_evicted_over(long long pages)
{
	char stats[300];
	size_t ls;

	snprintf(stats, sizeof(stats), "%s/stats.json", tmpdir);
	char *js = check_slurp(stats, &ls);
	if (check_json_num(js, "evicted_pages") <= pages)
		fprintf(stderr, "[%s] the program's heap was not swapped: %s\n", check_test,
			js ? js : "(no stats)");
	CHECK(check_json_num(js, "evicted_pages") > pages);
	free(js);
}

/* python3 building a dict of ~180 MB under 48 MB, with a checksum of every value. */
static void python_dict(void)
{
	char script[300];

	snprintf(script, sizeof(script), "%s/dict.py", tmpdir);
	check_write_file(script, "import hashlib, sys\n"
				 "n = int(sys.argv[1])\n"
				 "d = {}\n"
				 "for i in range(n):\n"
				 "    d[i] = ('value-%d' % (i * 7919)) * 3\n"
				 "h = hashlib.sha256()\n"
				 "for k in range(n):\n"
				 "    h.update(d[k].encode())\n"
				 "print(len(d), h.hexdigest())\n");
	char *cmd[] = {"/usr/bin/python3", script, "1000000", NULL};
	same_output("48M", cmd, true);
}

/*
 * --limit auto: python3 fills ~120 MB and then works on a small part of it for a few seconds. The
 * output is the plain run's; the limit came down from the machine's memory to under what the program
 * held at its peak while it worked on the small part (its history, in the summary, shows it; the
 * reading of everything at the end may raise it again).
 */
static void auto_limit(void)
{
	char script[300], plain_out[300], under_out[300], stats[300];

	snprintf(script, sizeof(script), "%s/phases.py", tmpdir);
	snprintf(plain_out, sizeof(plain_out), "%s/plain.out", tmpdir);
	snprintf(under_out, sizeof(under_out), "%s/under.out", tmpdir);
	snprintf(stats, sizeof(stats), "%s/stats.json", tmpdir);
	check_write_file(script, "import hashlib, time\n"
				 "cold = [bytearray(b'%d' % i) * 100 for i in range(400000)]\n"
				 "hot = [bytearray(4096) for _ in range(1000)]\n"
				 "t0 = time.time()\n"
				 "while time.time() - t0 < 10:\n"
				 "    for h in hot:\n"
				 "        h[7] = (h[7] + 1) % 256\n"
				 "h = hashlib.sha256()\n"
				 "for c in cold:\n"
				 "    h.update(c)\n"
				 "print(len(cold), h.hexdigest())\n");
	char *plain[] = {"/usr/bin/python3", script, NULL};
	char *under[] = {uswap_bin, "run", "--limit",          "auto:min=16M", "--stats-json",
			 stats,     "--",  "/usr/bin/python3", script,         NULL};
	unlink(stats);
	CHECK_EQ(check_cmd(plain, plain_out, NULL), 0);
	CHECK_EQ(check_cmd(under, under_out, NULL), 0);

	size_t ls;
	char *js = check_slurp(stats, &ls);

	check_same_files(plain_out, under_out);
	CHECK(js && strstr(js, "\"limit_auto\":true"));
	long long peak = check_json_num(js, "peak_resident_bytes"), lowest = LLONG_MAX;
	const char *q = js ? strstr(js, "\"limit_history\":{\"step_ms\":") : NULL;
	size_t samples = 0;

	q = q ? strstr(q, "\"bytes\":[") : NULL;
	for (q = q ? strchr(q, '[') : NULL; q && *q != ']'; q = strpbrk(q + 1, ",]")) {
		long long v = atoll(q + 1);

		if (samples++ && v < lowest) /* the first sample is the start, before any look */
			lowest = v;
	}
	if (!(peak > 100ll << 20 && lowest < peak - peak / 50 && samples >= 5))
		fprintf(stderr, "[%s] peak %lld lowest limit %lld samples %zu: %s\n", check_test, peak,
			lowest, samples, js ? js : "(no stats)");
	CHECK(peak > 100ll << 20); /* the program's heap was managed */
	CHECK(lowest < peak - peak / 50);
	CHECK(samples >= 5);
	free(js);
}

/*
 * GNU sort of a 15 MB file, in memory (-S: 54 MB resident when run plainly), under 12 MB. Its
 * comparisons read lines all over its heap: ~600K swap-ins, about a minute here (40 MB under 16M took
 * 5-9 minutes, too near the runner's timeout on a loaded machine).
 */
static void sort_file(void)
{
	char in[300];
	FILE *f;

	snprintf(in, sizeof(in), "%s/sort.in", tmpdir);
	f = fopen(in, "w");
	CHECK(f != NULL);
	if (!f)
		return;
	for (unsigned i = 0; i < 600000; i++)
		fprintf(f, "%08u line %u %s\n", (unsigned)(seed_for(i) % 100000000u), i,
			i % 3 ? "abc" : "xyzzy");
	fclose(f);
	char *cmd[] = {"/usr/bin/sort", "-S", "300M", "--parallel=2", in, NULL};
	same_output("12M", cmd, true);
}

/*
 * mawk (Debian's awk), started by a shell, fills an array from a shuffled file and sums it in its
 * END loop (random access over the whole heap); the summary names it among the descendants, with
 * swapping seen there, since the shell itself swaps nothing.
 */
static void awk_under_shell(void)
{
	char in[300], prog[600], stats[300];
	size_t n = 150000, ls;
	FILE *f;

	snprintf(in, sizeof(in), "%s/nums.txt", tmpdir);
	f = fopen(in, "w");
	CHECK(f != NULL);
	if (!f)
		return;
	for (size_t i = 0; i < n; i++)
		fprintf(f, "%u\n", (unsigned)(seed_for(i) % 1000000000u));
	fclose(f);
	snprintf(prog, sizeof(prog),
		 "awk '{a[NR]=$1} END{s=0; for(i in a) s+=a[i]; printf \"%%d %%.0f\\n\", length(a), s}' %s",
		 in);
	char *cmd[] = {"/bin/sh", "-c", prog, NULL};
	same_output("12M", cmd, false);

	snprintf(stats, sizeof(stats), "%s/stats.json", tmpdir);
	char *js = check_slurp(stats, &ls), *awk = js ? strstr(js, "\"descendants\":[") : NULL;
	awk = awk ? strstr(awk, "\"comm\":\"awk\"") : NULL;
	if (!awk)
		fprintf(stderr, "[%s] no awk among the descendants: %s\n", check_test,
			js ? js : "(no stats)");
	CHECK(awk != NULL);
	if (awk) {
		CHECK(check_json_num(awk, "evicted_pages") > 0);
		CHECK(check_json_num(awk, "swapins") > 0);
		CHECK_EQ(check_json_num(awk, "load_failures"), 0);
	}
	free(js);
}

/*
 * A heap of its own on a PROT_NONE reservation, as JavaScript engines and other runtimes keep one:
 * python3 (through ctypes) reserves 64 MB, makes it read-write 256 KB at a time with mprotect() and
 * fills it, decommits parts (mprotect + MADV_DONTNEED, and a new PROT_NONE mapping over a part),
 * reads, recommits and checks that those read zero, then hashes everything. Under 16M the heap must
 * have gone through the layer: more pages evicted than the whole program could hold resident.
 */
static void reserved_heap(void)
{
	char script[300];

	snprintf(script, sizeof(script), "%s/reserve.py", tmpdir);
	check_write_file(
		script,
		"import ctypes, hashlib, sys\n"
		"libc = ctypes.CDLL(None, use_errno=True)\n"
		"libc.mmap.restype = ctypes.c_void_p\n"
		"libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, "
		"ctypes.c_int, ctypes.c_long]\n"
		"libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]\n"
		"libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]\n"
		"NONE, RW, ANON, FIXED, DONTNEED = 0, 3, 0x02 | 0x20 | 0x4000, 0x10, 4\n"
		"PAGE, CHUNK = 4096, 256 * 1024\n"
		"size = int(sys.argv[1]) << 20\n"
		"base = libc.mmap(None, size, NONE, ANON, -1, 0)\n"
		"assert base not in (None, ctypes.c_void_p(-1).value)\n"
		"view = (ctypes.c_char * size).from_address(base)\n"
		"def fill(off, n, tag):\n"
		"    for p in range(off, off + n, PAGE):\n"
		"        view[p:p + PAGE] = hashlib.sha256(b'%d-%d' % (p, tag)).digest() * 64 + bytes(2048)\n"
		"for off in range(0, size, CHUNK):\n"
		"    assert libc.mprotect(base + off, CHUNK, RW) == 0\n"
		"    fill(off, CHUNK, 1)\n"
		"q = size // 8\n"
		"assert libc.mprotect(base, q, NONE) == 0\n"
		"libc.madvise(base, q, DONTNEED)\n"
		"assert libc.mmap(base + q, q, NONE, ANON | FIXED, -1, 0) == base + q\n"
		"h = hashlib.sha256()\n"
		"for rnd in range(2):\n"
		"    for off in range(2 * q, size, PAGE * 7):\n"
		"        h.update(view[off:off + 64])\n"
		"assert libc.mprotect(base, 2 * q, RW) == 0\n"
		"assert view[0:PAGE] == bytes(PAGE) and view[q:q + PAGE] == bytes(PAGE)\n"
		"fill(0, 2 * q, 2)\n"
		"for off in range(0, size, PAGE):\n"
		"    h.update(view[off:off + PAGE])\n"
		"print(size >> 20, h.hexdigest())\n");
	char *cmd[] = {"/usr/bin/python3", script, "64", NULL};
	same_output("16M", cmd, true);
	check_evicted_over(8192);
}

/* Python's view of the C malloc family (which the preload library serves), for the scripts below. */
#define PY_MALLOC                                                                                            \
	"import ctypes, hashlib\n"                                                                           \
	"libc = ctypes.CDLL(None)\n"                                                                         \
	"libc.malloc.restype = libc.realloc.restype = ctypes.c_void_p\n"                                     \
	"libc.malloc.argtypes = [ctypes.c_size_t]\n"                                                         \
	"libc.realloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t]\n"                                       \
	"libc.free.argtypes = [ctypes.c_void_p]\n"                                                           \
	"libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]\n"

/*
 * Freed malloc blocks leave memory, as glibc's unmapped large blocks do: within a few seconds the
 * program sees its resident size fall by what it freed (the script prints "dropped" only then; plainly
 * glibc unmaps the blocks at once).
 * Then the blocks of a heap three times the limit, one of them grown by realloc (it moves, and the old
 * block is dropped), all read back identical.
 */
static void freed_blocks_leave(void)
{
	char script[300];

	snprintf(script, sizeof(script), "%s/freed.py", tmpdir);
	check_write_file(
		script, PY_MALLOC
		"import time\n"
		"MB = 1 << 20\n"
		"def rss():\n"
		"    return next(int(l.split()[1]) for l in open('/proc/self/status') if "
		"l.startswith('VmRSS')) // 1024\n"
		"def fill(p, n, tag):\n"
		"    ctypes.memmove(p, hashlib.sha256(b'%d' % tag).digest() * (n // 32), n)\n"
		"def digest(p, n):\n"
		"    return hashlib.sha256(ctypes.string_at(p, n)).hexdigest()\n"
		"blocks = [libc.malloc(8 * MB) for _ in range(8)]\n"
		"for i, p in enumerate(blocks):\n"
		"    fill(p, 8 * MB, i)\n"
		"before = rss()\n"
		"for p in blocks[2:]:\n"
		"    libc.free(p)\n"
		"time.sleep(3)\n"
		"print('dropped' if before - rss() >= 40 else 'kept %d of %d MiB' % (rss(), before))\n"
		"blocks = blocks[:2] + [libc.malloc(8 * MB) for _ in range(22)]\n"
		"for i, p in enumerate(blocks[2:]):\n"
		"    fill(p, 8 * MB, 100 + i)\n"
		"blocks[5] = libc.realloc(blocks[5], 12 * MB)\n"
		"fill(blocks[5] + 8 * MB, 4 * MB, 99)\n"
		"print(' '.join(digest(p, 12 * MB if i == 5 else 8 * MB)[:12] for i, p in "
		"enumerate(blocks)))\n");
	char *cmd[] = {"/usr/bin/python3", script, NULL};
	same_output("96M", cmd, true);
}

/*
 * fork() while other threads free and allocate big blocks (the preload keeps freed big blocks in a
 * cache with its own lock and fork handlers): 30 forks, each child allocates and frees big blocks
 * itself and checks data the parent swapped; no hang, and the same output as plainly.
 */
static void fork_while_freeing(void)
{
	char script[300];

	snprintf(script, sizeof(script), "%s/forkfree.py", tmpdir);
	check_write_file(script, PY_MALLOC
			 "import os, threading\n"
			 "keep = [hashlib.sha256(b'%d' % i).digest() * 32768 for i in range(32)]\n"
			 "want = hashlib.sha256(b''.join(keep)).hexdigest()\n"
			 "stop = False\n"
			 "def churn(t):\n"
			 "    i = 0\n"
			 "    while not stop:\n"
			 "        n = (128 << 10) + (i % 16) * 65536\n"
			 "        p = libc.malloc(n)\n"
			 "        libc.memset(p, i & 255, n)\n"
			 "        assert ctypes.string_at(p + n - 1, 1)[0] == i & 255\n"
			 "        libc.free(p)\n"
			 "        i += 1\n"
			 "th = [threading.Thread(target=churn, args=(t,)) for t in range(2)]\n"
			 "[x.start() for x in th]\n"
			 "bad = 0\n"
			 "for k in range(30):\n"
			 "    pid = os.fork()\n"
			 "    if pid == 0:\n"
			 "        for j in range(10):\n"
			 "            p = libc.malloc(300000 + j * 4096)\n"
			 "            libc.memset(p, j, 300000)\n"
			 "            libc.free(p)\n"
			 "        os._exit(0 if hashlib.sha256(b''.join(keep)).hexdigest() == want else 3)\n"
			 "    bad += os.waitpid(pid, 0)[1] != 0\n"
			 "stop = True\n"
			 "[x.join() for x in th]\n"
			 "print(bad, want == hashlib.sha256(b''.join(keep)).hexdigest())\n");
	char *cmd[] = {"/usr/bin/python3", script, NULL};
	same_output("24M", cmd, true);
}

/* The anonymous resident KiB a script wrote to @path (from /proc/PID/status) is under @max_kib. */
static void check_anon_under(const char *path, long long max_kib)
{
	size_t len;
	char *kb = check_slurp(path, &len);

	if (!kb || atoll(kb) >= max_kib)
		fprintf(stderr, "[%s] the process held %s KiB of anonymous memory\n", check_test,
			kb ? kb : "?");
	CHECK(kb && atoll(kb) < max_kib);
	free(kb);
}

/*
 * A forked child (no exec) that builds 1.2 GB of distinct pages, more than the heap the parent had
 * registered (its first 1 GiB chunk): with an instance of its own (the default) it stays near the
 * limit; kept plain (--fork-child plain) it still gets all the memory it asks for. The child hashes
 * every page it built; its anonymous resident size goes to a file.
 */
static void forked_child(const char *mode, bool managed)
{
	char script[300], rss[300], *opts[] = {"--fork-child", (char *)mode, NULL};

	snprintf(script, sizeof(script), "%s/forkgrow.py", tmpdir);
	snprintf(rss, sizeof(rss), "%s/forkgrow.rss", tmpdir);
	check_write_file(
		script,
		"import os, sys, hashlib\n"
		"pid = os.fork()\n"
		"if pid == 0:\n"
		"    x = [(b'%08d' % i) * 512 for i in range(300000)]\n"
		"    h = hashlib.sha256()\n"
		"    for b in x: h.update(b)\n"
		"    kb = [l.split()[1] for l in open('/proc/self/status') if l.startswith('RssAnon')][0]\n"
		"    open(sys.argv[1], 'w').write(kb)\n"
		"    print(h.hexdigest(), flush=True)\n"
		"    os._exit(0)\n"
		"print('child', os.waitpid(pid, 0)[1])\n");
	char *cmd[] = {"/usr/bin/python3", script, rss, NULL};
	same_output_opts("64M", opts, cmd, false);
	if (managed)
		check_anon_under(rss, 160 << 10); /* 1.2 GB plainly */
}

static void forked_child_own(void)
{
	forked_child("own", true);
}

static void forked_child_plain(void)
{
	forked_child("plain", false);
}

/*
 * A program that locks all its memory (mlockall(MCL_CURRENT | MCL_FUTURE), python3 through ctypes),
 * then builds 240 MB of distinct pages. The kernel's mlockall() would fault in the heap's whole
 * reservation (gigabytes, before anything is swapped): under uswap the memory under the
 * limit stays swappable (the program stays near the limit), the rest is locked, and a small mapping
 * made after the call is locked too (MCL_FUTURE). The script writes its anonymous resident KiB and
 * how much more was locked after its mmap() to a file.
 */
static void locked_memory(void)
{
	char script[300], rss[300];

	snprintf(script, sizeof(script), "%s/lockall.py", tmpdir);
	snprintf(rss, sizeof(rss), "%s/lockall.rss", tmpdir);
	check_write_file(script, "import ctypes, hashlib, mmap, sys\n"
				 "libc = ctypes.CDLL(None, use_errno=True)\n"
				 "if libc.mlockall(3): raise OSError(ctypes.get_errno(), 'mlockall')\n"
				 "def st(k): return int([l.split()[1] for l in open('/proc/self/status') if "
				 "l.startswith(k)][0])\n"
				 "x = [(b'%08d' % i) * 512 for i in range(60000)]\n"
				 "h = hashlib.sha256()\n"
				 "for b in x: h.update(b)\n"
				 "before = st('VmLck')\n"
				 "m = mmap.mmap(-1, 65536)\n"
				 "m.write(b'y' * 65536)\n"
				 "more = st('VmLck') - before\n"
				 "open(sys.argv[1], 'w').write('%d %d' % (st('RssAnon'), more))\n"
				 "print(h.hexdigest(), more >= 64)\n");
	char *cmd[] = {"/usr/bin/python3", script, rss, NULL};
	same_output("48M", cmd, true);
	check_anon_under(rss, 150 << 10); /* ~250 MB plainly, all of it locked */
}

/*
 * Address space: under `ulimit -v` (3 GB) the heap's reservation is made to fit (the full 64 GiB
 * would fail start-up); and a heap smaller than the program needs (USWAP_HEAP=64M) hands the rest to
 * glibc's malloc instead of failing the program's allocations (python3 raised MemoryError).
 */
static void address_space_limits(void)
{
	char script[300], rss[300], line[800];

	snprintf(script, sizeof(script), "%s/pages.py", tmpdir);
	snprintf(rss, sizeof(rss), "%s/pages.rss", tmpdir);
	check_write_file(
		script,
		"import hashlib, sys\n"
		"x = [(b'%08d' % i) * 512 for i in range(75000)]\n"
		"h = hashlib.sha256()\n"
		"for b in x: h.update(b)\n"
		"kb = [l.split()[1] for l in open('/proc/self/status') if l.startswith('RssAnon')][0]\n"
		"open(sys.argv[1], 'w').write(kb)\n"
		"print(h.hexdigest())\n");
	snprintf(line, sizeof(line), "ulimit -v 3000000 && exec /usr/bin/python3 %s %s", script, rss);
	char *cmd[] = {"/bin/sh", "-c", line, NULL};
	same_output("48M", cmd, true);
	check_anon_under(rss, 150 << 10); /* 300 MB plainly */

	snprintf(line, sizeof(line), "USWAP_HEAP=64M exec /usr/bin/python3 %s %s", script, rss);
	same_output("48M", cmd, false);
}

/* Build @src (C text) into @bin with cc; false (and the case skipped) without a compiler. */
static bool build_c(const char *name, const char *src, char *bin, size_t len)
{
	char path[300], cc[800];

	snprintf(path, sizeof(path), "%s/%s.c", tmpdir, name);
	snprintf(bin, len, "%s/%s", tmpdir, name);
	check_write_file(path, src);
	snprintf(cc, sizeof(cc), "cc -O1 -o %s %s 2>&1", bin, path);
	if (system(cc) != 0) {
		printf("  (cannot build %s: case skipped)\n", name);
		return false;
	}
	return true;
}

/*
 * The address space uswap takes for itself under `ulimit -v` (1 GB): a program mallocs and fills
 * 448 MiB in 16 MiB blocks (960 MiB is possible plainly). Each of uswap's five threads used to get a
 * glibc arena of its own (a 64 MiB reservation, made by the free() of its start-up block), and the
 * program got 336 MiB.
 */
static void address_space_ours(void)
{
	char bin[300], line[800];

	if (!build_c("as448",
		     "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n"
		     "int main(void) {\n"
		     "\tfor (int i = 0; i < 28; i++) {\n"
		     "\t\tchar *p = malloc(16 << 20);\n"
		     "\t\tif (!p) { printf(\"malloc failed after %d MiB\\n\", 16 * i); return 1; }\n"
		     "\t\tmemset(p, i, 16 << 20);\n"
		     "\t}\n"
		     "\tputs(\"448 MiB\");\n"
		     "\treturn 0;\n}\n",
		     bin, sizeof(bin)))
		return;
	snprintf(line, sizeof(line), "ulimit -v 1000000 && exec %s", bin);
	char *cmd[] = {"/bin/sh", "-c", line, NULL};
	same_output("64M", cmd, true);
}

/*
 * Programs that treat every descriptor as theirs: python3 closes all of them (os.closerange(): a
 * close_range() call; then close() of each one /proc/self/fd lists, and a dup2() onto each
 * userfaultfd) with 240 MB swapped, then reads it all back and builds more; a bash script builds an
 * array under 16M, then `exec 6>file` (fd 6 would be the instance's userfaultfd, were it not moved
 * high) and sums it. Losing those descriptors would crash them (SIGSEGV on the next swapped page).
 */
static void descriptors_taken(void)
{
	char script[300], line[800];

	snprintf(script, sizeof(script), "%s/closeall.py", tmpdir);
	check_write_file(script,
			 "import os, hashlib\n"
			 "x = [(b'%08d' % i) * 512 for i in range(60000)]\n"
			 "os.closerange(3, 65536)\n"
			 "for fd in [int(f) for f in os.listdir('/proc/self/fd')]:\n"
			 "    try:\n"
			 "        if 'userfaultfd' in os.readlink('/proc/self/fd/%d' % fd): os.dup2(0, fd)\n"
			 "    except OSError: pass\n"
			 "    if fd > 2:\n"
			 "        try: os.close(fd)\n"
			 "        except OSError: pass\n"
			 "h = hashlib.sha256()\n"
			 "for b in x: h.update(b)\n"
			 "y = [(b'%08d' % i) * 512 for i in range(30000)]\n"
			 "print(h.hexdigest(), hashlib.sha256(b''.join(y)).hexdigest())\n");
	char *cmd[] = {"/usr/bin/python3", script, NULL};
	same_output("48M", cmd, true);

	snprintf(line, sizeof(line),
		 "a=($(seq 1 300000)); exec 6>%s/fd6 7<%s; s=0; "
		 "for x in \"${a[@]}\"; do s=$((s+x)); done; echo $s ${#a[@]}",
		 tmpdir, script);
	char *sh[] = {"/bin/bash", "-c", line, NULL};
	same_output("16M", sh, true);
}

/*
 * What a program finds of the instance's descriptors: nothing, but in /proc/self/fd. A C program
 * probes every number below its soft RLIMIT_NOFILE with fstat(), fcntl(F_GETFD) and statx() by
 * AT_EMPTY_PATH, then execs itself twice: a child under the preload (an instance of its own) probes
 * the same way (python3's test_subprocess.test_pass_fds_redirected found its ten descriptors so), and
 * a child without the preload's environment lists /proc/self/fd with each link's kind: no descriptor
 * of the parent's instance or of `uswap run` may cross exec. Same output as plainly.
 */
static void descriptors_unseen(void)
{
	char bin[300];

	if (!build_c(
		    "fds",
		    "#define _GNU_SOURCE\n"
		    "#include <ctype.h>\n#include <dirent.h>\n#include <fcntl.h>\n#include <stdio.h>\n"
		    "#include <stdlib.h>\n#include <string.h>\n#include <sys/stat.h>\n#include <sys/wait.h>\n"
		    "#include <unistd.h>\n"
		    "static void probe(const char *who) {\n"
		    "\tstruct stat st;\n\tstruct statx sx;\n"
		    "\tprintf(\"%s:\", who);\n"
		    "\tfor (int fd = 0; fd < sysconf(_SC_OPEN_MAX); fd++) {\n"
		    "\t\tint a = !fstat(fd, &st), b = fcntl(fd, F_GETFD) >= 0,\n"
		    "\t\t    c = !statx(fd, \"\", AT_EMPTY_PATH, STATX_TYPE, &sx);\n"
		    "\t\tif (a || b || c) printf(\" %d%s\", fd, a && b && c ? \"\" : \"(not to all)\");\n"
		    "\t}\n"
		    "\tputs(\"\");\n"
		    "}\n"
		    "static void list(void) {\n"
		    "\tDIR *d = opendir(\"/proc/self/fd\");\n\tstruct dirent *e;\n"
		    "\tprintf(\"child without the preload, /proc/self/fd:\");\n"
		    "\twhile (d && (e = readdir(d))) {\n"
		    "\t\tchar p[300], t[256], k[256];\n\t\tint n = 0;\n"
		    "\t\tif (e->d_name[0] == '.' || atoi(e->d_name) == dirfd(d)) continue;\n"
		    "\t\tsnprintf(p, sizeof(p), \"/proc/self/fd/%s\", e->d_name);\n"
		    "\t\tssize_t len = readlink(p, t, sizeof(t) - 1);\n"
		    "\t\tt[len > 0 ? len : 0] = 0;\n"
		    "\t\tfor (char *s = t; *s; s++) if (!isdigit((unsigned char)*s)) k[n++] = *s;\n"
		    "\t\tk[n] = 0;\n"
		    "\t\tprintf(\" %s:%s\", e->d_name, t[0] == '/' ? \"file\" : k);\n"
		    "\t}\n"
		    "\tputs(\"\");\n"
		    "}\n"
		    "int main(int argc, char **argv) {\n"
		    "\tchar *none[] = {NULL};\n"
		    "\tif (argc > 1) { argv[1][0] == 'p' ? probe(\"child under the preload\") : list(); "
		    "return 0; }\n"
		    "\tprobe(\"program\");\n"
		    "\tfflush(stdout);\n"
		    "\tfor (int i = 0; i < 2; i++) {\n"
		    "\t\tpid_t pid = fork();\n"
		    "\t\tif (!pid) {\n"
		    "\t\t\tchar *args[] = {argv[0], i ? \"list\" : \"probe\", NULL};\n"
		    "\t\t\texecve(argv[0], args, i ? none : environ);\n"
		    "\t\t\t_exit(127);\n"
		    "\t\t}\n"
		    "\t\twaitpid(pid, NULL, 0);\n"
		    "\t}\n"
		    "\treturn 0;\n}\n",
		    bin, sizeof(bin)))
		return;
	char *cmd[] = {bin, NULL};
	same_output("32M", cmd, false);

	/* With a Redis tier: hiredis opened its sockets at the lowest free numbers, not close-on-exec. */
	char plain_out[300], under_out[300], tier[64];
	struct rserver s;

	if (!rserver_available()) {
		fprintf(stderr, "[%s] redis-server not installed (scripts/deps.sh installs it)\n",
			check_test);
		CHECK(rserver_available());
		return;
	}
	CHECK_EQ(rserver_start(&s, "noeviction", NULL), 0);
	snprintf(plain_out, sizeof(plain_out), "%s/plain.out", tmpdir);
	snprintf(under_out, sizeof(under_out), "%s/under-redis.out", tmpdir);
	snprintf(tier, sizeof(tier), "redis://127.0.0.1:%d", s.port);
	char *argv[] = {uswap_bin, "run", "--limit", "32M", "--tiers", tier, "--", bin, NULL};
	int st = check_cmd(argv, under_out, NULL);

	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	check_same_files(plain_out, under_out);
	rserver_kill(&s);
}

/*
 * Big blocks, python3 through ctypes, under 32M: a buffer grown 64 KiB at a time to 128 MB with
 * realloc() (its pages are swapped while the block moves: twice its size each time it outgrows
 * itself), every byte must arrive; then blocks of 1-4 MB (freed into the cache of big blocks) and of
 * 24-64 MB (dropped when freed) filled, freed and calloc()'d again at odd sizes must read as zero
 * (calloc drops the whole pages instead of writing them).
 */
static void big_blocks(void)
{
	char script[300];

	snprintf(script, sizeof(script), "%s/grow.py", tmpdir);
	check_write_file(
		script,
		"import ctypes, hashlib\n"
		"libc = ctypes.CDLL(None)\n"
		"for f in (libc.realloc, libc.calloc, libc.malloc): f.restype = ctypes.c_void_p\n"
		"libc.realloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t]\n"
		"libc.calloc.argtypes = [ctypes.c_size_t, ctypes.c_size_t]\n"
		"libc.malloc.argtypes = [ctypes.c_size_t]\n"
		"libc.free.argtypes = [ctypes.c_void_p]\n"
		"p, n = None, 0\n"
		"for i in range(2048):\n"
		"    p = libc.realloc(p, n + 65536)\n"
		"    ctypes.memmove(p + n, (b'%08d' % i) * 8192, 65536)\n"
		"    n += 65536\n"
		"print(n, hashlib.sha256(ctypes.string_at(p, n)).hexdigest())\n"
		"libc.free(p)\n"
		"bad = 0\n"
		"for r in range(12):\n"
		"    m = ((1 << 20) + r * (300 << 10) if r % 2 else (24 << 20) + r * (4 << 20)) + r * 1237\n"
		"    q = libc.malloc(m)\n"
		"    ctypes.memset(q, 0x5a, m)\n"
		"    libc.free(q)\n"
		"    z = libc.calloc(1, m - r * 100)\n"
		"    bad += (m - r * 100) - ctypes.string_at(z, m - r * 100).count(0)\n"
		"    libc.free(z)\n"
		"print('nonzero bytes', bad)\n");
	char *cmd[] = {"/usr/bin/python3", script, NULL};
	same_output("32M", cmd, true);
}

/*
 * node (V8): its heap is a PROT_NONE reservation made read-write 256 KB at a time, with guard pages
 * and MADV_DONTFORK; a Map of 200K objects under 32M must give the same output, with the heap swapped
 * (more pages evicted than the limit holds). Once, the first touch next to a guard page looped for ever.
 */
static void node_map(void)
{
	char script[300];

	if (access("/usr/bin/node", X_OK)) {
		fprintf(stderr, "[%s] no /usr/bin/node (scripts/deps.sh installs nodejs)\n", check_test);
		CHECK(0);
		return;
	}
	snprintf(script, sizeof(script), "%s/map.js", tmpdir);
	check_write_file(
		script,
		"const n = +process.argv[2];\n"
		"const m = new Map();\n"
		"for (let i = 0; i < n; i++) m.set('k' + i, { i, s: 'v' + ((i * 7919) % 100003) });\n"
		"let h = 0;\n"
		"for (let i = 0; i < n; i++) { const o = m.get('k' + i); h = (h * 31 + o.i + o.s.length) "
		">>> 0; }\n"
		"console.log(m.size, h);\n");
	char *cmd[] = {"/usr/bin/node", script, "200000", NULL};
	same_output("32M", cmd, true);
	check_evicted_over(8192);
}

/* A shell that forks (command substitution) and execs python3 and sort: children start clean. */
static void fork_and_exec(void)
{
	char *cmd[] = {"/bin/sh", "-c",
		       "x=$(/usr/bin/python3 -c 'print(sum(i*i for i in range(10**6)))'); echo \"$x\"; "
		       "seq 1 200000 | sort -r | head -3; /usr/bin/python3 -c 'import os, sys; "
		       "sys.stdout.flush(); p = os.fork(); "
		       "print(\"child\") if p == 0 else (os.waitpid(p, 0), print(\"parent\"))'",
		       NULL};
	same_output("32M", cmd, false);
}

/* Four python threads building and hashing their own lists. */
static void threads(void)
{
	char script[300];

	snprintf(script, sizeof(script), "%s/threads.py", tmpdir);
	check_write_file(script, "import threading, hashlib\n"
				 "out = [None] * 4\n"
				 "def work(t):\n"
				 "    l = [('%d-%d' % (t, i)) * 4 for i in range(300000)]\n"
				 "    out[t] = hashlib.sha256(''.join(l).encode()).hexdigest()\n"
				 "th = [threading.Thread(target=work, args=(t,)) for t in range(4)]\n"
				 "[x.start() for x in th]\n"
				 "[x.join() for x in th]\n"
				 "print(out)\n");
	char *cmd[] = {"/usr/bin/python3", script, NULL};
	same_output("32M", cmd, false);
}

/*
 * Signals the program blocks in all its threads stay pending while uswap works: taken by sigwait()
 * (main thread alone, then with three threads that block them too) and by a signalfd; no handler
 * runs and no default action kills. A uswap thread that took them printed "handler ran" or died.
 */
static void blocked_signals(void)
{
	char script[300];

	snprintf(script, sizeof(script), "%s/signals.py", tmpdir);
	check_write_file(
		script,
		"import ctypes, hashlib, os, select, signal, struct, threading\n"
		"x = bytearray(48 << 20)\n"
		"for i in range(0, len(x), 4096): x[i] = 1 + i % 251\n"
		"signal.signal(signal.SIGUSR1, lambda s, f: print('handler ran'))\n"
		"signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM])\n"
		"os.kill(os.getpid(), signal.SIGUSR1)\n"
		"print('pending:', sorted(signal.sigpending()))\n"
		"si = signal.sigtimedwait([signal.SIGUSR1], 5)\n"
		"print('sigwait:', si and si.si_signo)\n"
		"ev = threading.Event()\n"
		"out = [None] * 3\n"
		"def work(t):\n"
		"    l = [bytes([t + 1]) * 4000 + os.urandom(96) for _ in range(3000)]\n"
		"    ev.wait()\n"
		"    out[t] = len(b''.join(l))\n"
		"th = [threading.Thread(target=work, args=(t,)) for t in range(3)]\n"
		"[t.start() for t in th]\n"
		"os.kill(os.getpid(), signal.SIGUSR2)\n"
		"print('pending:', sorted(signal.sigpending()))\n"
		"si = signal.sigtimedwait([signal.SIGUSR2], 5)\n"
		"print('sigwait in threads:', si and si.si_signo)\n"
		"ev.set()\n"
		"[t.join() for t in th]\n"
		"print(out)\n"
		"libc = ctypes.CDLL(None, use_errno=True)\n"
		"mask = (ctypes.c_ulong * 16)()\n"
		"mask[0] = 1 << (signal.SIGTERM - 1)\n"
		"fd = libc.signalfd(-1, mask, 0)\n"
		"os.kill(os.getpid(), signal.SIGTERM)\n"
		"r, _, _ = select.select([fd], [], [], 5)\n"
		"print('signalfd:', struct.unpack_from('I', os.read(fd, 128))[0] if r else None)\n"
		"print(hashlib.sha256(x).hexdigest())\n");
	char *cmd[] = {"/usr/bin/python3", script, NULL};
	same_output("16M", cmd, true);
}

/*
 * The program's madvise() of its own mappings reaches the instance first (uswap run has no remove
 * events): MADV_DONTNEED of a part that is swapped out, and of one that is resident, reads zero
 * afterwards, the rest keeps its data, and the range works again; MADV_FREE leaves each page either
 * as it was or zero (the kernel's choice plainly, zero under uswap).
 */
static void discarded_pages(void)
{
	char script[300];

	snprintf(script, sizeof(script), "%s/discard.py", tmpdir);
	check_write_file(script, "import ctypes, hashlib\n"
				 "libc = ctypes.CDLL(None, use_errno=True)\n"
				 "libc.mmap.restype = ctypes.c_void_p\n"
				 "libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, "
				 "ctypes.c_int, ctypes.c_int, ctypes.c_long]\n"
				 "libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]\n"
				 "M = 1 << 20\n"
				 "n = 64 * M\n"
				 "p = libc.mmap(None, n, 3, 0x22, -1, 0)\n"
				 "buf = (ctypes.c_char * n).from_address(p)\n"
				 "def tag(i): return (b'%015d|' % i) * 4\n"
				 "for i in range(0, n, 4096): buf[i:i + 64] = tag(i)\n"
				 "print('dontneed swapped', libc.madvise(p + 8 * M, 16 * M, 4))\n"
				 "print('dontneed resident', libc.madvise(p + 56 * M, 4 * M, 4))\n"
				 "print('free', libc.madvise(p + 60 * M, 4 * M, 8))\n"
				 "bad = 0\n"
				 "for i in range(0, 60 * M, 4096):\n"
				 "    want = bytes(64) if 8 * M <= i < 24 * M or i >= 56 * M else tag(i)\n"
				 "    bad += buf[i:i + 64] != want\n"
				 "for i in range(60 * M, n, 4096):\n"
				 "    bad += buf[i:i + 64] not in (bytes(64), tag(i))\n"
				 "print('bad pages', bad)\n"
				 "for i in range(0, n, 4096): buf[i:i + 64] = tag(i + 1)\n"
				 "print(hashlib.sha256(buf.raw).hexdigest())\n");
	char *cmd[] = {"/usr/bin/python3", script, NULL};
	same_output("16M", cmd, true);
}

/*
 * A program that lowers RLIMIT_NOFILE to its own descriptors + 3 and execs a child, which opens 3
 * files: the same as plainly. The child's instance would take the descriptors it needs: it runs
 * unmanaged instead (said on stderr).
 */
static void few_descriptors(void)
{
	char script[300];

	snprintf(script, sizeof(script), "%s/fds.py", tmpdir);
	check_write_file(script, "import os, resource, sys\n"
				 "if len(sys.argv) > 1:\n"
				 "    fs = [open('/dev/null') for _ in range(3)]\n"
				 "    print('child opened', len(fs))\n"
				 "    sys.exit(0)\n"
				 "held = len([f for f in os.listdir('/proc/self/fd') if int(f) < 100]) - 1\n"
				 "hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]\n"
				 "resource.setrlimit(resource.RLIMIT_NOFILE, (held + 3, hard))\n"
				 "sys.stdout.flush()\n"
				 "os.execv(sys.executable, [sys.executable, sys.argv[0], 'child'])\n");
	char *cmd[] = {"/usr/bin/python3", script, NULL};
	same_output("32M", cmd, false);
}

/*
 * Libraries dlopen()ed RTLD_GLOBAL, then 256 MB written under 16M and read back. The dynamic
 * linker's link maps of such libraries were malloc()ed in the arena and went cold; the first swap-in
 * made a fault handler call a function of the library for the first time, and lazy binding walks
 * those link maps: the handler faulted on a page only it could bring back (hung every time; python3's
 * test_ctypes hung in the same way).
 */
static void dlopen_global(void)
{
	char script[300];

	snprintf(script, sizeof(script), "%s/dlopen.py", tmpdir);
	check_write_file(script,
			 "import ctypes, mmap\n"
			 "libs = [ctypes.CDLL(n, mode=ctypes.RTLD_GLOBAL) for n in\n"
			 "        ('libz.so.1', 'libbz2.so.1.0', 'liblzma.so.5', 'libexpat.so.1')]\n"
			 "n = 256 << 20\n"
			 "m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)\n"
			 "for i in range(0, n, 4096):\n"
			 "    m[i:i + 8] = i.to_bytes(8, 'little')\n"
			 "print(sum(int.from_bytes(m[i:i + 8], 'little') for i in range(0, n, 4096)))\n");
	char *cmd[] = {"/usr/bin/python3", script, NULL};
	same_output("16M", cmd, true);
}

/*
 * A child started as another user (subprocess's user=, as su or a daemon dropping root do) that gets
 * no userfaultfd there (vm.unprivileged_userfaultfd at 0, /dev/userfaultfd root's): it runs
 * unmanaged, said on stderr, where it exited with status 2 (python3's test_subprocess.test_user).
 */
static void child_as_other_user(void)
{
	char script[300];

	if (getuid() != 0) {
		fprintf(stderr, "[%s] skipped: needs root\n", check_test);
		return;
	}
	snprintf(script, sizeof(script), "%s/user.py", tmpdir);
	check_write_file(
		script,
		"import subprocess, sys\n"
		"buf = bytearray(64 << 20)\n"
		"for i in range(0, len(buf), 4096): buf[i] = i % 251\n"
		"print(subprocess.check_output([sys.executable, '-c', 'import os; print(os.getuid())'],\n"
		"                              user=65534, group=65534, extra_groups=[]).decode().strip())\n"
		"print(sum(buf[i] for i in range(0, len(buf), 4096)))\n");
	char *cmd[] = {"/usr/bin/python3", script, NULL};
	same_output("16M", cmd, true);
}

/*
 * malloc() of more than any arena holds returns NULL, as glibc's does (numpy's tests ask for 2^63 - 1
 * bytes and expect MemoryError): the arena's growth doubled a chunk past 2^63 to 0, and looped.
 */
static void impossible_malloc(void)
{
	char script[300];

	snprintf(script, sizeof(script), "%s/huge.py", tmpdir);
	check_write_file(
		script, "import ctypes\n"
			"libc = ctypes.CDLL(None)\n"
			"libc.malloc.restype = libc.calloc.restype = libc.realloc.restype = ctypes.c_void_p\n"
			"buf = bytearray(64 << 20)\n"
			"for i in range(0, len(buf), 4096): buf[i] = i % 251\n"
			"for n in (2**63 - 1, 2**63, 2**64 - 1, 2**62):\n"
			"    print(n, libc.malloc(ctypes.c_size_t(n)), libc.calloc(ctypes.c_size_t(n), 1),\n"
			"          libc.realloc(None, ctypes.c_size_t(n)))\n"
			"print(sum(buf[i] for i in range(0, len(buf), 4096)))\n");
	char *cmd[] = {"/usr/bin/python3", script, NULL};
	same_output("16M", cmd, true);
}

static int write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	int ret;

	if (!f)
		return -1;
	ret = fputs(text, f) < 0 ? -1 : 0;
	return fclose(f) || ret ? -1 : 0;
}

/*
 * A user who is not root, in each setup that allows userfaultfd: read/write access to
 * /dev/userfaultfd (the sysctl at 0), and vm.unprivileged_userfaultfd=1 (the device closed); in
 * neither, uswap run refuses with exit status 2 and says what to change. The program's output is the
 * same as its plain run's. The machine's sysctl and the device's mode are put back after.
 */
static void userfaultfd_access(void)
{
	const char *sysctl_path = "/proc/sys/vm/unprivileged_userfaultfd", *dev = "/dev/userfaultfd";
	char script[300], out[300], err[300], plain_out[300], saved[16] = "";
	struct stat ds;
	const uid_t nobody = 65534;
	FILE *f;

	if (getuid() != 0 || stat(dev, &ds) || access(sysctl_path, W_OK)) {
		fprintf(stderr, "[%s] skipped: needs root, %s and the sysctl\n", check_test, dev);
		return;
	}
	f = fopen(sysctl_path, "r");
	if (!f || !fgets(saved, sizeof(saved), f)) {
		CHECK(!"cannot read the sysctl");
		if (f)
			fclose(f);
		return;
	}
	fclose(f);
	snprintf(script, sizeof(script), "%s/uffd_user.py", tmpdir);
	snprintf(out, sizeof(out), "%s/uffd_user.out", tmpdir);
	snprintf(err, sizeof(err), "%s/uffd_user.err", tmpdir);
	snprintf(plain_out, sizeof(plain_out), "%s/uffd_user.plain", tmpdir);
	check_write_file(script, "import hashlib\n"
				 "l = [(b'%08d' % i) * 128 for i in range(40000)]\n"
				 "print(len(l), hashlib.sha256(b''.join(l)).hexdigest())\n");
	chmod(tmpdir, 0755);
	chmod(script, 0644);
	/*
	 * The command and its preload library, copied where the user can reach them: the build tree
	 * may sit in a directory only root enters (a clone in a `mktemp -d` directory, mode 0700).
	 */
	char bin[300], lib[600], *slash = strrchr(uswap_bin, '/');

	snprintf(bin, sizeof(bin), "%s/uswap", tmpdir);
	snprintf(lib, sizeof(lib), "%.*s/libuswap-preload.so", slash ? (int)(slash - uswap_bin) : 1,
		 slash ? uswap_bin : ".");
	char *copy[] = {"/bin/cp", uswap_bin, lib, tmpdir, NULL};

	CHECK_EQ(check_cmd(copy, NULL, NULL), 0);
	char *plain[] = {"/usr/bin/python3", script, NULL};
	char *under[] = {bin, "run", "--limit", "16M", "--", "/usr/bin/python3", script, NULL};
	size_t la, lb;
	int st = run_as(nobody, plain, plain_out, err);
	char *a = check_slurp(plain_out, &la), *b;

	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	/* /dev/userfaultfd open to the user, the sysctl at 0 */
	CHECK_EQ(write_text(sysctl_path, "0\n"), 0);
	CHECK_EQ(chmod(dev, 0666), 0);
	st = run_as(nobody, under, out, err);
	b = check_slurp(out, &lb);
	if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
		size_t le;
		char *e = check_slurp(err, &le);

		fprintf(stderr, "[%s] with /dev/userfaultfd: status %#x, %s\n", check_test, st, e ? e : "");
		free(e);
	}
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK(a && b && la == lb && !memcmp(a, b, la));
	free(b);
	/* the sysctl at 1, the device closed */
	CHECK_EQ(chmod(dev, ds.st_mode & 07777), 0);
	CHECK_EQ(write_text(sysctl_path, "1\n"), 0);
	st = run_as(nobody, under, out, err);
	b = check_slurp(out, &lb);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK(a && b && la == lb && !memcmp(a, b, la));
	free(b);
	/* neither: refused before the program starts, with what to change */
	CHECK_EQ(write_text(sysctl_path, "0\n"), 0);
	st = run_as(nobody, under, out, err);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2);
	b = check_slurp(err, &lb);
	CHECK(b && strstr(b, "/dev/userfaultfd") && strstr(b, "unprivileged_userfaultfd"));
	free(b);
	free(a);
	CHECK_EQ(write_text(sysctl_path, saved), 0);
	CHECK_EQ(chmod(dev, ds.st_mode & 07777), 0);
	chmod(tmpdir, 0700);
}

static void status_and_signals_pass_through(void)
{
	char *exit7[] = {uswap_bin, "run", "--limit", "16M", "--", "/bin/sh", "-c", "exit 7", NULL};
	char *term[] = {uswap_bin, "run", "--limit", "16M", "--", "/bin/sh", "-c", "kill -TERM $$", NULL};
	int st;

	st = check_cmd(exit7, NULL, NULL);
	CHECK(WIFEXITED(st));
	CHECK_EQ(WEXITSTATUS(st), 7);
	st = check_cmd(term, NULL, NULL);
	CHECK(WIFSIGNALED(st));
	CHECK_EQ(WTERMSIG(st), SIGTERM);
}

/* Whether process @pid is gone or a zombie. */
static bool process_gone(pid_t pid)
{
	char path[64], buf[256];
	FILE *f;
	bool gone = true;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (f) {
		const char *p = fgets(buf, sizeof(buf), f) ? strrchr(buf, ')') : NULL;

		gone = p && p[1] == ' ' && p[2] == 'Z';
		fclose(f);
	}
	return gone;
}

/* Start `uswap run --limit 16M -- /bin/sh -c SCRIPT`; *prog: the program's pid once it runs (0: none). */
static pid_t start_runner(const char *script, pid_t *prog)
{
	pid_t runner = fork();

	if (runner == 0) {
		int fd = open("/dev/null", O_WRONLY);

		dup2(fd, 1);
		dup2(fd, 2);
		execl(uswap_bin, uswap_bin, "run", "--limit", "16M", "--", "/bin/sh", "-c", script,
		      (char *)NULL);
		_exit(126);
	}
	*prog = 0;
	for (int i = 0; i < 500 && *prog <= 0; i++) {
		char path[64];
		FILE *f;

		snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)runner, (int)runner);
		f = fopen(path, "r");
		if (f) {
			if (fscanf(f, "%d", prog) != 1)
				*prog = 0;
			fclose(f);
		}
		if (*prog <= 0)
			usleep(10000);
	}
	return runner;
}

/*
 * A SIGTERM (or SIGUSR1) sent to the runner reaches the program (here it exits 3, 4 on it); SIGKILL cannot be passed
 * on, and a runner killed by it takes the program along.
 */
static void signals_to_runner(void)
{
	char ready[300], script[400];
	int st = -1;

	/* The shell says when its trap is set: a SIGTERM before that would kill it by default. */
	snprintf(ready, sizeof(ready), "%s/trap-set", tmpdir);
	unlink(ready);
	snprintf(script, sizeof(script), "trap 'kill $!; exit 3' TERM; : > '%s'; sleep 60 & wait", ready);
	pid_t prog, runner = start_runner(script, &prog);

	CHECK(prog > 0);
	for (int i = 0; i < 1000 && access(ready, F_OK); i++)
		usleep(10000);
	CHECK_EQ(access(ready, F_OK), 0);
	kill(runner, SIGTERM);
	waitpid(runner, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 3);

	/* SIGUSR1 too (it killed the runner, and the program with it: status SIGUSR1) */
	unlink(ready);
	snprintf(script, sizeof(script), "trap 'kill $!; exit 4' USR1; : > '%s'; sleep 60 & wait", ready);
	runner = start_runner(script, &prog);
	CHECK(prog > 0);
	for (int i = 0; i < 1000 && access(ready, F_OK); i++)
		usleep(10000);
	CHECK_EQ(access(ready, F_OK), 0);
	kill(runner, SIGUSR1);
	waitpid(runner, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 4);
	char shm[64];

	runner = start_runner("exec sleep 60", &prog);
	CHECK(prog > 0);
	snprintf(shm, sizeof(shm), "/dev/shm/uswap.%d", (int)prog);
	for (int i = 0; i < 500 && access(shm, F_OK);
	     i++) /* its preload library has started (the shell's or sleep's: one pid) */
		usleep(10000);
	kill(runner, SIGKILL);
	waitpid(runner, NULL, 0);
	bool gone = false;

	for (int i = 0; i < 500 && !gone; i++) {
		gone = prog > 0 && process_gone(prog);
		if (!gone)
			usleep(10000);
	}
	CHECK(gone);
	if (!gone && prog > 0)
		kill(prog, SIGKILL);
	/* Killed, it could not remove its statistics file: `uswap stat` says it is dead and removes it. */
	char err[300], pid[16];

	snprintf(err, sizeof(err), "%s/stat-err.txt", tmpdir);
	snprintf(pid, sizeof(pid), "%d", (int)prog);
	CHECK_EQ(access(shm, F_OK), 0);
	char *stat_argv[] = {uswap_bin, "stat", pid, NULL};

	st = check_cmd(stat_argv, NULL, err);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1);
	size_t said_len;
	char *said = check_slurp(err, &said_len);

	CHECK(said && strstr(said, "died without exiting"));
	free(said);
	CHECK(access(shm, F_OK) != 0);
	st = check_cmd(stat_argv, NULL, err);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1); /* no statistics any more */
}

/*
 * Pages of @n at @va in ELF core @path that hold the pattern of the program in core_dump() (each word
 * of page i is 0xC0DE000000000000 | i); -1 if the core cannot be read.
 */
static long core_pattern_pages(const char *path, uint64_t va, long n)
{
	Elf64_Ehdr eh;
	long good = 0;
	uint64_t *page = malloc(4096);
	int fd = open(path, O_RDONLY);

	if (fd < 0 || !page || pread(fd, &eh, sizeof(eh), 0) != sizeof(eh) ||
	    memcmp(eh.e_ident, ELFMAG, SELFMAG) || eh.e_type != ET_CORE || eh.e_phnum == PN_XNUM) {
		if (fd >= 0)
			close(fd);
		free(page);
		return -1;
	}
	for (long i = 0; i < n; i++) {
		uint64_t a = va + (uint64_t)i * 4096;

		for (unsigned k = 0; k < eh.e_phnum; k++) {
			Elf64_Phdr ph;

			if (pread(fd, &ph, sizeof(ph), (off_t)(eh.e_phoff + (uint64_t)k * eh.e_phentsize)) !=
			    sizeof(ph))
				break;
			if (ph.p_type != PT_LOAD || a < ph.p_vaddr || a + 4096 > ph.p_vaddr + ph.p_filesz)
				continue;
			if (pread(fd, page, 4096, (off_t)(ph.p_offset + a - ph.p_vaddr)) == 4096) {
				bool ok = true;

				for (int w = 0; w < 512 && ok; w++)
					ok = page[w] == (0xC0DE000000000000ull | (uint64_t)i);
				good += ok;
			}
			break;
		}
	}
	close(fd);
	free(page);
	return good;
}

/* Core files in @dir: their count, and the name of the last one in @name. */
static int cores_in(const char *dir, char *name, size_t len)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	while (d && (e = readdir(d)))
		if (!strncmp(e->d_name, "core", 4)) {
			snprintf(name, len, "%s/%s", dir, e->d_name);
			n++;
		}
	if (d)
		closedir(d);
	return n;
}

/*
 * A program that fills 64 MiB with a known pattern and aborts under a 16M limit leaves one core, its
 * own (the runner dumped one too, after it: with the default pattern "core", in the same directory,
 * it replaced the program's), and the core holds the pattern in every page (the kernel wrote the
 * swapped-out ones as zeros: 12,882 of 16,384 pages). Root only: it sets core_pattern, and restores it.
 */
static void core_dump(void)
{
	static const char pattern_path[] = "/proc/sys/kernel/core_pattern";
	char bin[300], dir[300], pattern[400], saved[512] = "", core[600], out[300], *buf;
	struct rlimit old_core, unlimited = {RLIM_INFINITY, RLIM_INFINITY};
	size_t len;
	int fd, st;

	if (geteuid() != 0 || (fd = open(pattern_path, O_RDONLY)) < 0) {
		printf("  (not root: case skipped)\n");
		return;
	}
	ssize_t n = read(fd, saved, sizeof(saved) - 1);
	close(fd);
	if (n <= 0)
		return;
	saved[n] = '\0';
	if (!build_c(
		    "dumper",
		    "#include <stdio.h>\n#include <stdlib.h>\n#include <stdint.h>\n#include <string.h>\n"
		    "int main(void) {\n"
		    "\tsize_t pages = 16384;\n"
		    "\tuint64_t *b = malloc(pages * 4096);\n"
		    "\tfor (size_t i = 0; i < pages * 512; i++) b[i] = 0xC0DE000000000000ull | (i / 512);\n"
		    "\tchar l[256]; long anon = -1; FILE *f = fopen(\"/proc/self/status\", \"r\");\n"
		    "\twhile (fgets(l, sizeof(l), f)) if (!strncmp(l, \"RssAnon:\", 8)) anon = atol(l + 9);\n"
		    "\tprintf(\"%p %ld\\n\", (void *)b, anon);\n"
		    "\tfflush(stdout);\n"
		    "\tabort();\n}\n",
		    bin, sizeof(bin)))
		return;
	snprintf(dir, sizeof(dir), "%s/cores", tmpdir);
	snprintf(out, sizeof(out), "%s/dumper.out", tmpdir);
	mkdir(dir, 0700);
	snprintf(pattern, sizeof(pattern), "%s/core.%%e.%%p\n", dir);
	getrlimit(RLIMIT_CORE, &old_core);
	CHECK_EQ(setrlimit(RLIMIT_CORE, &unlimited), 0);
	CHECK_EQ(write_text(pattern_path, pattern), 0);

	char *plain[] = {bin, NULL}, *under[] = {uswap_bin, "run", "--limit", "16M", "--", bin, NULL};
	st = check_cmd(plain, out, NULL);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && WCOREDUMP(st));
	CHECK_EQ(cores_in(dir, core, sizeof(core)), 1);
	unlink(core);

	st = check_cmd(under, out, NULL);
	/* the runner dies of the same signal, without a core of its own */
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
	CHECK_EQ(cores_in(dir, core, sizeof(core)), 1);
	CHECK(strstr(core, "/core.dumper.") != NULL);
	buf = check_slurp(out, &len);
	unsigned long long va = 0;
	long anon_kib = -1;
	CHECK(buf && sscanf(buf, "%llx %ld", &va, &anon_kib) == 2);
	if (anon_kib > 40 << 10)
		fprintf(stderr, "[%s] %ld KiB resident: nothing was swapped\n", check_test, anon_kib);
	CHECK(anon_kib >= 0 && anon_kib < 40 << 10); /* most of the 64 MiB were out */
	long good = core_pattern_pages(core, va, 16384);
	if (good != 16384)
		fprintf(stderr, "[%s] %ld of 16384 pages in the core hold the program's data\n", check_test,
			good);
	CHECK_EQ(good, 16384);
	free(buf);
	unlink(core);

	CHECK_EQ(write_text(pattern_path, saved), 0);
	setrlimit(RLIMIT_CORE, &old_core);
}

/* Bad options: exit status 2 and a message naming the problem, before the program runs. */
static void bad_options(void)
{
	static const struct {
		const char *args[8];
		int status;
		const char *says;
	} cases[] = {
		{{"--limit", "1X", "--", "/bin/true"}, 2, "--limit"},
		{{"--limit", "64M", "--tiers", "bogus", "--", "/bin/true"}, 2, "bogus"},
		{{"--limit", "64M", "--folio", "3K", "--", "/bin/true"}, 2, "--folio"},
		{{"--limit", "64M", "--fork-child", "shared", "--", "/bin/true"}, 2, "--fork-child"},
		{{"--limit", "64M", "--colour", "red", "--", "/bin/true"}, 2, "--colour"},
		{{"--", "/bin/true"}, 2, "--limit"},
		{{"--limit", "64M"}, 2, "PROGRAM"},
		{{"--limit", "64M", "--", "no-such-program-here"}, 127, "not found"},
	};
	char err[300], marker[300];

	snprintf(err, sizeof(err), "%s/err.txt", tmpdir);
	snprintf(marker, sizeof(marker), "%s/ran", tmpdir);
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		char *argv[16];
		int n = 0;

		argv[n++] = uswap_bin;
		argv[n++] = "run";
		for (int i = 0; i < 8 && cases[c].args[i]; i++)
			argv[n++] = (char *)cases[c].args[i];
		argv[n] = NULL;
		int st = check_cmd(argv, NULL, err);
		size_t len;
		char *msg = check_slurp(err, &len);

		CHECK(WIFEXITED(st));
		CHECK_EQ(WEXITSTATUS(st), cases[c].status);
		if (!msg || !strstr(msg, cases[c].says)) {
			fprintf(stderr, "[%s] case %zu: message \"%s\" does not say \"%s\"\n", check_test, c,
				msg ? msg : "", cases[c].says);
			CHECK(0);
		}
		free(msg);
	}
}

/* A static binary cannot take the preload library: a clear message, not a hang or a silent run. */
static void static_binary_refused(void)
{
	char src[300], bin[300], cc[800];

	snprintf(src, sizeof(src), "%s/s.c", tmpdir);
	snprintf(bin, sizeof(bin), "%s/static-prog", tmpdir);
	check_write_file(src, "int main(void) { return 0; }\n");
	snprintf(cc, sizeof(cc), "cc -static -o %s %s 2>/dev/null", bin, src);
	if (system(cc) != 0) {
		printf("  (no static libc to build a static program: case skipped)\n");
		return;
	}
	char err[300];
	snprintf(err, sizeof(err), "%s/err.txt", tmpdir);
	char *argv[] = {uswap_bin, "run", "--limit", "16M", "--", bin, NULL};
	int st = check_cmd(argv, NULL, err);
	size_t len;
	char *msg = check_slurp(err, &len);

	CHECK(WIFEXITED(st));
	CHECK_EQ(WEXITSTATUS(st), 2);
	CHECK(msg && strstr(msg, "statically linked"));
	free(msg);
}

static redisReply *cmd_reply(redisContext *c, const char *fmt, ...)
{
	va_list ap;
	redisReply *r;

	va_start(ap, fmt);
	r = c ? redisvCommand(c, fmt, ap) : NULL;
	va_end(ap);
	return r;
}

/* A reply's text (status, string or error), copied to @out; "" when there is none. */
static void reply_text(redisReply *r, char *out, size_t len)
{
	snprintf(out, len, "%s", r && r->str ? r->str : "");
	if (r)
		freeReplyObject(r);
}

#define REDIS_KEYS 200000
/*
 * redis-server (its own threads, malloc from our heap) holding ~36 MB under a 16 MB limit forks for
 * BGSAVE: the child writes every key while most of the parent's pages are swapped. The dump, loaded
 * by a plain server, must hold exactly what the same DEBUG POPULATE gives a plain server (same
 * DEBUG DIGEST); the parent must still serve its values after the fork.
 */
static void redis_bgsave(void)
{
	char stats[300], want[64], got[64], text[256];
	const char *wrap[] = {uswap_bin, "run", "--limit", "16M", "--stats-json", stats, "--", NULL};
	const char *debug[] = {"--enable-debug-command", "yes", NULL};
	struct rserver u, p;
	redisContext *c;
	int st = -1;

	if (!rserver_available()) {
		fprintf(stderr, "[%s] redis-server not installed (scripts/deps.sh installs it)\n",
			check_test);
		CHECK(rserver_available());
		return;
	}
	snprintf(stats, sizeof(stats), "%s/redis-stats.json", tmpdir);
	unlink(stats);
	CHECK_EQ(rserver_start_wrapped(&u, wrap, "noeviction", debug), 0);
	c = rserver_connect(&u);
	CHECK(c != NULL);
	if (c)
		redisSetTimeout(c, (struct timeval){120, 0});
	reply_text(cmd_reply(c, "DEBUG POPULATE %d key 100", REDIS_KEYS), text, sizeof(text));
	CHECK(!strcmp(text, "OK"));
	reply_text(cmd_reply(c, "BGSAVE"), text, sizeof(text));
	CHECK(strstr(text, "started") != NULL);
	bool done = false, saved = false;

	for (int i = 0; i < 1200 && !done; i++) { /* up to 2 minutes */
		redisReply *r = cmd_reply(c, "INFO persistence");

		done = r && r->str && strstr(r->str, "rdb_bgsave_in_progress:0");
		saved = done && strstr(r->str, "rdb_last_bgsave_status:ok");
		if (r)
			freeReplyObject(r);
		if (!done)
			usleep(100000);
	}
	CHECK(saved); /* finished, and well */
	/* The parent after the fork: a sample of values, read back through the layer. */
	for (int k = 0; k < REDIS_KEYS; k += REDIS_KEYS / 50 + 7) {
		char v[32];
		redisReply *r = cmd_reply(c, "GET key:%d", k);

		snprintf(v, sizeof(v), "value:%d", k);
		CHECK(r && r->type == REDIS_REPLY_STRING && r->len == 100 && !strcmp(r->str, v));
		if (r)
			freeReplyObject(r);
	}
	reply_text(cmd_reply(c, "SHUTDOWN NOSAVE"), text, sizeof(text)); /* no reply: the connection drops */
	if (c)
		redisFree(c);
	if (u.pid > 0 && waitpid(u.pid, &st, 0) == u.pid)
		u.pid = 0;
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);

	size_t ls;
	char *js = check_slurp(stats, &ls);
	CHECK(check_json_num(js, "evicted_pages") > 4096);
	CHECK(check_json_num(js, "swapins") > 0);
	CHECK_EQ(check_json_num(js, "load_failures"), 0);
	free(js);

	/* A plain server loads the dump from the first one's dir. */
	const char *load[] = {"--dir", u.dir, "--enable-debug-command", "yes", NULL};

	CHECK_EQ(rserver_start(&p, "noeviction", load), 0);
	c = rserver_connect(&p);
	CHECK(c != NULL);
	if (c)
		redisSetTimeout(c, (struct timeval){120, 0});
	redisReply *n = cmd_reply(c, "DBSIZE");
	CHECK(n && n->type == REDIS_REPLY_INTEGER && n->integer == REDIS_KEYS);
	if (n)
		freeReplyObject(n);
	reply_text(cmd_reply(c, "DEBUG DIGEST"), got, sizeof(got));
	reply_text(cmd_reply(c, "FLUSHALL"), text, sizeof(text));
	reply_text(cmd_reply(c, "DEBUG POPULATE %d key 100", REDIS_KEYS), text, sizeof(text));
	reply_text(cmd_reply(c, "DEBUG DIGEST"), want, sizeof(want));
	CHECK(strlen(want) == 40);
	if (strcmp(got, want))
		fprintf(stderr, "[%s] dump digest %s, want %s\n", check_test, got, want);
	CHECK(!strcmp(got, want));
	if (c)
		redisFree(c);
	rserver_kill(&p);
	rserver_kill(&u);
}

/*
 * A daemon: redis-server --daemonize yes forks, and the child that goes on serving never execs. Under
 * `uswap run --limit 48M` it must hold its ~200 MB of values within about its own limit (its instance
 * starts at its first big allocation) and serve them back as a plain daemon does.
 */
static void daemon_child(void)
{
	char script[300], rss[300], dir[300], gen[320], port[16];

	if (!rserver_available()) {
		fprintf(stderr, "[%s] redis-server not installed (scripts/deps.sh installs it)\n",
			check_test);
		CHECK(rserver_available());
		return;
	}
	snprintf(script, sizeof(script), "%s/daemon.sh", tmpdir);
	snprintf(rss, sizeof(rss), "%s/daemon.rss", tmpdir);
	snprintf(dir, sizeof(dir), "%s/daemon", tmpdir);
	snprintf(port, sizeof(port), "%d", rserver_pick_port());
	CHECK(mkdir(dir, 0700) == 0);
	snprintf(gen, sizeof(gen), "%s/gen.py", dir);
	check_write_file(gen, "import sys\n" /* 300K SETs of 511-byte values in the protocol */
			      "o = sys.stdout.buffer\n"
			      "for i in range(300000):\n"
			      "    k, v = b'k:%d' % i, (b'%07d' % i) * 73\n"
			      "    o.write(b'*3\\r\\n$3\\r\\nSET\\r\\n$%d\\r\\n%s\\r\\n$%d\\r\\n%s\\r\\n' % "
			      "(len(k), k, len(v), v))\n");
	check_write_file(
		script,
		"set -e\n"
		"p=$1; d=$2\n"
		"redis-server --port $p --bind 127.0.0.1 --dir $d --save '' --appendonly no --daemonize yes "
		"--pidfile $d/r.pid --logfile $d/log\n"
		"until redis-cli -p $p ping >/dev/null 2>&1; do sleep 0.1; done\n"
		"python3 $d/gen.py | redis-cli -p $p --pipe >/dev/null\n"
		"redis-cli -p $p dbsize\n"
		"for k in 0 7919 150001 299999; do redis-cli -p $p get k:$k; done\n"
		"redis-cli -p $p --scan | sort | md5sum\n"
		"redis-cli -p $p eval \"local h = '' for i = 0, 299999 do "
		"h = redis.sha1hex(h .. redis.call('GET', 'k:' .. i)) end return h\" 0\n"
		"awk '/RssAnon/ {print $2}' /proc/$(cat $d/r.pid)/status > $3\n"
		"redis-cli -p $p shutdown nosave >/dev/null 2>&1 || true\n");
	char *cmd[] = {"/bin/sh", script, port, dir, rss, NULL};
	same_output("48M", cmd, false);
	check_anon_under(rss, 120 << 10); /* ~280 MB plainly */
}

static void setup(void) __attribute__((constructor));
static void setup(void)
{
	const char *build = getenv("BUILD");

	snprintf(uswap_bin, sizeof(uswap_bin), "%s/uswap", build && *build ? build : "build");
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/uswap-run-test.XXXXXX");
}

static int cleanup_dir(void)
{
	char cmd[400];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	return system(cmd);
}

static const struct test tests[] = {
	T(bad_options),
	T(userfaultfd_access),
	T(status_and_signals_pass_through),
	T(signals_to_runner),
	T(static_binary_refused),
	T(core_dump),
	T(blocked_signals),
	T(discarded_pages),
	T(python_dict),
	T(sort_file),
	T(fork_and_exec),
	T(threads),
	T(awk_under_shell),
	T(reserved_heap),
	T(freed_blocks_leave),
	T(fork_while_freeing),
	T(forked_child_own),
	T(forked_child_plain),
	T(locked_memory),
	T(address_space_limits),
	T(address_space_ours),
	T(descriptors_taken),
	T(few_descriptors),
	T(descriptors_unseen),
	T(dlopen_global),
	T(child_as_other_user),
	T(impossible_malloc),
	T(big_blocks),
	T(node_map),
	T(redis_bgsave),
	T(daemon_child),
	T(auto_limit),
};

int main(int argc, char **argv)
{
	if (CHECK_SANITIZED)
		check_skip("a sanitizer build's preload library cannot go into uninstrumented programs");
	if (access(uswap_bin, X_OK))
		check_skip("no uswap binary in $BUILD");
	if (access("/usr/bin/python3", X_OK) || access("/usr/bin/sort", X_OK) || access("/usr/bin/awk", X_OK))
		check_skip("python3, sort or awk missing (scripts/deps.sh installs them)");
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	int ret = check_run(tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
	cleanup_dir();
	return ret;
}
