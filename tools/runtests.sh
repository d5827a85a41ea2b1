#!/usr/bin/env bash
# runtests.sh - run each test binary under a timeout and count its tests: a binary prints "ok   NAME",
# "FAIL NAME" or "skip NAME: WHY" (a program it needs is missing) per test (tests/check.c); exit 77 skips
# the binary; a crash or a timeout counts as one more failure of that binary. Usage: tools/runtests.sh BIN... (make check passes every tests/test_* binary).
# Ends with "N passed, N failed"; exit status 1 if any failed.
set -u
timeout_s=${USWAP_TEST_TIMEOUT:-900}
passed=0 failed=0 skipped=0 skipped_tests=0
failed_names=()
for bin in "$@"; do
	name=$(basename "$bin")
	log=$(mktemp)
	start=$(date +%s.%N)
	timeout -k 10 "$timeout_s" "$bin" >"$log" 2>&1
	rc=$?
	secs=$(printf '%.1f' "$(echo "$(date +%s.%N) - $start" | bc)")
	ok=$(grep -c '^ok  ' "$log")
	bad=$(grep -c '^FAIL ' "$log")
	skips=$(grep -c '^skip ' "$log")
	if [ $rc = 77 ]; then
		skipped=$((skipped + 1))
		echo "SKIP $name: $(grep -m1 '^SKIP' "$log" | cut -c7-)"
	elif [ $rc = 0 ] && [ "$bad" = 0 ]; then
		passed=$((passed + ok))
		if [ "$skips" = 0 ]; then
			echo "PASS $name: $ok tests (${secs}s)"
		else
			skipped_tests=$((skipped_tests + skips))
			echo "PASS $name: $ok tests, $skips skipped (${secs}s)"
			grep '^skip ' "$log" | sed 's/^/    /'
		fi
	else
		passed=$((passed + ok))
		failed=$((failed + bad))
		if [ "$bad" = 0 ]; then
			failed=$((failed + 1)) # died without reporting a failed test
		fi
		failed_names+=("$name")
		if [ $rc = 124 ] || [ $rc = 137 ]; then
			echo "FAIL $name: timed out after ${timeout_s}s ($ok ok, $bad failed before)"
		else
			echo "FAIL $name: exit $rc, $ok ok, $bad failed (${secs}s)"
		fi
		sed 's/^/    /' "$log" | tail -n 60
	fi
	rm -f "$log"
done
[ $skipped -gt 0 ] && echo "$skipped binaries skipped"
[ $skipped_tests -gt 0 ] && echo "$skipped_tests tests skipped"
[ $failed -gt 0 ] && echo "failed in: ${failed_names[*]}"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
