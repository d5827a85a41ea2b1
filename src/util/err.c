/*
 * err.c - per-thread last error message.
 */
#include "util/err.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

#include "uswap.h"

static _Thread_local char errmsg[256];

int err_set(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(errmsg, sizeof(errmsg), fmt, ap);
	va_end(ap);
	return err;
}

int err_invariant(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(errmsg, sizeof(errmsg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "uswap: invariant: %s\n", errmsg);
	return -EUCLEAN;
}

void err_clear(void)
{
	errmsg[0] = '\0';
}

const char *uswap_errmsg(void)
{
	return errmsg;
}
