/* SPDX-License-Identifier: MIT */
/*
 * The data path: struct gd_qp_ops over verbs (gd_verbs_ops), which the
 * protocol engine (gd_proto.c) drives: posting sends, receives and credit
 * writes, polling completions, and the memory operations (registration
 * lookup, device-to-device copy, reassembly buffers from the pool).
 *
 * Shared state: every op is called with the pair's engine lock held
 * (gd_proto.h), so one pair is never entered twice at once. credit[0] is
 * written by the peer's NIC behind everyone's back: read atomically.
 * gd_lookup() takes gd_dev.mx (gd_mem.c) under the engine lock.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "gd_verbs_int.h"

static int post_err(struct gd_qp *q, const char *what, int e)
{
	return gd_verbs_err(q, what, e);
}

static int gd_post_send(void *qp, uint64_t wr_id, const void *src, size_t len,
			uint32_t imm, uintptr_t key)
{
	struct gd_qp *q = qp;
	struct ibv_sge sge = {
		.addr = (uint64_t)(uintptr_t)src,
		.length = (uint32_t)len,
		.lkey = (uint32_t)key,
	};
	struct ibv_send_wr wr = {
		.wr_id = wr_id, .sg_list = &sge, .num_sge = len ? 1 : 0,
		.opcode = IBV_WR_SEND_WITH_IMM, .send_flags = IBV_SEND_SIGNALED,
		.imm_data = htonl(imm),
	}, *bad;
	int rc = ibv_post_send(q->qp, &wr, &bad);

	return rc ? post_err(q, "ibv_post_send", rc) : 0;
}

static int gd_post_recv(void *qp, uint64_t wr_id, uint32_t slot)
{
	struct gd_qp *q = qp;
	struct ibv_sge sge = {
		.addr = q->slot_mem + (uint64_t)slot * q->slot_bytes,
		.length = q->slot_bytes,
		.lkey = q->slot_mr->lkey,
	};
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 }, *bad;
	int rc = ibv_post_recv(q->qp, &wr, &bad);

	return rc ? post_err(q, "ibv_post_recv", rc) : 0;
}

static int gd_post_credit(void *qp, uint64_t wr_id, uint64_t consumed)
{
	struct gd_qp *q = qp;
	/* The engine numbers credit writes modulo sq_depth, and no more than
	 * sq_depth are in flight: each source word is free when reused. */
	uint64_t *src = &q->credit[1 + (wr_id & 0xffffffffu) % q->sq_depth];
	struct ibv_sge sge = {
		.addr = (uint64_t)(uintptr_t)src,
		.length = sizeof(*src),
		.lkey = q->credit_mr->lkey,
	};
	struct ibv_send_wr wr = {
		.wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
		.opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
	}, *bad;
	int rc;

	*src = consumed;
	wr.wr.rdma.remote_addr = q->peer_addr;
	wr.wr.rdma.rkey = q->peer_rkey;
	rc = ibv_post_send(q->qp, &wr, &bad);
	return rc ? post_err(q, "ibv_post_send (credit)", rc) : 0;
}

static int wc_errno(enum ibv_wc_status s)
{
	switch (s) {
	case IBV_WC_RETRY_EXC_ERR:
		return -EHOSTUNREACH;
	case IBV_WC_RNR_RETRY_EXC_ERR:
	case IBV_WC_WR_FLUSH_ERR:
	case IBV_WC_REM_ABORT_ERR:
	case IBV_WC_REM_INV_REQ_ERR:
	case IBV_WC_REM_OP_ERR:
		return -ECONNRESET;
	default:
		return -EIO;
	}
}

