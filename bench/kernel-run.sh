#!/bin/bash
# kernel-run.sh MODE LIMIT COMMAND [ARGS...] - run COMMAND under a cgroup v1 memory limit with the
# kernel's own swap, for a side-by-side look at a program under `uswap run --limit LIMIT`.
# MODE: swapfile (a 4 GiB swap file in /var/tmp), zswap (shrinker on, in front of that file) or zram
# (4 GiB); both compress with the first of lz4, lzo-rle, lzo that the kernel has (it says which). Prints the elapsed time, peak RSS, major faults and whether the OOM killer struck.
# Needs root; puts the machine's swap, zswap and zram settings back on exit, even on failure.
set -u
[ $# -ge 3 ] || { echo "usage: $0 swapfile|zswap|zram LIMIT COMMAND [ARGS...]" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "kernel-run.sh: needs root (swapon, zswap, zram, cgroups)" >&2; exit 2; }
mode=$1 limit=$2
shift 2
case $mode in swapfile|zswap|zram) ;; *) echo "kernel-run.sh: unknown mode $mode" >&2; exit 2;; esac
cg=/sys/fs/cgroup/memory/uswap-kernel-run.$$
[ -d /sys/fs/cgroup/memory ] || { echo "kernel-run.sh: no cgroup v1 memory controller" >&2; exit 2; }
zs=/sys/module/zswap/parameters
sf=/var/tmp/uswap-kernel-run.$$.swap
z_en=$(cat $zs/enabled 2>/dev/null || echo N)
z_comp=$(cat $zs/compressor 2>/dev/null || echo lzo)
z_shr=$(cat $zs/shrinker_enabled 2>/dev/null || echo N)
cleanup() {
	if [ -d "$cg" ]; then
		# Whatever is left in the cgroup (the command, when we are interrupted) goes with us.
		for _ in 1 2 3 4 5 6 7 8 9 10; do
			left=$(cat "$cg/cgroup.procs")
			[ -n "$left" ] || break
			# shellcheck disable=SC2086
			kill -KILL $left 2>/dev/null
			sleep 0.5
		done
		rmdir "$cg"
	fi
	swapoff "$sf" 2>/dev/null; rm -f "$sf"
	if [ "$mode" = zram ]; then swapoff /dev/zram0 2>/dev/null; echo 1 > /sys/block/zram0/reset; fi
	if [ -e $zs/enabled ]; then
		echo "$z_comp" > $zs/compressor; echo "$z_shr" > $zs/shrinker_enabled; echo "$z_en" > $zs/enabled
	fi 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM
case $mode in
swapfile|zswap)
	fallocate -l 4G "$sf" && chmod 600 "$sf" && mkswap -q "$sf" >/dev/null && swapon "$sf" || exit 1
	if [ $mode = zswap ]; then
		for c in lz4 lzo-rle lzo; do echo $c > $zs/compressor 2>/dev/null && break; done
		echo Y > $zs/shrinker_enabled && echo Y > $zs/enabled || exit 1
		echo "kernel-run: zswap compressor $(cat $zs/compressor)"
	fi;;
zram)
	[ -e /sys/block/zram0 ] || modprobe zram || exit 1
	for c in lz4 lzo-rle lzo; do echo $c > /sys/block/zram0/comp_algorithm 2>/dev/null && break; done
	echo 4G > /sys/block/zram0/disksize && mkswap -q /dev/zram0 >/dev/null && swapon -p 100 /dev/zram0 || exit 1
	echo "kernel-run: zram compressor $(sed 's/.*\[\(.*\)\].*/\1/' /sys/block/zram0/comp_algorithm)";;
esac
mkdir "$cg" && echo "$limit" > "$cg/memory.limit_in_bytes" || exit 1
/usr/bin/time -f "kernel-run: $mode $limit: %e s elapsed, peak RSS %M KB, %F major faults" \
	sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$cg" "$@"
st=$?
echo "kernel-run: exit status $st, OOM kills $(awk '/oom_kill /{print $2}' "$cg/memory.oom_control")"
exit $st
