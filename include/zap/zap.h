/* SPDX-License-Identifier: MIT */
/*
 * libzap: move messages between hosts over the fastest path a machine has.
 *
 * Conventions for every function in this header:
 *  - Functions that can fail return int: 0 (or a count) on success and a
 *    negative errno on failure. Objects come back through an out-parameter
 *    that is left untouched on failure.
 *  - Destructors return void and accept NULL.
 *  - Structures the caller fills start with `size_t size`; set it to
 *    sizeof(the struct) so that the library can grow them compatibly.
 *  - Every function is thread-safe unless its comment says otherwise.
 *  - zap_strerror() turns any returned code into text; for the codes a call
 *    just returned on this thread it appends the detailed reason.
 *  - fork(): a transport belongs to the process that opened it. In a child
 *    every call on an inherited transport fails with -EBADFD (the reason
 *    says so) and zap_close() there frees only the handle; see zap_close().
 *    Open a new transport in the child. Sockets are close-on-exec.
 */
#ifndef ZAP_ZAP_H
#define ZAP_ZAP_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define ZAP_EXPORT __attribute__((visibility("default")))
#else
#define ZAP_EXPORT
#endif

/**
 * ZAP_ENOTAVAIL - "requested transport not available on this host".
 *
 * The one code libzap returns when a transport (or a facility of one, such
 * as device-visible buffers) does not exist or does not work on this host.
 * It is -ENODEV; libzap never returns -ENODEV for any other reason.
 */
#define ZAP_ENOTAVAIL (-ENODEV)

/** Largest message size a caller may set (zap_attr.max_msg_size or
 * ZAP_MAX_MSG_BYTES): 1 TiB; transports may clamp it lower (dpdk: 4 GiB - 1,
 * and half the address space on 32-bit builds). */
#define ZAP_MAX_MSG_LIMIT (1ull << 40)

/** Default largest message size, overridable by ZAP_MAX_MSG_BYTES. */
#define ZAP_DEFAULT_MAX_MSG_BYTES (64ull << 20)

/** Longest transport name, including the terminating NUL. */
#define ZAP_NAME_MAX 32

/** Longest peer address string ("[v6addr%ifname]:port"), with the NUL. */
#define ZAP_PEER_MAX 128

/* ------------------------------------------------------------------------ */
/* Errors and logging                                                        */
/* ------------------------------------------------------------------------ */

/**
 * zap_strerror() - describe an error code returned by libzap.
 * @err: a negative errno returned by a libzap call (positive values are
 *       treated as their negation).
 *
 * Return: a string valid until the next zap_strerror() call on this thread.
 * If @err is the code the last failing libzap call on this thread returned,
 * the text ends with that call's reason, e.g. "requested transport not
 * available on this host: dpdk: not configured (ZAP_DPDK_EAL_ARGS unset)".
 */
ZAP_EXPORT const char *zap_strerror(int err);

/**
 * zap_last_error() - the reason of the last failing libzap call on this
 * thread, without the generic text; "" when there is none.
 */
ZAP_EXPORT const char *zap_last_error(void);

/** Log levels, most severe first. ZAP_LOG_LEVEL takes their lower-case names. */
enum zap_log_level {
	ZAP_LOG_ERROR = 0,
	ZAP_LOG_WARN = 1,
	ZAP_LOG_INFO = 2,
	ZAP_LOG_DEBUG = 3,
};

/**
 * zap_log_fn - application log handler.
 * @level:  severity.
 * @domain: who speaks: "core", "loader", "pick" or a transport name.
 * @msg:    one line of text without a trailing newline.
 * @user:   the pointer given to zap_set_log_handler().
 *
 * Called from any thread, possibly concurrently; must not call libzap.
 */
typedef void (*zap_log_fn)(enum zap_log_level level, const char *domain, const char *msg,
			   void *user);

/**
 * zap_set_log_handler() - route libzap's log lines to @fn instead of stderr.
 * @fn:   the handler, or NULL to restore the stderr handler.
 * @user: passed back to @fn.
 */
ZAP_EXPORT void zap_set_log_handler(zap_log_fn fn, void *user);

/**
 * zap_set_log_level() - override ZAP_LOG_LEVEL for this process.
 *
 * Return: 0, or -EINVAL if @level is not one of enum zap_log_level.
 */
ZAP_EXPORT int zap_set_log_level(enum zap_log_level level);

/* ------------------------------------------------------------------------ */
/* Cancellation and deadlines                                                */
/* ------------------------------------------------------------------------ */

/**
 * struct zap_ctx - a cancellation token with an optional deadline.
 *
 * Passed to every call that may block. Any thread may fire it with
 * zap_ctx_cancel(); every call blocked on it then returns -ECANCELED
 * promptly, and so does every later call given it. When its deadline
 * passes, blocked and later calls return -ETIMEDOUT. Passing NULL instead
 * of a ctx means "block until done". A ctx may be shared by many calls.
 */
struct zap_ctx;

/**
 * zap_ctx_new() - create a context with no deadline.
 * Return: 0, -ENOMEM, or -EMFILE/-ENFILE when no wake-up descriptor can be
 * made.
 */
ZAP_EXPORT int zap_ctx_new(struct zap_ctx **out);

/**
 * zap_ctx_set_timeout() - set the deadline to now + @timeout_ns
 * (CLOCK_MONOTONIC). Replaces an earlier deadline.
 * Return: 0, or -EINVAL for a NULL ctx.
 */
ZAP_EXPORT int zap_ctx_set_timeout(struct zap_ctx *ctx, uint64_t timeout_ns);

/**
 * zap_ctx_set_deadline() - set an absolute CLOCK_MONOTONIC deadline in ns;
 * 0 removes it.
 * Return: 0, or -EINVAL for a NULL ctx.
 */
ZAP_EXPORT int zap_ctx_set_deadline(struct zap_ctx *ctx, uint64_t deadline_ns);

/** zap_ctx_cancel() - fire the context. Idempotent, async-signal-safe. */
ZAP_EXPORT void zap_ctx_cancel(struct zap_ctx *ctx);

/**
 * zap_ctx_err() - why the context is done.
 * Return: 0 while live (and for NULL), -ECANCELED once cancelled,
 * -ETIMEDOUT once the deadline has passed. Cancellation wins over expiry.
 */
