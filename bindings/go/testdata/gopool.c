/* SPDX-License-Identifier: MIT */
/*
 * libzap-gopool.so: a test plugin whose only working part is a buffer
 * pool in host memory (the core's pool, the one uma backs with CUDA
 * managed memory), so that the Go binding's Buffer and BufferAllocator
 * are tested on hosts without a GPU. Send and recv are not supported.
 * Rank -1: never chosen over default unless asked for by name.
 *
 * Pool cap: the open attribute, else ZAP_GOPOOL_BYTES, else 1 MiB; the
 * largest buffer is the cap.
 */
#include <errno.h>
#include <stdlib.h>

#include <zap/zap-plugin.h>

struct gp {
	const struct zap_host *host;
	struct zap_pool *pool;
};

static enum zap_probe_result gp_probe(const struct zap_host *host,
				      struct zap_probe_info *info)
{
	(void)host;
	info->caps.max_msg_size = 0;
	return ZAP_PROBE_OK;
}

static int gp_open(const struct zap_host *host,
		   const struct zap_open_args *args, void **tp)
{
	uint64_t cap = args->pool_bytes;
	struct gp *g;
	int rc;

	if (!cap && (rc = host->env_bytes("ZAP_GOPOOL_BYTES", 1 << 20, 4096,
					  1ull << 32, &cap)))
		return rc;
	g = calloc(1, sizeof(*g));
	if (!g)
		return host->fail(-ENOMEM, "gopool: out of memory");
	g->host = host;
	rc = host->pool_new(NULL, cap, cap, &g->pool);
	if (rc) {
		free(g);
		return rc;
	}
	*tp = g;
	return 0;
}

/* Nothing blocks in send or recv; blocked allocations are the pool's to
 * wake (the host closes it in destroy, after calls have left). */
static void gp_shutdown(void *tp)
{
	(void)tp;
}

static void gp_destroy(void *tp)
{
	struct gp *g = tp;

	g->host->pool_close(g->pool);
	free(g);
}

static int gp_send(void *tp, const char *peer, const void *buf, size_t len,
		   struct zap_ctx *ctx)
{
	struct gp *g = tp;

	(void)peer, (void)buf, (void)len, (void)ctx;
	return g->host->fail(-EOPNOTSUPP, "gopool: a pool-only test plugin");
}

static int gp_recv(void *tp, struct zap_ctx *ctx, struct zap_msg **out)
{
	struct gp *g = tp;

	(void)ctx, (void)out;
	return g->host->fail(-EOPNOTSUPP, "gopool: a pool-only test plugin");
}

static int gp_caps(void *tp, struct zap_caps *caps)
{
	(void)tp;
	caps->device_buffers = false; /* host memory: no device pointer */
	return 0;
}

static int gp_buffer_alloc(void *tp, size_t size, struct zap_ctx *ctx,
			   struct zap_buffer **out)
{
	struct gp *g = tp;

	return g->host->pool_alloc(g->pool, size, ctx, out);
}

static int gp_pool_stats(void *tp, struct zap_pool_stats *stats)
{
	struct gp *g = tp;

	g->host->pool_stats(g->pool, stats);
	return 0;
}

static const struct zap_plugin_ops gp_ops = {
	.size = sizeof(struct zap_plugin_ops),
	.probe = gp_probe,
	.open = gp_open,
	.shutdown = gp_shutdown,
	.destroy = gp_destroy,
	.send = gp_send,
	.recv = gp_recv,
	.caps = gp_caps,
	.buffer_alloc = gp_buffer_alloc,
	.pool_stats = gp_pool_stats,
};

ZAP_PLUGIN_EXPORT = {
	.abi_major = ZAP_PLUGIN_ABI_MAJOR, .abi_minor = ZAP_PLUGIN_ABI_MINOR,
	.size = sizeof(struct zap_plugin), .rank = -1,
	.name = "gopool", .version = "1.0", .ops = &gp_ops,
};
