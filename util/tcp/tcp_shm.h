/* SPDX-License-Identifier: MIT */
/*
 * The same-host upgrade's internals (WIRE.md, "Same host"): the shm path
 * of tcp_path.h. Included by tcp_shm*.c only (and tcp_codec.c, for the
 * ring's size in the protocol); the rest of the wire reaches a ring
 * through the path's ops alone. tcp_int.h's "Shared memory" paragraph
 * has the locking. tcp_shm_setup.c sets a pair up (policy, regions, the
 * dialer, the acceptor) and installs the path, tcp_shm_side.c has the
 * side channel's proofs and datagrams, tcp_shm.c the path's ops and its
 * sending (into a ring, wake-ups, ends), tcp_shm_rx.c its receive.
 */
#ifndef ZAP_TCP_SHM_H
#define ZAP_TCP_SHM_H

#include "shm_ring.h"

#include <pthread.h>
#include <stdatomic.h>

/* Shared-memory upgrade (tcp_shm.c): who may share memory with us, the
 * ring size per direction, how many connections of a wire may hold rings,
 * how long the dialer waits for the side channel's answer (how many side
 * channels may be half set up at once: TCP_SHM_PENDING, tcp_int.h), and
 * how many messages the leader takes from one ring per round (messages,
 * bytes). */
#define TCP_SHM_ENV "ZAP_SHM"
#define TCP_SHM_LOG2 21u /* 2 MiB */
#define TCP_SHM_MAX 16u
#define TCP_SHM_HS_MS 2000u
#define TCP_SHM_ACCEPT_BATCH 64u /* side channels accepted per round at most */
#define TCP_SHM_BATCH 64
/* A ring of ours that a peer may still be reading when its connection
 * ends stays for at most ZAP_TCP_STALL_MS ("lingers"), looked at this
 * often; then its memory goes back to the system (tcp_shm.c, "Ends"). */
#define TCP_SHM_LINGER_TICK_MS 10u
/* ... or this many bytes: a round that delivers dozens of large messages
 * before the application takes one outgrows the default allocator's cache
 * of released blocks (plugins/default/default.c), and every block then
 * comes from the kernel a page fault at a time (bench/MEASUREMENTS.md,
 * "shm-batch-bytes"). */
#define TCP_SHM_BATCH_BYTES (256u << 10)
/* ... or this many bytes of the ring, whole messages or chunks of one: a
 * producer faster than us keeps the ring from ever reading empty, and a
 * round then went on to the end of a 64 MiB message before it delivered
 * a small one taken between two of its chunks, 8 ms later
 * (bench/MEASUREMENTS.md, "ring-round-bytes"). */
#define TCP_SHM_ROUND_BYTES (1u << 20)
/* Version 3: a large message's parts leave this much of a ring free, room
 * for the small messages of other senders meanwhile (3,000 of 64 B): an
 * eighth of the ring, 256 KiB: small messages waited no longer behind
 * large ones with more kept free, and streaming was fastest with this
 * (bench/MEASUREMENTS.md, "shm-keep"). */
#define TCP_SHM_KEEP ((1u << TCP_SHM_LOG2) / 8)
/* ... as records of at most this many bytes, between which the sender may
 * give its core to a waiting thread (tcp_shm.c, part_records();
 * bench/MEASUREMENTS.md, "shm-part-records"). */
#define TCP_SHM_CHUNK (32u << 10)
/* Version 4: each region holds a second ring after the first, the express
 * ring of 2^TCP_SHM_XLOG2 bytes, for messages of at most TCP_SHM_XMAX
 * bytes that a sender writes itself, whoever holds the first ring's tx
 * side: a vote behind a block waited for the block's sender to be given
 * the core and write the vote after its current record (median 16-19 us
 * of the round trip's 20-23 behind 64 MiB, with the two threads on one
 * core; bench/MEASUREMENTS.md, "shm-express"). Each express record starts
 * with a fence (WIRE.md, "The express ring"). */
