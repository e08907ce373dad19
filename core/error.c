/* SPDX-License-Identifier: MIT */
/* Per-thread error reasons, so that zap_strerror() can say why. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "zap-private.h"

static _Thread_local int last_err;
static _Thread_local char last_reason[512];
static _Thread_local char text[768];
/* Whether last_err and last_reason hold a failure. Every call clears them
 * first; with this flag, a call after one that failed nothing reads a
 * byte of initial-exec TLS instead of calling __tls_get_addr()
 * (bench/MEASUREMENTS.md, "recv-tls"). The arrays keep the dynamic model:
 * too large for the static TLS that a dlopen() of libzap draws on. */
static _Thread_local bool err_set __attribute__((tls_model("initial-exec")));

int zap__vfail(int err, const char *fmt, va_list ap)
{
	last_err = err;
	err_set = true;
	vsnprintf(last_reason, sizeof(last_reason), fmt, ap);
	return err;
}

int zap__fail(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	zap__vfail(err, fmt, ap);
	va_end(ap);
	return err;
}

void zap__clear_error(void)
{
	if (!err_set)
		return;
	err_set = false;
	last_err = 0;
	last_reason[0] = '\0';
}

ZAP_EXPORT const char *zap_last_error(void)
{
	return last_reason;
}

ZAP_EXPORT const char *zap_strerror(int err)
{
	char base[128];
	const char *b;

	if (err > 0)
		err = -err;
	if (err == 0)
		b = "success";
	else if (err == ZAP_ENOTAVAIL)
		b = "requested transport not available on this host";
	else
		b = strerror_r(-err, base, sizeof(base)); /* GNU variant */
	if (err != 0 && err == last_err && last_reason[0])
		snprintf(text, sizeof(text), "%s: %s", b, last_reason);
	else
		snprintf(text, sizeof(text), "%s", b);
	return text;
}
