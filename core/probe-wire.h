/* SPDX-License-Identifier: MIT */
/*
 * What the probe helper (core/zap-probe.c) and libzap (core/probe-out.c)
 * say to each other: one process per candidate, started with
 *
 *   zap-probe PROTO NAME PATH LEVEL [secure]
 *
 * with the plugin file (opened and checked by libzap) on descriptor
 * ZAP_PROBE_FILE_FD and the write end of a pipe on ZAP_PROBE_PIPE_FD. The
 * helper writes zero or more LOG records (the plugin's log lines, at LEVEL
 * and above) and then one RESULT record, each a whole struct zap_probe_rec
 * in one write (smaller than PIPE_BUF, so never torn), and exits 0.
 *
 * Everything libzap reads from the pipe is hostile input: the helper runs
 * plugin code, which may scribble on any of it. libzap checks the magic,
 * protocol and type of every record, never trusts a string to be
 * terminated, maps every number to its range, limits the records it reads,
 * and derives crash and timeout outcomes from the process, not the pipe.
 */
#ifndef ZAP_PROBE_WIRE_H
#define ZAP_PROBE_WIRE_H

#include <stdint.h>

#include <zap/zap-plugin.h>

#define ZAP_PROBE_MAGIC 0x7a617031u /* "zap1" */
/* Bump when struct zap_probe_rec or the arguments change. */
#define ZAP_PROBE_PROTO 1
#define ZAP_PROBE_FILE_FD 3
#define ZAP_PROBE_PIPE_FD 4
/* The helper's own file, which libzap checked and executes as
 * /proc/self/fd/5 (open across the exec, so that a script helper's
 * interpreter can open it too); the helper closes it and every other
 * descriptor above ZAP_PROBE_PIPE_FD first thing. */
#define ZAP_PROBE_EXEC_FD 5
/* The helper exits with this when PROTO is not its own. */
#define ZAP_PROBE_EXIT_PROTO 3
/* Log records libzap relays per candidate; more are counted, not shown. */
#define ZAP_PROBE_MAX_LOGS 64

enum zap_probe_rec_type {
	ZAP_PROBE_REC_LOG = 1,
	ZAP_PROBE_REC_RESULT = 2,
};

struct zap_probe_rec {
	uint32_t magic;       /* ZAP_PROBE_MAGIC */
	uint32_t proto;       /* ZAP_PROBE_PROTO */
	uint32_t type;        /* enum zap_probe_rec_type */
	int32_t state;        /* RESULT: enum zap_plugin_state */
	int32_t rank;         /* RESULT */
	int32_t level;        /* LOG: enum zap_log_level */
	uint8_t gpu_resident; /* RESULT caps, 0 or 1 */
	uint8_t zero_copy;
	uint8_t device_buffers;
	uint8_t pad[5];
	double min_latency_us;
	uint64_t max_msg_size;
	char domain[32]; /* LOG */
	char version[ZAP_VERSION_MAX];
	char reason[256]; /* RESULT */
	char text[1024];  /* RESULT: probe detail; LOG: the line */
};

#endif
