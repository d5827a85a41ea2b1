/*
 * config.c - the tier string: "name[:args]" items separated by commas, in store order. Strict: an
 * unknown backend, an empty item or too many tiers is an error naming the part; each backend parses
 * its own args strictly in its open(), which stops after parsing when asked only to check. Also the
 * one place that composes the default stack.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/layer.h"
#include "util/alloc.h"
#include "util/err.h"

int uswap_default_tiers(uint64_t limit_bytes, char *buf, size_t len)
{
	int n;

	if (limit_bytes)
		n = snprintf(buf, len, "same,zpool:lz4:max=%lluK,file",
			     (unsigned long long)(limit_bytes / USWAP_POOL_SHARE_MAX_DIV >> 10));
	else
		n = snprintf(buf, len, "same,zpool:lz4,file");
	return n < 0 || (size_t)n >= len ? -ENOSPC : n;
}

/* "HOST:PORT" followed by ',', ':' or the end: another seed of a BACKEND_SEEDS tier, not a tier name. */
static bool is_seed(const char *s)
{
	size_t host = strcspn(s, ":,"), digits;

	if (!host || s[host] != ':')
		return false;
	digits = strspn(s + host + 1, "0123456789");
	return digits && strchr(",:", s[host + 1 + digits]);
}

int config_open_tiers(struct uswap *u, const char *spec, unsigned nr_ctx, bool check_only)
{
	const char *s = spec;
	int ret;

	if (!*s)
		return err_set(-EINVAL, "empty tier string: name at least one tier (%s)", backend_names());
	while (*s) {
		const char *end = strchr(s, ','), *colon;
		size_t len = end ? (size_t)(end - s) : strlen(s), namelen;
		const struct uswap_backend_ops *ops;
		struct backend *b;
		char args[sizeof(b->spec)];
		struct backend_env env;

		if (!len)
			return err_set(-EINVAL, "empty tier in \"%s\" (a stray comma?)", spec);
		if (u->nr_tiers == USWAP_MAX_TIERS)
			return err_set(-EINVAL, "too many tiers in \"%s\": at most %u", spec, USWAP_MAX_TIERS);
		colon = memchr(s, ':', len);
		namelen = colon ? (size_t)(colon - s) : len;
		ops = backend_lookup(s, namelen);
		if (!ops)
			return err_set(-EINVAL, "unknown tier \"%.*s\" in \"%s\" (known: %s)", (int)namelen, s, spec,
				       backend_names());
		if (ops->caps & BACKEND_SEEDS) {
			while (end && is_seed(end + 1))
				end = strchr(end + 1, ',');
			len = end ? (size_t)(end - s) : strlen(s);
		}
		if (len >= sizeof(b->spec))
			return err_set(-EINVAL, "tier \"%.*s...\" is too long", 32, s);
		b = &u->tier[u->nr_tiers];
		memset(b, 0, sizeof(*b));
		b->index = u->nr_tiers;
		snprintf(b->spec, sizeof(b->spec), "%.*s", (int)len, s);
		snprintf(args, sizeof(args), "%.*s", colon ? (int)(len - namelen - 1) : 0, colon ? colon + 1 : "");
		env.nr_ctx = nr_ctx;
		env.is_last = end == NULL;
		env.check_only = check_only;
		ret = backend_open(b, ops, args, &env);
		if (ret) {
			if (!uswap_errmsg()[0])
				err_set(ret, "tier \"%s\": cannot open (%s)", b->spec, strerror(-ret));
			b->ops = NULL;
			return ret;
		}
		if (check_only)
			b->ops = NULL; /* nothing was opened: nothing to close */
		u->nr_tiers++;
		s = end ? end + 1 : s + len;
		if (end && !*s)
			return err_set(-EINVAL, "tier string \"%s\" ends with a comma", spec);
	}
	return 0;
}

int uswap_check_tiers(const char *spec)
{
	char def[USWAP_TIERS_LEN];
	struct uswap *u;
	int ret;

	err_clear();
	if (!spec || !*spec) {
		uswap_default_tiers(0, def, sizeof(def));
		spec = def;
	}
	u = ualloc_zero(sizeof(*u));
	if (!u)
		return -ENOMEM;
	ret = config_open_tiers(u, spec, 1, true);
	ufree(u);
	return ret;
}
