/* SPDX-License-Identifier: MIT */
/*
 * The gpudirect protocol, apart from verbs and CUDA: the bootstrap message
 * exchanged over TCP, and the per-queue-pair engine (credits, chunking,
 * reassembly, completion errors). The engine reaches the hardware only
 * through struct gd_qp_ops, so the unit tests drive it with an in-memory
 * stand-in for a queue pair (tests/gpudirect/test-gd-proto.c).
 *
 * Data path, per RC queue pair (see README.md):
 *  - The receiver posts `slots` receives of `slot_bytes` each (GPU memory).
 *  - Every message travels as 1..n SEND_WITH_IMM chunks of exactly the
 *    peer's slot_bytes (the last may be shorter). The immediate of the first
 *    chunk is GD_IMM_FIRST | n; chunk i > 0 carries i. RC delivers in order,
 *    and a sender never interleaves two messages on one queue pair.
 *  - Credits: the sender may have at most peer_slots chunks that the peer
 *    has not reposted. The receiver RDMA-writes its cumulative count of
 *    reposted slots into a word the sender registered (its address and key
 *    travel in the bootstrap), so credit returns consume no receive.
 *  - A completion error (or a protocol violation) fails the pair for good:
 *    calls return the error and the plugin builds a new pair on the next
 *    send.
 */
#ifndef ZAP_GD_PROTO_H
#define ZAP_GD_PROTO_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <zap/zap-plugin.h>

/* ---- bootstrap ------------------------------------------------------- */

#define GD_BOOT_MAGIC 0x5A474442u /* "ZGDB" */
#define GD_BOOT_VERSION 1u
#define GD_BOOT_HDR 8u    /* magic u32, version u16, body length u16 */
#define GD_BOOT_FIXED 58u /* body bytes before the listen address */
#define GD_BOOT_MAX (GD_BOOT_HDR + GD_BOOT_FIXED + ZAP_PEER_MAX)

#define GD_SLOTS_MAX 4096u
#define GD_SLOT_MIN 4096u
#define GD_SLOT_MAX (64u << 20) /* bounds the host staging a peer makes us pin */

/* What each end tells the other before the queue pairs connect. */
struct gd_boot {
	uint64_t instance; /* random, non-zero, fixed per endpoint */
	uint32_t qpn;      /* 24 bits */
	uint32_t psn;      /* 24 bits */
	uint16_t lid;
	uint8_t mtu; /* enum ibv_mtu: 1 (256 B) .. 5 (4096 B) */
	uint8_t gid[16];
	uint32_t slots;       /* receive slots = credits granted */
	uint32_t slot_bytes;  /* power of two in [GD_SLOT_MIN, GD_SLOT_MAX] */
	uint64_t credit_addr; /* where the peer RDMA-writes returned credits */
	uint32_t credit_rkey;
	char listen[ZAP_PEER_MAX]; /* sender's listen address, non-empty */
};

/* Encode @b (header and body, big-endian) into @buf. Return the length, or
 * -ENOSPC / -EINVAL (listen address empty or too long). */
int gd_boot_encode(const struct gd_boot *b, uint8_t *buf, size_t len);

/*
 * Check the 8-byte header and give the body length that follows.
 * Return 0; -EPROTO (bad magic, absurd length); -EPROTONOSUPPORT (another
 * version: @why names both). @why gets one line on failure.
 */
int gd_boot_header(const uint8_t *hdr, size_t *body_len, char *why, size_t wl);

/* Decode a whole message (header + body). Every field is range-checked;
 * the errors are those of gd_boot_header() plus -EPROTO. */
int gd_boot_decode(const uint8_t *buf, size_t len, struct gd_boot *b, char *why,
		   size_t wl);

/* ---- the queue-pair interface ---------------------------------------- */

#define GD_IMM_FIRST 0x80000000u
#define GD_IMM_VALUE 0x3fffffffu

/* wr_id layout: the kind in the top byte, an index below. */
#define GD_WR_RECV (1ull << 56)
#define GD_WR_DATA (2ull << 56)
#define GD_WR_CREDIT (3ull << 56)
#define GD_WR_KIND (0xffull << 56)
#define GD_NO_STAGE 0xffffffffu

/* One completion, as the backend reports it. */
struct gd_cqe {
	uint64_t wr_id;
	int status;        /* 0, or a negative errno the backend mapped */
	const char *why;   /* native text for a failed status (static) */
	uint32_t byte_len; /* receives */
	uint32_t imm;      /* receives */
};

/* A reassembly target handed out by gd_qp_ops.alloc_msg. */
struct gd_rxbuf {
	void *data;
	void *handle;
};

/*
 * What the engine needs from a queue pair. Called with the connection's
 * lock held; none may block for long. @qp is gd_conn_cfg.qp.
 */
