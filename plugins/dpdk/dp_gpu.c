/* SPDX-License-Identifier: MIT */
/*
 * The mbuf pool mapped for the GPU, where CUDA is present (the plugin
 * loads libcuda.so.1 itself, through util/cuda): every memory chunk of a
 * port's pool is registered with cuMemHostRegister (portable, device-
 * mapped) and its device address kept, so that single-frame messages
 * carry a device pointer kernels read in place (zap_msg_device_ptr()).
 *
 * Shared state: the GPU fields of dp_ports[] (dp_int.h), written once by
 * dp_gpu_register() under dp_port_lock when the port's pool is created,
 * before any instance of the port runs; read without a lock after that.
 */
#include <stdio.h>

#include <rte_mempool.h>

#include "dp_int.h"

struct gpu_reg {
	const struct zcu *cu;
	unsigned port;
	char why[160];
};

static void gpu_chunk(struct rte_mempool *mp, void *opaque,
		      struct rte_mempool_memhdr *memhdr, unsigned idx)
{
	struct gpu_reg *g = opaque;
	struct dp_port *pt = &dp_ports[g->port];
	struct dp_gpu_chunk *c;
	char err[96];
	zcu_result r;

	if (g->why[0])
		return;
	if (pt->nchunks == DP_GPU_CHUNKS) {
		snprintf(g->why, sizeof(g->why), "more than %d memory chunks",
			 DP_GPU_CHUNKS);
		return;
	}
	c = &pt->chunk[pt->nchunks];
	r = g->cu->MemHostRegister(memhdr->addr, memhdr->len,
				   ZCU_MEMHOSTREGISTER_PORTABLE |
					   ZCU_MEMHOSTREGISTER_DEVICEMAP);
	if (r != ZCU_SUCCESS) {
		snprintf(g->why, sizeof(g->why), "cuMemHostRegister(%zu bytes): %s",
			 memhdr->len, zcu_error_name(g->cu, r, err, sizeof(err)));
		return;
	}
	c->addr = memhdr->addr;
	c->len = memhdr->len;
	pt->nchunks++;
	r = g->cu->MemHostGetDevicePointer(&c->dev, memhdr->addr, 0);
	if (r != ZCU_SUCCESS)
		snprintf(g->why, sizeof(g->why), "cuMemHostGetDevicePointer: %s",
			 zcu_error_name(g->cu, r, err, sizeof(err)));
}

/* Register every chunk of the pool in the device's primary context; on
 * failure undo what was registered and say why in g->why. */
static void gpu_map_pool(struct gpu_reg *g, zcu_ctx ctx)
{
	struct dp_port *pt = &dp_ports[g->port];
	zcu_ctx prev;

	g->cu->CtxPushCurrent(ctx);
	rte_mempool_mem_iter(pt->mp, gpu_chunk, g);
	if (g->why[0])
		while (pt->nchunks)
			g->cu->MemHostUnregister(pt->chunk[--pt->nchunks].addr);
	g->cu->CtxPopCurrent(&prev);
}

/*
 * Register a port's mbuf pool with the GPU, where CUDA is present, so that
 * kernels read single-frame payloads where the NIC put them
 * (zap_msg_device_ptr()). Failure is not fatal: messages then carry no
 * device pointer, and the log says why.
 */
void dp_gpu_register(const struct zap_host *h, unsigned port)
{
	struct gpu_reg g = { .port = port };
	struct zcu_device_info info;
	zcu_ctx ctx;
	char err[96];
	zcu_result r;

	if (zcu_load(&g.cu, g.why, sizeof(g.why)) != ZAP_PROBE_OK ||
	    zcu_open_device(h, g.cu, &info, g.why, sizeof(g.why)) != ZAP_PROBE_OK) {
		h->log(ZAP_LOG_DEBUG, DP_DOM, "mbuf pool not mapped for a GPU: %s",
		       g.why);
		return;
	}
	if (!g.cu->MemHostRegister || !g.cu->MemHostUnregister ||
	    !g.cu->MemHostGetDevicePointer) {
		h->log(ZAP_LOG_WARN, DP_DOM,
		       "mbuf pool not mapped for the GPU: the CUDA "
		       "driver lacks cuMemHostRegister/cuMemHostGetDevicePointer");
		return;
	}
	r = g.cu->DevicePrimaryCtxRetain(&ctx, info.dev);
	if (r != ZCU_SUCCESS) {
		h->log(ZAP_LOG_WARN, DP_DOM,
		       "mbuf pool not mapped for the GPU: "
		       "cuDevicePrimaryCtxRetain: %s",
		       zcu_error_name(g.cu, r, err, sizeof(err)));
		return;
	}
	gpu_map_pool(&g, ctx);
	if (g.why[0]) {
		g.cu->DevicePrimaryCtxRelease(info.dev);
		h->log(ZAP_LOG_WARN, DP_DOM, "mbuf pool not mapped for the GPU: %s",
		       g.why);
		return;
	}
	/* The context stays retained: the pool lives as long as the process. */
	dp_ports[port].gpu = true;
	h->log(ZAP_LOG_INFO, DP_DOM,
	       "mbuf pool of port %u mapped for CUDA device %d (%s): "
	       "%u chunks",
	       port, info.ordinal, info.name, dp_ports[port].nchunks);
}

void *dp_gpu_addr(unsigned port, const void *p)
{
	const char *c = p;

	if (!dp_ports[port].gpu)
		return NULL;
	for (unsigned i = 0; i < dp_ports[port].nchunks; i++) {
		const struct dp_gpu_chunk *k = &dp_ports[port].chunk[i];

		if (c >= k->addr && c < k->addr + k->len)
			return (void *)(uintptr_t)(k->dev + (zcu_ptr)(c - k->addr));
	}
	return NULL;
}

/* Cheap: cuInit and device queries only. */
const char *dp_gpu_plan(const struct zap_host *h, char *buf, size_t len)
{
	struct zcu_device_info info;
	const struct zcu *cu;
	char why[160];

	if (zcu_load(&cu, why, sizeof(why)) != ZAP_PROBE_OK ||
	    zcu_open_device(h, cu, &info, why, sizeof(why)) != ZAP_PROBE_OK)
		snprintf(buf, len, "no (%s)", why);
	else if (!cu->MemHostRegister || !cu->MemHostGetDevicePointer)
		snprintf(buf, len, "no (the CUDA driver lacks cuMemHostRegister)");
	else
		snprintf(buf, len, "at open, for CUDA device %d (%s)", info.ordinal,
			 info.name);
	return buf;
}