ZAP_EXPORT int zap_ctx_err(const struct zap_ctx *ctx);

/** zap_ctx_free() - destroy a context no call is blocked on. Accepts NULL. */
ZAP_EXPORT void zap_ctx_free(struct zap_ctx *ctx);

/* ------------------------------------------------------------------------ */
/* Transports                                                                */
/* ------------------------------------------------------------------------ */

/** struct zap_transport - one open endpoint of one transport. Opaque. */
struct zap_transport;

/**
 * struct zap_caps - what a transport really does on this host.
 *
 * Filled from detection (probe) and, once open, from the instance; never
 * from wishes. Unknown numbers are 0.
 */
struct zap_caps {
	size_t size;           /**< sizeof(struct zap_caps), set by the caller */
	bool gpu_resident;     /**< received bytes never visit CPU-only memory */
	bool zero_copy;        /**< no memcpy between the wire and zap_recv()'s bytes */
	bool device_buffers;   /**< zap_buffer_alloc() gives device-visible memory */
	double min_latency_us; /**< measured floor one-way latency, 0 if unmeasured */
	uint64_t max_msg_size; /**< largest message zap_send()/zap_recv() accept */
};

/**
 * struct zap_attr - how to open a transport. Every field has an
 * environment default used when the field is 0/NULL (or @attr is NULL).
 */
struct zap_attr {
	size_t size;              /**< sizeof(struct zap_attr) */
	const char *listen;       /**< local address, "host:port"; env ZAP_LISTEN,
	                             default "0.0.0.0:0" (any address, any port;
	                             see zap_transport_address() for the address
	                             such a transport reports). default and uma
	                             also take a Unix-domain socket,
	                             "unix:/abs/path" or "unix:@abstract-name" */
	uint64_t max_msg_size;    /**< env ZAP_MAX_MSG_BYTES, default 64 MiB;
	                             1 to ZAP_MAX_MSG_LIMIT, else zap_pick()
	                             fails -EINVAL */
	uint64_t pool_bytes;      /**< buffer pool cap for transports with one
	                             (e.g. ZAP_UMA_POOL_BYTES for uma) */
	uint64_t send_timeout_ms; /**< limit of a zap_send() given no ctx;
	                             env ZAP_SEND_TIMEOUT_MS, default none;
	                             ZAP_TIMEOUT_NONE: none whatever the env */
	/* Appended after the members above (libzap reads them only when
	 * @size covers them; docs/versioning.md): TLS on the TCP wire (default,
	 * uma). Each NULL field takes its environment variable; a certificate
	 * from either makes every connection TLS 1.3 with mutual
	 * authentication, with no plaintext fallback (docs/wires.md). The
	 * variables are ignored in setuid/setgid programs (secure_getenv):
	 * those pass the attributes. */
	const char *tls_cert;  /**< PEM certificate (chain) of this endpoint;
	                             env ZAP_TLS_CERT; NULL/unset: plaintext */
	const char *tls_key;   /**< PEM private key of @tls_cert, a file not
	                             accessible by group or others (refused
	                             otherwise, as ssh does); env ZAP_TLS_KEY */
	const char *tls_ca;    /**< PEM CA bundle: peers whose chain verifies
	                             against it are trusted; env ZAP_TLS_CA */
	const char *tls_peers; /**< pin file: one "sha256:<hex>" per line, the
	                             SHA-256 of a trusted peer's DER
	                             SubjectPublicKeyInfo; env ZAP_TLS_PEERS.
	                             With a certificate, at least one of
	                             @tls_ca and @tls_peers is required */
};

/** zap_attr.send_timeout_ms: no default send timeout, even if the env sets one. */
#define ZAP_TIMEOUT_NONE UINT64_MAX

/** zap_pick() flag: fail instead of falling back (env spelling: "=name"). */
#define ZAP_PICK_STRICT 0x1u

/**
 * zap_pick() - open the best transport that matches a preference.
 * @pref:  preference string, or NULL to use ZAP_TRANSPORT (read once per
 *         process). Syntax, case-insensitive, blanks trimmed:
 *           ""  or "auto"      best-ranked transport whose probe succeeded
 *           "name"             that transport, else fall back (WARN logged)
 *           "a,b"              try a, then b, then fall back
 *           "^a,b"             best-ranked transport other than a and b
 *           "=name" / "=a,b"   strict: like ZAP_PICK_STRICT
 *         Ranks come from the plugins; the shipped order is
 *         gpudirect > dpdk > uma > default. Fallback goes to the best
 *         available transport ranked below the lowest-ranked one named.
 * @flags: 0 or ZAP_PICK_STRICT.
 * @attr:  NULL or open attributes (struct zap_attr).
 * @out:   the new transport; each call opens a new instance.
 *
 * The first call in a process scans the plugin directories, probes every
 * plugin once, and logs one short INFO line, "name=state" per transport
 * and the winner (ZAP_TRANSPORT_QUIET=1 silences that line only; the probe
 * reasons are at DEBUG level and in zap-info). A fallback is logged as one
 * WARN with its reasons. A failure returned to the caller is not logged.
 *
 * A transport whose open fails (its listen address is taken, say) is
 * treated like an unavailable one: without strict, the next candidate is
 * tried. A configuration error is not: a bad attribute or variable, or a
 * TLS file that is missing, unsafe or malformed, fails the pick with
 * -EINVAL whatever the preference, with no fallback (the next candidate
 * would read the same settings).
 *
 * Return: 0 on success;
 *  ZAP_ENOTAVAIL: strict and the requested transport is unavailable; or
 *                 not strict and every candidate was excluded, unavailable
 *                 or failed to open (the reason lists each, once);
 *  -EINVAL:       malformed preference, an unknown name in strict mode, a
 *                 bad attribute, a bad environment value, or a TLS setting
 *                 that cannot be used (the reason names the variable or
 *                 file); the same code under any preference;
 *  -EPERM:        a ZAP_TLS_* variable set in a setuid, setgid or
 *                 file-capability program, which does not read them: pass
 *                 the zap_attr tls_* fields instead (never plaintext);
 *  -ENOMEM;
 *  strict only: the open error of the transport asked for (-EADDRINUSE,
 *  -EADDRNOTAVAIL, -EACCES, ...).
 */