struct gd_qp_ops {
	/* SEND_WITH_IMM of @len bytes at @src, whose registration @key came
	 * from lookup(). */
	int (*post_send)(void *qp, uint64_t wr_id, const void *src, size_t len,
			 uint32_t imm, uintptr_t key);
	/* Post receive slot @slot. */
	int (*post_recv)(void *qp, uint64_t wr_id, uint32_t slot);
	/* RDMA-write @consumed into the peer's credit word. */
	int (*post_credit)(void *qp, uint64_t wr_id, uint64_t consumed);
	/* Up to @max completions of either queue: count, or -errno. */
	int (*poll)(void *qp, struct gd_cqe *cqe, int max);
	/* The credit word the peer writes (our slots it reposted). */
	uint64_t (*peer_consumed)(void *qp);
	/* Move the pair to the error state so posted work flushes. */
	void (*kill)(void *qp);
	void *(*slot_addr)(void *qp, uint32_t slot);
	void *(*stage_addr)(void *qp, uint32_t stage);
	/* 0 and *key when [src, src+len) is registered (sent in place), else
	 * -ENOENT (host memory: staged through a copy). */
	int (*lookup)(void *qp, const void *src, size_t len, uintptr_t *key);
	/* Copy a received chunk from a slot into a reassembly target. */
	int (*copy)(void *qp, void *dst, const void *src, size_t len);
	/* A reassembly target of @len bytes: 0, -EAGAIN (none right now: the
	 * engine retries on a later progress call), or -errno (fails the pair). */
	int (*alloc_msg)(void *qp, size_t len, struct gd_rxbuf *out);
	void (*free_msg)(void *qp, struct gd_rxbuf *buf);
};

struct gd_conn;

/* A complete message. @slot >= 0: the bytes lie in that receive slot, given
 * back with gd_conn_slot_done(); else in @buf, owned by the callee. */
struct gd_delivery {
	const void *data;
	size_t len;
	int32_t slot;
	struct gd_rxbuf buf;
};

struct gd_conn_cfg {
	const struct zap_host *host; /* log, ctx_err */
	const char *peer;            /* for log lines (copied) */
	const struct gd_qp_ops *ops;
	void *qp;
	uint32_t slots, slot_bytes; /* ours */
	uint32_t peer_slots, peer_slot_bytes;
	uint32_t stages;   /* host staging slots of peer_slot_bytes */
	uint32_t sq_depth; /* send queue entries */
	uint64_t max_msg;
	/* Called with the lock held; must not call back into the engine
	 * except gd_conn_get(). */
	void (*deliver)(void *user, struct gd_conn *c, const struct gd_delivery *d);
	/* Called once, at the last gd_conn_put(), to free @qp. */
	void (*destroy)(void *user, void *qp);
	void *user;
};

/* Create the engine and post every receive slot. */
int gd_conn_new(const struct gd_conn_cfg *cfg, struct gd_conn **out);
void gd_conn_get(struct gd_conn *c);
/* Drop a reference; the last one calls cfg.destroy and frees. */
void gd_conn_put(struct gd_conn *c);

/*
 * Send one message; returns once every chunk has completed (the peer's NIC
 * acknowledged it), so @buf may be reused. Blocks for credits until @ctx
 * fires. Return 0; -EMSGSIZE; -ECANCELED/-ETIMEDOUT (before any chunk went
 * out: the pair stays usable; after: the pair is failed); -ESHUTDOWN; the
 * pair's error (completion error, protocol error).
 */
int gd_conn_send(struct gd_conn *c, const void *buf, size_t len, struct zap_ctx *ctx);

/* Handle completions and pending work. Return the pair's error (0 ok). */
int gd_conn_progress(struct gd_conn *c);

/* Give receive slot @slot back (repost it and return its credit). */
void gd_conn_slot_done(struct gd_conn *c, int32_t slot);

/* Make blocked and later sends return -ESHUTDOWN. */
void gd_conn_shutdown(struct gd_conn *c);

/* The pair's error, 0 while healthy. */
int gd_conn_error(struct gd_conn *c);

/* Credits the sender holds now (tests). */
uint32_t gd_conn_credits(struct gd_conn *c);

/* A pair's counts since it was made, for zap_stats() and zap_peer_list(). */
struct gd_conn_stats {
	uint64_t msgs_sent, bytes_sent;         /* sends that returned 0 */
	uint64_t msgs_received, bytes_received; /* messages delivered */
	uint64_t credit_waits; /* sends that found no credit and waited (whether
	                          or not they then went out) */
	uint64_t idle_ms;      /* since the last message either way, or since
	                          the pair was made (a few ms coarse) */
};

/* Copy @c's counts (under its lock, briefly). */
void gd_conn_stats(struct gd_conn *c, struct gd_conn_stats *out);

#endif /* ZAP_GD_PROTO_H */
