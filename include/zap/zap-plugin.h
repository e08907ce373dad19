/* SPDX-License-Identifier: MIT */
/*
 * libzap plugin ABI, for transport plugin authors.
 *
 * A plugin is a shared object named libzap-<name>.so (<name> in [a-z0-9_]+)
 * that exports exactly one symbol: a const struct zap_plugin whose symbol
 * name carries the ABI major, ZAP_PLUGIN_SYMBOL ("zap_plugin_v1"). The host
 * reads and checks that descriptor (ABI major, struct sizes, name, mandatory
 * ops) before it calls any plugin function, so:
 *
 *  - A plugin must not have constructors (no __attribute__((constructor)),
 *    no C++ static initialisers with side effects): the host cannot stop
 *    them from running at dlopen time, before any check. Nor can it stop
 *    the constructors of the libraries a plugin links (DPDK's are many):
 *    the descriptor check guards the ABI, not against hostile code. What
 *    guards against that is whose files the host loads at all (owner and
 *    mode of the file and of every directory above it) and probing in a
 *    helper process, which a crash or hang cannot take down with it.
 *  - Everything the plugin needs from the host (logging, cancellation,
 *    the environment, error reasons, the buffer pool) comes through
 *    struct zap_host, handed to every op. A plugin needs these headers, not
 *    the library: it does not link libzap.so (`pkg-config --cflags
 *    zap-plugin`; `pkg-config --libs zap-plugin` prints nothing, on
 *    purpose) and calls no zap_*() function, and it never includes
 *    core-private headers.
 *
 * Threads. The host calls a plugin from the application's threads:
 *  - probe: once per process (or in an isolating child), before any open.
 *  - open: possibly from several threads at once (zap_pick() is
 *    thread-safe); each call makes an independent instance.
 *  - send, recv, caps, address, buffer_alloc, pool_stats: from any number
 *    of threads at once on the same instance. Concurrent sends to one peer
 *    must each deliver whole messages (never interleave their bytes), and
 *    messages one thread sends to one peer arrive in that order; concurrent
 *    recvs each take a different message. send and recv block (see ctx
 *    below) and must not hold a lock that another thread's send or recv
 *    needs while they wait.
 *  - shutdown: at most once per instance, concurrently with any of the
 *    above (from zap_shutdown() or zap_close()); the instance stays in use
 *    afterwards until destroy.
 *  - destroy: once, when no other op is running on the instance.
 *  - Never in a fork() child on an instance the parent opened: the host
 *    refuses those calls itself. Make every descriptor close-on-exec.
 *  Blocking calls wake for three things: their ctx (host->ctx_fd becomes
 *  readable on cancel, host->ctx_timeout_ms gives the deadline), shutdown,
 *  and their own progress. The host may pass a ctx the application did not
 *  (the default send timeout, ZAP_SEND_TIMEOUT_MS); a NULL ctx means wait
 *  without limit.
 *
 * Addresses. Peer strings are the transport's own, at most ZAP_PEER_MAX
 * bytes with the NUL. IP transports use "host:port" and "[v6]:port". A
 * transport that is not reached by IP uses "<name>:<text>", its own name
 * as a prefix (the example plugin's "inproc:3"),
 * returns that form from the address op and in zap_msg.peer, and answers
 * -EINVAL for any other form. args->listen is always an IP "host:port"
 * (the core checks attr.listen and ZAP_LISTEN; default "0.0.0.0:0"): a
 * non-IP transport ignores it (say so in its documentation) and picks its
 * own local address, as a kernel picks a port; it must not fail open
 * because of it.
 *
 * Errors. Return negative errnos, with a reason through host->fail(). A
 * peer that does not exist or cannot be resolved is -EHOSTUNREACH; one
 * that exists but refuses is -ECONNREFUSED; one that answers in another
 * protocol is -EPROTO; a malformed peer string is -EINVAL (zap.h lists
 * the rest for each call). ZAP_ENOTAVAIL means "this transport cannot do
 * that here", never a peer problem.
 *
 * Logging. Log through host->log with the plugin's own name (the
 * descriptor's name) as the domain, so that ZAP_LOG_LEVEL and application
 * handlers see "uma", "dpdk", ...; start reasons given to host->fail()
 * and probe reasons with "<name>: " (the core does not repeat it). A
 * failure returned to the caller is not also logged above DEBUG. WARN is
 * for what the application cannot see otherwise (a peer's data was lost,
 * a connection dropped); expected events (a peer closed, our own shutdown,
 * a ctx that fired) are DEBUG. Nothing above DEBUG on the data path.
 *
 * Ranks. An automatic pick takes the best-ranked transport whose probe
 * said OK; a fallback goes to the best one ranked below those named. The
 * shipped ranks are ZAP_RANK_DEFAULT (0) < ZAP_RANK_UMA (100) <
 * ZAP_RANK_DPDK (200) < ZAP_RANK_GPUDIRECT (300); any int32 is accepted.
 * Installing a plugin changes the auto pick of every program on the host
 * whenever its rank beats the current winner, so a third-party plugin
 * should:
 *  - rank below ZAP_RANK_DEFAULT (negative, as the example plugin's -100)
 *    if it is special-purpose, experimental, for tests, or cannot reach
 *    other hosts: it is then used only when asked for by name;
 *  - otherwise rank just above the shipped transport it beats on every
 *    host where its probe says OK (e.g. ZAP_RANK_UMA + 10), never at a
 *    shipped rank (ties are broken by scan order, which users do not
 *    control), and above ZAP_RANK_GPUDIRECT only if it really is faster.
 *
 * Zeroing. The host zeroes struct zap_probe_info (caps included) and the
 * struct zap_caps given to the caps op, and sets their size members,
 * before every call: a plugin fills only what it knows and leaves the
 * rest 0 ("unknown").
 *
 * ABI rules:
 *  - ZAP_PLUGIN_ABI_MAJOR changes when an existing field or op changes
 *    meaning or place; the symbol name changes with it, so a mismatched
 *    plugin cannot bind.
 *  - ZAP_PLUGIN_ABI_MINOR grows when fields or ops are appended. Every
 *    struct starts with its size (descriptor: a uint32_t after the ABI
 *    numbers); readers check the size before touching an appended member.
 *    A plugin built for a newer minor must check host->size before using
 *    host members it knows and the host may lack (ZAP_HOST_HAS()).
 *  - History: 1.0 first release; 1.1 added zap_host.pool_try_alloc,
 *    zap_host.last_error (so plugins need not link libzap.so) and
 *    zap_host.env_get; 1.2 added zap_plugin_ops.peer_path; 1.3 added
 *    zap_plugin_ops.send_burst; 1.4 added zap_host.config_u64 and
 *    zap_host.config_str (the configuration registry); 1.5 added
 *    zap_plugin_ops.stats, zap_plugin_ops.peers and zap_plugin_ops.events
 *    (zap_stats(), zap_peer_list(), zap_events()).
 *
 * A plugin's probe normally runs in a helper process (zap-probe, under the
 * library's libexec directory), and only the plugin a pick chooses is
 * loaded into the application: a probe must not leave state behind for
 * open() to rely on.
 */