ZAP_EXPORT int zap_pick(const char *pref, unsigned flags, const struct zap_attr *attr,
			struct zap_transport **out);

/** zap_transport_name() - canonical lower-case name ("default", "uma"...). */
ZAP_EXPORT const char *zap_transport_name(const struct zap_transport *t);

/**
 * zap_transport_address() - the bound local address, as a peer string other
 * endpoints can zap_send() to (e.g. "127.0.0.1:40123").
 * @buf, @len: where to write it (ZAP_PEER_MAX is always enough).
 *
 * A wildcard listen address ("0.0.0.0:0", "[::]:0", the default) is not
 * sendable, so the socket transports report instead the address this host
 * would use as the source of its default route (found with a connect() of
 * a UDP socket, which sends nothing), with the bound port: on a host whose
 * default route leaves through 192.0.2.2, "0.0.0.0:0" reports
 * "192.0.2.2:<port>". The transport still accepts on every address. With
 * no default route it reports loopback. A peer on another network, or one
 * that must use a particular interface, should be given an address
 * explicitly: listen on it (attr.listen / ZAP_LISTEN).
 *
 * The socket transports also dial from the host they listen on (so that a
 * peer sees the address it can reply to). An endpoint listening on a
 * loopback address therefore reaches only this host: zap_send() to
 * another host fails -ENETUNREACH, "bound to 127.0.0.1: cannot reach
 * 192.0.2.77:7000 from there".
 *
 * Return: 0; -ENOSPC if @len is too small; -EOPNOTSUPP if the transport has
 * no address of that form; -EBADFD in a fork() child.
 */
ZAP_EXPORT int zap_transport_address(const struct zap_transport *t, char *buf,
				     size_t len);

/**
 * zap_peer_path() - how messages to @peer travel right now.
 * @peer: a peer string as zap_send() takes it.
 * @buf, @len: where to write the path's name (16 bytes are enough):
 *   "shm"  shared-memory rings: a peer on this host that may share memory
 *          with us (default and uma; see "Same host" in docs/wires.md);
 *   "unix" a Unix-domain socket; "tcp" a TCP connection.
 * The path is chosen per peer when the connection is made; with TLS the
 * upgrade to "shm" happens only after the peer authenticated.
 *
 * Return: 0; -ENOTCONN if there is no connection to @peer (none yet, or it
 * closed); -ENOSPC if @len is too small; -EOPNOTSUPP if the transport has
 * no per-peer paths; -EINVAL for NULL arguments; -EBADFD in a fork() child.
 */
ZAP_EXPORT int zap_peer_path(const struct zap_transport *t, const char *peer, char *buf,
			     size_t len);

/**
 * zap_caps() - copy @t's capabilities into @caps (caller sets caps->size).
 * Return: 0, or -EINVAL for NULL arguments or a size below the first member.
 */
ZAP_EXPORT int zap_caps(const struct zap_transport *t, struct zap_caps *caps);

/**
 * zap_send() - deliver one message to @peer.
 * @peer: the destination, in the transport's address form ("host:port" for
 *        default and uma); a peer string from zap_msg_peer() is valid.
 *        With TLS on (ZAP_TLS_CERT), "host:port#sha256:<hex>" reaches
 *        only the peer that proves that key (zap_msg_peer() has that
 *        form), else the send fails with -EACCES. default and uma also
 *        reach a Unix-domain socket, "unix:/abs/path" (a socket file) or
 *        "unix:@name" (a Linux abstract name); a peer that connected
 *        over one gets a peer string its credentials back (see
 *        docs/wires.md), so replies work whichever side dialed.
 * @buf, @len: the message; the caller may reuse @buf once this returns.
 * @ctx:  cancellation/deadline, or NULL to block until sent.
 *
 * Order: a message whose zap_send() returned before another zap_send() to
 * the same peer began arrives first (so one thread's messages to a peer
 * arrive in the order it sent them). Sends that overlap in time carry no
 * order between them: several threads may send at once, to the same or
 * different peers, and a small message may arrive before a large one
 * whose send began earlier (the default transport sends large messages
 * in parts, with other messages between them: docs/wires.md).
 *
 * Blocking: a send waits while the transport cannot take the message,
 * which for TCP means once a few MB are queued to a peer that is not
 * reading. With @ctx NULL that wait is unbounded unless a default send
 * timeout is set (attr.send_timeout_ms or ZAP_SEND_TIMEOUT_MS), after
 * which the send fails -ETIMEDOUT. A send stopped part-way through a
 * message (timeout, cancel, shutdown) never delivers a partial message:
 * the peer drops it and the next send opens a fresh connection.
 *
 * Return: 0 once the transport owns the message (queued to the kernel or
 * acknowledged, per transport);
 *  -EMSGSIZE:   @len exceeds the maximum message size;
 *  -EINVAL:     malformed peer address (or a #sha256: key without TLS);
 *  -EACCES:     TLS: the peer was refused (untrusted key, not the key
 *               the peer string requires) or refused this endpoint;
 *  -EHOSTUNREACH/-ECONNREFUSED/-ECONNRESET/-EPIPE: the peer cannot be
 *               reached or went away (-ENOENT: no socket at a unix: path;
 *               -ENETUNREACH: no route, also from a loopback listener to
 *               another host, see zap_transport_address());
 *  -EPROTO:     the far end answered but is not a peer of this transport
 *               (another protocol, or an incompatible libzap wire
 *               version); the reason says what it sent, e.g. "the peer
 *               requires TLS" to an endpoint without ZAP_TLS_CERT;
 *  -ECANCELED/-ETIMEDOUT: @ctx fired, or the default send timeout passed;
 *  -ESHUTDOWN:  zap_shutdown() or zap_close() was called on @t;
 *  -EBADFD:     @t was inherited across fork() (see zap_close());
 *  -ENOMEM.
 */
ZAP_EXPORT int zap_send(struct zap_transport *t, const char *peer, const void *buf,
			size_t len, struct zap_ctx *ctx);

/** struct zap_iov - one whole message of a zap_send_burst(). */
struct zap_iov {
	const void *buf; /**< may be NULL when @len is 0 */
	size_t len;
};

