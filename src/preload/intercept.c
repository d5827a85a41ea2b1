/*
 * intercept.c - the calls of the program that the preload library takes first: mmap (new mappings
 * registered), madvise and process_madvise (discards reported to the instance), mlockall, the close
 * and dup family (the library's descriptors kept), the fstat family and fcntl (those descriptors look
 * closed), pthread_create (the library's threads marked), and sigaction and signal (the core-dumping
 * signals bring swapped pages in first).
 */
#include "preload/preload.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <semaphore.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>

#include "util/fd.h"

_Atomic int g_lock_future;

/* ---- mappings ---- */

/*
 * Anonymous private memory made read-write at once, or reserved PROT_NONE to be made read-write
 * later with mprotect() (JavaScript engines, runtimes with their own heaps), up to MAX_RESERVATION:
 * beyond that a reservation is address space, not memory, and its tables would cost more than it
 * is worth. A part the program leaves PROT_NONE or read-only stays resident once touched.
 */
#define MAX_RESERVATION (4ull << 30)
static bool worth_managing(size_t len, int prot, int flags, int fd)
{
	if (fd != -1 || !(flags & MAP_ANONYMOUS) || (flags & MAP_TYPE) != MAP_PRIVATE ||
	    (flags & (MAP_STACK | MAP_GROWSDOWN | MAP_HUGETLB)) || len < g_min_map)
		return false;
	if (prot == PROT_NONE)
		return len <= MAX_RESERVATION;
	return prot == (PROT_READ | PROT_WRITE);
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	void *p = sys_mmap(addr, len, prot, flags, fd, off);
	bool managed = false;
	int lock;

	if (p == MAP_FAILED || t_internal)
		return p;
	if (atomic_load_explicit(&g_adopt, memory_order_relaxed) && worth_managing(len, prot, flags, fd))
		child_adopt();
	if (atomic_load_explicit(&g_managing, memory_order_relaxed) && ours()) {
		t_internal++;
		/*
		 * The new mapping may stand where a registered range was (MAP_FIXED over it, or an
		 * address a munmap() freed): the instance applies that range's event before the program
		 * touches the new pages, or reclaim could take them for the old range's.
		 */
		uswap_mm_sync(g_mm);
		if (worth_managing(len, prot, flags, fd)) /* refused: stays plain memory */
			managed = !uswap_register(g_mm, p, (len + 4095) & ~(size_t)4095, 0);
		t_internal--;
	}
	lock = atomic_load_explicit(&g_lock_future, memory_order_relaxed);
	if (lock && !managed)
		syscall(SYS_mlock2, p, len, lock - 1);
	return p;
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off64_t off)
{
	return mmap(addr, len, prot, flags, fd, (off_t)off);
}

/* ---- discards: the program's MADV_DONTNEED and MADV_FREE reach the instance first ---- */

/*
 * The instance is made with discards_reported: the kernel raises no REMOVE event for a madvise()
 * of a registered range (each event stopped the caller until a handler read it, and reclaim's own
 * zaps raised them too), so every discard the program makes through libc (its own, mimalloc's,
 * ours of freed blocks) goes through uswap_mm_discard(), which drops what the instance holds of
 * the range and zaps it with MADV_DONTNEED: MADV_FREE's "zero or old data" becomes zero at once.
 * A raw madvise system call on a registered range is not seen (docs/mm.md); USWAP_REMOVE_EVENTS=1
 * keeps the kernel's events instead.
 */
typedef int (*madvise_fn)(void *, size_t, int);
typedef ssize_t (*process_madvise_fn)(int, const struct iovec *, size_t, int, unsigned);
static madvise_fn real_madvise;
static process_madvise_fn real_process_madvise;
bool g_discards_reported;

static bool discard_advice(int advice)
{
	return advice == MADV_DONTNEED || advice == MADV_FREE;
}

