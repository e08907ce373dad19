/* SPDX-License-Identifier: MIT */
/*
 * zap-info: text and JSON output, --isolate surviving a crashing and a
 * hanging probe, and the exit status, run as a separate program against
 * fixture plugin directories.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness.h"
#include "zap-test.h"

#if !defined(ZAP_INFO_PATH) || !defined(PYTHON_PATH) ||                     \
	!defined(CHECK_JSON_PATH)
#error "tests/loader/meson.build passes the paths this test needs"
#endif

#define TIMEOUT_MS 20000

static const char *std_dir(void)
{
	static const char *const fixtures[] = { "good", "better", "absent", "broken", NULL };
	static const char *dir;

	if (!dir)
		dir = th_fixture_dir(fixtures);
	return dir;
}

/* Run zap-info with @args (NULL-terminated) and ZAP_PLUGIN_PATH=@dir. */
static void zap_info(struct th_proc *p, const char *dir, const char *transport,
		     const char *const *args)
{
	const char *argv[16] = { ZAP_INFO_PATH };
	char path_env[PATH_MAX + 32], tr_env[256];
	const char *env[] = { path_env, tr_env, "ZAP_TRANSPORT_QUIET",
			      "ZAP_LOG_LEVEL", NULL };
	int i;

	for (i = 0; args && args[i] && i < 14; i++)
		argv[i + 1] = args[i];
	snprintf(path_env, sizeof(path_env), "ZAP_PLUGIN_PATH=%s", dir);
	if (transport)
		snprintf(tr_env, sizeof(tr_env), "ZAP_TRANSPORT=%s", transport);
	else
		snprintf(tr_env, sizeof(tr_env), "ZAP_TRANSPORT");
	th_spawn(argv, env, TIMEOUT_MS, p);
}

#define EXPECT_STATUS(p, want)                                                \
	do {                                                                  \
		if ((p)->status != (want))                                    \
			fail_msg("zap-info exited %d, expected %d\nstdout:\n" \
				 "%s\nstderr:\n%s", (p)->status, want,        \
				 (p)->out, (p)->err);                         \
	} while (0)

#define EXPECT_OUT(p, needle)                                                 \
	do {                                                                  \
		if (!strstr((p)->out, needle))                                \
			fail_msg("zap-info output lacks \"%s\":\n%s\n"        \
				 "stderr:\n%s", needle, (p)->out, (p)->err);  \
	} while (0)

/* Check JSON text with check-zap-info-json.py and @expect (NULL-ended). */
static void check_json(const char *json, const char *const *expect)
{
	const char *argv[40] = { PYTHON_PATH, CHECK_JSON_PATH };
	char file[PATH_MAX];
	const char *dir = th_tmpdir();
	struct th_proc p;
	int i;

	th_write(dir, "out.json", json, 0644);
	argv[2] = th_join(file, sizeof(file), dir, "out.json");
	for (i = 0; expect[i] && i < 36; i++)
		argv[i + 3] = expect[i];
	th_spawn(argv, NULL, TIMEOUT_MS, &p);
	if (p.status != 0)
		fail_msg("zap-info --json check failed:\n%s%s", p.out, p.err);
	th_proc_free(&p);
}

static void test_text(void **state)
{
	const char *dir = std_dir();
	struct th_proc p;
	char row[PATH_MAX];

	(void)state;
	zap_info(&p, dir, NULL, NULL);
	EXPECT_STATUS(&p, 0);
	EXPECT_OUT(&p, "plugin directories");
	EXPECT_OUT(&p, dir);
	EXPECT_OUT(&p, "ZAP_PLUGIN_PATH");
	EXPECT_OUT(&p, "built-in");
	EXPECT_OUT(&p, "(built-in)");
	/* every candidate, with its state, reason, version and caps */
	snprintf(row, sizeof(row), "%s/libzap-good.so", dir);
	EXPECT_OUT(&p, row);
	EXPECT_OUT(&p, "not present");
	EXPECT_OUT(&p, "fixture absent: hardware absent");
	EXPECT_OUT(&p, "fixture broken: device wedged");
	EXPECT_OUT(&p, "zero-copy");
	EXPECT_OUT(&p, "max=1M");
	EXPECT_OUT(&p, "1.0");
	/* the pick, and why */
	EXPECT_OUT(&p, "pick: better");
	EXPECT_OUT(&p, "why:");
	/* no INFO line: zap-info explains, it does not pick */
	if (strstr(p.err, "INFO"))
		fail_msg("zap-info logged an INFO line:\n%s", p.err);
	th_proc_free(&p);
}