#ifndef ZAP_ZAP_PLUGIN_H
#define ZAP_ZAP_PLUGIN_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <zap/zap.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZAP_PLUGIN_ABI_MAJOR 1
#define ZAP_PLUGIN_ABI_MINOR 5

#define ZAP_PLUGIN_CAT_(a, b) a##b
#define ZAP_PLUGIN_CAT(a, b) ZAP_PLUGIN_CAT_(a, b)
#define ZAP_PLUGIN_STR_(a) #a
#define ZAP_PLUGIN_STR(a) ZAP_PLUGIN_STR_(a)

/** The descriptor's identifier, zap_plugin_v1 for ABI major 1. */
#define ZAP_PLUGIN_DESCRIPTOR ZAP_PLUGIN_CAT(zap_plugin_v, ZAP_PLUGIN_ABI_MAJOR)
/** The descriptor's symbol name as a string, "zap_plugin_v1". */
#define ZAP_PLUGIN_SYMBOL ZAP_PLUGIN_STR(ZAP_PLUGIN_DESCRIPTOR)

/** Longest plugin version string, including the NUL. */
#define ZAP_VERSION_MAX 32

/** What a probe found. */
enum zap_probe_result {
	ZAP_PROBE_OK = 0,          /**< usable on this host */
	ZAP_PROBE_NOT_PRESENT = 1, /**< expected absence (no hardware, not
	                                configured): reported quietly */
	ZAP_PROBE_ERROR = 2,       /**< something present is broken: loud */
};

