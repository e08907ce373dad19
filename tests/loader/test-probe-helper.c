/* SPDX-License-Identifier: MIT */
/*
 * Probe helper suite (issue 35, loader): the time limit at both ends of its
 * range, the helper checked as plugins are (its directory from "/", no
 * symbolic links, owners and modes) and run as the file checked, and the
 * application's descriptors closed in the helper whatever the C library.
 *
 * Every case runs in a forked child over a fresh fixture directory
 * (harness.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "probe-wire.h"

#ifndef PROBE_HELPER_PATH
#error "PROBE_HELPER_PATH must name the build tree's zap-probe"
#endif

#define TIMEOUT_MS 20000

struct scene {
	const char *dir;    /* the plugin directory */
	const char *helper; /* ZAP_PROBE_HELPER, or NULL: the build tree's */
	const char *want;   /* part of the reason expected */
};

/* ---- ZAP_PROBE_TIMEOUT_MS at both ends of its range -------------------- */

/* 4294967295 ms (the top of the documented range) once turned poll()'s
 * timeout negative: the scan then waited for a helper that had reported
 * and was exiting, on a pipe its probe's straggler holds for 30 s, or on
 * no descriptor at all, for ever. */
static void child_timeout_max(void *arg)
{
	const struct scene *s = arg;
	char pidfile[PATH_MAX];

	snprintf(pidfile, sizeof(pidfile), "%s.pid", s->dir);
	th_setenv("ZAP_PLUGIN_PATH", s->dir);
	th_setenv("ZAP_FIXTURE_PID_FILE", pidfile);
	th_setenv("ZAP_PROBE_TIMEOUT_MS", "4294967295");
	th_setenv("ZAP_TRANSPORT_QUIET", "1");
	TH_CHECK_ROW("spawner", NULL, ZAP_PLUGIN_LOADED, NULL, NULL);
	TH_CHECK_ROW("good", NULL, ZAP_PLUGIN_LOADED, NULL, NULL);
}

/* The same limit through zap_scan_attr. */
static void child_timeout_max_attr(void *arg)
{
	const struct scene *s = arg;
	struct zap_scan_attr sa = { .size = sizeof(sa), .probe_timeout_ms = UINT_MAX };

	th_setenv("ZAP_PLUGIN_PATH", s->dir);
	TH_CHECK_INT(zap_scan(&sa), 0);
	TH_CHECK_ROW("spawner", NULL, ZAP_PLUGIN_LOADED, NULL, NULL);
	TH_CHECK_ROW("good", NULL, ZAP_PLUGIN_LOADED, NULL, NULL);
}

static void test_timeout_max(void **state)
{
	static const char *const f[] = { "spawner", "good", NULL };
	struct scene s = { .dir = th_fixture_dir(f) };

	(void)state;
	/* The hang was a race the old code lost more often than not. */
	for (int i = 0; i < 4; i++) {
		th_child(child_timeout_max, &s, TIMEOUT_MS);
		th_child(child_timeout_max_attr, &s, TIMEOUT_MS);
	}
}

/* 0, the bottom: the default limit, 5000 ms. */
static void child_timeout_zero(void *arg)
{
	const struct scene *s = arg;

	th_setenv("ZAP_PLUGIN_PATH", s->dir);
	th_setenv("ZAP_PROBE_TIMEOUT_MS", "0");
	th_capture_logs(true);
	TH_CHECK_ROW("hang", NULL, ZAP_PLUGIN_ERROR, "probe timed out after 5000 ms", NULL);
	TH_CHECK_ROW("good", NULL, ZAP_PLUGIN_LOADED, NULL, NULL);
}

/* One past the top is an error naming the variable. */
static void child_timeout_over(void *arg)
{
	const struct scene *s = arg;
	struct zap_transport *t = NULL;
	int err;

	th_setenv("ZAP_PLUGIN_PATH", s->dir);
	th_setenv("ZAP_PROBE_TIMEOUT_MS", "4294967296");
	err = zap_pick(NULL, 0, NULL, &t);
	TH_CHECK_INT(err, -EINVAL);
	TH_CHECK_HAS(zap_strerror(err), "ZAP_PROBE_TIMEOUT_MS");
}

static void test_timeout_ends(void **state)
{
	static const char *const f[] = { "hang", "good", NULL };
	struct scene s = { .dir = th_fixture_dir(f) };

	(void)state;
	th_child(child_timeout_zero, &s, TIMEOUT_MS);
	th_child(child_timeout_over, &s, TIMEOUT_MS);
}

/* ---- the helper gets the plugins' rules --------------------------------- */

static void copy_helper(const char *dir, unsigned mode)
{
	char to[PATH_MAX], buf[65536];
	ssize_t n;
	int in, out;

	th_join(to, sizeof(to), dir, "zap-probe");
	in = open(PROBE_HELPER_PATH, O_RDONLY | O_CLOEXEC);
	out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	assert_true(in >= 0 && out >= 0);
	while ((n = read(in, buf, sizeof(buf))) > 0)
		assert_int_equal(write(out, buf, (size_t)n), n);
	assert_int_equal(n, 0);
	assert_int_equal(fchmod(out, mode), 0);
	close(in);
	close(out);
}

