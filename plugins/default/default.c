/* SPDX-License-Identifier: MIT */
/*
 * The `default` transport: TCP over kernel sockets, built into libzap
 * through the same plugin ABI as every loadable plugin. The wire itself
 * lives in util/tcp (tcp_wire.h) so that uma can reuse it with its own
 * receive allocator; this file is only the descriptor, the probe and
 * malloc-backed messages.
 */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <zap/zap-plugin.h>

#include "config.h"
#include "tcp_wire.h"

#define TCP_DOMAIN "default"

struct tcp_tp {
	const struct zap_host *host;
	struct tcp_wire *wire;
};

/*
 * Received messages reuse recently released memory, process-wide
 * (messages outlive their transport), under cache_mu, while an endpoint
 * of this transport is open (nopen): the last one to close frees what is
 * cached, and a message released after that is freed at once, so the
 * memory kept is an open endpoint's cost.
 *
 * Large blocks: a fresh block of a megabyte comes from the kernel a page
 * at a time (a fault every 4 KiB), and glibc hands such blocks back on
 * free(), so the faults cost more than the copies. So a few released
 * blocks of at least CACHE_MIN bytes stay cached, at most CACHE_SLOTS of
 * them and CACHE_BYTES in all (two messages of the default largest size:
 * glibc maps blocks above 32 MiB afresh every time, and a smaller bound
 * faulted in every page of every 64 MiB message); the smallest one that
 * fits is reused (bench/MEASUREMENTS.md, "rx-block-cache").
 *
 * Mid-sized blocks (MID_MIN up to CACHE_MIN) come from the heap, and a
 * stream of them cycles it: a poll round delivers up to a few hundred KiB
 * of messages (tcp_int.h, TCP_SHM_BATCH_BYTES) before the application
 * releases any, and once it released them, glibc finds more than its trim
 * threshold (128 KiB) free at the heap's top and gives it back to the
 * kernel (brk), so the next round faults every page in again. Both cost a
 * lot (the shrink flushes the TLB; bench/MEASUREMENTS.md,
 * "rx-block-cache"). So released mid-sized blocks
 * stay on a list per quarter-octave class (linked through the blocks
 * themselves), at most MID_BYTES in all: more than a round, so the heap
 * no longer shrinks and grows between rounds. A block is allocated at its
 * class's size (at most a quarter more than asked for), so that any block
 * of a class fits any request of it. Below MID_MIN, a round of
 * TCP_SHM_BATCH messages stays under the trim threshold.
 */
#define CACHE_MIN (128u << 10)
#define CACHE_SLOTS 4
#define CACHE_BYTES (130u << 20)
#define MID_LOG2 8u /* MID_MIN: 256 bytes */
#define MID_MIN (1u << MID_LOG2)
#define MID_CLASSES 36 /* 256 bytes up to 112 KiB, four a power of two */
#define MID_BYTES (1u << 20)
static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	void *p;
	size_t cap;
} cache[CACHE_SLOTS];
static size_t cache_bytes;
static void *mid_list[MID_CLASSES]; /* each block's first bytes: the next */
static size_t mid_bytes;
static unsigned nopen; /* endpoints of this transport open */

_Static_assert((size_t)(7u << (MID_LOG2 + MID_CLASSES / 4 - 3)) < CACHE_MIN &&
		       (size_t)(4u << (MID_LOG2 + MID_CLASSES / 4 - 2)) == CACHE_MIN,
	       "the mid classes end where the large cache begins");

/*
 * A received message's block: the wire's record, then the block's usable
 * bytes, then the payload. A block keeps @cap while it is cached (the
 * lists link blocks through their first bytes only), so a release does not
 * ask malloc_usable_size() (bench/MEASUREMENTS.md, "recv-tls").
 */
struct rx_block {
	struct tcp_rx_msg rx; /* first: &rx.msg is the zap_msg */
	size_t cap;
};

/* The usable bytes of @p, a block cached or handed out before. */
static size_t block_cap(const void *p)
{
	return ((const struct rx_block *)p)->cap;
}

/* A new block of @n bytes (at least a struct rx_block), its cap set. */
static void *block_new(size_t n)
{
	struct rx_block *b = malloc(n);

	if (b)
		b->cap = malloc_usable_size(b);
	return b;
}