/**
 * struct zap_probe_info - filled by a probe. The host zeroes it and sets
 * @size; a plugin writes only members that lie within @size.
 */
struct zap_probe_info {
	size_t size;
	char reason[256];     /**< one line: why not OK, or what was found */
	char detail[1024];    /**< lines for `zap-info -v` (device names...) */
	struct zap_caps caps; /**< what an instance would offer (size preset) */
};

/** struct zap_open_args - resolved open attributes (env defaults applied). */
struct zap_open_args {
	size_t size;
	const char *listen;    /**< local address, never NULL */
	uint64_t max_msg_size; /**< never 0 */
	uint64_t pool_bytes;   /**< 0: the plugin's own default / env */
	/* Appended in ABI 1.1; read only when @size covers them. TLS
	 * settings (zap_attr's tls_* or ZAP_TLS_*, already resolved by the
	 * core): NULL when unset. A transport that cannot do TLS and gets a
	 * @tls_cert must fail its open rather than run in plaintext. */
	const char *tls_cert;
	const char *tls_key;
	const char *tls_ca;
	const char *tls_peers;
};

/**
 * struct zap_msg - a received message, as a plugin builds it.
 *
 * Applications see it only through zap_msg_*(). A plugin embeds it at the
 * start of its own record and sets @release, which zap_msg_release() calls
 * exactly once. @release must work after the transport was closed.
 */
struct zap_msg {
	size_t size; /**< sizeof(struct zap_msg) as the plugin knows it */
	const void *data;
	size_t len;
	void *device_ptr; /**< NULL unless GPU-readable */
	const char *peer; /**< replyable sender address, NUL-terminated */
	void (*release)(struct zap_msg *m);
	/* Appended in ABI 1.1; zap_msg_peer_id() reads it only when @size
	 * covers it. */
	const char *peer_id; /**< the sender's authenticated key,
	                          "sha256:<hex>" (TLS), or NULL */
};

/**
 * struct zap_buffer - pool memory, as a plugin hands it out. @release must
 * make a second (or racing) release of the same buffer a no-op.
 */
struct zap_buffer {
	size_t size;
	void *bytes;
	size_t len;
	void *device_ptr;
	void (*release)(struct zap_buffer *b);
};

/**
 * struct zap_pool - a buffer pool run by the core over memory a plugin
 * supplies (host memory, CUDA managed memory, hugepages, GPU memory).
 * Size classes are powers of two from 256 bytes up to the largest buffer;
 * the pool caches released buffers per class, gives cached memory of other
 * classes back to the backing when the cap would be exceeded, and blocks
 * allocations while the bytes in use leave no room.
 */
struct zap_pool;

/** struct zap_pool_backing - where a pool's memory comes from. */
struct zap_pool_backing {
	size_t size; /**< sizeof(struct zap_pool_backing) */
	void *user;  /**< passed to every callback */
	/**
	 * Allocate @len bytes (a size class, a power of two >= 256). Set
	 * *@dev to the address a GPU kernel may use, or NULL. Return the
	 * CPU address, or NULL on failure (the allocation fails -ENOMEM).
	 */
	void *(*alloc)(void *user, size_t len, void **dev);
	/** Free what alloc returned. */
	void (*free)(void *user, void *ptr, size_t len);
	/** Optional: called once when the pool is gone (closed and every
	 * buffer released), after the last free. */
	void (*destroy)(void *user);
};

/**
 * struct zap_host - services the host gives plugins. Valid for the life of
 * the process; every function is thread-safe.
 */
struct zap_host {
	size_t size; /**< sizeof(struct zap_host) in the host */
	uint32_t abi_major;
	uint32_t abi_minor;

	/** Log one line (printf format, no newline) as @domain. */
	void (*log)(enum zap_log_level level, const char *domain, const char *fmt, ...)
#if defined(__GNUC__)
		__attribute__((format(printf, 3, 4)))
#endif
		;
	/** Whether a line at @level would be printed (skip costly formatting). */
	int (*log_enabled)(enum zap_log_level level);

