/* SPDX-License-Identifier: MIT */
/*
 * RC queue pair setup and teardown (gd_qp_new(), gd_qp_connect(),
 * gd_qp_free() in gd_verbs.h): the receive slots in GPU memory, the credit
 * words, the completion queue, the INIT -> RTR -> RTS transitions and the
 * host staging memory. A pair is set up by one thread (the bootstrap)
 * before its engine exists and freed by the engine's last reference, so
 * nothing here is shared while it runs. See gd_verbs_int.h.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "gd_verbs_int.h"

int gd_verbs_err(struct gd_qp *q, const char *what, int e)
{
	q->dev->host->log(ZAP_LOG_WARN, "gpudirect", "%s on %s failed: %s", what,
			  q->dev->sel.dev, strerror(e));
	return e == ENOMEM ? -ENOMEM : -EIO;
}

/* The receive slots (GPU memory) and the credit words, registered. */
static int qp_mem(struct gd_qp *q)
{
	struct gd_dev *d = q->dev;
	size_t clen;
	int rc;

	rc = gd_gpu_alloc(d, (size_t)q->slots * q->slot_bytes, &q->slot_mem, &q->slot_mr);
	if (rc)
		return rc;
	clen = (q->sq_depth + 1) * sizeof(uint64_t);
	if (posix_memalign((void **)&q->credit, 64, clen))
		return -ENOMEM;
	memset(q->credit, 0, clen);
	q->credit_mr = ibv_reg_mr(d->pd, q->credit, clen,
				  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!q->credit_mr)
		return gd_verbs_err(q, "ibv_reg_mr (credit word)", errno);
	return 0;
}

/* The completion queue (on the device's channel, armed) and the pair in
 * INIT. */
static int qp_create(struct gd_qp *q)
{
	struct gd_dev *d = q->dev;
	struct ibv_qp_init_attr ia = { 0 };
	struct ibv_qp_attr qa = { 0 };
	int rc;

	q->cq = ibv_create_cq(d->ctx, (int)(q->slots + q->sq_depth), q, d->chan, 0);
	if (!q->cq)
		return gd_verbs_err(q, "ibv_create_cq", errno);
	ia.send_cq = q->cq;
	ia.recv_cq = q->cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = q->sq_depth;
	ia.cap.max_recv_wr = q->slots;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	q->qp = ibv_create_qp(d->pd, &ia);
	if (!q->qp)
		return gd_verbs_err(q, "ibv_create_qp", errno);
	qa.qp_state = IBV_QPS_INIT;
	qa.pkey_index = 0;
	qa.port_num = d->sel.port;
	qa.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
	rc = ibv_modify_qp(q->qp, &qa,
			   IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				   IBV_QP_ACCESS_FLAGS);
	if (rc)
		return gd_verbs_err(q, "ibv_modify_qp(INIT)", rc);
	if (ibv_req_notify_cq(q->cq, 0))
		return gd_verbs_err(q, "ibv_req_notify_cq", errno);
	return 0;
}

int gd_qp_new(struct gd_dev *d, uint32_t slots, uint32_t slot_bytes,
	      struct zap_pool *pool, struct gd_boot *local, struct gd_qp **out)
{
	struct gd_qp *q = calloc(1, sizeof(*q));
	int rc;

	if (!q)
		return -ENOMEM;
	q->dev = d;
	gd_dev_get(d);
	q->pool = pool;
	q->slots = slots;
	q->slot_bytes = slot_bytes;
	/* Room for a full window of data chunks plus the credit writes. */
	q->sq_depth = 2 * slots + 8;
	rc = qp_mem(q);
	if (!rc)
		rc = qp_create(q);
	if (rc) {
		gd_qp_free(q);
		return rc;
	}
	if (getrandom(&q->psn, sizeof(q->psn), 0) != sizeof(q->psn))
		q->psn = (uint32_t)getpid();
	q->psn &= 0xffffff;
	local->qpn = q->qp->qp_num;
	local->psn = q->psn;
	local->lid = d->sel.lid;
	local->mtu = d->sel.mtu;
	memcpy(local->gid, d->sel.gid.raw, 16);
	local->slots = slots;
	local->slot_bytes = slot_bytes;
	local->credit_addr = (uint64_t)(uintptr_t)q->credit;
	local->credit_rkey = q->credit_mr->rkey;
	*out = q;
	return 0;
}

int gd_qp_connect(struct gd_qp *q, const struct gd_boot *peer, uint32_t stages)
{
	struct gd_dev *d = q->dev;
	struct ibv_qp_attr a = { 0 };
	int rc;

	q->peer_addr = peer->credit_addr;
	q->peer_rkey = peer->credit_rkey;
	q->stage_bytes = peer->slot_bytes;
	/* Host staging for sends from host memory: a window's worth, within
	 * what the pair may pin (the caller's plan). */
	q->stages = stages;
	if (posix_memalign((void **)&q->stage_mem, 4096,
			   (size_t)q->stages * q->stage_bytes))
		return -ENOMEM;
	q->stage_mr = ibv_reg_mr(d->pd, q->stage_mem, (size_t)q->stages * q->stage_bytes,
				 IBV_ACCESS_LOCAL_WRITE);
	if (!q->stage_mr)
		return gd_verbs_err(q, "ibv_reg_mr (staging)", errno);

	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = (enum ibv_mtu)(peer->mtu < d->sel.mtu ? peer->mtu : d->sel.mtu);
	a.dest_qp_num = peer->qpn;
	a.rq_psn = peer->psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.port_num = d->sel.port;
	a.ah_attr.dlid = peer->lid;
	/* RoCE always routes by GID; InfiniBand only across subnets. */
	if (d->sel.link_layer == IBV_LINK_LAYER_ETHERNET || !peer->lid) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
		a.ah_attr.grh.sgid_index = (uint8_t)d->sel.gid_index;
		a.ah_attr.grh.hop_limit = 64;
	}
	rc = ibv_modify_qp(q->qp, &a,
			   IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				   IBV_QP_MIN_RNR_TIMER);
	if (rc)
		return gd_verbs_err(q, "ibv_modify_qp(RTR)", rc);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14; /* 4.096 us * 2^14 = 67 ms per try */
	a.retry_cnt = 7;
	a.rnr_retry = 7; /* credits prevent RNR; this only rides out a race */
	a.sq_psn = q->psn;
	a.max_rd_atomic = 1;
	rc = ibv_modify_qp(q->qp, &a,
			   IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				   IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				   IBV_QP_MAX_QP_RD_ATOMIC);
	if (rc)
		return gd_verbs_err(q, "ibv_modify_qp(RTS)", rc);
	return 0;
}

uint32_t gd_qp_stages(const struct gd_qp *q)
{
	return q->stages;
}

uint32_t gd_qp_sq_depth(const struct gd_qp *q)
{
	return q->sq_depth;
}

void gd_qp_free(struct gd_qp *q)
{
	if (!q)
		return;
	if (q->qp)
		ibv_destroy_qp(q->qp);
	if (q->cq)
		ibv_destroy_cq(q->cq);
	if (q->stage_mr)
		ibv_dereg_mr(q->stage_mr);
	free(q->stage_mem);
	if (q->credit_mr)
		ibv_dereg_mr(q->credit_mr);
	free(q->credit);
	gd_gpu_free(q->dev, q->slot_mem, q->slot_mr);
	gd_dev_put(q->dev);
	free(q);
}
