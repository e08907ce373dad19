/* SPDX-License-Identifier: MIT */
/* The gpudirect hardware side; see gd_verbs.h. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "gd_verbs.h"

#define GD_GPU_ALIGN (64u << 10) /* GPU allocations: whole host pages */

/* ---- choosing the port and the GPU ------------------------------------ */

static const char *link_name(uint8_t ll)
{
	return ll == IBV_LINK_LAYER_ETHERNET ? "Ethernet (RoCE)" : "InfiniBand";
}

/* The RoCE v2 GID with an IPv4 address if there is one, else RoCE v2, else
 * the first non-zero GID (InfiniBand: index 0). */
static void pick_gid(struct ibv_context *ctx, struct gd_sel *s, int tbl_len)
{
	int best = -1, rank = -1;

	for (int i = 0; i < tbl_len; i++) {
		struct ibv_gid_entry e;
		static const uint8_t v4[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
		int r = 0;

		if (ibv_query_gid_ex(ctx, s->port, (uint32_t)i, &e, 0))
			continue;
		if (!memcmp(e.gid.raw, (uint8_t[16]){ 0 }, 16))
			continue;
		if (s->link_layer != IBV_LINK_LAYER_ETHERNET) {
			best = i;
			break;
		}
		r = 1 + (e.gid_type == IBV_GID_TYPE_ROCE_V2) * 2 +
		    !memcmp(e.gid.raw, v4, sizeof(v4));
		if (r > rank) {
			rank = r;
			best = i;
		}
	}
	s->gid_index = best < 0 ? 0 : best;
	if (ibv_query_gid(ctx, s->port, s->gid_index, &s->gid))
		memset(&s->gid, 0, sizeof(s->gid));
}

/* First active port of @dev (or @want). 1: found, 0: none; @seen lists the
 * states for the reason. */
static int find_port(struct ibv_device *dev, uint8_t want, struct gd_sel *s,
		     char *seen, size_t sl)
{
	struct ibv_context *ctx = ibv_open_device(dev);
	struct ibv_device_attr da;
	size_t used = strlen(seen);
	int found = 0;

	if (!ctx) {
		snprintf(seen + used, sl - used, "%s%s: cannot open (%s)",
			 used ? "; " : "", ibv_get_device_name(dev), strerror(errno));
		return 0;
	}
	if (ibv_query_device(ctx, &da))
		da.phys_port_cnt = 0;
	for (uint8_t p = 1; p <= da.phys_port_cnt && !found; p++) {
		struct ibv_port_attr pa;

		if (want && p != want)
			continue;
		if (ibv_query_port(ctx, p, &pa))
			continue;
		used = strlen(seen);
		if (pa.state != IBV_PORT_ACTIVE) {
			snprintf(seen + used, sl - used, "%s%s:%u %s", used ? "; " : "",
				 ibv_get_device_name(dev), p,
				 ibv_port_state_str(pa.state));
			continue;
		}
		snprintf(s->dev, sizeof(s->dev), "%s", ibv_get_device_name(dev));
		s->port = p;
		s->link_layer = pa.link_layer;
		s->lid = pa.lid;
		s->mtu = (uint8_t)pa.active_mtu;
		pick_gid(ctx, s, pa.gid_tbl_len);
		found = 1;
	}
	if (want && want > da.phys_port_cnt && !found) {
		used = strlen(seen);
		snprintf(seen + used, sl - used, "%s%s has %u port(s), not %u",
			 used ? "; " : "", ibv_get_device_name(dev), da.phys_port_cnt, want);
	}
	ibv_close_device(ctx);
	return found;
}

/* ZAP_GPUDIRECT_DEVICE: "<name>" or "<name>:<port>". */
static int parse_dev_env(const char *v, char *name, size_t nl, uint8_t *port)
{
	const char *colon = strchr(v, ':');
	size_t n = colon ? (size_t)(colon - v) : strlen(v);

	if (!n || n >= nl)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)v[i]) && !strchr("_.-", v[i]))
			return -EINVAL;
	memcpy(name, v, n);
	name[n] = '\0';
	*port = 0;
	if (colon) {
		char *end;
		long p;

		errno = 0;
		p = strtol(colon + 1, &end, 10);
		if (errno || *end || end == colon + 1 || p < 1 || p > 255)
			return -EINVAL;
		*port = (uint8_t)p;
	}
	return 0;
}

