/* SPDX-License-Identifier: MIT */
/* Core-private declarations shared by the files of libzap.so. */
#ifndef ZAP_PRIVATE_H
#define ZAP_PRIVATE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include <zap/zap.h>
#include <zap/zap-plugin.h>

#define ZAP_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* log.c */
void zap__log(enum zap_log_level level, const char *domain, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void zap__vlog(enum zap_log_level level, const char *domain, const char *fmt, va_list ap)
	__attribute__((format(printf, 3, 0)));
int zap__log_enabled(enum zap_log_level level);
/*
 * The first-pick summary: an INFO line that is shown at the default WARN
 * level too (docs/loader.md, "The first-pick line"), silenced only by ZAP_TRANSPORT_QUIET=1
 * or ZAP_LOG_LEVEL=error.
 */
void zap__log_pick_summary(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* error.c */
int zap__fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int zap__vfail(int err, const char *fmt, va_list ap)
	__attribute__((format(printf, 2, 0)));
void zap__clear_error(void);

/* env.c: the core's environment, read and checked once per process. */
struct zap_config {
	int error; /* 0, or -EINVAL with error_msg */
	char error_msg[256];
	enum zap_log_level log_level;
	bool log_level_set;        /* ZAP_LOG_LEVEL given */
	bool quiet;                /* ZAP_TRANSPORT_QUIET true */
	bool probe_inprocess;      /* ZAP_PROBE_INPROCESS true (secure_getenv) */
	const char *transport;     /* ZAP_TRANSPORT, or NULL */
	const char *listen;        /* ZAP_LISTEN, or NULL */
	uint64_t max_msg_size;     /* ZAP_MAX_MSG_BYTES, or 0 */
	uint64_t send_timeout_ms;  /* ZAP_SEND_TIMEOUT_MS, or 0 (none) */
	uint64_t probe_timeout_ms; /* ZAP_PROBE_TIMEOUT_MS, or 0 (default) */
	char transport_buf[256];   /* storage for @transport and @listen */
	char listen_buf[ZAP_PEER_MAX];
	/* ZAP_TLS_CERT, _KEY, _CA, _PEERS, or NULL. */
	const char *tls[4];
	char tls_buf[4][4096];
	/* Bit i: tls[i]'s variable is set under AT_SECURE, where it is
	 * refused (zap__config_tls()); the reason for the first. */
	unsigned tls_refused;
	char tls_refused_msg[256];
};
const struct zap_config *zap__config(void);
/* Read the environment into @c now (zap__config() does it once); for the
 * fuzz harnesses. */
void zap__config_read(struct zap_config *c);
int zap__parse_log_level(const char *s, enum zap_log_level *out);
/*
 * TLS setting @i (0 cert, 1 key, 2 CA, 3 peers) for an open: @attr (the
 * zap_attr field) when not NULL, else the variable's value (NULL: unset).
 * -EPERM, with the reason recorded, when the variable is set in an
 * AT_SECURE program and @attr does not override it: the open fails
 * rather than run without the TLS the caller asked for.
 */
int zap__config_tls(const struct zap_config *c, unsigned i, const char *attr,
		    const char **out);
/* A string or list variable of the registry read now under its setuid
 * policy (ZAP_PLUGIN_PATH, ZAP_PROBE_HELPER): NULL when unset, ignored
 * or refused (logged at WARN). */
const char *zap__config_path(const char *name);
/*
 * A boolean variable's value (already trimmed): 1 for 1/yes/true/on, 0 for
 * 0/no/false/off (any case), -EINVAL otherwise. Every boolean ZAP_*
 * variable takes these spellings; ZAP_BOOL_SPELLINGS lists them for
 * messages.
 */
int zap__parse_bool(const char *s);
#define ZAP_BOOL_SPELLINGS "1/0, yes/no, true/false, on/off"
int zap__env_bytes(const char *name, uint64_t def, uint64_t min, uint64_t max,
		   uint64_t *out);
int zap__parse_bytes(const char *s, uint64_t *out);
int zap__check_address(const char *what, const char *addr);
/*
 * The environment as plugins may see it: getenv(), except in a program
 * running with AT_SECURE (setuid, setgid, file capabilities) or after
 * zap__env_forbid(), where every variable is unset.
 */
const char *zap__env_get(const char *name);
bool zap__env_secure(void);
void zap__env_forbid(void);
/* env_bytes() for plugins: like zap__env_bytes(), through zap__env_get(). */
int zap__host_env_bytes(const char *name, uint64_t def, uint64_t min, uint64_t max,
			uint64_t *out);

/* ctx.c */
int zap__ctx_fd(const struct zap_ctx *ctx);
int zap__ctx_timeout_ms(const struct zap_ctx *ctx);
uint64_t zap__now_ns(void);

/* host.c: the service table handed to every plugin. */
extern const struct zap_host zap__host;

/* loader.c */
/*
 * One row of the load report. Written by the scan under the scan lock and
 * then only by zap__load() (also under it), which may turn a plugin that
 * cannot be loaded into this process into a failed row: @state, @reason and
 * @desc are atomic for the readers that do not take the lock. Strings are
 * never freed (the report hands them out for the life of the process).
 */
struct zap_prec {
	const char *name;
	const char *path;
	const char *_Atomic reason;
	const char *replaced; /* the reason before zap__load() failed:
	                              still handed out, so kept, not freed */
	const char *detail;
	const char *version;
	_Atomic int state; /* enum zap_plugin_state */
	int rank;
	bool builtin;
	bool probed_out; /* probed in the helper, not loaded here */
	struct zap_caps caps;
	/* The file that was checked and probed, to load it only if unchanged. */
	dev_t dev;
	ino_t ino;
	off_t file_size;
	struct timespec mtime;
	/* Set only while the plugin is loaded in this process and usable. */
	const struct zap_plugin *_Atomic desc;
};
/* Scan once (with defaults unless zap_scan() ran first). */
int zap__plugins(const struct zap_prec **recs, size_t *n);
const struct zap_prec *zap__find(const char *name);
/*
 * Make @r usable in this process: load it now if it was probed out of
 * process (re-checking its directory and file first, and that the file is
 * the one probed). 0, or a negative errno with the reason recorded and the
 * row turned into a failed one.
 */
int zap__load(const struct zap_prec *r);
/* Validate a descriptor; 0 or the failing state with a reason in @why. */
enum zap_plugin_state zap__validate(const struct zap_plugin *d, size_t symsize,
				    const char *expect_name, char *why, size_t len);

/* load.c: one candidate; shared with the probe helper. */
struct zap_outcome {
	int state;
	int rank;
	char version[ZAP_VERSION_MAX];
	char reason[256];
	char detail[1024];
	struct zap_caps caps;
};
/* Why @st (a file or directory) may not be trusted, or NULL. @ancestor:
 * a directory above the plugin directory, where the sticky bit excuses
 * others' write permission. */
const char *zap__unsafe_owner_or_mode(const struct stat *st, bool ancestor, char *buf,
				      size_t len, const char *what);
/* Open plugin directory @dir component by component (see load.c); an
 * O_DIRECTORY descriptor, or -1 with errno and @why ("missing" for ENOENT). */
int zap__open_dir(const char *dir, char *why, size_t len);
/* Open @file in @dfd (O_NOFOLLOW, O_NONBLOCK, close-on-exec) and check it
 * with fstat(): a regular file, owned and writable as zap__unsafe_owner_or_mode()
 * allows. The descriptor, or -1 with @why (a symbolic link: "symbolic link
 * (@links)"). */
int zap__open_checked(int dfd, const char *file, struct stat *st, const char *links,
		      char *why, size_t len);
/* Open and check @file in @dfd; the descriptor, or -1 with @o refused. */
int zap__open_plugin(int dfd, const char *file, struct stat *st, struct zap_outcome *o);
/*
 * dlopen the checked open file *@fdp and validate its descriptor. May move
 * to another descriptor (*@fdp updated, the old one left open). *@pinned:
 * the object stays mapped (loaded, or a rejected one that cannot be
 * unloaded), so *@fdp must never be closed. NULL with @o saying why.
 */
const struct zap_plugin *zap__dlopen_plugin(int *fdp, const char *path, const char *name,
					    void **handle, bool *pinned,
					    struct zap_outcome *o);
void zap__run_probe(const struct zap_plugin *d, struct zap_outcome *o);

/* probe-out.c: probing in helper processes. */
struct zap_probe_job {
	int fd; /* the checked plugin file */
	const char *path;
	const char *name;
	struct zap_outcome o; /* the result */
};
/* Probe @n candidates out of process: one helper, a child per candidate, all
 * at once (probe-out.c). */
void zap__probe_out(struct zap_probe_job *jobs, size_t n, unsigned timeout_ms);
/* The helper zap__probe_out() starts: ZAP_PROBE_HELPER, or the installed one. */
const char *zap__probe_helper_path(void);
/* zap__probe_out() for the candidates whose answer the probe cache does not
 * hold (probe-cache.c); the others take the cached answer, and the new
 * answers are kept for the next scans. */
void zap__probe_out_cached(struct zap_probe_job *jobs, size_t n, unsigned timeout_ms);

/*
 * Copy @full (a struct starting with size_t size) into @dst, no further
 * than dst->size, leaving dst->size alone. -EINVAL if dst->size is short.
 */
int zap__copy_sized(void *dst, const void *full, size_t full_size);

/* transport.c, for stats.c: call the optional stats and peers ops
 * (-EOPNOTSUPP when absent, -EBADFD in a fork() child). */
int zap__transport_stats(const struct zap_transport *t, struct zap_stats *full);
int zap__transport_peers(const struct zap_transport *t, struct zap_peer_info *arr,
			 size_t n);
int zap__transport_events(const struct zap_transport *t, struct zap_event *arr, size_t n);

/* pool.c */
int zap__pool_new(const struct zap_pool_backing *backing, uint64_t cap, uint64_t max_buf,
		  struct zap_pool **out);
int zap__pool_alloc(struct zap_pool *pool, size_t len, struct zap_ctx *ctx,
		    struct zap_buffer **out);
int zap__pool_try_alloc(struct zap_pool *pool, size_t len, struct zap_buffer **out);
void zap__pool_stats(struct zap_pool *pool, struct zap_pool_stats *stats);
void zap__pool_close(struct zap_pool *pool);

/* pick.c */
#define ZAP_PREF_MAX_NAMES 16
/*
 * Longest preference string accepted, NUL included. Room for the longest
 * canonical form ("=^" and 16 names of 31 characters with commas, 513), so
 * a parsed preference printed back always parses again: "tcp" is read as
 * "default", and 60 of them in 240 characters print as 480.
 */
#define ZAP_PREF_MAX_LEN 1024
/* A parsed preference string (ZAP_TRANSPORT syntax). */
struct zap_pref {
	bool strict;
	bool exclude; /* "^a,b": everything but these */
	size_t n;     /* 0: auto */
	char names[ZAP_PREF_MAX_NAMES][ZAP_NAME_MAX];
};
/* Parse @src; @origin names it in the error ("ZAP_TRANSPORT"). 0 or -EINVAL. */
int zap__parse_pref(const char *src, const char *origin, struct zap_pref *p);
/* Open @rec; @send_timeout_ms (0: none) bounds zap_send() without a ctx. */
int zap__open(const struct zap_prec *rec, const struct zap_open_args *args,
	      uint64_t send_timeout_ms, struct zap_transport **out);

/* The built-in default transport, from plugins/default. */
extern const struct zap_plugin zap_builtin_default;

#endif
