/* SPDX-License-Identifier: MIT */
/*
 * Probing out of process (docs/loader.md, "Probing out of process"): the
 * candidates the scan found and checked are handed, as their open files,
 * to one helper process (zap-probe, core/zap-probe.c), started with
 * posix_spawn() so that it is safe in a threaded program. The helper forks
 * a child per candidate, all at once; each child holds only its own plugin
 * file, loads and probes it and reports through the helper, which adds
 * which candidate spoke and how each child ended (probe-wire.h). A crash
 * or a hang costs that candidate its place, never the application nor the
 * other candidates; the exec and dynamic linking of a new process, which
 * cost more than most probes, are paid once per scan, not per plugin.
 * The helper itself is checked as plugins are (its directory from "/", no
 * symbolic links, owners and modes) and what runs is the file checked,
 * through /proc/self/fd, never its name looked up again. The application
 * later loads only the plugin it picks (loader.c).
 *
 * What comes back through the pipe is treated as hostile (probe-wire.h)
 * except what only the helper writes (which candidate, how its child
 * ended). How the helper itself ended is learnt from waitpid(); when that
 * cannot say (the application ignores SIGCHLD, or something else reaped
 * it) only complete results count.
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

/* One candidate. */
struct job {
	struct zap_probe_job *pj;
	bool result; /* a valid RESULT arrived */
	bool bad;    /* a malformed or torn record arrived */
	bool waited; /* its child's status is known (STATUS), or the
	                  helper ended */
	bool status_known;
	bool timed_out;
	bool killed; /* by us, at the deadline, after its result */
	int status;
	unsigned logs, dropped;
};

/* One helper and the candidates it probes. */
struct batch {
	struct job *jobs;
	size_t n;
	pid_t pid; /* 0: not running (failed to start, or reaped) */
	int rfd;   /* read end, -1 at EOF */
	bool waited;
	bool status_known;
	bool bad; /* a record the helper itself got wrong */
	int status;
	size_t got;
	struct zap_probe_rec rec;
};

const char *zap__probe_helper_path(void)
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
		/* The directory to fix first: the reason is cut to fit. */
		snprintf(why, len,
			 "cannot start the probe helper: its directory: %s (helper %s)",
			 buf, path);
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

/* @fd, or a close-on-exec copy of it at or above @floor (in *@tmp, to
 * close after the spawn), so that the dup2() onto the helper's descriptors
 * below @floor never overwrites a source still to be moved. */
static int high_fd(int fd, int floor, int *tmp)
{
	*tmp = -1;
	if (fd >= floor)
		return fd;
	*tmp = fcntl(fd, F_DUPFD_CLOEXEC, floor);
	return *tmp;
}

/* The helper's arguments: protocol, log level, whether the caller is
 * privileged, then a name and a path per candidate. */
static void helper_argv(char **argv, const struct batch *b, const char *helper,
			bool secure, char *proto, char *level)
{
	argv[0] = (char *)helper;
	argv[1] = proto;
	argv[2] = level;
	argv[3] = secure ? "secure" : "-";
	for (size_t i = 0; i < b->n; i++) {
		argv[4 + 2 * i] = (char *)b->jobs[i].pj->name;
		argv[5 + 2 * i] = (char *)b->jobs[i].pj->path;
	}
	argv[4 + 2 * b->n] = NULL;
}

/* Every descriptor the helper gets (report pipe @wfd, helper file @xfd,
 * candidates @src) at or above @floor, copies in @tmp; 0 or -errno. */
static int lift_fds(const struct batch *b, int wend, int hfd, int floor, int *tmp,
		    int *src, int *wfd, int *xfd)
{
	int rc = 0;

	*wfd = high_fd(wend, floor, &tmp[0]);
	*xfd = high_fd(hfd, floor, &tmp[1]);
	if (*wfd < 0 || *xfd < 0)
		rc = -errno;
	for (size_t i = 0; !rc && i < b->n; i++) {
		src[i] = high_fd(b->jobs[i].pj->fd, floor, &tmp[2 + i]);
		if (src[i] < 0)
			rc = -errno;
	}
	return rc;
}

/* The helper's descriptors: stdin from /dev/null, stdout and stderr (see
 * below), the report pipe, its own file, the candidates; nothing else.
 * @ours2: descriptor 2 is one of ours, not the application's stderr. */
