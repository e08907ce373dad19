/* SPDX-License-Identifier: MIT */
/*
 * Probing out of process (docs/loader.md, "Probing out of process"): each candidate the scan
 * found and checked is handed, as its open file, to a helper process of
 * its own (zap-probe, core/zap-probe.c), started with posix_spawn() so that
 * it is safe in a threaded program, and all of them run at once. The
 * helper itself is checked as plugins are (its directory from "/", no
 * symbolic links, owners and modes) and what runs is the file checked,
 * through /proc/self/fd, never its name looked up again. Each
 * helper loads and probes its one plugin and reports through a pipe; a
 * crash or a hang costs that candidate its place, never the application.
 * The application later loads only the plugin it picks (loader.c).
 *
 * What comes back through the pipe is treated as hostile (probe-wire.h);
 * how the helper ended is learnt from waitpid(), and when that cannot say
 * (the application ignores SIGCHLD, or something else reaped the child)
 * only a complete result counts.
 *
 * State: none between calls; zap__probe_out() runs under the scan lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "probe-wire.h"
#include "zap-private.h"

extern char **environ;

/* Helpers in flight at once (each holds a pipe and the plugin file). */
#define MAX_INFLIGHT 32

struct job {
	struct zap_probe_job *pj;
	pid_t pid;   /* 0: not running (failed to start, or reaped) */
	int rfd;     /* read end, -1 at EOF */
	bool result; /* a valid RESULT arrived */
	bool bad;    /* a malformed record arrived */
	bool waited; /* waitpid() answered (status valid) or ECHILD */
	bool status_known;
	bool timed_out;
	bool killed; /* by us, at the deadline */
	int status;
	unsigned logs, dropped;
	size_t got;
	struct zap_probe_rec rec;
};

static const char *helper_path(void)
{
	/* For the build tree (meson test, meson devenv); never in a
	 * privileged program. */
	const char *p = zap__config_path("ZAP_PROBE_HELPER");

	return p && *p ? p : ZAP_PROBE_HELPER_PATH;
}

/*
 * Open the helper as plugins are opened (load.c): its directory from "/"
 * one component at a time without following symbolic links, owner and mode
 * checked at every step, the file itself with O_NOFOLLOW and fstat(). What
 * runs is this open file (start()), so the name is resolved once. The
 * descriptor, or -1 with @why.
 */
