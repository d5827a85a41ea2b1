/*
 * size.c - sizes in configuration strings: "4096", "64K", "256M", "8G", "1T", "25%" (of physical RAM).
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "uswap.h"

int uswap_parse_size(const char *s, int pct_ok, uint64_t *bytes)
{
	unsigned long long v;
	char *end;
	unsigned shift = 0;

	if (!s || !isdigit((unsigned char)s[0]))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	if (*end == '%') {
		long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);

		if (!pct_ok || end[1] || v == 0 || v > 100 || pages <= 0 || psz <= 0)
			return -EINVAL;
		*bytes = (uint64_t)pages * (uint64_t)psz / 100 * v;
		return 0;
	}
	switch (toupper((unsigned char)*end)) {
	case '\0':
		break;
	case 'K':
		shift = 10;
		break;
	case 'M':
		shift = 20;
		break;
	case 'G':
		shift = 30;
		break;
	case 'T':
		shift = 40;
		break;
	default:
		return -EINVAL;
	}
	if (shift) {
		end++;
		if (toupper((unsigned char)*end) == 'I' && toupper((unsigned char)end[1]) == 'B')
			end += 2;
		else if (toupper((unsigned char)*end) == 'B')
			end++;
	}
	if (*end || (shift && v > (~0ull >> shift)))
		return -EINVAL;
	*bytes = (uint64_t)v << shift;
	return 0;
}
