/*
 * fd.c - the library's long-lived file descriptors (see fd.h).
 */
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/fd.h"

#define FD_TRACK 8192 /* fds above are moved below 4096, so any kept one fits */

static _Atomic uint64_t kept[FD_TRACK / 64];

/* 256 below the soft limit (at most 4096: a huge limit must not grow the table to millions). */
static int high_base(void)
{
	struct rlimit rl;
	rlim_t top;

	if (getrlimit(RLIMIT_NOFILE, &rl))
		return 3;
	top = rl.rlim_cur < 4096 ? rl.rlim_cur : 4096;
	return top >= 512 ? (int)(top - 256) : 3;
}

int fd_keep(int fd)
{
	int n;

	if (fd < 0)
		return fd;
	n = fcntl(fd, F_DUPFD_CLOEXEC, high_base());
	if (n >= 0) {
		syscall(SYS_close, fd);
		fd = n;
	}
	if (fd < FD_TRACK)
		atomic_fetch_or(&kept[fd / 64], 1ull << (fd % 64));
	return fd;
}

void fd_forget(int fd)
{
	if (fd >= 0 && fd < FD_TRACK)
		atomic_fetch_and(&kept[fd / 64], ~(1ull << (fd % 64)));
}

void fd_close(int fd)
{
	if (fd < 0)
		return;
	fd_forget(fd);
	syscall(SYS_close, fd);
}

bool fd_kept(int fd)
{
	return fd >= 0 && fd < FD_TRACK &&
	       (atomic_load_explicit(&kept[fd / 64], memory_order_relaxed) >> (fd % 64) & 1);
}

int fd_kept_from(int from)
{
	if (from < 0)
		from = 0;
	for (int w = from / 64; w < FD_TRACK / 64; w++) {
		uint64_t b = atomic_load_explicit(&kept[w], memory_order_relaxed);

		if (w == from / 64)
			b &= ~0ull << (from % 64);
		if (b)
			return w * 64 + __builtin_ctzll(b);
	}
	return -1;
}
