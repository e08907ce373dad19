/* SPDX-License-Identifier: MIT */
/*
 * Choosing the RDMA port and the GPU, and the probe's checks (gd_select(),
 * gd_sel_detail() in gd_verbs.h). Cheapest checks first; nothing here
 * allocates device memory or keeps a device open, and there is no shared
 * state: the probe and gd_dev_open() each fill their own struct gd_sel.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gd_verbs.h"

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
static int find_port(struct ibv_device *dev, uint8_t want, struct gd_sel *s, char *seen,
		     size_t sl)
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
			 used ? "; " : "", ibv_get_device_name(dev), da.phys_port_cnt,
			 want);
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
	/* Through libzap's registry (zap_host.config_str). */
	const char *env = NULL;
	char want[IBV_SYSFS_NAME_MAX] = "", seen[512] = "", names[256] = "";
	struct ibv_device **list;
	enum zap_probe_result r = ZAP_PROBE_NOT_PRESENT;
	uint8_t port = 0;
	int n = 0, matched = 0;

	if (ZAP_HOST_HAS(s->host, config_str) &&
	    s->host->config_str("ZAP_GPUDIRECT_DEVICE", &env) < 0) {
		snprintf(why, wl, "%s", s->host->last_error());
		return ZAP_PROBE_ERROR;
	}
	if (env && *env && parse_dev_env(env, want, sizeof(want), &port)) {
		snprintf(why, wl,
			 "ZAP_GPUDIRECT_DEVICE='%s' is not <verbs device>[:<port>]", env);
		return ZAP_PROBE_ERROR;
	}
	errno = 0;
	list = ibv_get_device_list(&n);
	if (!list) {
		int e = errno;

		if (e == ENOSYS)
			snprintf(why, wl,
				 "no RDMA device: ibv_get_device_list failed "
				 "with ENOSYS (%s): the kernel has no RDMA support",
				 strerror(e));
		else
			snprintf(why, wl,
				 "no RDMA device: ibv_get_device_list failed: %s",
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
		snprintf(why, wl,
			 "ZAP_GPUDIRECT_DEVICE='%s': no RDMA device named %s "
			 "(have: %s)",
			 env, want, names);
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

static int gpu_sysfs(const struct zcu *cu, zcu_device d, char *bus, size_t bl, char *path)
{
	char p[PATH_MAX];

	if (!cu->DeviceGetPCIBusId ||
	    cu->DeviceGetPCIBusId(bus, (int)bl, d) != ZCU_SUCCESS)
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
	uint64_t ord;
	char why[8];
	/* Set (or bad: gd_select() already refused it): that device. */
	bool env = zcu_env_device(s->host, &ord, why, sizeof(why)) != 0;
	int n = 0, best = -1, best_d = INT_MAX;

	s->gpu_distance = -1;
	snprintf(p, sizeof(p), "/sys/class/infiniband/%s/device", s->dev);
	if (!realpath(p, nic))
		nic[0] = '\0';
	if (env) {
		if (*nic &&
		    !gpu_sysfs(cu, s->gpu.dev, s->gpu_bus, sizeof(s->gpu_bus), gpu))
			s->gpu_distance = hops(nic, gpu);
		return;
	}
	if (cu->DeviceGetCount(&n) != ZCU_SUCCESS)
		return;
	for (int i = 0; i < n && *nic; i++) {
		zcu_device d;
		int h;

		if (cu->DeviceGet(&d, i) != ZCU_SUCCESS ||
		    gpu_sysfs(cu, d, bus, sizeof(bus), gpu))
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

enum zap_probe_result gd_select(const struct zap_host *host, struct gd_sel *s, char *why,
				size_t wl)
{
	enum zap_probe_result r;
	int dmabuf_attr = 0;

	memset(s, 0, sizeof(*s));
	s->host = host;
	/* libibverbs is linked, so asking it is cheapest; libcuda.so.1 next. */
	r = pick_port(s, why, wl);
	if (r != ZAP_PROBE_OK)
		return r;
	r = zcu_load(&s->cu, why, wl);
	if (r != ZAP_PROBE_OK)
		return r;
	r = zcu_open_device(host, s->cu, &s->gpu, why, wl);
	if (r != ZAP_PROBE_OK)
		return r;
	pick_gpu(s);
	if (!s->cu->MemAlloc || !s->cu->MemcpyDtoD) {
		snprintf(why, wl,
			 "libcuda.so.1 lacks cuMemAlloc_v2/cuMemcpyDtoD_v2 "
			 "(driver too old or broken)");
		return ZAP_PROBE_ERROR;
	}
	s->cu->DeviceGetAttribute(&dmabuf_attr, ZCU_ATTR_DMA_BUF_SUPPORTED, s->gpu.dev);
	s->dmabuf = dmabuf_attr == 1 && s->cu->MemGetHandleForAddressRange;
	s->peermem = !access("/sys/module/nvidia_peermem", F_OK) ||
		     !access("/sys/module/nv_peer_mem", F_OK);
	if (!s->dmabuf && !s->peermem) {
		snprintf(why, wl,
			 "no way to register GPU memory with %s: CUDA device %d "
			 "lacks dma-buf export (%s) and nvidia-peermem is not loaded "
			 "(/sys/module/nvidia_peermem absent)",
			 s->dev, s->gpu.ordinal,
			 s->cu->MemGetHandleForAddressRange
				 ? "CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0"
				 : "no cuMemGetHandleForAddressRange");
		return ZAP_PROBE_NOT_PRESENT;
	}
	snprintf(why, wl, "%s port %u (%s) with CUDA device %d (%s), %s", s->dev, s->port,
		 link_name(s->link_layer), s->gpu.ordinal, s->gpu.name,
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