/**
 * zap_send_burst() - deliver several messages to @peer, in order, with as
 * few system calls as the transport can (default and uma: up to 33
 * messages per sendmsg(); like rte_eth_tx_burst(), or fi_send() with
 * FI_MORE). Each element of @msgs is one message, received as zap_send()
 * would deliver it; the result is the same as calling zap_send() on them
 * one after another from this thread, less the calls.
 * @n: how many; 0 returns 0 (one call takes at most 65536).
 *
 * Blocking: waits, as zap_send() does, until the transport takes the
 * first message. After that it waits only to finish a message it has
 * started, never to start another: it returns early, with the count taken
 * so far, when the transport has no room for the next, when another
 * thread is sending to @peer at the same time (the burst then joins that
 * thread's system call with its first message), when a later message
 * cannot be sent (too large for the peer, or the connection failed under
 * it), and, with default and uma, after 528 messages, so that other
 * threads' sends to @peer get their turn. A message it returns as not
 * taken was not delivered, not even in part, so the usual loop is:
 *
 *   for (unsigned i = 0; i < n;) {
 *       int k = zap_send_burst(t, peer, msgs + i, n - i, ctx);
 *       if (k < 0)
 *           return k;  // msgs[i] failed as zap_send() would have
 *       i += k;
 *   }
 *
 * Transports without a burst operation (dpdk, gpudirect, plugins before
 * ABI 1.3) get a loop of zap_send() calls, which waits for each message.
 *
 * Return: the number of messages, from the first, the transport now owns
 * (1 to @n), or a negative errno when it took none: zap_send()'s errors for
 * @msgs[0], and -EINVAL also for NULL @msgs with @n above 0 (a later
 * message with NULL bytes and a length ends the burst before it).
 */
ZAP_EXPORT int zap_send_burst(struct zap_transport *t, const char *peer,
			      const struct zap_iov *msgs, unsigned int n,
			      struct zap_ctx *ctx);

/** struct zap_msg - one received message, owned by the caller until released. */
struct zap_msg;

/**
 * zap_recv() - wait for the next message from any peer.
 * Return: 0 and *@out; -ECANCELED/-ETIMEDOUT when @ctx fires; -ESHUTDOWN
 * once zap_shutdown() or zap_close() was called on @t (also while messages
 * are still queued: they are dropped at zap_close()); -EBADFD in a fork()
 * child; -ENOMEM.
 */
ZAP_EXPORT int zap_recv(struct zap_transport *t, struct zap_ctx *ctx,
			struct zap_msg **out);

/** zap_msg_data() - the message bytes (may be device-visible memory). */
ZAP_EXPORT const void *zap_msg_data(const struct zap_msg *m);

/** zap_msg_len() - the message length in bytes. */
ZAP_EXPORT size_t zap_msg_len(const struct zap_msg *m);

/**
 * zap_msg_peer() - the sender, as a string zap_send() on the receiving
 * transport accepts to reply.
 */
ZAP_EXPORT const char *zap_msg_peer(const struct zap_msg *m);

/**
 * zap_msg_peer_id() - the sender's authenticated identity: on a TLS
 * connection (ZAP_TLS_CERT), the SHA-256 of the key it proved, as
 * "sha256:<64 hex digits>" (the form of a ZAP_TLS_PEERS line); the same key
 * ends zap_msg_peer()'s string ("host:port#sha256:<hex>"), so a reply goes
 * to that key only. On a plaintext Unix-domain connection (the default
 * transport's unix: peers) the kernel's credentials of the peer process
 * (SO_PEERCRED), as "uid=<uid> gid=<gid> pid=<pid>".
 * Return: the fingerprint or credentials, valid until zap_msg_release();
 * NULL for a plaintext TCP connection, a transport without
 * authentication, or NULL @m.
 */
ZAP_EXPORT const char *zap_msg_peer_id(const struct zap_msg *m);

/**
 * zap_msg_device_ptr() - the address a GPU kernel may read the bytes at, or
 * NULL when they are not device-visible.
 */
ZAP_EXPORT void *zap_msg_device_ptr(const struct zap_msg *m);

/**
 * zap_msg_release() - hand the message's memory back to its transport.
 * Valid also after the transport was closed. Accepts NULL.
 */
ZAP_EXPORT void zap_msg_release(struct zap_msg *m);

/**
 * zap_shutdown() - stop @t without freeing it.
 *
 * Every call blocked on @t in any thread (zap_send(), zap_recv(),
 * zap_buffer_alloc()) returns -ESHUTDOWN promptly, and so does every later
 * call. @t stays valid, so threads may keep calling it until they see
 * -ESHUTDOWN and leave; then one thread calls zap_close(), which frees it.
 * The usual pattern for a server whose worker threads loop on zap_recv():
 *
 *   zap_shutdown(t);       // workers' zap_recv() return -ESHUTDOWN
 *   join the workers;      // nothing touches t after this
 *   zap_close(t);
 *
 * Idempotent and thread-safe (not concurrent with zap_close()). Messages
 * and buffers already received stay valid until released.
 *
 * Return: 0; -EINVAL for NULL; -EBADFD in a fork() child (nothing is done:
 * shutting down there would stop the parent's transport).
 */
ZAP_EXPORT int zap_shutdown(struct zap_transport *t);

/**
 * zap_close() - close and free @t. Calls blocked in zap_send()/zap_recv()
 * on @t in other threads return -ESHUTDOWN first (zap_close() implies
 * zap_shutdown()); zap_close() waits for them to leave. Messages and
 * buffers still held stay valid until released. Accepts NULL. @t must not
 * be used once this returns, so a thread that may still call @t is a bug:
 * use zap_shutdown() first and join such threads.
 *
 * In a fork() child, on a transport the parent opened, zap_close() frees
 * only the handle: the plugin instance (its memory, sockets, listening
 * socket) is deliberately leaked until exec() or exit, since releasing it
 * would shut down sockets the parent still uses and wait for threads that
 * exist only in the parent. Every descriptor libzap makes is close-on-exec,
 * and the child never accepts or reads on the inherited sockets.
 */
ZAP_EXPORT void zap_close(struct zap_transport *t);

/* ------------------------------------------------------------------------ */
/* Buffers                                                                   */
/* ------------------------------------------------------------------------ */

/** struct zap_buffer - memory from a transport's pool. */
struct zap_buffer;

