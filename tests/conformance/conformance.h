/* SPDX-License-Identifier: MIT */
/*
 * What the conformance suite's checks (checks.c) and its runner
 * (conformance.c) share: the instance being run, the two endpoints a check
 * gets, and the helpers the checks are written with. Single-threaded
 * state, set before the first check runs.
 */
#ifndef ZAP_CONFORMANCE_H
#define ZAP_CONFORMANCE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "zap-test.h"

/* The maximum message size every instance runs with (ZAP_MAX_MSG_BYTES):
 * the default 64 MiB makes the sizes check slow under ASan on a loaded
 * machine, and nothing in the checks depends on the value. */
#define MAX_MSG (8u << 20)
#define MAX_MSG_ENV "8388608"
/* Hang limit of anything that must finish (scaled by zt_timeout_ms()). */
#define HANG_MS 60000u

/** One transport set-up the checks run against (conformance.c's table). */
struct inst {
	const char *name;   /* argv[1] */
	const char *pref;   /* zap_pick() preference */
	const char *plugin; /* a plugin that must be loaded (skip rule), or NULL */
	const char *needs;  /* what it needs, for the skip line */
	const char *listen; /* "%s%u": a socket path in a fresh directory, or NULL */
	const char *path;   /* what zap_peer_path() must say, NULL: no paths */
	bool send_blocks;   /* a send to a peer that does not read blocks */
	bool two_procs;     /* one endpoint per process: B is an echo process */
	const char *env[6]; /* NAME=value, set before the first pick */
};

extern const struct inst *in;

/*
 * The endpoints of one check. A is always in this process. B is too
 * (@b), or, for a transport with one endpoint per process, B is a peer
 * process that sends every message back to its sender (@b NULL). @rx is
 * where a message A sends to @addr_b ends up: B, or A itself by the echo.
 * A check that closes an endpoint sets it NULL.
 */
struct pair {
	struct zap_transport *a, *b, *rx;
	char addr_a[ZAP_PEER_MAX], addr_b[ZAP_PEER_MAX];
};

/* Inside a check (a function returning int): unless @cond, say why on
 * stderr (a TAP comment) and fail the check. */
#define CK(cond, ...)                                                          \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "# %s:%d: %s: ", __FILE__, __LINE__,   \
				#cond);                                        \
			fprintf(stderr, __VA_ARGS__);                          \
			fprintf(stderr, " (last error: %s)\n", zap_last_error()); \
			return 1;                                              \
		}                                                              \
	} while (0)

struct zap_ctx *ctx_in(unsigned ms);
int recv_one(struct zap_transport *t, struct zap_msg **m);
int send_one(struct zap_transport *t, const char *peer, const void *buf, size_t len);
int msg_is(struct zap_msg *m, size_t len, uint64_t seed);
int path_ok(struct zap_transport *t, const char *peer);

/*
 * A thread that sends @n messages to @peer, message @i made by @make into
 * @buf: the receiving side runs in the caller, since a transport may move
 * bytes only while its peer receives (TCP's send blocks once the socket
 * buffers hold a few MB, whoever reads them).
 */
struct sender {
	struct zap_transport *t;
	const char *peer;
	unsigned n;
	size_t (*make)(unsigned i, unsigned char *buf, const void *arg);
	const void *arg;
	unsigned char *buf;
	unsigned sent;
	int rc;
	pthread_t th;
};

int sender_start(struct sender *s);
int sender_join(struct sender *s);

/* The checks (checks.c): 0 passed, else failed (the reason on stderr). */
int check_sizes(struct pair *p);
int check_order(struct pair *p);
int check_replyable(struct pair *p);
int check_deadline(struct pair *p);
int check_oversize(struct pair *p);
int check_shutdown(struct pair *p);
int check_close_queued(struct pair *p);

#endif
