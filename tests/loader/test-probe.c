/* SPDX-License-Identifier: MIT */
/*
 * Probe suite (issue 14): plugins probed out of process, only the winner
 * loaded into the program, stricter ownership, the checked file is the
 * loaded file, AT_SECURE, consistent fallback, and the smaller rules
 * (SIGCHLD ignored, no /proc, thread signal masks, warnings once).
 *
 * Every case runs in a forked child over a fresh fixture directory
 * (harness.h). `test-probe secure` runs the file-capability case alone: it
 * needs root (setcap, setpriv) and exits 77 with the reason otherwise.
 */
#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "zap-test.h"

#define TIMEOUT_MS 20000

static int mapped(const char *needle)
{
	char *maps = th_slurp("/proc/self/maps");
	int found = maps && strstr(maps, needle) != NULL;

	free(maps);
	return found;
}

struct scene {
	const char *dir;
	const void *arg;
};

/* ---- a crash or hang in a probe is a row, not the end of the program --- */

/* A crash is a crash whatever the load: the limit is far above any
 * start-up, so only the fixture's SIGSEGV can end its probe early. */
static void child_crash(void *arg)
{
	const struct scene *s = arg;
	/* No flags: the default scan. */
	struct zap_scan_attr sa = { .size = sizeof(sa),
				    .probe_timeout_ms = zt_timeout_ms(TH_PROBE_LIMIT_MS) };

	th_setenv("ZAP_PLUGIN_PATH", s->dir);
	th_capture_logs(true);
	TH_CHECK_INT(zap_scan(&sa), 0);
	TH_CHECK_ROW("crash", NULL, ZAP_PLUGIN_ERROR, "probe crashed: signal 11", NULL);
	TH_CHECK_ROW("good", NULL, ZAP_PLUGIN_LOADED, NULL, NULL);
	TH_CHECK_PICK(NULL, 0, "good");
	TH_CHECK_MSG(mapped("libzap-good.so"), "the winner is not loaded");
	TH_CHECK_MSG(!mapped("libzap-crash.so"), "libzap-crash.so is mapped");
}

/* A hang, alone in its scan, times out at any limit and any load; the
 * attribute's limit, then ZAP_PROBE_TIMEOUT_MS's for the first pick. */
static void child_hang(void *arg)
{
	const struct scene *s = arg;
	struct zap_scan_attr sa = { .size = sizeof(sa), .probe_timeout_ms = 300 };

	th_setenv("ZAP_PLUGIN_PATH", s->dir);
	th_capture_logs(true);
	TH_CHECK_INT(zap_scan(&sa), 0);
	TH_CHECK_ROW("hang", NULL, ZAP_PLUGIN_ERROR, "probe timed out after 300 ms", NULL);
	TH_CHECK_PICK(NULL, 0, "default");
	TH_CHECK_MSG(!mapped("libzap-hang.so"), "libzap-hang.so is mapped");
}

static void child_hang_env(void *arg)
{
	const struct scene *s = arg;

	th_setenv("ZAP_PLUGIN_PATH", s->dir);
	th_setenv("ZAP_PROBE_TIMEOUT_MS", "250");
	th_capture_logs(true);
	TH_CHECK_PICK(NULL, 0, "default");
	TH_CHECK_ROW("hang", NULL, ZAP_PLUGIN_ERROR, "probe timed out after 250 ms", NULL);
}

static void test_crash_hang_default(void **state)
{
	static const char *const crash[] = { "good", "crash", NULL };
	static const char *const hang[] = { "hang", NULL };
	struct scene s = { .dir = th_fixture_dir(crash) };

	(void)state;
	th_child(child_crash, &s, TIMEOUT_MS);
	s.dir = th_fixture_dir(hang);
	th_child(child_hang, &s, TIMEOUT_MS);
	th_child(child_hang_env, &s, TIMEOUT_MS);
}

/* "=default" and "^name": the other plugins are probed, never loaded here. */
static void child_exclusions(void *arg)
{
	const struct scene *s = arg;

	th_setenv("ZAP_PLUGIN_PATH", s->dir);
	th_setenv("ZAP_TRANSPORT_QUIET", "1");
	TH_CHECK_PICK("=default", 0, "default");
	TH_CHECK_PICK("^better", 0, "good");
	TH_CHECK_MSG(!mapped("libzap-better.so"), "an excluded plugin is mapped");
	TH_CHECK_MSG(!mapped("libzap-crash.so"), "libzap-crash.so is mapped");
	TH_CHECK_MSG(mapped("libzap-good.so"), "the winner is not loaded");
}

