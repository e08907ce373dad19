/* SPDX-License-Identifier: MIT */
/*
 * The dpdk transport's configuration: the ZAP_DPDK_* variables (README.md
 * lists them), and what probe can check of the EAL arguments without
 * starting the EAL (installed vdev drivers, free hugepages).
 *
 * No shared state: every function fills what its caller passes.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <rte_config.h>

#include "dp_int.h"

/*
 * The variables through libzap's registry (zap_host.config_u64 and
 * config_str, which hold their grammar, range and default): in a setuid or
 * file-capability program every one reads as unset, so a caller cannot
 * hand EAL arguments ("-d lib.so") to a privileged process and dpdk
 * reports itself not configured. A host older than plugin ABI 1.4:
 * env_get(), the same policy, and the checks below.
 */
static const char *dp_getenv(const struct zap_host *h, const char *name)
{
	const char *v = NULL;

	if (ZAP_HOST_HAS(h, config_str))
		return h->config_str(name, &v) < 0 ? NULL : v;
	return ZAP_HOST_HAS(h, env_get) ? h->env_get(name) : NULL;
}

/* A number through the registry, also bounded by [@min, @max] here. */
static int env_u64(const struct zap_host *h, const char *name, uint64_t def, uint64_t min,
		   uint64_t max, uint64_t *out, char *why, size_t len)
{
	const char *v;
	unsigned long long x;
	char *end;
	int rc;

	if (ZAP_HOST_HAS(h, config_u64)) {
		rc = h->config_u64(name, out);
		if (rc >= 0 && (*out < min || *out > max)) {
			snprintf(why, len,
				 "bad %s=%llu (want an integer in [%llu, %llu])", name,
				 (unsigned long long)*out, (unsigned long long)min,
				 (unsigned long long)max);
			return -EINVAL;
		}
		if (rc < 0)
			snprintf(why, len, "%s", h->last_error());
		return rc < 0 ? -EINVAL : 0;
	}
	v = dp_getenv(h, name);
	if (!v || !*v) {
		*out = def;
		return 0;
	}
	errno = 0;
	x = strtoull(v, &end, 10);
	if (errno || end == v || *end || v[0] == '-' || x < min || x > max) {
		snprintf(why, len, "bad %s=\"%s\" (want an integer in [%llu, %llu])",
			 name, v, (unsigned long long)min, (unsigned long long)max);
		return -EINVAL;
	}
	*out = x;
	return 0;
}

/* A boolean variable: the registry's (1/0, yes/no, true/false, on/off in
 * any case), a number 0 or 1. */
static int env_bool(const struct zap_host *h, const char *name, uint64_t def,
		    uint64_t *out, char *why, size_t len)
{
	static const char *const yes[] = { "1", "yes", "true", "on" };
	static const char *const no[] = { "0", "no", "false", "off" };
	const char *v;

	if (ZAP_HOST_HAS(h, config_u64))
		return env_u64(h, name, def, 0, 1, out, why, len);
	v = dp_getenv(h, name);
	if (!v || !*v) {
		*out = def;
		return 0;
	}
	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (!strcasecmp(v, yes[i]) || !strcasecmp(v, no[i])) {
			*out = !strcasecmp(v, yes[i]);
			return 0;
		}
	}
	snprintf(why, len,
		 "bad %s=\"%s\" (want a boolean: 1/0, yes/no, true/false, on/off)", name,
		 v);
	return -EINVAL;
}

