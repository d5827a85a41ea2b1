/*
 * err.h - the per-thread message behind uswap_errmsg().
 */
#ifndef USWAP_UTIL_ERR_H
#define USWAP_UTIL_ERR_H

/* err_set() - record a message for this thread and return @err (a negative errno) for tail calls. */
int err_set(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void err_clear(void);

#endif