static void test_exclusions(void **state)
{
	static const char *const f[] = { "good", "better", "crash", NULL };
	struct scene s = { .dir = th_fixture_dir(f) };

	(void)state;
	th_child(child_exclusions, &s, TIMEOUT_MS);
}

/* No helper: every plugin is a row saying so; default still works. */
static void child_no_helper(void *arg)
{
	const struct scene *s = arg;

	th_setenv("ZAP_PLUGIN_PATH", s->dir);
	th_setenv("ZAP_PROBE_HELPER", "/nonexistent/zap-probe");
	th_capture_logs(true);
	TH_CHECK_ROW("good", NULL, ZAP_PLUGIN_ERROR,
		     "not probed: cannot start the probe helper: its directory: missing "
		     "(helper /nonexistent/zap-probe)",
		     NULL);
	TH_CHECK_PICK(NULL, 0, "default");
	TH_CHECK_MSG(!mapped("libzap-good.so"), "an unprobed plugin is mapped");
}

static void test_no_helper(void **state)
{
	static const char *const f[] = { "good", NULL };
	struct scene s = { .dir = th_fixture_dir(f) };

	(void)state;
	th_child(child_no_helper, &s, TIMEOUT_MS);
}

/* ZAP_PROBE_INPROCESS=1: the old scan, every plugin loaded here. */
static void child_inprocess(void *arg)
{
	const struct scene *s = arg;

	th_setenv("ZAP_PLUGIN_PATH", s->dir);
	th_setenv("ZAP_PROBE_INPROCESS", "1");
	TH_CHECK_ROW("good", NULL, ZAP_PLUGIN_LOADED, NULL, NULL);
	TH_CHECK_MSG(mapped("libzap-good.so") && mapped("libzap-better.so"),
		     "in-process scan did not load the plugins");
	TH_CHECK_PICK(NULL, 0, "better");
}

static void child_inprocess_bad(void *arg)
{
	struct zap_transport *t = NULL;
	int err;

	th_setenv("ZAP_PLUGIN_PATH", ((const struct scene *)arg)->dir);
	th_setenv("ZAP_PROBE_INPROCESS", "maybe"); /* not a boolean */
	err = zap_pick(NULL, 0, NULL, &t);
	TH_CHECK_INT(err, -EINVAL);
	TH_CHECK_HAS(zap_strerror(err), "ZAP_PROBE_INPROCESS");
}

static void test_inprocess(void **state)
{
	static const char *const f[] = { "good", "better", NULL };
	struct scene s = { .dir = th_fixture_dir(f) };

	(void)state;
	th_child(child_inprocess, &s, TIMEOUT_MS);
	th_child(child_inprocess_bad, &s, TIMEOUT_MS);
}

/* ---- the helper's report is hostile input ------------------------------ */

static void child_hostile(void *arg)
{
	const struct scene *s = arg;

	th_setenv("ZAP_PLUGIN_PATH", s->dir);
	th_capture_logs(true);
	TH_CHECK_ROW("forger", NULL, ZAP_PLUGIN_ERROR, "malformed report", NULL);
	TH_CHECK_ROW("good", NULL, ZAP_PLUGIN_LOADED, NULL, NULL);
	/* Relayed lines are bounded and carry no control characters. */
	TH_CHECK_INT(th_log_count(ZAP_LOG_WARN, "forger", "line "), 64);
	TH_CHECK_INT(th_log_count(ZAP_LOG_WARN, "forger", "36 more lines"), 1);
	TH_CHECK_INT(th_log_count(ZAP_LOG_WARN, "forger", "\n"), 0);
	TH_CHECK_INT(th_log_count(ZAP_LOG_WARN, "forger", "\033"), 0);
	TH_CHECK_PICK(NULL, 0, "good");
	TH_CHECK_MSG(!mapped("libzap-forger.so"), "the forger is mapped");
}

static void test_hostile_report(void **state)
{
	static const char *const f[] = { "good", "forger", NULL };
	struct scene s = { .dir = th_fixture_dir(f) };

	(void)state;
	th_child(child_hostile, &s, TIMEOUT_MS);
}

/* A probe that leaves a process behind (holding the report pipe) costs
 * neither the time limit nor a stray process. */
