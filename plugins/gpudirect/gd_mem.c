/* SPDX-License-Identifier: MIT */
/*
 * GPU memory registered with the NIC: dma-buf first
 * (cuMemGetHandleForAddressRange + ibv_reg_dmabuf_mr), else nvidia-peermem
 * (ibv_reg_mr on device memory). Serves the receive slots of each pair
 * (gd_qp.c) and the transport's pool (gd_dev_backing()).
 *
 * Shared state: the list of pool allocations, gd_dev.regs, under
 * gd_dev.mx. The pool allocates and frees from any thread; the data path
 * looks up the registration of a send source (gd_mem_lkey()) with a pair's
 * engine lock held, so gd_dev.mx nests inside that lock and nothing here
 * takes another lock while holding it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gd_verbs_int.h"

/* Register device memory [p, p+len) with the NIC: dma-buf first, then
 * nvidia-peermem. NULL with errno set on failure (logged). */
static struct ibv_mr *reg_gpu(struct gd_dev *d, zcu_ptr p, size_t len, int access)
{
	struct ibv_mr *mr = NULL;
	int e = EOPNOTSUPP;

	if (d->sel.dmabuf) {
		long pg = sysconf(_SC_PAGESIZE);
		zcu_ptr base = p & ~(zcu_ptr)(pg - 1);
		size_t span = ((p + len + (size_t)pg - 1) & ~(zcu_ptr)(pg - 1)) - base;
		int fd = -1;
		zcu_result r = ZCU_SUCCESS;

		if (!gd_cu_push(d)) {
			r = d->sel.cu->MemGetHandleForAddressRange(
				&fd, base, span, ZCU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
			gd_cu_pop(d);
		}
		if (r != ZCU_SUCCESS || fd < 0) {
			gd_cu_fail_log(d, "cuMemGetHandleForAddressRange", r);
		} else {
			mr = ibv_reg_dmabuf_mr(d->pd, p - base, len, p, fd, access);
			e = errno;
			close(fd);
			if (mr)
				return mr;
			d->host->log(ZAP_LOG_WARN, "gpudirect",
				     "ibv_reg_dmabuf_mr on %s failed: %s%s", d->sel.dev,
				     strerror(e),
				     d->sel.peermem ? "; using nvidia-peermem" : "");
		}
		if (!d->sel.peermem) {
			errno = e;
			return NULL;
		}
	}
	mr = ibv_reg_mr(d->pd, (void *)(uintptr_t)p, len, access);
	if (!mr) {
		e = errno;
		d->host->log(ZAP_LOG_WARN, "gpudirect",
			     "ibv_reg_mr on GPU memory failed: %s", strerror(e));
		errno = e;
	}
	return mr;
}

/* GPU memory for the pool and the receive slots, registered. */
int gd_gpu_alloc(struct gd_dev *d, size_t len, zcu_ptr *out, struct ibv_mr **mr)
{
	size_t alen = (len + GD_GPU_ALIGN - 1) & ~(size_t)(GD_GPU_ALIGN - 1);
	unsigned one = 1;
	zcu_ptr p = 0;
	zcu_result r;

	if (gd_cu_push(d))
		return -EIO;
	r = d->sel.cu->MemAlloc(&p, alen);
	/* The NIC writes behind the GPU's back: make every synchronous CUDA
	 * copy of this range see those writes (what GPUDirect RDMA asks). */
	if (r == ZCU_SUCCESS && d->sel.cu->PointerSetAttribute)
		d->sel.cu->PointerSetAttribute(&one, ZCU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
					       p);
	gd_cu_pop(d);
	if (r != ZCU_SUCCESS) {
		gd_cu_fail_log(d, "cuMemAlloc", r);
		return -ENOMEM;
	}
	*mr = reg_gpu(d, p, alen, IBV_ACCESS_LOCAL_WRITE);
	if (!*mr) {
		int e = errno;

		if (!gd_cu_push(d)) {
			d->sel.cu->MemFree(p);
			gd_cu_pop(d);
		}
		return e == ENOMEM ? -ENOMEM : -EIO;
	}
	*out = p;
	return 0;
}

void gd_gpu_free(struct gd_dev *d, zcu_ptr p, struct ibv_mr *mr)
{
	if (mr)
		ibv_dereg_mr(mr);
	if (p && !gd_cu_push(d)) {
		d->sel.cu->MemFree(p);
		gd_cu_pop(d);
	}
}

static void *pool_mem_alloc(void *user, size_t len, void **dev)
{
	struct gd_dev *d = user;
	struct gd_reg *g = calloc(1, sizeof(*g));

	if (!g)
		return NULL;
	if (gd_gpu_alloc(d, len, &g->p, &g->mr)) {
		free(g);
		return NULL;
	}
	g->len = len;
	pthread_mutex_lock(&d->mx);
	g->next = d->regs;
	d->regs = g;
	pthread_mutex_unlock(&d->mx);
	/* Device memory has no CPU address: both are the device address. */
	*dev = (void *)(uintptr_t)g->p;
	return (void *)(uintptr_t)g->p;
}

static void pool_mem_free(void *user, void *ptr, size_t len)
{
	struct gd_dev *d = user;
	struct gd_reg **pp, *g = NULL;

	pthread_mutex_lock(&d->mx);
	for (pp = &d->regs; *pp; pp = &(*pp)->next) {
		if ((*pp)->p == (zcu_ptr)(uintptr_t)ptr) {
			g = *pp;
			*pp = g->next;
			break;
		}
	}
	pthread_mutex_unlock(&d->mx);
	if (g) {
		gd_gpu_free(d, g->p, g->mr);
		free(g);
	}
}

int gd_mem_lkey(struct gd_dev *d, uintptr_t a, size_t len, uintptr_t *key)
{
	int rc = -ENOENT;

	pthread_mutex_lock(&d->mx);
	for (struct gd_reg *g = d->regs; g; g = g->next) {
		if (a >= g->p && a + len <= g->p + g->len) {
			*key = g->mr->lkey;
			rc = 0;
			break;
		}
	}
	pthread_mutex_unlock(&d->mx);
	return rc;
}

static void pool_mem_destroy(void *user)
{
	gd_dev_put(user);
}

void gd_dev_backing(struct gd_dev *d, struct zap_pool_backing *b)
{
	gd_dev_get(d);
	memset(b, 0, sizeof(*b));
	b->size = sizeof(*b);
	b->user = d;
	b->alloc = pool_mem_alloc;
	b->free = pool_mem_free;
	b->destroy = pool_mem_destroy;
}
