/*
 * uffd.c - every userfaultfd call of mm, and the pagemap and maps look-ups that tell what a failed
 * one did: opening and checking the kernel's features, registering, copy, move, wake, write-protect,
 * poison. Calls nothing else of mm.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "mm/mm.h"
#include "mm/uffd.h"
#include "util/err.h"

static int uffd_new(int flags)
{
	int fd = (int)syscall(SYS_userfaultfd, flags);
	int dev;

	if (fd >= 0)
		return fd;
	if (errno != EPERM && errno != EACCES)
		return -errno;
	dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
	if (dev < 0)
		return -EPERM;
	fd = ioctl(dev, USERFAULTFD_IOC_NEW, flags);
	close(dev);
	return fd >= 0 ? fd : -EPERM;
}

int uffd_open(__u64 features, int *out)
{
	struct uffdio_api api = {.api = UFFD_API, .features = features};
	int fd = uffd_new(O_CLOEXEC | O_NONBLOCK);

	if (fd == -EPERM)
		return err_set(-EPERM,
			       "userfaultfd is not available to this process for kernel-mode faults: "
			       "vm.unprivileged_userfaultfd is 0 and /dev/userfaultfd cannot be opened "
			       "(run as root, or set the sysctl to 1, or grant access to /dev/userfaultfd)");
	if (fd < 0)
		return err_set(fd, "userfaultfd: %s", strerror(-fd));
	if (ioctl(fd, UFFDIO_API, &api)) {
		int e = -errno;

		close(fd);
		return err_set(e, "UFFDIO_API refused features %#llx: %s", (unsigned long long)features,
			       strerror(-e));
	}
	*out = fd;
	return 0;
}

/* What the kernel offers, named when something we need is missing. */
int uffd_check(void)
{
	static const struct {
		__u64 bit;
		const char *what;
	} need[] = {
		{UFFD_FEATURE_MOVE, "UFFDIO_MOVE (Linux 6.8)"},
		{UFFD_FEATURE_PAGEFAULT_FLAG_WP, "write-protection of anonymous memory"},
		{UFFD_FEATURE_EVENT_REMOVE, "remove events"},
		{UFFD_FEATURE_EVENT_UNMAP, "unmap events"},
		{UFFD_FEATURE_EVENT_REMAP, "remap events"},
		{UFFD_FEATURE_SIGBUS, "SIGBUS mode"},
	};
	int fd, ret = uffd_open(0, &fd);
	struct uffdio_api api = {.api = UFFD_API};

	if (ret)
		return ret;
	close(fd);
	/* The first UFFDIO_API reported nothing back to us: ask a fresh fd for the list. */
	fd = uffd_new(O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return err_set(fd, "userfaultfd: %s", strerror(-fd));
	ret = ioctl(fd, UFFDIO_API, &api) ? -errno : 0;
	close(fd);
	if (ret)
		return err_set(ret, "UFFDIO_API: %s", strerror(-ret));
	for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++)
		if (!(api.features & need[i].bit))
			return err_set(-EOPNOTSUPP, "this kernel's userfaultfd lacks %s", need[i].what);
	return 0;
}

int uffd_register(int uffd, uintptr_t start, size_t len, __u64 mode, __u64 need_ioctls)
{
	struct uffdio_register reg = {.range = {.start = start, .len = len}, .mode = mode};

	if (ioctl(uffd, UFFDIO_REGISTER, &reg))
		return -errno;
	if ((reg.ioctls & need_ioctls) != need_ioctls) {
		struct uffdio_range rg = {.start = start, .len = len};

		ioctl(uffd, UFFDIO_UNREGISTER, &rg);
		return -EOPNOTSUPP;
	}
	return 0;
}

/* ---- ioctls: 0 or -errno, *done = bytes done (also on a partial failure) ---- */

int uffd_copy(int uffd, uintptr_t dst, const void *src, size_t len, bool wp, bool wake, size_t *done)
{
	struct uffdio_copy c = {
		.dst = dst,
		.src = (uintptr_t)src,
		.len = len,
		.mode = (wp ? UFFDIO_COPY_MODE_WP : 0) | (wake ? 0 : UFFDIO_COPY_MODE_DONTWAKE),
	};
	int ret = ioctl(uffd, UFFDIO_COPY, &c) ? -errno : 0;

	*done = c.copy > 0 ? (size_t)c.copy : 0;
	if (!ret && *done != len)
		ret = -EAGAIN;
	return ret;
}

/*
 * Which of @n pages from @addr are mapped (present, or in the kernel's swap), into @out: mincore()
 * (which fails where there is no mapping at all), refined by /proc/self/pagemap when we have it
 * (mincore() cannot see a page the kernel swapped out). With @need, only the pages it marks matter:
 * when mincore() finds them all, pagemap (an open, a read per 64 pages, a close) is not read.
 * Return: 0; -1 no mapping, or no way to tell.
 */
