/* SPDX-License-Identifier: MIT */
/*
 * The configuration registry's readers (core/zap-config.h): one grammar per
 * type, the setuid policy, and the host table's view of it. Every value is
 * read from the environment when asked (plugins read theirs at each open);
 * the core caches its own in env.c.
 *
 * Shared state: only choice_list()'s cache of enumeration texts, filled
 * under its mutex and never changed after. The table is constant; every
 * other function fills what its caller passes.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "zap-config.h"
#include "zap-private.h"

/* Decimal digits, the whole of [s, end): 0, -EINVAL or -ERANGE. */
static int digits(const char *s, const char *end, uint64_t *out)
{
	uint64_t v = 0;

	if (s == end)
		return -EINVAL;
	for (; s < end; s++) {
		uint64_t d = (uint64_t)(*s - '0');

		if (*s < '0' || *s > '9')
			return -EINVAL;
		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

static const char *digits_end(const char *s)
{
	while (*s >= '0' && *s <= '9')
		s++;
	return s;
}

int zap__cfg_parse_count(const char *s, uint64_t *out)
{
	return digits(s, s + strlen(s), out);
}

int zap__cfg_parse_size(const char *s, uint64_t *out)
{
	static const char units[] = "kmgt";
	const char *e = digits_end(s);
	const char *u = *e ? strchr(units, *e | 0x20) : NULL;
	unsigned shift;
	uint64_t v;
	int rc;

	if (*e && (!u || !*u || e[1]))
		return -EINVAL;
	rc = digits(s, e, &v);
	if (rc)
		return rc;
	shift = u ? 10u * (unsigned)(u - units + 1) : 0;
	if (shift && v > (UINT64_MAX >> shift))
		return -ERANGE;
	*out = v << shift;
	return 0;
}

int zap__cfg_parse_octal(const char *s, uint64_t *out)
{
	size_t n = strlen(s);
	uint64_t m = 0;

	if (!n || n > 4)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '7')
			return -EINVAL;
		m = m * 8 + (uint64_t)(s[i] - '0');
	}
	*out = m;
	return 0;
}

const char *zap__cfg_type_name(enum zap_cfg_type t)
{
	static const char *const names[] = {
		[ZAP_CFG_BOOL] = "bool",       [ZAP_CFG_SIZE] = "size",
		[ZAP_CFG_COUNT] = "count",     [ZAP_CFG_MS] = "milliseconds",
		[ZAP_CFG_US] = "microseconds", [ZAP_CFG_OCTAL] = "octal",
		[ZAP_CFG_ENUM] = "enum",       [ZAP_CFG_STRING] = "string",
		[ZAP_CFG_LIST] = "list",
	};

	return (unsigned)t < ZAP_ARRAY_SIZE(names) ? names[t] : "?";
}

const struct zap_cfg_var *zap__cfg_find(const char *name)
{
	for (size_t i = 0; name && i < zap__cfg_nvars; i++)
		if (!strcmp(zap__cfg_vars[i].name, name))
			return &zap__cfg_vars[i];
	return NULL;
}

static int enum_value(const struct zap_cfg_var *v, const char *s, uint64_t *out)
{
	for (size_t i = 0; v->choices[i]; i++)
		if (!strcasecmp(s, v->choices[i])) {
			*out = v->values ? v->values[i] : i;
			return 0;
		}
	return -EINVAL;
}

/* What a value of @v's type looks like, for messages. */
static void describe(const struct zap_cfg_var *v, char *buf, size_t len)
{
	const unsigned long long lo = v->min, hi = v->max;
	size_t k;

	switch (v->type) {
	case ZAP_CFG_BOOL:
		snprintf(buf, len, "a boolean (" ZAP_BOOL_SPELLINGS ")");
		break;
	case ZAP_CFG_SIZE:
		snprintf(buf, len,
			 "a byte count from %llu to %llu (decimal, or with K, M, G "
			 "or T: 64M)",
			 lo, hi);
		break;
	case ZAP_CFG_COUNT:
		snprintf(buf, len, "a decimal number from %llu to %llu", lo, hi);
		break;
	case ZAP_CFG_MS:
	case ZAP_CFG_US:
		snprintf(buf, len, "a number of %s from %llu to %llu (plain decimal)",
			 zap__cfg_type_name(v->type), lo, hi);
		break;
	case ZAP_CFG_OCTAL:
		snprintf(buf, len, "an octal mode from 0 to 0%llo", hi);
		break;
	case ZAP_CFG_ENUM:
		k = (size_t)snprintf(buf, len, "one of");
		for (size_t i = 0; v->choices[i] && k < len; i++)
			k += (size_t)snprintf(buf + k, len - k, "%s %s", i ? "," : "",
					      v->choices[i]);
		break;
	default:
		snprintf(buf, len, "under %llu characters", hi);
	}
}