static int open_helper(const char *path, char *why, size_t len)
{
	const char *slash = strrchr(path, '/');
	const char *file = slash ? slash + 1 : path;
	char *dir, buf[256];
	struct stat st;
	int dfd, fd;

	if (!slash)
		dir = strdup(".");
	else if (slash == path)
		dir = strdup("/");
	else
		dir = strndup(path, (size_t)(slash - path));
	if (!dir) {
		snprintf(why, len, "probe helper %s: out of memory", path);
		return -1;
	}
	dfd = zap__open_dir(dir, buf, sizeof(buf));
	free(dir);
	if (dfd < 0) {
		snprintf(why, len, "cannot start the probe helper %s: its directory: %s",
			 path, buf);
		return -1;
	}
	fd = zap__open_checked(dfd, file, &st, "not followed: give the file itself", buf,
			       sizeof(buf));
	close(dfd);
	if (fd < 0) {
		snprintf(why, len, "probe helper %s refused: %s", path, buf);
		return -1;
	}
	if (!(st.st_mode & S_IXUSR)) {
		snprintf(why, len, "probe helper %s is not an executable file", path);
		close(fd);
		return -1;
	}
	/* It is started as /proc/self/fd/N: say so now if that cannot work. */
	snprintf(buf, sizeof(buf), "/proc/self/fd/%d", fd);
	if (access(buf, X_OK)) {
		snprintf(why, len,
			 "cannot start the probe helper %s through %s: %s (is /proc mounted?)",
			 path, buf, strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

/* The most verbose level this process prints: the helper relays that much. */
static int log_level(void)
{
	for (int l = ZAP_LOG_DEBUG; l > ZAP_LOG_ERROR; l--)
		if (zap__log_enabled((enum zap_log_level)l))
			return l;
	return ZAP_LOG_ERROR;
}

/* A descriptor above ZAP_PROBE_EXEC_FD, so that dup2() onto 3, 4 and 5
 * never meets itself (which would leave close-on-exec set). */
static int high_fd(int fd, int *tmp)
{
	*tmp = -1;
	if (fd > ZAP_PROBE_EXEC_FD)
		return fd;
	*tmp = fcntl(fd, F_DUPFD_CLOEXEC, ZAP_PROBE_EXEC_FD + 1);
	return *tmp;
}

/* Start @j's helper: the checked file @hfd, named @helper in messages. */
static int start(struct job *j, const char *helper, int hfd)
{
	char exe[32];
	char level[8], proto[8];
	const bool secure = zap__env_secure();
	char *const argv[] = {
		(char *)helper,
		proto,
		(char *)j->pj->name,
		(char *)j->pj->path,
		level,
		secure ? "secure" : NULL,
		NULL,
	};
	char *empty[] = { NULL };
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	sigset_t none, all;
	int p[2], tf, tp, th, ffd, wfd, xfd, rc;

	snprintf(exe, sizeof(exe), "/proc/self/fd/%d", ZAP_PROBE_EXEC_FD);
	snprintf(level, sizeof(level), "%d", log_level());
	snprintf(proto, sizeof(proto), "%d", ZAP_PROBE_PROTO);
	if (pipe2(p, O_CLOEXEC))
		return -errno;
	ffd = high_fd(j->pj->fd, &tf);
	wfd = high_fd(p[1], &tp);
	xfd = high_fd(hfd, &th);
	if (ffd < 0 || wfd < 0 || xfd < 0) {
		rc = -errno;
		goto out;
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	/* A plugin that prints must not corrupt the application's output
	 * (zap-info --json): its stdout goes where its stderr goes, or
	 * nowhere when the application closed its stderr. */
	if (fcntl(2, F_GETFD) >= 0 && p[0] != 2 && p[1] != 2 && j->pj->fd != 2 &&
	    hfd != 2) {
		posix_spawn_file_actions_adddup2(&fa, 2, 1);
	} else {
		posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
		posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	}
	posix_spawn_file_actions_adddup2(&fa, ffd, ZAP_PROBE_FILE_FD);
	posix_spawn_file_actions_adddup2(&fa, wfd, ZAP_PROBE_PIPE_FD);
	/* The checked file, open across the exec: the name is not looked up
	 * again, and a script's interpreter can still open it. */
	posix_spawn_file_actions_adddup2(&fa, xfd, ZAP_PROBE_EXEC_FD);
#ifdef HAVE_POSIX_SPAWN_FILE_ACTIONS_ADDCLOSEFROM_NP
	/* The application's sockets and files are no business of plugin code
	 * (the helper closes them itself too, where this is missing). */
	posix_spawn_file_actions_addclosefrom_np(&fa, ZAP_PROBE_EXEC_FD + 1);
#endif
	posix_spawnattr_init(&at);
	/* Default dispositions and an empty mask, whatever the application
	 * set: a crash must kill the helper so that its signal is named. */
	sigemptyset(&none);
	sigfillset(&all);
	posix_spawnattr_setsigmask(&at, &none);
	posix_spawnattr_setsigdefault(&at, &all);
	/* A process group of its own, so that a timeout kills what the probe
	 * started too; PR_SET_PDEATHSIG in the helper ends it with us. */
	posix_spawnattr_setpgroup(&at, 0);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
					      POSIX_SPAWN_SETPGROUP);
	/* In a privileged program the helper (which has no privileges: it is
	 * exec'd) must not be configured by the caller's environment either. */
	rc = -posix_spawn(&j->pid, exe, &fa, &at, argv, secure ? empty : environ);
	if (rc)
		j->pid = 0;
	posix_spawnattr_destroy(&at);
	posix_spawn_file_actions_destroy(&fa);
out:
	if (tf >= 0)
		close(tf);
	if (tp >= 0)
		close(tp);
	if (th >= 0)
		close(th);
	close(p[1]);
	if (rc) {
		close(p[0]);
		return rc;
	}
	j->rfd = p[0];
	return 0;
}

/* Copy a string field that may lack its NUL, without control characters
 * (a forged newline would forge a log line). */
static void take_str(char *dst, size_t dlen, const char *src, size_t slen,
		     bool keep_newlines)
{
	size_t n = strnlen(src, slen);

	if (n >= dlen)
		n = dlen - 1;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)src[i];

		dst[i] = (c < 0x20 && !(keep_newlines && c == '\n')) || c == 0x7f
				 ? '?'
				 : (char)c;
	}
	dst[n] = '\0';
}

static void take_record(struct job *j)
{
	const struct zap_probe_rec *r = &j->rec;
	struct zap_outcome *o = &j->pj->o;

	if (r->magic != ZAP_PROBE_MAGIC || r->proto != ZAP_PROBE_PROTO) {
		j->bad = true;
		return;
	}
	if (r->type == ZAP_PROBE_REC_LOG) {
		char domain[sizeof(r->domain)], text[sizeof(r->text)];

		if (r->level < ZAP_LOG_ERROR || r->level > ZAP_LOG_DEBUG)
			return;
		if (j->logs++ >= ZAP_PROBE_MAX_LOGS) {
			j->dropped++;
			return;
		}
		take_str(domain, sizeof(domain), r->domain, sizeof(r->domain), false);
		take_str(text, sizeof(text), r->text, sizeof(r->text), false);
		zap__log((enum zap_log_level)r->level, domain, "%s", text);
		return;
	}
	if (r->type != ZAP_PROBE_REC_RESULT || j->result) {
		j->bad = true;
		return;
	}
	switch (r->state) {
	case ZAP_PLUGIN_LOADED:
	case ZAP_PLUGIN_NOT_PRESENT:
	case ZAP_PLUGIN_ERROR:
	case ZAP_PLUGIN_NO_SYMBOL:
	case ZAP_PLUGIN_ABI_MISMATCH:
	case ZAP_PLUGIN_INVALID:
	case ZAP_PLUGIN_DLOPEN_FAILED:
		break;
	default: /* refused and shadowed are this side's verdicts only */
		j->bad = true;
		return;
	}
	j->result = true;
	memset(o, 0, sizeof(*o));
	o->state = r->state;
	o->rank = r->rank;
	take_str(o->version, sizeof(o->version), r->version, sizeof(r->version), false);
	take_str(o->reason, sizeof(o->reason), r->reason, sizeof(r->reason), false);
	take_str(o->detail, sizeof(o->detail), r->text, sizeof(r->text), true);
	o->caps.size = sizeof(o->caps);
	if (o->state == ZAP_PLUGIN_LOADED) {
		o->caps.gpu_resident = r->gpu_resident != 0;
		o->caps.zero_copy = r->zero_copy != 0;
		o->caps.device_buffers = r->device_buffers != 0;
		o->caps.min_latency_us = isfinite(r->min_latency_us) &&
							 r->min_latency_us >= 0
						 ? r->min_latency_us
						 : 0;
		o->caps.max_msg_size = r->max_msg_size;
	}
}

static void drain(struct job *j)
{
	for (;;) {
		ssize_t n = read(j->rfd, (char *)&j->rec + j->got,
				 sizeof(j->rec) - j->got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) {
			if (j->got) /* a torn record: the helper died mid-write */
				j->bad = true;
			close(j->rfd);
			j->rfd = -1;
			return;
		}
		j->got += (size_t)n;
		if (j->got == sizeof(j->rec)) {
			take_record(j);
			j->got = 0;
		}
		return; /* one read per poll round: poll says when there is more */
	}
}

static void reap(struct job *j, bool block)
{
	int status = 0;
	pid_t w;

	if (!j->pid || j->waited)
		return;
	do
		w = waitpid(j->pid, &status, block ? 0 : WNOHANG);
	while (w < 0 && errno == EINTR);
	if (w == 0)
		return;
	j->waited = true;
	/* ECHILD: SIGCHLD is ignored here (the kernel reaped it) or another
	 * waitpid() took it; the status is then unknown, never made up. */
	j->status_known = w == j->pid;
	j->status = status;
	/* A probe leaves nothing behind: end what it started, still in the
	 * helper's process group (whose number stays reserved while anyone
	 * is in it). ESRCH, the usual answer, is fine. */
	kill(-j->pid, SIGKILL);
}

static void conclude(struct job *j, const char *helper, unsigned timeout_ms)
{
	struct zap_outcome *o = &j->pj->o;
	const char *name = j->pj->name;
	char why[256];

	if (j->dropped)
		zap__log(ZAP_LOG_WARN, name, "(%u more lines from its probe not shown)",
			 j->dropped);
	why[0] = '\0';
	if (j->timed_out) {
		snprintf(why, sizeof(why), "probe timed out after %u ms (killed)",
			 timeout_ms);
	} else if (j->killed) {
		/* the result came whole before the deadline */
	} else if (j->status_known && WIFSIGNALED(j->status)) {
		int sig = WTERMSIG(j->status);

		snprintf(why, sizeof(why), "probe crashed: signal %d (%s)", sig,
			 strsignal(sig));
	} else if (j->status_known && WIFEXITED(j->status) &&
		   WEXITSTATUS(j->status) == ZAP_PROBE_EXIT_PROTO) {
		snprintf(why, sizeof(why),
			 "probe helper %s is from another libzap (protocol %d expected)",
			 helper, ZAP_PROBE_PROTO);
	} else if (j->bad) {
		snprintf(why, sizeof(why), "probe helper sent a malformed report");
	} else if (!j->result) {
		if (j->status_known && WIFEXITED(j->status))
			snprintf(why, sizeof(why),
				 "probe helper exited with status %d before reporting",
				 WEXITSTATUS(j->status));
		else
			snprintf(why, sizeof(why),
				 "probe helper ended before reporting (how is unknown: this "
				 "process ignores SIGCHLD or reaped it elsewhere)");
	} else if (j->status_known && WIFEXITED(j->status) &&
		   WEXITSTATUS(j->status) != 0) {
		snprintf(why, sizeof(why),
			 "probe helper exited with status %d after reporting",
			 WIFEXITED(j->status) ? WEXITSTATUS(j->status) : -1);
	}
	if (why[0]) {
		memset(o, 0, sizeof(*o));
		o->state = ZAP_PLUGIN_ERROR;
		o->caps.size = sizeof(o->caps);
		snprintf(o->reason, sizeof(o->reason), "%s", why);
	}
}

/* Milliseconds to poll for, rounded up, for @left_ns: at most INT_MAX, so
 * that a long limit (ZAP_PROBE_TIMEOUT_MS goes to 2^32 - 1) never turns
 * into poll()'s negative "forever". */
static int poll_ms(uint64_t left_ns)
{
	uint64_t ms = left_ns / 1000000 + (left_ns % 1000000 != 0);

	return ms > INT_MAX ? INT_MAX : (int)ms;
}

static void run_batch(struct job *jobs, size_t n, const char *helper, unsigned timeout_ms)
{
	uint64_t deadline = zap__now_ns() + (uint64_t)timeout_ms * 1000000ull;
	struct pollfd pfd[MAX_INFLIGHT];

	for (;;) {
		size_t np = 0;
		bool waiting = false;
		uint64_t now = zap__now_ns();
		int ms;

		for (size_t i = 0; i < n; i++) {
			struct job *j = &jobs[i];

			if (j->pid && !j->waited)
				reap(j, false);
			/* Reported and gone: whatever still holds its pipe is a
			 * process its probe left behind; stop listening. */
			if (j->rfd >= 0 && j->waited && j->result && !j->got) {
				close(j->rfd);
				j->rfd = -1;
			}
			if (j->rfd >= 0) {
				pfd[np].fd = j->rfd;
				pfd[np].events = POLLIN;
				np++;
			}
			/* Ended its report but not yet its process: look again
			 * soon (its pipe may never close: see above). */
			if (j->pid && !j->waited && (j->rfd < 0 || j->result))
				waiting = true;
		}
		if (!np && !waiting)
			break;
		if (now >= deadline) {
			for (size_t i = 0; i < n; i++) {
				struct job *j = &jobs[i];

				bool running = j->pid && !j->waited;

				if (running) {
					/* Its process group: the helper and what
					 * its probe started. */
					kill(-j->pid, SIGKILL);
					kill(j->pid, SIGKILL);
					reap(j, true);
					j->killed = true;
				}
				if ((running || j->rfd >= 0) && !(j->result && !j->got))
					j->timed_out = true;
				if (j->rfd >= 0) {
					close(j->rfd);
					j->rfd = -1;
				}
			}
			break;
		}
		ms = poll_ms(deadline - now);
		if (waiting && ms > 1)
			ms = 1;
		if (poll(pfd, np, ms) < 0 && errno != EINTR)
			break;
		for (size_t i = 0, k = 0; i < n; i++) {
			if (jobs[i].rfd < 0)
				continue;
			if (pfd[k++].revents)
				drain(&jobs[i]);
		}
	}
	for (size_t i = 0; i < n; i++)
		if (jobs[i].pid)
			conclude(&jobs[i], helper, timeout_ms);
}

void zap__probe_out(struct zap_probe_job *pj, size_t n, unsigned timeout_ms)
{
	const char *helper = helper_path();
	struct job jobs[MAX_INFLIGHT];
	char why[512];
	int hfd = -1;

	if (n)
		hfd = open_helper(helper, why, sizeof(why));
	if (n && hfd < 0) {
		for (size_t i = 0; i < n; i++) {
			memset(&pj[i].o, 0, sizeof(pj[i].o));
			pj[i].o.state = ZAP_PLUGIN_ERROR;
			snprintf(pj[i].o.reason, sizeof(pj[i].o.reason),
				 "not probed: %.160s (ZAP_PROBE_INPROCESS=1 probes in this process)",
				 why);
		}
		return;
	}
	for (size_t base = 0; base < n; base += MAX_INFLIGHT) {
		size_t m = n - base < MAX_INFLIGHT ? n - base : MAX_INFLIGHT;

		memset(jobs, 0, sizeof(jobs));
		for (size_t i = 0; i < m; i++) {
			struct job *j = &jobs[i];
			int rc;

			j->pj = &pj[base + i];
			j->rfd = -1;
			rc = start(j, helper, hfd);
			if (rc) {
				memset(&j->pj->o, 0, sizeof(j->pj->o));
				j->pj->o.state = ZAP_PLUGIN_ERROR;
				snprintf(j->pj->o.reason, sizeof(j->pj->o.reason),
					 "not probed: cannot start the probe helper %.160s: %s "
					 "(ZAP_PROBE_INPROCESS=1 probes in this process)",
					 helper, strerror(-rc));
			}
		}
		run_batch(jobs, m, helper, timeout_ms);
	}
	if (hfd >= 0)
		close(hfd);
}
