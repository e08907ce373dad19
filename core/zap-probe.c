/* SPDX-License-Identifier: MIT */
/*
 * zap-probe: load and probe plugins on behalf of libzap, so that a plugin
 * that crashes or hangs takes down a process of ours, not the application.
 * Installed under the library's libexec directory; started by libzap only
 * (core/probe-out.c), once per scan, as
 *
 *   zap-probe PROTO LEVEL MODE NAME1 PATH1 [NAME2 PATH2 ...]
 *
 * with the report pipe on fd 3 and the plugin files, already opened and
 * checked by libzap, on fds 5, 6, ... (core/probe-wire.h). A PATH only
 * names its file in messages; what is loaded is the descriptor. libzap
 * runs this program as the file it checked, /proc/self/fd/4; every other
 * descriptor is closed first thing. MODE "secure": the application runs
 * with AT_SECURE, so plugins see no environment (libzap also passes none).
 *
 * This process never runs plugin code. It forks one child per plugin, all
 * at once (fork() without exec is safe here: this program has one thread
 * and its own, known state); the child keeps only its plugin file and its
 * own pipe, loads and probes, writes its records and exits. This process
 * relays each child's records with the child's index, then its wait
 * status, so that libzap tells apart a crash, a hang and a report per
 * plugin while paying for one exec and one dynamic link per scan: on a
 * host where starting a process costs milliseconds that is most of what
 * probing out of process costs (bench/first-pick.sh).
 *
 * This program is built from the core's own objects, so every plugin gets
 * the same host table as in the application; its log lines are sent to
 * libzap, which logs them in the application.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "probe-wire.h"
#include "zap-private.h"

/*
 * Sanitizer builds: a child must die of the plugin's fault, so that
 * libzap can name the signal; ASan would catch it and exit 1. (A hook the
 * ASan runtime calls; without ASan an unused function.)
 */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
	return "handle_segv=0:handle_sigbus=0:handle_sigfpe=0:handle_sigill=0:"
	       "handle_abort=0";
}

/*
 * Close every descriptor from @low up: the application's sockets and files
 * are no business of plugin code, and posix_spawn() closes them only where
 * the C library has posix_spawn_file_actions_addclosefrom_np() (glibc 2.34
 * and later).
 */
static void close_from(int low)
{
	struct rlimit rl;
	struct dirent *e;
	long max = 65536;
	DIR *d;

#ifdef SYS_close_range
	if (syscall(SYS_close_range, (unsigned)low, ~0u, 0u) == 0)
		return;
#endif
	/* Before Linux 5.9: what /proc lists, else every possible number. */
	d = opendir("/proc/self/fd");
	if (d) {
		while ((e = readdir(d))) {
			char *end;
			long fd = strtol(e->d_name, &end, 10);

			if (!*end && end != e->d_name && fd >= low && fd != dirfd(d))
				close((int)fd);
		}
		closedir(d);
		return;
	}
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur != RLIM_INFINITY &&
	    rl.rlim_cur < (rlim_t)(1 << 20))
		max = (long)rl.rlim_cur;
	for (long fd = low; fd < max; fd++)
		close((int)fd);
}

static void put(int fd, const struct zap_probe_rec *r)
{
	const char *p = (const char *)r;
	size_t left = sizeof(*r);

	while (left) {
		ssize_t n = write(fd, p, left);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			_exit(1); /* libzap (or the helper) is gone or stopped listening */
		p += n;
		left -= (size_t)n;
	}
}

static void new_rec(struct zap_probe_rec *r, enum zap_probe_rec_type type)
{
	memset(r, 0, sizeof(*r));
	r->magic = ZAP_PROBE_MAGIC;
	r->proto = ZAP_PROBE_PROTO;
	r->type = type;
}

static void relay_log(enum zap_log_level level, const char *domain, const char *msg,
		      void *user)
{
	struct zap_probe_rec r;

	(void)user;
	new_rec(&r, ZAP_PROBE_REC_LOG);
	r.level = (int32_t)level;
	snprintf(r.domain, sizeof(r.domain), "%s", domain);
	snprintf(r.text, sizeof(r.text), "%s", msg);
	put(ZAP_PROBE_PIPE_FD, &r);
}

/* ---- a child: one plugin ------------------------------------------------ */