/* Return: 1 the instance took the discard (0 or -errno in *ret), 0 the kernel's alone. */
static int discard(void *addr, size_t len, int advice, int *ret)
{
	size_t l = (len + PAGE_BYTES - 1) & ~(size_t)(PAGE_BYTES - 1);

	if (!discard_advice(advice) || !g_discards_reported || ((uintptr_t)addr & (PAGE_BYTES - 1)) || !l ||
	    !atomic_load_explicit(&g_managing, memory_order_relaxed) || !ours())
		return 0;
	t_internal++;
	*ret = uswap_mm_discard(g_mm, addr, l);
	t_internal--;
	return 1;
}

int madvise(void *addr, size_t len, int advice)
{
	int ret;

	if (discard(addr, len, advice, &ret)) {
		if (!ret)
			return 0;
		errno = -ret;
		return -1;
	}
	if (!real_madvise)
		real_madvise = (madvise_fn)dlsym(RTLD_NEXT, "madvise");
	return real_madvise(addr, len, advice);
}

/* Whether @pidfd names this process (from its fdinfo: process_madvise() on oneself is rare). */
static bool pidfd_is_self(int pidfd)
{
	char path[64], line[128];
	bool self = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", pidfd);
	f = fopen(path, "re");
	if (!f)
		return false;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "Pid:", 4)) {
			self = atoi(line + 4) == (int)getpid();
			break;
		}
	fclose(f);
	return self;
}

ssize_t process_madvise(int pidfd, const struct iovec *iov, size_t n, int advice, unsigned flags)
{
	if (discard_advice(advice) && g_discards_reported && !flags && pidfd_is_self(pidfd)) {
		ssize_t done = 0;

		for (size_t i = 0; i < n; i++) {
			int ret;

			if (!discard(iov[i].iov_base, iov[i].iov_len, advice, &ret))
				ret = syscall(SYS_madvise, iov[i].iov_base, iov[i].iov_len, advice) ? -errno
												    : 0;
			if (ret) {
				if (done)
					return done;
				errno = -ret;
				return -1;
			}
			done += (ssize_t)iov[i].iov_len;
		}
		return done;
	}
	if (!real_process_madvise)
		real_process_madvise = (process_madvise_fn)dlsym(RTLD_NEXT, "process_madvise");
	if (!real_process_madvise)
		return syscall(SYS_process_madvise, pidfd, iov, n, advice, flags);
	return real_process_madvise(pidfd, iov, n, advice, flags);
}

/* ---- locked memory ---- */

/*
 * The kernel's mlockall() faults in every page of every mapping it locks: the heap's whole
 * reservation and every registered range, gigabytes of zeros that reclaim could then not move (a
 * locked page cannot go to an unlocked shadow). So under an instance mlockall() locks what is not
 * under the limit: file mappings, the stack and glibc's brk heap now (MCL_CURRENT), and (MCL_FUTURE)
 * the mappings the program makes later that the instance does not manage. Memory under the limit
 * stays swappable: the program runs under `uswap run --limit` by the operator's choice, and is told
 * so once. mlock() of a range is the kernel's: those pages stay resident, over the limit if need be.
 * As with the kernel's, locks are not inherited by a fork child.
 */

/* Lock every file mapping, the stack and the brk heap with mlock2() @how. Return: 0 or -errno. */
static int lock_current(int how)
{
	struct span {
		uintptr_t a, b;
	} *v = NULL, *nv;
	size_t n = 0, cap = 0, len = 0;
	char *line = NULL;
	int ret = 0;
	FILE *f;

	t_internal++;
	f = fopen("/proc/self/maps", "re");
	if (!f) {
		ret = -errno;
		goto out;
	}
	/* all spans first: locking splits and merges the mappings the file lists */
	while (getline(&line, &len, f) > 0) {
		unsigned long a, b;
		int at = 0;

		if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &a, &b, &at) < 2 || !at)
			continue;
		const char *path = line + at;

		if (path[0] != '/' && strncmp(path, "[stack]", 7) && strncmp(path, "[heap]", 6))
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			if (!(nv = realloc(v, cap * sizeof(*v)))) {
				ret = -ENOMEM;
				break;
			}
			v = nv;
		}
		v[n++] = (struct span){a, b};
	}
	fclose(f);
	for (size_t i = 0; i < n && !ret; i++)
		if (syscall(SYS_mlock2, v[i].a, v[i].b - v[i].a, how))
			ret = -errno;