static void child_straggler(void *arg)
{
	const struct scene *s = arg;
	/* The straggler never exits by itself (the fixture), so a scan that
	 * waited for it would end at this limit with a "timed out" row. */
	struct zap_scan_attr sa = { .size = sizeof(sa),
				    .probe_timeout_ms = zt_timeout_ms(TH_PROBE_LIMIT_MS) };
	char pidfile[PATH_MAX], stat[64], *text, *st;
	uint64_t give_up = zt_now_ms() + zt_timeout_ms(10000);
	int pid = 0;

	snprintf(pidfile, sizeof(pidfile), "%s.pid", s->dir);
	th_setenv("ZAP_PLUGIN_PATH", s->dir);
	th_setenv("ZAP_FIXTURE_PID_FILE", pidfile);
	TH_CHECK_INT(zap_scan(&sa), 0);
	TH_CHECK_ROW("spawner", NULL, ZAP_PLUGIN_LOADED, NULL, NULL);
	text = th_slurp(pidfile);
	TH_CHECK(text && sscanf(text, "%d", &pid) == 1 && pid > 0);
	free(text);
	/* Killed with its group: gone, or a zombie nobody reaped yet (a
	 * container's init), once the kernel has got round to it. */
	snprintf(stat, sizeof(stat), "/proc/%d/stat", pid);
	while ((st = th_slurp(stat)) && !strstr(st, ") Z ") && zt_now_ms() < give_up) {
		free(st);
		usleep(10 * 1000);
	}
	TH_CHECK_MSG(!st || strstr(st, ") Z "), "the probe's child %d lives on: %s", pid,
		     st ? st : "");
	free(st);
}

static void test_straggler(void **state)
{
	static const char *const f[] = { "spawner", NULL };
	struct scene s = { .dir = th_fixture_dir(f) };

	(void)state;
	th_child(child_straggler, &s, TIMEOUT_MS);
}

/* ---- SIGCHLD ignored: a healthy plugin is healthy ----------------------- */

static void child_sigchld(void *arg)
{
	const struct scene *s = arg;
	struct zap_scan_attr sa = { .size = sizeof(sa), .flags = ZAP_SCAN_ISOLATE,
				    .probe_timeout_ms = zt_timeout_ms(TH_PROBE_LIMIT_MS) };
	struct zap_report_entry e;

	signal(SIGCHLD, SIG_IGN);
	th_setenv("ZAP_PLUGIN_PATH", s->dir);
	th_capture_logs(true);
	TH_CHECK_INT(zap_scan(&sa), 0);
	TH_CHECK_ROW("good", NULL, ZAP_PLUGIN_LOADED, NULL, &e);
	TH_CHECK_STR(e.reason, "");
	TH_CHECK_ROW("absent", NULL, ZAP_PLUGIN_NOT_PRESENT, "hardware absent", NULL);
	/* A crash cannot be named then, but it is not a success either. */
	TH_CHECK_ROW("crash", NULL, ZAP_PLUGIN_ERROR, "", NULL);
	TH_CHECK_PICK(NULL, 0, "good");
}

static void test_sigchld_ignored(void **state)
{
	static const char *const f[] = { "good", "absent", "crash", NULL };
	struct scene s = { .dir = th_fixture_dir(f) };

	(void)state;
	th_child(child_sigchld, &s, TIMEOUT_MS);
}

/* ---- without /proc the reason names /proc ------------------------------ */

static void child_no_proc(void *arg)
{
	const struct scene *s = arg;

	if (unshare(CLONE_NEWNS) || mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) ||
	    umount2("/proc", MNT_DETACH)) {
		printf("# skipped: cannot unmount /proc in a mount namespace: %s\n",
		       strerror(errno));
		return;
	}
	th_setenv("ZAP_PLUGIN_PATH", s->dir);
	if (s->arg)
		th_setenv("ZAP_PROBE_INPROCESS", "1");
	/* Out of process, the helper itself starts through /proc/self/fd. */
	TH_CHECK_ROW("good", NULL, s->arg ? ZAP_PLUGIN_DLOPEN_FAILED : ZAP_PLUGIN_ERROR,
		     "/proc", NULL);
	TH_CHECK_PICK(NULL, 0, "default");
}

static void test_no_proc(void **state)
{
	static const char *const f[] = { "good", NULL };
	struct scene s = { .dir = th_fixture_dir(f) };

	(void)state;
	if (geteuid() != 0) {
		printf("# skipped: unmounting /proc needs root\n");
		return;
	}
	s.arg = "in process";
	th_child(child_no_proc, &s, TIMEOUT_MS);
	s.arg = NULL;
	th_child(child_no_proc, &s, TIMEOUT_MS);
}

/* ---- ownership: group-writable, every path component, no symlinks ----- */

