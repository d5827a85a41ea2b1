#!/usr/bin/env bash
# vs-kernel.sh - uswap against the kernel's own swap on the same workload binary (bench/workload.c).
#
# Modes: plain (no limit), swapfile (kernel swap to a file), zswap (lz4, in front of that file),
# zram (lz4), uswap (`uswap run` with the default tiers at the same total memory as zram),
# uswap-limit (`uswap run --limit` at the cgroup limit itself). The kernel modes run in a cgroup v1
# memory group with the limit. zram's compressed store is not charged to the cgroup, so zram has the
# limit plus its store (mm_stat mem_used_max, the median over its runs of a pattern); `uswap run
# --limit` covers resident pages and its pool together, so the uswap mode gets that sum (it needs
# the zram mode in the same run, else it falls back to the limit). zswap is charged to the cgroup:
# compare it with uswap-limit. Each mode x pattern runs RUNS times, the modes alternating (run 1 of
# each, then run 2...; uswap's runs get zram's median store so far); the median touches/s is
# reported. zswap runs with its shrinker on (off, a cgroup limit OOM-kills the workload) and lz4 if
# the kernel's crypto API has it (else lzo-rle, said in the output). Needs root. The machine is
# restored on exit, failure or interrupt: our swap
# devices off, zswap back to its settings, zram reset, the cgroup removed.
#
# usage: bench/vs-kernel.sh [--size 2G] [--limit 512M] [--seconds 15] [--runs 3]
#                           [--patterns "seq rand zipf"] [--modes "plain swapfile zswap zram uswap uswap-limit"]
#                           [--out FILE.json]
# Output: a table on stdout, JSON in FILE (default $BUILD/vs-kernel.json).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
size=2G limit=512M seconds=15 runs=3 patterns="seq rand zipf" modes="plain swapfile zswap zram uswap uswap-limit"
out="$BUILD/vs-kernel.json"
while [ $# -gt 0 ]; do
	case $1 in
	--size) size=$2; shift 2 ;;
	--limit) limit=$2; shift 2 ;;
	--seconds) seconds=$2; shift 2 ;;
	--runs) runs=$2; shift 2 ;;
	--patterns) patterns=$2; shift 2 ;;
	--modes) modes=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	*) echo "vs-kernel.sh: unknown option $1" >&2; exit 2 ;;
	esac
done
[ "$(id -u)" = 0 ] || { echo "vs-kernel.sh: needs root (swapon, zswap, zram, cgroups)" >&2; exit 2; }
workload=$BUILD/bench/workload
uswap=$BUILD/uswap
[ -x "$workload" ] || { echo "vs-kernel.sh: $workload missing: run make first" >&2; exit 2; }

to_bytes() {
	local v=${1%[KkMmGg]} u=${1: -1}
	case $u in K|k) echo $((v << 10)) ;; M|m) echo $((v << 20)) ;; G|g) echo $((v << 30)) ;; *) echo "$1" ;; esac
}
limit_bytes=$(to_bytes "$limit")
size_bytes=$(to_bytes "$size")
swap_bytes=$((size_bytes * 2))

cg=/sys/fs/cgroup/memory/uswap-bench.$$
swapfile=/var/tmp/uswap-bench.$$.swap
zs=/sys/module/zswap/parameters
zram=/sys/block/zram0
zswap_enabled=$(cat $zs/enabled 2>/dev/null || echo N)
zswap_comp=$(cat $zs/compressor 2>/dev/null || echo lzo)
zswap_shrinker=$(cat $zs/shrinker_enabled 2>/dev/null || echo N)
zswap_used=none
our_swaps=()

restore() {
	set +e
	for s in "${our_swaps[@]}"; do swapoff "$s" 2>/dev/null; done
	[ -e $zs/enabled ] && { echo "$zswap_comp" > $zs/compressor; echo "$zswap_enabled" > $zs/enabled; } 2>/dev/null
	[ -e $zs/shrinker_enabled ] && echo "$zswap_shrinker" > $zs/shrinker_enabled 2>/dev/null
	[ -e $zram/reset ] && echo 1 > $zram/reset 2>/dev/null
	rm -f "$swapfile"
	if [ -d "$cg" ]; then
		while read -r p; do echo "$p" > /sys/fs/cgroup/memory/cgroup.procs; done < "$cg/cgroup.procs"
		rmdir "$cg"
	fi
}
trap restore EXIT
trap 'exit 130' INT TERM

if [ -n "$(tail -n +2 /proc/swaps)" ]; then
	echo "vs-kernel.sh: warning: swap already active on this machine (left as is):" >&2
	tail -n +2 /proc/swaps >&2
fi

swap_off_all_ours() {
	for s in "${our_swaps[@]}"; do swapoff "$s" 2>/dev/null || true; done
	our_swaps=()
}

