/* SPDX-License-Identifier: MIT */
/*
 * inproc: an EXAMPLE out-of-tree libzap transport plugin.
 *
 * It moves messages between endpoints of one process, through a mailbox per
 * endpoint: zap_send() copies the bytes into the destination's queue and
 * zap_recv() takes them out. It cannot reach another process or host, so
 * it ranks below `default` and an automatic pick never chooses it; ask for
 * it by name (ZAP_TRANSPORT=inproc). It is here to show what a plugin needs
 * and nothing more: the descriptor, a side-effect-free probe, blocking
 * calls that honour cancellation, deadlines and shutdown, and messages that
 * outlive their transport.
 *
 * Everything it needs from libzap comes from <zap/zap-plugin.h> and the
 * host table handed to every op; it includes no libzap-private header and
 * exports one symbol, the descriptor (hidden visibility for the rest).
 *
 * Each endpoint gets the address "inproc:<n>", a number not in use, like a
 * kernel picking a port; the listen address is not used.
 */
/* POSIX interfaces (poll, pthreads, strerror) under plain -std=c11. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <zap/zap-plugin.h>

#define INPROC "inproc"
#define INPROC_PREFIX INPROC ":"
#define INPROC_VERSION "1.0"

/* One received message: the record, the sender and the bytes, in one
 * allocation that belongs to nobody but the message, so that
 * zap_msg_release() works after the transport was closed. */
struct inproc_msg {
	struct zap_msg msg;
	struct inproc_msg *next;
	char peer[ZAP_PEER_MAX];
	unsigned char data[];
};

struct inproc_tp {
	const struct zap_host *host;
	struct inproc_tp *next;      /* in the endpoint list, under list_lock */
	char addr[ZAP_PEER_MAX];
	uint64_t max_msg_size;

	/* Invariant: wake_fd is readable iff the queue is non-empty or the
	 * endpoint is shut down. Both change only under lock. */
	pthread_mutex_t lock;
	struct inproc_msg *head, *tail;
	bool shut;
	int wake_fd;
};

/* Every open endpoint of the process. Statically initialised: a plugin must
 * not run constructors. Lock order: list_lock, then an endpoint's lock. */
static pthread_mutex_t list_lock = PTHREAD_MUTEX_INITIALIZER;
static struct inproc_tp *endpoints;
static unsigned long next_id;

static void inproc_fill_caps(struct zap_caps *caps, uint64_t max_msg)
{
	struct zap_caps c = {
		.size = caps->size,
		.gpu_resident = false,
		.zero_copy = false,       /* send copies into the mailbox */
		.device_buffers = false,
		.min_latency_us = 0,      /* not measured */
		.max_msg_size = max_msg,
	};
	size_t n = caps->size < sizeof(c) ? caps->size : sizeof(c);

	memcpy(caps, &c, n);
}

static enum zap_probe_result inproc_probe(const struct zap_host *host,
					  struct zap_probe_info *info)
{
	uint64_t max = ZAP_DEFAULT_MAX_MSG_BYTES;

	/* Nothing to detect: a process can always talk to itself. A
	 * variable libzap's registry knows is read through it (ABI 1.4:
	 * its grammar, default and setuid policy); an older libzap has
	 * env_bytes(). A bad value is reported by the core at open. */
	if (ZAP_HOST_HAS(host, config_u64) ? host->config_u64("ZAP_MAX_MSG_BYTES", &max) < 0
					  : host->env_bytes("ZAP_MAX_MSG_BYTES",
							    ZAP_DEFAULT_MAX_MSG_BYTES, 1,
							    UINT64_MAX, &max) != 0)
		max = ZAP_DEFAULT_MAX_MSG_BYTES;
	if (info->size >= offsetof(struct zap_probe_info, reason) + sizeof(info->reason))
		snprintf(info->reason, sizeof(info->reason),
			 "example plugin: endpoints of this process only");
	if (info->size >= offsetof(struct zap_probe_info, caps) + sizeof(info->caps) &&
	    info->caps.size)
		inproc_fill_caps(&info->caps, max);
	return ZAP_PROBE_OK;
}

