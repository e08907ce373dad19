/* SPDX-License-Identifier: MIT */
/*
 * Loader suite: how the plugin host scans, checks, loads and reports
 * plugins. Every case builds a fresh plugin directory from the fixtures in
 * tests/plugins/ and runs libzap in a forked child with ZAP_PLUGIN_PATH
 * pointing only there (see harness.h), so nothing reads the system plugin
 * directory and every scan starts from a clean process.
 *
 * `test-loader uid` runs the cases that need to chown files to another
 * user; it exits 77 with the reason when not running as root.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "zap-test.h"

#ifndef BUILD_ROOT
#error "BUILD_ROOT must be defined"
#endif

#define OTHER_UID 12345
#define TIMEOUT_MS 20000

struct scene {
	const char *dir;     /* ZAP_PLUGIN_PATH */
	const char *dir2;    /* optional second component */
	const char *probe_log;
	const void *arg;
};

/* Child preamble: point the host at the scenario's directories only. */
static void scene_env(const struct scene *s)
{
	char path[2 * PATH_MAX + 2];

	if (s->dir2)
		snprintf(path, sizeof(path), "%s:%s", s->dir, s->dir2);
	else
		snprintf(path, sizeof(path), "%s", s->dir);
	th_setenv("ZAP_PLUGIN_PATH", path);
	if (s->probe_log)
		th_setenv("ZAP_FIXTURE_PROBE_LOG", s->probe_log);
}

static const char *probe_log_path(const char *dir)
{
	static char buf[PATH_MAX];

	/* Beside, not inside, the plugin directory: it must stay clean. */
	snprintf(buf, sizeof(buf), "%s.probes", dir);
	return buf;
}

static int registered_has(const char *name)
{
	const char *const *names = NULL;
	int i, n = zap_registered(&names);

	for (i = 0; i < n; i++)
		if (!strcmp(names[i], name))
			return 1;
	return 0;
}

/* The built-in default row: always first, always loaded. */
static void check_default_row(void)
{
	struct zap_report_entry e = { .size = sizeof(e) };
	int err;

	TH_CHECK(zap_report_count() >= 1);
	err = zap_report_get(0, &e);
	TH_CHECK_INT(err, 0);
	TH_CHECK_STR(e.name, "default");
	TH_CHECK_STR(e.path, "(built-in)");
	TH_CHECK(e.builtin);
	TH_CHECK_INT(e.rank, 0);
	TH_CHECK_MSG(e.state == ZAP_PLUGIN_LOADED, "default is %s: %s",
		     zap_plugin_state_name(e.state), e.reason);
}

/* ---- a good plugin ----------------------------------------------------- */

static void child_good(void *arg)
{
	const struct scene *s = arg;
	struct zap_report_entry e;
	struct zap_transport *t = NULL;
	struct zap_caps caps = { .size = sizeof(caps) };
	char want[PATH_MAX];
	int err;

	scene_env(s);
	th_capture_logs(false);
	check_default_row();
	TH_CHECK_INT(zap_report_count(), 2);
	TH_CHECK_ROW("good", NULL, ZAP_PLUGIN_LOADED, NULL, &e);
	TH_CHECK_STR(e.reason, "");
	TH_CHECK_STR(e.path, th_join(want, sizeof(want), s->dir,
				     "libzap-good.so"));
	TH_CHECK_STR(e.version, "1.0");
	TH_CHECK_INT(e.rank, 50);
	TH_CHECK(!e.builtin);
	TH_CHECK(e.caps.zero_copy);
	TH_CHECK_INT(e.caps.max_msg_size, 1u << 20);
	TH_CHECK_HAS(e.detail, "fixture good detail: line two");
	TH_CHECK(registered_has("good"));
	TH_CHECK(registered_has("default"));

	err = zap_pick("good", 0, NULL, &t);
	TH_CHECK_MSG(err == 0, "zap_pick(good): %s", zap_strerror(err));
	TH_CHECK_STR(zap_transport_name(t), "good");
	TH_CHECK_INT(zap_caps(t, &caps), 0);
	TH_CHECK(caps.zero_copy);
	th_loopback(t);
	zap_close(t);
	/* A good plugin loads quietly: nothing at all on stderr at WARN
	 * except the one first-pick INFO line. */
	TH_CHECK_INT(th_count_lines(th_logs(), "zap: "), 1);
	TH_CHECK_INT(th_count_lines(th_logs(), "zap: INFO: pick: "), 1);
	TH_CHECK_INT(th_count_lines(th_logs(), "WARN"), 0);
	TH_CHECK_INT(th_probe_count(s->probe_log, "good"), 1);
}

static void test_good(void **state)
{
	struct scene s = { .dir = th_tmpdir() };

	(void)state;
	s.probe_log = probe_log_path(s.dir);
	th_fixture(s.dir, "good", NULL);
	th_child(child_good, &s, TIMEOUT_MS);
}