	/**
	 * Record the reason for a failure on this thread and return @err, so
	 * that a plugin writes `return host->fail(-EINVAL, "bad peer %s", p);`
	 * and the application's zap_strerror(err) shows it.
	 */
	int (*fail)(int err, const char *fmt, ...)
#if defined(__GNUC__)
		__attribute__((format(printf, 2, 3)))
#endif
		;

	/**
	 * A descriptor that becomes readable (POLLIN) once @ctx is cancelled
	 * and stays readable; -1 for a NULL ctx. Never read from it.
	 */
	int (*ctx_fd)(const struct zap_ctx *ctx);
	/**
	 * Milliseconds until @ctx's deadline, rounded up, for poll(): -1 when
	 * there is none (or ctx is NULL), 0 once it has passed.
	 */
	int (*ctx_timeout_ms)(const struct zap_ctx *ctx);
	/** Same as zap_ctx_err(). */
	int (*ctx_err)(const struct zap_ctx *ctx);

	/**
	 * Parse environment variable @name (read as env_get() does) as a
	 * byte count ("4096", "64M",
	 * "4GiB"; suffixes K/M/G/T, with or without "iB", powers of 1024).
	 * Unset or empty: *@out = @def, return 0. Otherwise the value must lie
	 * in [@min, @max]. Return: 0, or -EINVAL after recording a reason that
	 * names the variable.
	 */
	int (*env_bytes)(const char *name, uint64_t def, uint64_t min, uint64_t max,
			 uint64_t *out);

	/**
	 * Create a pool of at most @cap bytes whose largest buffer is
	 * @max_buf bytes. @backing NULL: host memory. Return 0, -EINVAL
	 * (bad sizes), -ENOMEM.
	 */
	int (*pool_new)(const struct zap_pool_backing *backing, uint64_t cap,
			uint64_t max_buf, struct zap_pool **out);
	/** See zap_buffer_alloc(); also -ESHUTDOWN once the pool is closed. */
	int (*pool_alloc)(struct zap_pool *pool, size_t len, struct zap_ctx *ctx,
			  struct zap_buffer **out);
	/** Fill @stats (stats->size preset). */
	void (*pool_stats)(struct zap_pool *pool, struct zap_pool_stats *stats);
	/**
	 * Close the pool: blocked allocations return -ESHUTDOWN, cached
	 * memory is freed now, buffers still held are freed when released,
	 * and the pool (with backing->destroy) goes when the last one is.
	 */
	void (*pool_close)(struct zap_pool *pool);

	/* -- ABI 1.1: check host->size before use (see ZAP_HOST_HAS) ------- */

	/**
	 * Like pool_alloc, but never blocks: a pool without room answers
	 * -EAGAIN at once (a receive path then pauses that source and
	 * retries). Also -EMSGSIZE, -ENOMEM, -ESHUTDOWN as pool_alloc.
	 */
	int (*pool_try_alloc)(struct zap_pool *pool, size_t len, struct zap_buffer **out);
	/**
	 * The reason recorded by the last failing host service (or fail())
	 * on this thread, "" if none: what a plugin copies into a probe
	 * reason after env_bytes() refused a value. Valid until the thread's
	 * next libzap call.
	 */
	const char *(*last_error)(void);
	/**
	 * The value of environment variable @name, or NULL when unset. The
	 * only way a plugin reads its configuration: in a program running
	 * with AT_SECURE (setuid, setgid, file capabilities) it answers NULL
	 * for every variable, so a caller cannot configure a plugin inside a
	 * privileged process. Plugins must not call getenv() themselves. The
	 * string is getenv()'s: copy it before the environment may change.
	 */
	const char *(*env_get)(const char *name);

	/* -- ABI 1.4: check host->size before use (see ZAP_HOST_HAS) ------- */

	/**
	 * Read variable @name through libzap's configuration registry
	 * (docs/environment.md lists it; `zap-info --env` shows it), which
	 * knows its type, grammar, range, default and setuid policy: the way
	 * plugins read configuration since 1.4, instead of env_get() and
	 * env_bytes(). For numeric types (booleans, sizes, counts, durations,
	 * octal modes, and enumerations, answered as the index of the
	 * choice): *@out is the value, or the registry's default when the
	 * variable is unset, empty, or ignored in an AT_SECURE program.
	 * Return: 1 (set in the environment), 0 (the default), -EINVAL (a
	 * malformed or out-of-range value), -EPERM (set where AT_SECURE
	 * refuses it), -ENOENT (not in the registry, or not numeric); every
	 * error records a reason naming the variable (last_error()).
	 */
	int (*config_u64)(const char *name, uint64_t *out);
	/**
	 * The same for string and list variables: *@out is the value (the
	 * environment's string: copy it before the environment may change),
	 * or NULL when unset, empty or ignored. Return as config_u64(); a
	 * value longer than the registry allows is -EINVAL.
	 */
	int (*config_str)(const char *name, const char **out);
};