out:
	free(v);
	free(line);
	t_internal--;
	return ret;
}

int mlockall(int flags)
{
	static atomic_bool told;
	int how = flags & MCL_ONFAULT ? MLOCK_ONFAULT : 0, ret;

	if (!g_arena || t_internal)
		return (int)syscall(SYS_mlockall, flags);
	if ((flags & ~(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT)) || !(flags & (MCL_CURRENT | MCL_FUTURE))) {
		errno = EINVAL;
		return -1;
	}
	if (!atomic_exchange(&told, true))
		fprintf(stderr,
			"uswap: pid %d called mlockall(): its heap and the mappings under the limit "
			"stay swappable, the rest is locked\n",
			(int)getpid());
	atomic_store(&g_lock_future, flags & MCL_FUTURE ? how + 1 : 0);
	if ((flags & MCL_CURRENT) && (ret = lock_current(how))) {
		errno = -ret;
		return -1;
	}
	return 0;
}

int munlockall(void)
{
	atomic_store(&g_lock_future, 0);
	return (int)syscall(SYS_munlockall);
}

/* ---- descriptors the library keeps (util/fd.h) ---- */

/*
 * A close-all loop (daemons, closefrom(), close_range()) leaves the instance's descriptors open, and
 * a dup2() onto one fails with EBUSY (as when it races with an open()). They sit high in the table,
 * so a program picking small numbers (a shell's `exec 6>file`) never meets them.
 */
typedef int (*close_fn)(int);
static close_fn real_close;

int close(int fd)
{
	if (!t_internal && fd_kept(fd))
		return 0;
	if (!real_close)
		real_close = (close_fn)dlsym(RTLD_NEXT, "close");
	return real_close ? real_close(fd) : (int)syscall(SYS_close, fd);
}

int close_range(unsigned first, unsigned last, int flags)
{
	if (!t_internal && !(flags & CLOSE_RANGE_CLOEXEC)) {
		/* the gaps between kept descriptors, one call each */
		for (int k; first <= last && first < INT_MAX && (k = fd_kept_from((int)first)) >= 0 &&
			    (unsigned)k <= last;
		     first = (unsigned)k + 1) {
			if ((unsigned)k > first && syscall(SYS_close_range, first, (unsigned)k - 1, flags))
				return -1;
		}
		if (first > last)
			return 0;
	}
	return (int)syscall(SYS_close_range, first, last, flags);
}

void closefrom(int low)
{
	close_range((unsigned)(low < 0 ? 0 : low), ~0u, 0);
}

int dup2(int old, int new)
{
	if (!t_internal && old != new &&fd_kept(new)) {
		errno = EBUSY;
		return -1;
	}
	return (int)syscall(SYS_dup2, old, new);
}

int dup3(int old, int new, int flags)
{
	if (!t_internal && old != new &&fd_kept(new)) {
		errno = EBUSY;
		return -1;
	}
	return (int)syscall(SYS_dup3, old, new, flags);
}

/*
 * To the program a kept descriptor is a closed one: fstat(), fstatat() and statx() of it (by
 * AT_EMPTY_PATH) and fcntl() on it fail with EBADF. A program that finds its open descriptors by
 * probing every number up to the limit saw the instance's: python3's test_subprocess
 * (test_pass_fds_redirected) fstat()s 0..SC_OPEN_MAX in a child that, started under the preload, has
 * an instance of its own, and found ten descriptors it never opened. /proc/self/fd still lists them.
 * Binaries built before glibc 2.33 call __fxstat64() and __fxstat() for fstat().
 */
static bool hidden_fd(int fd)
{
	return !t_internal && fd_kept(fd);
}

static bool hidden_at(int dirfd, const char *path, int flags)
{
	return (flags & AT_EMPTY_PATH) && path && !*path && hidden_fd(dirfd);
}

static int fail_errno(int err)
{
	errno = err;
	return -1;
}