/* ---- two good plugins: auto picks the higher rank ---------------------- */

static void child_ranks(void *arg)
{
	const struct scene *s = arg;
	const char *const *names = NULL;

	scene_env(s);
	th_capture_logs(true);
	TH_CHECK_ROW("good", NULL, ZAP_PLUGIN_LOADED, NULL, NULL);
	TH_CHECK_ROW("better", NULL, ZAP_PLUGIN_LOADED, NULL, NULL);
	TH_CHECK_PICK(NULL, 0, "better");
	TH_CHECK_PICK("auto", 0, "better");
	TH_CHECK_INT(zap_registered(&names), 3);
	TH_CHECK_STR(names[0], "better");
	TH_CHECK_STR(names[1], "good");
	TH_CHECK_STR(names[2], "default");
	TH_CHECK(names[3] == NULL);
}

static void test_ranks(void **state)
{
	struct scene s = { .dir = th_tmpdir() };

	(void)state;
	th_fixture(s.dir, "good", NULL);
	th_fixture(s.dir, "better", NULL);
	th_child(child_ranks, &s, TIMEOUT_MS);
}

/* ---- plugins the host must reject before running any of their code ---- */

struct bad_case {
	const char *fixture;        /* NULL: junk text file */
	const char *file;           /* file name in the plugin dir */
	enum zap_plugin_state state;
	const char *reason;         /* substring; "" for any non-empty */
};

static const struct bad_case bad_cases[] = {
	{ "abi2", "libzap-abi2.so", ZAP_PLUGIN_ABI_MISMATCH,
	  "ABI major 2 (host supports 1)" },
	{ "abi2sym", "libzap-abi2sym.so", ZAP_PLUGIN_ABI_MISMATCH,
	  "ABI major 2 (host supports 1)" },
	{ "shortdesc", "libzap-shortdesc.so", ZAP_PLUGIN_INVALID,
	  "descriptor too short" },
	{ "shortops", "libzap-shortops.so", ZAP_PLUGIN_INVALID,
	  "ops table too short" },
	{ "norecv", "libzap-norecv.so", ZAP_PLUGIN_INVALID,
	  "mandatory op 'recv' missing" },
	{ "nosym", "libzap-nosym.so", ZAP_PLUGIN_NO_SYMBOL,
	  "no symbol zap_plugin_v1" },
	{ "misnamed", "libzap-misnamed.so", ZAP_PLUGIN_INVALID,
	  "name 'other' does not match file name" },
	{ NULL, "libzap-junk.so", ZAP_PLUGIN_DLOPEN_FAILED, "" },
};

static void child_bad(void *arg)
{
	const struct scene *s = arg;
	const struct bad_case *c = s->arg;
	struct zap_report_entry e;
	char warn[128];
	const char *stem;

	scene_env(s);
	th_capture_logs(false);
	check_default_row();
	TH_CHECK_ROW(NULL, c->file, c->state, c->reason, &e);
	TH_CHECK_MSG(e.reason[0], "empty reason for %s", c->file);
	TH_CHECK(!e.builtin);
	/* Rejected before any plugin code ran: never probed, not offered. */
	TH_CHECK_INT(th_probe_count(s->probe_log, c->fixture ? c->fixture
							      : "junk"), 0);
	TH_CHECK_INT(th_probe_count(s->probe_log, "other"), 0);
	stem = c->fixture ? c->fixture : "junk";
	TH_CHECK_MSG(!registered_has(stem), "%s is registered", stem);
	TH_CHECK(!registered_has("other"));
	/* ...while the good plugin beside it still works. */
	TH_CHECK_ROW("good", NULL, ZAP_PLUGIN_LOADED, NULL, NULL);
	TH_CHECK_PICK(NULL, 0, "good");
	/* One WARN naming the file. */
	snprintf(warn, sizeof(warn), "%s", c->file);
	TH_CHECK_MSG(th_count_lines(th_logs(), "zap: WARN: ") >= 1 &&
			     strstr(th_logs(), warn),
		     "no WARN naming %s", warn);
}

static void test_bad(void **state)
{
	const struct bad_case *c = *state;
	struct scene s = { .dir = th_tmpdir(), .arg = c };

	s.probe_log = probe_log_path(s.dir);
	if (c->fixture)
		th_fixture(s.dir, c->fixture, NULL);
	else
		th_write(s.dir, c->file, "this is not an ELF file\n", 0755);
	th_fixture(s.dir, "good", NULL);
	th_child(child_bad, &s, TIMEOUT_MS);
}

/* ---- probe NOT_PRESENT: reported, quiet -------------------------------- */