/**
 * zap_buffer_alloc() - take a buffer of at least @size bytes from @t's pool.
 * Blocks while the pool is full until a buffer is released or @ctx fires.
 *
 * Return: 0 and *@out; -ESHUTDOWN after zap_shutdown(); -EBADFD in a fork()
 * child;
 *  ZAP_ENOTAVAIL: @t has no pool of its own (e.g. default: use your memory);
 *  -EMSGSIZE:  @size exceeds the pool's largest size class;
 *  -ECANCELED/-ETIMEDOUT: @ctx fired while the pool was full;
 *  -ENOMEM:    the backing allocation failed.
 */
ZAP_EXPORT int zap_buffer_alloc(struct zap_transport *t, size_t size, struct zap_ctx *ctx,
				struct zap_buffer **out);

/** zap_buffer_bytes() - CPU address of the buffer (NULL for NULL). */
ZAP_EXPORT void *zap_buffer_bytes(const struct zap_buffer *b);

/** zap_buffer_len() - the size asked for (not the size class). */
ZAP_EXPORT size_t zap_buffer_len(const struct zap_buffer *b);

/**
 * zap_buffer_device_ptr() - the device address of the buffer, or NULL when
 * the GPU cannot use it.
 */
ZAP_EXPORT void *zap_buffer_device_ptr(const struct zap_buffer *b);

/**
 * zap_buffer_release() - give the buffer back. A second release of the same
 * buffer, also two racing from different threads, is a no-op as long as the
 * pool has not handed that buffer out again (like free(), a handle kept
 * past its release is a bug: once reused it names the new owner's buffer).
 * Valid after the transport was closed. Accepts NULL.
 */
ZAP_EXPORT void zap_buffer_release(struct zap_buffer *b);

/** struct zap_pool_stats - figures of a transport's buffer pool. */
struct zap_pool_stats {
	size_t size;         /**< sizeof(struct zap_pool_stats) */
	uint64_t cap;        /**< most bytes the pool may own */
	uint64_t owned;      /**< bytes allocated from the backing memory now
	                           (in use plus cached for reuse) */
	uint64_t in_use;     /**< bytes of size classes handed out now */
	uint64_t high_water; /**< most bytes ever in use at once */
	uint64_t allocs;     /**< buffers handed out so far */
	uint64_t waits;      /**< allocations that had to wait for room */
};

/**
 * zap_pool_stats() - copy @t's pool figures into @stats (caller sets
 * stats->size).
 * Return: 0; ZAP_ENOTAVAIL when @t has no pool; -EINVAL.
 */
ZAP_EXPORT int zap_pool_stats(const struct zap_transport *t,
			      struct zap_pool_stats *stats);

/**
 * zap_pool_bytes() - bytes currently owned by @t's buffer pool (the
 * seed's PoolBytes; zap_pool_stats() has the other figures).
 * Return: the count, or ZAP_ENOTAVAIL when @t has no pool.
 */
ZAP_EXPORT int64_t zap_pool_bytes(const struct zap_transport *t);

/* ------------------------------------------------------------------------ */
/* Registered transports and the load report                                 */
/* ------------------------------------------------------------------------ */

/**
 * zap_registered() - the transports this process can attempt: the built-in
 * default plus every plugin that loaded with a valid descriptor (whatever
 * its probe said), best rank first.
 * @names: set to a NULL-terminated array owned by libzap, valid for the
 *         life of the process.
 * Return: the number of names, or a negative errno if the scan failed.
 */
ZAP_EXPORT int zap_registered(const char *const **names);

/** Outcome of one plugin candidate. */
enum zap_plugin_state {
	ZAP_PLUGIN_LOADED = 0,    /**< valid and its probe said OK */
	ZAP_PLUGIN_NOT_PRESENT,   /**< valid; the hardware/config is absent */
	ZAP_PLUGIN_ERROR,         /**< valid; probe found something broken,
	                                 crashed or hung, or the plugin could
	                                 not be loaded into this process */
	ZAP_PLUGIN_NO_SYMBOL,     /**< no zap_plugin_v<ABI> descriptor */
	ZAP_PLUGIN_ABI_MISMATCH,  /**< built for another ABI major */
	ZAP_PLUGIN_INVALID,       /**< descriptor or ops table short, a
	                                 mandatory op missing, name mismatch */
	ZAP_PLUGIN_REFUSED,       /**< unsafe file or directory (owner, mode,
	                                 symbolic link, not a regular file) */
	ZAP_PLUGIN_SHADOWED,      /**< same name found in an earlier directory */
	ZAP_PLUGIN_DLOPEN_FAILED, /**< the dynamic loader rejected the file */
};

/** zap_plugin_state_name() - "loaded", "not present", ... ; "?" if unknown. */
ZAP_EXPORT const char *zap_plugin_state_name(enum zap_plugin_state s);

/** struct zap_report_entry - one row of the load report. */
struct zap_report_entry {
	size_t size;      /**< sizeof(struct zap_report_entry) */
	const char *name; /**< transport name ("" if unreadable) */
	const char *path; /**< file, or "(built-in)" */
	enum zap_plugin_state state;
	const char *reason;   /**< one line; "" when loaded */
	const char *detail;   /**< multi-line probe detail for -v, or "" */
	const char *version;  /**< plugin version string, or "" */
	int rank;             /**< higher is preferred; 0 if unknown */
	bool builtin;         /**< compiled into libzap */
	struct zap_caps caps; /**< from the probe; zeroed unless loaded */
};

/** struct zap_dir_entry - one plugin directory searched, in order. */
struct zap_dir_entry {
	size_t size; /**< sizeof(struct zap_dir_entry) */
	const char *path;
	const char *source; /**< "program" (zap_scan_attr.plugin_path),
	                         "ZAP_PLUGIN_PATH", "ZAP_PLUGIN_DIR" or "built-in" */
	const char *status; /**< "ok", "missing", or "refused: <why>" */
};

/** Flags for struct zap_scan_attr. */
#define ZAP_SCAN_ISOLATE \
	0x1u /**< probe out of process (the default; even
                                     with ZAP_PROBE_INPROCESS=1) */
#define ZAP_SCAN_INPROCESS \
	0x2u /**< load and probe every plugin in this
                                     process (for programs that cannot spawn) */