/* The largest class not above @n bytes (MID_MIN <= @n < CACHE_MIN). */
static unsigned mid_class(size_t n)
{
	unsigned k = 63u - (unsigned)__builtin_clzll((unsigned long long)n);

	return (k - MID_LOG2) * 4u + (unsigned)((n >> (k - 2u)) & 3u);
}

/* The bytes of a block of class @i. */
static size_t mid_size(unsigned i)
{
	return (size_t)(4u + i % 4u) << (MID_LOG2 + i / 4u - 2u);
}

static void *cache_take(size_t need)
{
	void *p = NULL;
	int best = -1;

	if (need < CACHE_MIN)
		return NULL;
	pthread_mutex_lock(&cache_mu);
	for (int i = 0; i < CACHE_SLOTS; i++)
		if (cache[i].p && cache[i].cap >= need &&
		    (best < 0 || cache[i].cap < cache[best].cap))
			best = i;
	if (best >= 0) {
		p = cache[best].p;
		cache_bytes -= cache[best].cap;
		cache[best].p = NULL;
	}
	pthread_mutex_unlock(&cache_mu);
	return p;
}

/* Free the blocks linked through their first bytes from @gone on. */
static void free_list(void *gone)
{
	while (gone) {
		void *next;
		memcpy(&next, gone, sizeof(next));
		free(gone);
		gone = next;
	}
}

/*
 * Small blocks (the record of a message of up to 368 bytes: votes,
 * queries) stay on a list of the thread that released them, at most
 * SMALL_KEEP, with no lock: a stream of them cost two rounds of cache_mu,
 * the class arithmetic and two malloc_usable_size() a message, a sixth of
 * the receiving side's instructions (bench/instructions.sh;
 * bench/MEASUREMENTS.md, "recv-instructions"). A thread's list is freed
 * when it exits (small_key's destructor), so what it holds, at most
 * SMALL_KEEP * SMALL_BYTES, is a cost of each thread that releases
 * messages, also after the last endpoint closed. 640 bytes, not 512, so
 * that a 256-byte message is one: it took the mid-sized path before, a
 * ninth more of the receiving side's instructions (bench/MEASUREMENTS.md,
 * "recv-tls").
 */
#define SMALL_BYTES 640u
#define SMALL_KEEP 64u
_Static_assert(sizeof(struct rx_block) + 256 < SMALL_BYTES,
	       "a small block holds the record and a 256-byte message");
/*
 * initial-exec: each message's allocation and release reach the list
 * without a __tls_get_addr() call, which the default (dynamic) model for
 * a shared library's thread-locals costs: four of those a 64 B message
 * were 44 of the receiving side's instructions (bench/MEASUREMENTS.md,
 * "recv-tls"). This file is linked into libzap.so only, which programs
 * load at start-up, where the model costs nothing; a dlopen() of libzap
 * takes the list's 16 bytes from the static TLS that glibc keeps spare
 * for that.
 */
static _Thread_local struct small_list {
	void *head; /* each block's first bytes: the next */
	unsigned n;
	bool keyed; /* small_key holds it: freed at the thread's exit */
} small_blocks __attribute__((tls_model("initial-exec")));
static pthread_key_t small_key;
static pthread_once_t small_once = PTHREAD_ONCE_INIT;
static bool small_key_ok;

static void small_free(void *arg)
{
	struct small_list *l = arg;

	free_list(l->head);
	l->head = NULL;
	l->n = 0;
	l->keyed = false; /* a release in a later destructor keys it again */
}

static void small_init(void)
{
	small_key_ok = pthread_key_create(&small_key, small_free) == 0;
}

/* Keep the block @m of @cap usable bytes on this thread's list: whether
 * kept. One that also serves requests above SMALL_BYTES goes elsewhere. */
static bool small_put(void *m, size_t cap)
{
	if (cap < SMALL_BYTES || cap >= 2 * SMALL_BYTES || small_blocks.n >= SMALL_KEEP)
		return false;
	if (!small_blocks.keyed) {
		pthread_once(&small_once, small_init);
		if (!small_key_ok || pthread_setspecific(small_key, &small_blocks))
			return false;
		small_blocks.keyed = true;
	}
	memcpy(m, &small_blocks.head, sizeof(void *));
	small_blocks.head = m;
	small_blocks.n++;
	return true;
}