#define TCP_SHM_XLOG2 18u /* 256 KiB */
#define TCP_SHM_XMAX 4096u
enum { TW_SHM_OFF, TW_SHM_USER, TW_SHM_GROUP };
struct tcp_shm {
	struct tcp_path path; /* first: c->path points here once installed */
	struct tcp_wire *w;
	int sock; /* side channel (SOCK_SEQPACKET): wake-ups, liveness */
	void *tx_map, *rx_map;
	size_t map_len;
	atomic_uint *count; /* the wire's nshm */
	struct zshm_tx tx;  /* the tx owner's */
	struct zshm_rx rx;  /* the leader's */
	/* Version 4 (x_on): the express rings. xtx is xmu's, a leaf lock
	 * taken without mu by a sender counted in c->x_users; bulk_done is
	 * tx's position after the last message completed there (the tx
	 * owner stores it, express senders load it: the fence). */
	bool x_on;
	struct zshm_tx xtx;
	struct zshm_rx xrx;
	pthread_mutex_t xmu;
	_Atomic uint64_t bulk_done;
	bool tx_ready;    /* mu: the peer maps our ring: sends may switch */
	bool tx_on;       /* mu: TCP_T_SHM written, frames go to the ring */
	bool side_gone;   /* mu: the side channel ended */
	uint64_t live_ms; /* tx owner: last look at the side channel */
	bool rx_on;       /* leader: TCP_T_SHM read, frames come from the ring */
	bool rx_gone;     /* leader: the peer is gone: drain the ring, then EOF */
	/* Lingering (shm_end(), the end op): its connection ended, our ring not */
	struct tcp_shm *linger_next;
	uint64_t linger_until;
};
/* The shm path's ops (tcp_shm.c), and the pair behind a path of them. */
extern const struct tcp_path_ops tw_shm_ops;
static inline struct tcp_shm *tw_shm_path(const struct tcp_path *p)
{
	return (struct tcp_shm *)p;
}
/* @c's pair, NULL while it has none. */
static inline struct tcp_shm *tw_shm_of(const struct tcp_conn *c)
{
	struct tcp_path *p = atomic_load(&((struct tcp_conn *)c)->path);
	return p->ops == &tw_shm_ops ? tw_shm_path(p) : NULL;
}
void tw_shm_free(struct tcp_shm *s);
size_t tw_shm_region_len(unsigned ver);
bool tw_shm_side(struct tcp_wire *w, struct tcp_conn *c);
void tw_shm_wake(const struct tcp_shm *s);

/* tcp_shm_rx.c: the path's receive ops */
int tw_shm_rx(struct tcp_wire *w, struct tcp_conn *c, struct tcp_path *p,
	      struct tcp_rx_msg ***tail, uint64_t now, bool readable);
bool tw_shm_rx_always(const struct tcp_path *p);
bool tw_shm_rx_pending(struct tcp_path *p, bool sleeping);
bool tw_shm_rx_switch(struct tcp_path *p, bool commit);

/* Shared between the upgrade's files (mu: see each file) */
void tw_shm_region_drop(void *map, size_t len, bool release);
void tw_shm_pair_free(struct tcp_shm *s, bool release);
bool tw_shm_tx_finished(const struct tcp_shm *s);
void tw_shm_linger_take(struct tcp_wire *w);
void tw_shm_linger_sweep(struct tcp_wire *w, uint64_t *next_ms);
bool tw_shm_proof(uint32_t magic, const unsigned char *key, size_t key_len, uint64_t did,
		  uint64_t aid, const unsigned char *cd, const unsigned char *ca,
		  const unsigned char *bind, size_t bind_len, unsigned char out[32]);
bool tw_shm_fresh(unsigned char out[32]);
int tw_shm_msg_send(int fd, uint32_t magic, const unsigned char *a,
		    const unsigned char *b, int pass_fd);
int tw_shm_msg_recv(int fd, uint32_t magic, struct tcp_shm_msg *m, int *got, char *why,
		    size_t whylen);
int tw_shm_msg_wait(struct tcp_wire *w, int fd, uint32_t magic, struct tcp_shm_msg *m,
		    int *got, uint64_t deadline_ms, struct zap_ctx *ctx, char *why,
		    size_t whylen);

#endif /* ZAP_TCP_SHM_H */
