/* SPDX-License-Identifier: MIT */
/*
 * The configuration registry (core/zap-config.h): one grammar per type,
 * the cases issue 31 names (ZAP_TCP_RX_QUEUE_BYTES=128M refused while
 * ZAP_MAX_MSG_BYTES=128M worked; "+1" accepted where plain decimal is
 * documented), the host table's view of it, and the table itself.
 * test-config-secure.c covers the AT_SECURE policy, which cannot be undone
 * in a process.
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

/* A registry read through the host table, as plugins make it. */
static int host_u64(const char *name, const char *value, uint64_t *out)
{
	int rc;

	if (value)
		setenv(name, value, 1);
	else
		unsetenv(name);
	zap__clear_error();
	rc = zap__host_config_u64(name, out);
	unsetenv(name);
	return rc;
}

static uint64_t size_ok(const char *s)
{
	uint64_t v = 0;

	assert_int_equal(zap__cfg_parse_size(s, &v), 0);
	return v;
}

static void test_size_grammar(void **state)
{
	uint64_t v;

	(void)state;
	assert_true(size_ok("0") == 0);
	assert_true(size_ok("4096") == 4096);
	assert_true(size_ok("64M") == 64ull << 20);
	assert_true(size_ok("64m") == 64ull << 20);
	assert_true(size_ok("1G") == 1ull << 30);
	assert_true(size_ok("128K") == 128ull << 10);
	assert_true(size_ok("2T") == 2ull << 40);
	assert_true(size_ok("16777215T") == 16777215ull << 40);
	assert_true(size_ok("18446744073709551615") == UINT64_MAX);
	/* No sign, no blanks, no other spelling of the unit, no garbage. */
	static const char *const bad[] = {
		"",     "+1",   "-1",   " 64M", "64M ", "64 M", "64MB", "64MiB",
		"64Mx", "M",    "0x10", "1.5G", "1e6",  "64MM", "K1",   "1P",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(zap__cfg_parse_size(bad[i], &v), -EINVAL);
	/* Overflow is refused, never wrapped. */
	assert_int_equal(zap__cfg_parse_size("18446744073709551616", &v), -ERANGE);
	assert_int_equal(zap__cfg_parse_size("16777216T", &v), -ERANGE);
	assert_int_equal(zap__cfg_parse_size("17179869184G", &v), -ERANGE);
}

static void test_count_grammar(void **state)
{
	uint64_t v = 7;

	(void)state;
	assert_int_equal(zap__cfg_parse_count("4096", &v), 0);
	assert_true(v == 4096);
	assert_int_equal(zap__cfg_parse_count("+1", &v), -EINVAL);
	assert_int_equal(zap__cfg_parse_count("1K", &v), -EINVAL);
	assert_int_equal(zap__cfg_parse_count(" 1", &v), -EINVAL);
	assert_int_equal(zap__cfg_parse_count("", &v), -EINVAL);
	assert_int_equal(zap__cfg_parse_count("99999999999999999999", &v), -ERANGE);
}

/* Durations are plain decimal in the unit the name carries (_MS, _US). */
static void test_duration_grammar(void **state)
{
	uint64_t v = 0;

	(void)state;
	assert_int_equal(host_u64("ZAP_TCP_HANDSHAKE_MS", "2000", &v), 1);
	assert_true(v == 2000);
	static const char *const bad[] = { "10s", "200ms", "+200", " 200", "200 ", "2e3",
					   "-1", "9" /* below 10 */ };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(host_u64("ZAP_TCP_HANDSHAKE_MS", bad[i], &v), -EINVAL);
		assert_non_null(strstr(zap_last_error(), "ZAP_TCP_HANDSHAKE_MS"));
	}
	assert_int_equal(host_u64("ZAP_TCP_SPIN_US", "200us", &v), -EINVAL);
	assert_int_equal(host_u64("ZAP_TCP_SPIN_US", "1000001", &v), -EINVAL);
	assert_int_equal(host_u64("ZAP_TCP_SPIN_US", "0", &v), 1);
	assert_true(v == 0);
}

