/* SPDX-License-Identifier: MIT */
/*
 * The uma transport: the default TCP wire (same library, same frames, so
 * uma and default endpoints talk to each other), but every received
 * message lands directly in a buffer of CUDA managed memory from a core
 * buffer pool, so GPU kernels read it where it is. The plugin links no CUDA
 * library; util/cuda loads the driver at probe/open time.
 *
 * Pool full: the wire pauses the connection (uma_rx_alloc() says -EAGAIN)
 * and every release of pool memory, a received message or a buffer from
 * zap_buffer_alloc(), kicks the wire, so the connection resumes at once.
 * A release may come after the instance is gone: it then holds only a
 * reference to the wire's kick (tcp_kick_put()) and the pool's memory
 * side, never the instance.
 *
 * Shared state: struct uma_mem's record lists, under its mutex (any
 * thread may release a buffer); the rest is set at open and read-only.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zap/zap-plugin.h>

#include "config.h"
#include "tcp_wire.h"
#include "zap-cuda.h"

#define UMA_DEFAULT_POOL_BYTES (4ull << 30)

struct uma_buf;

/* Memory side: outlives the instance until the last buffer is released. */
struct uma_mem {
	const struct zcu *cu;
	zcu_device dev;
	zcu_ctx ctx; /* the device's primary context, retained */
	pthread_mutex_t mu;
	struct uma_buf *spare; /* mu: records not handed out */
	struct uma_buf *all;   /* mu: every record, freed with the pool */
};

struct uma {
	const struct zap_host *host;
	struct zcu_device_info info;
	struct zap_pool *pool;
	struct uma_mem *mem;
	struct tcp_wire *wire;
	struct tcp_kick *kick; /* our reference to the wire's kick */
};

/* A received message whose payload is a pool buffer. */
struct uma_rx {
	struct tcp_rx_msg rx;
	struct zap_buffer *buf;
	struct tcp_kick *kick; /* a reference, dropped at release */
};

/*
 * An application's buffer (zap_buffer_alloc()): the pool's buffer behind a
 * record of ours, so that its release kicks the wire. Records are reused
 * and freed only with the pool, like the pool's own, so that a second
 * release of a buffer not handed out again is a no-op (zap.h).
 */
struct uma_buf {
	struct zap_buffer pub;  /* first: what the application holds */
	struct zap_buffer *buf; /* the pool's */
	struct tcp_kick *kick;  /* a reference while held */
	struct uma_mem *mem;
	atomic_int held;
	struct uma_buf *next; /* mem->spare */
	struct uma_buf *all_next;
};

static void *mem_alloc(void *user, size_t len, void **dev)
{
	struct uma_mem *m = user;
	zcu_ptr p = 0;
	zcu_ctx prev;
	zcu_result r;

	if (m->cu->CtxPushCurrent(m->ctx) != ZCU_SUCCESS)
		return NULL;
	r = m->cu->MemAllocManaged(&p, len, ZCU_MEM_ATTACH_GLOBAL);
	m->cu->CtxPopCurrent(&prev);
	if (r != ZCU_SUCCESS)
		return NULL;
	/* Unified addressing: the managed address is valid on CPU and GPU. */
	*dev = (void *)(uintptr_t)p;
	return (void *)(uintptr_t)p;
}

static void mem_free(void *user, void *ptr, size_t len)
{
	struct uma_mem *m = user;
	zcu_ctx prev;

	if (m->cu->CtxPushCurrent(m->ctx) != ZCU_SUCCESS)
		return;
	m->cu->MemFree((zcu_ptr)(uintptr_t)ptr);
	m->cu->CtxPopCurrent(&prev);
}

static void mem_destroy(void *user)
{
	struct uma_mem *m = user;

	/* The pool is gone, so no buffer is held: no record is in use. */
	for (struct uma_buf *b = m->all, *next; b; b = next) {
		next = b->all_next;
		free(b);
	}
	pthread_mutex_destroy(&m->mu);
	m->cu->DevicePrimaryCtxRelease(m->dev);
	free(m);
}