static void helper_files(posix_spawn_file_actions_t *fa, const struct batch *b,
			 bool ours2, int wfd, int xfd, const int *src, int floor)
{
	posix_spawn_file_actions_init(fa);
	posix_spawn_file_actions_addopen(fa, 0, "/dev/null", O_RDONLY, 0);
	/* A plugin that prints must not corrupt the application's output
	 * (zap-info --json): its stdout goes where its stderr goes, or
	 * nowhere when the application closed its stderr. */
	if (fcntl(2, F_GETFD) >= 0 && !ours2) {
		posix_spawn_file_actions_adddup2(fa, 2, 1);
	} else {
		posix_spawn_file_actions_addopen(fa, 2, "/dev/null", O_WRONLY, 0);
		posix_spawn_file_actions_addopen(fa, 1, "/dev/null", O_WRONLY, 0);
	}
	posix_spawn_file_actions_adddup2(fa, wfd, ZAP_PROBE_REPORT_FD);
	/* The checked file, open across the exec: the name is not looked up
	 * again, and a script's interpreter can still open it. */
	posix_spawn_file_actions_adddup2(fa, xfd, ZAP_PROBE_EXEC_FD);
	for (size_t i = 0; i < b->n; i++)
		posix_spawn_file_actions_adddup2(fa, src[i],
						 ZAP_PROBE_FIRST_FILE_FD + (int)i);
#ifdef HAVE_POSIX_SPAWN_FILE_ACTIONS_ADDCLOSEFROM_NP
	/* The application's sockets and files are no business of plugin code
	 * (the helper closes them itself too, where this is missing). */
	posix_spawn_file_actions_addclosefrom_np(fa, floor);
#endif
}

/* The helper's signals and process group, whatever the application set. */
static void helper_attrs(posix_spawnattr_t *at)
{
	sigset_t none, all;

	posix_spawnattr_init(at);
	/* Default dispositions and an empty mask, whatever the application
	 * set: a crash must kill the child so that its signal is named. */
	sigemptyset(&none);
	sigfillset(&all);
	posix_spawnattr_setsigmask(at, &none);
	posix_spawnattr_setsigdefault(at, &all);
	/* A process group of its own, so that a timeout kills the helper, its
	 * children and what their probes started; PR_SET_PDEATHSIG in the
	 * helper ends it with us. */
	posix_spawnattr_setpgroup(at, 0);
	posix_spawnattr_setflags(at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
					     POSIX_SPAWN_SETPGROUP);
}

