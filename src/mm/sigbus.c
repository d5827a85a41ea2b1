/*
 * sigbus.c - SIGBUS mode: the faulting thread resolves its own fault.
 *
 * With UFFD_FEATURE_SIGBUS the kernel does not queue a fault and put the thread to sleep: it sends
 * the thread SIGBUS (BUS_ADRERR, the address in si_addr), and the handler below resolves the fault
 * in that thread, like a handler thread would, then returns and the access is retried. No wake-up
 * of another thread, no sleep: the cheapest way to serve a fault on this machine's vCPUs
 * (docs/results.md#fault-floor). The price: an access the kernel makes on the program's behalf
 * (read(2) into a missing page, a futex word) cannot be served and fails with EFAULT.
 *
 * Which fault it was comes from the page-fault error code the kernel leaves in the signal frame
 * (x86: bit 0 the page was present, so a write-protect fault; bit 1 a write). The handler runs with
 * every signal blocked (so no other handler of the program interrupts it and faults in turn), never
 * allocates, and takes only our own locks, which no thread holds while it touches registered memory.
 */
#include <errno.h>
#include <signal.h>
#include <ucontext.h>

#include "mm/mm.h"

static pthread_rwlock_t sig_lock = PTHREAD_RWLOCK_INITIALIZER; /* sig_mm: written under it for writing */
static struct uswap_mm *sig_mm[MM_SIGBUS_MAX];
static struct sigaction sig_old; /* the program's SIGBUS action before ours */

#if defined(__x86_64__)
#define SIG_FLAGS_KNOWN 1
static bool sig_fault_flags(const void *ucv, bool *wp, bool *write)
{
	const ucontext_t *uc = ucv;
	unsigned long err = (unsigned long)uc->uc_mcontext.gregs[REG_ERR];

	*wp = err & 1;
	*write = err & 2;
	return true;
}
#else
#define SIG_FLAGS_KNOWN 0
static bool sig_fault_flags(const void *ucv, bool *wp, bool *write)
{
	(void)ucv;
	*wp = *write = false;
	return false;
}
#endif

/* Not a fault of ours: what the program would have got without us (@old: its action). */
static void sig_chain(const struct sigaction *old, int sig, siginfo_t *si, void *uc)
{
	if (old->sa_flags & SA_SIGINFO) {
		if (old->sa_sigaction) {
			old->sa_sigaction(sig, si, uc);
			return;
		}
	} else if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) {
		old->sa_handler(sig);
		return;
	}
	/*
	 * The default action (a SIGBUS the kernel raises for a fault cannot be ignored): a faulting
	 * access is retried on return and faults again, now to the default; one sent by kill() is sent
	 * again, and delivered when this handler returns, unless the program ignored it.
	 */
	if (si->si_code <= 0 && old->sa_handler == SIG_IGN)
		return;
	signal(SIGBUS, SIG_DFL);
	if (si->si_code <= 0)
		raise(sig);
}

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	int saved = errno, ret = -ENOENT;
	uintptr_t addr = (uintptr_t)si->si_addr & ~(MM_PAGE - 1);
	struct sigaction old;
	bool wp, write;

	pthread_rwlock_rdlock(&sig_lock);
	old = sig_old;
	if (si->si_code == BUS_ADRERR && sig_fault_flags(uc, &wp, &write)) {
		/* First the regions of every instance, then a range one of them may have grown. */
		for (int pass = 0; pass < 2 && ret == -ENOENT; pass++)
			for (unsigned i = 0; i < MM_SIGBUS_MAX && ret == -ENOENT; i++) {
				struct uswap_mm *m = sig_mm[i];
				unsigned slot;
				unsigned char *stage;

				if (!m)
					continue;
				/* Faults after a munmap/mremap/madvise of ours see its event applied. */
				fault_settle(m);
				stage = fault_stage_get(m, &slot);
				ret = fault_resolve(m, stage, addr, wp, write, pass == 1);
				fault_stage_put(m, slot);
				if (!ret)
					atomic_fetch_add_explicit(&m->c.sigbus_faults, 1,
								  memory_order_relaxed);
			}
	}
	pthread_rwlock_unlock(&sig_lock);
	errno = saved;
	if (ret)
		sig_chain(&old, sig, si, uc);
}

static bool sig_none(void)
{
	for (unsigned i = 0; i < MM_SIGBUS_MAX; i++)
		if (sig_mm[i])
			return false;
	return true;
}

int sigbus_add(struct uswap_mm *m)
{
	int ret = -EMFILE;

	if (!SIG_FLAGS_KNOWN)
		return -EOPNOTSUPP;
	pthread_rwlock_wrlock(&sig_lock);
	/*
	 * The first instance installs the handler (again, if the last one went: see _del()), unless it
	 * is there already (a fork child of a process that had one keeps it, and sig_old with it).
	 */
	if (sig_none()) {
		struct sigaction sa = {.sa_sigaction = on_sigbus, .sa_flags = SA_SIGINFO | SA_RESTART}, cur;

		sigfillset(&sa.sa_mask);
		if (sigaction(SIGBUS, NULL, &cur) ||
		    (!((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_sigbus) &&
		     sigaction(SIGBUS, &sa, &sig_old))) {
			ret = -errno;
			goto out;
		}
	}
	for (unsigned i = 0; i < MM_SIGBUS_MAX; i++)
		if (!sig_mm[i]) {
			sig_mm[i] = m;
			ret = 0;
			break;
		}
out:
	pthread_rwlock_unlock(&sig_lock);
	return ret;
}

void sigbus_del(struct uswap_mm *m)
{
	pthread_rwlock_wrlock(&sig_lock);
	for (unsigned i = 0; i < MM_SIGBUS_MAX; i++)
		if (sig_mm[i] == m)
			sig_mm[i] = NULL;
	/* The last one gives the program its action back, unless the program changed it since. */
	if (sig_none()) {
		struct sigaction cur;

		if (!sigaction(SIGBUS, NULL, &cur) && (cur.sa_flags & SA_SIGINFO) &&
		    cur.sa_sigaction == on_sigbus)
			sigaction(SIGBUS, &sig_old, NULL);
	}
	pthread_rwlock_unlock(&sig_lock);
}

void sigbus_child(void)
{
	/* Only this thread runs in the child; sig_lock may have been held by another at fork(). */
	for (unsigned i = 0; i < MM_SIGBUS_MAX; i++)
		sig_mm[i] = NULL;
}
