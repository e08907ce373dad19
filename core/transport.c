/* SPDX-License-Identifier: MIT */
/*
 * The application-facing transport handle: a thin wrapper around a plugin
 * instance that makes zap_close() safe against calls blocked in other
 * threads, and the accessors of messages and buffers.
 */
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config.h"
#include "zap-private.h"

struct zap_transport {
	const struct zap_plugin *plugin;
	const struct zap_plugin_ops *ops;
	void *tp;
	/*
	 * Close protocol: a call increments @inflight, then checks @closing;
	 * zap_close() sets @closing, then waits for @inflight to drain. Both
	 * sides use sequentially consistent atomics, so either the call sees
	 * @closing and backs out, or zap_close() sees the call and waits.
	 */
	atomic_int inflight;
	atomic_bool closing;
};

/* Whether @ops (of size ops->size) has a non-NULL optional op at @off. */
static void *optional_op(const struct zap_plugin_ops *ops, size_t off)
{
	void *fn;

	if (ops->size < off + sizeof(fn))
		return NULL;
	memcpy(&fn, (const char *)ops + off, sizeof(fn));
	return fn;
}
#define OPTIONAL_OP(ops, field) \
	((__typeof__((ops)->field))optional_op((ops), offsetof(struct zap_plugin_ops, field)))

int zap__open(const struct zap_prec *rec, const struct zap_open_args *args,
	      struct zap_transport **out)
{
	struct zap_transport *t;
	int rc;

	if (!rec->desc)
		return zap__fail(ZAP_ENOTAVAIL,
				 "'%s' is not loaded in this process (isolated scan)",
				 rec->name);
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->plugin = rec->desc;
	t->ops = rec->desc->ops;
	zap__clear_error(); /* a reason left by an earlier candidate is not this one's */
	rc = t->ops->open(&zap__host, args, &t->tp);
	if (rc) {
		free(t);
		if (rc > 0 || rc < -4095) /* a plugin bug; keep the contract */
			rc = -EIO;
		if (!zap_last_error()[0])
			zap__fail(rc, "%s: %s", rec->name, strerror(-rc));
		return rc;
	}
	*out = t;
	return 0;
}

/* Enter a call on @t; false (and -ESHUTDOWN recorded) once closing. */
static bool enter(struct zap_transport *t)
{
	atomic_fetch_add(&t->inflight, 1);
	if (atomic_load(&t->closing)) {
		atomic_fetch_sub(&t->inflight, 1);
		zap__fail(-ESHUTDOWN, "transport is being closed");
		return false;
	}
	return true;
}

static void leave(struct zap_transport *t)
{
	atomic_fetch_sub(&t->inflight, 1);
}

ZAP_EXPORT const char *zap_transport_name(const struct zap_transport *t)
{
	return t ? t->plugin->name : NULL;
}

ZAP_EXPORT int zap_transport_address(const struct zap_transport *t, char *buf,
				     size_t len)
{
	int (*fn)(void *, char *, size_t);

	zap__clear_error();
	if (!t || !buf)
		return zap__fail(-EINVAL, "zap_transport_address: NULL argument");
	fn = OPTIONAL_OP(t->ops, address);
	if (!fn)
		return zap__fail(-EOPNOTSUPP, "transport '%s' has no host:port address",
				 t->plugin->name);
	return fn(t->tp, buf, len);
}

ZAP_EXPORT int zap_caps(const struct zap_transport *t, struct zap_caps *caps)
{
	struct zap_caps full;
	int rc;

	zap__clear_error();
	if (!t || !caps || caps->size < sizeof(caps->size))
		return zap__fail(-EINVAL, "zap_caps: NULL argument or bad caps->size");
	memset(&full, 0, sizeof(full));
	full.size = sizeof(full);
	rc = t->ops->caps(t->tp, &full);
	if (rc)
		return rc;
	return zap__copy_sized(caps, &full, sizeof(full));
}

ZAP_EXPORT int zap_send(struct zap_transport *t, const char *peer,
			const void *buf, size_t len, struct zap_ctx *ctx)
{
	int rc;

	zap__clear_error();
	if (!t || !peer || (!buf && len))
		return zap__fail(-EINVAL, "zap_send: NULL argument");
	if (!enter(t))
		return -ESHUTDOWN;
	rc = t->ops->send(t->tp, peer, buf, len, ctx);
	leave(t);
	return rc;
}

