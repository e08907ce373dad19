/* SPDX-License-Identifier: MIT */
/*
 * Small helpers that the test programs share: clocks, a checkable byte
 * pattern, a fail-and-exit check for programs that do not run under
 * cmocka, temporary directories, and the rule that decides whether a
 * hardware test may skip.
 *
 * Everything is static inline so that any test executable can include
 * this header without linking anything extra; what is not used is not
 * emitted. The names start with zt_ / ZT_ so they never clash with the
 * helpers a test keeps for itself.
 *
 * Not thread-shared state: nothing here keeps any, so every helper may be
 * called from any thread.
 */
#ifndef ZAP_TEST_H
#define ZAP_TEST_H

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <zap/zap.h>

/* ---- clocks -------------------------------------------------------------- */

/** zt_now_ns() - CLOCK_MONOTONIC in nanoseconds. */
static inline uint64_t zt_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/** zt_now_ms() - CLOCK_MONOTONIC in milliseconds. */
static inline uint64_t zt_now_ms(void)
{
	return zt_now_ns() / 1000000u;
}

/**
 * zt_timeout_ms() - @ms scaled by ZAP_TEST_TIMEOUT_SCALE, a whole number
 * from 1 to 100 (unset or empty: 1): every time limit a test sets on
 * something that must finish goes through it, so that one variable
 * stretches them all on a slow host or under sanitizers (tests/README.md).
 * A bad value is an error naming the variable: exit(2).
 */
static inline unsigned zt_timeout_ms(unsigned ms)
{
	const char *v = getenv("ZAP_TEST_TIMEOUT_SCALE");
	char *end;
	unsigned long k;

	if (!v || !*v)
		return ms;
	errno = 0;
	k = strtoul(v, &end, 10);
	if (errno || *end || k < 1 || k > 100 || v[0] == '-' || v[0] == '+') {
		fprintf(stderr, "ZAP_TEST_TIMEOUT_SCALE=%s: expected a whole number "
			"from 1 to 100\n", v);
		exit(2);
	}
	return ms > UINT32_MAX / k ? UINT32_MAX : ms * (unsigned)k;
}

/** zt_sleep_ms() - sleep @ms milliseconds, resuming after signals. */
static inline void zt_sleep_ms(unsigned ms)
{
	struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* ---- a checkable byte pattern ------------------------------------------- */

/* xorshift64 seeded from @seed and @len: different messages (seed) and a
 * message cut short or padded (len) give different bytes. Never zero. */
static inline uint64_t zt_pattern_start_(uint64_t seed, size_t len)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + (uint64_t)len;

	return x ? x : 0x2545f4914f6cdd1dull;
}

static inline uint8_t zt_pattern_next_(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return (uint8_t)*x;
}

/**
 * zt_fill() - fill @len bytes at @buf with the pattern for @seed.
 * zt_check_fill() tells whether bytes still hold it.
 */
static inline void zt_fill(void *buf, size_t len, uint64_t seed)
{
	uint8_t *b = buf;
	uint64_t x = zt_pattern_start_(seed, len);

	for (size_t i = 0; i < len; i++)
		b[i] = zt_pattern_next_(&x);
}

/**
 * zt_check_fill() - whether @len bytes at @buf are exactly zt_fill(@seed)'s.
 * Return: @len when they are, else the offset of the first wrong byte.
 */
static inline size_t zt_check_fill(const void *buf, size_t len, uint64_t seed)
{
	const uint8_t *b = buf;
	uint64_t x = zt_pattern_start_(seed, len);

	for (size_t i = 0; i < len; i++)
		if (b[i] != zt_pattern_next_(&x))
			return i;
	return len;
}

/* ---- the default transport's frames, for raw-socket peers ---------------- */

/** zt_be64() - @v big-endian at @p (the wire's byte order). */
static inline void zt_be64(unsigned char *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (unsigned char)v;
}

/**
 * zt_wire_hdr_v() - a 16-byte frame header of wire version @ver at @p:
 * @type (1 HELLO, 2 DATA; version 3 also 4 BEGIN, 5 MORE), @len payload
 * bytes (plugins/default/WIRE.md). Return: 16.
 */
static inline size_t zt_wire_hdr_v(unsigned char *p, unsigned ver, unsigned type,
				   uint64_t len)
{
	memcpy(p, "ZAPW", 4);
	p[4] = (unsigned char)ver;
	p[5] = (unsigned char)type;
	p[6] = p[7] = 0;
	zt_be64(p + 8, len);
	return 16;
}

/**
 * zt_wire_hdr() - zt_wire_hdr_v() of version 2, the previous version's
 * peers (their HELLO and DATA frames).
 */
static inline size_t zt_wire_hdr(unsigned char *p, unsigned type, uint64_t len)
{
	return zt_wire_hdr_v(p, 2, type, len);
}

/*
 * zt_recv_within() - zap_recv() on @t with a deadline of @ms (scaled by
 * zt_timeout_ms(): a hang bound, not a timing check); its result, and on
 * failure the reason on stderr.
 */
static inline int zt_recv_within(struct zap_transport *t, unsigned ms, struct zap_msg **m)
{
	struct zap_ctx *ctx;
	int r = zap_ctx_new(&ctx);

	*m = NULL;
	if (r)
		return r;
	zap_ctx_set_timeout(ctx, (uint64_t)zt_timeout_ms(ms) * 1000000u);
	r = zap_recv(t, ctx, m);
	zap_ctx_free(ctx);
	if (r)
		fprintf(stderr, "# recv: %s (%s)\n", zap_strerror(r), zap_last_error());
	return r;
}