static void child_absent(void *arg)
{
	const struct scene *s = arg;
	struct zap_report_entry e;

	scene_env(s);
	th_capture_logs(false);
	TH_CHECK_ROW("absent", NULL, ZAP_PLUGIN_NOT_PRESENT,
		     "fixture absent: hardware absent", &e);
	TH_CHECK_STR(e.reason, "fixture absent: hardware absent");
	TH_CHECK_INT(e.rank, 70);
	TH_CHECK_STR(e.version, "1.0");
	TH_CHECK(registered_has("absent"));
	TH_CHECK_PICK(NULL, 0, "default");
	/* Quiet at the default level: only the first-pick INFO line. */
	TH_CHECK_INT(th_count_lines(th_logs(), "zap: "), 1);
	TH_CHECK_INT(th_count_lines(th_logs(), "zap: INFO: pick: "), 1);
}

static void test_absent(void **state)
{
	struct scene s = { .dir = th_tmpdir() };

	(void)state;
	th_fixture(s.dir, "absent", NULL);
	th_child(child_absent, &s, TIMEOUT_MS);
}

/* ---- probe ERROR: reported, loud --------------------------------------- */

static void child_broken(void *arg)
{
	const struct scene *s = arg;
	struct zap_report_entry e;
	const char *logs;

	scene_env(s);
	th_capture_logs(false);
	TH_CHECK_ROW("broken", NULL, ZAP_PLUGIN_ERROR,
		     "fixture broken: device wedged", &e);
	TH_CHECK_STR(e.reason, "fixture broken: device wedged");
	TH_CHECK(registered_has("broken"));
	TH_CHECK_PICK(NULL, 0, "default");
	logs = th_logs();
	TH_CHECK_MSG(th_count_lines(logs, "zap: WARN: ") >= 1,
		     "no WARN for the probe error");
	TH_CHECK_MSG(th_count_lines(logs, "fixture broken: device wedged") >= 1,
		     "the WARN does not give the reason");
	/* The plugin's own DEBUG line stays hidden at the default level. */
	TH_CHECK_INT(th_count_lines(logs, "probe about to fail"), 0);
}

static void test_broken(void **state)
{
	struct scene s = { .dir = th_tmpdir() };

	(void)state;
	th_fixture(s.dir, "broken", NULL);
	th_child(child_broken, &s, TIMEOUT_MS);
}

/* ...and with ZAP_LOG_LEVEL=debug the plugin's log line comes through the
 * host, with the plugin's name as its domain. */
static void child_plugin_log(void *arg)
{
	scene_env(arg);
	th_setenv("ZAP_LOG_LEVEL", "debug");
	th_capture_logs(true);
	TH_CHECK(zap_report_count() >= 2);
	TH_CHECK_INT(th_log_count(ZAP_LOG_DEBUG, "broken",
				  "probe about to fail"), 1);
}

static void test_plugin_log(void **state)
{
	struct scene s = { .dir = th_tmpdir() };

	(void)state;
	th_fixture(s.dir, "broken", NULL);
	th_child(child_plugin_log, &s, TIMEOUT_MS);
}

/* ---- same name in two directories: first wins ------------------------- */

static void child_shadow(void *arg)
{
	const struct scene *s = arg;
	struct zap_report_entry e;
	char first[PATH_MAX], second[PATH_MAX], why[PATH_MAX + 32];
	int i1, i2;

	scene_env(s);
	th_capture_logs(true);
	th_join(first, sizeof(first), s->dir, "libzap-good.so");
	th_join(second, sizeof(second), s->dir2, "libzap-good.so");
	TH_CHECK_ROW("good", first, ZAP_PLUGIN_LOADED, NULL, NULL);
	snprintf(why, sizeof(why), "shadowed by %s", first);
	TH_CHECK_ROW("good", second, ZAP_PLUGIN_SHADOWED, why, &e);
	i1 = th_row("good", first, NULL);
	i2 = th_row("good", second, NULL);
	TH_CHECK_MSG(i1 < i2, "rows out of search order (%d, %d)", i1, i2);
	TH_CHECK_INT(th_probe_count(s->probe_log, "good"), 1);
	TH_CHECK_PICK("good", 0, "good");
}

static void test_shadow(void **state)
{
	struct scene s = { .dir = th_tmpdir() };

	(void)state;
	s.dir2 = th_tmpdir();
	s.probe_log = probe_log_path(s.dir);
	th_fixture(s.dir, "good", NULL);
	th_fixture(s.dir2, "good", NULL);
	th_child(child_shadow, &s, TIMEOUT_MS);
}

/* A file named like the built-in default is shadowed by it, unopened. */
static void child_shadow_default(void *arg)
{
	const struct scene *s = arg;

	scene_env(s);
	th_capture_logs(true);
	check_default_row();
	TH_CHECK_ROW("default", "libzap-default.so", ZAP_PLUGIN_SHADOWED,
		     "shadowed by", NULL);
	TH_CHECK_INT(th_probe_count(s->probe_log, "good"), 0);
	TH_CHECK_PICK("default", ZAP_PICK_STRICT, "default");
}