/* A block of SMALL_BYTES: this thread's, or a new one. */
static void *small_get(void)
{
	void *p = small_blocks.head;

	if (!p)
		return block_new(SMALL_BYTES);
	memcpy(&small_blocks.head, p, sizeof(void *));
	small_blocks.n--;
	return p;
}

/* A block of at least @need bytes: a cached one, or a new one (NULL when
 * out of memory). */
static void *block_get(size_t need)
{
	void *p = NULL;

	if (need <= SMALL_BYTES)
		return small_get();

	if (need >= MID_MIN && need < CACHE_MIN) {
		unsigned i = mid_class(need);
		if (mid_size(i) < need)
			i++;
		if (i == MID_CLASSES) {
			need = CACHE_MIN; /* the large cache's smallest */
		} else {
			pthread_mutex_lock(&cache_mu);
			p = mid_list[i];
			if (p) {
				memcpy(&mid_list[i], p, sizeof(void *));
				mid_bytes -= block_cap(p);
			}
			pthread_mutex_unlock(&cache_mu);
			return p ? p : block_new(mid_size(i));
		}
	}
	p = cache_take(need);
	return p ? p : block_new(need);
}

/*
 * Make room for a block of @cap bytes of class @keep (cache_mu held):
 * blocks of other classes go, onto *@gone for the caller to free once the
 * lock is released. What streams now takes the room, not a size that came
 * before (without this, 1 MiB of 16 KiB blocks left by one stream kept the
 * next stream's 64 KiB blocks out, and the heap cycled again).
 */
static void mid_evict(unsigned keep, size_t cap, void **gone)
{
	for (unsigned i = 0; i < MID_CLASSES && mid_bytes + cap > MID_BYTES; i++) {
		while (i != keep && mid_list[i] && mid_bytes + cap > MID_BYTES) {
			void *v = mid_list[i];
			memcpy(&mid_list[i], v, sizeof(void *));
			mid_bytes -= block_cap(v);
			memcpy(v, gone, sizeof(void *));
			*gone = v;
		}
	}
}

/* Keep the mid-sized block @m of @cap usable bytes; whether kept. */
static bool mid_put(void *m, size_t cap)
{
	unsigned i = mid_class(cap);
	void *gone = NULL;
	bool kept = false;

	pthread_mutex_lock(&cache_mu);
	mid_evict(i, cap, &gone);
	if (nopen && mid_bytes + cap <= MID_BYTES) {
		memcpy(m, &mid_list[i], sizeof(void *));
		mid_list[i] = m;
		mid_bytes += cap;
		kept = true;
	}
	pthread_mutex_unlock(&cache_mu);
	free_list(gone);
	return kept;
}

/*
 * Keep the large block @m of @cap usable bytes (cache_mu held), making
 * room by evicting the smallest cached ones onto *@gone: the newest takes
 * the room, as in mid_evict(); a cached block serves any smaller request.
 */
static bool large_put(void *m, size_t cap, void **gone)
{
	for (;;) {
		int slot = -1, small = -1;
		for (int i = 0; i < CACHE_SLOTS; i++)
			if (!cache[i].p)
				slot = i;
			else if (small < 0 || cache[i].cap < cache[small].cap)
				small = i;
		if (slot >= 0 && cache_bytes + cap <= CACHE_BYTES) {
			cache[slot].p = m;
			cache[slot].cap = cap;
			cache_bytes += cap;
			return true;
		}
		if (small < 0)
			return false;
		memcpy(cache[small].p, gone, sizeof(void *));
		*gone = cache[small].p;
		cache[small].p = NULL;
		cache_bytes -= cache[small].cap;
	}
}

/* Keep the block @m of @cap usable bytes if it may be; whether kept. */
static bool cache_put(void *m, size_t cap)
{
	void *gone = NULL;
	bool kept;

	if (cap < MID_MIN || cap > CACHE_BYTES)
		return false;
	if (cap < CACHE_MIN)
		return mid_put(m, cap);
	pthread_mutex_lock(&cache_mu);
	kept = nopen && large_put(m, cap, &gone);
	pthread_mutex_unlock(&cache_mu);
	free_list(gone);
	return kept;
}