/**
 * ZAP_HOST_HAS - whether @host (a const struct zap_host *) provides
 * @member: true when the host's table reaches past it. Plugins built for
 * ABI 1.1 or later use it before calling a member added after 1.0.
 */
#define ZAP_HOST_HAS(host, member)                                                     \
	((host)->size >= offsetof(struct zap_host, member) + sizeof((host)->member) && \
	 (host)->member != NULL)

/**
 * zap_plugin_put_sized() - copy @full (a structure of @full_size bytes that
 * starts with its size_t size, as struct zap_stats and struct
 * zap_peer_info do) into @out, whose size member the host preset: only
 * the members that size covers, and the size itself left alone. A plugin
 * fills a whole structure of its own header's version and puts it with
 * this, so it works with a host of an older (smaller) or newer version.
 * Header-only, so it needs no host support.
 */
static inline void zap_plugin_put_sized(void *out, const void *full, size_t full_size)
{
	size_t have;

	__builtin_memcpy(&have, out, sizeof(have));
	if (have > full_size)
		have = full_size;
	if (have > sizeof(size_t))
		__builtin_memcpy((char *)out + sizeof(size_t),
				 (const char *)full + sizeof(size_t),
				 have - sizeof(size_t));
}

/**
 * struct zap_plugin_ops - a transport's operations. @size first; the host
 * checks that every mandatory op lies within @size and is non-NULL, and
 * calls an optional op only if it lies within @size and is non-NULL.
 */
struct zap_plugin_ops {
	size_t size;

	/* -- mandatory ------------------------------------------------------ */

	/**
	 * Decide whether the transport can work here. Cheap, repeatable, and
	 * side-effect free: may query drivers, must not start anything that
	 * cannot be undone, allocate device memory or send traffic. Cheapest
	 * checks first. Fill info->reason (and detail, caps).
	 */
	enum zap_probe_result (*probe)(const struct zap_host *host,
				       struct zap_probe_info *info);

	/** Open an instance. Return 0 and *tp, or a negative errno (use host->fail). */
	int (*open)(const struct zap_host *host, const struct zap_open_args *args,
		    void **tp);

	/**
	 * Make calls blocked in send/recv/buffer_alloc return -ESHUTDOWN
	 * promptly, and later ones too. Called at most once, concurrently with
	 * them (zap_shutdown() may come long before zap_close()); must not
	 * free anything, and must not shut down sockets in a way a peer sees
	 * as an error before destroy (closing is destroy's job).
	 */
	void (*shutdown)(void *tp);

	/** Free the instance. No call is in flight; messages may be outstanding. */
	void (*destroy)(void *tp);

	/** See zap_send(). @peer is non-NULL; @buf may be NULL when @len is 0. */
	int (*send)(void *tp, const char *peer, const void *buf, size_t len,
		    struct zap_ctx *ctx);

	/** See zap_recv(). */
	int (*recv)(void *tp, struct zap_ctx *ctx, struct zap_msg **out);

	/** Fill @caps (zeroed, caps->size preset by the host). */
	int (*caps)(void *tp, struct zap_caps *caps);

	/* -- optional (NULL or beyond @size: not supported) ---------------- */

	/** See zap_transport_address(). Absent: -EOPNOTSUPP. */
	int (*address)(void *tp, char *buf, size_t len);

	/** See zap_buffer_alloc(). Absent: ZAP_ENOTAVAIL. */
	int (*buffer_alloc)(void *tp, size_t size, struct zap_ctx *ctx,
			    struct zap_buffer **out);

	/** See zap_pool_stats(). Absent: ZAP_ENOTAVAIL. */
	int (*pool_stats)(void *tp, struct zap_pool_stats *stats);