static void test_shadow_default(void **state)
{
	struct scene s = { .dir = th_tmpdir() };

	(void)state;
	s.probe_log = probe_log_path(s.dir);
	th_fixture(s.dir, "good", "libzap-default.so");
	th_child(child_shadow_default, &s, TIMEOUT_MS);
}

/* ---- unsafe directories and files -------------------------------------- */

static void check_dir_status(const char *path, const char *status_part)
{
	int i, n = zap_report_dir_count();

	for (i = 0; i < n; i++) {
		struct zap_dir_entry d = { .size = sizeof(d) };

		TH_CHECK_INT(zap_report_dir_get((size_t)i, &d), 0);
		if (strcmp(d.path, path) != 0)
			continue;
		/* "refused: <why>": the why may carry more words than the
		 * part checked ("directory owned by uid N (...)"). */
		if (!strncmp(status_part, "refused: ", 9)) {
			TH_CHECK_MSG(!strncmp(d.status, "refused: ", 9),
				     "status of %s is \"%s\", expected "
				     "\"refused: ...\"", path, d.status);
			status_part += 9;
		}
		TH_CHECK_HAS(d.status, status_part);
		TH_CHECK_STR(d.source, "ZAP_PLUGIN_PATH");
		return;
	}
	th_fail(__FILE__, __LINE__, "directory %s not in the report", path);
}

static void child_refused_dir(void *arg)
{
	const struct scene *s = arg;
	const char *why = s->arg;

	scene_env(s);
	th_capture_logs(false);
	check_dir_status(s->dir, why);
	/* Its files are not candidates at all... */
	TH_CHECK_MSG(th_row("good", NULL, NULL) < 0,
		     "a plugin from a refused directory is in the report");
	TH_CHECK_INT(th_probe_count(s->probe_log, "good"), 0);
	/* ...the next directory is still searched... */
	check_dir_status(s->dir2, "ok");
	TH_CHECK_ROW("better", NULL, ZAP_PLUGIN_LOADED, NULL, NULL);
	TH_CHECK_PICK(NULL, 0, "better");
	/* ...and the refusal is logged. */
	TH_CHECK_MSG(th_count_lines(th_logs(), "zap: WARN: ") >= 1,
		     "refused directory not logged");
}

static void test_world_writable_dir(void **state)
{
	struct scene s = { .dir = th_tmpdir(), .arg = "refused: world-writable" };

	(void)state;
	s.dir2 = th_tmpdir();
	s.probe_log = probe_log_path(s.dir);
	th_fixture(s.dir, "good", NULL);
	th_fixture(s.dir2, "better", NULL);
	assert_int_equal(chmod(s.dir, 0777), 0);
	th_child(child_refused_dir, &s, TIMEOUT_MS);
}

static void test_other_uid_dir(void **state)
{
	struct scene s = { .dir = th_tmpdir() };

	(void)state;
	s.dir2 = th_tmpdir();
	s.arg = "refused: owned by uid " TH_STR(OTHER_UID);
	/* (matched as "refused: " + "...owned by uid N...") */
	s.probe_log = probe_log_path(s.dir);
	th_fixture(s.dir, "good", NULL);
	th_fixture(s.dir2, "better", NULL);
	assert_int_equal(chown(s.dir, OTHER_UID, OTHER_UID), 0);
	th_child(child_refused_dir, &s, TIMEOUT_MS);
}

struct refused_case {
	const char *file;
	const char *reason;
};

static void child_refused_file(void *arg)
{
	const struct scene *s = arg;
	const struct refused_case *c = s->arg;

	scene_env(s);
	th_capture_logs(false);
	check_dir_status(s->dir, "ok");
	TH_CHECK_ROW(NULL, c->file, ZAP_PLUGIN_REFUSED, c->reason, NULL);
	TH_CHECK_INT(th_probe_count(s->probe_log, "good"), 0);
	TH_CHECK_INT(th_probe_count(s->probe_log, "better"), 1);
	TH_CHECK_PICK(NULL, 0, "better");
	TH_CHECK_MSG(th_count_lines(th_logs(), "zap: WARN: ") >= 1 &&
			     strstr(th_logs(), c->file),
		     "no WARN naming %s", c->file);
}

static void run_refused_file(const struct refused_case *c, const char *dir)
{
	struct scene s = { .dir = dir, .arg = c };

	s.probe_log = probe_log_path(s.dir);
	th_fixture(s.dir, "better", NULL);
	th_child(child_refused_file, &s, TIMEOUT_MS);
}