setup_mode() {
	swap_off_all_ours
	[ -e $zs/enabled ] && echo N > $zs/enabled
	case $1 in
	plain|uswap|uswap-limit) ;;
	swapfile|zswap)
		if [ ! -e "$swapfile" ]; then
			fallocate -l "$swap_bytes" "$swapfile"
			chmod 600 "$swapfile"
			mkswap -q "$swapfile" >/dev/null
		fi
		swapon "$swapfile"
		our_swaps=("$swapfile")
		if [ "$1" = zswap ]; then
			# lz4 when the kernel has it in its crypto API; else the fastest it has (lzo-rle)
			for c in lz4 lzo-rle lzo; do
				if echo $c > $zs/compressor 2>/dev/null; then zswap_used=$c; break; fi
			done
			# without its shrinker, zswap under a cgroup limit gets the workload OOM-killed
			[ -e $zs/shrinker_enabled ] && echo Y > $zs/shrinker_enabled
			echo Y > $zs/enabled
		fi
		;;
	zram)
		echo 1 > $zram/reset
		echo lz4 > $zram/comp_algorithm
		echo "$swap_bytes" > $zram/disksize
		mkswap -q /dev/zram0 >/dev/null
		swapon -p 100 /dev/zram0
		our_swaps=(/dev/zram0)
		;;
	esac
}

# run_one MODE PATTERN: prints the workload's JSON line, with the mode and exit status added.
run_one() {
	local mode=$1 pat=$2 line rc
	local args=(--size "$size" --pattern "$pat" --seconds "$seconds")
	set +e
	case $mode in
	plain)
		line=$("$workload" "${args[@]}" 2>/dev/null); rc=$? ;;
	uswap)
		line=$("$uswap" run --limit "${uswap_limit[$pat]:-$limit_bytes}" -- "$workload" "${args[@]}" 2>/dev/null); rc=$? ;;
	uswap-limit)
		line=$("$uswap" run --limit "$limit" -- "$workload" "${args[@]}" 2>/dev/null); rc=$? ;;
	*)
		mkdir -p "$cg"
		echo "$limit_bytes" > "$cg/memory.limit_in_bytes"
		line=$(sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$cg" "$workload" "${args[@]}" 2>/dev/null)
		rc=$?
		;;
	esac
	set -e
	[ -n "$line" ] || line='{"touches_per_s":0,"majflt":0,"maxrss_kb":0,"verified":false}'
	echo "${line%\}},\"mode\":\"$mode\",\"exit\":$rc}"
}

# ratios NAME A B: ,"NAME":{"PATTERN":median(A)/median(B),...}
ratios() {
	local first=1 pat
	printf ',"%s":{' "$1"
	for pat in $patterns; do
		[ $first = 1 ] || printf ','; first=0
		printf '"%s":%s' "$pat" "$(awk -v u="${med[$2.$pat]:-0}" -v z="${med[$3.$pat]:-0}" 'BEGIN {print (z > 0 ? u / z : 0)}')"
	done
	printf '}'
}

jfield() { sed -n "s/.*\"$2\":\"\\{0,1\\}\\([^,\"}]*\\).*/\\1/p" <<<"$1"; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]; else print 0}'; }

declare -A med majflt rss status oom zram_store uswap_limit vals stores
all_json=()
skip=""
for mode in $modes; do
	if [[ $mode == uswap* ]] && ! "$uswap" run --help >/dev/null 2>&1; then
		echo "vs-kernel.sh: $uswap has no 'run' command yet: $mode mode skipped" >&2
		for pat in $patterns; do status[$mode.$pat]="n/a"; done
		skip="$skip $mode"
	fi
