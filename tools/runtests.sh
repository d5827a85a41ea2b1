#!/usr/bin/env bash
# runtests.sh - run each test binary under a timeout; exit 77 counts as skipped.
# Usage: tools/runtests.sh BIN... (make check passes every tests/test_* binary of the build).
# Ends with "N passed, N failed" (and skips, when any); exit status 1 if any failed.
set -u
timeout_s=${USWAP_TEST_TIMEOUT:-600}
passed=0 failed=0 skipped=0
failed_names=()
for bin in "$@"; do
	name=$(basename "$bin")
	log=$(mktemp)
	start=$(date +%s.%N)
	timeout -k 10 "$timeout_s" "$bin" >"$log" 2>&1
	rc=$?
	secs=$(printf '%.1f' "$(echo "$(date +%s.%N) - $start" | bc)")
	case $rc in
	0) passed=$((passed + 1)); echo "PASS $name (${secs}s)" ;;
	77) skipped=$((skipped + 1)); echo "SKIP $name: $(grep -m1 '^SKIP' "$log" | cut -c7-)" ;;
	*)
		failed=$((failed + 1)); failed_names+=("$name")
		[ $rc = 124 ] && echo "FAIL $name: timed out after ${timeout_s}s" || echo "FAIL $name (exit $rc)"
		sed 's/^/    /' "$log" | tail -n 60
		;;
	esac
	rm -f "$log"
done
[ $skipped -gt 0 ] && echo "$skipped skipped"
[ $failed -gt 0 ] && echo "failed: ${failed_names[*]}"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