/* Called with list_lock held. */
static struct inproc_tp *inproc_find(const char *addr)
{
	for (struct inproc_tp *t = endpoints; t; t = t->next)
		if (!strcmp(t->addr, addr))
			return t;
	return NULL;
}

static int inproc_open(const struct zap_host *host,
		       const struct zap_open_args *args, void **tpp)
{
	struct inproc_tp *tp = calloc(1, sizeof(*tp));

	if (!tp)
		return host->fail(-ENOMEM, INPROC ": out of memory");
	tp->host = host;
	tp->max_msg_size = args->max_msg_size;
	tp->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (tp->wake_fd < 0) {
		int err = errno;

		free(tp);
		return host->fail(-err, INPROC ": eventfd: %s", strerror(err));
	}
	pthread_mutex_init(&tp->lock, NULL);

	pthread_mutex_lock(&list_lock);
	do
		snprintf(tp->addr, sizeof(tp->addr), INPROC_PREFIX "%lu", next_id++);
	while (inproc_find(tp->addr));
	tp->next = endpoints;
	endpoints = tp;
	pthread_mutex_unlock(&list_lock);
	*tpp = tp;
	return 0;
}

static void inproc_wake(struct inproc_tp *tp)
{
	uint64_t one = 1;

	/* Cannot fail short of a counter overflow, which needs 2^64 wakes. */
	if (write(tp->wake_fd, &one, sizeof(one)) < 0)
		tp->host->log(ZAP_LOG_DEBUG, INPROC, "wake: %s", strerror(errno));
}

static void inproc_shutdown(void *p)
{
	struct inproc_tp *tp = p;

	pthread_mutex_lock(&tp->lock);
	if (!tp->shut) {
		tp->shut = true;
		inproc_wake(tp);  /* never drained again: readable for good */
	}
	pthread_mutex_unlock(&tp->lock);
}

static void inproc_destroy(void *p)
{
	struct inproc_tp *tp = p;
	struct inproc_msg *m, *next;

	if (!tp)
		return;
	pthread_mutex_lock(&list_lock);
	for (struct inproc_tp **pp = &endpoints; *pp; pp = &(*pp)->next)
		if (*pp == tp) {
			*pp = tp->next;
			break;
		}
	pthread_mutex_unlock(&list_lock);
	/* Unlisted: no sender can reach it any more. */
	for (m = tp->head; m; m = next) {
		next = m->next;
		free(m);
	}
	pthread_mutex_destroy(&tp->lock);
	close(tp->wake_fd);
	free(tp);
}

static void inproc_msg_release(struct zap_msg *m)
{
	free(m);  /* struct zap_msg is the first member of struct inproc_msg */
}

static int inproc_send(void *p, const char *peer, const void *buf, size_t len,
		       struct zap_ctx *ctx)
{
	struct inproc_tp *tp = p, *dst;
	struct inproc_msg *m;
	int rc;

	rc = tp->host->ctx_err(ctx);
	if (rc)
		return rc;
	if (strncmp(peer, INPROC_PREFIX, strlen(INPROC_PREFIX)))
		return tp->host->fail(-EINVAL, INPROC ": '%s' is not an inproc:<name> address",
				      peer);
	if (len > tp->max_msg_size)
		return tp->host->fail(-EMSGSIZE, INPROC ": %zu bytes exceed the %llu-byte limit",
				      len, (unsigned long long)tp->max_msg_size);
	m = malloc(sizeof(*m) + len);
	if (!m)
		return tp->host->fail(-ENOMEM, INPROC ": out of memory");
	memset(m, 0, sizeof(*m));
	if (len)
		memcpy(m->data, buf, len);
	snprintf(m->peer, sizeof(m->peer), "%s", tp->addr);
	m->msg.size = sizeof(m->msg);
	m->msg.data = m->data;
	m->msg.len = len;
	m->msg.device_ptr = NULL;
	m->msg.peer = m->peer;
	m->msg.release = inproc_msg_release;

