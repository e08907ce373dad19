/* SPDX-License-Identifier: MIT */
/*
 * Every environment value the core parses (docs/environment.md, README's
 * environment table): the whole config reader (zap__config_read(): log
 * level, quiet flag, ZAP_TRANSPORT, ZAP_LISTEN, ZAP_MAX_MSG_BYTES), the
 * byte-count parser every plugin's size variable goes through
 * (zap__env_bytes(), host->env_bytes), and the log level parser.
 *
 * Input: up to six values separated by 0xff bytes (an absent value is an
 * unset variable); the last one also feeds zap__env_bytes() with bounds
 * from the first bytes. The rules checked: a bad value is an error whose
 * message names the variable, and an accepted value is taken exactly as
 * given (never truncated or replaced), with the meaning an independent
 * reading of the documented syntax gives it.
 */
#include <ctype.h>
#include <errno.h>
#include <strings.h>

#include "fuzz.h"
#include "zap-private.h"

static const char *const vars[] = {
	"ZAP_LOG_LEVEL", "ZAP_TRANSPORT_QUIET", "ZAP_TRANSPORT",
	"ZAP_LISTEN",    "ZAP_MAX_MSG_BYTES",   "ZAP_FUZZ_BYTES",
};
#define NVARS (sizeof(vars) / sizeof(vars[0]))

/* The value with blanks trimmed, as a new string. */
static char *trimmed(const char *v)
{
	while (isspace((unsigned char)*v))
		v++;
	size_t n = strlen(v);
	while (n && isspace((unsigned char)v[n - 1]))
		n--;
	return fuzz_strndup((const uint8_t *)v, n);
}

/* The documented byte-count syntax: digits, blanks, an optional unit
 * (b, k, kb, kib, ... t, tb, tib; any case), blanks. */
