/* SPDX-License-Identifier: MIT */
/*
 * zap-probe: load and probe one plugin on behalf of libzap, so that a
 * plugin that crashes or hangs takes down this process, not the
 * application. Installed under the library's libexec directory; started
 * by libzap only (core/probe-out.c), as
 *
 *   zap-probe PROTO NAME PATH LEVEL [secure]
 *
 * with the plugin file, already opened and checked by libzap, on fd 3 and
 * the report pipe on fd 4 (core/probe-wire.h). PATH only names the file in
 * messages; what is loaded is fd 3. libzap runs this program as the file
 * it checked, /proc/self/fd/5; every descriptor above 4 is closed first
 * thing. "secure": the application runs with
 * AT_SECURE, so the plugin sees no environment (libzap also passes none).
 *
 * This program is built from the core's own objects, so the plugin gets
 * the same host table as in the application; its log lines are sent to
 * libzap, which logs them in the application.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "probe-wire.h"
#include "zap-private.h"

/*
 * Sanitizer builds: this process must die of the plugin's fault, so that
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
 * Close every descriptor above the report pipe: the application's sockets
 * and files are no business of plugin code, and posix_spawn() closes them
 * only where the C library has posix_spawn_file_actions_addclosefrom_np()
 * (glibc 2.34 and later). This also closes ZAP_PROBE_EXEC_FD, our own file.
 */
static void close_inherited(void)
{
	const int low = ZAP_PROBE_PIPE_FD + 1;
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

static void put(const struct zap_probe_rec *r)
{
	const char *p = (const char *)r;
	size_t left = sizeof(*r);

	while (left) {
		ssize_t n = write(ZAP_PROBE_PIPE_FD, p, left);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			_exit(1); /* libzap is gone or stopped listening */
		p += n;
		left -= (size_t)n;
	}
}

static void relay_log(enum zap_log_level level, const char *domain, const char *msg,
		      void *user)
{
	struct zap_probe_rec r;

	(void)user;
	memset(&r, 0, sizeof(r));
	r.magic = ZAP_PROBE_MAGIC;
	r.proto = ZAP_PROBE_PROTO;
	r.type = ZAP_PROBE_REC_LOG;
	r.level = (int32_t)level;
	snprintf(r.domain, sizeof(r.domain), "%s", domain);
	snprintf(r.text, sizeof(r.text), "%s", msg);
	put(&r);
}

int main(int argc, char **argv)
{
	const struct zap_plugin *d;
	struct zap_probe_rec r;
	struct zap_outcome o;
	bool pinned;
	void *h;
	int fd = ZAP_PROBE_FILE_FD;
	long level;

	if (argc < 5 || argc > 6 || (argc == 6 && strcmp(argv[5], "secure"))) {
		fprintf(stderr, "zap-probe: run by libzap only (see core/zap-probe.c)\n");
		return 2;
	}
	close_inherited();
	if (atoi(argv[1]) != ZAP_PROBE_PROTO)
		return ZAP_PROBE_EXIT_PROTO;
	/* Never outlive the application (a hanging probe it gave up on). */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (argc == 6) {
		zap__env_forbid();
		clearenv();
	}
	level = strtol(argv[4], NULL, 10);
	zap_set_log_level(level >= ZAP_LOG_ERROR && level <= ZAP_LOG_DEBUG
				  ? (enum zap_log_level)level
				  : ZAP_LOG_WARN);
	zap_set_log_handler(relay_log, NULL);

	memset(&o, 0, sizeof(o));
	d = zap__dlopen_plugin(&fd, argv[3], argv[2], &h, &pinned, &o);
	if (d)
		zap__run_probe(d, &o);

	memset(&r, 0, sizeof(r));
	r.magic = ZAP_PROBE_MAGIC;
	r.proto = ZAP_PROBE_PROTO;
	r.type = ZAP_PROBE_REC_RESULT;
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
	put(&r);
	/* No destructors, no atexit handlers: plugin code is done here. */
	_exit(0);
}