	pthread_mutex_lock(&tp->lock);
	rc = tp->shut ? -ESHUTDOWN : 0;
	pthread_mutex_unlock(&tp->lock);
	if (rc) {
		free(m);
		return rc;
	}

	pthread_mutex_lock(&list_lock);
	dst = inproc_find(peer);
	if (dst) {
		pthread_mutex_lock(&dst->lock);
		if (dst->shut) {
			rc = tp->host->fail(-ECONNREFUSED, INPROC ": %s is closing", peer);
		} else {
			if (dst->tail)
				dst->tail->next = m;
			else
				dst->head = m;
			dst->tail = m;
			inproc_wake(dst);
		}
		pthread_mutex_unlock(&dst->lock);
	} else {
		rc = tp->host->fail(-EHOSTUNREACH, INPROC ": no endpoint %s in this process",
				    peer);
	}
	pthread_mutex_unlock(&list_lock);
	if (rc)
		free(m);
	return rc;
}

static int inproc_recv(void *p, struct zap_ctx *ctx, struct zap_msg **out)
{
	struct inproc_tp *tp = p;

	for (;;) {
		struct inproc_msg *m = NULL;
		struct pollfd fds[2] = {
			{ .fd = tp->wake_fd, .events = POLLIN },
			{ .fd = tp->host->ctx_fd(ctx), .events = POLLIN },
		};
		int rc;

		pthread_mutex_lock(&tp->lock);
		if (tp->shut) {
			rc = -ESHUTDOWN;
		} else if (tp->head) {
			m = tp->head;
			tp->head = m->next;
			if (!tp->head) {
				uint64_t n;

				tp->tail = NULL;
				/* Empty now: make wake_fd unreadable again. */
				if (read(tp->wake_fd, &n, sizeof(n)) < 0 && errno != EAGAIN)
					tp->host->log(ZAP_LOG_DEBUG, INPROC, "drain: %s",
						      strerror(errno));
			}
			rc = 0;
		} else {
			rc = tp->host->ctx_err(ctx);
		}
		pthread_mutex_unlock(&tp->lock);
		if (m) {
			m->next = NULL;
			*out = &m->msg;
			return 0;
		}
		if (rc)
			return rc;

		/* fds[1].fd is -1 for a NULL ctx, which poll() ignores. */
		if (poll(fds, 2, tp->host->ctx_timeout_ms(ctx)) < 0 && errno != EINTR)
			return tp->host->fail(-errno, INPROC ": poll: %s", strerror(errno));
	}
}

static int inproc_caps(void *p, struct zap_caps *caps)
{
	struct inproc_tp *tp = p;

	inproc_fill_caps(caps, tp->max_msg_size);
	return 0;
}

static int inproc_address(void *p, char *buf, size_t len)
{
	struct inproc_tp *tp = p;

	if (strlen(tp->addr) >= len)
		return -ENOSPC;
	strcpy(buf, tp->addr);
	return 0;
}

static const struct zap_plugin_ops inproc_ops = {
	.size = sizeof(struct zap_plugin_ops),
	.probe = inproc_probe,
	.open = inproc_open,
	.shutdown = inproc_shutdown,
	.destroy = inproc_destroy,
	.send = inproc_send,
	.recv = inproc_recv,
	.caps = inproc_caps,
	.address = inproc_address,
	/* No pool: zap_buffer_alloc() and zap_pool_stats() say ZAP_ENOTAVAIL. */
};

/* The one exported symbol. Ranked below default (0): an automatic pick
 * must never choose a transport that cannot leave the process. */
ZAP_PLUGIN_EXPORT = {
	.abi_major = ZAP_PLUGIN_ABI_MAJOR,
	.abi_minor = ZAP_PLUGIN_ABI_MINOR,
	.size = sizeof(struct zap_plugin),
	.rank = -100,
	.name = INPROC,
	.version = INPROC_VERSION,
	.ops = &inproc_ops,
};
