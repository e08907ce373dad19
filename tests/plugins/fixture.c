/* SPDX-License-Identifier: MIT */
/*
 * One fixture plugin for the loader, pick and ABI tests, compiled into many
 * shared modules by tests/plugins/meson.build; each -D flag below turns it
 * into one of the broken or odd plugins the host must cope with. Keeping a
 * single source means every variant differs from the good one in exactly
 * the way its name says.
 *
 *   FIX_NAME="good"       descriptor name (must match libzap-<name>.so)
 *   FIX_RANK=50           descriptor rank
 *   FIX_PROBE=n           0 OK, 1 NOT_PRESENT, 2 ERROR, 3 crash, 4 hang,
 *                         5 NOT_PRESENT with reason "secret=<value>": what
 *                         host->env_get("ZAP_FIXTURE_SECRET") answered,
 *                         6 hostile when probed out of process: 100 WARN
 *                         lines with control characters, then junk bytes
 *                         on the helper's report pipe (fd 4), then OK,
 *                         7 OK, leaving a child behind that holds every
 *                         descriptor for an hour (its pid in the file
 *                         ZAP_FIXTURE_PID_FILE names),
 *                         8 NOT_PRESENT with reason "fds=<list>": the
 *                         descriptors above 4 open in the probing process
 *                         (the helper's report pipe is 4)
 *   FIX_ABI_MAJOR=2       put 2 in the descriptor's abi_major field
 *   FIX_SYMBOL_V2         export zap_plugin_v2 (ABI major 2) instead of v1
 *   FIX_NO_SYMBOL         export no descriptor at all
 *   FIX_SHORT_DESC        descriptor size field below ZAP_PLUGIN_MIN_SIZE
 *   FIX_SHORT_OPS         ops->size stops before the last mandatory op
 *   FIX_NO_RECV           mandatory op recv is NULL
 *
 * Working variants implement an in-memory loopback transport: send queues a
 * copy, recv takes the oldest message, whatever the peer. That is enough for
 * the tests to see that zap_pick() opened this plugin and that each pick is
 * a new instance.
 *
 * If ZAP_FIXTURE_OPEN_FAIL holds this fixture's name (a blank-separated
 * list), open fails with -EADDRINUSE and a reason that starts with the
 * fixture's name, as the socket transports' do.
 *
 * If ZAP_FIXTURE_PROBE_LOG names a file, every probe appends "<name>\n" to
 * it, so tests can count probes (once per process, never for a plugin the
 * host rejected). Real plugins must not do this: probes leave nothing behind.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zap/zap-plugin.h>

#ifndef FIX_NAME
#error "FIX_NAME must be defined"
#endif
#ifndef FIX_RANK
#define FIX_RANK 50
#endif
#ifndef FIX_PROBE
#define FIX_PROBE 0
#endif
#ifndef FIX_ABI_MAJOR
#define FIX_ABI_MAJOR ZAP_PLUGIN_ABI_MAJOR
#endif

#define FIX_MAX_MSG (1u << 20)

struct fix_msg {
	struct zap_msg m; /* first: zap_msg_release() gets &m */
	struct fix_msg *next;
	char peer[16];
	unsigned char bytes[];
};

struct fix_ep {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct fix_msg *head, *tail;
	int down;
	int waiters;
};

static void fix_log_probe(void)
{
	const char *path = getenv("ZAP_FIXTURE_PROBE_LOG");
	int fd;

	if (!path || !*path)
		return;
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	/* One write with O_APPEND: lines from concurrent children stay whole. */
	if (write(fd, FIX_NAME "\n", sizeof(FIX_NAME)) < 0) {
		/* nothing to do: the test will see the line missing */
	}
	close(fd);
}

static void fix_fill_caps(struct zap_caps *caps)
{
	if (caps->size >= offsetof(struct zap_caps, max_msg_size) +
				  sizeof(caps->max_msg_size)) {
		caps->zero_copy = true;
		caps->max_msg_size = FIX_MAX_MSG;
	}
}