static int ref_bytes(const char *s, uint64_t *out)
{
	static const char *const units[] = { "", "k", "m", "g", "t" };
	unsigned __int128 v = 0;
	const char *p = s;
	char u[8];
	size_t un = 0;

	while (isspace((unsigned char)*p))
		p++;
	if (!isdigit((unsigned char)*p))
		return -EINVAL;
	for (; isdigit((unsigned char)*p); p++) {
		v = v * 10 + (unsigned)(*p - '0');
		if (v > UINT64_MAX)
			return -ERANGE;
	}
	while (isspace((unsigned char)*p))
		p++;
	while (*p && !isspace((unsigned char)*p)) {
		if (un == sizeof(u) - 1)
			return -EINVAL;
		u[un++] = (char)tolower((unsigned char)*p++);
	}
	u[un] = '\0';
	while (isspace((unsigned char)*p))
		p++;
	if (*p)
		return -EINVAL;
	for (unsigned i = 0; i < 5; i++) {
		char a[4], b[4], c[4];

		snprintf(a, sizeof(a), "%s", i ? units[i] : "b");
		snprintf(b, sizeof(b), "%sb", units[i]);
		snprintf(c, sizeof(c), "%sib", units[i]);
		if (!strcmp(u, i ? units[i] : "") || !strcmp(u, a) ||
		    (i && (!strcmp(u, b) || !strcmp(u, c)))) {
			v <<= 10 * i;
			if (v > UINT64_MAX)
				return -ERANGE;
			*out = (uint64_t)v;
			return 0;
		}
	}
	return -EINVAL;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

/* The documented spellings, read separately: 1 true, 0 false, -1 neither. */
static int ref_bool(const char *t)
{
	static const char *const yes[] = { "1", "yes", "true", "on" };
	static const char *const no[] = { "0", "no", "false", "off" };

	for (size_t k = 0; k < 4; k++) {
		if (!strcasecmp(t, yes[k]))
			return 1;
		if (!strcasecmp(t, no[k]))
			return 0;
	}
	return -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *val[NVARS] = {0};
	uint64_t lo = 0, hi = UINT64_MAX, def = 12345;
	size_t i = 0, start = 0;

	if (size >= 17 && data[0] == 'B') { /* bounds for ZAP_FUZZ_BYTES */
		lo = get64(data + 1);
		hi = get64(data + 9);
		data += 17;
		size -= 17;
	}
	for (size_t k = 0; k <= size && i < NVARS; k++)
		if (k == size || data[k] == 0xff) {
			/* setenv() values end at a NUL byte. */
			size_t n = k - start;
			const void *nul = memchr(data + start, 0, n);
			if (nul)
				n = (size_t)((const uint8_t *)nul - (data + start));
			val[i++] = fuzz_strndup(data + start, n);
			start = k + 1;
		}
	for (i = 0; i < NVARS; i++) {
		if (val[i])
			setenv(vars[i], val[i], 1);
		else
			unsetenv(vars[i]);
	}

	struct zap_config c;
	zap__config_read(&c);
	FUZZ_CHECK(fuzz_terminated(c.error_msg, sizeof(c.error_msg)));
	if (c.error) {
		FUZZ_CHECK(c.error == -EINVAL);
		FUZZ_CHECK(strstr(c.error_msg, "ZAP_"));
	} else {
		for (i = 0; i < 5; i++) {
			char *t = val[i] ? trimmed(val[i]) : NULL;
			enum zap_log_level lvl;
			uint64_t b;

			switch (i) {
			case 0: /* ZAP_LOG_LEVEL */
				FUZZ_CHECK(c.log_level_set == (t && *t));
				if (t && *t) {
					FUZZ_CHECK(!zap__parse_log_level(t, &lvl));
					FUZZ_CHECK(c.log_level == lvl);
				} else {
					FUZZ_CHECK(c.log_level == ZAP_LOG_WARN);
				}
				break;
			case 1: /* ZAP_TRANSPORT_QUIET: a boolean, any case */
				FUZZ_CHECK(c.quiet == (t && ref_bool(t) == 1));
				FUZZ_CHECK(!t || !*t || ref_bool(t) >= 0);
				break;
			case 2: /* ZAP_TRANSPORT: taken whole, parsed at pick */
				FUZZ_CHECK(!val[i] == !c.transport);
				if (val[i])
					FUZZ_CHECK(!strcmp(c.transport, val[i]));
				break;
			case 3: /* ZAP_LISTEN */
				FUZZ_CHECK(!c.listen == !(t && *t));
				if (t && *t) {
					FUZZ_CHECK(!strcmp(c.listen, t));
					FUZZ_CHECK(!zap__check_address("x", t));
				}
				break;
			case 4: /* ZAP_MAX_MSG_BYTES */
				if (t && *t) {
					FUZZ_CHECK(!ref_bytes(t, &b));
					FUZZ_CHECK(c.max_msg_size == b);
					FUZZ_CHECK(b >= 1 && b <= 1ull << 40);
				} else {
					FUZZ_CHECK(c.max_msg_size == 0);
				}
				break;
			}
			free(t);
		}
	}

	/* The byte-count parser on every value, against the reference. */
	for (i = 0; i < NVARS; i++) {
		uint64_t a = 0, b = 0;
		int ra, rb;

		if (!val[i])
			continue;
		ra = zap__parse_bytes(val[i], &a);
		rb = ref_bytes(val[i], &b);
		FUZZ_CHECK(ra == rb);
		FUZZ_CHECK(ra || a == b);
	}

	/* host->env_bytes, as every plugin calls it, with fuzzed bounds. */
	{
		uint64_t out = 0, b = 0;
		char *t = val[5] ? trimmed(val[5]) : NULL;
		int rc = zap__env_bytes("ZAP_FUZZ_BYTES", def, lo, hi, &out);

		if (!t || !*t) {
			FUZZ_CHECK(rc == 0 && out == def);
		} else if (strlen(t) >= 64 || ref_bytes(t, &b) || b < lo || b > hi) {
			/* A byte count is read through a 64-byte buffer:
			 * longer values are refused whole, never cut. */
			FUZZ_CHECK(rc == -EINVAL);
			FUZZ_CHECK(strstr(zap_last_error(), "ZAP_FUZZ_BYTES"));
		} else {
			FUZZ_CHECK(rc == 0 && out == b);
		}
		free(t);
	}

	zap__clear_error();
	for (i = 0; i < NVARS; i++) {
		unsetenv(vars[i]);
		free(val[i]);
	}
	return 0;
}