/* Start @b's helper: the checked file @hfd, named @helper in messages. */
static int start(struct batch *b, const char *helper, int hfd)
{
	const int floor = ZAP_PROBE_FIRST_FILE_FD + (int)b->n;
	char exe[32], level[8], proto[8];
	const bool secure = zap__env_secure();
	char *argv[4 + 2 * ZAP_PROBE_MAX_BATCH + 1];
	int tmp[ZAP_PROBE_MAX_BATCH + 2], src[ZAP_PROBE_MAX_BATCH];
	char *empty[] = { NULL };
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	int p[2], wfd, xfd, rc;
	bool ours2;

	snprintf(exe, sizeof(exe), "/proc/self/fd/%d", ZAP_PROBE_EXEC_FD);
	snprintf(level, sizeof(level), "%d", log_level());
	snprintf(proto, sizeof(proto), "%d", ZAP_PROBE_PROTO);
	helper_argv(argv, b, helper, secure, proto, level);
	for (size_t i = 0; i < b->n + 2; i++)
		tmp[i] = -1;
	if (pipe2(p, O_CLOEXEC))
		return -errno;
	rc = lift_fds(b, p[1], hfd, floor, tmp, src, &wfd, &xfd);
	if (rc)
		goto out;
	ours2 = p[0] == 2 || p[1] == 2 || hfd == 2;
	for (size_t i = 0; i < b->n; i++)
		ours2 = ours2 || b->jobs[i].pj->fd == 2;
	helper_files(&fa, b, ours2, wfd, xfd, src, floor);
	helper_attrs(&at);
	/* In a privileged program the helper (which has no privileges: it is
	 * exec'd) must not be configured by the caller's environment either. */
	rc = -posix_spawn(&b->pid, exe, &fa, &at, argv, secure ? empty : environ);
	if (rc)
		b->pid = 0;
	posix_spawnattr_destroy(&at);
	posix_spawn_file_actions_destroy(&fa);
out:
	for (size_t i = 0; i < b->n + 2; i++)
		if (tmp[i] >= 0)
			close(tmp[i]);
	close(p[1]);
	if (rc) {
		close(p[0]);
		return rc;
	}
	b->rfd = p[0];
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

/* A LOG or RESULT record of @j's child: hostile input. */
static void take_record(struct job *j, const struct zap_probe_rec *r)
{
	struct zap_outcome *o = &j->pj->o;

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

/* A whole record from the helper: to whom it belongs, then what it says. */
static void dispatch(struct batch *b)
{
	const struct zap_probe_rec *r = &b->rec;
	struct job *j;

	/* The helper sets index and type STATUS/TORN; a record whose index it
	 * did not set is its own fault, and then nothing it says counts. */
	if (r->index >= b->n) {
		b->bad = true;
		return;
	}
	j = &b->jobs[r->index];
	if (r->type == ZAP_PROBE_REC_STATUS) {
		if (!j->waited) {
			j->waited = true;
			j->status_known = true;
			j->status = r->status;
		}
		return;
	}
	if (r->type == ZAP_PROBE_REC_TORN || r->magic != ZAP_PROBE_MAGIC ||
	    r->proto != ZAP_PROBE_PROTO || j->waited) {
		j->bad = true;
		return;
	}
	take_record(j, r);
}

static void drain(struct batch *b)
{
	for (;;) {
		ssize_t n = read(b->rfd, (char *)&b->rec + b->got,
				 sizeof(b->rec) - b->got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) {
			if (b->got) /* the helper died mid-write */
				b->bad = true;
			close(b->rfd);
			b->rfd = -1;
			return;
		}
		b->got += (size_t)n;
		if (b->got == sizeof(b->rec)) {
			dispatch(b);
			b->got = 0;
		}
		return; /* one read per poll round: poll says when there is more */
	}
}

static void reap(struct batch *b)
{
	int status = 0;
	pid_t w;

	if (!b->pid || b->waited)
		return;
	do
		w = waitpid(b->pid, &status, 0);
	while (w < 0 && errno == EINTR);
	b->waited = true;
	/* ECHILD: SIGCHLD is ignored here (the kernel reaped it) or another
	 * waitpid() took it; the status is then unknown, never made up. */
	b->status_known = w == b->pid;
	b->status = status;
	/* A probe leaves nothing behind: end what it started, still in the
	 * helper's process group (whose number stays reserved while anyone
	 * is in it). ESRCH, the usual answer, is fine. */
	kill(-b->pid, SIGKILL);
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
			 WEXITSTATUS(j->status));
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

static bool all_waited(const struct batch *b)
{
	for (size_t i = 0; i < b->n; i++)
		if (!b->jobs[i].waited)
			return false;
	return true;
}

static void run_batch(struct batch *b, const char *helper, unsigned timeout_ms)
{
	uint64_t deadline = zap__now_ns() + (uint64_t)timeout_ms * 1000000ull;

	/* Until the helper closes its end, or has said how every child
	 * ended (it exits right after), or the deadline. */
	while (b->rfd >= 0 && !b->bad && !all_waited(b)) {
		uint64_t now = zap__now_ns();
		struct pollfd pfd = { .fd = b->rfd, .events = POLLIN };

		if (now >= deadline) {
			/* Its process group: the helper, its children and
			 * what their probes started. */
			kill(-b->pid, SIGKILL);
			kill(b->pid, SIGKILL);
			for (size_t i = 0; i < b->n; i++) {
				struct job *j = &b->jobs[i];

				if (j->waited)
					continue;
				if (j->result)
					j->killed = true;
				else
					j->timed_out = true;
			}
			break;
		}
		if (poll(&pfd, 1, poll_ms(deadline - now)) < 0 && errno != EINTR)
			break;
		if (pfd.revents)
			drain(b);
	}
	if (b->rfd >= 0) {
		close(b->rfd);
		b->rfd = -1;
	}
	reap(b);
	for (size_t i = 0; i < b->n; i++) {
		struct job *j = &b->jobs[i];

		if (b->bad && !j->result)
			j->bad = true;
		/* No word about its child: the helper's own end tells (a
		 * helper from another libzap, or one that was killed). */
		if (!j->waited) {
			j->waited = true;
			j->status_known = b->status_known;
			j->status = b->status;
		}
		conclude(j, helper, timeout_ms);
	}
}

void zap__probe_out(struct zap_probe_job *pj, size_t n, unsigned timeout_ms)
{
	const char *helper = zap__probe_helper_path();
	struct job jobs[ZAP_PROBE_MAX_BATCH];
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
	for (size_t base = 0; base < n; base += ZAP_PROBE_MAX_BATCH) {
		size_t m = n - base < ZAP_PROBE_MAX_BATCH ? n - base
							  : ZAP_PROBE_MAX_BATCH;
		struct batch b = { .jobs = jobs, .n = m, .rfd = -1 };
		int rc;

		memset(jobs, 0, sizeof(jobs));
		for (size_t i = 0; i < m; i++)
			jobs[i].pj = &pj[base + i];
		rc = start(&b, helper, hfd);
		if (rc) {
			for (size_t i = 0; i < m; i++) {
				memset(&jobs[i].pj->o, 0, sizeof(jobs[i].pj->o));
				jobs[i].pj->o.state = ZAP_PLUGIN_ERROR;
				snprintf(jobs[i].pj->o.reason,
					 sizeof(jobs[i].pj->o.reason),
					 "not probed: cannot start the probe helper %.160s: %s "
					 "(ZAP_PROBE_INPROCESS=1 probes in this process)",
					 helper, strerror(-rc));
			}
			continue;
		}
		run_batch(&b, helper, timeout_ms);
	}
	if (hfd >= 0)
		close(hfd);
}
