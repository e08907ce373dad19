/* SPDX-License-Identifier: MIT */
/* Per-thread error reasons, so that zap_strerror() can say why. */
#include <stdio.h>
#include <string.h>

#include "zap-private.h"

static _Thread_local int last_err;
static _Thread_local char last_reason[512];
static _Thread_local char text[768];

int zap__vfail(int err, const char *fmt, va_list ap)
{
	last_err = err;
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