/** struct zap_scan_attr - how to scan plugins (see zap_scan()). */
struct zap_scan_attr {
	size_t size;               /**< sizeof(struct zap_scan_attr) */
	unsigned flags;            /**< ZAP_SCAN_ISOLATE or ZAP_SCAN_INPROCESS */
	unsigned probe_timeout_ms; /**< out-of-process probe limit; 0: 5000 */
	/**
	 * NULL, or a ':'-separated list of plugin directories the program
	 * itself chooses, searched before ZAP_PLUGIN_PATH (source "program"
	 * in the report). Unlike ZAP_PLUGIN_PATH it is honoured in setuid and
	 * file-capability programs: it comes from the program, not its caller.
	 */
	const char *plugin_path;
};

/**
 * zap_scan() - scan and probe plugins now, with options.
 *
 * Optional: the first zap_pick() or report call scans with defaults.
 *
 * By default every candidate is loaded and probed in a process of its own,
 * all at once: one helper (zap-probe, in the library's libexec directory,
 * started with posix_spawn()) forks a child per candidate. A plugin that
 * crashes or hangs is
 * reported as ZAP_PLUGIN_ERROR ("probe crashed: signal 11", "probe timed
 * out after N ms") and the program goes on. This process then loads only
 * the plugin a pick chooses, when it first chooses it, after checking that
 * its file is still the one probed. ZAP_PROBE_INPROCESS=1 (ignored in
 * setuid and file-capability programs) or ZAP_SCAN_INPROCESS loads and
 * probes every plugin in this process instead, for programs that cannot
 * start processes; a plugin that crashes then takes the program down.
 *
 * Return: 0; -EALREADY if the scan already ran; -EINVAL for bad @attr
 * (unknown flags, or both flags); -ENOMEM.
 */
ZAP_EXPORT int zap_scan(const struct zap_scan_attr *attr);

/**
 * zap_report_count() - number of rows in the load report (scans first).
 * Return: the count, or a negative errno if the scan failed.
 */
ZAP_EXPORT int zap_report_count(void);

/**
 * zap_report_get() - copy row @index of the load report into @e (caller
 * sets e->size). Strings stay valid for the life of the process.
 * Return: 0; -ERANGE past the end; -EINVAL for a bad @e.
 */
ZAP_EXPORT int zap_report_get(size_t index, struct zap_report_entry *e);

/**
 * zap_report_dir_count() - number of plugin directories searched (scans
 * first).
 * Return: the count.
 */
ZAP_EXPORT int zap_report_dir_count(void);

/**
 * zap_report_dir_get() - copy directory @index, in search order, into @d
 * (caller sets d->size). Strings stay valid for the life of the process.
 * Return: 0; -ERANGE past the end; -EINVAL for a bad @d.
 */
ZAP_EXPORT int zap_report_dir_get(size_t index, struct zap_dir_entry *d);

/** struct zap_choice - what zap_pick() would do now, and why. */
struct zap_choice {
	size_t size;             /**< sizeof(struct zap_choice) */
	char name[ZAP_NAME_MAX]; /**< the transport that would be opened */
	bool fallback;           /**< not what was asked for */
	char reason[512];        /**< one line */
};

/**
 * zap_pick_explain() - decide like zap_pick() without opening anything and
 * without the first-pick log line and without loading any plugin into this
 * process (it answers from the probes).
 * Return: 0 and @out filled (out->fallback tells whether the request is
 * met: true when the named transports are unavailable or all unknown, and
 * out->reason then says why); ZAP_ENOTAVAIL or -EINVAL as zap_pick() would,
 * with out->reason set. It opens nothing, so it cannot foresee an open
 * failure.
 */
ZAP_EXPORT int zap_pick_explain(const char *pref, unsigned flags, struct zap_choice *out);

/** Where a variable's value came from (struct zap_env_entry.source). */
enum zap_env_source {
	ZAP_ENV_DEFAULT = 0, /**< unset or empty: the default */
	ZAP_ENV_SET = 1,     /**< set in the environment, and valid */
	ZAP_ENV_IGNORED = 2, /**< set, ignored in this AT_SECURE program */
	ZAP_ENV_INVALID = 3, /**< set and refused: @reason says why */
};

/**
 * struct zap_env_entry - one ZAP_* variable of libzap's configuration
 * registry (docs/environment.md), as zap_env_get() reads it now.
 */
struct zap_env_entry {
	size_t size;         /**< sizeof(struct zap_env_entry) */
	const char *name;    /**< "ZAP_..." */
	const char *type;    /**< bool, size, count, milliseconds,
	                          microseconds, octal, enum, string, list */
	const char *owner;   /**< core, tcp, tls, cuda, uma, gpudirect, dpdk */
	const char *def;     /**< the default, as the docs say it */
	const char *setuid;  /**< in an AT_SECURE (setuid, setgid,
	                          file-capability) program: "honoured",
	                          "ignored" or "refused" (the open fails) */
	const char *doc;     /**< one line */
	uint64_t min, max;   /**< numeric types: the range; strings: max is
	                          the longest value + 1 */
	const char *choices; /**< enum: "a, b, c"; else NULL */
	const char *value;   /**< the environment's value, or NULL when
	                          unset or empty (getenv()'s string) */
	int source;          /**< enum zap_env_source */
	char reason[256];    /**< ZAP_ENV_INVALID: the reason, naming it */
};

/** zap_env_count() - the number of variables in the registry (since 0.2). */
ZAP_EXPORT size_t zap_env_count(void);

/**
 * zap_env_get() - variable @index of the registry, read now (caller sets
 * e->size); since 0.2 (symbol version LIBZAP_0.2). Strings other than @value stay valid for the life of the
 * process; @value until the environment changes.
 * Return: 0; -ERANGE past the end; -EINVAL for a bad @e.
 */
ZAP_EXPORT int zap_env_get(size_t index, struct zap_env_entry *e);

/* ------------------------------------------------------------------------ */
/* What an operator sees: counters, peers, events, metrics (since 0.3)      */
/* ------------------------------------------------------------------------ */