static void test_octal_grammar(void **state)
{
	uint64_t v = 0;

	(void)state;
	assert_int_equal(zap__cfg_parse_octal("0660", &v), 0);
	assert_true(v == 0660);
	assert_int_equal(zap__cfg_parse_octal("0", &v), 0);
	assert_int_equal(zap__cfg_parse_octal("0999", &v), -EINVAL);
	assert_int_equal(zap__cfg_parse_octal("00660", &v), -EINVAL);
	assert_int_equal(zap__cfg_parse_octal("+660", &v), -EINVAL);
}

static void test_issue_cases(void **state)
{
	uint64_t v = 0;

	(void)state;
	/* 128M is a size for every size variable, not only some. */
	assert_int_equal(host_u64("ZAP_TCP_RX_QUEUE_BYTES", "128M", &v), 1);
	assert_true(v == 128ull << 20);
	assert_int_equal(host_u64("ZAP_MAX_MSG_BYTES", "128M", &v), 1);
	assert_true(v == 128ull << 20);
	assert_int_equal(host_u64("ZAP_TCP_PARTIAL_BYTES", "1G", &v), 1);
	assert_true(v == 1ull << 30);
	/* "+1" is not plain decimal. */
	assert_int_equal(host_u64("ZAP_TCP_MAX_PENDING", "+1", &v), -EINVAL);
	assert_non_null(strstr(zap_last_error(), "ZAP_TCP_MAX_PENDING='+1'"));
	assert_int_equal(host_u64("ZAP_DPDK_MTU", "+1500", &v), -EINVAL);
	/* Out of range: an error naming the variable and the range, not
	 * the default in its place. */
	v = 99;
	assert_int_equal(host_u64("ZAP_TCP_RX_QUEUE_BYTES", "1K", &v), -EINVAL);
	assert_true(v == 99);
	assert_non_null(strstr(zap_last_error(), "ZAP_TCP_RX_QUEUE_BYTES"));
	assert_non_null(strstr(zap_last_error(), "65536"));
	/* Unset and empty: the default, answered 0. */
	assert_int_equal(host_u64("ZAP_TCP_RX_QUEUE_BYTES", NULL, &v), 0);
	assert_true(v == 128ull << 20);
	assert_int_equal(host_u64("ZAP_TCP_RX_QUEUE_BYTES", "", &v), 0);
	assert_true(v == 128ull << 20);
}

static void test_types_through_host(void **state)
{
	uint64_t v = 0;
	const char *s = "x";

	(void)state;
	assert_int_equal(host_u64("ZAP_DPDK_PIN", "Off", &v), 1);
	assert_true(v == 0);
	assert_int_equal(host_u64("ZAP_DPDK_PIN", "2", &v), -EINVAL);
	assert_non_null(strstr(zap_last_error(), "boolean"));
	assert_int_equal(host_u64("ZAP_DPDK_PIN", " on", &v), -EINVAL);
	assert_non_null(strstr(zap_last_error(), "boolean"));
	assert_int_equal(host_u64("ZAP_UNIX_SOCKET_MODE", "0660", &v), 1);
	assert_true(v == 0660);
	assert_int_equal(host_u64("ZAP_UNIX_SOCKET_MODE", "1000", &v), -EINVAL);
	/* Enumerations answer the choice's value; ZAP_SHM keeps 1 and 0. */
	assert_int_equal(host_u64("ZAP_SHM", "group", &v), 1);
	assert_true(v == 1);
	assert_int_equal(host_u64("ZAP_SHM", "OFF", &v), 1);
	assert_true(v == 2);
	assert_int_equal(host_u64("ZAP_SHM", "0", &v), 1);
	assert_true(v == 2);
	assert_int_equal(host_u64("ZAP_SHM", "1", &v), 1);
	assert_true(v == 0);
	assert_int_equal(host_u64("ZAP_SHM", "sometimes", &v), -EINVAL);
	assert_non_null(strstr(zap_last_error(), "one of user, group, off"));
	/* Not in the registry, or asked as the wrong kind. */
	assert_int_equal(host_u64("ZAP_NO_SUCH_THING", "1", &v), -ENOENT);
	assert_int_equal(zap__host_config_str("ZAP_MAX_MSG_BYTES", &s), -ENOENT);
	assert_int_equal(zap__host_config_u64("ZAP_LISTEN", &v), -ENOENT);
	/* Strings: the value, or NULL. */
	setenv("ZAP_DPDK_IP", "10.0.0.1", 1);
	assert_int_equal(zap__host_config_str("ZAP_DPDK_IP", &s), 1);
	assert_string_equal(s, "10.0.0.1");
	unsetenv("ZAP_DPDK_IP");
	assert_int_equal(zap__host_config_str("ZAP_DPDK_IP", &s), 0);
	assert_null(s);
}