/* ---- checks for programs without cmocka ------------------------------------ */

/**
 * ZT_CHECK(cond) - unless @cond holds, print it with file, line and
 * libzap's last error on stderr and exit(1).
 * ZT_CHECK_MSG(cond, fmt, ...) - the same with a printf-style message.
 */
#define ZT_CHECK(cond) ZT_CHECK_MSG(cond, "%s", "")
#define ZT_CHECK_MSG(cond, ...)                                                \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, \
				#cond);                                        \
			fprintf(stderr, __VA_ARGS__);                          \
			fprintf(stderr, " (last error: %s)\n",                 \
				zap_last_error());                             \
			exit(1);                                               \
		}                                                              \
	} while (0)

/* ---- temporary directories ---------------------------------------------- */

/**
 * zt_mkdtemp() - create a fresh private directory "$TMPDIR/<tag>-XXXXXX"
 * (/tmp when TMPDIR is unset) and write its path into @buf.
 * Return: @buf, or NULL with errno set (also when @len is too small).
 */
static inline char *zt_mkdtemp(char *buf, size_t len, const char *tag)
{
	const char *tmp = getenv("TMPDIR");
	int n = snprintf(buf, len, "%s/%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", tag);

	if (n < 0 || (size_t)n >= len) {
		errno = ENAMETOOLONG;
		return NULL;
	}
	return mkdtemp(buf);
}

/**
 * zt_rmtree() - remove @path and, for a directory, everything below it
 * (symbolic links are removed, never followed). Missing is fine.
 */
static inline void zt_rmtree(const char *path)
{
	struct stat st;
	struct dirent *de;
	DIR *d;

	if (lstat(path, &st) != 0)
		return;
	if (!S_ISDIR(st.st_mode)) {
		unlink(path);
		return;
	}
	chmod(path, 0700); /* tests make read-only and unsearchable dirs */
	d = opendir(path);
	if (d) {
		while ((de = readdir(d))) {
			char sub[PATH_MAX];
			int n;

			if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
				continue;
			n = snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name);
			if (n > 0 && (size_t)n < sizeof(sub))
				zt_rmtree(sub);
		}
		closedir(d);
	}
	rmdir(path);
}

/* ---- when a hardware test may skip ----------------------------------------- */

/**
 * zt_plugin_row() - copy the load report row of transport @name into @e
 * (the first one: later rows of that name are shadowed duplicates).
 * Return: 0, or -ENOENT when the report has no such row.
 */
static inline int zt_plugin_row(const char *name, struct zap_report_entry *e)
{
	int n = zap_report_count();

	for (int i = 0; i < n; i++) {
		e->size = sizeof(*e);
		if (zap_report_get((size_t)i, e) == 0 && !strcmp(e->name, name))
			return 0;
	}
	return -ENOENT;
}

/** Exit status of a test that skips (the GNU/Meson convention). */
#define ZT_SKIP 77

/**
 * zt_need_plugin() - the one rule for hardware tests: may the test that
 * needs transport @name run, skip, or must it fail?
 *
 * Reads the plugin's row in the load report (so call it before other
 * threads use libzap, like any first scan):
 *   loaded      -> 0: run the test;
 *   not present -> ZT_SKIP after printing "SKIP: <name>: not present:
 *                  <the probe's reason>" (exactly what is missing);
 *   no row, or any other state (probe ERROR, dlopen failed, invalid,
 *   ABI mismatch, refused, ...) -> 1 after printing "FAIL: ..." on
 *   stderr: a plugin that is broken or not found is a failure, never a
 *   skip.
 * @needs says what the test needs, for the skip line ("a CUDA device
 * with managed memory").
 */
static inline int zt_need_plugin(const char *name, const char *needs)
{
	struct zap_report_entry e = { .size = sizeof(e) };

	if (zt_plugin_row(name, &e)) {
		struct zap_dir_entry d = { .size = sizeof(d) };

		fprintf(stderr, "FAIL: no '%s' row in the load report: the plugin "
			"was not found (ZAP_PLUGIN_PATH=%s)\n", name,
			getenv("ZAP_PLUGIN_PATH") ? getenv("ZAP_PLUGIN_PATH")
						  : "(unset)");
		/* A refused directory names what to fix (its own or a
		 * parent's mode or owner). */
		for (size_t i = 0; zap_report_dir_get(i, &d) == 0; i++)
			if (strncmp(d.status, "ok", 3) != 0)
				fprintf(stderr, "  plugin directory %s [%s]: %s\n",
					d.path, d.source, d.status);
		return 1;
	}
	switch (e.state) {
	case ZAP_PLUGIN_LOADED:
		return 0;
	case ZAP_PLUGIN_NOT_PRESENT:
		printf("SKIP: needs %s: %s: not present: %s\n", needs, name, e.reason);
		return ZT_SKIP;
	default:
		fprintf(stderr, "FAIL: plugin '%s' (%s) is '%s', not loaded or "
			"not present: %s\n", name, e.path,
			zap_plugin_state_name(e.state), e.reason);
		return 1;
	}
}

#endif /* ZAP_TEST_H */
