/* SPDX-License-Identifier: MIT */
/*
 * The opened device (gd_dev_open(), gd_dev_put() in gd_verbs.h): the verbs
 * context, protection domain and completion channel, and the GPU's primary
 * CUDA context, shared by the instance, its pool and every queue pair.
 * Shared state: the reference count (atomic); the rest is written once
 * here, before the device is handed out. See gd_verbs_int.h.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gd_verbs_int.h"

void gd_cu_fail_log(struct gd_dev *d, const char *what, zcu_result r)
{
	char err[96];

	d->host->log(ZAP_LOG_WARN, "gpudirect", "%s failed: %s", what,
		     zcu_error_name(d->sel.cu, r, err, sizeof(err)));
}

int gd_dev_open(const struct zap_host *host, struct gd_dev **out)
{
	struct ibv_device **list;
	struct gd_dev *d;
	char why[256];
	zcu_result r;
	int n = 0, rc;

	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->host = host;
	if (gd_select(host, &d->sel, why, sizeof(why)) != ZAP_PROBE_OK) {
		free(d);
		return host->fail(ZAP_ENOTAVAIL, "gpudirect: %s", why);
	}
	list = ibv_get_device_list(&n);
	for (int i = 0; list && i < n && !d->ctx; i++)
		if (!strcmp(ibv_get_device_name(list[i]), d->sel.dev))
			d->ctx = ibv_open_device(list[i]);
	rc = -errno;
	if (list)
		ibv_free_device_list(list);
	if (!d->ctx) {
		rc = host->fail(rc ? rc : -ENODEV, "gpudirect: cannot open %s: %s",
				d->sel.dev, strerror(rc ? -rc : ENODEV));
		free(d);
		return rc;
	}
	d->pd = ibv_alloc_pd(d->ctx);
	d->chan = d->pd ? ibv_create_comp_channel(d->ctx) : NULL;
	if (!d->chan) {
		rc = host->fail(-EIO, "gpudirect: %s: %s failed: %s", d->sel.dev,
				d->pd ? "ibv_create_comp_channel" : "ibv_alloc_pd",
				strerror(errno));
		goto fail;
	}
	r = d->sel.cu->DevicePrimaryCtxRetain(&d->cuctx, d->sel.gpu.dev);
	if (r != ZCU_SUCCESS) {
		char err[96];

		rc = host->fail(-EIO, "gpudirect: cuDevicePrimaryCtxRetain failed: %s",
				zcu_error_name(d->sel.cu, r, err, sizeof(err)));
		goto fail;
	}
	pthread_mutex_init(&d->mx, NULL);
	d->refs = 1;
	*out = d;
	return 0;
fail:
	if (d->chan)
		ibv_destroy_comp_channel(d->chan);
	if (d->pd)
		ibv_dealloc_pd(d->pd);
	ibv_close_device(d->ctx);
	free(d);
	return rc;
}

void gd_dev_get(struct gd_dev *d)
{
	__atomic_add_fetch(&d->refs, 1, __ATOMIC_RELAXED);
}

void gd_dev_put(struct gd_dev *d)
{
	if (!d || __atomic_sub_fetch(&d->refs, 1, __ATOMIC_ACQ_REL))
		return;
	d->sel.cu->DevicePrimaryCtxRelease(d->sel.gpu.dev);
	ibv_destroy_comp_channel(d->chan);
	ibv_dealloc_pd(d->pd);
	ibv_close_device(d->ctx);
	pthread_mutex_destroy(&d->mx);
	free(d);
}

uint64_t *gd_dev_pinned(struct gd_dev *d)
{
	return &d->pinned;
}

int gd_dev_chan_fd(const struct gd_dev *d)
{
	return d->chan->fd;
}

void gd_dev_ack_event(struct gd_dev *d)
{
	struct ibv_cq *cq;
	void *cq_ctx;

	/* Acknowledge at once: the pairs re-arm their own queues (gd_poll),
	 * so a queue being destroyed never waits on this thread. */
	if (!ibv_get_cq_event(d->chan, &cq, &cq_ctx))
		ibv_ack_cq_events(cq, 1);
}

int gd_cu_push(struct gd_dev *d)
{
	zcu_result r = d->sel.cu->CtxPushCurrent(d->cuctx);

	if (r != ZCU_SUCCESS) {
		gd_cu_fail_log(d, "cuCtxPushCurrent", r);
		return -EIO;
	}
	return 0;
}

void gd_cu_pop(struct gd_dev *d)
{
	zcu_ctx prev;

	d->sel.cu->CtxPopCurrent(&prev);
}
