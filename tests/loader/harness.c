/* SPDX-License-Identifier: MIT */
#include "harness.h"
#include "zap-test.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef FIXTURE_DIR
#error "FIXTURE_DIR must point at the build directory of tests/plugins"
#endif
#ifndef BUILD_ROOT
#error "BUILD_ROOT must point at the build tree's root"
#endif
#ifndef BUILT_PLUGINS
#error "BUILT_PLUGINS must be the number of plugin modules the build makes"
#endif
#ifndef FIXTURE_ISOLATE_DIR
#error "FIXTURE_ISOLATE_DIR must point at tests/plugins/isolate in the build"
#endif

/*
 * Sanitizer builds: ASan turns SIGSEGV into "exit 1", which would hide the
 * signal the isolated-probe tests look for; leave SIGSEGV alone. (This is a
 * hook the ASan runtime calls; without ASan it is an unused function.)
 */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
	return "handle_segv=0";
}

/* Short enough that every path built under it fits in PATH_MAX. */
static char th_root[1024];
static unsigned th_seq;
static char th_probe_limit[16];

const char *th_probe_limit_ms(void)
{
	return th_probe_limit;
}

/* Fractional milliseconds: th_proc.wall_ms is a double. */
static double th_now_ms(void)
{
	return (double)zt_now_ns() / 1e6;
}

/* ---- parent side ------------------------------------------------------ */

static void th_copy(const char *from, const char *to, unsigned mode);

int th_group_setup(void **state)
{
	(void)state;
	if (!zt_mkdtemp(th_root, sizeof(th_root), "zap-test")) {
		fprintf(stderr, "mkdtemp %s: %s\n", th_root, strerror(errno));
		return -1;
	}
	/* Never inherit a preference or plugin path from the caller's shell. */
	unsetenv("ZAP_TRANSPORT");
	unsetenv("ZAP_TRANSPORT_QUIET");
	unsetenv("ZAP_PLUGIN_PATH");
	/* Nor scan the built-in directory (plugins installed on this host). */
	setenv("ZAP_PLUGIN_DIR", "", 1);
	/* A probe that must finish gets far longer than any start-up (an
	 * ASan helper on a loaded host), scaled; only a hanging fixture ever
	 * waits for it, and the cases with one set a short limit of their own
	 * and put nothing else in that scan. */
	snprintf(th_probe_limit, sizeof(th_probe_limit), "%u",
		 zt_timeout_ms(TH_PROBE_LIMIT_MS));
	setenv("ZAP_PROBE_TIMEOUT_MS", th_probe_limit, 1);
	unsetenv("ZAP_LOG_LEVEL");
	unsetenv("ZAP_LISTEN");
	unsetenv("ZAP_MAX_MSG_BYTES");
	unsetenv("ZAP_FIXTURE_PROBE_LOG");
	/* The probe helper the test setup names (the build tree's), copied
	 * into our private directory: libzap checks the helper's directory
	 * as a plugin's, and a build tree may sit under a group-writable one
	 * (`git archive | tar -x` as root; tests/README.md). */
	const char *helper = getenv("ZAP_PROBE_HELPER");
	if (helper && *helper && access(helper, X_OK) == 0) {
		static char copy[PATH_MAX];
		th_copy(helper, th_join(copy, sizeof(copy), th_root, "zap-probe"), 0755);
		setenv("ZAP_PROBE_HELPER", copy, 1);
	}
	return 0;
}

int th_group_teardown(void **state)
{
	(void)state;
	if (th_root[0] && !getenv("ZAP_TEST_KEEP"))
		zt_rmtree(th_root);
	return 0;
}

const char *th_join(char *buf, size_t len, const char *dir, const char *name)
{
	int n = snprintf(buf, len, "%s/%s", dir, name);

	if (n < 0 || (size_t)n >= len)
		fail_msg("path too long: %s/%s", dir, name);
	return buf;
}

const char *th_tmpdir(void)
{
	static char dirs[64][PATH_MAX];
	char *d = dirs[th_seq % 64];

	snprintf(d, PATH_MAX, "%s/d%u", th_root, th_seq++);
	if (mkdir(d, 0755) != 0 || chmod(d, 0755) != 0)
		fail_msg("mkdir %s: %s", d, strerror(errno));
	return d;
}

