/* SPDX-License-Identifier: MIT */
/*
 * The application-facing transport handle: a thin wrapper around a plugin
 * instance that makes zap_shutdown() and zap_close() safe against calls
 * blocked in other threads, refuses calls on a handle inherited across
 * fork(), applies the default send timeout, and the accessors of messages
 * and buffers.
 *
 * Shared state and its rules:
 *  - struct zap_transport: @inflight/@closing/@shut are atomics (close
 *    protocol below); everything else is written once, at open.
 *  - fork_gen: bumped in the child of every fork() (pthread_atfork); a
 *    handle opened in another generation belongs to another process.
 *  - send_ctx: one ctx per thread for the default send timeout, never
 *    cancelled, only its deadline rewritten by its own thread.
 */
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
	atomic_bool shut;          /* zap_shutdown() or zap_close() began */
	atomic_bool shutdown_done; /* ops->shutdown called (once) */
	unsigned fork_gen;         /* fork_gen at open */
	pid_t pid;                 /* the opening process, for the reason */
	uint64_t send_timeout_ms;  /* for zap_send() without a ctx; 0: none */
};

static atomic_uint fork_gen;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void fork_child(void)
{
	atomic_fetch_add(&fork_gen, 1);
}

static void atfork_register(void)
{
	/* Cannot fail short of ENOMEM; then forked children are not caught,
	 * which is what every release before this one did. */
	(void)pthread_atfork(NULL, NULL, fork_child);
}

/*
 * Whether @t was opened in this process. A fork() child inherits the
 * parent's handles but not its threads, and the plugin instance's sockets,
 * locks and progress threads belong to the parent: any call from the child
 * would steal the parent's connections or wait on a lock no thread will
 * ever release. So the child's copy is refused (-EBADFD) and zap_close()
 * there releases nothing shared.
 */
static bool inherited(const struct zap_transport *t)
{
	return t->fork_gen != atomic_load_explicit(&fork_gen, memory_order_relaxed);
}

static int fail_inherited(const struct zap_transport *t)
{
	return zap__fail(-EBADFD,
			 "transport '%s' was opened by process %d and inherited "
			 "across fork(); a child must open its own",
			 t->plugin->name, (int)t->pid);
}

/* Whether @ops (of size ops->size) has a non-NULL optional op at @off. */
static void *optional_op(const struct zap_plugin_ops *ops, size_t off)
{
	void *fn;

	if (ops->size < off + sizeof(fn))
		return NULL;
	memcpy(&fn, (const char *)ops + off, sizeof(fn));
	return fn;
}
#define OPTIONAL_OP(ops, field)                       \
	((__typeof__((ops)->field))optional_op((ops), \
					       offsetof(struct zap_plugin_ops, field)))