static void child_refused(void *arg)
{
	const struct scene *s = arg;
	const char *const *want = s->arg; /* { dir, status part, file, reason } */
	int i, n;

	th_setenv("ZAP_PLUGIN_PATH", want[0]);
	th_setenv("ZAP_PROBE_INPROCESS", "1"); /* the old code's only mode */
	th_capture_logs(true);
	n = zap_report_dir_count();
	for (i = 0; i < n; i++) {
		struct zap_dir_entry d = { .size = sizeof(d) };

		TH_CHECK_INT(zap_report_dir_get((size_t)i, &d), 0);
		if (!strcmp(d.path, want[0]))
			TH_CHECK_HAS(d.status, want[1]);
	}
	if (want[2])
		TH_CHECK_ROW(NULL, want[2], ZAP_PLUGIN_REFUSED, want[3], NULL);
	else
		TH_CHECK_MSG(th_row("good", NULL, NULL) < 0, "a plugin from a refused "
			     "directory is in the report");
	TH_CHECK_MSG(!mapped("libzap-good.so"), "a refused plugin is mapped");
	TH_CHECK_PICK(NULL, 0, "default");
}

static void refused(const char *dir, const char *status, const char *file,
		    const char *reason)
{
	const char *want[] = { dir, status, file, reason };
	struct scene s = { .arg = want };

	th_child(child_refused, &s, TIMEOUT_MS);
}

static void test_group_writable(void **state)
{
	const char *dir = th_tmpdir();
	char sub[PATH_MAX], plugins[PATH_MAX];

	(void)state;
	/* A group member could rewrite a 0664 plugin root then loads. */
	assert_int_equal(chmod(th_fixture(dir, "good", NULL), 0664), 0);
	refused(dir, "ok", "libzap-good.so", "group-writable file");

	dir = th_tmpdir();
	th_fixture(dir, "good", NULL);
	assert_int_equal(chmod(dir, 0775), 0);
	refused(dir, "refused: group-writable directory", NULL, NULL);

	/* ...or a parent directory: the plugin directory could be swapped. */
	dir = th_tmpdir();
	th_join(sub, sizeof(sub), dir, "gw");
	th_join(plugins, sizeof(plugins), sub, "plugins");
	assert_int_equal(mkdir(sub, 0775), 0);
	assert_int_equal(chmod(sub, 0775), 0);
	assert_int_equal(mkdir(plugins, 0755), 0);
	th_fixture(plugins, "good", NULL);
	refused(plugins, "group-writable parent directory", NULL, NULL);
}

static void test_symlink_on_the_way(void **state)
{
	const char *dir = th_tmpdir(), *real = th_tmpdir();
	char link[PATH_MAX], plugins[PATH_MAX], realp[PATH_MAX];

	(void)state;
	th_join(realp, sizeof(realp), real, "plugins");
	assert_int_equal(mkdir(realp, 0755), 0);
	th_fixture(realp, "good", NULL);
	th_join(link, sizeof(link), dir, "link");
	assert_int_equal(symlink(real, link), 0);
	th_join(plugins, sizeof(plugins), link, "plugins");
	refused(plugins, "symbolic link", NULL, NULL);
	/* The directory itself a link, too. */
	th_join(link, sizeof(link), dir, "direct");
	assert_int_equal(symlink(realp, link), 0);
	refused(link, "symbolic link", NULL, NULL);
}

/* A sticky world-writable ancestor (/tmp) is fine: others cannot rename
 * or remove our entries in it. */
static void child_sticky(void *arg)
{
	const struct scene *s = arg;

	th_setenv("ZAP_PLUGIN_PATH", s->dir);
	TH_CHECK_ROW("good", NULL, ZAP_PLUGIN_LOADED, NULL, NULL);
}

static void test_sticky_ancestor(void **state)
{
	const char *dir = th_tmpdir();
	char sub[PATH_MAX], plugins[PATH_MAX];
	struct scene s = { .dir = plugins };

	(void)state;
	th_join(sub, sizeof(sub), dir, "sticky");
	th_join(plugins, sizeof(plugins), sub, "plugins");
	assert_int_equal(mkdir(sub, 0755), 0);
	assert_int_equal(chmod(sub, 01777), 0);
	assert_int_equal(mkdir(plugins, 0755), 0);
	th_fixture(plugins, "good", NULL);
	th_child(child_sticky, &s, TIMEOUT_MS);
}

/* ---- the checked file is the loaded file ------------------------------- */

/* libzap-a.so cannot be unloaded (-z nodelete) and is rejected (its
 * descriptor says "other"); libzap-good.so, opened next, must get its own
 * code, not a.so's under a reused /proc/self/fd/N. */
static void child_nodelete(void *arg)
{
	const struct scene *s = arg;

	th_setenv("ZAP_PLUGIN_PATH", s->dir);
	th_setenv("ZAP_PROBE_INPROCESS", "1");
	th_capture_logs(true);
	TH_CHECK_ROW(NULL, "libzap-a.so", ZAP_PLUGIN_INVALID, "name 'other'", NULL);
	TH_CHECK_ROW("good", NULL, ZAP_PLUGIN_LOADED, NULL, NULL);
	TH_CHECK_PICK(NULL, 0, "good");
}