/* glibc's definition of @name, looked up once into @slot; NULL if it has none. */
static void *next_fn(void *_Atomic *slot, const char *name)
{
	void *f = atomic_load_explicit(slot, memory_order_relaxed);

	if (!f) {
		f = dlsym(RTLD_NEXT, name);
		atomic_store_explicit(slot, f, memory_order_relaxed);
	}
	return f;
}

typedef int (*fstat_fn)(int, struct stat *);
typedef int (*fstat64_fn)(int, struct stat64 *);
typedef int (*fstatat_fn)(int, const char *, struct stat *, int);
typedef int (*fstatat64_fn)(int, const char *, struct stat64 *, int);
typedef int (*statx_fn)(int, const char *, int, unsigned, struct statx *);
typedef int (*fxstat_fn)(int, int, struct stat *);
typedef int (*fxstat64_fn)(int, int, struct stat64 *);
typedef int (*fcntl_fn)(int, int, ...);

int fstat(int fd, struct stat *st)
{
	static void *_Atomic next;
	fstat_fn f = (fstat_fn)next_fn(&next, "fstat");

	if (hidden_fd(fd))
		return fail_errno(EBADF);
	return f ? f(fd, st) : fail_errno(ENOSYS);
}

int fstat64(int fd, struct stat64 *st)
{
	static void *_Atomic next;
	fstat64_fn f = (fstat64_fn)next_fn(&next, "fstat64");

	if (hidden_fd(fd))
		return fail_errno(EBADF);
	return f ? f(fd, st) : fail_errno(ENOSYS);
}

int fstatat(int dirfd, const char *path, struct stat *st, int flags)
{
	static void *_Atomic next;
	fstatat_fn f = (fstatat_fn)next_fn(&next, "fstatat");

	if (hidden_at(dirfd, path, flags))
		return fail_errno(EBADF);
	return f ? f(dirfd, path, st, flags) : fail_errno(ENOSYS);
}

int fstatat64(int dirfd, const char *path, struct stat64 *st, int flags)
{
	static void *_Atomic next;
	fstatat64_fn f = (fstatat64_fn)next_fn(&next, "fstatat64");

	if (hidden_at(dirfd, path, flags))
		return fail_errno(EBADF);
	return f ? f(dirfd, path, st, flags) : fail_errno(ENOSYS);
}

int statx(int dirfd, const char *path, int flags, unsigned mask, struct statx *stx)
{
	static void *_Atomic next;
	statx_fn f = (statx_fn)next_fn(&next, "statx");

	if (hidden_at(dirfd, path, flags))
		return fail_errno(EBADF);
	return f ? f(dirfd, path, flags, mask, stx) : fail_errno(ENOSYS);
}

int __fxstat(int ver, int fd, struct stat *st);
int __fxstat64(int ver, int fd, struct stat64 *st);

int __fxstat(int ver, int fd, struct stat *st)
{
	static void *_Atomic next;
	fxstat_fn f = (fxstat_fn)next_fn(&next, "__fxstat");

	if (hidden_fd(fd))
		return fail_errno(EBADF);
	return f ? f(ver, fd, st) : fail_errno(ENOSYS);
}

int __fxstat64(int ver, int fd, struct stat64 *st)
{
	static void *_Atomic next;
	fxstat64_fn f = (fxstat64_fn)next_fn(&next, "__fxstat64");

	if (hidden_fd(fd))
		return fail_errno(EBADF);
	return f ? f(ver, fd, st) : fail_errno(ENOSYS);
}

/* fcntl() or fcntl64() (@name, resolved into @next) on @fd, unless the descriptor is ours. */
static int fcntl_next(void *_Atomic *next, const char *name, int fd, int cmd, void *arg)
{
	fcntl_fn f = (fcntl_fn)next_fn(next, name);

	if (hidden_fd(fd))
		return fail_errno(EBADF);
	return f ? f(fd, cmd, arg) : fail_errno(ENOSYS);
}