static void test_verbose(void **state)
{
	struct th_proc p;
	const char *const args[] = { "-v", NULL };

	(void)state;
	zap_info(&p, std_dir(), NULL, args);
	EXPECT_STATUS(&p, 0);
	EXPECT_OUT(&p, "fixture good detail: line one");
	EXPECT_OUT(&p, "fixture good detail: line two");
	EXPECT_OUT(&p, "max_msg_size=1048576");
	EXPECT_OUT(&p, "zero_copy=yes");
	EXPECT_OUT(&p, "registered: broken absent better good default");
	th_proc_free(&p);
}

static void test_json(void **state)
{
	static const char *const expect[] = {
		"isolated=false",
		"abi.major=1",
		"directories[0].source=ZAP_PLUGIN_PATH",
		"directories[0].status=ok",
		"plugins[0].name=default",
		"plugins[default].builtin=true",
		"plugins[default].path=(built-in)",
		"plugins[default].state=loaded",
		"plugins[good].state=loaded",
		"plugins[good].rank=50",
		"plugins[good].version=1.0",
		"plugins[good].reason=",
		"plugins[good].caps.zero_copy=true",
		"plugins[good].caps.max_msg_size=1048576",
		"plugins[good].detail~line two",
		"plugins[better].rank=60",
		"plugins[absent].state=not present",
		"plugins[absent].reason=fixture absent: hardware absent",
		"plugins[broken].state=error",
		"plugins[broken].reason=fixture broken: device wedged",
		"registered=broken,absent,better,good,default",
		"pick.name=better",
		"pick.source=auto",
		"pick.request=",
		"pick.status=ok",
		"pick.fallback=false",
		"pick.available=true",
		"pick.error=0",
		"exit_status=0",
		NULL,
	};
	const char *const args[] = { "--json", NULL };
	struct th_proc p;

	(void)state;
	zap_info(&p, std_dir(), NULL, args);
	EXPECT_STATUS(&p, 0);
	check_json(p.out, expect);
	th_proc_free(&p);
}

/* Fallback via ZAP_TRANSPORT: exit 1, and the JSON says why. */
static void test_json_fallback(void **state)
{
	static const char *const expect[] = {
		"pick.name=better", "pick.source=ZAP_TRANSPORT",
		"pick.request=absent", "pick.status=fallback",
		"pick.fallback=true", "pick.available=false",
		"pick.reason~absent", "exit_status=1", NULL,
	};
	const char *const args[] = { "-j", NULL };
	struct th_proc p;

	(void)state;
	zap_info(&p, std_dir(), "absent", args);
	EXPECT_STATUS(&p, 1);
	check_json(p.out, expect);
	th_proc_free(&p);
}

/* A path with odd bytes still gives valid JSON. */
static void test_json_odd_path(void **state)
{
	static const char *const expect[] = { "plugins[good].state=loaded",
					      NULL };
	const char *const args[] = { "--json", NULL };
	char dir[PATH_MAX];
	struct th_proc p;

	(void)state;
	th_join(dir, sizeof(dir), th_tmpdir(), "q\"uo\\te\t\xff\xc3\xa9");
	if (mkdir(dir, 0755) != 0)
		fail_msg("mkdir %s: %s", dir, strerror(errno));
	th_fixture(dir, "good", NULL);
	zap_info(&p, dir, NULL, args);
	EXPECT_STATUS(&p, 0);
	check_json(p.out, expect);
	th_proc_free(&p);
}

struct status_case {
	const char *env;       /* ZAP_TRANSPORT, or NULL */
	const char *args[4];
	int status;
	const char *needle;    /* in stdout or stderr */
};