static int parse_neighbors(struct dp_conf *c, const char *v, char *why, size_t len)
{
	char buf[2048], *save = NULL, *tok;

	if (strlen(v) >= sizeof(buf))
		goto bad;
	snprintf(buf, sizeof(buf), "%s", v);
	for (tok = strtok_r(buf, ", \t", &save); tok;
	     tok = strtok_r(NULL, ", \t", &save)) {
		char *eq = strchr(tok, '=');

		if (!eq || c->n_nb == sizeof(c->nb) / sizeof(c->nb[0]))
			goto bad;
		*eq = 0;
		if (dp_parse_ip(tok, &c->nb[c->n_nb].ip) ||
		    dp_parse_mac(eq + 1, c->nb[c->n_nb].mac))
			goto bad;
		c->n_nb++;
	}
	return 0;
bad:
	snprintf(why, len,
		 "bad ZAP_DPDK_NEIGHBORS=\"%s\" (want ip=aa:bb:cc:dd:ee:ff,... "
		 "at most 64)",
		 v);
	return -EINVAL;
}

/* The EAL arguments and the local address: what makes the transport
 * configured at all. */
static int conf_identity(const struct zap_host *h, struct dp_conf *c, char *why,
			 size_t len)
{
	const char *v = dp_getenv(h, "ZAP_DPDK_EAL_ARGS");

	if (!v || !v[strspn(v, " \t")]) {
		snprintf(why, len, "not configured: ZAP_DPDK_EAL_ARGS unset");
		return DP_CONF_UNSET;
	}
	if (strlen(v) >= sizeof(c->eal)) {
		snprintf(why, len, "ZAP_DPDK_EAL_ARGS longer than %zu bytes",
			 sizeof(c->eal) - 1);
		return -EINVAL;
	}
	snprintf(c->eal, sizeof(c->eal), "%s", v);
	v = dp_getenv(h, "ZAP_DPDK_IP");
	if (!v || !*v) {
		snprintf(why, len, "ZAP_DPDK_IP unset (the port's local IPv4 address)");
		return -EINVAL;
	}
	if (dp_parse_ip(v, &c->ip) || !c->ip) {
		snprintf(why, len, "bad ZAP_DPDK_IP=\"%s\" (want a.b.c.d)", v);
		return -EINVAL;
	}
	return DP_CONF_OK;
}

/* The port, the UDP port, static neighbours and receive drop injection. */
static int conf_addressing(const struct zap_host *h, struct dp_conf *c, char *why,
			   size_t len)
{
	const char *v;
	uint64_t x;
	int rc;

	rc = env_u64(h, "ZAP_DPDK_PORT", 0, 0, RTE_MAX_ETHPORTS - 1, &x, why, len);
	c->port = (unsigned)x;
	c->udp_port = -1;
	/* 0 (the default): the listen address's port, else 47000. */
	if (!rc)
		rc = env_u64(h, "ZAP_DPDK_UDP_PORT", 0, 0, 65535, &x, why, len);
	if (!rc && x)
		c->udp_port = (int)x;
	v = dp_getenv(h, "ZAP_DPDK_NEIGHBORS");
	if (!rc && v && *v)
		rc = parse_neighbors(c, v, why, len);
	v = dp_getenv(h, "ZAP_DPDK_DROP_RX");
	if (!rc && v && *v) {
		char *end;

		errno = 0;
		c->drop_rx = strtod(v, &end);
		if (errno || end == v || *end || !(c->drop_rx >= 0 && c->drop_rx < 1)) {
			snprintf(why, len,
				 "bad ZAP_DPDK_DROP_RX=\"%s\" (want a fraction in [0, 1))",
				 v);
			rc = -EINVAL;
		}
	}
	return rc;
}