/* "good" with ZAP_PROBE_HELPER=s->helper: probed when s->want is NULL,
 * else not probed, for a reason containing s->want. */
static void child_helper(void *arg)
{
	const struct scene *s = arg;

	th_setenv("ZAP_PLUGIN_PATH", s->dir);
	th_setenv("ZAP_PROBE_HELPER", s->helper);
	th_setenv("ZAP_TRANSPORT_QUIET", "1");
	th_capture_logs(true);
	if (!s->want) {
		TH_CHECK_ROW("good", NULL, ZAP_PLUGIN_LOADED, NULL, NULL);
		TH_CHECK_PICK(NULL, 0, "good");
		return;
	}
	TH_CHECK_ROW("good", NULL, ZAP_PLUGIN_ERROR, "not probed: ", NULL);
	TH_CHECK_ROW("good", NULL, ZAP_PLUGIN_ERROR, s->want, NULL);
	TH_CHECK_PICK(NULL, 0, "default");
}

static void helper_case(const char *plugins, const char *helper, const char *want)
{
	struct scene s = { .dir = plugins, .helper = helper, .want = want };

	th_child(child_helper, &s, TIMEOUT_MS);
}

static void test_helper_rules(void **state)
{
	static const char *const f[] = { "good", NULL };
	const char *plugins = th_fixture_dir(f), *dir;
	char path[PATH_MAX], sub[PATH_MAX], link[PATH_MAX];

	(void)state;
	/* A copy in a safe directory runs: the rules refuse only the unsafe. */
	dir = th_tmpdir();
	copy_helper(dir, 0755);
	helper_case(plugins, th_join(path, sizeof(path), dir, "zap-probe"), NULL);

	/* The file a symbolic link (the old check followed it). */
	dir = th_tmpdir();
	th_join(link, sizeof(link), dir, "zap-probe");
	assert_int_equal(symlink(PROBE_HELPER_PATH, link), 0);
	helper_case(plugins, link, "symbolic link");

	/* Group-writable file, directory, parent directory. */
	dir = th_tmpdir();
	copy_helper(dir, 0775);
	helper_case(plugins, th_join(path, sizeof(path), dir, "zap-probe"),
		    "group-writable file");
	dir = th_tmpdir();
	copy_helper(dir, 0755);
	assert_int_equal(chmod(dir, 0775), 0);
	helper_case(plugins, th_join(path, sizeof(path), dir, "zap-probe"),
		    "group-writable directory");
	dir = th_tmpdir();
	th_join(sub, sizeof(sub), dir, "bin");
	assert_int_equal(mkdir(sub, 0755), 0);
	assert_int_equal(chmod(sub, 0755), 0);
	copy_helper(sub, 0755);
	assert_int_equal(chmod(dir, 0777), 0);
	helper_case(plugins, th_join(path, sizeof(path), sub, "zap-probe"),
		    "world-writable parent directory");

	/* A symbolic link on the way to the helper's directory. */
	dir = th_tmpdir();
	copy_helper(dir, 0755);
	th_join(link, sizeof(link), th_tmpdir(), "linked");
	assert_int_equal(symlink(dir, link), 0);
	helper_case(plugins, th_join(path, sizeof(path), link, "zap-probe"),
		    "symbolic link");

	/* Not executable. */
	dir = th_tmpdir();
	copy_helper(dir, 0644);
	helper_case(plugins, th_join(path, sizeof(path), dir, "zap-probe"),
		    "not an executable file");
}

/* ---- the application's descriptors stay out of the helper -------------- */

/* The reason "fdlister" reported: "fds=" and the descriptors above the
 * report pipe it saw in the helper. */
static void child_fds_scan(void *arg)
{
	const struct scene *s = arg;
	struct zap_report_entry e;
	int fd = open("/dev/null", O_RDONLY); /* inheritable, on purpose */

	TH_CHECK(fd >= 0);
	TH_CHECK(dup2(fd, 40) == 40);
	th_setenv("ZAP_PLUGIN_PATH", s->dir);
	TH_CHECK_ROW("fdlister", NULL, ZAP_PLUGIN_NOT_PRESENT, "fds=", &e);
	TH_CHECK_STR(e.reason, "fds=");
}

/*
 * The helper's own closing, as on a C library without
 * posix_spawn_file_actions_addclosefrom_np(): run it directly, as libzap
 * does (core/probe-wire.h), with the report pipe on 3, the plugin on 5,
 * and descriptors 4, 9 and 40 left open. The child that probes sees none
 * above its own pipe; the helper sends the RESULT as candidate 0, then
 * the child's STATUS.
 */