/* fcntl's third argument, an int or a pointer, is read as glibc's fcntl reads it: as a pointer. */
int fcntl(int fd, int cmd, ...)
{
	static void *_Atomic next;
	va_list ap;
	void *arg;

	va_start(ap, cmd);
	arg = va_arg(ap, void *);
	va_end(ap);
	return fcntl_next(&next, "fcntl", fd, cmd, arg);
}

int fcntl64(int fd, int cmd, ...)
{
	static void *_Atomic next;
	va_list ap;
	void *arg;

	va_start(ap, cmd);
	arg = va_arg(ap, void *);
	va_end(ap);
	return fcntl_next(&next, "fcntl64", fd, cmd, arg);
}

/* ---- threads the library starts carry the mark ---- */

/*
 * The start routine and its argument are handed over on the creator's stack: a block malloc'd here
 * and freed in the new thread made glibc give each of our threads an arena of its own at that free
 * (tcache_init()), a 64 MiB reservation each (5 threads: 320 MiB of address space under `ulimit -v`).
 */
struct tramp {
	void *(*fn)(void *);
	void *arg;
	sem_t taken;
};

static void *tramp_main(void *p)
{
	struct tramp *t = p;
	void *(*fn)(void *) = t->fn, *arg = t->arg;

	t_internal = 1;
	sem_post(&t->taken); /* *t is gone from here */
	return fn(arg);
}

int pthread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
	if (!real_pthread_create)
		real_pthread_create = (pthread_create_fn)dlsym(RTLD_NEXT, "pthread_create");
	real_close = (close_fn)dlsym(RTLD_NEXT, "close");
	if (!t_internal)
		return real_pthread_create(th, attr, fn, arg);
	struct tramp t = {.fn = fn, .arg = arg};

	if (sem_init(&t.taken, 0, 0))
		return EAGAIN;
	int ret = real_pthread_create(th, attr, tramp_main, &t);
	if (!ret)
		while (sem_wait(&t.taken) && errno == EINTR)
			;
	sem_destroy(&t.taken);
	return ret;
}

/* ---- core dumps: swapped pages in first ---- */

/*
 * The kernel writes a page of a core that is not mapped as zeros, and the instance's handler threads
 * are killed before it starts: swapped-out and inactive pages would be zeros in the core. So when a
 * core will be written, the signals whose default action dumps core get a handler (if the program
 * left them at the default): in the dying thread it brings every page in (uswap_mm_prepare_dump(),
 * reclaim stopped for good), then sends the signal again with the same siginfo, now at its default
 * action (SA_RESETHAND), which the kernel delivers as the handler returns: the program dies as it
 * would have, its core written from the same registers. Not when more is swapped than half the
 * available memory (a line on stderr says the core has zeros there). A program's own handler
 * replaces ours; sigaction() and signal() report the default where ours is installed.
 */
static const int g_dump_signals[] = {SIGQUIT, SIGILL,  SIGTRAP, SIGABRT, SIGBUS,
				     SIGFPE,  SIGSEGV, SIGSYS,  SIGXCPU, SIGXFSZ};

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);
typedef void (*sighandler_fn)(int);
typedef sighandler_fn (*signal_fn)(int, sighandler_fn);
static sigaction_fn real_sigaction;
static signal_fn real_signal;