int uffd_pages_mapped(struct uswap_mm *m, uintptr_t addr, size_t n, const uint8_t *need, uint8_t *out)
{
	uint64_t pm[64];
	bool all = true;
	int fd;

	if (mincore((void *)addr, n * MM_PAGE, out))
		return -1;
	for (size_t j = 0; j < n; j++) {
		out[j] &= 1;
		all = all && (out[j] || (need && !need[j]));
	}
	if (all)
		return 0;
	fd = m->have_pagemap ? open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC) : -1;
	for (size_t j0 = 0; fd >= 0 && j0 < n; j0 += 64) {
		size_t cnt = n - j0 < 64 ? n - j0 : 64;
		off_t off = (off_t)((addr / MM_PAGE + j0) * sizeof(pm[0]));

		if (pread(fd, pm, cnt * sizeof(pm[0]), off) != (ssize_t)(cnt * sizeof(pm[0])))
			break;
		for (size_t j = 0; j < cnt; j++)
			out[j0 + j] = (pm[j] & (PM_PRESENT | PM_SWAP)) != 0;
	}
	if (fd >= 0)
		close(fd);
	return 0;
}

/*
 * Pages from @addr (at most @n) inside the vma that holds @addr: the kernel moves and fills a range
 * only within one vma, and a program that changes the protection of part of a registered range
 * (a guard page, a heap committed with mprotect()) splits it into several.
 * Return: 0 and *pages; -ENOENT no vma there; -EOPNOTSUPP no way to tell (before Linux 6.11).
 */
static int vma_pages(struct uswap_mm *m, uintptr_t addr, size_t n, size_t *pages)
{
	struct procmap_query q = {.size = sizeof(q), .query_addr = addr};
	size_t left;
	int fd = m->have_maps ? open("/proc/self/maps", O_RDONLY | O_CLOEXEC) : -1, ret, err;

	if (fd < 0)
		return -EOPNOTSUPP;
	ret = ioctl(fd, PROCMAP_QUERY, &q);
	err = errno;
	close(fd);
	if (ret)
		return err == ENOTTY || err == EINVAL ? -EOPNOTSUPP : -ENOENT;
	if (q.vma_start > addr)
		return -ENOENT;
	left = (size_t)(q.vma_end - addr) / MM_PAGE;
	*pages = left < n ? left : n;
	return 0;
}

/*
 * uffd_copy_vmas() - UFFDIO_COPY of @len bytes from @src to @dst (see uffd_copy()), split where @dst
 * crosses from one vma into the next; @wake: each copy wakes the threads waiting in what it filled.
 * *done: bytes copied from the start, also on error.
 */
int uffd_copy_vmas(struct uswap_mm *m, uintptr_t dst, const void *src, size_t len, bool wp, bool wake,
		   size_t *done)
{
	size_t pos = 0, stop = len, d, fit;
	int ret = 0;

	while (pos < len) {
		ret = uffd_copy(m->uffd, dst + pos, (const char *)src + pos, stop - pos, wp, wake, &d);
		pos += d;
		if (!ret) {
			stop = len;
			continue;
		}
		if (d || (ret != -ENOENT && ret != -EINVAL) ||
		    vma_pages(m, dst + pos, (stop - pos) / MM_PAGE, &fit) || fit * MM_PAGE >= stop - pos)
			break;
		stop = pos + fit * MM_PAGE;
	}
	*done = pos;
	return pos == len ? 0 : ret;
}

/*
 * uffd_move() - UFFDIO_MOVE of @n pages (at most MV_MAX_PAGES) from @src to @dst, whose slots are
 * empty, through @uffd (the one @dst is registered with); @st[j] says where page j is afterwards:
 * MV_MOVED (at dst), MV_LEFT (still at src) or MV_HOLE (at neither: src had no page there, the
 * kernel zapped it after a MADV_DONTNEED whose REMOVE event we may not have applied yet).
 *
 * Two properties of the kernel's move loop (mm/userfaultfd.c, move_pages(), as of 6.18) decide
 * how this is done. Once a step of the loop returns -EAGAIN (a pte changed under it: the program
 * touched the page and set its accessed bit, a concurrent MADV_DONTNEED zapped it, a migration)
 * the loop's error stays -EAGAIN: later steps that succeed do not clear it and do not advance.
 * With UFFDIO_MOVE_MODE_ALLOW_SRC_HOLES, a step over a hole "succeeds", so a page zapped between
 * its -EAGAIN and the retry makes the ioctl spin in the kernel for ever (seen: a handler thread
 * at 100% system time in move_pages_ptes()). Without it the retry moves the page (or finds the
 * hole) and the next step stops on -EEXIST or -ENOENT: it ends, but reports the page it just
 * moved as not moved. So: never ALLOW_SRC_HOLES (a hole ends a call, the next starts after it),
 * and after any error the page tables, not the count, say what moved.
 * A call also moves only within one vma on each side, between vmas of the same protection
 * (-EINVAL otherwise): a range that crosses a vma boundary is moved in parts, and the pages of a
 * vma whose protection the program changed (read-only, PROT_NONE) stay where they are.
 * Return: 0 when every page that src held is at dst; else the first error that left pages behind.
 */
