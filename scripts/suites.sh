#!/usr/bin/env bash
# suites.sh - real programs' own test suites, each run plainly and under `uswap run --limit` well below
# what it uses: the set of failed tests must be the same (issue #32). Two suites, from Debian's packages
# (scripts/deps.sh installs them):
#   cpython  CPython 3.11's regression suite (libpython3.11-testsuite), `python3 -m test -j2 MODULES`:
#            each module in a worker process of its own, so every worker starts its own instance.
#            Modules: memory, gc, mmap, os, resource, signals, threads, subprocess, fork, ctypes
#            (dlopen), multiprocessing, and the heavy data structures ($CPYTHON_MODULES overrides).
#   numpy    numpy 1.24's own tests (python3-numpy, python3-pytest, python3-hypothesis), pytest over
#            the files in $NUMPY_FILES (ndarray, ufuncs, linear algebra, FFT, random).
# A failed test is a test case reported as failure or error in the suite's JUnit XML, or a whole module
# that failed without one (a crash, a timeout, "env changed"). Tests that fail randomly plainly too:
# a test whose result differs between the two runs is run again, its whole module, once plainly and
# once under uswap; it counts as a difference only if both runs of each mode agree (failed twice under
# uswap and passed twice plainly, or the reverse). Others are listed as flaky, not counted.
# Prints per suite: tests run, failures plainly and under uswap, the difference, pages swapped (from
# --stats-json, the program and its descendants), times and the plain peak RSS of the largest process.
# Ends with "N passed, N failed" (one test per suite); exit 0 only if every suite's sets are equal
# and pages were swapped out and in. Usage: scripts/suites.sh [cpython] [numpy]
# Not in .ci/run: both suites take ~25 min plainly and under uswap on 2 CPUs. On a busy host
# test_subprocess.test_leak_fast_process_del_killed may fail under uswap now and then (a killed child
# under the preload can take longer than the 0.2 s it is given to die: README, "What else differs");
# the re-run counts it as flaky unless it fails twice under uswap and passes twice plainly.
set -u
cd "$(dirname "$0")/.." || exit 1
PY=/usr/bin/python3 # not a pyenv or venv python: the suites are those of Debian's packages
USWAP=$PWD/build/uswap
CPYTHON_LIMIT=${CPYTHON_LIMIT:-16M} # most workers use 30 to 200 MiB
NUMPY_LIMIT=${NUMPY_LIMIT:-64M}     # pytest: ~190 MiB, 16 GiB in test_multiarray on a big machine
CPYTHON_MODULES=${CPYTHON_MODULES:-"test_gc test_mmap test_os test_resource test_signal test_subprocess
	test_threading test_thread test_threadsignals test_fork1 test_wait4 test_posix test_select
	test_faulthandler test_tracemalloc test_ctypes test_multiprocessing_forkserver test_dict test_list
	test_set test_deque test_sort test_array test_bytes test_unicode test_json test_pickle test_re
	test_collections test_heapq test_weakref test_memoryview test_zlib test_bz2 test_hashlib
	test_decimal test_itertools test_struct test_queue test_bigmem"}
RUN_TIMEOUT_S=${RUN_TIMEOUT_S:-1800} # a suite run that hangs is killed (and then fails: no report)
NP=/usr/lib/python3/dist-packages/numpy
NUMPY_FILES=${NUMPY_FILES:-"core/tests/test_multiarray.py core/tests/test_umath.py core/tests/test_numeric.py
	linalg/tests/test_linalg.py fft/tests/test_pocketfft.py random/tests/test_generator_mt19937.py
	lib/tests/test_function_base.py"}

if [ ! -x "$USWAP" ] || [ ! -e build/libuswap-preload.so ]; then
	make -j2 >/dev/null || { echo "suites.sh: build failed"; echo "0 passed, 1 failed"; exit 1; }
fi
work=$(mktemp -d /tmp/uswap-suites.XXXXXX)
trap 'rm -rf "$work"' EXIT
export PYTHONDONTWRITEBYTECODE=1 RUN_TIMEOUT_S # nothing written under /usr

# suite_cmd SUITE XML ITEM...: the suite's command line over ITEMs (modules or files).
suite_cmd() {
	local suite=$1 xml=$2
	shift 2
	case $suite in
	# -W: a failed test's output is shown, with the subtests that failed (not in the JUnit XML)
	cpython) echo "$PY -m test -j2 -W --timeout 900 --junit-xml $xml $*" ;;
	numpy)
		local files=()
		for f in "$@"; do files+=("$NP/$f"); done
		echo "$PY -m pytest -q -p no:cacheprovider --rootdir=$NP --junitxml=$xml ${files[*]}"
		;;
	esac
}