static enum zap_probe_result fix_probe(const struct zap_host *host,
				       struct zap_probe_info *info)
{
	(void)host;
	(void)info;
	fix_log_probe();
#if FIX_PROBE == 3
	/* raise() rather than a NULL store: the compiler may turn the latter
	 * into a trap (SIGILL), and the tests expect signal 11. */
	raise(SIGSEGV);
	return ZAP_PROBE_ERROR;
#elif FIX_PROBE == 4
	/* Hang until the isolating parent kills us. */
	for (;;)
		pause();
	return ZAP_PROBE_ERROR; /* not reached */
#elif FIX_PROBE == 6
	{
		static const unsigned char junk[100] = { 0xff, 0xfe, 'z', 'a', 'p' };

		for (int i = 0; i < 100; i++)
			host->log(ZAP_LOG_WARN, FIX_NAME, "line %d\nzap: ERROR: forged\033[2J", i);
		if (write(4, junk, sizeof(junk)) < 0) {
			/* in process (no pipe): nothing to forge */
		}
		return ZAP_PROBE_OK;
	}
#elif FIX_PROBE == 7
	{
		pid_t pid = fork();
		const char *pf = getenv("ZAP_FIXTURE_PID_FILE");

		if (pid == 0) {
			/* Longer than any scaled probe limit, so a scan that
			 * waited for it would time out; the core kills the
			 * probe's process group, this included. */
			sleep(3600);
			_exit(0);
		}
		if (pid > 0 && pf) {
			FILE *f = fopen(pf, "w");

			if (f) {
				fprintf(f, "%d\n", (int)pid);
				fclose(f);
			}
		}
		return ZAP_PROBE_OK;
	}
#elif FIX_PROBE == 8
	{
		DIR *d = opendir("/proc/self/fd");
		struct dirent *e;
		size_t n = (size_t)snprintf(info->reason, sizeof(info->reason), "fds=");

		while (d && (e = readdir(d))) {
			int fd = atoi(e->d_name);

			if (fd > 4 && fd != dirfd(d) && n < sizeof(info->reason))
				n += (size_t)snprintf(info->reason + n,
						      sizeof(info->reason) - n, "%d,", fd);
		}
		if (d)
			closedir(d);
		return ZAP_PROBE_NOT_PRESENT;
	}
#elif FIX_PROBE == 5
	{
		const char *v = ZAP_HOST_HAS(host, env_get)
					? host->env_get("ZAP_FIXTURE_SECRET")
					: "(host has no env_get)";

		snprintf(info->reason, sizeof(info->reason), "secret=%s",
			 v ? v : "unset");
		return ZAP_PROBE_NOT_PRESENT;
	}
#else
	fix_fill_caps(&info->caps);
	snprintf(info->detail, sizeof(info->detail),
		 "fixture %s detail: line one\nfixture %s detail: line two",
		 FIX_NAME, FIX_NAME);
#if FIX_PROBE == 1
	snprintf(info->reason, sizeof(info->reason),
		 "fixture %s: hardware absent", FIX_NAME);
	return ZAP_PROBE_NOT_PRESENT;
#elif FIX_PROBE == 2
	host->log(ZAP_LOG_DEBUG, FIX_NAME, "probe about to fail");
	snprintf(info->reason, sizeof(info->reason),
		 "fixture %s: device wedged", FIX_NAME);
	return ZAP_PROBE_ERROR;
#else
	return ZAP_PROBE_OK;
#endif
#endif
}

static int fix_open_fails(void)
{
	const char *v = getenv("ZAP_FIXTURE_OPEN_FAIL");
	char buf[256], *save = NULL;

	if (!v || strlen(v) >= sizeof(buf))
		return 0;
	strcpy(buf, v);
	for (char *w = strtok_r(buf, " ", &save); w; w = strtok_r(NULL, " ", &save))
		if (!strcmp(w, FIX_NAME))
			return 1;
	return 0;
}

static int fix_open(const struct zap_host *host,
		    const struct zap_open_args *args, void **tp)
{
	struct fix_ep *ep;

	if (fix_open_fails())
		return host->fail(-EADDRINUSE, "%s: cannot listen on %s: %s", FIX_NAME,
				  args->listen, strerror(EADDRINUSE));
	ep = calloc(1, sizeof(*ep));
	if (!ep)
		return host->fail(-ENOMEM, "%s: out of memory", FIX_NAME);
	pthread_mutex_init(&ep->lock, NULL);
	pthread_cond_init(&ep->cond, NULL);
	*tp = ep;
	return 0;
}

static void fix_shutdown(void *tp)
{
	struct fix_ep *ep = tp;

	pthread_mutex_lock(&ep->lock);
	ep->down = 1;
	pthread_cond_broadcast(&ep->cond);
	pthread_mutex_unlock(&ep->lock);
}

static void fix_msg_release(struct zap_msg *m)
{
	free(m);
}