static const struct status_case status_cases[] = {
	{ NULL, { NULL }, 0, "pick: better" },
	{ NULL, { "--transport", "good", NULL }, 0, "pick: good" },
	{ NULL, { "-t", "absent", NULL }, 1, "fallback" },
	{ NULL, { "--transport", "=absent", NULL }, 3,
	  "fixture absent: hardware absent" },
	{ NULL, { "--transport", "^better,good,broken,absent,default", NULL },
	  3, "not available" },
	{ "good", { NULL }, 0, "pick: good" },
	{ "=broken", { NULL }, 3, "device wedged" },
	/* An unknown name is a fallback, not success (issue: gpudirekt). */
	{ NULL, { "-t", "gpudirekt", NULL }, 1, "unknown transport 'gpudirekt'" },
	{ NULL, { "-t", "betr", "-j", NULL }, 1, "did you mean 'better'" },
	{ "absent", { "--transport", "good", NULL }, 0, "pick: good" },
	{ NULL, { "--transport", "dp dk!", NULL }, 2, "" },
	{ NULL, { "--transport", "=godo", NULL }, 2, "did you mean 'good'" },
	{ "dp dk!", { NULL }, 2, "ZAP_TRANSPORT" },
	{ NULL, { "--bogus", NULL }, 2, "--help" },
	{ NULL, { "extra", NULL }, 2, "extra" },
	{ NULL, { "--isolate", "--timeout", "soon", NULL }, 2, "--timeout" },
	{ NULL, { "--help", NULL }, 0, "Exit status" },
	{ NULL, { "--version", NULL }, 0, "zap-info" },
};

/*
 * TLS settings that make every open of default fail are not "ok": status
 * "error" and exit 2, the reason on stderr (a configuration error fails
 * every pick with -EINVAL, whatever the preference).
 */
static void test_tls_unusable(void **state)
{
	const char *const def[] = { "-t", "default", NULL };
	struct th_proc p;

	(void)state;
	setenv("ZAP_TLS_PEERS", "/etc/hostname", 1);
	zap_info(&p, std_dir(), NULL, def);
	unsetenv("ZAP_TLS_PEERS");
	EXPECT_STATUS(&p, 2);
	EXPECT_OUT(&p, "status:  error");
	if (!strstr(p.err, "refusing to run in plaintext"))
		fail_msg("no reason on stderr:\n%s", p.err);
	th_proc_free(&p);
	setenv("ZAP_TLS_CERT", "/nonexistent/cert.pem", 1);
	setenv("ZAP_TLS_KEY", "/nonexistent/key.pem", 1);
	setenv("ZAP_TLS_PEERS", "/etc/hostname", 1);
	zap_info(&p, std_dir(), NULL, def);
	unsetenv("ZAP_TLS_CERT");
	unsetenv("ZAP_TLS_KEY");
	unsetenv("ZAP_TLS_PEERS");
	EXPECT_STATUS(&p, 2);
	if (!strstr(p.err, "/nonexistent/cert.pem"))
		fail_msg("no reason on stderr:\n%s", p.err);
	th_proc_free(&p);
}

/*
 * The three outcomes a script tells apart, and the reason on stderr for
 * the two that are not success (nothing on stderr for success).
 */
static void test_status_stderr(void **state)
{
	const char *const fb[] = { "-t", "absent", NULL };
	const char *const none[] = { "-t", "=absent", "-j", NULL };
	const char *const ok[] = { "-t", "good", NULL };
	struct th_proc p;

	(void)state;
	zap_info(&p, std_dir(), NULL, fb);
	EXPECT_STATUS(&p, 1);
	if (!strstr(p.err, "zap-info: fallback to better") ||
	    !strstr(p.err, "hardware absent"))
		fail_msg("no fallback reason on stderr:\n%s", p.err);
	th_proc_free(&p);
	zap_info(&p, std_dir(), NULL, none);
	EXPECT_STATUS(&p, 3);
	if (!strstr(p.err, "zap-info: not available: ") ||
	    !strstr(p.err, "hardware absent"))
		fail_msg("no reason on stderr:\n%s", p.err);
	th_proc_free(&p);
	zap_info(&p, std_dir(), NULL, ok);
	EXPECT_STATUS(&p, 0);
	if (strstr(p.err, "zap-info:"))
		fail_msg("stderr on success:\n%s", p.err);
	th_proc_free(&p);
}

static void test_status(void **state)
{
	const struct status_case *c = *state;
	struct th_proc p;

	zap_info(&p, std_dir(), c->env, c->args);
	if (p.status != c->status || (!strstr(p.out, c->needle) &&
				      !strstr(p.err, c->needle)))
		fail_msg("ZAP_TRANSPORT=%s zap-info %s %s: exit %d (expected "
			 "%d), looking for \"%s\"\nstdout:\n%s\nstderr:\n%s",
			 c->env ? c->env : "(unset)",
			 c->args[0] ? c->args[0] : "",
			 c->args[0] && c->args[1] ? c->args[1] : "",
			 p.status, c->status, c->needle, p.out, p.err);
	th_proc_free(&p);
}

