/* SPDX-License-Identifier: MIT */
/*
 * The core's own variables, read once per process through the registry
 * (core/zap-config.h, docs/environment.md), and the compatibility services of
 * the host table (env_get, env_bytes) for plugins built before it. A bad
 * value is never replaced silently: it is remembered with a message naming
 * the variable, and zap_pick() fails with it.
 *
 * Shared state: @config, written once under pthread_once and then only
 * read; @env_forbidden, an atomic flag set once by the probe helper.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/auxv.h>

#include "zap-config.h"
#include "zap-addr.h"
#include "zap-private.h"

static struct zap_config config;
static pthread_once_t config_once = PTHREAD_ONCE_INIT;
static atomic_bool env_forbidden;

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
 * variable at all there; they report themselves not configured. Kept for
 * plugins that read variables the registry does not know (out-of-tree
 * ones); in-tree code reads through config_u64 and config_str.
 */
const char *zap__env_get(const char *name)
{
	if (!name || zap__env_secure())
		return NULL;
	return getenv(name);
}

int zap__parse_bytes(const char *s, uint64_t *out)
{
	return zap__cfg_parse_size(s, out);
}

/* A byte count from @name (read by @get) in [@min, @max], in the size
 * grammar of the registry; unset or empty: @def. */
static int env_bytes_with(const char *(*get)(const char *), const char *name,
			  uint64_t def, uint64_t min, uint64_t max, uint64_t *out)
{
	const char *v = get(name);
	uint64_t n;

	if (!v || !*v) {
		*out = def;
		return 0;
	}
	if (zap__cfg_parse_size(v, &n))
		return zap__fail(-EINVAL,
				 "%s='%.40s' is not a byte count (decimal, or with K, M, "
				 "G or T: 64M)",
				 name, v);
	if (n < min || n > max)
		return zap__fail(-EINVAL, "%s=%s is out of range [%llu, %llu] bytes",
				 name, v, (unsigned long long)min,
				 (unsigned long long)max);
	*out = n;
	return 0;
}

static const char *plain_getenv(const char *name)
{
	return getenv(name);
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

/* Read @name through the registry into @val; a bad value becomes @c's
 * error (the first one is kept). Return whether it was set. */
static bool read_var(struct zap_config *c, const char *name, struct zap_cfg_val *val)
{
	const struct zap_cfg_var *v = zap__cfg_find(name);

	if (zap__cfg_get(v, val) && !c->error) {
		c->error = -EINVAL;
		snprintf(c->error_msg, sizeof(c->error_msg), "%s", val->why);
	}
	return val->source == ZAP_CFG_FROM_ENV;
}

/* A string variable copied into @buf (sized by the registry's limit). */
static const char *read_str(struct zap_config *c, const char *name, char *buf, size_t len)
{
	struct zap_cfg_val val;

	if (!read_var(c, name, &val) || strlen(val.str) >= len)
		return NULL;
	return strcpy(buf, val.str);
}

static const char *const tls_vars[4] = { "ZAP_TLS_CERT", "ZAP_TLS_KEY", "ZAP_TLS_CA",
					 "ZAP_TLS_PEERS" };

/*
 * TLS files: refused under AT_SECURE (the caller could point the program
 * at files of its choosing), but not as a config error: a program that
 * passes the zap_attr field overrides the variable, so the refusal counts
 * only at an open that would have used it (zap__config_tls()).
 */
static void read_tls(struct zap_config *c)
{
	for (int i = 0; i < 4; i++) {
		const struct zap_cfg_var *v = zap__cfg_find(tls_vars[i]);
		struct zap_cfg_val val;
		int rc = zap__cfg_get(v, &val);

		if (rc == -EPERM) {
			c->tls_refused |= 1u << i;
			if (!c->tls_refused_msg[0])
				snprintf(c->tls_refused_msg, sizeof(c->tls_refused_msg),
					 "%s", val.why);
		} else if (rc && !c->error) {
			c->error = rc;
			snprintf(c->error_msg, sizeof(c->error_msg), "%s", val.why);
		} else if (!rc && val.str) {
			c->tls[i] = strcpy(c->tls_buf[i], val.str);
		}
	}
}

int zap__config_tls(const struct zap_config *c, unsigned i, const char *attr,
		    const char **out)
{
	*out = attr;
	if (attr || i >= 4)
		return 0;
	if (c->tls_refused & (1u << i))
		return zap__fail(-EPERM, "%s", c->tls_refused_msg);
	*out = c->tls[i];
	return 0;
}

/*
 * Read and check the core's variables into @c (zeroed here). Separate from
 * the once-per-process zap__config() so that the fuzz harness and the unit
 * tests can run it on any environment.
 */
void zap__config_read(struct zap_config *c)
{
	struct zap_cfg_val val;

	memset(c, 0, sizeof(*c));
	c->log_level_set = read_var(c, "ZAP_LOG_LEVEL", &val);
	c->log_level = (enum zap_log_level)val.num;
	read_var(c, "ZAP_TRANSPORT_QUIET", &val);
	c->quiet = val.num;
	read_var(c, "ZAP_PROBE_INPROCESS", &val);
	c->probe_inprocess = val.num;
	/* Syntax is checked by the pick parser, which names the variable. */
	c->transport = read_str(c, "ZAP_TRANSPORT", c->transport_buf,
				sizeof(c->transport_buf));
	c->listen = read_str(c, "ZAP_LISTEN", c->listen_buf, sizeof(c->listen_buf));
	if (c->listen && zap__check_address("ZAP_LISTEN", c->listen) && !c->error) {
		c->error = -EINVAL;
		snprintf(c->error_msg, sizeof(c->error_msg), "%s", zap_last_error());
	}
	/* 0: unset (zap_attr or the default decides). */
	if (read_var(c, "ZAP_MAX_MSG_BYTES", &val))
		c->max_msg_size = val.num;
	read_var(c, "ZAP_SEND_TIMEOUT_MS", &val);
	c->send_timeout_ms = val.num;
	read_var(c, "ZAP_PROBE_TIMEOUT_MS", &val);
	c->probe_timeout_ms = val.num;
	read_tls(c);
	zap__clear_error();
}

const char *zap__config_path(const char *name)
{
	const struct zap_cfg_var *v = zap__cfg_find(name);
	struct zap_cfg_val val;

	if (!v)
		return NULL;
	if (zap__cfg_get(v, &val)) {
		zap__log(ZAP_LOG_WARN, "core", "%s: ignored", val.why);
		return NULL;
	}
	return val.str;
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
