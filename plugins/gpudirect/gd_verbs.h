/* SPDX-License-Identifier: MIT */
/*
 * The gpudirect hardware side: choosing the RDMA port and the GPU, GPU
 * memory registered with the NIC, and RC queue pairs implementing
 * struct gd_qp_ops. Everything verbs- or CUDA-specific lives here; native
 * errors (verbs' positive errno, CUresult) become negative errno here and
 * their text is logged once.
 *
 * Implemented, one concern per file, behind gd_verbs_int.h: gd_select.c
 * (port and GPU choice, the probe), gd_dev.c (the opened device), gd_mem.c
 * (GPU memory registered with the NIC, the pool backing), gd_qp.c (queue
 * pair setup and teardown), gd_datapath.c (gd_verbs_ops: posts and
 * completions).
 */
#ifndef ZAP_GD_VERBS_H
#define ZAP_GD_VERBS_H

#include <stdbool.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include "gd_proto.h"
#include "zap-cuda.h"

enum gd_reg_path {
	GD_REG_DMABUF,  /* cuMemGetHandleForAddressRange + ibv_reg_dmabuf_mr */
	GD_REG_PEERMEM, /* ibv_reg_mr on device memory, via nvidia-peermem */
};

/* What the probe (and open) settled on. */
struct gd_sel {
	const struct zap_host *host; /* reads ZAP_GPUDIRECT_DEVICE, ZAP_CUDA_DEVICE */
	char dev[IBV_SYSFS_NAME_MAX];
	uint8_t port;
	uint8_t link_layer; /* IBV_LINK_LAYER_* */
	uint16_t lid;
	uint8_t mtu; /* enum ibv_mtu */
	int gid_index;
	union ibv_gid gid;
	const struct zcu *cu;
	struct zcu_device_info gpu;
	char gpu_bus[32];
	int gpu_distance;     /* PCIe hops between NIC and GPU, -1 unknown */
	bool dmabuf, peermem; /* available registration paths */
};

/*
 * Find the port and GPU to use (ZAP_GPUDIRECT_DEVICE, ZAP_CUDA_DEVICE, or
 * the first active port and the GPU closest to it). Cheapest checks first.
 * NOT_PRESENT: something is missing (why names it); ERROR: a bad variable
 * or a broken driver.
 */
enum zap_probe_result gd_select(const struct zap_host *host, struct gd_sel *s, char *why,
				size_t wl);

/* One line per fact, for `zap-info -v`. */
void gd_sel_detail(const struct gd_sel *s, char *buf, size_t len);

/* An opened device: shared by the instance, its pool and its pairs. */
struct gd_dev;

int gd_dev_open(const struct zap_host *host, struct gd_dev **out);
void gd_dev_put(struct gd_dev *d);
int gd_dev_chan_fd(const struct gd_dev *d);
/* The device's count of bytes its pairs pin, updated atomically: it lives
 * as long as the device, so a pair freed after the instance (a message
 * released late) can still give its share back. */
uint64_t *gd_dev_pinned(struct gd_dev *d);
/* Take and acknowledge one completion event (after the fd polled in). */
void gd_dev_ack_event(struct gd_dev *d);

/* Pool backing: GPU memory registered with the NIC (pool buffers are sent
 * in place). The backing holds a device reference. */
void gd_dev_backing(struct gd_dev *d, struct zap_pool_backing *b);

/* One RC queue pair and its memory. */
struct gd_qp;

extern const struct gd_qp_ops gd_verbs_ops;

/* Create the pair (INIT) and fill @local's qpn, psn, lid, gid, mtu, slots,
 * slot_bytes and credit word. */
int gd_qp_new(struct gd_dev *d, uint32_t slots, uint32_t slot_bytes,
	      struct zap_pool *pool, struct gd_boot *local, struct gd_qp **out);
/* Move to RTR and RTS towards @peer and allocate the staging memory:
 * @stages buffers of the peer's slot size (gd_pin_plan()). */
int gd_qp_connect(struct gd_qp *q, const struct gd_boot *peer, uint32_t stages);
uint32_t gd_qp_stages(const struct gd_qp *q);
uint32_t gd_qp_sq_depth(const struct gd_qp *q);
void gd_qp_free(struct gd_qp *q);

#endif /* ZAP_GD_VERBS_H */