/* An endpoint opens (@open) or closes: the last to close frees the cache. */
static void cache_users(bool open)
{
	void *gone = NULL;

	pthread_mutex_lock(&cache_mu);
	if (open)
		nopen++;
	else if (!--nopen) {
		for (int i = 0; i < CACHE_SLOTS; i++)
			if (cache[i].p) {
				memcpy(cache[i].p, &gone, sizeof(void *));
				gone = cache[i].p;
				cache[i].p = NULL;
			}
		cache_bytes = 0;
		mid_evict(MID_CLASSES, MID_BYTES + 1, &gone); /* every class */
	}
	pthread_mutex_unlock(&cache_mu);
	free_list(gone);
}

static void tcp_msg_release(struct zap_msg *m)
{
	/* The record and payload are one allocation, independent of the
	 * transport, so messages outlive zap_close(). */
	size_t cap = block_cap(m);

	if (!small_put(m, cap) && !cache_put(m, cap))
		free(m);
}

static int tcp_msg_alloc(void *user, size_t len, struct tcp_rx_msg **out)
{
	struct rx_block *b;

	(void)user;
	if (len > SIZE_MAX - sizeof(*b))
		return -ENOMEM;
	b = block_get(sizeof(*b) + len);
	if (!b)
		return -ENOMEM;
	struct tcp_rx_msg *m = &b->rx;
	/* The sender's address and key are filled whole when the message is
	 * delivered (tcp_rx.c); until then nobody reads them. */
	m->msg = (struct zap_msg){
		.size = sizeof(m->msg),
		.data = b + 1,
		.release = tcp_msg_release,
	};
	m->next = NULL;
	m->peer[0] = '\0';
	m->peer_id[0] = '\0';
	*out = m;
	return 0;
}

/* Grow a message as its bytes arrive (the wire asks; see tcp_wire.h). */
static int tcp_msg_grow(void *user, size_t len, struct tcp_rx_msg **mp)
{
	struct rx_block *b = (struct rx_block *)*mp;

	(void)user;
	if (len > SIZE_MAX - sizeof(*b))
		return -ENOMEM;
	/* A cached block is often larger than the first part asked for:
	 * growing within it moves nothing (realloc() would hand the rest
	 * back, and the next step would fault it in again). */
	if (b->cap >= sizeof(*b) + len)
		return 0;
	b = realloc(b, sizeof(*b) + len);
	if (!b)
		return -ENOMEM;
	b->cap = malloc_usable_size(b);
	b->rx.msg.data = b + 1;
	*mp = &b->rx;
	return 0;
}

static void tcp_fill_caps(struct zap_caps *caps, uint64_t max_msg)
{
	struct zap_caps c = {
		.size = caps->size,
		.gpu_resident = false,
		.zero_copy = false, /* bytes are copied out of the socket */
		.device_buffers = false,
		.min_latency_us = 0, /* not measured: use zap-perf */
		.max_msg_size = max_msg,
	};
	size_t n = caps->size < sizeof(c) ? caps->size : sizeof(c);
	memcpy(caps, &c, n);
}

static enum zap_probe_result tcp_probe(const struct zap_host *host,
				       struct zap_probe_info *info)
{
	uint64_t max = ZAP_DEFAULT_MAX_MSG_BYTES;

	/* A bad value is reported by the core when it opens; the probe only
	 * shows what an instance would accept. */
	if (host->config_u64("ZAP_MAX_MSG_BYTES", &max) < 0)
		max = ZAP_DEFAULT_MAX_MSG_BYTES;
	if (info->size >= offsetof(struct zap_probe_info, reason) + sizeof(info->reason))
		strcpy(info->reason, "kernel TCP sockets");
	if (info->size >= offsetof(struct zap_probe_info, caps) + sizeof(info->caps) &&
	    info->caps.size)
		tcp_fill_caps(&info->caps, max);
	return ZAP_PROBE_OK;
}

