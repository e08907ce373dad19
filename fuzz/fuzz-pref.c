/* SPDX-License-Identifier: MIT */
/*
 * The preference string (zap_pick()'s @pref, ZAP_TRANSPORT): core/pick.c's
 * zap__parse_pref(). Checks, beyond memory safety, the documented rules:
 * names are [a-z0-9_]+, shorter than ZAP_NAME_MAX, at most 16, never
 * "auto"; "^" needs names; parsing is case-insensitive; and a parsed
 * preference printed back in canonical form parses to the same thing.
 */
#include <ctype.h>
#include <errno.h>

#include "fuzz.h"
#include "zap-private.h"

static void check_ok(const struct zap_pref *p)
{
	FUZZ_CHECK(p->n <= ZAP_PREF_MAX_NAMES);
	FUZZ_CHECK(!p->exclude || p->n > 0);
	for (size_t i = 0; i < p->n; i++) {
		const char *s = p->names[i];

		FUZZ_CHECK(fuzz_terminated(s, ZAP_NAME_MAX));
		FUZZ_CHECK(*s);
		FUZZ_CHECK(strcmp(s, "auto"));
		for (; *s; s++)
			FUZZ_CHECK(islower((unsigned char)*s) ||
				   isdigit((unsigned char)*s) || *s == '_');
	}
}

static int same(const struct zap_pref *a, const struct zap_pref *b)
{
	if (a->strict != b->strict || a->exclude != b->exclude || a->n != b->n)
		return 0;
	for (size_t i = 0; i < a->n; i++)
		if (strcmp(a->names[i], b->names[i]))
			return 0;
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = fuzz_strndup(data, size);
	struct zap_pref p, q;
	int rc;

	rc = zap__parse_pref(s, "ZAP_TRANSPORT", &p);
	FUZZ_CHECK(rc == 0 || rc == -EINVAL);
	if (rc) {
		/* The message names where the value came from. */
		FUZZ_CHECK(strstr(zap_last_error(), "ZAP_TRANSPORT"));
	} else {
		check_ok(&p);
		/* Canonical form: "=^a,b,c" parses back to the same. */
		char canon[ZAP_PREF_MAX_NAMES * ZAP_NAME_MAX + 8];
		size_t off = 0;

		if (p.strict)
			canon[off++] = '=';
		if (p.exclude)
			canon[off++] = '^';
		canon[off] = '\0';
		for (size_t i = 0; i < p.n; i++)
			off += (size_t)snprintf(canon + off, sizeof(canon) - off,
						"%s%s", i ? "," : "", p.names[i]);
		FUZZ_CHECK(zap__parse_pref(canon, "canonical", &q) == 0);
		FUZZ_CHECK(same(&p, &q));
	}

	/* Case-insensitive: the upper-cased input means the same. */
	for (char *c = s; *c; c++)
		*c = (char)toupper((unsigned char)*c);
	int rc2 = zap__parse_pref(s, "ZAP_TRANSPORT", &q);
	FUZZ_CHECK(rc2 == rc);
	if (!rc)
		FUZZ_CHECK(same(&p, &q));
	zap__clear_error();
	free(s);
	return 0;
}