/* --help documents the JSON fields and the exit status. */
static void test_help(void **state)
{
	static const char *const words[] = {
		"--json", "--isolate", "--timeout", "--transport", "-v",
		"directories", "plugins", "registered", "pick", "exit_status",
		"max_msg_size", "fallback", "Exit status", NULL,
	};
	const char *const args[] = { "--help", NULL };
	struct th_proc p;
	int i;

	(void)state;
	zap_info(&p, std_dir(), NULL, args);
	EXPECT_STATUS(&p, 0);
	for (i = 0; words[i]; i++)
		EXPECT_OUT(&p, words[i]);
	th_proc_free(&p);
}

/* A crashing probe beside a good one, with a limit far above any start-up
 * (th_probe_limit_ms()): a crash is a crash at any load. */
static const char *crash_dir(void)
{
	static const char *const fixtures[] = { "good", "crash", NULL };
	static const char *dir;

	if (!dir)
		dir = th_fixture_dir(fixtures);
	return dir;
}

/* A probe that never ends, alone: it times out at any limit and load. */
static const char *hang_dir(void)
{
	static const char *const fixtures[] = { "hang", NULL };
	static const char *dir;

	if (!dir)
		dir = th_fixture_dir(fixtures);
	return dir;
}

/* --isolate survives a crashing and a hanging probe and names them. */
static void test_isolate(void **state)
{
	const char *const args[] = { "--isolate", "--timeout", th_probe_limit_ms(), NULL };
	const char *const hang_args[] = { "--isolate", "--timeout", "250", NULL };
	struct th_proc p;

	(void)state;
	zap_info(&p, crash_dir(), NULL, args);
	EXPECT_STATUS(&p, 0);
	EXPECT_OUT(&p, "crash");
	EXPECT_OUT(&p, "probe crashed: signal 11");
	EXPECT_OUT(&p, "libzap-good.so");
	th_proc_free(&p);
	zap_info(&p, hang_dir(), NULL, hang_args);
	EXPECT_STATUS(&p, 0);
	EXPECT_OUT(&p, "hang");
	EXPECT_OUT(&p, "probe timed out after 250 ms");
	th_proc_free(&p);
}

/* Without --isolate too: probing out of process is the default now, so
 * plain zap-info (like any libzap program) survives them as well. */
static void test_default_survives(void **state)
{
	const char *const args[] = { "--timeout", th_probe_limit_ms(), NULL };
	const char *const hang_args[] = { "--timeout", "250", NULL };
	struct th_proc p;

	(void)state;
	zap_info(&p, crash_dir(), NULL, args);
	EXPECT_STATUS(&p, 0);
	EXPECT_OUT(&p, "probe crashed: signal 11");
	EXPECT_OUT(&p, "pick: good");
	th_proc_free(&p);
	zap_info(&p, hang_dir(), NULL, hang_args);
	EXPECT_STATUS(&p, 0);
	EXPECT_OUT(&p, "probe timed out after 250 ms");
	EXPECT_OUT(&p, "pick: default");
	th_proc_free(&p);
}

static void test_isolate_json(void **state)
{
	static const char *const expect[] = {
		"isolated=true",
		"plugins[crash].state=error",
		"plugins[crash].reason~probe crashed: signal 11",
		"plugins[good].state=loaded",
		"plugins[good].rank=50",
		"exit_status=0",
		NULL,
	};
	static const char *const expect_hang[] = {
		"isolated=true",
		"plugins[hang].state=error",
		"plugins[hang].reason~probe timed out after 250 ms",
		"exit_status=0",
		NULL,
	};
	const char *const args[] = { "--json", "--isolate", "--timeout",
				     th_probe_limit_ms(), NULL };
	const char *const hang_args[] = { "--json", "--isolate", "--timeout",
					  "250", NULL };
	struct th_proc p;

	(void)state;
	zap_info(&p, crash_dir(), NULL, args);
	EXPECT_STATUS(&p, 0);
	check_json(p.out, expect);
	th_proc_free(&p);
	zap_info(&p, hang_dir(), NULL, hang_args);
	EXPECT_STATUS(&p, 0);
	check_json(p.out, expect_hang);
	th_proc_free(&p);
}