	/** See zap_peer_path() (ABI 1.2). Absent: -EOPNOTSUPP. */
	int (*peer_path)(void *tp, const char *peer, char *buf, size_t len);

	/**
	 * See zap_send_burst() (ABI 1.3). @peer and @msgs are non-NULL,
	 * 1 <= @n <= 65536, and every message has bytes or length 0. Return the count taken (1 to @n) or, when
	 * none was, a negative errno. Absent: the host calls send once per
	 * message.
	 */
	int (*send_burst)(void *tp, const char *peer, const struct zap_iov *msgs,
			  unsigned int n, struct zap_ctx *ctx);

	/**
	 * See zap_stats() (ABI 1.5). @out is zeroed, out->size preset by the
	 * host; write only members within it. Any thread, concurrently with
	 * every op but destroy, also after shutdown; it must not slow send
	 * or recv (no lock of theirs held for long). Absent: -EOPNOTSUPP.
	 */
	int (*stats)(void *tp, struct zap_stats *out);

	/**
	 * See zap_peer_list() (ABI 1.5). @out holds @n zeroed entries
	 * out->size bytes apart, each with its size set (the host's
	 * sizeof(struct zap_peer_info)); fill at most @n, members within
	 * that size only, and return how many peers there are. Threads as
	 * @stats. Absent: -EOPNOTSUPP.
	 */
	int (*peers)(void *tp, struct zap_peer_info *out, size_t n);

	/**
	 * See zap_events() (ABI 1.5). @out holds 1 <= @n zeroed entries laid
	 * out as for @peers; move up to @n queued events there, oldest
	 * first, and return how many. Threads as @stats; never wait for the
	 * data path. Absent: -EOPNOTSUPP.
	 */
	int (*events)(void *tp, struct zap_event *out, size_t n);
};

/** The last mandatory op; ops->size must reach past it. */
#define ZAP_PLUGIN_OPS_MIN_SIZE \
	(offsetof(struct zap_plugin_ops, caps) + sizeof(void (*)(void)))

/**
 * struct zap_plugin - the descriptor, exported as ZAP_PLUGIN_DESCRIPTOR.
 * Plain data up to @ops, so the host checks it without following pointers.
 */
struct zap_plugin {
	uint32_t abi_major;      /**< ZAP_PLUGIN_ABI_MAJOR */
	uint32_t abi_minor;      /**< ZAP_PLUGIN_ABI_MINOR */
	uint32_t size;           /**< sizeof(struct zap_plugin) */
	int32_t rank;            /**< higher is preferred by auto pick; see
	                               "Ranks" above for what to choose */
	char name[ZAP_NAME_MAX]; /**< must equal <name> in libzap-<name>.so */
	char version[ZAP_VERSION_MAX];
	const struct zap_plugin_ops *ops;
};

/** The smallest descriptor the host accepts (ABI 1.0). */
#define ZAP_PLUGIN_MIN_SIZE (offsetof(struct zap_plugin, ops) + sizeof(const void *))

/** Shipped ranks, so that third-party plugins can place themselves. */
#define ZAP_RANK_DEFAULT 0
#define ZAP_RANK_UMA 100
#define ZAP_RANK_DPDK 200
#define ZAP_RANK_GPUDIRECT 300

/**
 * ZAP_PLUGIN_EXPORT - define the descriptor in a plugin:
 *
 *   ZAP_PLUGIN_EXPORT = {
 *       .abi_major = ZAP_PLUGIN_ABI_MAJOR, .abi_minor = ZAP_PLUGIN_ABI_MINOR,
 *       .size = sizeof(struct zap_plugin), .rank = -10, // see Ranks
 *       .name = "mine", .version = "1.0", .ops = &mine_ops,
 *   };
 */
#ifdef __cplusplus
#define ZAP_PLUGIN_LINKAGE extern "C"
#else
#define ZAP_PLUGIN_LINKAGE extern
#endif
#define ZAP_PLUGIN_EXPORT                                                            \
	ZAP_PLUGIN_LINKAGE ZAP_EXPORT const struct zap_plugin ZAP_PLUGIN_DESCRIPTOR; \
	const struct zap_plugin ZAP_PLUGIN_DESCRIPTOR

#ifdef __cplusplus
}
#endif

#endif /* ZAP_ZAP_PLUGIN_H */
