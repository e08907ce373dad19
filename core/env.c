/* SPDX-License-Identifier: MIT */
/*
 * The core's environment variables, read once per process
 * (docs/environment.md). A bad value is never replaced silently: it is remembered with
 * a message naming the variable, and zap_pick() fails with it.
 */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/auxv.h>

#include "zap-addr.h"
#include "zap-private.h"

static struct zap_config config;
static pthread_once_t config_once = PTHREAD_ONCE_INIT;
static atomic_bool env_forbidden;

typedef const char *(*env_fn)(const char *name);

static const char *plain_getenv(const char *name)
{
	return getenv(name);
}

static const char *core_secure_getenv(const char *name)
{
	return secure_getenv(name);
}

bool zap__env_secure(void)
{
	return getauxval(AT_SECURE) != 0 || atomic_load(&env_forbidden);
}

void zap__env_forbid(void)
{
	atomic_store(&env_forbidden, true);
}

/*
 * A setuid, setgid or file-capability program (AT_SECURE) runs with the
 * privileges of its file but the environment of its caller: a plugin that
 * read ZAP_DPDK_EAL_ARGS there would let the caller pick the libraries
 * DPDK loads ("-d some.so") into a privileged process. So plugins see no
 * variable at all there; they report themselves not configured.
 */
const char *zap__env_get(const char *name)
{
	if (!name || zap__env_secure())
		return NULL;
	return getenv(name);
}

/*
 * Trimmed copy of an env value into @buf; NULL when unset or blank. A value
 * that does not fit is never cut short (its head could be valid on its
 * own): @buf gets "" and *@toolong its trimmed length.
 */
static const char *env_trimmed_with(env_fn get, const char *name, char *buf, size_t len,
				    size_t *toolong)
{
	const char *v = get(name);
	size_t n;

	*toolong = 0;
	if (!v)
		return NULL;
	while (isspace((unsigned char)*v))
		v++;
	n = strlen(v);
	while (n && isspace((unsigned char)v[n - 1]))
		n--;
	if (!n)
		return NULL;
	if (n >= len) {
		*toolong = n;
		buf[0] = '\0';
		return buf;
	}
	memcpy(buf, v, n);
	buf[n] = '\0';
	return buf;
}

static const char *env_trimmed(const char *name, char *buf, size_t len, size_t *toolong)
{
	return env_trimmed_with(plain_getenv, name, buf, len, toolong);
}

