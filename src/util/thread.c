/*
 * thread.c - threads the library starts (see thread.h for why they block signals).
 */
#include <errno.h>
#include <signal.h>

#include "util/thread.h"

/* Raised by the thread's own instruction: blocking them turns a fault into a kill. */
static const int sync_signals[] = {SIGBUS, SIGSEGV, SIGFPE, SIGILL, SIGTRAP, SIGSYS};

void thread_sigmask(sigset_t *set)
{
	sigfillset(set); /* glibc leaves out its own SIGCANCEL and SIGSETXID */
	for (size_t i = 0; i < sizeof(sync_signals) / sizeof(sync_signals[0]); i++)
		sigdelset(set, sync_signals[i]);
}

int thread_start(pthread_t *th, const char *name, void *(*fn)(void *), void *arg)
{
	pthread_attr_t attr;
	sigset_t set;
	int ret;

	ret = pthread_attr_init(&attr);
	if (ret)
		return -ret;
	thread_sigmask(&set);
	/* The mask is set before the thread runs a single instruction: no window for a signal. */
	ret = pthread_attr_setsigmask_np(&attr, &set);
	if (!ret)
		ret = pthread_create(th, &attr, fn, arg);
	pthread_attr_destroy(&attr);
	if (ret)
		return -ret;
	if (name)
		pthread_setname_np(*th, name);
	return 0;
}