static void test_nodelete(void **state)
{
	struct scene s = { .dir = th_tmpdir() };

	(void)state;
	th_fixture(s.dir, "nodelete", "libzap-a.so");
	th_fixture(s.dir, "good", NULL);
	th_child(child_nodelete, &s, TIMEOUT_MS);
}

/* A file replaced between probe and pick is not loaded: fall back. */
static void child_changed(void *arg)
{
	const struct scene *s = arg;
	struct zap_transport *t = NULL;
	char path[PATH_MAX];

	th_setenv("ZAP_PLUGIN_PATH", s->dir);
	th_capture_logs(true);
	TH_CHECK_ROW("better", NULL, ZAP_PLUGIN_LOADED, NULL, NULL);
	/* Same name, other contents (a newer build, or something worse). */
	th_join(path, sizeof(path), s->dir, "libzap-better.so");
	TH_CHECK(truncate(path, 4096) == 0);
	TH_CHECK_PICK(NULL, 0, "good");
	TH_CHECK_ROW("better", NULL, ZAP_PLUGIN_ERROR, "changed since it was probed", NULL);
	TH_CHECK_MSG(!mapped("libzap-better.so"), "the changed file was loaded");
	TH_CHECK_INT(zap_pick("=better", 0, NULL, &t), ZAP_ENOTAVAIL);
}

static void test_changed_after_probe(void **state)
{
	static const char *const f[] = { "good", "better", NULL };
	struct scene s = { .dir = th_fixture_dir(f) };

	(void)state;
	th_child(child_changed, &s, TIMEOUT_MS);
}

/* ---- consistent fallback ------------------------------------------------ */

/* Present but unusable (no descriptor, or a bad one: no rank to fall
 * below) falls back as an absent name does, with a WARN, instead of
 * failing with ZAP_ENOTAVAIL; one whose probe crashed falls back below its
 * rank, and default is always the last resort. */
static void child_fallback(void *arg)
{
	const struct scene *s = arg;
	struct zap_choice c = { .size = sizeof(c) };

	th_setenv("ZAP_PLUGIN_PATH", s->dir);
	th_capture_logs(true);
	TH_CHECK_PICK("nosuch", 0, "good");
	TH_CHECK_PICK("nosym", 0, "good");
	TH_CHECK_PICK("misnamed", 0, "good");
	/* A valid descriptor gives a rank: below it, as docs/loader.md says. */
	TH_CHECK_PICK("crash", 0, "default");
	/* zap_pick_explain() agrees, and says what an absent name gets. */
	TH_CHECK_INT(zap_pick_explain("nosym", 0, &c), 0);
	TH_CHECK_STR(c.name, "good");
	TH_CHECK_HAS(c.reason, "fallback to good");
	TH_CHECK_HAS(c.reason, "nosym: no symbol");
	TH_CHECK(th_log_count(ZAP_LOG_WARN, "pick", "falling back") >= 1);
}

static void test_fallback_present_failing(void **state)
{
	static const char *const f[] = { "good", "nosym", "misnamed", "crash", NULL };
	struct scene s = { .dir = th_fixture_dir(f) };

	(void)state;
	th_child(child_fallback, &s, TIMEOUT_MS);
}

/* ---- warnings once per process ----------------------------------------- */

static void child_warn_once(void *arg)
{
	const struct scene *s = arg;

	th_setenv("ZAP_PLUGIN_PATH", s->dir);
	th_setenv("ZAP_TRANSPORT", "nosuch,absent");
	th_capture_logs(true);
	TH_CHECK_PICK(NULL, 0, "good");
	TH_CHECK_PICK(NULL, 0, "good");
	TH_CHECK_PICK(NULL, 0, "good");
	/* Each warning once: the unknown name (its own line, "ignoring it";
	 * the fallback line repeats the name among its reasons). */
	TH_CHECK_INT(th_log_count(ZAP_LOG_WARN, "pick", "; ignoring it"), 1);
	TH_CHECK_INT(th_log_count(ZAP_LOG_WARN, "pick", "falling back"), 1);
}

static void test_warn_once(void **state)
{
	static const char *const f[] = { "good", "absent", NULL };
	struct scene s = { .dir = th_fixture_dir(f) };

	(void)state;
	th_child(child_warn_once, &s, TIMEOUT_MS);
}

/* ---- library threads do not take the application's signals ------------- */

