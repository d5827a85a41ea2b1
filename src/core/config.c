/*
 * config.c - the tier string: "name[:args]" items separated by commas, in store order; a tier that
 * wraps another names it in parentheses, "fault(zpool:lz4):eio=1%", and commas inside them belong to
 * it. Strict: an unknown backend, an empty item, unbalanced parentheses or too many tiers is an error
 * naming the part; each backend parses its own args strictly in its open(), which stops after parsing
 * when asked only to check. Also the one place that composes the default stack.
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
	size_t host = strcspn(s, ":,()"), digits;

	if (!host || s[host] != ':')
		return false;
	digits = strspn(s + host + 1, "0123456789");
	return digits && strchr(",:", s[host + 1 + digits]);
}

/*
 * The end of the tier at @s: the next comma outside parentheses (a wrapped tier's commas are its own),
 * or the end of the string. Return: its length, or -EINVAL (message set) for a ')' that closes nothing
 * or a '(' never closed.
 */
static ssize_t tier_len(const char *spec, const char *s)
{
	int depth = 0;
	size_t i;

	for (i = 0; s[i] && (s[i] != ',' || depth); i++) {
		if (s[i] == '(')
			depth++;
		else if (s[i] == ')' && --depth < 0)
			return err_set(-EINVAL, "\")\" at %zu of \"%s\" closes no \"(\"",
				       (size_t)(s - spec) + i, spec);
	}
	if (depth)
		return err_set(-EINVAL, "\"(\" not closed in \"%s\"", spec);
	return (ssize_t)i;
}

int config_open_tiers(struct uswap *u, const char *spec, unsigned nr_ctx, bool check_only)
{
	const char *s = spec;
	int ret;

	if (!*s)
		return err_set(-EINVAL, "empty tier string: name at least one tier (%s)", backend_names());
	while (*s) {
		ssize_t len = tier_len(spec, s);
		size_t namelen = strcspn(s, ":(,");
		const struct uswap_backend_ops *ops;
		struct backend *b;
		struct backend_env env;

		if (len < 0)
			return (int)len;
		if (!len)
			return err_set(-EINVAL, "empty tier in \"%s\" (a stray comma?)", spec);
		if (u->nr_tiers == USWAP_MAX_TIERS)
			return err_set(-EINVAL, "too many tiers in \"%s\": at most %u", spec,
				       USWAP_MAX_TIERS);
		ops = backend_lookup(s, namelen);
		if (ops && ops->caps & BACKEND_SEEDS) {
			while (s[len] && is_seed(s + len + 1)) {
				ssize_t more = tier_len(spec, s + len + 1);

				if (more < 0)
					return (int)more;
				len += 1 + more;
			}
		}
		b = &u->tier[u->nr_tiers];
		memset(b, 0, sizeof(*b));
		b->index = u->nr_tiers;
		env.nr_ctx = nr_ctx;
		env.is_last = !s[len];
		env.check_only = check_only;
		err_clear();
		ret = backend_open_spec(b, s, (size_t)len, &env);
		if (ret) {
			if (!uswap_errmsg()[0])
				err_set(ret, "tier \"%s\": cannot open (%s)", b->spec, strerror(-ret));
			b->ops = NULL;
			return ret;
		}
		if (check_only)
			b->ops = NULL; /* nothing was opened: nothing to close */
		u->nr_tiers++;
		s += len;
		if (*s && !*++s)
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
