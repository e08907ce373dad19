/* SPDX-License-Identifier: MIT */
/*
 * A host table for tests that drive the TCP wire (util/tcp) directly: log
 * and fail print (WARN and worse; -ETIMEDOUT is expected and quiet), and a
 * "ctx" is a struct tctx with a deadline (the wire only passes it back to
 * these functions). NULL: no deadline.
 */
#ifndef ZAP_TEST_WIRE_HOST_H
#define ZAP_TEST_WIRE_HOST_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "tcp_wire.h"
#include "zap-test.h"

#ifndef ZAP_TCP_INT_H /* tcp_int.h has the same clock */
static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
#endif

/* ---- a host table ------------------------------------------------------- */

struct tctx {
	uint64_t deadline_ns;
};

static void h_log(enum zap_log_level level, const char *domain, const char *fmt,
		  ...)
{
	va_list ap;

	if (level > ZAP_LOG_WARN)
		return;
	va_start(ap, fmt);
	fprintf(stderr, "# %s: ", domain);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static int h_log_enabled(enum zap_log_level level)
{
	return level <= ZAP_LOG_WARN;
}

static int h_fail(int err, const char *fmt, ...)
{
	va_list ap;

	if (err == -ETIMEDOUT)
		return err; /* expected here */
	va_start(ap, fmt);
	fprintf(stderr, "# fail %d: ", err);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	return err;
}

static int h_ctx_fd(const struct zap_ctx *ctx)
{
	(void)ctx;
	return -1;
}

static int h_ctx_timeout_ms(const struct zap_ctx *ctx)
{
	const struct tctx *c = (const struct tctx *)ctx;
	uint64_t now = now_ns();

	if (!c)
		return -1;
	if (now >= c->deadline_ns)
		return 0;
	return (int)((c->deadline_ns - now + 999999u) / 1000000u);
}

static int h_ctx_err(const struct zap_ctx *ctx)
{
	const struct tctx *c = (const struct tctx *)ctx;

	return c && now_ns() >= c->deadline_ns ? -ETIMEDOUT : 0;
}

/* The configuration registry is libzap's own (core/config.c): these tests
 * link the core's objects for it, so the wire reads its variables exactly
 * as under libzap. */
int zap__host_config_u64(const char *name, uint64_t *out);
int zap__host_config_str(const char *name, const char **out);
const char *zap_last_error(void);

static const struct zap_host host = {
	.size = sizeof(struct zap_host),
	.abi_major = ZAP_PLUGIN_ABI_MAJOR,
	.abi_minor = ZAP_PLUGIN_ABI_MINOR,
	.log = h_log,
	.log_enabled = h_log_enabled,
	.fail = h_fail,
	.ctx_fd = h_ctx_fd,
	.ctx_timeout_ms = h_ctx_timeout_ms,
	.ctx_err = h_ctx_err,
	.last_error = zap_last_error,
	.config_u64 = zap__host_config_u64,
	.config_str = zap__host_config_str,
};

/* A deadline @ms from now, scaled by ZAP_TEST_TIMEOUT_SCALE (tests/README.md):
 * the ones that must not expire get room on a loaded host, and the ones
 * that must expire still do. */
static struct zap_ctx *within_ms(struct tctx *c, unsigned ms)
{
	c->deadline_ns = now_ns() + (uint64_t)zt_timeout_ms(ms) * 1000000u;
	return (struct zap_ctx *)c;
}

/* A receive allocator: one calloc() for record and payload. */
static inline void wire_malloc_release(struct zap_msg *m)
{
	free(m); /* msg is the record's first member */
}

static inline int wire_malloc_alloc(void *user, size_t len, struct tcp_rx_msg **out)
{
	struct tcp_rx_msg *m = calloc(1, sizeof(*m) + len);

	(void)user;
	if (!m)
		return -ENOMEM;
	m->msg.size = sizeof(m->msg);
	m->msg.data = m + 1;
	m->msg.release = wire_malloc_release;
	*out = m;
	return 0;
}

/* A wire's arguments: this host table, 127.0.0.1 on any port, messages
 * of up to @max bytes from wire_malloc_alloc(). */
static inline struct tcp_wire_args wire_args(const char *dom, uint64_t max)
{
	return (struct tcp_wire_args){
		.host = &host,
		.domain = dom,
		.listen = "127.0.0.1:0",
		.max_msg_size = max,
		.alloc = { .alloc = wire_malloc_alloc },
	};
}

#endif /* ZAP_TEST_WIRE_HOST_H */
