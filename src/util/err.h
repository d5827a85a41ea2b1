/*
 * err.h - the per-thread message behind uswap_errmsg().
 */
#ifndef USWAP_UTIL_ERR_H
#define USWAP_UTIL_ERR_H

/* err_set() - record a message for this thread and return @err (a negative errno) for tail calls. */
int err_set(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void err_clear(void);
/*
 * err_invariant() - a broken invariant found by a validator (DEBUG builds), or by a check just before
 * its assertion fails (any build): "uswap: invariant: ..." on stderr, where a test run shows it, and
 * the same message for uswap_errmsg(). Return: -EUCLEAN.
 */
int err_invariant(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