/* Sizes, timeouts and switches. */
static int conf_tuning(const struct zap_host *h, struct dp_conf *c, char *why, size_t len)
{
	int rc;

	rc = env_u64(h, "ZAP_DPDK_MTU", 1500, 576, 9000, &c->mtu, why, len);
	rc = rc ? rc
		: env_u64(h, "ZAP_DPDK_MBUFS", 8191, 1023, 1u << 24, &c->mbufs, why, len);
	rc = rc ? rc
		: env_u64(h, "ZAP_DPDK_WINDOW", 256, 4, DP_WIN_MAX, &c->window, why, len);
	rc = rc ? rc
		: env_u64(h, "ZAP_DPDK_SPIN_US", 100, 0, 1000000, &c->spin_us, why, len);
	rc = rc ? rc
		: env_u64(h, "ZAP_DPDK_RTO_MIN_US", 1000, 20, 10000000, &c->rto_min_us,
			  why, len);
	rc = rc ? rc
		: env_u64(h, "ZAP_DPDK_PEER_TIMEOUT_MS", 5000, 10, 3600000,
			  &c->peer_timeout_ms, why, len);
	rc = rc ? rc
		: env_u64(h, "ZAP_DPDK_ARP_TIMEOUT_MS", 3000, 1, 600000,
			  &c->arp_timeout_ms, why, len);
	rc = rc ? rc
		: env_u64(h, "ZAP_DPDK_START_TIMEOUT_MS", 5000, 0, 600000,
			  &c->start_timeout_ms, why, len);
	rc = rc ? rc
		: env_u64(h, "ZAP_DPDK_LINGER_MS", 2000, 0, 600000, &c->linger_ms, why,
			  len);
	rc = rc ? rc
		: env_u64(h, "ZAP_DPDK_MAX_PEERS", 256, 1, 65536, &c->max_peers, why,
			  len);
	rc = rc ? rc : env_bool(h, "ZAP_DPDK_PIN", 1, &c->pin, why, len);
	return rc;
}

/*
 * What peers may make us hold of the mbuf pool as early (out-of-order)
 * frames: in all, a quarter of the pool unless set (at most half), and per
 * peer an eighth of that (at most DP_WIN_MAX - 1), so that frames arriving
 * in order, from any peer, always find buffers.
 */
static int conf_hold(const struct zap_host *h, struct dp_conf *c, char *why, size_t len)
{
	if (h->env_bytes("ZAP_DPDK_RX_HOLD_FRAMES", 0, 0, 1u << 24, &c->hold) ||
	    h->env_bytes("ZAP_DPDK_RX_HOLD_PEER_FRAMES", 0, 0, DP_WIN_MAX - 1,
			 &c->hold_peer)) {
		snprintf(why, len, "%s", h->last_error());
		return -EINVAL;
	}
	if (c->hold > c->mbufs / 2) {
		snprintf(why, len,
			 "bad ZAP_DPDK_RX_HOLD_FRAMES=%llu (want at most half of "
			 "ZAP_DPDK_MBUFS=%llu, so that frames in order find buffers)",
			 (unsigned long long)c->hold, (unsigned long long)c->mbufs);
		return -EINVAL;
	}
	if (!c->hold)
		c->hold = c->mbufs / 4;
	if (!c->hold_peer) {
		c->hold_peer = c->hold / 8;
		if (c->hold_peer > DP_WIN_MAX - 1)
			c->hold_peer = DP_WIN_MAX - 1;
		if (!c->hold_peer)
			c->hold_peer = 1;
	}
	return DP_CONF_OK;
}

int dp_conf_load(const struct zap_host *h, struct dp_conf *c, char *why, size_t len)
{
	int rc;

	memset(c, 0, sizeof(*c));
	rc = conf_identity(h, c, why, len);
	if (rc != DP_CONF_OK)
		return rc;
	rc = conf_addressing(h, c, why, len);
	rc = rc ? rc : conf_tuning(h, c, why, len);
	if (rc)
		return rc;
	/* The byte counts go through the host, which words its own reason. */
	if (h->env_bytes("ZAP_DPDK_REASM_BYTES", 256ull << 20, 1ull << 20, 1ull << 40,
			 &c->reasm_bytes) ||
	    h->env_bytes("ZAP_DPDK_RXQ_BYTES", 256ull << 20, 1ull << 20, 1ull << 40,
			 &c->rxq_bytes) ||
	    h->env_bytes("ZAP_DPDK_POOL_BYTES", 64ull << 20, 4096, 1ull << 40,
			 &c->pool_bytes)) {
		snprintf(why, len, "%s", h->last_error());
		return -EINVAL;
	}
	return conf_hold(h, c, why, len);
}