/* Runs in the child, with the plugin on ZAP_PROBE_FILE_FD and the pipe to
 * the helper on ZAP_PROBE_PIPE_FD, nothing else open above them. */
static _Noreturn void probe_one(const char *name, const char *path)
{
	const struct zap_plugin *d;
	struct zap_probe_rec r;
	struct zap_outcome o;
	int fd = ZAP_PROBE_FILE_FD;
	bool pinned;
	void *h;

	memset(&o, 0, sizeof(o));
	d = zap__dlopen_plugin(&fd, path, name, &h, &pinned, &o);
	if (d)
		zap__run_probe(d, &o);

	new_rec(&r, ZAP_PROBE_REC_RESULT);
	r.state = o.state;
	r.rank = o.rank;
	if (o.state == ZAP_PLUGIN_LOADED) {
		r.gpu_resident = o.caps.gpu_resident;
		r.zero_copy = o.caps.zero_copy;
		r.device_buffers = o.caps.device_buffers;
		r.min_latency_us = o.caps.min_latency_us;
		r.max_msg_size = o.caps.max_msg_size;
	}
	memcpy(r.version, o.version, sizeof(r.version));
	memcpy(r.reason, o.reason, sizeof(r.reason));
	memcpy(r.text, o.detail, sizeof(r.text));
	put(ZAP_PROBE_PIPE_FD, &r);
	/* No destructors, no atexit handlers: plugin code is done here. */
	_exit(0);
}

/* ---- the helper: one child per plugin, their records relayed ------------ */

struct child {
	pid_t pid; /* 0: not started, or reaped */
	int rfd;   /* our end of its pipe, -1 once closed */
	size_t got;
	struct zap_probe_rec rec;
};

/* Written by the SIGCHLD handler, read in the poll loop. */
static int sigchld_pipe[2] = { -1, -1 };

static void on_sigchld(int sig)
{
	int e = errno;
	ssize_t n;

	(void)sig;
	n = write(sigchld_pipe[1], "c", 1); /* full: a wake-up is pending */
	(void)n;
	errno = e;
}

/* Fork the child for candidate @i; its plugin file is @ffd here. */
static pid_t start_child(struct child *c, int ffd, const char *name, const char *path)
{
	pid_t helper = getpid(), pid;
	int p[2];

	if (pipe2(p, O_CLOEXEC))
		return -1;
	pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return -1;
	}
	if (pid == 0) {
		/* The helper's own state is none of the plugin's business: a
		 * default SIGCHLD, and only its file and its pipe (dup2()
		 * onto 3 also closes the report pipe here). */
		signal(SIGCHLD, SIG_DFL);
		if (dup2(ffd, ZAP_PROBE_FILE_FD) < 0 || dup2(p[1], ZAP_PROBE_PIPE_FD) < 0)
			_exit(1);
		close_from(ZAP_PROBE_PIPE_FD + 1);
		/* Never outlive the helper (which never outlives libzap). */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != helper)
			_exit(1);
		probe_one(name, path);
	}
	close(p[1]);
	fcntl(p[0], F_SETFL, O_NONBLOCK);
	c->pid = pid;
	c->rfd = p[0];
	return pid;
}

/* Read what @c's pipe holds now, at most @max reads (so that a child, or
 * what it left behind, cannot keep us here); forward each whole record as
 * child @i's. */
static void relay(struct child *c, uint32_t i, int max)
{
	for (int reads = 0; reads < max; reads++) {
		ssize_t n = read(c->rfd, (char *)&c->rec + c->got,
				 sizeof(c->rec) - c->got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) {
			if (c->got) { /* the child died mid-write */
				struct zap_probe_rec t;

				new_rec(&t, ZAP_PROBE_REC_TORN);
				t.index = i;
				put(ZAP_PROBE_REPORT_FD, &t);
			}
			close(c->rfd);
			c->rfd = -1;
			return;
		}
		c->got += (size_t)n;
		if (c->got == sizeof(c->rec)) {
			c->rec.index = i; /* whatever the child said */
			put(ZAP_PROBE_REPORT_FD, &c->rec);
			c->got = 0;
		}
	}
}

