/* SPDX-License-Identifier: MIT */
/*
 * What the probe helper (core/zap-probe.c) and libzap (core/probe-out.c)
 * say to each other. One helper process per scan (per batch of
 * ZAP_PROBE_MAX_BATCH candidates), started with
 *
 *   zap-probe PROTO LEVEL MODE NAME1 PATH1 [NAME2 PATH2 ...]
 *
 * (MODE "secure" or "-") with the write end of the report pipe on
 * ZAP_PROBE_REPORT_FD and candidate i's plugin file, opened and checked by
 * libzap, on ZAP_PROBE_FIRST_FILE_FD + i. The helper runs no plugin code
 * itself: it forks one child per candidate, all at once, and each child
 * holds only its own plugin file (on ZAP_PROBE_FILE_FD) and its own pipe
 * to the helper (on ZAP_PROBE_PIPE_FD) before it loads and probes that
 * one plugin. So a crash or a hang costs one candidate its row, as with a
 * process per candidate, while the helper's exec and dynamic linking,
 * the costly part of starting a process, are paid once per scan.
 *
 * A child writes zero or more LOG records and then one RESULT record, each
 * a whole struct zap_probe_rec in one write (smaller than PIPE_BUF, so
 * never torn), and exits 0. The helper forwards every whole record to
 * libzap with @index set to the candidate's number (whatever the child
 * wrote there, so no plugin can speak for another), a TORN record when a
 * child's pipe ended inside a record, and, once the child is reaped, one
 * STATUS record with its wait status. It exits 0 when every child has
 * ended.
 *
 * Everything libzap reads from the pipe but @index, @type STATUS and
 * @status is hostile input: the children run plugin code, which may
 * scribble on any of it. libzap checks the magic, protocol and type of
 * every record, never trusts a string to be terminated, maps every number
 * to its range, limits the records it reads, and derives crash outcomes
 * from the STATUS the helper (which runs no plugin code) sends, and a
 * timeout from its own clock.
 */
#ifndef ZAP_PROBE_WIRE_H
#define ZAP_PROBE_WIRE_H

#include <stdint.h>

#include <zap/zap-plugin.h>

#define ZAP_PROBE_MAGIC 0x7a617031u /* "zap1" */
/* Bump when struct zap_probe_rec, the descriptors or the arguments change. */
#define ZAP_PROBE_PROTO 2
/* In the helper: the report pipe to libzap, the helper's own file (which
 * libzap checked and executes as /proc/self/fd/4, open across the exec so
 * that a script helper's interpreter can open it too; the helper closes it
 * first thing), and the plugin files from 5 on. */
#define ZAP_PROBE_REPORT_FD 3
#define ZAP_PROBE_EXEC_FD 4
#define ZAP_PROBE_FIRST_FILE_FD 5
/* In a probing child: its plugin file and its pipe to the helper; every
 * other descriptor is closed before plugin code runs. */
#define ZAP_PROBE_FILE_FD 3
#define ZAP_PROBE_PIPE_FD 4
/* Candidates one helper probes (each holds a descriptor there). */
#define ZAP_PROBE_MAX_BATCH 32
/* The helper exits with this when PROTO is not its own. */
#define ZAP_PROBE_EXIT_PROTO 3
/* Log records libzap relays per candidate; more are counted, not shown. */
#define ZAP_PROBE_MAX_LOGS 64

enum zap_probe_rec_type {
	ZAP_PROBE_REC_LOG = 1,    /* from the child */
	ZAP_PROBE_REC_RESULT = 2, /* from the child */
	ZAP_PROBE_REC_STATUS = 3, /* from the helper: @status is the child's */
	ZAP_PROBE_REC_TORN = 4,   /* from the helper: a partial record at EOF */
};

struct zap_probe_rec {
	uint32_t magic;       /* ZAP_PROBE_MAGIC */
	uint32_t proto;       /* ZAP_PROBE_PROTO */
	uint32_t type;        /* enum zap_probe_rec_type */
	uint32_t index;       /* the candidate; set by the helper */
	int32_t state;        /* RESULT: enum zap_plugin_state */
	int32_t rank;         /* RESULT */
	int32_t level;        /* LOG: enum zap_log_level */
	int32_t status;       /* STATUS: waitpid()'s status of the child */
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