/* The core's own variables go through the same grammar. */
static void test_core_config(void **state)
{
	struct zap_config c;

	(void)state;
	setenv("ZAP_MAX_MSG_BYTES", "1G", 1);
	setenv("ZAP_SEND_TIMEOUT_MS", "3000", 1);
	setenv("ZAP_LOG_LEVEL", "Debug", 1);
	zap__config_read(&c);
	assert_int_equal(c.error, 0);
	assert_true(c.max_msg_size == 1ull << 30);
	assert_true(c.send_timeout_ms == 3000);
	assert_true(c.log_level_set && c.log_level == ZAP_LOG_DEBUG);
	setenv("ZAP_MAX_MSG_BYTES", " 64M", 1);
	zap__config_read(&c);
	assert_int_equal(c.error, -EINVAL);
	assert_non_null(strstr(c.error_msg, "ZAP_MAX_MSG_BYTES"));
	setenv("ZAP_MAX_MSG_BYTES", "+1", 1);
	zap__config_read(&c);
	assert_int_equal(c.error, -EINVAL);
	unsetenv("ZAP_MAX_MSG_BYTES");
	setenv("ZAP_SEND_TIMEOUT_MS", "5000000000", 1);
	zap__config_read(&c);
	assert_int_equal(c.error, -EINVAL);
	assert_non_null(strstr(c.error_msg, "ZAP_SEND_TIMEOUT_MS"));
	unsetenv("ZAP_SEND_TIMEOUT_MS");
	unsetenv("ZAP_LOG_LEVEL");
	zap__config_read(&c);
	assert_int_equal(c.error, 0);
	assert_int_equal(c.log_level, ZAP_LOG_WARN);
}

/* Every row is well formed and named once. */
static void test_table(void **state)
{
	(void)state;
	assert_true(zap__cfg_nvars > 50);
	for (size_t i = 0; i < zap__cfg_nvars; i++) {
		const struct zap_cfg_var *v = &zap__cfg_vars[i];
		bool str = v->type == ZAP_CFG_STRING || v->type == ZAP_CFG_LIST;

		assert_true(!strncmp(v->name, "ZAP_", 4));
		assert_true(zap__cfg_find(v->name) == v);
		assert_non_null(v->owner);
		assert_true(v->doc && *v->doc && v->def_text && *v->def_text);
		assert_true(v->min <= v->max);
		if (str)
			assert_true(v->max > 1);
		else if (v->type != ZAP_CFG_ENUM)
			/* 0 stands for "decided elsewhere" where it is below min. */
			assert_true(v->def == 0 || (v->def >= v->min && v->def <= v->max));
		if (v->type == ZAP_CFG_ENUM)
			assert_non_null(v->choices);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_size_grammar),
		cmocka_unit_test(test_count_grammar),
		cmocka_unit_test(test_duration_grammar),
		cmocka_unit_test(test_octal_grammar),
		cmocka_unit_test(test_issue_cases),
		cmocka_unit_test(test_types_through_host),
		cmocka_unit_test(test_core_config),
		cmocka_unit_test(test_table),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