static enum zap_probe_result uma_check(const struct zap_host *host, const struct zcu **cu,
				       struct zcu_device_info *info, char *why,
				       size_t len)
{
	enum zap_probe_result r = zcu_load(cu, why, len);

	if (r != ZAP_PROBE_OK)
		return r;
	r = zcu_open_device(host, *cu, info, why, len);
	if (r != ZAP_PROBE_OK)
		return r;
	if (!info->managed) {
		snprintf(why, len, "CUDA device %d (%s) lacks managed memory",
			 info->ordinal, info->name);
		return ZAP_PROBE_NOT_PRESENT;
	}
	return ZAP_PROBE_OK;
}

static void uma_fill_caps(const struct zcu_device_info *info, struct zap_caps *c)
{
	/* Received bytes land in managed memory without a staging copy; they
	 * count as GPU-resident only where the GPU may access managed memory
	 * concurrently with the CPU (no migration on first touch). */
	c->zero_copy = true;
	c->device_buffers = true;
	c->gpu_resident = info->concurrent_managed != 0;
}

/* ZAP_UMA_POOL_BYTES: through libzap's registry (plugin ABI 1.4), which
 * holds its default and range; an older libzap: env_bytes(), the same. */
static int pool_cap(const struct zap_host *host, uint64_t *cap)
{
	if (ZAP_HOST_HAS(host, config_u64))
		return host->config_u64("ZAP_UMA_POOL_BYTES", cap) < 0 ? -EINVAL : 0;
	return host->env_bytes("ZAP_UMA_POOL_BYTES", UMA_DEFAULT_POOL_BYTES, 4096,
			       1ull << 50, cap);
}

static enum zap_probe_result uma_probe(const struct zap_host *host,
				       struct zap_probe_info *pi)
{
	struct zcu_device_info info;
	const struct zcu *cu;
	enum zap_probe_result r;
	uint64_t cap;

	if (!ZAP_HOST_HAS(host, last_error)) { /* host older than ABI 1.1 */
		snprintf(pi->reason, sizeof(pi->reason),
			 "libzap is too old for this plugin (needs plugin ABI 1.1)");
		return ZAP_PROBE_ERROR;
	}
	r = uma_check(host, &cu, &info, pi->reason, sizeof(pi->reason));
	if (r != ZAP_PROBE_OK)
		return r;
	if (pool_cap(host, &cap)) {
		snprintf(pi->reason, sizeof(pi->reason), "%s", host->last_error());
		return ZAP_PROBE_ERROR;
	}
	snprintf(pi->detail, sizeof(pi->detail),
		 "device: %d (%s), driver API %d\n"
		 "managed memory: yes\n"
		 "concurrent managed access: %s\n"
		 "pageable memory coherent (host page tables): %s\n"
		 "pool cap: %llu bytes",
		 info.ordinal, info.name, info.driver_version,
		 info.concurrent_managed ? "yes" : "no",
		 info.pageable_access && info.host_page_tables ? "yes" : "no",
		 (unsigned long long)cap);
	uma_fill_caps(&info, &pi->caps);
	return ZAP_PROBE_OK;
}

static void uma_rx_release(struct zap_msg *msg)
{
	struct uma_rx *m = (struct uma_rx *)msg;
	struct zap_buffer *buf = m->buf;
	struct tcp_kick *k = m->kick;

	free(m);
	/* Room in the pool now: a connection paused on it resumes. The kick
	 * comes after the release, so the retry finds the room. */
	buf->release(buf);
	tcp_kick(k);
	tcp_kick_put(k);
}

static int uma_rx_alloc(void *user, size_t len, struct tcp_rx_msg **out)
{
	struct uma *u = user;
	struct uma_rx *m = calloc(1, sizeof(*m));
	int rc;

	/* Out of host memory is no pause: no release of ours would end it. */
	if (!m)
		return -ENOMEM;
	/* Pool full (-EAGAIN): the wire pauses the connection until a
	 * release kicks it. */
	rc = u->host->pool_try_alloc(u->pool, len, &m->buf);
	if (rc) {
		free(m);
		return rc;
	}
	m->kick = tcp_wire_kick_get(u->wire);
	m->rx.msg.size = sizeof(m->rx.msg);
	m->rx.msg.data = m->buf->bytes;
	m->rx.msg.device_ptr = m->buf->device_ptr;
	m->rx.msg.release = uma_rx_release;
	*out = &m->rx;
	return 0;
}