/* Reap every child that ended: what it wrote, then its status. */
static unsigned reap(struct child *kids, unsigned n)
{
	unsigned ended = 0;
	int status;
	pid_t w;

	while ((w = waitpid(-1, &status, WNOHANG)) > 0) {
		for (unsigned i = 0; i < n; i++) {
			struct zap_probe_rec s;
			struct child *c = &kids[i];

			if (c->pid != w)
				continue;
			/* Its records are in the pipe by now. Whatever still
			 * holds the pipe open is a process its probe left
			 * behind (libzap kills our process group): stop. */
			if (c->rfd >= 0)
				relay(c, i, 4096); /* a pipe holds fewer */
			if (c->rfd >= 0) {
				if (c->got) {
					new_rec(&s, ZAP_PROBE_REC_TORN);
					s.index = i;
					put(ZAP_PROBE_REPORT_FD, &s);
				}
				close(c->rfd);
				c->rfd = -1;
			}
			new_rec(&s, ZAP_PROBE_REC_STATUS);
			s.index = i;
			s.status = status;
			put(ZAP_PROBE_REPORT_FD, &s);
			c->pid = 0;
			ended++;
		}
	}
	return ended;
}

int main(int argc, char **argv)
{
	struct pollfd pfd[ZAP_PROBE_MAX_BATCH + 1];
	struct child kids[ZAP_PROBE_MAX_BATCH];
	struct sigaction sa;
	unsigned n, running = 0;
	long level;

	/* Our own file: libzap started us through it; nothing else needs it. */
	close(ZAP_PROBE_EXEC_FD);
	if (argc < 6 || (argc - 4) % 2 || (argc - 4) / 2 > ZAP_PROBE_MAX_BATCH ||
	    (strcmp(argv[3], "secure") && strcmp(argv[3], "-"))) {
		fprintf(stderr, "zap-probe: run by libzap only (see core/zap-probe.c)\n");
		return 2;
	}
	n = (unsigned)(argc - 4) / 2;
	close_from(ZAP_PROBE_FIRST_FILE_FD + (int)n);
	if (atoi(argv[1]) != ZAP_PROBE_PROTO)
		return ZAP_PROBE_EXIT_PROTO;
	/* Never outlive the application (a hanging probe it gave up on). */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (!strcmp(argv[3], "secure")) {
		zap__env_forbid();
		clearenv();
	}
	level = strtol(argv[2], NULL, 10);
	zap_set_log_level(level >= ZAP_LOG_ERROR && level <= ZAP_LOG_DEBUG
				  ? (enum zap_log_level)level
				  : ZAP_LOG_WARN);
	zap_set_log_handler(relay_log, NULL);

	if (pipe2(sigchld_pipe, O_CLOEXEC | O_NONBLOCK))
		return 1;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_sigchld;
	sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGCHLD, &sa, NULL))
		return 1;

	memset(kids, 0, sizeof(kids));
	for (unsigned i = 0; i < n; i++) {
		kids[i].rfd = -1;
		if (start_child(&kids[i], ZAP_PROBE_FIRST_FILE_FD + (int)i,
				argv[4 + 2 * i], argv[5 + 2 * i]) > 0) {
			running++;
		} else {
			/* As if it had exited 127 before reporting. */
			struct zap_probe_rec s;

			new_rec(&s, ZAP_PROBE_REC_STATUS);
			s.index = i;
			s.status = 127 << 8;
			put(ZAP_PROBE_REPORT_FD, &s);
		}
		close(ZAP_PROBE_FIRST_FILE_FD + (int)i); /* the child holds it */
	}
	while (running) {
		unsigned np = 0;
		char buf[64];

		pfd[np].fd = sigchld_pipe[0];
		pfd[np++].events = POLLIN;
		for (unsigned i = 0; i < n; i++) {
			if (kids[i].rfd < 0)
				continue;
			pfd[np].fd = kids[i].rfd;
			pfd[np++].events = POLLIN;
		}
		if (poll(pfd, np, -1) < 0 && errno != EINTR)
			return 1;
		for (unsigned i = 0; i < n; i++)
			if (kids[i].rfd >= 0)
				relay(&kids[i], i, 64);
		while (read(sigchld_pipe[0], buf, sizeof(buf)) > 0)
			;
		running -= reap(kids, n);
	}
	_exit(0);
}