static enum zap_probe_result pick_port(struct gd_sel *s, char *why, size_t wl)
{
	/* secure_getenv: unset under AT_SECURE, as zap_host.env_get answers
	 * (this code has no host table at hand). */
	const char *env = secure_getenv("ZAP_GPUDIRECT_DEVICE");
	char want[IBV_SYSFS_NAME_MAX] = "", seen[512] = "", names[256] = "";
	struct ibv_device **list;
	enum zap_probe_result r = ZAP_PROBE_NOT_PRESENT;
	uint8_t port = 0;
	int n = 0, matched = 0;

	if (env && *env && parse_dev_env(env, want, sizeof(want), &port)) {
		snprintf(why, wl, "ZAP_GPUDIRECT_DEVICE='%s' is not <verbs device>[:<port>]",
			 env);
		return ZAP_PROBE_ERROR;
	}
	errno = 0;
	list = ibv_get_device_list(&n);
	if (!list) {
		int e = errno;

		if (e == ENOSYS)
			snprintf(why, wl, "no RDMA device: ibv_get_device_list failed "
				 "with ENOSYS (%s): the kernel has no RDMA support",
				 strerror(e));
		else
			snprintf(why, wl, "no RDMA device: ibv_get_device_list failed: %s",
				 strerror(e));
		return ZAP_PROBE_NOT_PRESENT;
	}
	if (!n) {
		snprintf(why, wl, "no RDMA device (ibv_get_device_list found none)");
		goto out;
	}
	for (int i = 0; i < n; i++) {
		size_t used = strlen(names);

		snprintf(names + used, sizeof(names) - used, "%s%s", used ? ", " : "",
			 ibv_get_device_name(list[i]));
		if (*want && strcmp(want, ibv_get_device_name(list[i])))
			continue;
		matched = 1;
		if (find_port(list[i], port, s, seen, sizeof(seen))) {
			r = ZAP_PROBE_OK;
			goto out;
		}
	}
	if (*want && !matched) {
		snprintf(why, wl, "ZAP_GPUDIRECT_DEVICE='%s': no RDMA device named %s "
			 "(have: %s)", env, want, names);
		r = ZAP_PROBE_ERROR;
	} else if (*want && port && strstr(seen, "not")) {
		snprintf(why, wl, "ZAP_GPUDIRECT_DEVICE='%s': %s", env, seen);
		r = ZAP_PROBE_ERROR;
	} else {
		snprintf(why, wl, "no active RDMA port (%s)", *seen ? seen : names);
	}
out:
	ibv_free_device_list(list);
	return r;
}

/* Path components of @a past the common prefix with @b: PCIe hops. */
static int hops(const char *a, const char *b)
{
	size_t i = 0, last = 0;
	int n = 0;

	while (a[i] && a[i] == b[i]) {
		if (a[i] == '/')
			last = i;
		i++;
	}
	if (!a[i] && (b[i] == '/' || !b[i]))
		last = i;
	for (const char *p = a + last; *p; p++)
		n += *p == '/';
	for (const char *p = b + last; *p; p++)
		n += *p == '/';
	return n;
}

static int gpu_sysfs(const struct zcu *cu, zcu_device d, char *bus, size_t bl,
		     char *path)
{
	char p[PATH_MAX];

	if (!cu->DeviceGetPCIBusId || cu->DeviceGetPCIBusId(bus, (int)bl, d) != ZCU_SUCCESS)
		return -ENOENT;
	for (char *c = bus; *c; c++)
		*c = (char)tolower((unsigned char)*c);
	snprintf(p, sizeof(p), "/sys/bus/pci/devices/%s", bus);
	return realpath(p, path) ? 0 : -ENOENT;
}