/**
 * enum zap_close_reason - why a connection ended (struct
 * zap_stats.conns_closed is indexed by it). Each connection a transport
 * dialed or accepted ends exactly once, under one reason, also when it is
 * refused during its handshake. Later releases may add reasons (up to
 * ZAP_CLOSE_REASON_SLOTS); treat an unknown one like ZAP_CLOSE_OTHER.
 */
enum zap_close_reason {
	ZAP_CLOSE_OTHER = 0,    /**< none below: out of memory, a local error */
	ZAP_CLOSE_PEER_EOF,     /**< closed in order (FIN): the peer closed or
	                               retired it, or we retired it */
	ZAP_CLOSE_PEER_RESET,   /**< reset or socket error (a peer that died) */
	ZAP_CLOSE_IDLE,         /**< no frame byte for ZAP_TCP_IDLE_MS */
	ZAP_CLOSE_STALL,        /**< a partial frame stalled ZAP_TCP_STALL_MS */
	ZAP_CLOSE_EVICTED,      /**< made room at the descriptor cap */
	ZAP_CLOSE_PROTOCOL,     /**< malformed frame or handshake */
	ZAP_CLOSE_OVERSIZE,     /**< a frame above ZAP_MAX_MSG_BYTES */
	ZAP_CLOSE_TLS,          /**< TLS handshake failed or a key was refused */
	ZAP_CLOSE_IDENTITY,     /**< the handshake claimed an address or
	                               identity the connection does not prove */
	ZAP_CLOSE_HANDSHAKE,    /**< the handshake did not finish in time, or
	                               was shed (too many at once) */
	ZAP_CLOSE_SEND_ABORTED, /**< our send's ctx fired mid-frame or while it
	                             dialed */
	ZAP_CLOSE_SHUTDOWN,     /**< zap_close() of this transport */
	ZAP_CLOSE_REASON_COUNT  /**< the number of reasons this header knows */
};

/** Room in struct zap_stats.conns_closed for reasons added later. */
#define ZAP_CLOSE_REASON_SLOTS 32

/**
 * zap_close_reason_name() - "peer_eof", "idle", ... (lower case, usable as
 * a metric label); "other" for an unknown value. Since 0.3.
 */
ZAP_EXPORT const char *zap_close_reason_name(int reason);

/**
 * struct zap_stats - a transport's counters since it was opened (totals,
 * never reset) and its present state (gauges). Caller sets @size; libzap
 * writes only members within it, so the struct grows compatibly. A
 * transport fills what applies to it and leaves the rest 0:
 * docs/metrics.md says which members each one fills.
 */
struct zap_stats {
	size_t size; /**< sizeof(struct zap_stats) */
	/* traffic: whole messages, payload bytes (no headers) */
	uint64_t msgs_sent;      /**< messages the transport took (zap_send()
	                              returned 0, or counted by zap_send_burst()) */
	uint64_t bytes_sent;     /**< their payload bytes */
	uint64_t msgs_received;  /**< complete messages received (queued for
	                              zap_recv(), taken or not) */
	uint64_t bytes_received; /**< their payload bytes */
	/* connections */
	uint64_t conns_dialed;   /**< connections we opened (connect() done) */
	uint64_t conns_accepted; /**< connections a peer opened to us */
	uint64_t conns_open;     /**< gauge: dialed + accepted - closed */
	uint64_t conns_closed[ZAP_CLOSE_REASON_SLOTS]; /**< by enum
	                              zap_close_reason, handshake refusals
	                              included */
	/* the same-host upgrade */
	uint64_t shm_upgrades; /**< connections that moved onto shared memory
	                              (each end counts its own) */
	uint64_t shm_refused;  /**< same-host upgrades offered or tried that
	                              did not happen (policy, limits, failures) */
	/* messages lost */
	uint64_t drops_partial;  /**< partly received messages dropped: the
	                              peer closed, reset or stalled mid-message */
	uint64_t drops_shutdown; /**< gauge: messages received but not taken,
	                              which zap_close() will drop; 0 before
	                              zap_shutdown() */
	/* queues and budgets, now */
	uint64_t rxq_msgs;      /**< messages waiting for zap_recv() */
	uint64_t rxq_bytes;     /**< their bytes, against @rxq_limit */
	uint64_t rxq_limit;     /**< ZAP_TCP_RX_QUEUE_BYTES */
	uint64_t partial_bytes; /**< memory held by partly received messages,
	                              against @partial_limit */
	uint64_t partial_limit; /**< ZAP_TCP_PARTIAL_BYTES */
	uint64_t peers;         /**< gauge: peers with a connection */
	uint64_t events_lost;   /**< events zap_events() will never see: the
	                             queue was full (the oldest go first) */
	/* Appended after 0.3.0: a caller built with the older, smaller
	 * @size does not get these (and a plugin writes them only when the
	 * host's size covers them). */
	uint64_t retransmits;     /**< frames sent again because no
	                               acknowledgement came in time or the
	                               peer reported a hole (dpdk) */
	uint64_t peers_forgotten; /**< peers dropped from the peer table:
	                               idle past twice the peer timeout, or
	                               evicted to make room (dpdk) */
	uint64_t frames_refused;  /**< received frames refused as not
	                               belonging to any stream this end
	                               accepts: malformed, from a source that
	                               never proved it receives at its address
	                               (spoofed; answered with a challenge),
	                               of a retired or stale stream, or with
	                               the peer table full (dpdk) */
	uint64_t credit_waits;    /**< messages whose send had to wait for a
	                               credit: the peer had not yet given back
	                               a receive slot (gpudirect) */
	uint64_t pinned_bytes;    /**< gauge: memory registered with the NIC
	                               for the transport's queue pairs, receive
	                               slots and staging (gpudirect) */
};

/**
 * zap_stats() - copy @t's counters into @out (caller sets out->size).
 * Since 0.3. Cheap enough to call every second: it takes the transport's
 * table lock briefly, never a lock of the send or receive path.
 * Return: 0; -EINVAL for NULL arguments or a size below the first member;
 * -EOPNOTSUPP if the transport keeps no counters (plugins older than
 * plugin ABI 1.5, and dpdk and gpudirect today); -EBADFD in a fork() child.
 */
ZAP_EXPORT int zap_stats(const struct zap_transport *t, struct zap_stats *out);

/** Longest identity string of struct zap_peer_info, with the NUL. */
#define ZAP_PEER_ID_MAX 72

