/* SPDX-License-Identifier: MIT */
/*
 * Private to the files that implement gd_verbs.h (gd_select.c, gd_dev.c,
 * gd_mem.c, gd_qp.c, gd_datapath.c): the opened device, the queue pair,
 * and the helpers they share. Nothing outside those files includes this.
 *
 * Shared state and its rules:
 *  - struct gd_dev is shared by the instance, its pool and every pair.
 *    Everything but @refs and @regs is written once in gd_dev_open() and
 *    only read afterwards. @refs is atomic (gd_dev_get()/gd_dev_put(): the
 *    last reference closes the device). @regs, the GPU memory registered
 *    for the pool, is under @mx; only gd_mem.c touches it.
 *  - struct gd_qp belongs to one engine (gd_proto.c). It is filled by
 *    gd_qp_new() and gd_qp_connect() before the engine exists; afterwards
 *    every gd_verbs_ops call comes with that engine's lock held, so the
 *    pair needs no lock of its own. The exception is credit[0], which the
 *    peer's NIC writes at any time: it is read with an atomic load.
 *  - The CUDA context is the GPU's primary context, pushed around each
 *    driver call (gd_cu_push()/gd_cu_pop()), so any thread may call in.
 */
#ifndef ZAP_GD_VERBS_INT_H
#define ZAP_GD_VERBS_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "gd_verbs.h"

#define GD_GPU_ALIGN (64u << 10) /* GPU allocations: whole host pages */

/* One pool allocation: GPU memory and its registration. */
struct gd_reg {
	struct gd_reg *next;
	zcu_ptr p;
	size_t len;
	struct ibv_mr *mr;
};

struct gd_dev {
	const struct zap_host *host;
	struct gd_sel sel;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *chan;
	zcu_ctx cuctx;
	int refs;
	pthread_mutex_t mx; /* regs */
	struct gd_reg *regs;
	uint64_t pinned; /* bytes the pairs reserved (atomic): gd_dev_pinned() */
};

struct gd_qp {
	struct gd_dev *dev;
	struct zap_pool *pool;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	uint32_t slots, slot_bytes, stages, stage_bytes, sq_depth;
	zcu_ptr slot_mem;
	struct ibv_mr *slot_mr;
	char *stage_mem;
	struct ibv_mr *stage_mr;
	uint64_t *credit; /* [0]: written by the peer; [1..]: sources */
	struct ibv_mr *credit_mr;
	uint64_t peer_addr;
	uint32_t peer_rkey;
	uint32_t psn;
};

/* gd_dev.c: a reference, and the GPU's context around driver calls. */
void gd_dev_get(struct gd_dev *d);
/* Make the device's CUDA context current: 0, or -EIO (logged). */
int gd_cu_push(struct gd_dev *d);
void gd_cu_pop(struct gd_dev *d);
/* Log a failed driver call @what once, with the driver's error name. */
void gd_cu_fail_log(struct gd_dev *d, const char *what, zcu_result r);

/* gd_mem.c: GPU memory registered with the NIC (dma-buf, else peermem).
 * 0, -ENOMEM or -EIO (logged). */
int gd_gpu_alloc(struct gd_dev *d, size_t len, zcu_ptr *out, struct ibv_mr **mr);
/* Deregister and free; either may be 0/NULL. */
void gd_gpu_free(struct gd_dev *d, zcu_ptr p, struct ibv_mr *mr);
/* 0 and *key (the lkey) when [a, a+len) lies in one pool allocation, else
 * -ENOENT. */
int gd_mem_lkey(struct gd_dev *d, uintptr_t a, size_t len, uintptr_t *key);

/* gd_qp.c: log a failed verbs call @what (positive errno @e) once and give
 * the negative errno to return: -ENOMEM or -EIO. */
int gd_verbs_err(struct gd_qp *q, const char *what, int e);

#endif /* ZAP_GD_VERBS_INT_H */