/* A missing plugin directory is reported; default is still the pick. */
static void test_missing_dir(void **state)
{
	char dir[PATH_MAX];
	struct th_proc p;

	(void)state;
	th_join(dir, sizeof(dir), th_tmpdir(), "absent-dir");
	zap_info(&p, dir, NULL, NULL);
	EXPECT_STATUS(&p, 0);
	EXPECT_OUT(&p, "missing");
	EXPECT_OUT(&p, "pick: default");
	th_proc_free(&p);
}

/* --env: each variable of the registry, its value and where it came from;
 * exit 2 when one is invalid. */
static void test_env(void **state)
{
	const char *argv[] = { ZAP_INFO_PATH, "--env", "-v", NULL };
	const char *env[] = { "ZAP_MAX_MSG_BYTES=128M", "ZAP_TCP_RX_QUEUE_BYTES=128M",
			      "ZAP_TCP_MAX_PENDING=+1", "ZAP_SHM", "ZAP_LOG_LEVEL", NULL };
	const char *ok_env[] = { "ZAP_MAX_MSG_BYTES=1G", "ZAP_TCP_MAX_PENDING", NULL };
	struct th_proc p;

	(void)state;
	th_spawn(argv, env, TIMEOUT_MS, &p);
	EXPECT_STATUS(&p, 2);
	EXPECT_OUT(&p, "ZAP_MAX_MSG_BYTES              128M  (environment)");
	EXPECT_OUT(&p, "ZAP_TCP_RX_QUEUE_BYTES         128M  (environment)");
	EXPECT_OUT(&p, "ZAP_TCP_MAX_PENDING            '+1'  (invalid: ZAP_TCP_MAX_PENDING='+1'");
	EXPECT_OUT(&p, "ZAP_SHM                        user  (default)");
	EXPECT_OUT(&p, "size 65536..1099511627776, owner tcp, setuid: ignored;");
	EXPECT_OUT(&p, "enum: user, group, off, 1, 0, owner tcp, setuid: ignored;");
	EXPECT_OUT(&p, "setuid: refused;");
	th_proc_free(&p);
	argv[2] = "--json";
	th_spawn(argv, ok_env, TIMEOUT_MS, &p);
	EXPECT_STATUS(&p, 0);
	EXPECT_OUT(&p, "\"name\": \"ZAP_MAX_MSG_BYTES\"");
	EXPECT_OUT(&p, "\"value\": \"1G\",\n      \"source\": \"environment\"");
	th_proc_free(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_text),
		cmocka_unit_test(test_env),
		cmocka_unit_test(test_verbose),
		cmocka_unit_test(test_json),
		cmocka_unit_test(test_json_fallback),
		cmocka_unit_test(test_json_odd_path),
		cmocka_unit_test(test_help),
		cmocka_unit_test_prestate(test_status, (void *)&status_cases[0]),
		cmocka_unit_test_prestate(test_status, (void *)&status_cases[1]),
		cmocka_unit_test_prestate(test_status, (void *)&status_cases[2]),
		cmocka_unit_test_prestate(test_status, (void *)&status_cases[3]),
		cmocka_unit_test_prestate(test_status, (void *)&status_cases[4]),
		cmocka_unit_test_prestate(test_status, (void *)&status_cases[5]),
		cmocka_unit_test_prestate(test_status, (void *)&status_cases[6]),
		cmocka_unit_test_prestate(test_status, (void *)&status_cases[7]),
		cmocka_unit_test_prestate(test_status, (void *)&status_cases[8]),
		cmocka_unit_test_prestate(test_status, (void *)&status_cases[9]),
		cmocka_unit_test_prestate(test_status, (void *)&status_cases[10]),
		cmocka_unit_test_prestate(test_status, (void *)&status_cases[11]),
		cmocka_unit_test_prestate(test_status, (void *)&status_cases[12]),
		cmocka_unit_test_prestate(test_status, (void *)&status_cases[13]),
		cmocka_unit_test_prestate(test_status, (void *)&status_cases[14]),
		cmocka_unit_test_prestate(test_status, (void *)&status_cases[15]),
		cmocka_unit_test_prestate(test_status, (void *)&status_cases[16]),
		cmocka_unit_test_prestate(test_status, (void *)&status_cases[17]),
		cmocka_unit_test(test_status_stderr),
		cmocka_unit_test(test_tls_unusable),
		cmocka_unit_test(test_isolate),
		cmocka_unit_test(test_default_survives),
		cmocka_unit_test(test_isolate_json),
		cmocka_unit_test(test_missing_dir),
	};

	return cmocka_run_group_tests_name("zap-info", tests, th_group_setup,
					   th_group_teardown);
}