static int tcp_open(const struct zap_host *host, const struct zap_open_args *args,
		    void **tpp)
{
	struct tcp_tp *tp = calloc(1, sizeof(*tp));
	struct tcp_wire_args wa = {
		.host = host,
		.domain = TCP_DOMAIN,
		.listen = args->listen,
		.max_msg_size = args->max_msg_size,
		.alloc = { .alloc = tcp_msg_alloc, .user = NULL, .grow = tcp_msg_grow },
	};
	int r;

	if (args->size >=
	    offsetof(struct zap_open_args, tls_peers) + sizeof(args->tls_peers)) {
		wa.tls_cert = args->tls_cert;
		wa.tls_key = args->tls_key;
		wa.tls_ca = args->tls_ca;
		wa.tls_peers = args->tls_peers;
	}

	if (!tp)
		return host->fail(-ENOMEM, TCP_DOMAIN ": out of memory");
	tp->host = host;
	r = tcp_wire_open(&wa, &tp->wire);
	if (r) {
		free(tp);
		return r;
	}
	cache_users(true);
	*tpp = tp;
	return 0;
}

static void tcp_shutdown(void *p)
{
	struct tcp_tp *tp = p;
	tcp_wire_shutdown(tp->wire);
}

static void tcp_destroy(void *p)
{
	struct tcp_tp *tp = p;
	if (!tp)
		return;
	tcp_wire_destroy(tp->wire);
	free(tp);
	cache_users(false);
}

static int tcp_send(void *p, const char *peer, const void *buf, size_t len,
		    struct zap_ctx *ctx)
{
	struct tcp_tp *tp = p;
	return tcp_wire_send(tp->wire, peer, buf, len, ctx);
}

static int tcp_send_burst(void *p, const char *peer, const struct zap_iov *msgs,
			  unsigned int n, struct zap_ctx *ctx)
{
	struct tcp_tp *tp = p;
	return tcp_wire_send_burst(tp->wire, peer, msgs, n, ctx);
}

static int tcp_recv(void *p, struct zap_ctx *ctx, struct zap_msg **out)
{
	struct tcp_tp *tp = p;
	return tcp_wire_recv(tp->wire, ctx, out);
}

static int tcp_caps(void *p, struct zap_caps *caps)
{
	struct tcp_tp *tp = p;
	tcp_fill_caps(caps, tcp_wire_max_msg(tp->wire));
	return 0;
}

static int tcp_address(void *p, char *buf, size_t len)
{
	struct tcp_tp *tp = p;
	return tcp_wire_address(tp->wire, buf, len);
}

static int tcp_peer_path(void *p, const char *peer, char *buf, size_t len)
{
	struct tcp_tp *tp = p;
	return tcp_wire_path(tp->wire, peer, buf, len);
}

static int tcp_stats(void *p, struct zap_stats *out)
{
	struct tcp_tp *tp = p;
	tcp_wire_obs(tp->wire, out);
	return 0;
}

static int tcp_peers(void *p, struct zap_peer_info *out, size_t n)
{
	struct tcp_tp *tp = p;
	return tcp_wire_peers(tp->wire, out, n);
}

static int tcp_events(void *p, struct zap_event *out, size_t n)
{
	struct tcp_tp *tp = p;
	return tcp_wire_events(tp->wire, out, n);
}

static const struct zap_plugin_ops tcp_ops = {
	.size = sizeof(struct zap_plugin_ops),
	.probe = tcp_probe,
	.open = tcp_open,
	.shutdown = tcp_shutdown,
	.destroy = tcp_destroy,
	.send = tcp_send,
	.recv = tcp_recv,
	.caps = tcp_caps,
	.address = tcp_address,
	/* No buffer pool: applications use their own memory with default. */
	.buffer_alloc = NULL,
	.pool_stats = NULL,
	.peer_path = tcp_peer_path,
	.send_burst = tcp_send_burst,
	.stats = tcp_stats,
	.peers = tcp_peers,
	.events = tcp_events,
};

/* Referenced by name from core/loader.c; not exported from libzap. */
const struct zap_plugin zap_builtin_default = {
	.abi_major = ZAP_PLUGIN_ABI_MAJOR,
	.abi_minor = ZAP_PLUGIN_ABI_MINOR,
	.size = sizeof(struct zap_plugin),
	.rank = ZAP_RANK_DEFAULT,
	.name = "default",
	.version = ZAP_VERSION,
	.ops = &tcp_ops,
};