static void th_copy(const char *from, const char *to, unsigned mode)
{
	char buf[65536];
	ssize_t n;
	int in, out;

	in = open(from, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		fail_msg("open %s: %s (is the fixture built?)", from,
			 strerror(errno));
	out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (out < 0)
		fail_msg("create %s: %s", to, strerror(errno));
	while ((n = read(in, buf, sizeof(buf))) > 0) {
		if (write(out, buf, (size_t)n) != n)
			fail_msg("write %s: %s", to, strerror(errno));
	}
	if (n < 0)
		fail_msg("read %s: %s", from, strerror(errno));
	/* fchmod, not the umask-filtered create mode: the tests need exact
	 * modes (0666 for the world-writable case). */
	if (fchmod(out, mode) != 0)
		fail_msg("chmod %s: %s", to, strerror(errno));
	close(in);
	close(out);
}

const char *th_fixture(const char *dir, const char *fixture, const char *as)
{
	static char to[PATH_MAX];
	char from[PATH_MAX], file[NAME_MAX + 1];

	snprintf(file, sizeof(file), "libzap-%s.so", fixture);
	th_join(from, sizeof(from), FIXTURE_DIR, file);
	if (access(from, R_OK) != 0)
		th_join(from, sizeof(from), FIXTURE_ISOLATE_DIR, file);
	th_join(to, sizeof(to), dir, as ? as : file);
	th_copy(from, to, 0755);
	return to;
}

const char *th_private_copy(const char *path)
{
	const char *dir = th_tmpdir(), *base = strrchr(path, '/');
	char to[PATH_MAX];

	th_copy(path, th_join(to, sizeof(to), dir, base ? base + 1 : path), 0755);
	return dir;
}

const char *th_fixture_dir(const char *const *fixtures)
{
	const char *dir = th_tmpdir();

	for (; *fixtures; fixtures++)
		th_fixture(dir, *fixtures, NULL);
	return dir;
}

int th_each_build_plugin(void (*fn)(const char *dir, const char *path,
				    const char *name, void *arg),
			 void *arg)
{
	const char *root = BUILD_ROOT "/plugins";
	char dir[PATH_MAX], path[PATH_MAX];
	/* Listed first and called after: @fn forks, and a child must not
	 * inherit open directory streams (valgrind calls them lost). */
	static char dirs[64][PATH_MAX], paths[64][PATH_MAX], names[64][NAME_MAX + 1];
	DIR *top = opendir(root), *sub;
	struct dirent *de, *fe;
	int n = 0;

	if (!top)
		fail_msg("opendir %s: %s", root, strerror(errno));
	while ((de = readdir(top))) {
		if (de->d_name[0] == '.')
			continue;
		sub = opendir(th_join(dir, sizeof(dir), root, de->d_name));
		if (!sub)
			continue;
		while ((fe = readdir(sub)) && n < 64) {
			size_t len = strlen(fe->d_name);

			/* libzap-<name>.so, <name> not empty */
			if (strncmp(fe->d_name, "libzap-", 7) != 0 ||
			    len < 11 || strcmp(fe->d_name + len - 3, ".so"))
				continue;
			snprintf(names[n], sizeof(names[n]), "%.*s", (int)(len - 10),
				 fe->d_name + 7);
			snprintf(dirs[n], sizeof(dirs[n]), "%s", dir);
			snprintf(paths[n], sizeof(paths[n]), "%s",
				 th_join(path, sizeof(path), dir, fe->d_name));
			n++;
		}
		closedir(sub);
	}
	closedir(top);
	if (n != BUILT_PLUGINS)
		fail_msg("found %d plugin module(s) under %s, but this build makes %d",
			 n, root, BUILT_PLUGINS);
	for (int i = 0; i < n; i++)
		fn(dirs[i], paths[i], names[i], arg);
	return n;
}

void th_write(const char *dir, const char *name, const char *text,
	      unsigned mode)
{
	char path[PATH_MAX];
	FILE *f;

	th_join(path, sizeof(path), dir, name);
	f = fopen(path, "w");
	if (!f)
		fail_msg("create %s: %s", path, strerror(errno));
	fputs(text, f);
	fclose(f);
	if (chmod(path, mode) != 0)
		fail_msg("chmod %s: %s", path, strerror(errno));
}

static int th_fail_fd = -1;

/* Read @fd to EOF (or until @deadline), appending to *@buf. 1 on EOF. */
static int th_drain(int fd, char **buf, size_t *len, double deadline)
{
	char chunk[4096];
	ssize_t n;

	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int left = (int)(deadline - th_now_ms());

		if (left <= 0)
			return 0;
		if (poll(&pfd, 1, left) <= 0) {
			if (errno == EINTR)
				continue;
			return 0;
		}
		n = read(fd, chunk, sizeof(chunk));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return 1;
		*buf = realloc(*buf, *len + (size_t)n + 1);
		memcpy(*buf + *len, chunk, (size_t)n);
		*len += (size_t)n;
		(*buf)[*len] = '\0';
	}
}

