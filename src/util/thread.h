/*
 * thread.h - threads the library starts: named, and deaf to asynchronous signals.
 *
 * A process-directed signal goes to any thread that does not block it. A program that blocks a
 * signal in all of its own threads (to take it from sigwait() or a signalfd, as servers do with
 * SIGTERM, SIGINT and SIGCHLD) must find it pending, not handled in one of ours. So every thread the
 * library starts blocks every signal for its whole life but the synchronous ones (SIGBUS, SIGSEGV,
 * SIGFPE, SIGILL, SIGTRAP, SIGSYS: blocked, a fault of the thread's own would kill the process).
 */
#ifndef USWAP_UTIL_THREAD_H
#define USWAP_UTIL_THREAD_H

#include <pthread.h>

/*
 * thread_start() - start @fn(@arg) as thread @name (at most 15 characters), signals blocked as above.
 * The caller's own signal mask is not touched.
 * Return: 0; -EAGAIN, -ENOMEM or another -errno of pthread_create().
 */
int thread_start(pthread_t *th, const char *name, void *(*fn)(void *), void *arg);

/* The mask thread_start() gives its threads (every signal but the synchronous ones). */
void thread_sigmask(sigset_t *set);

#endif