/* /proc/meminfo's MemAvailable in bytes (0 if unknown), with system calls only. */
static uint64_t mem_available(void)
{
	char buf[4096], *p;
	int fd = (int)syscall(SYS_openat, AT_FDCWD, "/proc/meminfo", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);

	if (fd >= 0)
		syscall(SYS_close, fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	p = strstr(buf, "MemAvailable:");
	return p ? strtoull(p + 13, NULL, 10) << 10 : 0;
}

/* Whether a fatal signal would write a core now: dumpable, and a core limit or a pipe to a helper. */
static bool core_expected(void)
{
	struct rlimit rl;
	char c = 0;
	int fd;

	if (prctl(PR_GET_DUMPABLE) <= 0)
		return false;
	if (!getrlimit(RLIMIT_CORE, &rl) && rl.rlim_cur != 0)
		return true;
	fd = (int)syscall(SYS_openat, AT_FDCWD, "/proc/sys/kernel/core_pattern", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		if (read(fd, &c, 1) != 1)
			c = 0;
		syscall(SYS_close, fd);
	}
	return c == '|'; /* a helper gets the core whatever RLIMIT_CORE says (but 1) */
}

static void dump_handler(int sig, siginfo_t *si, void *uc)
{
	int saved = errno, ret;

	(void)uc;
	t_internal++;
	if (g_mm && ours() && core_expected()) {
		uint64_t avail = mem_available();

		ret = uswap_mm_prepare_dump(g_mm, avail ? avail / 2 : UINT64_MAX);
		if (ret) {
			char msg[160];
			int n = snprintf(
				msg, sizeof(msg),
				"uswap: pid %d: its core has zeros where its memory was swapped out (%s)\n",
				(int)getpid(),
				ret == -ENOMEM ? "more than half the available memory" : "busy");

			if (write(2, msg, (size_t)n) < 0)
				n = 0;
		}
	}
	/* At the default action now (SA_RESETHAND); delivered as we return, from the same registers. */
	syscall(SYS_rt_tgsigqueueinfo, getpid(), gettid(), sig, si);
	t_internal--;
	errno = saved;
}

static bool dump_signal(int sig)
{
	for (size_t i = 0; i < sizeof(g_dump_signals) / sizeof(g_dump_signals[0]); i++)
		if (g_dump_signals[i] == sig)
			return true;
	return false;
}

static const struct sigaction g_dump_action = {
	.sa_sigaction = dump_handler, .sa_flags = SA_SIGINFO | SA_RESETHAND | SA_ONSTACK | SA_RESTART};
static bool g_dump_armed; /* a core was expected at start: ours stands for the default action */

void dump_handlers_install(void)
{
	if (!core_expected())
		return;
	if (!real_sigaction)
		real_sigaction = (sigaction_fn)dlsym(RTLD_NEXT, "sigaction");
	for (size_t i = 0; i < sizeof(g_dump_signals) / sizeof(g_dump_signals[0]); i++) {
		struct sigaction old;

		if (!real_sigaction(g_dump_signals[i], NULL, &old) && !(old.sa_flags & SA_SIGINFO) &&
		    old.sa_handler == SIG_DFL)
			real_sigaction(g_dump_signals[i], &g_dump_action, NULL);
	}
	g_dump_armed = true;
}

/* The program sees the default action where ours stands. */
static void hide_ours(int sig, struct sigaction *old)
{
	if (old && dump_signal(sig) && (old->sa_flags & SA_SIGINFO) && old->sa_sigaction == dump_handler) {
		memset(old, 0, sizeof(*old));
		old->sa_handler = SIG_DFL;
	}
}

/* A program that sets the default action (many reset every signal at start) gets ours in its place. */
static bool sets_default(int sig, const struct sigaction *act)
{
	return act && g_dump_armed && dump_signal(sig) && !(act->sa_flags & SA_SIGINFO) &&
	       act->sa_handler == SIG_DFL;
}

int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	int ret;

	if (!real_sigaction)
		real_sigaction = (sigaction_fn)dlsym(RTLD_NEXT, "sigaction");
	ret = real_sigaction(sig, sets_default(sig, act) ? &g_dump_action : act, old);
	if (!ret)
		hide_ours(sig, old);
	return ret;
}

sighandler_fn signal(int sig, sighandler_fn fn)
{
	struct sigaction act = {.sa_handler = fn}, old;

	if (!real_signal)
		real_signal = (signal_fn)dlsym(RTLD_NEXT, "signal");
	if (!sets_default(sig, &act)) {
		sighandler_fn prev = real_signal(sig, fn);

		return dump_signal(sig) && prev == (sighandler_fn)(void (*)(void))dump_handler ? SIG_DFL
											       : prev;
	}
	if (sigaction(sig, &act, &old))
		return SIG_ERR;
	return (old.sa_flags & SA_SIGINFO) ? (sighandler_fn)(void (*)(void))old.sa_sigaction : old.sa_handler;
}
