/* SPDX-License-Identifier: MIT */
/*
 * Socket addresses: the core's syntax check (zap__check_address(), used
 * for ZAP_LISTEN and the listen attribute) against an independent
 * reading of the documented form, host:port or [ipv6]:port, port 0..65535.
 */
#include <ctype.h>
#include <errno.h>

#include "fuzz.h"
#include "zap-private.h"

/* The documented grammar, written out separately. */
static int ref_check(const char *a)
{
	const char *host_end, *port;
	size_t n = strlen(a);

	if (a[0] == '[') {
		const char *close = strchr(a, ']');

		if (!close || close == a + 1 || close[1] != ':')
			return -1;
		for (const char *p = a + 1; p < close; p++)
			if (!isalnum((unsigned char)*p) && *p != ':' && *p != '.' &&
			    *p != '%')
				return -1;
		port = close + 2;
	} else {
		host_end = strrchr(a, ':');
		if (!host_end || host_end == a)
			return -1;
		for (const char *p = a; p < host_end; p++)
			if (!isalnum((unsigned char)*p) && *p != '.' && *p != '-' &&
			    *p != '_')
				return -1;
		port = host_end + 1;
	}
	if (!*port || (size_t)(port - a) > n)
		return -1;
	unsigned long v = 0;
	for (const char *p = port; *p; p++) {
		if (!isdigit((unsigned char)*p))
			return -1;
		v = v * 10 + (unsigned long)(*p - '0');
		if (v > 65535)
			return -1;
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = fuzz_strndup(data, size);
	int rc = zap__check_address("ZAP_LISTEN", s);

	FUZZ_CHECK(rc == 0 || rc == -EINVAL);
	if (rc)
		FUZZ_CHECK(strstr(zap_last_error(), "ZAP_LISTEN"));
	FUZZ_CHECK((rc == 0) == (ref_check(s) == 0));
	zap__clear_error();
	free(s);
	return 0;
}