/* Without ZAP_CUDA_DEVICE: the GPU fewest PCIe hops from the NIC. */
static void pick_gpu(struct gd_sel *s)
{
	const struct zcu *cu = s->cu;
	char nic[PATH_MAX], p[PATH_MAX], gpu[PATH_MAX], bus[32];
	/* secure_getenv: see pick_port(). */
	const char *env = secure_getenv("ZAP_CUDA_DEVICE");
	int n = 0, best = -1, best_d = INT_MAX;

	s->gpu_distance = -1;
	snprintf(p, sizeof(p), "/sys/class/infiniband/%s/device", s->dev);
	if (!realpath(p, nic))
		nic[0] = '\0';
	if (env && *env) {
		if (*nic && !gpu_sysfs(cu, s->gpu.dev, s->gpu_bus, sizeof(s->gpu_bus), gpu))
			s->gpu_distance = hops(nic, gpu);
		return;
	}
	if (cu->DeviceGetCount(&n) != ZCU_SUCCESS)
		return;
	for (int i = 0; i < n && *nic; i++) {
		zcu_device d;
		int h;

		if (cu->DeviceGet(&d, i) != ZCU_SUCCESS || gpu_sysfs(cu, d, bus, sizeof(bus), gpu))
			continue;
		h = hops(nic, gpu);
		if (h < best_d) {
			best_d = h;
			best = i;
		}
	}
	if (best > 0 && cu->DeviceGet(&s->gpu.dev, best) == ZCU_SUCCESS) {
		s->gpu.ordinal = best;
		if (cu->DeviceGetName(s->gpu.name, (int)sizeof(s->gpu.name), s->gpu.dev))
			snprintf(s->gpu.name, sizeof(s->gpu.name), "device %d", best);
	}
	if (best >= 0)
		s->gpu_distance = best_d;
	gpu_sysfs(cu, s->gpu.dev, s->gpu_bus, sizeof(s->gpu_bus), gpu);
}

enum zap_probe_result gd_select(struct gd_sel *s, char *why, size_t wl)
{
	enum zap_probe_result r;
	int dmabuf_attr = 0;

	memset(s, 0, sizeof(*s));
	/* libibverbs is linked, so asking it is cheapest; libcuda.so.1 next. */
	r = pick_port(s, why, wl);
	if (r != ZAP_PROBE_OK)
		return r;
	r = zcu_load(&s->cu, why, wl);
	if (r != ZAP_PROBE_OK)
		return r;
	r = zcu_open_device(NULL, s->cu, &s->gpu, why, wl);
	if (r != ZAP_PROBE_OK)
		return r;
	pick_gpu(s);
	if (!s->cu->MemAlloc || !s->cu->MemcpyDtoD) {
		snprintf(why, wl, "libcuda.so.1 lacks cuMemAlloc_v2/cuMemcpyDtoD_v2 "
			 "(driver too old or broken)");
		return ZAP_PROBE_ERROR;
	}
	s->cu->DeviceGetAttribute(&dmabuf_attr, ZCU_ATTR_DMA_BUF_SUPPORTED, s->gpu.dev);
	s->dmabuf = dmabuf_attr == 1 && s->cu->MemGetHandleForAddressRange;
	s->peermem = !access("/sys/module/nvidia_peermem", F_OK) ||
		     !access("/sys/module/nv_peer_mem", F_OK);
	if (!s->dmabuf && !s->peermem) {
		snprintf(why, wl, "no way to register GPU memory with %s: CUDA device %d "
			 "lacks dma-buf export (%s) and nvidia-peermem is not loaded "
			 "(/sys/module/nvidia_peermem absent)", s->dev, s->gpu.ordinal,
			 s->cu->MemGetHandleForAddressRange
				 ? "CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0"
				 : "no cuMemGetHandleForAddressRange");
		return ZAP_PROBE_NOT_PRESENT;
	}
	snprintf(why, wl, "%s port %u (%s) with CUDA device %d (%s), %s", s->dev,
		 s->port, link_name(s->link_layer), s->gpu.ordinal, s->gpu.name,
		 s->dmabuf ? "dma-buf" : "nvidia-peermem");
	return ZAP_PROBE_OK;
}