done
# Alternating: run r of every mode, then run r + 1 (the host drifts; each mode sees the same drift).
for pat in $patterns; do
	for mode in $modes; do status[$mode.$pat]=${status[$mode.$pat]:-ok}; oom[$mode.$pat]=0; vals[$mode.$pat]=""; done
	stores[$pat]=""
	for ((r = 1; r <= runs; r++)); do
		for mode in $modes; do
			[[ " $skip " == *" $mode "* ]] && continue
			setup_mode "$mode"
			[ "$mode" = zram ] && echo 0 > $zram/mem_used_max
			j=$(run_one "$mode" "$pat")
			if [ "$mode" = zram ]; then
				# uswap's runs get the limit plus the median of zram's stores so far
				stores[$pat]="${stores[$pat]} $(awk '{print $5}' $zram/mm_stat)"
				zram_store[$pat]=$(printf '%s\n' ${stores[$pat]} | median)
				uswap_limit[$pat]=$((limit_bytes + zram_store[$pat]))
				echo "  zram $pat: store $((zram_store[$pat] >> 20)) MiB; uswap gets $((uswap_limit[$pat] >> 20)) MiB" >&2
			fi
			swap_off_all_ours
			all_json+=("$j")
			rc=$(jfield "$j" exit)
			if [ "$rc" = 137 ] || [ "$rc" = 9 ]; then oom[$mode.$pat]=$((oom[$mode.$pat] + 1)); continue
			elif [ "$rc" != 0 ]; then status[$mode.$pat]="exit $rc"
			elif [ "$(jfield "$j" verified)" != true ]; then status[$mode.$pat]="BAD DATA"
			fi
			vals[$mode.$pat]="${vals[$mode.$pat]} $(jfield "$j" touches_per_s)"
			majflt[$mode.$pat]=$(jfield "$j" majflt)
			rss[$mode.$pat]=$(jfield "$j" maxrss_kb)
			echo "  $mode $pat run $r: $(jfield "$j" touches_per_s) touches/s, exit $rc" >&2
		done
	done
	# the median of the runs that completed; OOM kills are counted and shown
	for mode in $modes; do
		[[ " $skip " == *" $mode "* ]] && continue
		med[$mode.$pat]=$( [ -n "${vals[$mode.$pat]}" ] && printf '%s\n' ${vals[$mode.$pat]} | median || echo 0)
		[ -z "${vals[$mode.$pat]}" ] && [ "${status[$mode.$pat]}" = ok ] && status[$mode.$pat]=OOM-killed
	done
done

printf '%-9s' mode; for pat in $patterns; do printf ' %14s %9s %9s' "$pat t/s" majflt "rss MiB"; done; echo
for mode in $modes; do
	printf '%-9s' "$mode"
	for pat in $patterns; do
		if [ "${status[$mode.$pat]:-n/a}" = ok ]; then
			t=${med[$mode.$pat]}
			[ "${oom[$mode.$pat]:-0}" -gt 0 ] && t="$t(${oom[$mode.$pat]}oom)"
			printf ' %14s %9s %9s' "$t" "${majflt[$mode.$pat]}" "$(( ${rss[$mode.$pat]:-0} / 1024 ))"
		else
			printf ' %34s' "${status[$mode.$pat]:-n/a}"
		fi
	done
	echo
done

{
	printf '{"bench":"vs-kernel","size":"%s","limit":"%s","seconds":%s,"runs":%s,"zswap_compressor":"%s","median":{' \
		"$size" "$limit" "$seconds" "$runs" "$zswap_used"
	first=1
	for mode in $modes; do for pat in $patterns; do
		[ $first = 1 ] || printf ','; first=0
		printf '"%s.%s":{"touches_per_s":%s,"status":"%s","oom_kills":%s}' "$mode" "$pat" "${med[$mode.$pat]:-0}" \
			"${status[$mode.$pat]:-n/a}" "${oom[$mode.$pat]:-0}"
	done; done
	printf '}'
	ratios uswap_vs_zswap uswap-limit zswap
	ratios uswap_vs_zram uswap zram
	ratios uswap_limit_vs_zswap uswap-limit zswap
	printf ',"uswap_bytes":{'
	first=1
	for pat in $patterns; do
		[ $first = 1 ] || printf ','; first=0
		printf '"%s":%s' "$pat" "${uswap_limit[$pat]:-$limit_bytes}"
	done
	printf '},"uswap_vs_best_kernel":{'
	first=1
	for pat in $patterns; do
		[ $first = 1 ] || printf ','; first=0
		u=${med[uswap.$pat]:-0} b=0
		for km in zswap zram; do
			[ "${status[$km.$pat]:-}" = ok ] && [ "${oom[$km.$pat]:-0}" = 0 ] && \
				b=$(awk -v a="$b" -v c="${med[$km.$pat]:-0}" 'BEGIN {print (c > a ? c : a)}')
		done
		printf '"%s":%s' "$pat" "$(awk -v u="$u" -v b="$b" 'BEGIN {print (b > 0 ? u / b : 0)}')"
	done
	printf '},"runs_detail":[%s]}\n' "$(IFS=,; echo "${all_json[*]}")"
} > "$out"
for pat in $patterns; do
	[ -n "${zram_store[$pat]:-}" ] && printf 'uswap/zram at the same total memory (%s + zram store %s MiB), %s: %s\n' "$limit" \
		"$((zram_store[$pat] >> 20))" "$pat" "$(awk -v u="${med[uswap.$pat]:-0}" -v z="${med[zram.$pat]:-0}" 'BEGIN {printf "%.2f", (z > 0 ? u / z : 0)}')"
done
echo "uswap: same total memory as zram; uswap-limit: --limit $limit (compare with zswap, charged to the cgroup)"
echo "zswap compressor: $zswap_used; JSON: $out"
