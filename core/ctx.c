/* SPDX-License-Identifier: MIT */
/*
 * Cancellation and deadlines. A ctx owns an eventfd that becomes readable,
 * and stays readable, once the ctx is cancelled: transports poll() it next
 * to their own descriptors, so one write wakes every blocked call at once.
 */
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "zap-private.h"

struct zap_ctx {
	atomic_int cancelled;
	_Atomic uint64_t deadline_ns; /* CLOCK_MONOTONIC; 0 = none */
	int efd;
};

uint64_t zap__now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

ZAP_EXPORT int zap_ctx_new(struct zap_ctx **out)
{
	struct zap_ctx *c;

	if (!out)
		return zap__fail(-EINVAL, "zap_ctx_new: NULL out");
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->efd < 0) {
		int err = -errno;

		free(c);
		return zap__fail(err, "zap_ctx_new: eventfd failed");
	}
	*out = c;
	return 0;
}

ZAP_EXPORT int zap_ctx_set_deadline(struct zap_ctx *ctx, uint64_t deadline_ns)
{
	if (!ctx)
		return -EINVAL;
	atomic_store(&ctx->deadline_ns, deadline_ns);
	return 0;
}

ZAP_EXPORT int zap_ctx_set_timeout(struct zap_ctx *ctx, uint64_t timeout_ns)
{
	uint64_t now = zap__now_ns();

	if (!ctx)
		return -EINVAL;
	/* Saturate instead of wrapping, and never store 0 (= no deadline).
	 * Release, not sequentially consistent: the deadline orders nothing
	 * else, and the locked exchange a seq_cst store is on x86-64 came
	 * with every zap_send() through the default send timeout. */
	atomic_store_explicit(&ctx->deadline_ns,
			      timeout_ns > UINT64_MAX - now ? UINT64_MAX
							    : now + timeout_ns,
			      memory_order_release);
	return 0;
}

ZAP_EXPORT void zap_ctx_cancel(struct zap_ctx *ctx)
{
	uint64_t one = 1;

	if (!ctx || atomic_exchange(&ctx->cancelled, 1))
		return;
	/* Cannot fail short of a bug: the counter goes from 0 to 1 once. */
	if (write(ctx->efd, &one, sizeof(one)) < 0)
		abort();
}

ZAP_EXPORT int zap_ctx_err(const struct zap_ctx *ctx)
{
	uint64_t d;

	if (!ctx)
		return 0;
	if (atomic_load(&((struct zap_ctx *)ctx)->cancelled))
		return -ECANCELED;
	d = atomic_load(&((struct zap_ctx *)ctx)->deadline_ns);
	if (d && zap__now_ns() >= d)
		return -ETIMEDOUT;
	return 0;
}

ZAP_EXPORT void zap_ctx_free(struct zap_ctx *ctx)
{
	if (!ctx)
		return;
	close(ctx->efd);
	free(ctx);
}

int zap__ctx_fd(const struct zap_ctx *ctx)
{
	return ctx ? ctx->efd : -1;
}

int zap__ctx_timeout_ms(const struct zap_ctx *ctx)
{
	uint64_t d, now, ms;

	if (!ctx)
		return -1;
	d = atomic_load(&((struct zap_ctx *)ctx)->deadline_ns);
	if (!d)
		return -1;
	now = zap__now_ns();
	if (now >= d)
		return 0;
	ms = (d - now + 999999) / 1000000; /* round up: never wake early */
	return ms > INT_MAX ? INT_MAX : (int)ms;
}