void gd_sel_detail(const struct gd_sel *s, char *buf, size_t len)
{
	char gid[INET6_ADDRSTRLEN];

	if (!inet_ntop(AF_INET6, s->gid.raw, gid, sizeof(gid)))
		snprintf(gid, sizeof(gid), "?");
	snprintf(buf, len,
		 "rdma device: %s\n"
		 "port: %u, link layer: %s, lid %u, active mtu %d bytes\n"
		 "gid: index %d, %s\n"
		 "gpu: CUDA device %d (%s), pci %s, %d PCIe hop(s) from the NIC\n"
		 "registration: %s%s",
		 s->dev, s->port, link_name(s->link_layer), s->lid,
		 s->mtu ? 128 << s->mtu : 0, s->gid_index, gid, s->gpu.ordinal,
		 s->gpu.name, *s->gpu_bus ? s->gpu_bus : "?", s->gpu_distance,
		 s->dmabuf ? "dma-buf (cuMemGetHandleForAddressRange + ibv_reg_dmabuf_mr)"
			   : "nvidia-peermem (ibv_reg_mr on device memory)",
		 s->dmabuf && s->peermem ? ", nvidia-peermem as fallback" : "");
}

/* ---- the device -------------------------------------------------------- */

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
};

static void cu_fail_log(struct gd_dev *d, const char *what, zcu_result r)
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
	if (gd_select(&d->sel, why, sizeof(why)) != ZAP_PROBE_OK) {
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
		free(d);
		return host->fail(rc ? rc : -ENODEV, "gpudirect: cannot open %s: %s",
				  d->sel.dev, strerror(rc ? -rc : ENODEV));
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

static void dev_get(struct gd_dev *d)
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

const struct gd_sel *gd_dev_sel(const struct gd_dev *d)
{
	return &d->sel;
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

static int cu_push(struct gd_dev *d)
{
	zcu_result r = d->sel.cu->CtxPushCurrent(d->cuctx);

	if (r != ZCU_SUCCESS) {
		cu_fail_log(d, "cuCtxPushCurrent", r);
		return -EIO;
	}
	return 0;
}

static void cu_pop(struct gd_dev *d)
{
	zcu_ctx prev;

	d->sel.cu->CtxPopCurrent(&prev);
}

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

		if (!cu_push(d)) {
			r = d->sel.cu->MemGetHandleForAddressRange(
				&fd, base, span, ZCU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
			cu_pop(d);
		}
		if (r != ZCU_SUCCESS || fd < 0) {
			cu_fail_log(d, "cuMemGetHandleForAddressRange", r);
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
static int gpu_alloc(struct gd_dev *d, size_t len, zcu_ptr *out, struct ibv_mr **mr)
{
	size_t alen = (len + GD_GPU_ALIGN - 1) & ~(size_t)(GD_GPU_ALIGN - 1);
	unsigned one = 1;
	zcu_ptr p = 0;
	zcu_result r;

	if (cu_push(d))
		return -EIO;
	r = d->sel.cu->MemAlloc(&p, alen);
	/* The NIC writes behind the GPU's back: make every synchronous CUDA
	 * copy of this range see those writes (what GPUDirect RDMA asks). */
	if (r == ZCU_SUCCESS && d->sel.cu->PointerSetAttribute)
		d->sel.cu->PointerSetAttribute(&one, ZCU_POINTER_ATTRIBUTE_SYNC_MEMOPS, p);
	cu_pop(d);
	if (r != ZCU_SUCCESS) {
		cu_fail_log(d, "cuMemAlloc", r);
		return -ENOMEM;
	}
	*mr = reg_gpu(d, p, alen, IBV_ACCESS_LOCAL_WRITE);
	if (!*mr) {
		int e = errno;

		if (!cu_push(d)) {
			d->sel.cu->MemFree(p);
			cu_pop(d);
		}
		return e == ENOMEM ? -ENOMEM : -EIO;
	}
	*out = p;
	return 0;
}

static void gpu_free(struct gd_dev *d, zcu_ptr p, struct ibv_mr *mr)
{
	if (mr)
		ibv_dereg_mr(mr);
	if (p && !cu_push(d)) {
		d->sel.cu->MemFree(p);
		cu_pop(d);
	}
}

static void *pool_mem_alloc(void *user, size_t len, void **dev)
{
	struct gd_dev *d = user;
	struct gd_reg *g = calloc(1, sizeof(*g));

	if (!g)
		return NULL;
	if (gpu_alloc(d, len, &g->p, &g->mr)) {
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
		gpu_free(d, g->p, g->mr);
		free(g);
	}
}

static void pool_mem_destroy(void *user)
{
	gd_dev_put(user);
}

void gd_dev_backing(struct gd_dev *d, struct zap_pool_backing *b)
{
	dev_get(d);
	memset(b, 0, sizeof(*b));
	b->size = sizeof(*b);
	b->user = d;
	b->alloc = pool_mem_alloc;
	b->free = pool_mem_free;
	b->destroy = pool_mem_destroy;
}

/* ---- queue pairs ------------------------------------------------------ */

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
	uint64_t *credit;        /* [0]: written by the peer; [1..]: sources */
	struct ibv_mr *credit_mr;
	uint64_t peer_addr;
	uint32_t peer_rkey;
	uint32_t psn;
};

static int verbs_err(struct gd_qp *q, const char *what, int e)
{
	q->dev->host->log(ZAP_LOG_WARN, "gpudirect", "%s on %s failed: %s", what,
			  q->dev->sel.dev, strerror(e));
	return e == ENOMEM ? -ENOMEM : -EIO;
}

int gd_qp_new(struct gd_dev *d, uint32_t slots, uint32_t slot_bytes,
	      struct zap_pool *pool, struct gd_boot *local, struct gd_qp **out)
{
	struct ibv_qp_init_attr ia = { 0 };
	struct ibv_qp_attr qa = { 0 };
	struct gd_qp *q = calloc(1, sizeof(*q));
	size_t clen;
	int rc;

	if (!q)
		return -ENOMEM;
	q->dev = d;
	dev_get(d);
	q->pool = pool;
	q->slots = slots;
	q->slot_bytes = slot_bytes;
	/* Room for a full window of data chunks plus the credit writes. */
	q->sq_depth = 2 * slots + 8;
	rc = gpu_alloc(d, (size_t)slots * slot_bytes, &q->slot_mem, &q->slot_mr);
	if (rc)
		goto fail;
	clen = (q->sq_depth + 1) * sizeof(uint64_t);
	rc = -ENOMEM;
	if (posix_memalign((void **)&q->credit, 64, clen))
		goto fail;
	memset(q->credit, 0, clen);
	q->credit_mr = ibv_reg_mr(d->pd, q->credit, clen,
				  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!q->credit_mr) {
		rc = verbs_err(q, "ibv_reg_mr (credit word)", errno);
		goto fail;
	}
	q->cq = ibv_create_cq(d->ctx, (int)(slots + q->sq_depth), q, d->chan, 0);
	if (!q->cq) {
		rc = verbs_err(q, "ibv_create_cq", errno);
		goto fail;
	}
	ia.send_cq = q->cq;
	ia.recv_cq = q->cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = q->sq_depth;
	ia.cap.max_recv_wr = slots;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	q->qp = ibv_create_qp(d->pd, &ia);
	if (!q->qp) {
		rc = verbs_err(q, "ibv_create_qp", errno);
		goto fail;
	}
	qa.qp_state = IBV_QPS_INIT;
	qa.pkey_index = 0;
	qa.port_num = d->sel.port;
	qa.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
	rc = ibv_modify_qp(q->qp, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
					       IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	if (rc) {
		rc = verbs_err(q, "ibv_modify_qp(INIT)", rc);
		goto fail;
	}
	if (ibv_req_notify_cq(q->cq, 0)) {
		rc = verbs_err(q, "ibv_req_notify_cq", errno);
		goto fail;
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
fail:
	gd_qp_free(q);
	return rc;
}

int gd_qp_connect(struct gd_qp *q, const struct gd_boot *peer)
{
	struct gd_dev *d = q->dev;
	struct ibv_qp_attr a = { 0 };
	int rc;

	q->peer_addr = peer->credit_addr;
	q->peer_rkey = peer->credit_rkey;
	q->stage_bytes = peer->slot_bytes;
	/* Host staging for sends from host memory: a window's worth, capped. */
	q->stages = peer->slots < 8 ? peer->slots : 8;
	if (posix_memalign((void **)&q->stage_mem, 4096, (size_t)q->stages * q->stage_bytes))
		return -ENOMEM;
	q->stage_mr = ibv_reg_mr(d->pd, q->stage_mem, (size_t)q->stages * q->stage_bytes,
				 IBV_ACCESS_LOCAL_WRITE);
	if (!q->stage_mr)
		return verbs_err(q, "ibv_reg_mr (staging)", errno);

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
	rc = ibv_modify_qp(q->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					      IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					      IBV_QP_MAX_DEST_RD_ATOMIC |
					      IBV_QP_MIN_RNR_TIMER);
	if (rc)
		return verbs_err(q, "ibv_modify_qp(RTR)", rc);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;   /* 4.096 us * 2^14 = 67 ms per try */
	a.retry_cnt = 7;
	a.rnr_retry = 7;  /* credits prevent RNR; this only rides out a race */
	a.sq_psn = q->psn;
	a.max_rd_atomic = 1;
	rc = ibv_modify_qp(q->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					      IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
					      IBV_QP_MAX_QP_RD_ATOMIC);
	if (rc)
		return verbs_err(q, "ibv_modify_qp(RTS)", rc);
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
	gpu_free(q->dev, q->slot_mem, q->slot_mr);
	gd_dev_put(q->dev);
	free(q);
}

/* ---- struct gd_qp_ops over verbs --------------------------------------- */

static int post_err(struct gd_qp *q, const char *what, int e)
{
	return verbs_err(q, what, e);
}

static int gd_post_send(void *qp, uint64_t wr_id, const void *src, size_t len,
			uint32_t imm, uintptr_t key)
{
	struct gd_qp *q = qp;
	struct ibv_sge sge = {
		.addr = (uint64_t)(uintptr_t)src, .length = (uint32_t)len,
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
		.length = q->slot_bytes, .lkey = q->slot_mr->lkey,
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
		.addr = (uint64_t)(uintptr_t)src, .length = sizeof(*src),
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
		out[i].status = wc[i].status == IBV_WC_SUCCESS ? 0 : wc_errno(wc[i].status);
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
	int rc = -ENOENT;

	if (a >= (uintptr_t)q->stage_mem &&
	    a + len <= (uintptr_t)q->stage_mem + (size_t)q->stages * q->stage_bytes) {
		*key = q->stage_mr->lkey;
		return 0;
	}
	pthread_mutex_lock(&q->dev->mx);
	for (struct gd_reg *g = q->dev->regs; g; g = g->next) {
		if (a >= g->p && a + len <= g->p + g->len) {
			*key = g->mr->lkey;
			rc = 0;
			break;
		}
	}
	pthread_mutex_unlock(&q->dev->mx);
	return rc;
}

static int gd_copy(void *qp, void *dst, const void *src, size_t len)
{
	struct gd_qp *q = qp;
	zcu_result r;

	if (cu_push(q->dev))
		return -EIO;
	r = q->dev->sel.cu->MemcpyDtoD((zcu_ptr)(uintptr_t)dst, (zcu_ptr)(uintptr_t)src, len);
	cu_pop(q->dev);
	if (r != ZCU_SUCCESS) {
		cu_fail_log(q->dev, "cuMemcpyDtoD", r);
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
