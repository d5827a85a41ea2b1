#!/bin/sh
# deps.sh - install what uswap builds and tests with, from Debian's packages. Idempotent; needs root
# (or sudo). USWAP_DEPS_SKIP=1 skips it (e.g. on a machine set up by hand).
set -eu
[ "${USWAP_DEPS_SKIP:-0}" = 1 ] && exit 0
pkgs="build-essential pkg-config bc liblz4-dev libzstd-dev liburing-dev libhiredis-dev libsodium-dev libssl-dev openssl
      libmimalloc-dev redis-server redis-tools python3 coreutils mawk nodejs stress-ng zstd man-db groff-base clang-format
      libpython3.11-testsuite python3-numpy python3-pytest python3-hypothesis"
missing=""
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
echo "deps.sh: installing$missing" >&2
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
# shellcheck disable=SC2086
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