static void test_world_writable_file(void **state)
{
	static const struct refused_case c = { "libzap-good.so",
					       "world-writable file" };
	const char *dir = th_tmpdir();

	(void)state;
	assert_int_equal(chmod(th_fixture(dir, "good", NULL), 0757), 0);
	run_refused_file(&c, dir);
}

static void test_other_uid_file(void **state)
{
	static const struct refused_case c = {
		"libzap-good.so", "owned by uid " TH_STR(OTHER_UID) };
	const char *dir = th_tmpdir();

	(void)state;
	assert_int_equal(chown(th_fixture(dir, "good", NULL), OTHER_UID,
			       OTHER_UID), 0);
	run_refused_file(&c, dir);
}

/*
 * Policy: a symbolic link is refused, never followed, even when it points
 * at a good plugin: plugins must be regular files in the directory, so
 * what the directory's owner and mode vouch for is what gets loaded.
 */
static void test_symlink(void **state)
{
	static const struct refused_case c = { "libzap-good.so",
					       "symbolic link" };
	const char *dir = th_tmpdir();
	const char *elsewhere = th_tmpdir();
	char target[PATH_MAX], link[PATH_MAX];

	(void)state;
	snprintf(target, sizeof(target), "%s",
		 th_fixture(elsewhere, "good", NULL));
	th_join(link, sizeof(link), dir, "libzap-good.so");
	assert_int_equal(symlink(target, link), 0);
	run_refused_file(&c, dir);
}

static void test_not_regular_dir(void **state)
{
	static const struct refused_case c = { "libzap-good.so",
					       "not a regular file" };
	const char *dir = th_tmpdir();
	char path[PATH_MAX];

	(void)state;
	assert_int_equal(mkdir(th_join(path, sizeof(path), dir,
				       "libzap-good.so"), 0755), 0);
	run_refused_file(&c, dir);
}

/* A FIFO must be refused without blocking in open(). */
static void test_not_regular_fifo(void **state)
{
	static const struct refused_case c = { "libzap-good.so",
					       "not a regular file" };
	const char *dir = th_tmpdir();
	char path[PATH_MAX];

	(void)state;
	assert_int_equal(mkfifo(th_join(path, sizeof(path), dir,
					"libzap-good.so"), 0644), 0);
	run_refused_file(&c, dir);
}

/* ---- names that are not candidates ------------------------------------- */

static const char *const ignored_names[] = {
	"libzap-Bad.so", "libzap-a.so.1", "libzap-.so", "libzap-x-y.so",
	"libzap-good.so.bak", "zap-good.so", "libzap-good.SO", "libzap-good",
	NULL,
};

static void child_ignored(void *arg)
{
	const struct scene *s = arg;

	scene_env(s);
	th_capture_logs(false);
	check_default_row();
	TH_CHECK_MSG(zap_report_count() == 1, "ignored files are in the "
		     "report (%d rows)", zap_report_count());
	TH_CHECK_INT(th_probe_count(s->probe_log, "good"), 0);
	TH_CHECK_PICK(NULL, 0, "default");
	/* Ignoring is not worth a warning. */
	TH_CHECK_INT(th_count_lines(th_logs(), "zap: WARN: "), 0);
}

static void test_ignored(void **state)
{
	struct scene s = { .dir = th_tmpdir() };
	int i;

	(void)state;
	s.probe_log = probe_log_path(s.dir);
	for (i = 0; ignored_names[i]; i++)
		th_fixture(s.dir, "good", ignored_names[i]);
	th_child(child_ignored, &s, TIMEOUT_MS);
}

/* ---- empty and missing directories: default still picked -------------- */

static void child_only_default(void *arg)
{
	const struct scene *s = arg;
	const char *const *names = NULL;
	struct zap_choice c = { .size = sizeof(c) };

	scene_env(s);
	th_capture_logs(true);
	check_dir_status(s->dir, s->arg);
	check_default_row();
	TH_CHECK_INT(zap_report_count(), 1);
	TH_CHECK_INT(zap_registered(&names), 1);
	TH_CHECK_STR(names[0], "default");
	TH_CHECK_INT(zap_pick_explain(NULL, 0, &c), 0);
	TH_CHECK_STR(c.name, "default");
	TH_CHECK(!c.fallback);
	TH_CHECK_PICK(NULL, 0, "default");
	TH_CHECK_PICK("=default", 0, "default");
}

static void test_empty_dir(void **state)
{
	struct scene s = { .dir = th_tmpdir(), .arg = "ok" };

	(void)state;
	th_child(child_only_default, &s, TIMEOUT_MS);
}

static void test_missing_dir(void **state)
{
	char missing[PATH_MAX];
	struct scene s = { .arg = "missing" };

	(void)state;
	th_join(missing, sizeof(missing), th_tmpdir(), "no-such-dir");
	s.dir = missing;
	th_child(child_only_default, &s, TIMEOUT_MS);
}