static void fix_destroy(void *tp)
{
	struct fix_ep *ep = tp;
	struct fix_msg *m, *next;

	for (m = ep->head; m; m = next) {
		next = m->next;
		free(m);
	}
	pthread_cond_destroy(&ep->cond);
	pthread_mutex_destroy(&ep->lock);
	free(ep);
}

static int fix_send(void *tp, const char *peer, const void *buf, size_t len,
		    struct zap_ctx *ctx)
{
	struct fix_ep *ep = tp;
	struct fix_msg *m;

	(void)peer;
	(void)ctx;
	if (len > FIX_MAX_MSG)
		return -EMSGSIZE;
	m = calloc(1, sizeof(*m) + len + 1);
	if (!m)
		return -ENOMEM;
	if (len)
		memcpy(m->bytes, buf, len);
	strcpy(m->peer, "loopback");
	m->m.size = sizeof(m->m);
	m->m.data = m->bytes;
	m->m.len = len;
	m->m.peer = m->peer;
	m->m.release = fix_msg_release;
	pthread_mutex_lock(&ep->lock);
	if (ep->down) {
		pthread_mutex_unlock(&ep->lock);
		free(m);
		return -ESHUTDOWN;
	}
	if (ep->tail)
		ep->tail->next = m;
	else
		ep->head = m;
	ep->tail = m;
	pthread_cond_signal(&ep->cond);
	pthread_mutex_unlock(&ep->lock);
	return 0;
}

#if !defined(FIX_NO_RECV)
static int fix_recv(void *tp, struct zap_ctx *ctx, struct zap_msg **out)
{
	struct fix_ep *ep = tp;
	struct fix_msg *m;
	int err = 0;

	(void)ctx; /* tests only recv what they sent: never blocks for long */
	pthread_mutex_lock(&ep->lock);
	while (!ep->head && !ep->down)
		pthread_cond_wait(&ep->cond, &ep->lock);
	if (ep->head) {
		m = ep->head;
		ep->head = m->next;
		if (!ep->head)
			ep->tail = NULL;
		*out = &m->m;
	} else {
		err = -ESHUTDOWN;
	}
	pthread_mutex_unlock(&ep->lock);
	return err;
}
#endif

static int fix_caps(void *tp, struct zap_caps *caps)
{
	(void)tp;
	fix_fill_caps(caps);
	return 0;
}

static const struct zap_plugin_ops fix_ops = {
#if defined(FIX_SHORT_OPS)
	.size = offsetof(struct zap_plugin_ops, caps),
#else
	.size = sizeof(struct zap_plugin_ops),
#endif
	.probe = fix_probe,
	.open = fix_open,
	.shutdown = fix_shutdown,
	.destroy = fix_destroy,
	.send = fix_send,
#if !defined(FIX_NO_RECV)
	.recv = fix_recv,
#endif
	.caps = fix_caps,
};

#if defined(FIX_SHORT_DESC)
#define FIX_DESC_SIZE ((uint32_t)offsetof(struct zap_plugin, ops))
#else
#define FIX_DESC_SIZE ((uint32_t)sizeof(struct zap_plugin))
#endif

#define FIX_DESCRIPTOR_INIT(major)                                           \
	{                                                                    \
		.abi_major = (major), .abi_minor = ZAP_PLUGIN_ABI_MINOR,     \
		.size = FIX_DESC_SIZE, .rank = FIX_RANK, .name = FIX_NAME,   \
		.version = "1.0", .ops = &fix_ops,                           \
	}

#if defined(FIX_NO_SYMBOL)
/*
 * The descriptor exists but is not exported (hidden visibility), which is
 * the usual way a plugin author ends up with "no symbol": a forgotten
 * ZAP_PLUGIN_EXPORT. The ops are kept alive through it.
 */
const struct zap_plugin fix_unexported_descriptor;
const struct zap_plugin fix_unexported_descriptor =
	FIX_DESCRIPTOR_INIT(ZAP_PLUGIN_ABI_MAJOR);
#elif defined(FIX_SYMBOL_V2)
/* What a plugin built against a future ABI 2 header would export. */
extern ZAP_EXPORT const struct zap_plugin zap_plugin_v2;
const struct zap_plugin zap_plugin_v2 = FIX_DESCRIPTOR_INIT(2);
#else
ZAP_PLUGIN_EXPORT = FIX_DESCRIPTOR_INIT(FIX_ABI_MAJOR);
#endif