void th_child(void (*fn)(void *), void *arg, int timeout_ms)
{
	static char text[8192];
	int fds[2], status = 0, done;
	char *msg = NULL;
	size_t len = 0;
	pid_t pid;

	if (pipe2(fds, O_CLOEXEC) != 0)
		fail_msg("pipe: %s", strerror(errno));
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0)
		fail_msg("fork: %s", strerror(errno));
	if (pid == 0) {
		/* cmocka catches SIGSEGV and friends to longjmp back into its
		 * runner; in this child that would resume the test run. Let a
		 * crash be a crash, which the parent reports. */
		static const int sigs[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE,
					    SIGSYS, SIGABRT };
		size_t i;

		for (i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
			signal(sigs[i], SIG_DFL);
		close(fds[0]);
		th_fail_fd = fds[1];
		fn(arg);
		_exit(0);
	}
	close(fds[1]);
	timeout_ms = (int)zt_timeout_ms((unsigned)timeout_ms);
	done = th_drain(fds[0], &msg, &len, th_now_ms() + timeout_ms);
	close(fds[0]);
	if (!done)
		kill(pid, SIGKILL);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	/* fail_msg() longjmps out: nothing may stay allocated past here. */
	snprintf(text, sizeof(text), "%s%s", msg ? ": " : "", msg ? msg : "");
	free(msg);
	if (!done)
		fail_msg("scenario did not finish within %d ms%s", timeout_ms, text);
	else if (WIFSIGNALED(status))
		fail_msg("scenario killed by signal %d%s", WTERMSIG(status), text);
	else if (WEXITSTATUS(status) != 0)
		fail_msg("%s", text[0] ? text + 2 : "scenario failed without a message");
}

