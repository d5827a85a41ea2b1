#!/usr/bin/env bash
# runsoak.sh - run the soak binary for SECONDS (extra arguments go to it) under a timeout with room for
# its final check, and count it as one test: ends with "1 passed, 0 failed" or "0 passed, 1 failed".
# Usage: tools/runsoak.sh BUILD/tests/soak SECONDS [ARGS...]
set -u
bin=$1 secs=$2
shift 2
timeout -k 10 $((secs + 300)) "$bin" --seconds "$secs" "$@"
rc=$?
if [ $rc = 0 ]; then
	echo "PASS $(basename "$(dirname "$(dirname "$bin")")")/soak ${secs}s"
	echo "1 passed, 0 failed"
else
	[ $rc = 124 ] || [ $rc = 137 ] && echo "soak: killed by the timeout ($((secs + 300)) s)"
	echo "FAIL $(basename "$(dirname "$(dirname "$bin")")")/soak ${secs}s: exit $rc"
	echo "0 passed, 1 failed"
fi
[ $rc = 0 ]
