"""bigdict.py - a program that uses far more memory than `uswap run --limit` gives it.

Builds a dict of N entries (about 180 bytes each), then reads every entry back in key order and
prints a checksum of the values, and the peak resident memory the kernel saw (VmHWM).
Run it plainly and under uswap: the checksum is the same, the peak is not.
"""
import hashlib
import sys

n = int(sys.argv[1]) if len(sys.argv) > 1 else 2_000_000
d = {}
for i in range(n):
    d[i] = ("value-%d" % (i * 7919)) * 3
h = hashlib.sha256()
for k in range(n):
    h.update(d[k].encode())
peak = next(l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM"))
print("%d entries, sha256 %s, peak resident %d MiB" % (len(d), h.hexdigest(), int(peak) // 1024))