# run_mode SUITE MODE TAG ITEM...: one run, plain or under uswap; output in $work/SUITE.TAG.*
run_mode() {
	local suite=$1 mode=$2 tag=$3
	shift 3
	local base=$work/$suite.$tag limit
	local cmd
	cmd=$(suite_cmd "$suite" "$base.xml" "$@")
	[ "$suite" = cpython ] && limit=$CPYTHON_LIMIT || limit=$NUMPY_LIMIT
	local start=$SECONDS
	# shellcheck disable=SC2086 # cmd is a word list
	if [ "$mode" = plain ]; then
		(cd "$work" && timeout -k 10 "$RUN_TIMEOUT_S" $PY -c 'import resource, subprocess, sys
rc = subprocess.call(sys.argv[2:])
open(sys.argv[1], "w").write("%d\n" % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(rc)' "$base.maxrss" $cmd) >"$base.out" 2>&1
	else
		(cd "$work" && timeout -k 10 "$RUN_TIMEOUT_S" "$USWAP" run --limit "$limit" --stats-json "$base.json" -- $cmd) >"$base.out" 2>&1
	fi
	echo "$? $((SECONDS - start))" >"$base.rc"
}

# The helper: failed tests of a run, re-run items, stats, comparison.
cat >"$work/suites.py" <<'EOF'
import json, os, re, sys
import xml.etree.ElementTree as ET

def results(suite, base):
    """(tests run, skipped, set of failed test names) of one run."""
    failed, run, skipped = set(), 0, 0
    try:
        root = ET.parse(base + ".xml").getroot()
    except (OSError, ET.ParseError):
        root = None
    if root is not None:
        for tc in root.iter("testcase"):
            kids = {c.tag for c in tc}
            name = tc.get("name", "")
            if suite == "numpy":
                name = tc.get("classname", "") + "::" + name
            if "skipped" in kids:
                skipped += 1
                continue
            run += 1
            if kids & {"failure", "error"}:
                failed.add(name)
    out = open(base + ".out", errors="replace").read()
    if open(base + ".rc").read().split()[0] in ("124", "137"):
        failed.add("%s (killed after %s s)" % (suite, os.environ.get("RUN_TIMEOUT_S", "?")))
    if suite == "cpython":
        # unittest's summary lines, shown by -W: "ERROR: test_user (test.test_subprocess.X.test_user) (user=1)"
        for tid, sub in re.findall(r"^(?:FAIL|ERROR): \w+ \(([\w.]+)\)(?: \((.*)\))?$", out, re.M):
            failed.add(tid + (" [%s]" % sub if sub else ""))
        # a module that failed with no failed test case of its own: crashed, timed out, env changed
        for m, why in re.findall(r"\] (test_\w+) (?:failed|crashed)(?: \(([^)]*)\))?", out):
            if not any(f.startswith("test.%s." % m) for f in failed):
                failed.add("%s (module: %s)" % (m, why or "failed"))
    elif root is None:
        failed.add("pytest (no report: %s)" % open(base + ".rc").read().split()[0])
    return run, skipped, failed

def item(suite, name):
    """The module or file a failed test is re-run with."""
    if suite == "cpython":
        m = re.match(r"(?:test\.)?(test_\w+)", name)
        return m.group(1) if m else None
    mods = name.split("::")[0].split(".")
    for i, part in enumerate(mods):
        if part.startswith("test_"):
            return "/".join(mods[1:i + 1]) + ".py"
    return None

def swapped(path):
    try:
        js = json.load(open(path))
    except (OSError, ValueError):
        return 0, 0, 0, 0
    procs = [js] + js.get("descendants", [])
    ev = sum(p.get("evicted_pages", 0) for p in procs)
    si = sum(p.get("swapin_pages", 0) for p in procs)
    n = sum(1 for p in procs if p.get("evicted_pages", 0))
    return ev, si, n, len(procs)

cmd, suite, w = sys.argv[1], sys.argv[2], sys.argv[3]
b = lambda tag: os.path.join(w, "%s.%s" % (suite, tag))
if cmd == "rerun":  # items whose tests differ
    p, u = results(suite, b("plain"))[2], results(suite, b("uswap"))[2]
    print(" ".join(sorted({item(suite, t) for t in p ^ u} - {None})))
elif cmd == "report":
    rerun = len(sys.argv) > 4 and sys.argv[4] == "1"
    run, skipped, p = results(suite, b("plain"))
    urun, uskipped, u = results(suite, b("uswap"))
    diff, flaky = p ^ u, set()
    if rerun:
        p2, u2 = results(suite, b("plain2"))[2], results(suite, b("uswap2"))[2]
        steady = {t for t in diff if (t in u and t in u2 and t not in p2) or (t in p and t in p2 and t not in u2)}
        flaky, diff = diff - steady, steady
    ev, si, n, nprocs = swapped(b("uswap.json"))
    secs = lambda tag: open(b(tag + ".rc")).read().split()[1]
    try:
        rss = int(open(b("plain.maxrss")).read()) // 1024
    except (OSError, ValueError):
        rss = 0
    print("%s: %d tests run plainly (%d skipped), %d under uswap (%d skipped)" % (suite, run, skipped, urun, uskipped))
    print("%s: plainly %d s, peak RSS %d MiB (largest process); under uswap --limit %s %s s" %
          (suite, int(secs("plain")), rss, sys.argv[5], secs("uswap")))
    print("%s: failed plainly %d: %s" % (suite, len(p), " ".join(sorted(p)) or "-"))
    print("%s: failed under uswap %d: %s" % (suite, len(u), " ".join(sorted(u)) or "-"))
    if flaky:
        print("%s: flaky (differed once, not on the re-run): %s" % (suite, " ".join(sorted(flaky))))
    print("%s: difference: %s" % (suite, " ".join(
        ("%s(%s)" % (t, "fails under uswap" if t in u else "fails plainly only")) for t in sorted(diff)) or "none"))
    print("%s: swapped: %d pages out, %d pages in, by %d processes (of %d in the --stats-json summary)" %
          (suite, ev, si, n, nprocs))
    ok = not diff and ev > 0 and si > 0 and run > 0
    print("%s: %s" % (suite, "PASS" if ok else "FAIL"))
    sys.exit(0 if ok else 1)
EOF

passed=0 failed=0
suites=("$@")
[ $# -gt 0 ] || suites=(cpython numpy)
for suite in "${suites[@]}"; do
	case $suite in
	cpython) items=$CPYTHON_MODULES limit=$CPYTHON_LIMIT ;;
	numpy)
		items=$NUMPY_FILES limit=$NUMPY_LIMIT
		[ -d "$NP" ] || { echo "numpy: $NP missing (scripts/deps.sh)"; failed=$((failed + 1)); continue; }
		;;
	*) echo "unknown suite $suite"; failed=$((failed + 1)); continue ;;
	esac
	# shellcheck disable=SC2086
	echo "== $suite: $(suite_cmd "$suite" X.xml $items | sed 's/ --junit-\?xml[= ]X.xml//')"
	# shellcheck disable=SC2086
	run_mode "$suite" plain plain $items
	# shellcheck disable=SC2086
	run_mode "$suite" uswap uswap $items
	again=$($PY "$work/suites.py" rerun "$suite" "$work")
	if [ -n "$again" ]; then
		echo "$suite: re-running, plainly and under uswap: $again"
		# shellcheck disable=SC2086
		run_mode "$suite" plain plain2 $again
		# shellcheck disable=SC2086
		run_mode "$suite" uswap uswap2 $again
	fi
	if $PY "$work/suites.py" report "$suite" "$work" "$([ -n "$again" ] && echo 1 || echo 0)" "$limit"; then
		passed=$((passed + 1))
	else
		failed=$((failed + 1))
		for tag in plain uswap; do
			echo "-- $suite $tag: last lines"
			grep -v 'running: ' "$work/$suite.$tag.out" | tail -n 15 | sed 's/^/    /'
		done
	fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