void th_spawn(const char *const *argv, const char *const *env,
	      int timeout_ms, struct th_proc *p)
{
	char outp[PATH_MAX], errp[PATH_MAX];
	double start, deadline;
	int status = 0, out, err;
	pid_t pid, w;

	memset(p, 0, sizeof(*p));
	snprintf(outp, sizeof(outp), "%s/spawn-%u.out", th_root, th_seq);
	snprintf(errp, sizeof(errp), "%s/spawn-%u.err", th_root, th_seq++);
	out = open(outp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	err = open(errp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (out < 0 || err < 0)
		fail_msg("create %s: %s", outp, strerror(errno));
	fflush(stdout);
	fflush(stderr);
	start = th_now_ms();
	pid = fork();
	if (pid < 0)
		fail_msg("fork: %s", strerror(errno));
	if (pid == 0) {
		const char *asan = getenv("ASAN_OPTIONS");
		char asan_buf[1024];

		for (; env && *env; env++) {
			const char *eq = strchr(*env, '=');

			if (eq) {
				char name[256];

				snprintf(name, sizeof(name), "%.*s",
					 (int)(eq - *env), *env);
				setenv(name, eq + 1, 1);
			} else {
				unsetenv(*env);
			}
		}
		/* See __asan_default_options above: the child is a new
		 * program, so it needs the option through the environment. */
		snprintf(asan_buf, sizeof(asan_buf), "%s%shandle_segv=0",
			 asan ? asan : "", asan && *asan ? ":" : "");
		setenv("ASAN_OPTIONS", asan_buf, 1);
		dup2(out, 1);
		dup2(err, 2);
		execv(argv[0], (char *const *)argv);
		fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(out);
	close(err);
	timeout_ms = (int)zt_timeout_ms((unsigned)timeout_ms);
	deadline = start + timeout_ms;
	for (;;) {
		w = waitpid(pid, &status, WNOHANG);
		if (w == pid)
			break;
		if (th_now_ms() > deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			fail_msg("%s did not finish within %d ms", argv[0],
				 timeout_ms);
		}
		usleep(1000);
	}
	p->wall_ms = th_now_ms() - start;
	p->status = WIFEXITED(status) ? WEXITSTATUS(status)
				      : 128 + WTERMSIG(status);
	p->out = th_slurp(outp);
	p->err = th_slurp(errp);
	if (!p->out)
		p->out = strdup("");
	if (!p->err)
		p->err = strdup("");
	unlink(outp);
	unlink(errp);
}

void th_proc_free(struct th_proc *p)
{
	free(p->out);
	free(p->err);
	p->out = p->err = NULL;
}

char *th_slurp(const char *path)
{
	char *buf = NULL;
	size_t len = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return NULL;
	th_drain(fd, &buf, &len, th_now_ms() + 10000);
	close(fd);
	return buf ? buf : strdup("");
}

int th_count_lines(const char *text, const char *needle)
{
	int n = 0;

	while (text && *text) {
		const char *eol = strchr(text, '\n');
		size_t len = eol ? (size_t)(eol - text) : strlen(text);
		char line[4096];

		snprintf(line, sizeof(line), "%.*s", (int)len, text);
		if (strstr(line, needle))
			n++;
		text += len + (eol ? 1 : 0);
	}
	return n;
}

/* ---- child side -------------------------------------------------------- */

static char *th_log_buf;
static size_t th_log_len;
static bool th_log_handler;
static int th_stderr_fd = -1;
static char th_stderr_path[PATH_MAX];

struct th_line {
	enum zap_log_level level;
	char domain[64];
	char msg[1024];
};
static struct th_line th_lines[256];
static int th_nlines;

static const char *th_level_name(enum zap_log_level l)
{
	switch (l) {
	case ZAP_LOG_ERROR: return "ERROR";
	case ZAP_LOG_WARN: return "WARN";
	case ZAP_LOG_INFO: return "INFO";
	case ZAP_LOG_DEBUG: return "DEBUG";
	}
	return "?";
}

static void th_append(const char *s)
{
	size_t n = strlen(s);

	th_log_buf = realloc(th_log_buf, th_log_len + n + 1);
	memcpy(th_log_buf + th_log_len, s, n + 1);
	th_log_len += n;
}

static void th_on_log(enum zap_log_level level, const char *domain,
		      const char *msg, void *user)
{
	char line[1200];

	(void)user;
	if (th_nlines < (int)(sizeof(th_lines) / sizeof(th_lines[0]))) {
		struct th_line *l = &th_lines[th_nlines++];

		l->level = level;
		snprintf(l->domain, sizeof(l->domain), "%s", domain);
		snprintf(l->msg, sizeof(l->msg), "%s", msg);
	}
	snprintf(line, sizeof(line), "%s %s: %s\n", th_level_name(level),
		 domain, msg);
	th_append(line);
}

void th_capture_logs(bool handler)
{
	th_log_handler = handler;
	if (handler) {
		zap_set_log_handler(th_on_log, NULL);
		return;
	}
	snprintf(th_stderr_path, sizeof(th_stderr_path), "%s/stderr-%d",
		 th_root, (int)getpid());
	th_stderr_fd = open(th_stderr_path,
			    O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (th_stderr_fd < 0)
		th_fail(__FILE__, __LINE__, "create %s: %s", th_stderr_path,
			strerror(errno));
	dup2(th_stderr_fd, 2);
}

const char *th_logs(void)
{
	if (!th_log_handler && th_stderr_fd >= 0) {
		free(th_log_buf);
		th_log_buf = th_slurp(th_stderr_path);
	}
	return th_log_buf ? th_log_buf : "";
}

int th_log_count(enum zap_log_level level, const char *domain,
		 const char *needle)
{
	int i, n = 0;

	for (i = 0; i < th_nlines; i++) {
		if (th_lines[i].level == level &&
		    (!domain || !strcmp(th_lines[i].domain, domain)) &&
		    strstr(th_lines[i].msg, needle))
			n++;
	}
	return n;
}

void th_setenv(const char *name, const char *value)
{
	int r = value ? setenv(name, value, 1) : unsetenv(name);

	if (r != 0)
		th_fail(__FILE__, __LINE__, "setenv %s: %s", name,
			strerror(errno));
}

const char *th_report_text(void)
{
	static char buf[16384];
	size_t used = 0;
	int i, n = zap_report_count();

	buf[0] = '\0';
	if (n < 0) {
		snprintf(buf, sizeof(buf), "zap_report_count() = %d", n);
		return buf;
	}
	for (i = 0; i < n && used < sizeof(buf); i++) {
		struct zap_report_entry e = { .size = sizeof(e) };

		if (zap_report_get((size_t)i, &e) != 0)
			break;
		used += (size_t)snprintf(buf + used, sizeof(buf) - used,
			"\n  [%d] %s | %s | rank %d | %s | %s", i, e.name,
			zap_plugin_state_name(e.state), e.rank, e.reason,
			e.path);
	}
	return buf;
}

_Noreturn void th_fail(const char *file, int line, const char *fmt, ...)
{
	char msg[16384];
	size_t n;
	va_list ap;
	const char *f = strrchr(file, '/');

	n = (size_t)snprintf(msg, sizeof(msg), "%s:%d: ", f ? f + 1 : file,
			     line);
	va_start(ap, fmt);
	n += (size_t)vsnprintf(msg + n, sizeof(msg) - n, fmt, ap);
	va_end(ap);
	if (n < sizeof(msg) && (th_log_buf || th_stderr_fd >= 0))
		n += (size_t)snprintf(msg + n, sizeof(msg) - n,
				      "\n  log:\n%s", th_logs());
	if (n < sizeof(msg))
		snprintf(msg + n, sizeof(msg) - n, "\n  report:%s",
			 th_report_text());
	if (th_fail_fd >= 0) {
		if (write(th_fail_fd, msg, strlen(msg)) < 0) {
			/* the parent will still see exit status 1 */
		}
	} else {
		fprintf(stderr, "%s\n", msg);
	}
	_exit(1);
}

int th_row(const char *name, const char *path_part,
	   struct zap_report_entry *e)
{
	int i, n = zap_report_count();

	for (i = 0; i < n; i++) {
		struct zap_report_entry r = { .size = sizeof(r) };

		if (zap_report_get((size_t)i, &r) != 0)
			return -1;
		if (name && strcmp(r.name, name) != 0)
			continue;
		if (path_part && !strstr(r.path, path_part))
			continue;
		if (e)
			*e = r;
		return i;
	}
	return -1;
}

void th_check_row(const char *file, int line, const char *name,
		  const char *path_part, enum zap_plugin_state state,
		  const char *reason_part, struct zap_report_entry *out)
{
	struct zap_report_entry e;

	if (!name)
		name = "*";
	if (th_row(strcmp(name, "*") ? name : NULL, path_part, &e) < 0)
		th_fail(file, line, "no report row for '%s'%s%s", name,
			path_part ? " at " : "", path_part ? path_part : "");
	if (e.state != state)
		th_fail(file, line, "'%s' is %s (%s), expected %s", name,
			zap_plugin_state_name(e.state), e.reason,
			zap_plugin_state_name(state));
	if (reason_part && !strstr(e.reason, reason_part))
		th_fail(file, line, "reason of '%s' is \"%s\", expected it "
			"to contain \"%s\"", name, e.reason, reason_part);
	if (out)
		*out = e;
}

void th_loopback(struct zap_transport *t)
{
	struct zap_msg *m = NULL;
	int err;

	err = zap_send(t, "loopback", "ping", 4, NULL);
	TH_CHECK_MSG(err == 0, "zap_send: %s", zap_strerror(err));
	err = zap_recv(t, NULL, &m);
	TH_CHECK_MSG(err == 0, "zap_recv: %s", zap_strerror(err));
	TH_CHECK_INT(zap_msg_len(m), 4);
	TH_CHECK(memcmp(zap_msg_data(m), "ping", 4) == 0);
	zap_msg_release(m);
}

void th_check_pick(const char *file, int line, const char *pref,
		   unsigned flags, const char *expect)
{
	struct zap_transport *t = NULL;
	int err = zap_pick(pref, flags, NULL, &t);

	if (err != 0)
		th_fail(file, line, "zap_pick(\"%s\", %u) = %d (%s), expected "
			"'%s'", pref ? pref : "(null)", flags, err,
			zap_strerror(err), expect);
	if (strcmp(zap_transport_name(t), expect) != 0)
		th_fail(file, line, "zap_pick(\"%s\", %u) opened '%s', "
			"expected '%s'", pref ? pref : "(null)", flags,
			zap_transport_name(t), expect);
	zap_close(t);
}

int th_probe_count(const char *log_path, const char *name)
{
	char *text = th_slurp(log_path);
	char line[128];
	int n = 0;
	const char *p;

	if (!text)
		return 0;
	snprintf(line, sizeof(line), "%s\n", name);
	for (p = text; *p;) {
		const char *eol = strchr(p, '\n');
		size_t len = eol ? (size_t)(eol - p) + 1 : strlen(p);

		if (len == strlen(line) && !strncmp(p, line, len))
			n++;
		p += len;
	}
	free(text);
	return n;
}
