/* SPDX-License-Identifier: MIT */
/*
 * Every environment value the core parses (docs/environment.md, README's
 * environment table): the whole config reader (zap__config_read(): log
 * level, quiet flag, ZAP_TRANSPORT, ZAP_LISTEN, ZAP_MAX_MSG_BYTES), the
 * byte-count parser every plugin's size variable goes through
 * (zap__env_bytes(), host->env_bytes), the log level parser, and the
 * registry's host op (config_u64) for a size, two counts, an octal mode and
 * an enumeration.
 *
 * Input: up to six values separated by 0xff bytes (an absent value is an
 * unset variable); the last one also feeds zap__env_bytes() with bounds
 * from the first bytes. The rules checked: a bad value is an error whose
 * message names the variable, and an accepted value is taken exactly as
 * given (never trimmed, truncated or replaced), with the meaning an
 * independent reading of the documented syntax gives it.
 */
#include <ctype.h>
#include <errno.h>
#include <strings.h>

#include "fuzz.h"
#include "zap-config.h"
#include "zap-private.h"

static const char *const vars[] = {
	"ZAP_LOG_LEVEL", "ZAP_TRANSPORT_QUIET", "ZAP_TRANSPORT",
	"ZAP_LISTEN",    "ZAP_MAX_MSG_BYTES",   "ZAP_FUZZ_BYTES",
};
#define NVARS (sizeof(vars) / sizeof(vars[0]))

/* The documented byte-count syntax (docs/environment.md, one grammar for
 * every size): decimal digits, then at most one unit k, m, g or t (any
 * case, powers of 1024); nothing else, not even blanks. */
static int ref_bytes(const char *s, uint64_t *out)
{
	static const char units[] = "kmgt";
	unsigned __int128 v = 0;
	const char *p = s;

	if (!isdigit((unsigned char)*p))
		return -EINVAL;
	for (; isdigit((unsigned char)*p); p++) {
		v = v * 10 + (unsigned)(*p - '0');
		if (v > UINT64_MAX)
			return -ERANGE;
	}
	if (*p) {
		const char *u = strchr(units, tolower((unsigned char)*p));

		if (!u || !*u || p[1])
			return -EINVAL;
		v <<= 10 * (u - units + 1);
		if (v > UINT64_MAX)
			return -ERANGE;
	}
	*out = (uint64_t)v;
	return 0;
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

/* The documented count grammar: decimal digits only, fitting 64 bits. */
static int ref_count(const char *s, uint64_t *out)
{
	unsigned __int128 v = 0;

	if (!*s)
		return -EINVAL;
	for (; *s; s++) {
		if (!isdigit((unsigned char)*s))
			return -EINVAL;
		v = v * 10 + (unsigned)(*s - '0');
		if (v > UINT64_MAX)
			return -ERANGE;
	}
	*out = (uint64_t)v;
	return 0;
}

/*
 * @t read as registry variables of each numeric type through the host op
 * plugins call (zap_host.config_u64), against the references: a value is
 * accepted exactly when the documented grammar and range say so, and a
 * refusal names the variable.
 */
static void check_registry(const char *t)
{
	static const char *const shm[] = { "user", "group", "off", "1", "0" };
	static const uint64_t shm_val[] = { 0, 1, 2, 0, 2 };
	static const struct {
		const char *name;
		int kind; /* 0 size, 1 count, 2 octal, 3 ZAP_SHM */
		uint64_t min, max;
	} rvars[] = {
		{ "ZAP_TCP_RX_QUEUE_BYTES", 0, 64ull << 10, 1ull << 40 },
		{ "ZAP_TCP_MAX_PENDING", 1, 1, 1048576 },
		{ "ZAP_TCP_HANDSHAKE_MS", 1, 10, 3600000 },
		{ "ZAP_UNIX_SOCKET_MODE", 2, 0, 0777 },
		{ "ZAP_SHM", 3, 0, 2 },
	};

	for (size_t k = 0; k < sizeof(rvars) / sizeof(rvars[0]); k++) {
		uint64_t got = 0, want = 0;
		int ok = 0, rc;

		setenv(rvars[k].name, t, 1);
		rc = zap__host_config_u64(rvars[k].name, &got);
		unsetenv(rvars[k].name);
		if (!*t) {
			FUZZ_CHECK(rc == 0);
			continue;
		}
		switch (rvars[k].kind) {
		case 0:
			ok = !ref_bytes(t, &want);
			break;
		case 1:
			ok = !ref_count(t, &want);
			break;
		case 2:
			ok = strlen(t) <= 4 && strspn(t, "01234567") == strlen(t) &&
			     !ref_count(t, &want);
			if (ok) /* the digits were read as decimal above */
				want = strtoull(t, NULL, 8);
			break;
		default:
			for (size_t i = 0; i < 5 && !ok; i++)
				if (!strcasecmp(t, shm[i])) {
					ok = 1;
					want = shm_val[i];
				}
		}
		ok = ok && want >= rvars[k].min && want <= rvars[k].max;
		if (ok) {
			FUZZ_CHECK(rc == 1 && got == want);
		} else {
			FUZZ_CHECK(rc == -EINVAL);
			FUZZ_CHECK(strstr(zap_last_error(), rvars[k].name));
		}
	}
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
			/* Values are taken exactly as set; empty is unset. */
			const char *t = val[i];
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
				FUZZ_CHECK(!(t && *t) == !c.transport);
				if (t && *t)
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
		/* The same values accepted, with the same result; a value both
		 * refuse may be refused for either of its faults (too many
		 * digits, a bad suffix: -ERANGE or -EINVAL). */
		FUZZ_CHECK(!ra == !rb);
		FUZZ_CHECK(ra || a == b);
	}

	/* host->env_bytes, as every plugin calls it, with fuzzed bounds. */
	{
		uint64_t out = 0, b = 0;
		const char *t = val[5];
		int rc = zap__env_bytes("ZAP_FUZZ_BYTES", def, lo, hi, &out);

		if (!t || !*t) {
			FUZZ_CHECK(rc == 0 && out == def);
		} else if (ref_bytes(t, &b) || b < lo || b > hi) {
			FUZZ_CHECK(rc == -EINVAL);
			FUZZ_CHECK(strstr(zap_last_error(), "ZAP_FUZZ_BYTES"));
		} else {
			FUZZ_CHECK(rc == 0 && out == b);
		}
	}

	/* Every value through the registry's grammars. */
	for (i = 0; i < NVARS; i++)
		if (val[i])
			check_registry(val[i]);

	zap__clear_error();
	for (i = 0; i < NVARS; i++) {
		unsetenv(vars[i]);
		free(val[i]);
	}
	return 0;
}
