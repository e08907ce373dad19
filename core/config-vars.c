/* SPDX-License-Identifier: MIT */
/*
 * The table of every ZAP_* variable libzap, its plugins and util/ read
 * (core/zap-config.h). docs/environment.md says the same in prose; the
 * env-docs test fails when the two disagree. Plugin-owned variables are
 * here too, not registered by the plugin at load time: probing runs in a
 * helper process and `zap-info --env` must list a plugin's variables
 * without loading it, so the list has to live where every reader is.
 *
 * Constant data, no locking.
 */
#include "zap-config.h"
#include "zap-private.h"

#include <zap/zap.h>

#define U32 4294967295ull
#define KIB(n) ((uint64_t)(n) << 10)
#define MIB(n) ((uint64_t)(n) << 20)
#define GIB(n) ((uint64_t)(n) << 30)
#define TIB(n) ((uint64_t)(n) << 40)

/* Numbers: name, type, setuid policy, owner, default, min, max, default
 * as documented, doc line. */
#define NUM(n, t, s, o, d, lo, hi, dt, line)                                       \
	{                                                                          \
		.name = n, .type = ZAP_CFG_##t, .secure = ZAP_CFG_##s, .owner = o, \
		.def = d, .min = lo, .max = hi, .def_text = dt, .doc = line        \
	}
/* Strings and lists: at most @len - 1 characters. */
#define STR(n, t, s, o, len, dt, line)                                             \
	{                                                                          \
		.name = n, .type = ZAP_CFG_##t, .secure = ZAP_CFG_##s, .owner = o, \
		.max = len, .def_text = dt, .doc = line                            \
	}
#define ENUM(n, s, o, d, ch, vals, dt, line)                                         \
	{                                                                            \
		.name = n, .type = ZAP_CFG_ENUM, .secure = ZAP_CFG_##s, .owner = o,  \
		.def = d, .choices = ch, .values = vals, .def_text = dt, .doc = line \
	}

static const char *const log_levels[] = { "error", "warn", "info", "debug", NULL };
static const char *const cc_modes[] = { "auto", "keep", NULL };
/* ZAP_SHM: user, group, off, with 1 and 0 as old spellings of user, off. */
static const char *const shm_modes[] = { "user", "group", "off", "1", "0", NULL };
static const unsigned char shm_values[] = { 0, 1, 2, 0, 2 };

