/* SPDX-License-Identifier: MIT */
/*
 * Pick suite: every rule of docs/loader.md "Picking a transport", against one plugin
 * directory holding five fixtures (see tests/plugins/meson.build):
 *
 *   top 90 OK   broken 80 ERROR   absent 70 NOT_PRESENT
 *   better 60 OK   good 50 OK   (+ built-in default 0)
 *
 * Preference and scan state are per process, so every case runs in a
 * forked child (harness.h).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define TIMEOUT_MS 20000

static const char *std_dir(void)
{
	static const char *const fixtures[] = { "top", "broken", "absent", "better", "good", NULL };
	static const char *dir;

	if (!dir)
		dir = th_fixture_dir(fixtures);
	return dir;
}

/* Child preamble: the standard directory, log lines captured. */
static void pick_env(void *arg, bool handler)
{
	th_setenv("ZAP_PLUGIN_PATH", arg);
	th_capture_logs(handler);
}

static int pick_warns(const char *needle)
{
	return th_log_count(ZAP_LOG_WARN, "pick", needle);
}

static void run(void (*fn)(void *))
{
	th_child(fn, (void *)std_dir(), TIMEOUT_MS);
}

#define PICK_TEST(name)                                                      \
	static void child_##name(void *arg);                                 \
	static void test_##name(void **state)                                \
	{                                                                    \
		(void)state;                                                 \
		run(child_##name);                                           \
	}                                                                    \
	static void child_##name(void *arg)

/* Empty or auto: the best-ranked transport whose probe succeeded. */
PICK_TEST(auto_rank)
{
	struct zap_choice c = { .size = sizeof(c) };

	pick_env(arg, true);
	TH_CHECK_PICK(NULL, 0, "top");
	TH_CHECK_PICK("", 0, "top");
	TH_CHECK_PICK("auto", 0, "top");
	TH_CHECK_PICK("  AuTo\t", 0, "top");
	TH_CHECK_INT(zap_pick_explain("", 0, &c), 0);
	TH_CHECK_STR(c.name, "top");
	TH_CHECK(!c.fallback);
	TH_CHECK_INT(pick_warns(""), 0);
}

/* A name: that transport, even when a better one is available. */
PICK_TEST(by_name)
{
	struct zap_choice c = { .size = sizeof(c) };

	pick_env(arg, true);
	TH_CHECK_PICK("good", 0, "good");
	TH_CHECK_PICK("better", 0, "better");
	TH_CHECK_PICK("default", 0, "default");
	TH_CHECK_PICK(" GOOD ", 0, "good");
	TH_CHECK_PICK("\tBetter", ZAP_PICK_STRICT, "better");
	TH_CHECK_INT(zap_pick_explain("good", 0, &c), 0);
	TH_CHECK_STR(c.name, "good");
	TH_CHECK(!c.fallback);
	TH_CHECK_INT(pick_warns(""), 0);
}

/* Each pick is a new instance. */
PICK_TEST(new_instance)
{
	struct zap_transport *a = NULL, *b = NULL;

	pick_env(arg, true);
	TH_CHECK_INT(zap_pick("good", 0, NULL, &a), 0);
	TH_CHECK_INT(zap_pick("good", 0, NULL, &b), 0);
	TH_CHECK(a && b && a != b);
	th_loopback(a);
	th_loopback(b);
	zap_close(a);
	th_loopback(b);
	zap_close(b);
}

/*
 * Unavailable name: fall back to the best available transport ranked
 * below it (not to "top", which ranks above), with a WARN naming the
 * request and its reason.
 */
PICK_TEST(fallback)
{
	struct zap_choice c = { .size = sizeof(c) };

	pick_env(arg, true);
	TH_CHECK_PICK("absent", 0, "better");
	TH_CHECK_MSG(pick_warns("absent") >= 1 &&
			     pick_warns("fixture absent: hardware absent") >= 1,
		     "no WARN naming 'absent' and its reason");
	TH_CHECK_PICK("broken", 0, "better");
	TH_CHECK_MSG(pick_warns("fixture broken: device wedged") >= 1,
		     "no WARN naming 'broken' and its reason");
	TH_CHECK_INT(zap_pick_explain("absent", 0, &c), 0);
	TH_CHECK_STR(c.name, "better");
	TH_CHECK(c.fallback);
	TH_CHECK_HAS(c.reason, "absent");
}

/* The fallback WARN also reaches stderr through the default handler. */
PICK_TEST(fallback_stderr)
{
	pick_env(arg, false);
	TH_CHECK_PICK("absent", 0, "better");
	TH_CHECK_MSG(th_count_lines(th_logs(), "zap: WARN: pick: ") == 1,
		     "expected one 'zap: WARN: pick:' line");
	TH_CHECK_INT(th_count_lines(th_logs(), "hardware absent") >= 1, 1);
}

/* Strict: no fallback; the not-available code with the reason. */
PICK_TEST(strict)
{
	struct zap_transport *t = NULL;
	struct zap_choice c = { .size = sizeof(c) };
	int err;

	pick_env(arg, true);
	err = zap_pick("=absent", 0, NULL, &t);
	TH_CHECK_INT(err, ZAP_ENOTAVAIL);
	TH_CHECK(t == NULL);
	TH_CHECK_HAS(zap_last_error(), "fixture absent: hardware absent");
	TH_CHECK_HAS(zap_strerror(err),
		     "requested transport not available on this host");
	TH_CHECK_HAS(zap_strerror(err), "fixture absent: hardware absent");

	err = zap_pick("absent", ZAP_PICK_STRICT, NULL, &t);
	TH_CHECK_INT(err, ZAP_ENOTAVAIL);
	TH_CHECK_HAS(zap_strerror(err), "hardware absent");

	err = zap_pick(" = Broken ", 0, NULL, &t);
	TH_CHECK_INT(err, ZAP_ENOTAVAIL);
	TH_CHECK_HAS(zap_strerror(err), "fixture broken: device wedged");
	TH_CHECK(t == NULL);

	TH_CHECK_PICK("=good", 0, "good");
	TH_CHECK_INT(zap_pick_explain("=absent", 0, &c), ZAP_ENOTAVAIL);
	TH_CHECK_HAS(c.reason, "hardware absent");
}

/* "a,b" tries in order; fallback below the lowest-ranked one named. */
PICK_TEST(list)
{
	struct zap_transport *t = NULL;
	int err;

	pick_env(arg, true);
	TH_CHECK_PICK("good,better", 0, "good");
	TH_CHECK_PICK("better,good", 0, "better");
	TH_CHECK_PICK("absent,good", 0, "good");
	TH_CHECK_PICK(" absent , Good ", 0, "good");
	TH_CHECK_PICK("broken,absent,better", 0, "better");
	TH_CHECK_PICK("absent,broken", 0, "better");
	TH_CHECK_MSG(pick_warns("absent") >= 1, "no fallback WARN");
	TH_CHECK_PICK("=absent,good", 0, "good");
	err = zap_pick("=absent,broken", 0, NULL, &t);
	TH_CHECK_INT(err, ZAP_ENOTAVAIL);
	TH_CHECK(t == NULL);
}

/* "^a,b": the best-ranked transport other than those. */
PICK_TEST(exclude)
{
	struct zap_transport *t = NULL;
	int err;

	pick_env(arg, true);
	TH_CHECK_PICK("^top", 0, "better");
	TH_CHECK_PICK("^absent", 0, "top");
	TH_CHECK_PICK("^top,better", 0, "good");
	TH_CHECK_PICK(" ^ TOP , better ,good", 0, "default");
	err = zap_pick("^top,better,good,default", 0, NULL, &t);
	TH_CHECK_INT(err, ZAP_ENOTAVAIL);
	TH_CHECK(t == NULL);
}

/* Unknown name, not strict: WARN with the closest name, skipped. */
PICK_TEST(unknown)
{
	pick_env(arg, true);
	TH_CHECK_PICK("godo,good", 0, "good");
	TH_CHECK_MSG(pick_warns("did you mean 'good'") == 1,
		     "no WARN suggesting 'good'");
	TH_CHECK_PICK("bettr,good", 0, "good");
	TH_CHECK_MSG(pick_warns("did you mean 'better'") == 1,
		     "no WARN suggesting 'better'");
	TH_CHECK_PICK("^tpo", 0, "top");
	TH_CHECK_MSG(pick_warns("did you mean 'top'") == 1,
		     "no WARN suggesting 'top'");
}

/* Unknown name, strict: -EINVAL with the suggestion. */
PICK_TEST(unknown_strict)
{
	struct zap_transport *t = NULL;
	int err;

	pick_env(arg, true);
	err = zap_pick("=godo", 0, NULL, &t);
	TH_CHECK_INT(err, -EINVAL);
	TH_CHECK(t == NULL);
	TH_CHECK_HAS(zap_last_error(), "did you mean 'good'");
	err = zap_pick("defualt", ZAP_PICK_STRICT, NULL, &t);
	TH_CHECK_INT(err, -EINVAL);
	TH_CHECK_HAS(zap_last_error(), "did you mean 'default'");
	TH_CHECK_HAS(zap_strerror(err), "did you mean 'default'");
}

/* Malformed preferences are -EINVAL, strict or not. */
PICK_TEST(malformed)
{
	static const char *const bad[] = { "dp dk!", "good;better",
					   "g@@d", NULL };
	struct zap_transport *t = NULL;
	int i, err;

	pick_env(arg, true);
	for (i = 0; bad[i]; i++) {
		err = zap_pick(bad[i], 0, NULL, &t);
		TH_CHECK_MSG(err == -EINVAL, "zap_pick(\"%s\") = %d (%s)",
			     bad[i], err, zap_strerror(err));
		TH_CHECK(t == NULL);
	}
}

/* ZAP_TRANSPORT: used when pref is NULL, read once per process. */
PICK_TEST(env_once)
{
	struct zap_choice c = { .size = sizeof(c) };

	pick_env(arg, true);
	th_setenv("ZAP_TRANSPORT", "good");
	TH_CHECK_PICK(NULL, 0, "good");
	th_setenv("ZAP_TRANSPORT", "better");
	TH_CHECK_PICK(NULL, 0, "good");
	TH_CHECK_INT(zap_pick_explain(NULL, 0, &c), 0);
	TH_CHECK_STR(c.name, "good");
	th_setenv("ZAP_TRANSPORT", NULL);
	TH_CHECK_PICK(NULL, 0, "good");
	/* An explicit preference wins over the environment. */
	TH_CHECK_PICK("better", 0, "better");
}

/* The environment's "=name" spelling is strict. */
PICK_TEST(env_strict)
{
	struct zap_transport *t = NULL;
	int err;

	pick_env(arg, true);
	th_setenv("ZAP_TRANSPORT", "=absent");
	err = zap_pick(NULL, 0, NULL, &t);
	TH_CHECK_INT(err, ZAP_ENOTAVAIL);
	TH_CHECK_HAS(zap_strerror(err),
		     "requested transport not available on this host");
	TH_CHECK_HAS(zap_strerror(err), "hardware absent");
}

/* The environment's plain name falls back with a WARN. */
PICK_TEST(env_fallback)
{
	pick_env(arg, true);
	th_setenv("ZAP_TRANSPORT", " Absent ");
	TH_CHECK_PICK(NULL, 0, "better");
	TH_CHECK_MSG(pick_warns("absent") >= 1, "no fallback WARN");
}

/* Exactly one INFO line, at the first pick, naming everything. */
PICK_TEST(info_line)
{
	static const char *const names[] = { "top", "broken", "absent",
					     "better", "good", "default", NULL };
	static const char *const reasons[] = { "hardware absent",
					       "device wedged", NULL };
	const char *logs;
	int i;

	pick_env(arg, true);
	th_setenv("ZAP_LOG_LEVEL", "debug");
	TH_CHECK_PICK("better", 0, "better");
	TH_CHECK_PICK(NULL, 0, "top");
	TH_CHECK_PICK("absent", 0, "better");
	TH_CHECK_INT(th_log_count(ZAP_LOG_INFO, NULL, ""), 1);
	TH_CHECK_INT(th_log_count(ZAP_LOG_INFO, "pick", ""), 1);
	logs = th_logs();
	/* name=state for each transport, and the winner of that first pick. */
	for (i = 0; names[i]; i++)
		TH_CHECK_MSG(th_log_count(ZAP_LOG_INFO, "pick", names[i]) == 1,
			     "the INFO line does not mention '%s'", names[i]);
	TH_CHECK_INT(th_log_count(ZAP_LOG_INFO, "pick", "broken=error"), 1);
	TH_CHECK_INT(th_log_count(ZAP_LOG_INFO, "pick", "absent=not present"), 1);
	TH_CHECK_INT(th_log_count(ZAP_LOG_INFO, "pick", "picked better"), 1);
	/* Short: the probe reasons are at debug level, not on that line. */
	for (i = 0; reasons[i]; i++) {
		TH_CHECK_MSG(th_log_count(ZAP_LOG_INFO, "pick", reasons[i]) == 0,
			     "the INFO line carries the reason '%s'", reasons[i]);
		TH_CHECK_MSG(th_log_count(ZAP_LOG_DEBUG, "pick", reasons[i]) == 1,
			     "no DEBUG line with the reason '%s'", reasons[i]);
	}
	TH_CHECK_HAS(logs, "better");
}

/* The line stays short: at most 160 characters for six transports. */
PICK_TEST(info_line_short)
{
	const char *p;

	pick_env(arg, false);
	TH_CHECK_PICK(NULL, 0, "top");
	p = strstr(th_logs(), "zap: INFO: pick: ");
	TH_CHECK(p != NULL);
	TH_CHECK_MSG(strcspn(p, "\n") <= 160, "first-pick line is %zu characters: %.*s",
		     strcspn(p, "\n"), (int)strcspn(p, "\n"), p);
}

/* The same line through the default stderr handler, at the default level. */
PICK_TEST(info_line_stderr)
{
	pick_env(arg, false);
	TH_CHECK_PICK(NULL, 0, "top");
	TH_CHECK_PICK(NULL, 0, "top");
	TH_CHECK_INT(th_count_lines(th_logs(), "zap: INFO: pick: "), 1);
	TH_CHECK_INT(th_count_lines(th_logs(), "zap: INFO: "), 1);
	/* The probe ERROR WARN is there too; nothing else. */
	TH_CHECK_INT(th_count_lines(th_logs(), "zap: ") -
			     th_count_lines(th_logs(), "zap: WARN: "), 1);
}

/* zap_pick_explain() never logs the first-pick line, nor consumes it. */
PICK_TEST(explain_silent)
{
	struct zap_choice c = { .size = sizeof(c) };

	pick_env(arg, true);
	TH_CHECK_INT(zap_pick_explain(NULL, 0, &c), 0);
	TH_CHECK_STR(c.name, "top");
	TH_CHECK(c.reason[0] != '\0');
	TH_CHECK_INT(th_log_count(ZAP_LOG_INFO, NULL, ""), 0);
	TH_CHECK_PICK(NULL, 0, "top");
	TH_CHECK_INT(th_log_count(ZAP_LOG_INFO, "pick", ""), 1);
}

/* ZAP_TRANSPORT_QUIET=1 silences that line only. */
PICK_TEST(quiet)
{
	pick_env(arg, false);
	th_setenv("ZAP_TRANSPORT_QUIET", "1");
	TH_CHECK_PICK("absent", 0, "better");
	TH_CHECK_INT(th_count_lines(th_logs(), "zap: INFO: "), 0);
	TH_CHECK_INT(th_count_lines(th_logs(), "zap: WARN: pick: "), 1);
}

PICK_TEST(quiet_zero)
{
	pick_env(arg, true);
	th_setenv("ZAP_TRANSPORT_QUIET", "0");
	TH_CHECK_PICK(NULL, 0, "top");
	TH_CHECK_INT(th_log_count(ZAP_LOG_INFO, "pick", ""), 1);
}

/*
 * Booleans take the usual spellings, in any case and with blanks: every
 * one of these silences the line (or keeps it), none fails the pick.
 */
/* Any case; blanks are not part of any spelling (docs/environment.md). */
static const char *const bool_true[] = { "1", "yes", "YES", "true", "True",
					 "on", "On", NULL };
static const char *const bool_false[] = { "0", "no", "No", "false", "FALSE",
					  "off", "OFF", NULL };

static void bool_case(void *arg, const char *value, bool quiet)
{
	th_setenv("ZAP_PLUGIN_PATH", arg);
	th_capture_logs(true);
	th_setenv("ZAP_TRANSPORT_QUIET", value);
	TH_CHECK_PICK(NULL, 0, "top");
	TH_CHECK_MSG(th_log_count(ZAP_LOG_INFO, "pick", "") == (quiet ? 0 : 1),
		     "ZAP_TRANSPORT_QUIET='%s': %d INFO lines", value,
		     th_log_count(ZAP_LOG_INFO, "pick", ""));
}

static void child_bool_true(void *arg)
{
	const char *v = getenv("TH_BOOL_VALUE");

	bool_case(arg, v, true);
}

static void child_bool_false(void *arg)
{
	const char *v = getenv("TH_BOOL_VALUE");

	bool_case(arg, v, false);
}

static void test_quiet_spellings(void **state)
{
	(void)state;
	for (int i = 0; bool_true[i]; i++) {
		setenv("TH_BOOL_VALUE", bool_true[i], 1);
		run(child_bool_true);
	}
	for (int i = 0; bool_false[i]; i++) {
		setenv("TH_BOOL_VALUE", bool_false[i], 1);
		run(child_bool_false);
	}
	unsetenv("TH_BOOL_VALUE");
}

/* ZAP_LOG_LEVEL=error silences the line and the warnings. */
PICK_TEST(level_error)
{
	pick_env(arg, false);
	th_setenv("ZAP_LOG_LEVEL", "error");
	TH_CHECK_PICK("absent", 0, "better");
	TH_CHECK_INT(th_count_lines(th_logs(), "zap: "), 0);
}

/* ZAP_LOG_LEVEL (any case) lets DEBUG lines through. */
PICK_TEST(level_debug)
{
	pick_env(arg, true);
	th_setenv("ZAP_LOG_LEVEL", "DEBUG");
	TH_CHECK_PICK(NULL, 0, "top");
	TH_CHECK(th_log_count(ZAP_LOG_DEBUG, NULL, "") >= 1);
}

/* zap_registered(): default + every valid plugin, best rank first. */
PICK_TEST(registered)
{
	static const char *const want[] = { "top", "broken", "absent",
					    "better", "good", "default" };
	const char *const *names = NULL, *const *again = NULL;
	int i, n;

	pick_env(arg, true);
	n = zap_registered(&names);
	TH_CHECK_INT(n, 6);
	for (i = 0; i < n; i++)
		TH_CHECK_STR(names[i], want[i]);
	TH_CHECK(names[n] == NULL);
	TH_CHECK_INT(zap_registered(&again), 6);
	TH_CHECK(again == names);
}

/*
 * A non-strict pick whose transport fails to open falls back to the next
 * candidate, like an unavailable one, with one WARN whose reason names the
 * transport once ("good: open failed: cannot listen ...", not "good: open
 * failed: good: cannot listen ...").
 */
PICK_TEST(open_fail_fallback)
{
	struct zap_transport *t = NULL;
	int err;

	pick_env(arg, true);
	th_setenv("ZAP_FIXTURE_OPEN_FAIL", "good");
	TH_CHECK_PICK("good", 0, "default");
	TH_CHECK_INT(pick_warns("good: open failed: cannot listen"), 1);
	TH_CHECK_INT(pick_warns("good: open failed: good:"), 0);
	TH_CHECK_INT(th_log_count(ZAP_LOG_WARN, NULL, ""), 2); /* + broken's probe */
	/* Strict: the open error itself, returned and not logged. */
	err = zap_pick("=good", 0, NULL, &t);
	TH_CHECK_INT(err, -EADDRINUSE);
	TH_CHECK(t == NULL);
	TH_CHECK_HAS(zap_last_error(), "good: open failed: cannot listen");
	TH_CHECK_INT(th_log_count(ZAP_LOG_WARN, NULL, ""), 2);
	TH_CHECK_INT(th_log_count(ZAP_LOG_ERROR, NULL, ""), 0);
}

/* Auto: the best transport fails to open, the next one is used, with
 * one WARN saying why. */
PICK_TEST(open_fail_auto)
{
	pick_env(arg, true);
	th_setenv("ZAP_FIXTURE_OPEN_FAIL", "top");
	TH_CHECK_PICK(NULL, 0, "better");
	TH_CHECK_INT(pick_warns("top: open failed: cannot listen"), 1);
	TH_CHECK_INT(pick_warns("using 'better'"), 1);
	TH_CHECK_INT(th_log_count(ZAP_LOG_INFO, "pick", "picked better"), 1);
}

/* ... and when nothing opens, ZAP_ENOTAVAIL with every reason. */
PICK_TEST(open_fail_none)
{
	struct zap_transport *t = NULL;
	int err;

	pick_env(arg, true);
	th_setenv("ZAP_FIXTURE_OPEN_FAIL", "top better good");
	err = zap_pick("^default", 0, NULL, &t);
	TH_CHECK_INT(err, ZAP_ENOTAVAIL);
	TH_CHECK(t == NULL);
	TH_CHECK_HAS(zap_last_error(), "top: open failed: cannot listen");
	TH_CHECK_HAS(zap_last_error(), "good: open failed: cannot listen");
	TH_CHECK_HAS(zap_strerror(err), "requested transport not available");
}

/*
 * The case with the real default transport: its listen address is
 * taken. Not strict: ZAP_ENOTAVAIL (nothing ranks below default), reason
 * "default: open failed: cannot listen on ..." with the name said once.
 */
PICK_TEST(default_addr_in_use)
{
	struct zap_attr attr = { .size = sizeof(attr) };
	struct zap_transport *a = NULL, *b = NULL;
	char addr[ZAP_PEER_MAX];
	int err;

	pick_env(arg, true);
	attr.listen = "127.0.0.1:0";
	TH_CHECK_INT(zap_pick("=default", 0, &attr, &a), 0);
	TH_CHECK_INT(zap_transport_address(a, addr, sizeof(addr)), 0);
	attr.listen = addr;
	err = zap_pick("default", 0, &attr, &b);
	TH_CHECK_MSG(err == ZAP_ENOTAVAIL, "zap_pick = %d (%s)", err, zap_strerror(err));
	TH_CHECK(b == NULL);
	TH_CHECK_HAS(zap_last_error(), "default: open failed: cannot listen");
	TH_CHECK_MSG(!strstr(zap_last_error(), "default: open failed: default"),
		     "reason repeats itself: %s", zap_last_error());
	err = zap_pick("=default", 0, &attr, &b);
	TH_CHECK_INT(err, -EADDRINUSE);
	TH_CHECK_INT(th_log_count(ZAP_LOG_ERROR, NULL, ""), 0);
	zap_close(a);
}

/* Failures the caller gets back are not also logged (strict, exclusions). */
PICK_TEST(strict_silent)
{
	struct zap_transport *t = NULL;

	pick_env(arg, true);
	TH_CHECK_INT(zap_pick("=absent", 0, NULL, &t), ZAP_ENOTAVAIL);
	TH_CHECK_INT(zap_pick("=godo", 0, NULL, &t), -EINVAL);
	TH_CHECK_INT(zap_pick("^top,better,good,default", 0, NULL, &t), ZAP_ENOTAVAIL);
	TH_CHECK_INT(pick_warns(""), 0);
	TH_CHECK_INT(th_log_count(ZAP_LOG_ERROR, NULL, ""), 0);
}

/* An unknown name is a fallback for zap_pick_explain() (zap-info). */
PICK_TEST(explain_unknown)
{
	struct zap_choice c = { .size = sizeof(c) };

	pick_env(arg, true);
	TH_CHECK_INT(zap_pick_explain("gpudirekt", 0, &c), 0);
	TH_CHECK_STR(c.name, "top");
	TH_CHECK(c.fallback);
	TH_CHECK_HAS(c.reason, "unknown transport 'gpudirekt'");
	TH_CHECK_PICK("gpudirekt", 0, "top");
	/* The unknown-name WARN says it; no second, fallback WARN. */
	TH_CHECK_INT(pick_warns(""), 1);
}

/* "tcp" is a documented alias of default, in every spelling of a name. */
PICK_TEST(tcp_alias)
{
	struct zap_choice c = { .size = sizeof(c) };

	pick_env(arg, true);
	TH_CHECK_PICK("tcp", 0, "default");
	TH_CHECK_PICK("=TCP", 0, "default");
	TH_CHECK_PICK(" tcp ", ZAP_PICK_STRICT, "default");
	TH_CHECK_INT(zap_pick_explain("tcp", 0, &c), 0);
	TH_CHECK_STR(c.name, "default");
	TH_CHECK(!c.fallback);
	/* Excluded by its alias: auto among the rest. */
	TH_CHECK_PICK("^tcp,top", 0, "better");
	TH_CHECK_INT(pick_warns(""), 0);
}

/*
 * A transport this project ships whose package is not installed is known,
 * and "not available", whatever the preference: strict fails with
 * ZAP_ENOTAVAIL (not -EINVAL), and a plain request falls back below its
 * shipped rank with one WARN naming the package.
 */
PICK_TEST(shipped_not_installed)
{
	struct zap_transport *t = NULL;
	struct zap_choice c = { .size = sizeof(c) };

	pick_env(arg, true);
	TH_CHECK_INT(zap_pick("=dpdk", 0, NULL, &t), ZAP_ENOTAVAIL);
	TH_CHECK(t == NULL);
	TH_CHECK_HAS(zap_last_error(), "dpdk: not installed (install libzap-plugin-dpdk)");
	TH_CHECK_INT(zap_pick("gpudirect", ZAP_PICK_STRICT, NULL, &t), ZAP_ENOTAVAIL);
	TH_CHECK_INT(zap_pick_explain("uma", 0, &c), 0);
	TH_CHECK_STR(c.name, "top");
	TH_CHECK(c.fallback);
	TH_CHECK_HAS(c.reason, "install libzap-plugin-uma");
	TH_CHECK_PICK("dpdk", 0, "top");
	TH_CHECK_INT(pick_warns("install libzap-plugin-dpdk"), 1);
	TH_CHECK_INT(pick_warns("unknown transport"), 0);
	/* Excluding one that is not installed is no error. */
	TH_CHECK_PICK("=^dpdk", 0, "top");
}

/* A word for what a transport does is suggested by meaning. */
PICK_TEST(synonym_suggestion)
{
	struct zap_transport *t = NULL;

	pick_env(arg, true);
	TH_CHECK_INT(zap_pick("=sockets", 0, NULL, &t), -EINVAL);
	TH_CHECK_HAS(zap_last_error(), "unknown transport 'sockets' (did you mean 'default'?)");
	/* gpudirect is not registered here: no suggestion of it. */
	TH_CHECK_INT(zap_pick("=rdma", 0, NULL, &t), -EINVAL);
	TH_CHECK_MSG(!strstr(zap_last_error(), "gpudirect"), "%s", zap_last_error());
}

/* A typo suggestion never names a plugin that failed to load. */
static void child_typo_unloaded(void *arg)
{
	struct zap_transport *t = NULL;

	th_setenv("ZAP_PLUGIN_PATH", arg);
	th_capture_logs(true);
	TH_CHECK_PICK("bettr", 0, "good");
	TH_CHECK_INT(pick_warns("did you mean 'better'"), 0);
	TH_CHECK_INT(pick_warns("unknown transport 'bettr'"), 1);
	TH_CHECK_INT(zap_pick("=bettr", 0, NULL, &t), -EINVAL);
	TH_CHECK_MSG(!strstr(zap_last_error(), "better"), "%s", zap_last_error());
	TH_CHECK_INT(zap_pick("=goo", 0, NULL, &t), -EINVAL);
	TH_CHECK_HAS(zap_last_error(), "did you mean 'good'");
}

static void test_typo_unloaded(void **state)
{
	const char *dir = th_tmpdir();

	(void)state;
	th_fixture(dir, "good", NULL);
	th_fixture(dir, "nosym", "libzap-better.so");
	th_child(child_typo_unloaded, (void *)dir, TIMEOUT_MS);
}

/* Bad environment values: -EINVAL naming the variable. */
struct bad_env {
	const char *name, *value;
};

static const struct bad_env bad_envs[] = {
	{ "ZAP_TRANSPORT", "dp dk!" },
	{ "ZAP_TRANSPORT_QUIET", "maybe" },
	{ "ZAP_LOG_LEVEL", "loud" },
	{ "ZAP_MAX_MSG_BYTES", "abc" },
	{ "ZAP_LISTEN", "nonsense" },
	{ "ZAP_SEND_TIMEOUT_MS", "soon" },
	{ "ZAP_SEND_TIMEOUT_MS", "-5" },
};

static const struct bad_env *cur_bad_env;

static void child_bad_env(void *arg)
{
	const struct bad_env *b = cur_bad_env;
	struct zap_transport *t = NULL;
	int err;

	pick_env(arg, true);
	th_setenv(b->name, b->value);
	err = zap_pick(NULL, 0, NULL, &t);
	TH_CHECK_MSG(err == -EINVAL, "%s=\"%s\": zap_pick() = %d (%s)",
		     b->name, b->value, err, zap_strerror(err));
	TH_CHECK(t == NULL);
	TH_CHECK_HAS(zap_last_error(), b->name);
	TH_CHECK_HAS(zap_strerror(err), b->name);
}

static void test_bad_env(void **state)
{
	cur_bad_env = *state;
	run(child_bad_env);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_auto_rank),
		cmocka_unit_test(test_by_name),
		cmocka_unit_test(test_new_instance),
		cmocka_unit_test(test_fallback),
		cmocka_unit_test(test_fallback_stderr),
		cmocka_unit_test(test_strict),
		cmocka_unit_test(test_list),
		cmocka_unit_test(test_exclude),
		cmocka_unit_test(test_unknown),
		cmocka_unit_test(test_unknown_strict),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_env_once),
		cmocka_unit_test(test_env_strict),
		cmocka_unit_test(test_env_fallback),
		cmocka_unit_test(test_info_line),
		cmocka_unit_test(test_info_line_stderr),
		cmocka_unit_test(test_explain_silent),
		cmocka_unit_test(test_quiet),
		cmocka_unit_test(test_quiet_zero),
		cmocka_unit_test(test_quiet_spellings),
		cmocka_unit_test(test_level_error),
		cmocka_unit_test(test_level_debug),
		cmocka_unit_test(test_registered),
		cmocka_unit_test(test_info_line_short),
		cmocka_unit_test(test_open_fail_fallback),
		cmocka_unit_test(test_open_fail_auto),
		cmocka_unit_test(test_open_fail_none),
		cmocka_unit_test(test_default_addr_in_use),
		cmocka_unit_test(test_strict_silent),
		cmocka_unit_test(test_explain_unknown),
		cmocka_unit_test(test_typo_unloaded),
		cmocka_unit_test(test_tcp_alias),
		cmocka_unit_test(test_shipped_not_installed),
		cmocka_unit_test(test_synonym_suggestion),
		cmocka_unit_test_prestate(test_bad_env, (void *)&bad_envs[0]),
		cmocka_unit_test_prestate(test_bad_env, (void *)&bad_envs[1]),
		cmocka_unit_test_prestate(test_bad_env, (void *)&bad_envs[2]),
		cmocka_unit_test_prestate(test_bad_env, (void *)&bad_envs[3]),
		cmocka_unit_test_prestate(test_bad_env, (void *)&bad_envs[4]),
		cmocka_unit_test_prestate(test_bad_env, (void *)&bad_envs[5]),
		cmocka_unit_test_prestate(test_bad_env, (void *)&bad_envs[6]),
	};

	return cmocka_run_group_tests_name("pick", tests, th_group_setup,
					   th_group_teardown);
}