static void test_fds_closed(void **state)
{
	const char *dir = th_fixture_dir((const char *const[]){ "fdlister", NULL });
	char plugin[PATH_MAX], proto[16], rec[sizeof(struct zap_probe_rec)];
	struct scene s = { .dir = dir };
	struct zap_probe_rec r, result;
	bool have_result = false, have_status = false;
	size_t got = 0;
	int p[2], status;
	pid_t pid;

	(void)state;
	memset(&r, 0, sizeof(r));
	memset(&result, 0, sizeof(result));
	th_child(child_fds_scan, &s, TIMEOUT_MS);

	th_join(plugin, sizeof(plugin), dir, "libzap-fdlister.so");
	snprintf(proto, sizeof(proto), "%d", ZAP_PROBE_PROTO);
	assert_int_equal(pipe(p), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int f = open(plugin, O_RDONLY), n = open("/dev/null", O_RDONLY);

		if (f < 0 || n < 0 || dup2(p[1], 50) < 0 || dup2(f, 51) < 0 ||
		    dup2(50, ZAP_PROBE_REPORT_FD) < 0 ||
		    dup2(51, ZAP_PROBE_FIRST_FILE_FD) < 0 || dup2(n, ZAP_PROBE_EXEC_FD) < 0 ||
		    dup2(n, 9) < 0 || dup2(n, 40) < 0)
			_exit(100);
		execl(PROBE_HELPER_PATH, PROBE_HELPER_PATH, proto, "1", "-", "fdlister", plugin,
		      (char *)NULL);
		_exit(101);
	}
	close(p[1]);
	for (;;) {
		ssize_t k = read(p[0], rec + got, sizeof(rec) - got);

		if (k <= 0)
			break;
		got += (size_t)k;
		if (got < sizeof(rec))
			continue;
		memcpy(&r, rec, sizeof(r));
		got = 0;
		assert_int_equal(r.index, 0);
		if (r.type == ZAP_PROBE_REC_RESULT) {
			assert_false(have_status);
			result = r;
			have_result = true;
		}
		if (r.type == ZAP_PROBE_REC_STATUS) {
			assert_true(WIFEXITED(r.status));
			assert_int_equal(WEXITSTATUS(r.status), 0);
			have_status = true;
		}
	}
	close(p[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_true(have_result);
	assert_true(have_status);
	result.reason[sizeof(result.reason) - 1] = '\0';
	assert_string_equal(result.reason, "fds=");
}

/* ---- one helper per scan -------------------------------------------------- */

/* Four candidates, one of which crashes, probed through a helper script
 * that counts its starts and runs the real one: one start for the scan,
 * every row its own outcome (the crash costs only its own row). */
static void child_one_helper(void *arg)
{
	const struct scene *s = arg;

	th_setenv("ZAP_PLUGIN_PATH", s->dir);
	th_setenv("ZAP_PROBE_HELPER", s->helper);
	th_setenv("ZAP_TRANSPORT_QUIET", "1");
	TH_CHECK_ROW("good", NULL, ZAP_PLUGIN_LOADED, NULL, NULL);
	TH_CHECK_ROW("better", NULL, ZAP_PLUGIN_LOADED, NULL, NULL);
	TH_CHECK_ROW("absent", NULL, ZAP_PLUGIN_NOT_PRESENT, NULL, NULL);
	TH_CHECK_ROW("crash", NULL, ZAP_PLUGIN_ERROR, "probe crashed: signal 11", NULL);
	TH_CHECK_PICK(NULL, 0, "better");
}

static void test_one_helper(void **state)
{
	const char *dir = th_fixture_dir(
		(const char *const[]){ "good", "better", "absent", "crash", NULL });
	const char *hdir = th_tmpdir();
	char helper[PATH_MAX], starts[PATH_MAX];
	struct scene s = { .dir = dir };
	FILE *f;
	int n = 0, c;

	(void)state;
	th_join(starts, sizeof(starts), hdir, "starts");
	th_join(helper, sizeof(helper), hdir, "zap-probe");
	f = fopen(helper, "w");
	assert_non_null(f);
	fprintf(f, "#!/bin/sh\necho started >>'%s'\nexec '%s' \"$@\"\n", starts,
		PROBE_HELPER_PATH);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(chmod(helper, 0755), 0);
	s.helper = helper;
	th_child(child_one_helper, &s, TIMEOUT_MS);

	f = fopen(starts, "r");
	assert_non_null(f);
	while ((c = fgetc(f)) != EOF)
		n += c == '\n';
	fclose(f);
	assert_int_equal(n, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_timeout_max),
		cmocka_unit_test(test_timeout_ends),
		cmocka_unit_test(test_helper_rules),
		cmocka_unit_test(test_fds_closed),
		cmocka_unit_test(test_one_helper),
	};

	return cmocka_run_group_tests_name("probe-helper", tests, th_group_setup,
					   th_group_teardown);
}