int dp_split_args(char *s, char **argv, int max)
{
	char *save = NULL;
	int n = 0;

	argv[n++] = (char *)"zap-dpdk";
	for (char *t = strtok_r(s, " \t\n", &save); t;
	     t = strtok_r(NULL, " \t\n", &save)) {
		if (n == max - 1)
			return -E2BIG;
		argv[n++] = t;
	}
	argv[n] = NULL;
	return n;
}

/* Whether a DPDK driver library matching vdev @name is installed. */
static bool vdev_driver_found(const char *name, char *dir_out, size_t len)
{
	DIR *dir = opendir(RTE_EAL_PMD_PATH);
	struct dirent *de;
	char want[160];
	bool found = false;

	snprintf(dir_out, len, "%s", RTE_EAL_PMD_PATH);
	if (!dir)
		return true; /* cannot tell: let the EAL judge at open */
	/* "eth_" is the old prefix many drivers still accept as an alias. */
	snprintf(want, sizeof(want), "%s%s", strncmp(name, "eth_", 4) ? "" : "net_",
		 strncmp(name, "eth_", 4) ? name : name + 4);
	while (!found && (de = readdir(dir))) {
		const char *f = de->d_name, *so;
		size_t n;

		if (strncmp(f, "librte_", 7) || !(so = strstr(f, ".so")))
			continue;
		n = (size_t)(so - f) - 7;
		/* The vdev bus matches a device to the driver whose name is a
		 * prefix of the device name. */
		found = n && !strncmp(want, f + 7, n);
	}
	closedir(dir);
	return found;
}

static unsigned long free_hugepages(void)
{
	DIR *dir = opendir("/sys/kernel/mm/hugepages");
	unsigned long total = 0;
	struct dirent *de;

	if (!dir)
		return 0;
	while ((de = readdir(dir))) {
		char path[512];
		unsigned long n = 0;
		FILE *f;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/sys/kernel/mm/hugepages/%s/free_hugepages",
			 de->d_name);
		f = fopen(path, "r");
		if (f && fscanf(f, "%lu", &n) == 1)
			total += n;
		if (f)
			fclose(f);
	}
	closedir(dir);
	return total;
}

/*
 * Probe may not start the EAL, so it checks what it can without it: every
 * --vdev names an installed driver, and hugepages exist unless --no-huge.
 * The EAL's own verdict comes at open.
 */
int dp_eal_args_check(const char *eal, char *why, size_t len)
{
	char buf[1024], *argv[DP_MAX_ARGS + 1], dir[256];
	bool no_huge = false;
	int argc;

	snprintf(buf, sizeof(buf), "%s", eal);
	argc = dp_split_args(buf, argv, DP_MAX_ARGS + 1);
	if (argc < 0) {
		snprintf(why, len, "ZAP_DPDK_EAL_ARGS has more than %d words",
			 DP_MAX_ARGS - 1);
		return -EINVAL;
	}
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *dev = NULL;
		char name[128];

		if (!strcmp(a, "--no-huge"))
			no_huge = true;
		if (!strncmp(a, "--vdev=", 7))
			dev = a + 7;
		else if (!strcmp(a, "--vdev") && i + 1 < argc)
			dev = argv[++i];
		if (!dev)
			continue;
		snprintf(name, sizeof(name), "%.*s", (int)strcspn(dev, ","), dev);
		if (!vdev_driver_found(name, dir, sizeof(dir))) {
			snprintf(why, len,
				 "ZAP_DPDK_EAL_ARGS: no DPDK driver for vdev \"%.64s\" in %.120s",
				 name, dir);
			return -ENOENT;
		}
	}
	if (!no_huge && !free_hugepages()) {
		snprintf(why, len,
			 "no free hugepages (see /sys/kernel/mm/hugepages) and "
			 "ZAP_DPDK_EAL_ARGS lacks --no-huge");
		return -ENOMEM;
	}
	return 0;
}