/* SigBlk of every thread but this one, as a mask. */
static int other_threads_block(int sig, int *nthreads)
{
	char path[PATH_MAX], self[32];
	struct dirent *de;
	DIR *d = opendir("/proc/self/task");
	int all = 1;

	snprintf(self, sizeof(self), "%d", (int)gettid());
	*nthreads = 0;
	TH_CHECK(d != NULL);
	while ((de = readdir(d))) {
		unsigned long long blk = 0;
		char *st, *p;

		if (de->d_name[0] == '.' || !strcmp(de->d_name, self))
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/status", de->d_name);
		st = th_slurp(path);
		if (!st)
			continue;
		p = strstr(st, "SigBlk:");
		if (p)
			blk = strtoull(p + 7, NULL, 16);
		free(st);
		(*nthreads)++;
		if (!(blk & (1ull << (sig - 1))))
			all = 0;
	}
	closedir(d);
	return all;
}

static void child_sigmask(void *arg)
{
	struct zap_attr attr = { .size = sizeof(attr), .listen = "127.0.0.1:0" };
	struct zap_transport *t = NULL;
	sigset_t set;
	int n, err;

	(void)arg;
	th_setenv("ZAP_PLUGIN_PATH", "/nonexistent");
	th_setenv("ZAP_TRANSPORT_QUIET", "1");
	sigemptyset(&set);
	TH_CHECK(pthread_sigmask(SIG_SETMASK, &set, NULL) == 0);
	err = zap_pick("=default", 0, &attr, &t);
	TH_CHECK_MSG(err == 0, "zap_pick: %s", zap_strerror(err));
	/* glibc starts a thread with every signal blocked and sets the mask
	 * it inherits once it runs: look after that. */
	usleep(100 * 1000);
	TH_CHECK_MSG(other_threads_block(SIGUSR1, &n) && other_threads_block(SIGINT, &n),
		     "a library thread does not block SIGUSR1/SIGINT");
	TH_CHECK_MSG(n >= 1, "the default transport started no thread");
	/* This thread's mask is the application's again. */
	TH_CHECK(pthread_sigmask(SIG_SETMASK, NULL, &set) == 0);
	TH_CHECK(!sigismember(&set, SIGUSR1));
	zap_close(t);
}

static void test_thread_sigmask(void **state)
{
	(void)state;
	th_child(child_sigmask, NULL, TIMEOUT_MS);
}

/* ---- AT_SECURE: no plugin reads the environment ------------------------ */

#ifndef SECURE_SCAN_PATH
#error "SECURE_SCAN_PATH must name the secure-scan program"
#endif