static int uma_open(const struct zap_host *host, const struct zap_open_args *args,
		    void **tp)
{
	struct zap_pool_backing backing = {
		.size = sizeof(backing),
		.alloc = mem_alloc,
		.free = mem_free,
		.destroy = mem_destroy,
	};
	struct tcp_wire_args wa = {
		.host = host,
		.domain = "uma",
		.listen = args->listen,
		.max_msg_size = args->max_msg_size,
	};
	/* TLS as for default (an older host's args end before these). */
	if (args->size >=
	    offsetof(struct zap_open_args, tls_peers) + sizeof(args->tls_peers)) {
		wa.tls_cert = args->tls_cert;
		wa.tls_key = args->tls_key;
		wa.tls_ca = args->tls_ca;
		wa.tls_peers = args->tls_peers;
	}
	char why[256], err[96];
	const struct zcu *cu;
	struct uma_mem *mem;
	struct uma *u;
	uint64_t cap = args->pool_bytes;
	zcu_result r;
	int rc;

	if (uma_check(host, &cu, &(struct zcu_device_info){ 0 }, why, sizeof(why)) !=
	    ZAP_PROBE_OK)
		return host->fail(ZAP_ENOTAVAIL, "uma: %s", why);
	if (!cap && pool_cap(host, &cap))
		return -EINVAL;
	u = calloc(1, sizeof(*u));
	mem = calloc(1, sizeof(*mem));
	if (!u || !mem) {
		free(u);
		free(mem);
		return -ENOMEM;
	}
	u->host = host;
	uma_check(host, &cu, &u->info, why, sizeof(why));
	mem->cu = cu;
	mem->dev = u->info.dev;
	pthread_mutex_init(&mem->mu, NULL);
	r = cu->DevicePrimaryCtxRetain(&mem->ctx, mem->dev);
	if (r != ZCU_SUCCESS) {
		pthread_mutex_destroy(&mem->mu);
		free(u);
		free(mem);
		return host->fail(-EIO, "uma: cuDevicePrimaryCtxRetain failed: %s",
				  zcu_error_name(cu, r, err, sizeof(err)));
	}
	backing.user = mem;
	rc = host->pool_new(&backing, cap, args->max_msg_size ? args->max_msg_size : 1,
			    &u->pool);
	if (rc) {
		mem_destroy(mem);
		free(u);
		return rc;
	}
	/* From here the pool owns @mem (mem_destroy runs when it goes). */
	u->mem = mem;
	wa.alloc.alloc = uma_rx_alloc;
	wa.alloc.user = u;
	rc = tcp_wire_open(&wa, &u->wire);
	if (rc)
		goto fail;
	u->kick = tcp_wire_kick_get(u->wire);
	*tp = u;
	return 0;
fail:
	host->pool_close(u->pool);
	free(u);
	return rc;
}

static void uma_shutdown(void *tp)
{
	struct uma *u = tp;

	tcp_wire_shutdown(u->wire);
}

static void uma_destroy(void *tp)
{
	struct uma *u = tp;

	tcp_kick_put(u->kick);
	tcp_wire_destroy(u->wire);
	/* Messages and buffers still held free their memory when released. */
	u->host->pool_close(u->pool);
	free(u);
}

static int uma_send(void *tp, const char *peer, const void *buf, size_t len,
		    struct zap_ctx *ctx)
{
	struct uma *u = tp;

	/* A pool buffer is sent from where it lies: no staging copy. */
	return tcp_wire_send(u->wire, peer, buf, len, ctx);
}

static int uma_send_burst(void *tp, const char *peer, const struct zap_iov *msgs,
			  unsigned int n, struct zap_ctx *ctx)
{
	struct uma *u = tp;
	return tcp_wire_send_burst(u->wire, peer, msgs, n, ctx);
}

static int uma_recv(void *tp, struct zap_ctx *ctx, struct zap_msg **out)
{
	struct uma *u = tp;

	return tcp_wire_recv(u->wire, ctx, out);
}