/* ---- the directory list ------------------------------------------------ */

static void child_dirs(void *arg)
{
	const struct scene *s = arg;
	struct zap_dir_entry d = { .size = sizeof(d) };
	int n;

	scene_env(s);
	if (s->arg)
		th_setenv("ZAP_PLUGIN_DIR", (const char *)s->arg);
	else
		unsetenv("ZAP_PLUGIN_DIR");
	n = zap_report_dir_count();
	TH_CHECK_MSG(n == 3, "%d directories, expected 2 + one in place of "
		     "the built-in one", n);
	TH_CHECK_INT(zap_report_dir_get(0, &d), 0);
	TH_CHECK_STR(d.path, s->dir);
	TH_CHECK_STR(d.source, "ZAP_PLUGIN_PATH");
	TH_CHECK_STR(d.status, "ok");
	TH_CHECK_INT(zap_report_dir_get(1, &d), 0);
	TH_CHECK_STR(d.path, s->dir2);
	TH_CHECK_STR(d.source, "ZAP_PLUGIN_PATH");
	/* The compiled-in directory, or ZAP_PLUGIN_DIR's, comes last. */
	TH_CHECK_INT(zap_report_dir_get((size_t)n - 1, &d), 0);
	if (s->arg) {
		TH_CHECK_STR(d.path, (const char *)s->arg);
		TH_CHECK_STR(d.source, "ZAP_PLUGIN_DIR");
	} else {
		TH_CHECK_STR(d.source, "built-in");
		TH_CHECK_HAS(d.path, "zap-1");
	}
	TH_CHECK_INT(zap_report_dir_get((size_t)n, &d), -ERANGE);
	TH_CHECK_INT(zap_report_get(1000, &(struct zap_report_entry){
			     .size = sizeof(struct zap_report_entry) }),
		     -ERANGE);
}

static void test_dirs(void **state)
{
	struct scene s = { .dir = th_tmpdir() };

	(void)state;
	s.dir2 = th_tmpdir();
	/* ZAP_PLUGIN_DIR in place of the built-in directory... */
	s.arg = th_tmpdir();
	th_child(child_dirs, &s, TIMEOUT_MS);
	/* ...and unset, the built-in one (only its row is checked: what is
	 * installed on this host must not matter). */
	s.arg = NULL;
	th_child(child_dirs, &s, TIMEOUT_MS);
}

/* ZAP_PLUGIN_DIR set and empty (the harness's default): nothing after
 * ZAP_PLUGIN_PATH, so plugins installed on this host never show up. */
static void child_no_system_dir(void *arg)
{
	const struct scene *s = arg;
	struct zap_dir_entry d = { .size = sizeof(d) };

	scene_env(s);
	TH_CHECK_STR(getenv("ZAP_PLUGIN_DIR"), "");
	TH_CHECK_INT(zap_report_dir_count(), 1);
	TH_CHECK_INT(zap_report_dir_get(0, &d), 0);
	TH_CHECK_STR(d.source, "ZAP_PLUGIN_PATH");
	TH_CHECK_ROW("good", NULL, ZAP_PLUGIN_LOADED, NULL, NULL);
	TH_CHECK_INT(zap_report_count(), 2);
}

static void test_no_system_dir(void **state)
{
	static const char *const f[] = { "good", NULL };
	struct scene s = { .dir = th_fixture_dir(f) };

	(void)state;
	th_child(child_no_system_dir, &s, TIMEOUT_MS);
}

/* ---- scan and probe run once per process ------------------------------- */

static void child_once(void *arg)
{
	const struct scene *s = arg;
	const char *const *names = NULL;
	struct zap_choice c = { .size = sizeof(c) };
	struct zap_scan_attr sa = { .size = sizeof(sa) };
	static const char *const all[] = { "good", "better", "absent",
					   "broken", NULL };
	int i;

	scene_env(s);
	th_capture_logs(true);
	TH_CHECK(zap_report_count() >= 5);
	TH_CHECK_PICK(NULL, 0, "better");
	TH_CHECK_PICK("good", 0, "good");
	TH_CHECK(zap_registered(&names) == 5);
	TH_CHECK_INT(zap_pick_explain("absent", 0, &c), 0);
	TH_CHECK_INT(zap_scan(&sa), -EALREADY);
	for (i = 0; all[i]; i++)
		TH_CHECK_MSG(th_probe_count(s->probe_log, all[i]) == 1,
			     "%s probed %d times", all[i],
			     th_probe_count(s->probe_log, all[i]));
}