int zap__open(const struct zap_prec *rec, const struct zap_open_args *args,
	      uint64_t send_timeout_ms, struct zap_transport **out)
{
	struct zap_transport *t;
	int rc;

	pthread_once(&atfork_once, atfork_register);
	if (!rec->desc)
		return zap__fail(ZAP_ENOTAVAIL,
				 "'%s' is not loaded in this process (isolated scan)",
				 rec->name);
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->plugin = rec->desc;
	t->ops = rec->desc->ops;
	t->fork_gen = atomic_load(&fork_gen);
	t->pid = getpid();
	t->send_timeout_ms = send_timeout_ms;
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

/*
 * Enter a call on @t: 0, or the error to return (recorded): -EBADFD in a
 * fork() child, -ESHUTDOWN once shut down or closing. Always inline: it is
 * most of every zap_recv()'s own work, and a call of its own cost 9
 * instructions a message.
 */
static inline __attribute__((always_inline)) int enter(struct zap_transport *t)
{
	if (inherited(t))
		return fail_inherited(t);
	atomic_fetch_add(&t->inflight, 1);
	if (atomic_load(&t->shut)) {
		atomic_fetch_sub(&t->inflight, 1);
		return zap__fail(-ESHUTDOWN, "transport '%s' was shut down",
				 t->plugin->name);
	}
	return 0;
}

/* ---- the default send timeout ------------------------------------------ */

static pthread_key_t send_ctx_key;
static pthread_once_t send_ctx_once = PTHREAD_ONCE_INIT;
static bool send_ctx_ok;
static _Thread_local struct zap_ctx *send_ctx_mine
	__attribute__((tls_model("initial-exec")));

static void send_ctx_free(void *c)
{
	/* At this thread's exit, on this thread: a send from a later
	 * destructor makes a new one. */
	send_ctx_mine = NULL;
	zap_ctx_free(c);
}

static void send_ctx_init(void)
{
	send_ctx_ok = pthread_key_create(&send_ctx_key, send_ctx_free) == 0;
}

/*
 * This thread's ctx for a zap_send() without one, its deadline set
 * @timeout_ms from now. Made once per thread (a ctx owns an eventfd, too
 * dear to make per send) and freed at thread exit. NULL if it cannot be
 * made: the caller fails the send rather than block without the limit the
 * application asked for.
 */
static struct zap_ctx *send_ctx(uint64_t timeout_ms)
{
	/* The key frees it at thread exit; the thread-local (initial-exec:
	 * no __tls_get_addr() call) finds it without pthread_once() and
	 * pthread_getspecific() on every send (bench/MEASUREMENTS.md,
	 * "recv-tls"). */
	struct zap_ctx *c = send_ctx_mine;

	if (!c) {
		pthread_once(&send_ctx_once, send_ctx_init);
		if (!send_ctx_ok || zap_ctx_new(&c))
			return NULL;
		if (pthread_setspecific(send_ctx_key, c)) {
			zap_ctx_free(c);
			return NULL;
		}
		send_ctx_mine = c;
	}
	zap_ctx_set_timeout(c, timeout_ms > UINT64_MAX / 1000000 ? UINT64_MAX
								 : timeout_ms * 1000000);
	return c;
}

static void leave(struct zap_transport *t)
{
	atomic_fetch_sub(&t->inflight, 1);
}

ZAP_EXPORT const char *zap_transport_name(const struct zap_transport *t)
{
	return t ? t->plugin->name : NULL;
}

ZAP_EXPORT int zap_transport_address(const struct zap_transport *t, char *buf, size_t len)
{
	int (*fn)(void *, char *, size_t);

	zap__clear_error();
	if (!t || !buf)
		return zap__fail(-EINVAL, "zap_transport_address: NULL argument");
	if (inherited(t))
		return fail_inherited(t);
	fn = OPTIONAL_OP(t->ops, address);
	if (!fn)
		return zap__fail(-EOPNOTSUPP, "transport '%s' has no host:port address",
				 t->plugin->name);
	return fn(t->tp, buf, len);
}

ZAP_EXPORT int zap_peer_path(const struct zap_transport *t, const char *peer, char *buf,
			     size_t len)
{
	int (*fn)(void *, const char *, char *, size_t);

	zap__clear_error();
	if (!t || !peer || !buf)
		return zap__fail(-EINVAL, "zap_peer_path: NULL argument");
	if (inherited(t))
		return fail_inherited(t);
	fn = OPTIONAL_OP(t->ops, peer_path);
	if (!fn)
		return zap__fail(-EOPNOTSUPP, "transport '%s' has no per-peer paths",
				 t->plugin->name);
	return fn(t->tp, peer, buf, len);
}

ZAP_EXPORT int zap_caps(const struct zap_transport *t, struct zap_caps *caps)
{
	struct zap_caps full;
	int rc;

	zap__clear_error();
	if (!t || !caps || caps->size < sizeof(caps->size))
		return zap__fail(-EINVAL, "zap_caps: NULL argument or bad caps->size");
	if (inherited(t))
		return fail_inherited(t);
	memset(&full, 0, sizeof(full));
	full.size = sizeof(full);
	rc = t->ops->caps(t->tp, &full);
	if (rc)
		return rc;
	return zap__copy_sized(caps, &full, sizeof(full));
}

/* The most messages one zap_send_burst() looks at (zap.h). */
#define ZAP_BURST_CALL_MAX 65536u

/*
 * enter() for a send, and the ctx of the default send timeout in *@ctx
 * when the caller gave none. On failure nothing is left entered. Always
 * inline: a call of its own cost every zap_send() 20 instructions.
 */
static inline __attribute__((always_inline)) int send_enter(struct zap_transport *t,
							    struct zap_ctx **ctx,
							    const char *fn)
{
	int rc = enter(t);

	if (rc)
		return rc;
	if (!*ctx && t->send_timeout_ms) {
		*ctx = send_ctx(t->send_timeout_ms);
		if (!*ctx) {
			leave(t);
			return zap__fail(
				-ENOMEM,
				"%s: cannot make the ctx of the default send timeout",
				fn);
		}
	}
	return 0;
}

ZAP_EXPORT int zap_send(struct zap_transport *t, const char *peer, const void *buf,
			size_t len, struct zap_ctx *ctx)
{
	int rc;

	zap__clear_error();
	if (!t || !peer || (!buf && len))
		return zap__fail(-EINVAL, "zap_send: NULL argument");
	rc = send_enter(t, &ctx, "zap_send");
	if (rc)
		return rc;
	rc = t->ops->send(t->tp, peer, buf, len, ctx);
	leave(t);
	return rc;
}

ZAP_EXPORT int zap_send_burst(struct zap_transport *t, const char *peer,
			      const struct zap_iov *msgs, unsigned int n,
			      struct zap_ctx *ctx)
{
	int (*fn)(void *, const char *, const struct zap_iov *, unsigned int,
		  struct zap_ctx *);
	int rc;

	zap__clear_error();
	if (!t || !peer || (!msgs && n))
		return zap__fail(-EINVAL, "zap_send_burst: NULL argument");
	if (!n)
		return 0;
	/* Bounded, so that looping on the rest of a long array stays linear;
	 * a later message without bytes ends the burst before it, and the
	 * next call fails on it. */
	if (n > ZAP_BURST_CALL_MAX)
		n = ZAP_BURST_CALL_MAX;
	for (unsigned int i = 0; i < n; i++)
		if (!msgs[i].buf && msgs[i].len) {
			if (!i)
				return zap__fail(-EINVAL,
						 "zap_send_burst: message has NULL bytes");
			n = i;
		}
	rc = send_enter(t, &ctx, "zap_send_burst");
	if (rc)
		return rc;
	fn = OPTIONAL_OP(t->ops, send_burst);
	if (fn) {
		rc = fn(t->tp, peer, msgs, n, ctx);
	} else {
		/* One send per message; stop at the first that fails. */
		unsigned int i = 0;
		while (i < n &&
		       !(rc = t->ops->send(t->tp, peer, msgs[i].buf, msgs[i].len, ctx)))
			i++;
		if (i)
			rc = (int)i;
	}
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
	rc = enter(t);
	if (rc)
		return rc;
	rc = t->ops->recv(t->tp, ctx, out);
	leave(t);
	return rc;
}

/* Set @shut and call ops->shutdown, once, whoever comes first. */
static void shut_down(struct zap_transport *t)
{
	atomic_store(&t->shut, true);
	if (!atomic_exchange(&t->shutdown_done, true))
		t->ops->shutdown(t->tp);
}

ZAP_EXPORT int zap_shutdown(struct zap_transport *t)
{
	zap__clear_error();
	if (!t)
		return zap__fail(-EINVAL, "zap_shutdown: NULL transport");
	if (inherited(t))
		return fail_inherited(t);
	shut_down(t);
	return 0;
}

ZAP_EXPORT void zap_close(struct zap_transport *t)
{
	if (!t || atomic_exchange(&t->closing, true))
		return;
	if (inherited(t)) {
		/*
		 * A fork() child's copy: free only the handle. The plugin
		 * instance is left alone on purpose: shutting it down or
		 * destroying it would act on sockets the parent still uses
		 * (shutdown(2) is shared across processes) and join threads
		 * that exist only in the parent. Its memory and descriptors
		 * (all close-on-exec) stay until this process calls exec()
		 * or exits.
		 */
		free(t);
		return;
	}
	shut_down(t);
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

ZAP_EXPORT const char *zap_msg_peer_id(const struct zap_msg *m)
{
	/* A plugin built before ABI 1.1 has a shorter struct zap_msg. */
	if (!m || m->size < offsetof(struct zap_msg, peer_id) + sizeof(m->peer_id))
		return NULL;
	return m->peer_id && m->peer_id[0] ? m->peer_id : NULL;
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

ZAP_EXPORT int zap_buffer_alloc(struct zap_transport *t, size_t size, struct zap_ctx *ctx,
				struct zap_buffer **out)
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
	rc = enter(t);
	if (rc)
		return rc;
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

ZAP_EXPORT int zap_pool_stats(const struct zap_transport *t, struct zap_pool_stats *stats)
{
	int (*fn)(void *, struct zap_pool_stats *);
	struct zap_pool_stats full;
	int rc;

	zap__clear_error();
	if (!t || !stats || stats->size < sizeof(stats->size))
		return zap__fail(-EINVAL, "zap_pool_stats: NULL argument or bad size");
	if (inherited(t))
		return fail_inherited(t);
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

/* For core/stats.c: the optional stats op into @full (zeroed, size set). */
int zap__transport_stats(const struct zap_transport *t, struct zap_stats *full)
{
	int (*fn)(void *, struct zap_stats *);

	if (inherited(t))
		return fail_inherited(t);
	fn = OPTIONAL_OP(t->ops, stats);
	if (!fn)
		return zap__fail(-EOPNOTSUPP, "transport '%s' keeps no counters",
				 t->plugin->name);
	return fn(t->tp, full);
}

/* For core/stats.c: the optional peers op over @n entries (zeroed, each
 * its size set). */
int zap__transport_peers(const struct zap_transport *t, struct zap_peer_info *arr,
			 size_t n)
{
	int (*fn)(void *, struct zap_peer_info *, size_t);

	if (inherited(t))
		return fail_inherited(t);
	fn = OPTIONAL_OP(t->ops, peers);
	if (!fn)
		return zap__fail(-EOPNOTSUPP, "transport '%s' does not list its peers",
				 t->plugin->name);
	return fn(t->tp, arr, n);
}

/* For core/stats.c: the optional events op, as the peers op. */
int zap__transport_events(const struct zap_transport *t, struct zap_event *arr, size_t n)
{
	int (*fn)(void *, struct zap_event *, size_t);

	if (inherited(t))
		return fail_inherited(t);
	fn = OPTIONAL_OP(t->ops, events);
	if (!fn)
		return zap__fail(-EOPNOTSUPP, "transport '%s' reports no events",
				 t->plugin->name);
	return fn(t->tp, arr, n);
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
