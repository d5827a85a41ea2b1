/*
 * clock.h - the clocks the library reads: monotonic time for intervals and deadlines, wall time for
 * what a person reads (when a process started, when its statistics were last written).
 */
#ifndef USWAP_CLOCK_H
#define USWAP_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t clock_ns_of(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t mono_ns(void)
{
	return clock_ns_of(CLOCK_MONOTONIC);
}

static inline uint64_t mono_ms(void)
{
	return mono_ns() / 1000000;
}

/* Milliseconds, to the last tick (cheaper: no clock source read). */
static inline uint64_t coarse_ms(void)
{
	return clock_ns_of(CLOCK_MONOTONIC_COARSE) / 1000000;
}

static inline uint64_t wall_ns(void)
{
	return clock_ns_of(CLOCK_REALTIME);
}

#endif