static int move_pages_of(struct uswap_mm *m, int uffd, uintptr_t dst, uintptr_t src, size_t n, bool wake,
			 uint8_t *st, bool *erred)
{
	uint8_t at_dst[MV_MAX_PAGES], at_src[MV_MAX_PAGES];
	size_t i = 0, stop = n; /* this call tries [i, stop) */
	int ret = 0;

	memset(st, MV_LEFT, n);
	while (i < n) {
		if (i >= stop)
			stop = n;
		struct uffdio_move mv = {
			.dst = dst + i * MM_PAGE,
			.src = src + i * MM_PAGE,
			.len = (stop - i) * MM_PAGE,
			.mode = wake ? 0 : UFFDIO_MOVE_MODE_DONTWAKE,
		};
		size_t k, j, w = stop - i, fs, fd;
		int err;

		if (!ioctl(uffd, UFFDIO_MOVE, &mv)) {
			memset(st + i, MV_MOVED, w);
			i = stop;
			stop = n;
			continue;
		}
		err = -errno;
		*erred = true;
		if (uffd_pages_mapped(m, dst + i * MM_PAGE, w, NULL, at_dst) ||
		    uffd_pages_mapped(m, src + i * MM_PAGE, w, NULL, at_src)) {
			/* A range unmapped under us (its event not applied yet): trust the count. */
			size_t dp = mv.move > 0 ? (size_t)mv.move / MM_PAGE : 0;

			memset(st + i, MV_MOVED, dp < w ? dp : w);
			return err;
		}
		for (j = 0; j < w; j++)
			st[i + j] = at_dst[j] ? MV_MOVED : at_src[j] ? MV_LEFT : MV_HOLE;
		for (k = 0; k < w && at_dst[k]; k++)
			;
		if (k == w) {
			/* all there: the error came after the last page */
			i = stop;
			stop = n;
			continue;
		}
		if (at_src[k]) {
			/*
			 * Page i + k would not move. After progress the error may belong to a page
			 * already moved (see above) or be a partial move's -EAGAIN: go on from i + k.
			 */
			if (k > 0) {
				i += k;
				continue;
			}
			if ((err != -EINVAL && err != -ENOENT) || vma_pages(m, src + i * MM_PAGE, w, &fs) ||
			    vma_pages(m, dst + i * MM_PAGE, w, &fd))
				return ret ? ret : err;
			if (fs < w || fd < w) {
				stop = i + (fs < fd ? fs : fd); /* try the part inside both vmas */
				continue;
			}
			/* Within one vma on each side and still refused: those pages stay. */
			ret = ret ? ret : err;
			i = stop;
			stop = n;
			continue;
		}
		/* A hole: the next call starts at the next page src still holds. */
		for (j = k + 1; j < w && !at_src[j]; j++)
			;
		i += j;
	}
	return ret;
}

int uffd_move(struct uswap_mm *m, int uffd, uintptr_t dst, uintptr_t src, size_t n, bool wake, uint8_t *st)
{
	bool erred = false;
	int ret = move_pages_of(m, uffd, dst, src, n, wake, st, &erred);

	/* A call that fails wakes nobody, even for the pages it moved before the error. */
	if (wake && erred)
		uffd_wake(uffd, dst, n * MM_PAGE);
	return ret;
}

int uffd_wake(int uffd, uintptr_t start, size_t len)
{
	struct uffdio_range r = {.start = start, .len = len};

	return ioctl(uffd, UFFDIO_WAKE, &r) ? -errno : 0;
}

int uffd_protect(int uffd, uintptr_t start, size_t len)
{
	struct uffdio_writeprotect wp = {.range = {.start = start, .len = len},
					 .mode = UFFDIO_WRITEPROTECT_MODE_WP};

	return ioctl(uffd, UFFDIO_WRITEPROTECT, &wp) ? -errno : 0;
}

int uffd_unprotect(int uffd, uintptr_t start, size_t len)
{
	struct uffdio_writeprotect wp = {.range = {.start = start, .len = len}, .mode = 0};

	return ioctl(uffd, UFFDIO_WRITEPROTECT, &wp) ? -errno : 0;
}

/* A page whose data cannot be read back: later accesses get SIGBUS, as with a swap read error. */
void uffd_poison(int uffd, uintptr_t addr, size_t len)
{
	struct uffdio_poison p = {.range = {.start = addr, .len = len}, .mode = 0};

	ioctl(uffd, UFFDIO_POISON, &p);
}