const struct zap_cfg_var zap__cfg_vars[] = {
	/* core */
	STR("ZAP_TRANSPORT", STRING, HONOUR, "core", ZAP_PREF_MAX_LEN, "empty (auto)",
	    "which transport zap_pick(NULL, ...) opens (the preference grammar)"),
	NUM("ZAP_TRANSPORT_QUIET", BOOL, HONOUR, "core", 0, 0, 1, "false",
	    "true silences the first-pick INFO line"),
	STR("ZAP_PLUGIN_PATH", LIST, IGNORE, "core", 65536, "unset",
	    "plugin directories (:-separated) searched before the built-in one"),
	STR("ZAP_PLUGIN_DIR", STRING, IGNORE, "core", 4096,
	    "the built-in plugin directory",
	    "a directory scanned in place of the built-in one (empty: none)"),
	NUM("ZAP_PROBE_INPROCESS", BOOL, IGNORE, "core", 0, 0, 1, "false",
	    "true: probe plugins in the application, not in helper processes"),
	NUM("ZAP_PROBE_TIMEOUT_MS", MS, HONOUR, "core", 0, 0, U32, "0 (5000)",
	    "how long an out-of-process probe may take"),
	STR("ZAP_PROBE_HELPER", STRING, IGNORE, "core", 4096, "the installed zap-probe",
	    "the probe helper program to start instead"),
	STR("ZAP_PROBE_CACHE", STRING, IGNORE, "core", 4096, "$XDG_RUNTIME_DIR/libzap",
	    "where out-of-process probe results are kept for 60 s; off: nowhere"),
	ENUM("ZAP_LOG_LEVEL", HONOUR, "core", ZAP_LOG_WARN, log_levels, NULL, "warn",
	     "least severe level logged"),
	STR("ZAP_LISTEN", STRING, HONOUR, "core", ZAP_PEER_MAX, "0.0.0.0:0",
	    "local address of the socket transports"),
	NUM("ZAP_MAX_MSG_BYTES", SIZE, HONOUR, "core", ZAP_DEFAULT_MAX_MSG_BYTES, 1,
	    ZAP_MAX_MSG_LIMIT, "64M", "largest message sent or accepted"),
	NUM("ZAP_SEND_TIMEOUT_MS", MS, HONOUR, "core", 0, 0, U32, "0 (no limit)",
	    "how long a zap_send() given no ctx may block"),

	/* util/tcp: the TCP wire of default and uma. Ignored under AT_SECURE
	 * as every plugin's variable (DESIGN section 8). */
	NUM("ZAP_UNIX_SOCKET_MODE", OCTAL, IGNORE, "tcp", 0600, 0, 0777, "0600",
	    "permission bits of a unix:/path listen socket file"),
	NUM("ZAP_TCP_SPIN_US", US, IGNORE, "tcp", 0, 0, 1000000, "unset: learned",
	    "microseconds a waiting thread busy-polls before it sleeps"),
	ENUM("ZAP_TCP_SAME_HOST_CC", IGNORE, "tcp", 0, cc_modes, NULL, "auto",
	     "auto: same-host connections paced by bbr switch to reno; keep: never"),
	NUM("ZAP_TCP_HANDSHAKE_MS", MS, IGNORE, "tcp", 10000, 10, 3600000, "10000",
	    "deadline of a connection's HELLO (and TLS) handshake"),
	NUM("ZAP_TCP_MAX_PENDING", COUNT, IGNORE, "tcp", 4096, 1, 1048576, "4096",
	    "connections in the handshake at once"),
	NUM("ZAP_TCP_PARTIAL_BYTES", SIZE, IGNORE, "tcp", MIB(64), KIB(64), TIB(1), "64M",
	    "memory all partly received messages of an endpoint may hold"),
	NUM("ZAP_TCP_STALL_MS", MS, IGNORE, "tcp", 30000, 10, 3600000, "30000",
	    "a connection stalled in the middle of a frame this long is closed"),
	NUM("ZAP_TCP_MIN_RATE", SIZE, IGNORE, "tcp", MIB(1), 0, GIB(16), "1M",
	    "bytes per second a peer keeps up while a message of it is partly received"),
	NUM("ZAP_TCP_IDLE_MS", MS, IGNORE, "tcp", 300000, 10, 86400000, "300000",
	    "a connection idle this long is closed"),
	ENUM("ZAP_SHM", IGNORE, "tcp", 0, shm_modes, shm_values, "user",
	     "same-host upgrade to shared memory: user, group or off"),
	NUM("ZAP_TCP_RX_QUEUE_BYTES", SIZE, IGNORE, "tcp", MIB(128), KIB(64), TIB(1),
	    "128M", "received bytes not yet taken by zap_recv() before reading stops"),

	/* TLS: refused under AT_SECURE, where the caller could point the
	 * program at files of its choosing; such programs pass zap_attr. */
	STR("ZAP_TLS_CERT", STRING, REFUSE, "tls", 4096, "unset: plaintext",
	    "PEM certificate (chain) of this endpoint"),
	STR("ZAP_TLS_KEY", STRING, REFUSE, "tls", 4096, "none",
	    "PEM private key of the certificate (mode 600)"),
	STR("ZAP_TLS_CA", STRING, REFUSE, "tls", 4096, "unset",
	    "PEM CA bundle: peers whose chain verifies are trusted"),
	STR("ZAP_TLS_PEERS", STRING, REFUSE, "tls", 4096, "unset",
	    "pin file of trusted peer keys, one sha256:<hex> per line"),

	/* util/cuda: uma, gpudirect, dpdk */
	NUM("ZAP_CUDA_DEVICE", COUNT, IGNORE, "cuda", 0, 0, 1023,
	    "0 (gpudirect: nearest)", "CUDA device ordinal"),

	/* uma */
	NUM("ZAP_UMA_POOL_BYTES", SIZE, IGNORE, "uma", GIB(4), 4096, 1ull << 50, "4G",
	    "cap of the CUDA managed-memory pool"),

	/* gpudirect */
	STR("ZAP_GPUDIRECT_DEVICE", STRING, IGNORE, "gpudirect", 4096,
	    "first active port", "the RDMA device and port, name or name:port"),
	NUM("ZAP_GPUDIRECT_CHUNK_BYTES", SIZE, IGNORE, "gpudirect", MIB(1), 4096, MIB(64),
	    "1M", "receive slot size (a power of two)"),
	NUM("ZAP_GPUDIRECT_RECV_SLOTS", COUNT, IGNORE, "gpudirect", 16, 1, 4096, "16",
	    "receive slots per peer"),
	NUM("ZAP_GPUDIRECT_POOL_BYTES", SIZE, IGNORE, "gpudirect", GIB(1), MIB(1),
	    1ull << 50, "1G", "cap of the GPU-memory pool"),
	NUM("ZAP_GPUDIRECT_PEER_PIN_BYTES", SIZE, IGNORE, "gpudirect", MIB(64), MIB(1),
	    TIB(1), "64M", "memory one pair may pin"),
	NUM("ZAP_GPUDIRECT_PIN_BYTES", SIZE, IGNORE, "gpudirect", GIB(4), MIB(1),
	    1ull << 50, "4G", "memory all pairs together may pin"),
	NUM("ZAP_GPUDIRECT_HANDSHAKES", COUNT, IGNORE, "gpudirect", 128, 1, 4096, "128",
	    "bootstrap handshakes accepted at once"),
	NUM("ZAP_GPUDIRECT_HANDSHAKE_MS", MS, IGNORE, "gpudirect", 10000, 10, 600000,
	    "10000", "deadline of each bootstrap handshake"),

	/* dpdk */
	STR("ZAP_DPDK_EAL_ARGS", LIST, IGNORE, "dpdk", 65536, "unset: not configured",
	    "arguments for rte_eal_init(), split on blanks"),
	STR("ZAP_DPDK_IP", STRING, IGNORE, "dpdk", 4096, "required",
	    "the port's local IPv4 address"),
	NUM("ZAP_DPDK_PORT", COUNT, IGNORE, "dpdk", 0, 0, 1023, "0", "DPDK port id"),
	NUM("ZAP_DPDK_UDP_PORT", COUNT, IGNORE, "dpdk", 0, 1, 65535,
	    "the listen port, else 47000", "local UDP port"),
	STR("ZAP_DPDK_NEIGHBORS", LIST, IGNORE, "dpdk", 65536, "none",
	    "static neighbours, ip=aa:bb:cc:dd:ee:ff separated by , or blanks"),
	STR("ZAP_DPDK_DROP_RX", STRING, IGNORE, "dpdk", 4096, "0",
	    "fault injection: share of received frames dropped, in [0, 1)"),
	NUM("ZAP_DPDK_MTU", COUNT, IGNORE, "dpdk", 1500, 576, 9000, "1500",
	    "IPv4 MTU of the frames sent"),
	NUM("ZAP_DPDK_MBUFS", COUNT, IGNORE, "dpdk", 8191, 1023, 1u << 24, "8191",
	    "mbufs in the port's pool"),
	NUM("ZAP_DPDK_WINDOW", COUNT, IGNORE, "dpdk", 256, 4, 256, "256",
	    "unacknowledged frames per peer"),
	NUM("ZAP_DPDK_SPIN_US", US, IGNORE, "dpdk", 100, 0, 1000000, "100",
	    "how long a waiting caller busy-polls the port"),
	NUM("ZAP_DPDK_RTO_MIN_US", US, IGNORE, "dpdk", 1000, 20, 10000000, "1000",
	    "smallest retransmission timeout"),
	NUM("ZAP_DPDK_PEER_TIMEOUT_MS", MS, IGNORE, "dpdk", 5000, 10, 3600000, "5000",
	    "a peer that acknowledges nothing this long is given up"),
	NUM("ZAP_DPDK_ARP_TIMEOUT_MS", MS, IGNORE, "dpdk", 3000, 1, 600000, "3000",
	    "how long a send retries ARP"),
	NUM("ZAP_DPDK_START_TIMEOUT_MS", MS, IGNORE, "dpdk", 5000, 0, 600000, "5000",
	    "how long open retries starting the port"),
	NUM("ZAP_DPDK_LINGER_MS", MS, IGNORE, "dpdk", 2000, 0, 600000, "2000",
	    "how long zap_close() waits for acknowledgements"),
	NUM("ZAP_DPDK_MAX_PEERS", COUNT, IGNORE, "dpdk", 256, 1, 65536, "256",
	    "peers tracked at once"),
	NUM("ZAP_DPDK_RX_HOLD_FRAMES", COUNT, IGNORE, "dpdk", 0, 0, 1u << 24,
	    "a quarter of ZAP_DPDK_MBUFS", "mbufs all peers may hold as early frames"),
	NUM("ZAP_DPDK_RX_HOLD_PEER_FRAMES", COUNT, IGNORE, "dpdk", 0, 0, 255,
	    "an eighth of ZAP_DPDK_RX_HOLD_FRAMES",
	    "mbufs one peer may hold as early frames"),
	NUM("ZAP_DPDK_PIN", BOOL, IGNORE, "dpdk", 1, 0, 1, "true",
	    "run the service thread on the EAL's main lcore"),
	NUM("ZAP_DPDK_REASM_BYTES", SIZE, IGNORE, "dpdk", MIB(256), MIB(1), TIB(1),
	    "256M", "partial messages held, all peers together"),
	NUM("ZAP_DPDK_RXQ_BYTES", SIZE, IGNORE, "dpdk", MIB(256), MIB(1), TIB(1), "256M",
	    "received messages waiting for zap_recv()"),
	NUM("ZAP_DPDK_POOL_BYTES", SIZE, IGNORE, "dpdk", MIB(64), 4096, TIB(1), "64M",
	    "cap of the zap_buffer_alloc() pool in EAL memory"),
};

const size_t zap__cfg_nvars = sizeof(zap__cfg_vars) / sizeof(zap__cfg_vars[0]);