static int uma_caps(void *tp, struct zap_caps *caps)
{
	struct uma *u = tp;

	uma_fill_caps(&u->info, caps);
	caps->max_msg_size = tcp_wire_max_msg(u->wire);
	return 0;
}

static int uma_address(void *tp, char *buf, size_t len)
{
	struct uma *u = tp;

	return tcp_wire_address(u->wire, buf, len);
}

static void uma_buf_release(struct zap_buffer *pub)
{
	struct uma_buf *b = (struct uma_buf *)pub;

	if (!atomic_exchange(&b->held, 0))
		return; /* released already */

	struct zap_buffer *buf = b->buf;
	struct tcp_kick *k = b->kick;
	struct uma_mem *mem = b->mem;

	pthread_mutex_lock(&mem->mu);
	b->next = mem->spare;
	mem->spare = b;
	pthread_mutex_unlock(&mem->mu);
	/* The last release after close frees the pool, @mem and @b with it:
	 * only locals from here. */
	buf->release(buf);
	tcp_kick(k);
	tcp_kick_put(k);
}

static int uma_buffer_alloc(void *tp, size_t size, struct zap_ctx *ctx,
			    struct zap_buffer **out)
{
	struct uma *u = tp;
	struct uma_mem *mem = u->mem;
	struct zap_buffer *buf;
	struct uma_buf *b;
	int rc = u->host->pool_alloc(u->pool, size, ctx, &buf);

	if (rc)
		return rc;
	pthread_mutex_lock(&mem->mu);
	b = mem->spare;
	if (b) {
		mem->spare = b->next;
	} else if ((b = calloc(1, sizeof(*b)))) {
		b->mem = mem;
		b->all_next = mem->all;
		mem->all = b;
	}
	pthread_mutex_unlock(&mem->mu);
	if (!b) {
		buf->release(buf); /* the pool is open: @mem stays */
		return -ENOMEM;
	}
	b->buf = buf;
	b->kick = tcp_wire_kick_get(u->wire);
	b->pub = (struct zap_buffer){
		.size = sizeof(b->pub),
		.bytes = buf->bytes,
		.len = buf->len,
		.device_ptr = buf->device_ptr,
		.release = uma_buf_release,
	};
	atomic_store(&b->held, 1);
	*out = &b->pub;
	return 0;
}

static int uma_pool_stats(void *tp, struct zap_pool_stats *stats)
{
	struct uma *u = tp;

	u->host->pool_stats(u->pool, stats);
	return 0;
}

static int uma_peer_path(void *tp, const char *peer, char *buf, size_t len)
{
	struct uma *u = tp;

	return tcp_wire_path(u->wire, peer, buf, len);
}

static int uma_stats(void *tp, struct zap_stats *out)
{
	struct uma *u = tp;

	tcp_wire_obs(u->wire, out);
	return 0;
}

static int uma_peers(void *tp, struct zap_peer_info *out, size_t n)
{
	struct uma *u = tp;

	return tcp_wire_peers(u->wire, out, n);
}

static int uma_events(void *tp, struct zap_event *out, size_t n)
{
	struct uma *u = tp;

	return tcp_wire_events(u->wire, out, n);
}

static const struct zap_plugin_ops uma_ops = {
	.size = sizeof(uma_ops),
	.probe = uma_probe,
	.open = uma_open,
	.shutdown = uma_shutdown,
	.destroy = uma_destroy,
	.send = uma_send,
	.recv = uma_recv,
	.caps = uma_caps,
	.address = uma_address,
	.buffer_alloc = uma_buffer_alloc,
	.pool_stats = uma_pool_stats,
	.peer_path = uma_peer_path,
	.send_burst = uma_send_burst,
	.stats = uma_stats,
	.peers = uma_peers,
	.events = uma_events,
};

ZAP_PLUGIN_EXPORT = {
	.abi_major = ZAP_PLUGIN_ABI_MAJOR,
	.abi_minor = ZAP_PLUGIN_ABI_MINOR,
	.size = sizeof(struct zap_plugin),
	.rank = ZAP_RANK_UMA,
	.name = "uma",
	.version = ZAP_VERSION,
	.ops = &uma_ops,
};