ZAP_EXPORT int zap_recv(struct zap_transport *t, struct zap_ctx *ctx,
			struct zap_msg **out)
{
	int rc;

	zap__clear_error();
	if (!t || !out)
		return zap__fail(-EINVAL, "zap_recv: NULL argument");
	if (!enter(t))
		return -ESHUTDOWN;
	rc = t->ops->recv(t->tp, ctx, out);
	leave(t);
	return rc;
}

ZAP_EXPORT void zap_close(struct zap_transport *t)
{
	if (!t || atomic_exchange(&t->closing, true))
		return;
	t->ops->shutdown(t->tp);
	/* Calls in flight were woken by shutdown; they leave promptly. */
	while (atomic_load(&t->inflight) > 0) {
		struct timespec ts = { 0, 100000 };

		nanosleep(&ts, NULL);
	}
	t->ops->destroy(t->tp);
	free(t);
}

ZAP_EXPORT const void *zap_msg_data(const struct zap_msg *m)
{
	return m ? m->data : NULL;
}

ZAP_EXPORT size_t zap_msg_len(const struct zap_msg *m)
{
	return m ? m->len : 0;
}

ZAP_EXPORT const char *zap_msg_peer(const struct zap_msg *m)
{
	return m ? m->peer : NULL;
}

ZAP_EXPORT void *zap_msg_device_ptr(const struct zap_msg *m)
{
	return m ? m->device_ptr : NULL;
}

ZAP_EXPORT void zap_msg_release(struct zap_msg *m)
{
	if (m)
		m->release(m);
}

ZAP_EXPORT int zap_buffer_alloc(struct zap_transport *t, size_t size,
				struct zap_ctx *ctx, struct zap_buffer **out)
{
	int (*fn)(void *, size_t, struct zap_ctx *, struct zap_buffer **);
	int rc;

	zap__clear_error();
	if (!t || !out)
		return zap__fail(-EINVAL, "zap_buffer_alloc: NULL argument");
	fn = OPTIONAL_OP(t->ops, buffer_alloc);
	if (!fn)
		return zap__fail(ZAP_ENOTAVAIL,
				 "transport '%s' has no buffer pool; use your own memory",
				 t->plugin->name);
	if (!enter(t))
		return -ESHUTDOWN;
	rc = fn(t->tp, size, ctx, out);
	leave(t);
	return rc;
}

ZAP_EXPORT void *zap_buffer_bytes(const struct zap_buffer *b)
{
	return b ? b->bytes : NULL;
}

ZAP_EXPORT size_t zap_buffer_len(const struct zap_buffer *b)
{
	return b ? b->len : 0;
}

ZAP_EXPORT void *zap_buffer_device_ptr(const struct zap_buffer *b)
{
	return b ? b->device_ptr : NULL;
}

ZAP_EXPORT void zap_buffer_release(struct zap_buffer *b)
{
	if (b)
		b->release(b);
}

ZAP_EXPORT int zap_pool_stats(const struct zap_transport *t,
			      struct zap_pool_stats *stats)
{
	int (*fn)(void *, struct zap_pool_stats *);
	struct zap_pool_stats full;
	int rc;

	zap__clear_error();
	if (!t || !stats || stats->size < sizeof(stats->size))
		return zap__fail(-EINVAL, "zap_pool_stats: NULL argument or bad size");
	fn = OPTIONAL_OP(t->ops, pool_stats);
	if (!fn)
		return zap__fail(ZAP_ENOTAVAIL, "transport '%s' has no buffer pool",
				 t->plugin->name);
	memset(&full, 0, sizeof(full));
	full.size = sizeof(full);
	rc = fn(t->tp, &full);
	if (rc)
		return rc;
	zap__copy_sized(stats, &full, sizeof(full));
	return 0;
}

ZAP_EXPORT int64_t zap_pool_bytes(const struct zap_transport *t)
{
	struct zap_pool_stats s = { .size = sizeof(s) };
	int rc = zap_pool_stats(t, &s);

	return rc ? rc : (int64_t)s.owned;
}

ZAP_EXPORT const char *zap_version(void)
{
	return ZAP_VERSION;
}