static int run_cmd(const char *cmd)
{
	int rc = system(cmd);

	return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

static void test_secure(void **state)
{
	char dir[PATH_MAX], cmd[4 * PATH_MAX], prog[PATH_MAX], plugins[PATH_MAX];
	const char *dpdk = BUILD_ROOT "/plugins/dpdk/libzap-dpdk.so";
	const char *envs[] = { "ZAP_FIXTURE_SECRET=leaked", "ZAP_DPDK_EAL_ARGS=-d /tmp/evil.so",
			       "ZAP_DPDK_IP=10.0.0.1", "ZAP_SHM=group",
			       "ZAP_TLS_CERT=/tmp/caller.pem", "ZAP_MAX_MSG_BYTES=1M", NULL };
	const char *argv[16];
	struct th_proc p;
	int k = 0;

	(void)state;
	/* Outside the 0700 test root: the unprivileged user must reach it. */
	snprintf(dir, sizeof(dir), "/tmp/zap-secure-XXXXXX");
	assert_non_null(mkdtemp(dir));
	assert_int_equal(chmod(dir, 0755), 0);
	th_join(plugins, sizeof(plugins), dir, "plugins");
	assert_int_equal(mkdir(plugins, 0755), 0);
	assert_int_equal(chmod(plugins, 0755), 0);
	th_fixture(plugins, "envprobe", NULL);
	if (access(dpdk, R_OK) == 0) {
		snprintf(cmd, sizeof(cmd), "cp '%s' '%s/' && chmod 0755 '%s/libzap-dpdk.so'",
			 dpdk, plugins, plugins);
		assert_int_equal(run_cmd(cmd), 0);
	}
	th_join(prog, sizeof(prog), dir, "secure-scan");
	snprintf(cmd, sizeof(cmd), "cp '%s' '%s' && chmod 0755 '%s' && setcap cap_net_raw+ep '%s'",
		 SECURE_SCAN_PATH, prog, prog, prog);
	assert_int_equal(run_cmd(cmd), 0);

	argv[k++] = "/usr/bin/setpriv";
	argv[k++] = "--reuid=65534";
	argv[k++] = "--regid=65534";
	argv[k++] = "--clear-groups";
	argv[k++] = "--";
	argv[k++] = prog;
	argv[k++] = plugins;
	argv[k] = NULL;
	th_spawn(argv, envs, TIMEOUT_MS, &p);
	/* Every line as a TAP comment. */
	for (const char *l = p.out; *l;) {
		size_t n = strcspn(l, "\n");

		printf("# %.*s\n", (int)n, l);
		l += n + (l[n] == '\n');
	}
	if (p.status != 0)
		fail_msg("secure-scan exited %d: %s%s", p.status, p.out, p.err);
	assert_non_null(strstr(p.out, "AT_SECURE=1"));
	assert_non_null(strstr(p.out, "envprobe | not present | secret=unset"));
	assert_null(strstr(p.out, "leaked"));
	if (access(dpdk, R_OK) == 0)
		assert_non_null(strstr(p.out, "dpdk | not present | not configured"));
	/* The registry's policy (core/config-vars.c): plugin variables
	 * ignored (2), a core limit honoured (1), and a TLS setting that
	 * cannot be honoured fails the open instead of running plaintext. */
	assert_non_null(strstr(p.out, "env ZAP_SHM | 2\n"));
	assert_non_null(strstr(p.out, "env ZAP_DPDK_EAL_ARGS | 2\n"));
	assert_non_null(strstr(p.out, "env ZAP_MAX_MSG_BYTES | 1\n"));
	assert_non_null(strstr(p.out, "env ZAP_TLS_CERT | 3\n"));
	assert_non_null(strstr(p.out, "pick default | -1 | "));
	assert_non_null(strstr(p.out, "ZAP_TLS_CERT is set, but this program runs with AT_SECURE"));
	th_proc_free(&p);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	run_cmd(cmd);
}

/* ---- the probe cache (core/probe-cache.c) ------------------------------ */

struct cache_scene {
	const char *dir;   /* plugins: good (loaded), absent, broken (error) */
	const char *cache; /* ZAP_PROBE_CACHE */
	const char *log;   /* ZAP_FIXTURE_PROBE_LOG */
	const char *extra; /* a variable set besides, or NULL */
	bool good_cached, absent_cached; /* answered from the cache */
};

static void child_cache(void *arg)
{
	const struct cache_scene *s = arg;
	struct zap_report_entry e;

	th_setenv("ZAP_PLUGIN_PATH", s->dir);
	th_setenv("ZAP_PROBE_CACHE", s->cache);
	th_setenv("ZAP_FIXTURE_PROBE_LOG", s->log);
	th_setenv("ZAP_TRANSPORT_QUIET", "1");
	if (s->extra)
		th_setenv(s->extra, "1");
	TH_CHECK_INT(zap_scan(NULL), 0);
	TH_CHECK_ROW("good", NULL, ZAP_PLUGIN_LOADED, NULL, &e);
	TH_CHECK_MSG(!!strstr(e.detail, "from the cache") == s->good_cached,
		     "good's detail \"%s\": expected it %sfrom the cache", e.detail,
		     s->good_cached ? "" : "not ");
	TH_CHECK_ROW("absent", NULL, ZAP_PLUGIN_NOT_PRESENT, NULL, &e);
	TH_CHECK_MSG(!!strstr(e.detail, "from the cache") == s->absent_cached,
		     "absent's detail \"%s\": expected it %sfrom the cache", e.detail,
		     s->absent_cached ? "" : "not ");
	/* An error is never kept: probed, and reported, every time. */
	TH_CHECK_ROW("broken", NULL, ZAP_PLUGIN_ERROR, NULL, &e);
	TH_CHECK_MSG(!strstr(e.detail, "from the cache"), "broken came from the cache");
	TH_CHECK_PICK(NULL, 0, "good");
}

/* Probes the fixtures' log gained since @before (lines), named @name. */
static int probes_of(const char *log, int before, const char *name)
{
	char *text = th_slurp(log);
	int n = 0, line = 0;

	for (char *p = text; p && *p; line++) {
		char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) : strlen(p);

		if (line >= before && len == strlen(name) && !strncmp(p, name, len))
			n++;
		p = nl ? nl + 1 : p + len;
	}
	free(text);
	return n;
}

static int log_lines(const char *log)
{
	char *text = th_slurp(log);
	int n = text ? th_count_lines(text, "") : 0;

	free(text);
	return n;
}

/* Run one scan and check which fixtures it probed (1) and which it took
 * from the cache (0). */
static void cache_round(struct cache_scene *s, int good, int absent)
{
	int before = log_lines(s->log);

	s->good_cached = !good;
	s->absent_cached = !absent;
	th_child(child_cache, s, TIMEOUT_MS);
	assert_int_equal(probes_of(s->log, before, "good"), good);
	assert_int_equal(probes_of(s->log, before, "absent"), absent);
	assert_int_equal(probes_of(s->log, before, "broken"), 1);
}