static void test_once(void **state)
{
	struct scene s = { .dir = th_tmpdir() };

	(void)state;
	s.probe_log = probe_log_path(s.dir);
	th_fixture(s.dir, "good", NULL);
	th_fixture(s.dir, "better", NULL);
	th_fixture(s.dir, "absent", NULL);
	th_fixture(s.dir, "broken", NULL);
	th_child(child_once, &s, TIMEOUT_MS);
}

/* ---- isolated scan: crash and hang are reported ------------------------ */

static int mapped(const char *needle)
{
	char *maps = th_slurp("/proc/self/maps");
	int found = maps && strstr(maps, needle) != NULL;

	free(maps);
	return found;
}

/* The crash with a limit far above any start-up (a crash is a crash at
 * any load); the hang alone in a scan of its own (child_isolate_hang). */
static void child_isolate(void *arg)
{
	const struct scene *s = arg;
	struct zap_scan_attr sa = { .size = sizeof(sa),
				    .flags = ZAP_SCAN_ISOLATE,
				    .probe_timeout_ms = zt_timeout_ms(TH_PROBE_LIMIT_MS) };
	struct zap_report_entry e;
	int err;

	scene_env(s);
	th_capture_logs(true);
	err = zap_scan(&sa);
	TH_CHECK_MSG(err == 0, "zap_scan(ISOLATE): %s", zap_strerror(err));
	check_default_row();
	TH_CHECK_ROW("crash", NULL, ZAP_PLUGIN_ERROR,
		     "probe crashed: signal 11", NULL);
	/* The children's findings come back whole. */
	TH_CHECK_ROW("good", NULL, ZAP_PLUGIN_LOADED, NULL, &e);
	TH_CHECK_STR(e.version, "1.0");
	TH_CHECK_INT(e.rank, 50);
	TH_CHECK(e.caps.zero_copy);
	TH_CHECK_INT(e.caps.max_msg_size, 1u << 20);
	TH_CHECK_ROW("absent", NULL, ZAP_PLUGIN_NOT_PRESENT,
		     "fixture absent: hardware absent", NULL);
	TH_CHECK_ROW(NULL, "libzap-abi2.so", ZAP_PLUGIN_ABI_MISMATCH,
		     "ABI major 2 (host supports 1)", NULL);
	TH_CHECK_INT(th_log_count(ZAP_LOG_WARN, NULL, "crash") +
			     th_log_count(ZAP_LOG_ERROR, NULL, "crash") >= 1,
		     1);
	/* This process loaded no plugin to probe them... */
	TH_CHECK_MSG(!mapped("libzap-good.so"), "libzap-good.so is mapped");
	TH_CHECK_MSG(!mapped("libzap-crash.so"), "libzap-crash.so is mapped");
	/* ...and a pick loads the one it chooses, and only that one. */
	TH_CHECK_PICK(NULL, 0, "good");
	TH_CHECK_MSG(mapped("libzap-good.so"), "libzap-good.so is not mapped");
	TH_CHECK_MSG(!mapped("libzap-absent.so"), "libzap-absent.so is mapped");
	TH_CHECK_MSG(!mapped("libzap-crash.so"), "libzap-crash.so is mapped");
	TH_CHECK_INT(zap_scan(&sa), -EALREADY);
}

/* A probe that never ends is killed at the limit, whatever the load. */
static void child_isolate_hang(void *arg)
{
	const struct scene *s = arg;
	struct zap_scan_attr sa = { .size = sizeof(sa),
				    .flags = ZAP_SCAN_ISOLATE,
				    .probe_timeout_ms = 300 };

	scene_env(s);
	th_capture_logs(true);
	TH_CHECK_INT(zap_scan(&sa), 0);
	check_default_row();
	TH_CHECK_ROW("hang", NULL, ZAP_PLUGIN_ERROR,
		     "probe timed out after 300 ms", NULL);
	TH_CHECK_MSG(!mapped("libzap-hang.so"), "libzap-hang.so is mapped");
	TH_CHECK_PICK(NULL, 0, "default");
}

static void test_isolate(void **state)
{
	struct scene s = { .dir = th_tmpdir() };

	(void)state;
	th_fixture(s.dir, "good", NULL);
	th_fixture(s.dir, "absent", NULL);
	th_fixture(s.dir, "abi2", NULL);
	th_fixture(s.dir, "crash", NULL);
	th_child(child_isolate, &s, TIMEOUT_MS);
	s.dir = th_tmpdir();
	th_fixture(s.dir, "hang", NULL);
	th_child(child_isolate_hang, &s, TIMEOUT_MS);
}

/* ---- every plugin built from plugins/ loads from the build tree -------- */