/* Parse @s as @v's type into *@n; 0 or -EINVAL with @why. */
static int parse_value(const struct zap_cfg_var *v, const char *s, uint64_t *n, char *why,
		       size_t len)
{
	char what[160];
	int rc = -EINVAL;

	switch (v->type) {
	case ZAP_CFG_BOOL:
		rc = zap__parse_bool(s);
		if (rc >= 0)
			*n = (uint64_t)rc;
		break;
	case ZAP_CFG_SIZE:
		rc = zap__cfg_parse_size(s, n);
		break;
	case ZAP_CFG_COUNT:
	case ZAP_CFG_MS: /* the unit is in the name: plain decimal */
	case ZAP_CFG_US:
		rc = zap__cfg_parse_count(s, n);
		break;
	case ZAP_CFG_OCTAL:
		rc = zap__cfg_parse_octal(s, n);
		break;
	case ZAP_CFG_ENUM:
		rc = enum_value(v, s, n);
		break;
	default:
		rc = strlen(s) < v->max ? 0 : -EINVAL;
		*n = 0;
	}
	if (rc >= 0 && v->type != ZAP_CFG_ENUM && v->type != ZAP_CFG_BOOL &&
	    v->type != ZAP_CFG_STRING && v->type != ZAP_CFG_LIST &&
	    (*n < v->min || *n > v->max))
		rc = -ERANGE;
	if (rc >= 0)
		return 0;
	describe(v, what, sizeof(what));
	if (v->type == ZAP_CFG_STRING || v->type == ZAP_CFG_LIST)
		snprintf(why, len, "%s is too long (%zu characters; the limit is %llu)",
			 v->name, strlen(s), (unsigned long long)v->max - 1);
	else
		snprintf(why, len, "%s='%.40s%s' is not %s", v->name, s,
			 strlen(s) > 40 ? "..." : "", what);
	return -EINVAL;
}

int zap__cfg_get(const struct zap_cfg_var *v, struct zap_cfg_val *out)
{
	const char *s = getenv(v->name);

	memset(out, 0, sizeof(*out));
	out->num = v->def;
	out->source = ZAP_CFG_FROM_DEFAULT;
	/* Empty is unset, for every variable: `VAR= prog` clears it. */
	if (!s || !*s)
		return 0;
	out->str = s;
	if (zap__env_secure() && v->secure != ZAP_CFG_HONOUR) {
		out->str = NULL;
		if (v->secure == ZAP_CFG_IGNORE) {
			out->source = ZAP_CFG_FROM_IGNORED;
			return 0;
		}
		out->source = ZAP_CFG_FROM_INVALID;
		snprintf(out->why, sizeof(out->why),
			 "%s is set, but this program runs with AT_SECURE (setuid, "
			 "setgid or file capabilities), where it cannot be honoured; "
			 "unset it (the program may pass it through zap_attr)",
			 v->name);
		return -EPERM;
	}
	if (parse_value(v, s, &out->num, out->why, sizeof(out->why))) {
		out->source = ZAP_CFG_FROM_INVALID;
		out->num = v->def;
		out->str = NULL;
		return -EINVAL;
	}
	out->source = ZAP_CFG_FROM_ENV;
	return 0;
}

static int host_get(const char *name, bool want_str, struct zap_cfg_val *val)
{
	const struct zap_cfg_var *v = zap__cfg_find(name);
	bool is_str;
	int rc;

	if (!v)
		return zap__fail(-ENOENT,
				 "%s is not a variable libzap knows "
				 "(core/config-vars.c)",
				 name ? name : "(null)");
	is_str = v->type == ZAP_CFG_STRING || v->type == ZAP_CFG_LIST;
	if (is_str != want_str)
		return zap__fail(-ENOENT, "%s is %s %s variable, not read with config_%s",
				 name, is_str ? "a" : "a numeric",
				 zap__cfg_type_name(v->type), want_str ? "str" : "u64");
	rc = zap__cfg_get(v, val);
	if (rc)
		return zap__fail(rc, "%s", val->why);
	return val->source == ZAP_CFG_FROM_ENV;
}

int zap__host_config_u64(const char *name, uint64_t *out)
{
	struct zap_cfg_val val;
	int rc = host_get(name, false, &val);

	if (rc >= 0)
		*out = val.num;
	return rc;
}

int zap__host_config_str(const char *name, const char **out)
{
	struct zap_cfg_val val;
	int rc = host_get(name, true, &val);

	*out = rc > 0 ? val.str : NULL;
	return rc;
}

/* "a, b, c" for an enumeration's choices, built once per row. */
static const char *choice_list(const struct zap_cfg_var *v)
{
	static char lists[8][96];
	static const struct zap_cfg_var *rows[8];
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	const char *r = NULL;

	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < 8 && !r; i++) {
		if (rows[i] == v) {
			r = lists[i];
		} else if (!rows[i]) {
			size_t k = 0;

			for (size_t j = 0; v->choices[j] && k < sizeof(lists[i]); j++)
				k += (size_t)snprintf(lists[i] + k, sizeof(lists[i]) - k,
						      "%s%s", j ? ", " : "",
						      v->choices[j]);
			rows[i] = v;
			r = lists[i];
		}
	}
	pthread_mutex_unlock(&mu);
	return r;
}

ZAP_EXPORT size_t zap_env_count(void)
{
	return zap__cfg_nvars;
}

ZAP_EXPORT int zap_env_get(size_t index, struct zap_env_entry *e)
{
	static const char *const policy[] = { "honoured", "ignored", "refused" };
	const struct zap_cfg_var *v;
	struct zap_env_entry out;
	struct zap_cfg_val val;

	if (!e || e->size < sizeof(size_t))
		return -EINVAL;
	if (index >= zap__cfg_nvars)
		return -ERANGE;
	v = &zap__cfg_vars[index];
	memset(&out, 0, sizeof(out));
	out.size = e->size < sizeof(out) ? e->size : sizeof(out);
	out.name = v->name;
	out.type = zap__cfg_type_name(v->type);
	out.owner = v->owner;
	out.def = v->def_text;
	out.setuid = policy[v->secure];
	out.doc = v->doc;
	out.min = v->min;
	out.max = v->max;
	out.choices = v->type == ZAP_CFG_ENUM ? choice_list(v) : NULL;
	zap__cfg_get(v, &val);
	out.value = getenv(v->name);
	if (out.value && !*out.value)
		out.value = NULL;
	out.source = (int)val.source; /* the same numbering */
	snprintf(out.reason, sizeof(out.reason), "%s", val.why);
	memcpy(e, &out, out.size);
	return 0;
}