static void test_cache(void **state)
{
	static const char *const fx[] = { "good", "absent", "broken", NULL };
	char log[PATH_MAX], file[PATH_MAX], good[PATH_MAX];
	struct cache_scene s = { .dir = th_fixture_dir(fx), .cache = th_tmpdir() };
	struct timespec later[2] = { { 0, UTIME_OMIT }, { 0, 0 } };

	(void)state;
	s.log = th_join(log, sizeof(log), th_tmpdir(), "probes");
	th_join(file, sizeof(file), s.cache, "probe-cache");
	th_join(good, sizeof(good), s.dir, "libzap-good.so");
	assert_int_equal(chmod(s.cache, 0700), 0);

	/* The first scan probes all three; the next takes the two answers
	 * and probes the error again. */
	cache_round(&s, 1, 1);
	cache_round(&s, 0, 0);
	/* The file a plugin was probed from changed: it is probed again. */
	clock_gettime(CLOCK_REALTIME, &later[1]);
	later[1].tv_sec += 5;
	assert_int_equal(utimensat(AT_FDCWD, good, later, 0), 0);
	cache_round(&s, 1, 0);
	cache_round(&s, 0, 0);
	/* Another environment: a miss for every plugin. */
	s.extra = "ZAP_FIXTURE_SOMETHING_ELSE";
	cache_round(&s, 1, 1);
	s.extra = NULL;
	cache_round(&s, 0, 0);

	/* A file that is not one this code writes is ignored, and replaced. */
	static const char *const junk[] = { "", "ZAPPC", "ZAPPC\0\0\1garbage",
					    "\xff\xff\xff\xff\xff\xff\xff\xff"
					    "\xff\xff\xff\xff\xff\xff\xff\xff" };
	for (size_t i = 0; i < sizeof(junk) / sizeof(junk[0]); i++) {
		th_write(s.cache, "probe-cache", junk[i], 0600);
		cache_round(&s, 1, 1);
		cache_round(&s, 0, 0);
	}
	/* Others may write the file or the directory: not used. */
	assert_int_equal(chmod(file, 0620), 0);
	cache_round(&s, 1, 1);
	assert_int_equal(chmod(file, 0600), 0);
	cache_round(&s, 0, 0);
	assert_int_equal(chmod(s.cache, 0750), 0);
	cache_round(&s, 1, 1);
	cache_round(&s, 1, 1);
	assert_int_equal(chmod(s.cache, 0700), 0);
	/* A symbolic link to the file: not followed. */
	char moved[PATH_MAX];
	th_join(moved, sizeof(moved), th_tmpdir(), "elsewhere");
	assert_int_equal(rename(file, moved), 0);
	assert_int_equal(symlink(moved, file), 0);
	cache_round(&s, 1, 1);
	/* off: probe every time. */
	s.cache = "off";
	cache_round(&s, 1, 1);
	cache_round(&s, 1, 1);
}

static int run_secure_group(void)
{
	const struct CMUnitTest tests[] = { cmocka_unit_test(test_secure) };

	if (geteuid() != 0) {
		printf("1..0 # SKIP setcap and setpriv need root (euid is %d)\n",
		       (int)geteuid());
		return 77;
	}
	if (run_cmd("command -v setcap >/dev/null && command -v setpriv >/dev/null")) {
		printf("1..0 # SKIP setcap or setpriv missing (apt-get install libcap2-bin "
		       "util-linux)\n");
		return 77;
	}
	return cmocka_run_group_tests_name("probe-secure", tests, th_group_setup,
					   th_group_teardown);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_crash_hang_default),
		cmocka_unit_test(test_exclusions),
		cmocka_unit_test(test_inprocess),
		cmocka_unit_test(test_no_helper),
		cmocka_unit_test(test_hostile_report),
		cmocka_unit_test(test_straggler),
		cmocka_unit_test(test_sigchld_ignored),
		cmocka_unit_test(test_no_proc),
		cmocka_unit_test(test_group_writable),
		cmocka_unit_test(test_symlink_on_the_way),
		cmocka_unit_test(test_sticky_ancestor),
		cmocka_unit_test(test_nodelete),
		cmocka_unit_test(test_changed_after_probe),
		cmocka_unit_test(test_fallback_present_failing),
		cmocka_unit_test(test_warn_once),
		cmocka_unit_test(test_thread_sigmask),
		cmocka_unit_test(test_cache),
	};

	if (argc > 1 && !strcmp(argv[1], "secure"))
		return run_secure_group();
	return cmocka_run_group_tests_name("probe", tests, th_group_setup,
					   th_group_teardown);
}