static void child_tree_plugin(void *arg)
{
	const struct scene *s = arg;
	const char *name = s->arg;
	struct zap_report_entry e;
	struct zap_transport *t = NULL;
	int err;

	scene_env(s);
	th_capture_logs(true);
	TH_CHECK_MSG(th_row(name, s->dir, &e) >= 0, "%s not in the report",
		     name);
	/* A probe that said ERROR found something broken: a failure here as
	 * in the hardware tests (tests/common/zap-test.h). */
	TH_CHECK_MSG(e.state == ZAP_PLUGIN_LOADED ||
			     e.state == ZAP_PLUGIN_NOT_PRESENT,
		     "%s did not load, or its probe failed: %s: %s", name,
		     zap_plugin_state_name(e.state), e.reason);
	TH_CHECK(registered_has(name));
	TH_CHECK(e.version[0]);
	err = zap_pick(name, ZAP_PICK_STRICT, NULL, &t);
	if (e.state == ZAP_PLUGIN_LOADED) {
		TH_CHECK_MSG(err == 0, "open %s: %s", name, zap_strerror(err));
		TH_CHECK_STR(zap_transport_name(t), name);
		zap_close(t);
	} else {
		/* Not usable here: strict pick says so, with the reason. */
		TH_CHECK_INT(err, ZAP_ENOTAVAIL);
		TH_CHECK_HAS(zap_strerror(err), e.reason);
	}
}

static void child_builtin_default(void *arg)
{
	struct zap_transport *t = NULL;
	int err;

	scene_env(arg);
	check_default_row();
	err = zap_pick("=default", 0, NULL, &t);
	TH_CHECK_MSG(err == 0, "open default: %s", zap_strerror(err));
	TH_CHECK_STR(zap_transport_name(t), "default");
	zap_close(t);
}

static void load_build_plugin(const char *dir, const char *path,
			      const char *name, void *arg)
{
	/* A copy in a private directory: the build tree's own directory is
	 * refused when a parent is group-writable (a tree `git archive |
	 * tar -x` made as root), rightly. */
	struct scene s = { .dir = th_private_copy(path), .arg = name };

	(void)arg;
	(void)dir;
	printf("# build-tree plugin %s\n", path);
	th_child(child_tree_plugin, &s, TIMEOUT_MS);
}

static void test_build_tree_plugins(void **state)
{
	struct scene s = { .dir = th_tmpdir() };
	int n;

	(void)state;
	n = th_each_build_plugin(load_build_plugin, NULL);
	printf("# %d plugin file(s) under %s/plugins, plus the built-in "
	       "default\n", n, BUILD_ROOT);
	/* The built-in default goes through the same ABI; open it for real. */
	th_child(child_builtin_default, &s, TIMEOUT_MS);
}

static int run_uid_group(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_other_uid_file),
		cmocka_unit_test(test_other_uid_dir),
	};

	if (geteuid() != 0) {
		printf("1..0 # SKIP chown to another uid needs root "
		       "(euid is %d)\n", (int)geteuid());
		fprintf(stderr, "skipped: chown to uid %d needs root\n",
			OTHER_UID);
		return 77;
	}
	return cmocka_run_group_tests_name("loader-uid", tests, th_group_setup,
					   th_group_teardown);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_good),
		cmocka_unit_test(test_ranks),
		cmocka_unit_test_prestate(test_bad, (void *)&bad_cases[0]),
		cmocka_unit_test_prestate(test_bad, (void *)&bad_cases[1]),
		cmocka_unit_test_prestate(test_bad, (void *)&bad_cases[2]),
		cmocka_unit_test_prestate(test_bad, (void *)&bad_cases[3]),
		cmocka_unit_test_prestate(test_bad, (void *)&bad_cases[4]),
		cmocka_unit_test_prestate(test_bad, (void *)&bad_cases[5]),
		cmocka_unit_test_prestate(test_bad, (void *)&bad_cases[6]),
		cmocka_unit_test_prestate(test_bad, (void *)&bad_cases[7]),
		cmocka_unit_test(test_absent),
		cmocka_unit_test(test_broken),
		cmocka_unit_test(test_plugin_log),
		cmocka_unit_test(test_shadow),
		cmocka_unit_test(test_shadow_default),
		cmocka_unit_test(test_world_writable_dir),
		cmocka_unit_test(test_world_writable_file),
		cmocka_unit_test(test_symlink),
		cmocka_unit_test(test_not_regular_dir),
		cmocka_unit_test(test_not_regular_fifo),
		cmocka_unit_test(test_ignored),
		cmocka_unit_test(test_empty_dir),
		cmocka_unit_test(test_missing_dir),
		cmocka_unit_test(test_dirs),
		cmocka_unit_test(test_no_system_dir),
		cmocka_unit_test(test_once),
		cmocka_unit_test(test_isolate),
		cmocka_unit_test(test_build_tree_plugins),
	};

	if (argc > 1 && !strcmp(argv[1], "uid"))
		return run_uid_group();
	return cmocka_run_group_tests_name("loader", tests, th_group_setup,
					   th_group_teardown);
}