static void config_error(struct zap_config *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void config_error(struct zap_config *c, const char *fmt, ...)
{
	va_list ap;

	if (c->error) /* keep the first */
		return;
	c->error = -EINVAL;
	va_start(ap, fmt);
	vsnprintf(c->error_msg, sizeof(c->error_msg), fmt, ap);
	va_end(ap);
}

int zap__parse_bytes(const char *s, uint64_t *out)
{
	static const struct {
		const char *suffix;
		unsigned shift;
	} units[] = {
		{ "", 0 },     { "b", 0 },   { "k", 10 },   { "kb", 10 },  { "kib", 10 },
		{ "m", 20 },   { "mb", 20 }, { "mib", 20 }, { "g", 30 },   { "gb", 30 },
		{ "gib", 30 }, { "t", 40 },  { "tb", 40 },  { "tib", 40 },
	};
	uint64_t v = 0;
	const char *p = s;

	while (isspace((unsigned char)*p))
		p++;
	if (!isdigit((unsigned char)*p))
		return -EINVAL;
	for (; isdigit((unsigned char)*p); p++) {
		uint64_t d = (uint64_t)(*p - '0');

		/* Exact: 18446744073709551615 is still a byte count. */
		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	while (isspace((unsigned char)*p))
		p++;
	for (size_t i = 0; i < ZAP_ARRAY_SIZE(units); i++) {
		size_t n = strlen(units[i].suffix);
		const char *q = p + n;

		if (strncasecmp(p, units[i].suffix, n))
			continue;
		while (isspace((unsigned char)*q))
			q++;
		if (*q)
			continue;
		if (units[i].shift && v > (UINT64_MAX >> units[i].shift))
			return -ERANGE;
		*out = v << units[i].shift;
		return 0;
	}
	return -EINVAL;
}

static int env_bytes_with(env_fn get, const char *name, uint64_t def, uint64_t min,
			  uint64_t max, uint64_t *out)
{
	char buf[64];
	size_t toolong;
	const char *v = env_trimmed_with(get, name, buf, sizeof(buf), &toolong);
	uint64_t n;
	int rc;

	if (!v) {
		*out = def;
		return 0;
	}
	if (toolong)
		return zap__fail(-EINVAL,
				 "%s is too long (%zu characters) for a byte count", name,
				 toolong);
	rc = zap__parse_bytes(v, &n);
	if (rc)
		return zap__fail(-EINVAL,
				 "%s='%s' is not a byte count (e.g. 4096, 64M, 4GiB)",
				 name, get(name));
	if (n < min || n > max)
		return zap__fail(-EINVAL, "%s=%s is out of range [%llu, %llu] bytes",
				 name, v, (unsigned long long)min,
				 (unsigned long long)max);
	*out = n;
	return 0;
}

int zap__env_bytes(const char *name, uint64_t def, uint64_t min, uint64_t max,
		   uint64_t *out)
{
	return env_bytes_with(plain_getenv, name, def, min, max, out);
}

int zap__host_env_bytes(const char *name, uint64_t def, uint64_t min, uint64_t max,
			uint64_t *out)
{
	return env_bytes_with(zap__env_get, name, def, min, max, out);
}

/*
 * Syntax check of a socket address "host:port", "[v6]:port", "unix:/path"
 * or "unix:@name" (the socket transports resolve it; one that has no Unix
 * sockets refuses the unix forms itself); @what names its origin for the
 * message.
 */
int zap__check_address(const char *what, const char *addr)
{
	struct zaddr a;

	/* The grammar is zap-addr.h's, shared with every transport. */
	if (addr && !strncmp(addr, "unix:", 5) && zaddr_parse(addr, &a)) {
		const char *why = "malformed";
		zaddr_unix_check(addr + 5, strlen(addr + 5), &why);
		return zap__fail(-EINVAL, "%s='%.160s' is not a Unix socket address: %s",
				 what, addr, why);
	}
	if (zaddr_parse(addr, &a))
		return zap__fail(
			-EINVAL,
			"%s='%s' is not an address of the form host:port, [ipv6]:port, "
			"unix:/path or unix:@name",
			what, addr);
	return 0;
}

int zap__parse_bool(const char *s)
{
	static const char *const yes[] = { "1", "yes", "true", "on" };
	static const char *const no[] = { "0", "no", "false", "off" };

	for (size_t i = 0; i < ZAP_ARRAY_SIZE(yes); i++) {
		if (!strcasecmp(s, yes[i]))
			return 1;
		if (!strcasecmp(s, no[i]))
			return 0;
	}
	return -EINVAL;
}

int zap__parse_log_level(const char *s, enum zap_log_level *out)
{
	static const char *const names[] = { "error", "warn", "info", "debug" };

	for (size_t i = 0; i < ZAP_ARRAY_SIZE(names); i++)
		if (!strcasecmp(s, names[i])) {
			*out = (enum zap_log_level)i;
			return 0;
		}
	return -EINVAL;
}

/*
 * Read and check the core's variables into @c (zeroed here). Separate from
 * the once-per-process zap__config() so that the fuzz harness can run it on
 * any environment.
 */
/* A number of milliseconds in [0, UINT32_MAX] from @name; unset: 0. */
static void env_millis(struct zap_config *c, const char *name, const char *zero,
		       uint64_t *out)
{
	char buf[64], *end;
	size_t toolong;
	unsigned long long ms;
	const char *v = env_trimmed(name, buf, sizeof(buf), &toolong);

	if (toolong) {
		config_error(c, "%s is too long (%zu characters)", name, toolong);
		return;
	}
	if (!v)
		return;
	errno = 0;
	ms = strtoull(v, &end, 10);
	if (errno || end == v || *end || v[0] == '-' || ms > UINT32_MAX)
		config_error(c, "%s='%s' is not a number of milliseconds in [0, %u] (%s)",
			     name, v, UINT32_MAX, zero);
	else
		*out = ms;
}

/* A boolean (ZAP_BOOL_SPELLINGS) from @name, read with @get; unset or
 * empty: *@out untouched. */
static void env_boolean(struct zap_config *c, env_fn get, const char *name, bool *out)
{
	char buf[16];
	size_t toolong;
	const char *v = env_trimmed_with(get, name, buf, sizeof(buf), &toolong);
	int b;

	if (toolong) {
		config_error(c,
			     "%s is not a boolean (%zu characters; " ZAP_BOOL_SPELLINGS
			     ")",
			     name, toolong);
		return;
	}
	if (!v)
		return;
	b = zap__parse_bool(v);
	if (b < 0)
		config_error(c, "%s='%s' is not a boolean (" ZAP_BOOL_SPELLINGS ")", name,
			     v);
	else
		*out = b;
}

void zap__config_read(struct zap_config *c)
{
	char buf[64];
	size_t toolong;
	const char *v;

	memset(c, 0, sizeof(*c));
	c->log_level = ZAP_LOG_WARN;
	v = env_trimmed("ZAP_LOG_LEVEL", buf, sizeof(buf), &toolong);
	if (toolong) {
		config_error(c, "ZAP_LOG_LEVEL is too long (%zu characters)", toolong);
	} else if (v) {
		if (!zap__parse_log_level(v, &c->log_level))
			c->log_level_set = true;
		else
			config_error(
				c,
				"ZAP_LOG_LEVEL='%s' is not one of error, warn, info, debug",
				v);
	}

	env_boolean(c, plain_getenv, "ZAP_TRANSPORT_QUIET", &c->quiet);
	/* Not in a privileged program: there the caller could choose to have
	 * plugins probed inside it. */
	env_boolean(c, core_secure_getenv, "ZAP_PROBE_INPROCESS", &c->probe_inprocess);

	/* Syntax is checked by the pick parser, which names the variable. */
	if (getenv("ZAP_TRANSPORT")) {
		const char *t = getenv("ZAP_TRANSPORT");

		if (strlen(t) >= sizeof(c->transport_buf))
			config_error(c, "ZAP_TRANSPORT is too long (%zu characters)",
				     strlen(t));
		else
			c->transport = strcpy(c->transport_buf, t);
	}

	v = env_trimmed("ZAP_LISTEN", c->listen_buf, sizeof(c->listen_buf), &toolong);
	if (toolong) {
		config_error(c, "ZAP_LISTEN is too long (%zu characters)", toolong);
	} else if (v) {
		if (zap__check_address("ZAP_LISTEN", v))
			config_error(c, "%s", zap_last_error());
		c->listen = v;
	}

	if (zap__env_bytes("ZAP_MAX_MSG_BYTES", 0, 1, ZAP_MAX_MSG_LIMIT,
			   &c->max_msg_size))
		config_error(c, "%s", zap_last_error());

	env_millis(c, "ZAP_SEND_TIMEOUT_MS", "0: no timeout", &c->send_timeout_ms);
	env_millis(c, "ZAP_PROBE_TIMEOUT_MS", "0: the default, 5000",
		   &c->probe_timeout_ms);

	/* TLS files: not in a privileged program, where the caller could
	 * point it at a file of its choosing (such programs pass zap_attr). */
	static const char *const tls_vars[4] = { "ZAP_TLS_CERT", "ZAP_TLS_KEY",
						 "ZAP_TLS_CA", "ZAP_TLS_PEERS" };
	for (int i = 0; i < 4; i++) {
		v = env_trimmed_with(core_secure_getenv, tls_vars[i], c->tls_buf[i],
				     sizeof(c->tls_buf[i]), &toolong);
		if (toolong)
			config_error(c, "%s is too long (%zu characters)", tls_vars[i],
				     toolong);
		else if (v && *v)
			c->tls[i] = v;
	}
	zap__clear_error();
}

static void config_load(void)
{
	zap__config_read(&config);
}

const struct zap_config *zap__config(void)
{
	pthread_once(&config_once, config_load);
	return &config;
}