static int poll_some(struct gd_qp *q, struct gd_cqe *out, int max)
{
	struct ibv_wc wc[16];
	int n = ibv_poll_cq(q->cq, max < 16 ? max : 16, wc);

	if (n < 0)
		return post_err(q, "ibv_poll_cq", -n);
	for (int i = 0; i < n; i++) {
		out[i].wr_id = wc[i].wr_id;
		out[i].status = wc[i].status == IBV_WC_SUCCESS ? 0
							       : wc_errno(wc[i].status);
		out[i].why = ibv_wc_status_str(wc[i].status);
		out[i].byte_len = wc[i].byte_len;
		out[i].imm = wc[i].wc_flags & IBV_WC_WITH_IMM ? ntohl(wc[i].imm_data) : 0;
	}
	return n;
}

static int gd_poll(void *qp, struct gd_cqe *out, int max)
{
	struct gd_qp *q = qp;
	int n = poll_some(q, out, max), m;

	if (n < 0 || n == max)
		return n;
	/* Drained: re-arm, then look again for what raced the re-arm. */
	if (ibv_req_notify_cq(q->cq, 0))
		return post_err(q, "ibv_req_notify_cq", errno);
	m = poll_some(q, out + n, max - n);
	return m < 0 ? m : n + m;
}

static uint64_t gd_peer_consumed(void *qp)
{
	struct gd_qp *q = qp;

	return __atomic_load_n(&q->credit[0], __ATOMIC_ACQUIRE);
}

static void gd_kill(void *qp)
{
	struct gd_qp *q = qp;
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

	ibv_modify_qp(q->qp, &a, IBV_QP_STATE);
}

static void *gd_slot_addr(void *qp, uint32_t slot)
{
	struct gd_qp *q = qp;

	return (void *)(uintptr_t)(q->slot_mem + (uint64_t)slot * q->slot_bytes);
}

static void *gd_stage_addr(void *qp, uint32_t stage)
{
	struct gd_qp *q = qp;

	return q->stage_mem + (size_t)stage * q->stage_bytes;
}

static int gd_lookup(void *qp, const void *src, size_t len, uintptr_t *key)
{
	struct gd_qp *q = qp;
	uintptr_t a = (uintptr_t)src;

	if (a >= (uintptr_t)q->stage_mem &&
	    a + len <= (uintptr_t)q->stage_mem + (size_t)q->stages * q->stage_bytes) {
		*key = q->stage_mr->lkey;
		return 0;
	}
	return gd_mem_lkey(q->dev, a, len, key);
}

static int gd_copy(void *qp, void *dst, const void *src, size_t len)
{
	struct gd_qp *q = qp;
	zcu_result r;

	if (gd_cu_push(q->dev))
		return -EIO;
	r = q->dev->sel.cu->MemcpyDtoD((zcu_ptr)(uintptr_t)dst, (zcu_ptr)(uintptr_t)src,
				       len);
	gd_cu_pop(q->dev);
	if (r != ZCU_SUCCESS) {
		gd_cu_fail_log(q->dev, "cuMemcpyDtoD", r);
		return -EIO;
	}
	return 0;
}

static int gd_alloc_msg(void *qp, size_t len, struct gd_rxbuf *out)
{
	struct gd_qp *q = qp;
	struct zap_buffer *b;
	/* Never blocks: a full pool (-EAGAIN) holds the message back. */
	int rc = q->dev->host->pool_try_alloc(q->pool, len, &b);

	if (rc)
		return rc;
	out->data = b->bytes;
	out->handle = b;
	return 0;
}

static void gd_free_msg(void *qp, struct gd_rxbuf *buf)
{
	struct zap_buffer *b = buf->handle;

	if (b)
		b->release(b);
}

const struct gd_qp_ops gd_verbs_ops = {
	.post_send = gd_post_send,
	.post_recv = gd_post_recv,
	.post_credit = gd_post_credit,
	.poll = gd_poll,
	.peer_consumed = gd_peer_consumed,
	.kill = gd_kill,
	.slot_addr = gd_slot_addr,
	.stage_addr = gd_stage_addr,
	.lookup = gd_lookup,
	.copy = gd_copy,
	.alloc_msg = gd_alloc_msg,
	.free_msg = gd_free_msg,
};
