/* SPDX-License-Identifier: MIT */
/*
 * The registry's setuid policy, in a process that behaves as an AT_SECURE
 * (setuid, setgid, file-capability) program: zap__env_forbid(), as the
 * probe helper calls it, makes zap__env_secure() true for good, so this
 * is a program of its own. Plugin variables read as unset, the core's
 * harmless ones are honoured, and TLS settings fail the open instead of
 * being dropped (before, secure_getenv() dropped them and the endpoint ran
 * in plaintext).
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "zap-config.h"
#include "zap-private.h"

static int setup(void **state)
{
	(void)state;
	setenv("ZAP_TLS_CERT", "/tmp/caller-chose-this.pem", 1);
	setenv("ZAP_SHM", "group", 1);
	setenv("ZAP_UNIX_SOCKET_MODE", "0777", 1);
	setenv("ZAP_MAX_MSG_BYTES", "1M", 1);
	setenv("ZAP_PROBE_INPROCESS", "1", 1);
	zap__env_forbid();
	return 0;
}

static void test_ignored_and_honoured(void **state)
{
	struct zap_cfg_val val;
	uint64_t v = 99;

	(void)state;
	assert_true(zap__env_secure());
	/* Plugins' variables: unset, the default. */
	assert_int_equal(zap__host_config_u64("ZAP_SHM", &v), 0);
	assert_true(v == 0);
	assert_int_equal(zap__host_config_u64("ZAP_UNIX_SOCKET_MODE", &v), 0);
	assert_true(v == 0600);
	assert_int_equal(zap__cfg_get(zap__cfg_find("ZAP_SHM"), &val), 0);
	assert_int_equal(val.source, ZAP_CFG_FROM_IGNORED);
	/* A core limit that cannot widen privileges: honoured. */
	assert_int_equal(zap__host_config_u64("ZAP_MAX_MSG_BYTES", &v), 1);
	assert_true(v == 1ull << 20);
}

static void test_tls_refused(void **state)
{
	struct zap_config c;
	const char *s = "x";

	(void)state;
	assert_int_equal(zap__host_config_str("ZAP_TLS_CERT", &s), -EPERM);
	assert_null(s);
	assert_non_null(strstr(zap_last_error(), "ZAP_TLS_CERT"));
	assert_non_null(strstr(zap_last_error(), "AT_SECURE"));

	zap__config_read(&c);
	assert_int_equal(c.error, 0);
	assert_false(c.probe_inprocess);
	assert_true(c.tls_refused == 1u);
	/* An open that would use it fails with the reason ... */
	assert_int_equal(zap__config_tls(&c, 0, NULL, &s), -EPERM);
	assert_non_null(strstr(zap_last_error(), "ZAP_TLS_CERT"));
	/* ... unless the program passes the setting itself (zap_attr). */
	assert_int_equal(zap__config_tls(&c, 0, "/etc/prog/cert.pem", &s), 0);
	assert_string_equal(s, "/etc/prog/cert.pem");
	assert_int_equal(zap__config_tls(&c, 1, NULL, &s), 0);
	assert_null(s);
}

/* The whole way: zap_pick() fails before it scans or opens anything. */
static void test_pick_fails(void **state)
{
	struct zap_transport *t = NULL;
	int rc;

	(void)state;
	rc = zap_pick("default", 0, NULL, &t);
	assert_int_equal(rc, -EPERM);
	assert_null(t);
	assert_non_null(strstr(zap_strerror(rc), "ZAP_TLS_CERT"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ignored_and_honoured),
		cmocka_unit_test(test_tls_refused),
		cmocka_unit_test(test_pick_fails),
	};

	return cmocka_run_group_tests(tests, setup, NULL);
}