/**
 * struct zap_peer_info - one connection to a peer, as zap_peer_list()
 * reports it. A peer usually has one; while a connection replaces
 * another (both ends dialed at once, a restart) it may show twice.
 */
struct zap_peer_info {
	size_t size;                    /**< sizeof(struct zap_peer_info) */
	char peer[ZAP_PEER_MAX];        /**< the peer string, as zap_msg_peer() */
	char identity[ZAP_PEER_ID_MAX]; /**< what the connection proves: with
	                                   TLS the key, "sha256:<hex>"; on a
	                                   Unix socket the credentials,
	                                   "uid=U gid=G pid=P"; "" on plaintext
	                                   TCP (only the source address) */
	char path[16];                  /**< "tcp", "unix" or "shm", as
	                                   zap_peer_path() */
	bool tls;                       /**< TLS-authenticated (also on "shm") */
	bool dialed;                    /**< we opened it; else the peer did */
	uint64_t conn_id;               /**< unique among @t's connections: tells
	                                   two connections to one peer apart */
	uint64_t msgs_sent, bytes_sent; /**< on this connection */
	uint64_t msgs_received, bytes_received;
	uint64_t idle_ms;   /**< since the last frame byte either way
	                                   (a few ms coarse) */
	int64_t rtt_us;     /**< the kernel's smoothed round-trip
	                                   estimate (TCP_INFO); -1 where there is
	                                   none (Unix sockets, shared memory
	                                   keeps the TCP one) */
	int64_t rtt_var_us; /**< its variation; -1 with @rtt_us */
};

/**
 * zap_peer_list() - describe @t's current peers. Since 0.3.
 * @out: NULL with @n 0 (just count), or an array of @n entries; the caller
 *       sets out[0].size to sizeof(struct zap_peer_info), which is also
 *       taken as the distance between entries.
 * @n:   room in @out (at most 1048576 is used).
 *
 * A snapshot taken under the transport's table lock: peers may come and go
 * right after.
 * Return: the number of connections now (which may exceed @n: the first @n
 * are filled; call again with more room); -EINVAL for a NULL @out with @n
 * above 0, or out[0].size below the first member; -EOPNOTSUPP as
 * zap_stats(); -ENOMEM; -EBADFD in a fork() child.
 */
ZAP_EXPORT int zap_peer_list(const struct zap_transport *t, struct zap_peer_info *out,
			     size_t n);

/**
 * zap_metrics_render() - @t's counters (zap_stats()) and peers
 * (zap_peer_list()) in the Prometheus text exposition format 0.0.4, for a
 * metrics endpoint. Since 0.3. Every sample carries the labels
 * transport="<name>" and endpoint="<zap_transport_address()>"; per-peer
 * samples also peer, identity and path. docs/metrics.md lists the names.
 * @buf, @len: where to write, NUL-terminated; NULL and 0 to measure.
 *
 * Return: like snprintf(): the length of the whole text (without the NUL),
 * which is written only in part (still terminated) when it is @len or
 * more; -EOPNOTSUPP as zap_stats(); -EINVAL for NULL @t, or NULL @buf with
 * @len above 0; -ENOMEM; -EBADFD in a fork() child.
 */
ZAP_EXPORT int zap_metrics_render(const struct zap_transport *t, char *buf, size_t len);

/** What happened to a peer (struct zap_event.type). */
enum zap_event_type {
	ZAP_EVENT_CONNECTED = 1,    /**< a connection finished its handshake */
	ZAP_EVENT_UPGRADED = 2,     /**< it moved onto shared memory (this
	                                 end's direction) */
	ZAP_EVENT_DISCONNECTED = 3, /**< an established connection closed */
	ZAP_EVENT_REFUSED = 4,      /**< a connection closed during its
	                                 handshake: refused, or given up */
};

/**
 * zap_event_type_name() - "connected", "upgraded", "disconnected",
 * "refused"; "unknown" otherwise. Since 0.3.
 */
ZAP_EXPORT const char *zap_event_type_name(int type);

/** struct zap_event - one thing that happened to a peer, in order. */
struct zap_event {
	size_t size;                    /**< sizeof(struct zap_event) */
	int type;                       /**< enum zap_event_type */
	int reason;                     /**< DISCONNECTED, REFUSED: enum zap_close_reason;
	                       else 0 */
	uint64_t time_ms;               /**< when, CLOCK_REALTIME in ms since the epoch */
	uint64_t conn_id;               /**< as struct zap_peer_info.conn_id; 0 for a
	                       connection refused before it had one */
	bool dialed;                    /**< we opened the connection */
	char peer[ZAP_PEER_MAX];        /**< the peer string; REFUSED: the source
	                          address of an accepted connection, or the
	                          peer string a dial was for */
	char identity[ZAP_PEER_ID_MAX]; /**< as struct zap_peer_info's;
	                          REFUSED: the key the peer presented, when
	                          the refusal names one */
	char path[16];                  /**< "tcp", "unix" or "shm" when it happened */
	char detail[200];               /**< REFUSED and some DISCONNECTED: the reason in
	                        words, as the log line says it; else "" */
};

/**
 * zap_events() - take the events of @t that happened since the last call,
 * oldest first. Since 0.3.
 * @out: an array of @n entries; the caller sets out[0].size to
 *       sizeof(struct zap_event), also the distance between entries.
 *
 * A transport keeps the last 128 events (docs/metrics.md): call this
 * regularly (from a metrics scrape, or a timer); zap_stats().events_lost
 * counts those dropped because nobody took them. Events are queued by the
 * threads that see them happen and taken by whichever thread calls this:
 * there is no callback, so an application cannot block the transport by
 * being slow, and may call any libzap function while handling one.
 *
 * Return: the number of events written (0 when none happened); -EINVAL
 * for NULL @out or @n 0, or out[0].size below the first member;
 * -EOPNOTSUPP for a transport without events (as zap_stats());
 * -EBADFD in a fork() child.
 */
ZAP_EXPORT int zap_events(const struct zap_transport *t, struct zap_event *out, size_t n);

/** zap_version() - the library version string, e.g. "0.1.0". */
ZAP_EXPORT const char *zap_version(void);

#ifdef __cplusplus
}
#endif

#endif /* ZAP_ZAP_H */
