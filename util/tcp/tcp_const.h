/* SPDX-License-Identifier: MIT */
/*
 * The TCP wire's constants, included by tcp_int.h: the protocol's
 * (WIRE.md: magic, versions, frame types and sizes) and the limits and
 * settings of an endpoint (the environment variables that tune them, and
 * their defaults). The same-host upgrade's are in tcp_shm.h.
 */
#ifndef ZAP_TCP_CONST_H
#define ZAP_TCP_CONST_H

#define TCP_MAGIC 0x5a415057u /* "ZAPW" */
/* 2: the HELLO announces the sender's maximum message size (WIRE.md).
 * 3: messages above TCP_SOLO_MAX go in parts, between which other
 * messages may pass (WIRE.md, "Large messages").
 * 4: same-host regions hold an express ring beside the ring (WIRE.md,
 * "The express ring"). A dialer offers 4 and falls back a version at a
 * time to 2; an acceptor answers with the version offered. */
#define TCP_VERSION 4
#define TCP_VERSION_MIN 2
#define TCP_HDR 16
#define TCP_T_HELLO 1
#define TCP_T_DATA 2
/* A zero-length frame: every later frame of this direction goes through
 * the shared-memory ring (tcp_shm.c, WIRE.md "Same host"). */
#define TCP_T_SHM 3
/* Version 3: the first part of a large message (its total length, u64,
 * then bytes), and the parts after it (WIRE.md, "Large messages"). */
#define TCP_T_BEGIN 4
#define TCP_T_MORE 5
/* Version 3: the largest message sent whole (one DATA frame, one ring
 * record); larger ones go in parts of at most TCP_PART bytes, one
 * message's parts at a time per connection and direction, and the
 * connection (or ring) is free for other senders' messages between two
 * parts. The ring keeps TCP_SHM_KEEP bytes free for them. */
#define TCP_SOLO_MAX (32u << 10)
#define TCP_PART (256u << 10)
/* ... or of this many, one a system call, while a spinning leader of
 * this process gave its core away (tw_core_wanted): the sender yields
 * after each, so a vote's thread sharing its core waits behind 32 KiB
 * of copying, not 1 MiB (bench/MEASUREMENTS.md, "tcp-short-parts"). */
#define TCP_PART_SHORT (32u << 10)
/* A large message's sender lets a waiting thread run after this long of
 * sending parts without a break (tcp_send.c, big_yield()). */
#define TCP_BIG_RUN_NS 200000u
/* ... of which a sender with nobody in line behind it writes this many
 * with one sendmsg(): a system call and a lock round per part cost 1 MiB
 * streaming 15% here. */
#define TCP_BIG_BATCH 4
/* HELLO payload: instance id (8), connection nonce (8), largest message
 * accepted (8), address text. */
#define TCP_HELLO_FIXED 24
#define TCP_HELLO_MAX (TCP_HELLO_FIXED + ZAP_PEER_MAX - 1)
#define TCP_RBUF (64 * 1024)
/* Limits (WIRE.md) are read at open through libzap's configuration
 * registry, which holds their defaults and ranges (core/config-vars.c). */
#define TCP_HS_ENV "ZAP_TCP_HANDSHAKE_MS"
#define TCP_PENDING_ENV "ZAP_TCP_MAX_PENDING"
#define TCP_SPIN_ENV "ZAP_TCP_SPIN_US"
/* Congestion control on connections within this host (tw_tune_same_host()). */
#define TCP_SAME_HOST_CC_ENV "ZAP_TCP_SAME_HOST_CC"
/* Memory limits (WIRE.md, "Limits against floods"). */
#define TCP_PARTIAL_ENV "ZAP_TCP_PARTIAL_BYTES"
#define TCP_RXQ_ENV "ZAP_TCP_RX_QUEUE_BYTES"
#define TCP_STALL_ENV "ZAP_TCP_STALL_MS"
#define TCP_MIN_RATE_ENV "ZAP_TCP_MIN_RATE"
/* Descriptors (WIRE.md, "Limits against floods"). */
#define TCP_IDLE_ENV "ZAP_TCP_IDLE_MS"
#define TCP_FD_HEADROOM 64 /* descriptors left to the application */
#define TCP_EVICT_MIN_IDLE_MS 250
/* Who listens at a route's address is proven again by a dial (send_claim())
 * at most this often: see struct tcp_route. */
#define TCP_VERIFY_MS 1000
/* A large message's first allocation when the allocator can grow it. */
#define TCP_GROW_FIRST (256u << 10)
/* Coalescing (tcp_txq.c): frames up to TCP_TXQ_FRAME_MAX queue behind a
 * busy tx side, at most TCP_TXQ_MAX per connection; an owner writes its
 * own frame and up to TCP_TXQ_BATCH queued ones with one sendmsg(), and
 * hands the tx side to the next queued sender at most TCP_TXQ_CHAIN times
 * in a row before everyone claims it afresh (a large sender, which does
 * not queue, gets its turn). */
#define TCP_TXQ_FRAME_MAX (64u << 10)
#define TCP_TXQ_MAX 256u
#define TCP_TXQ_BATCH 32u
#define TCP_TXQ_CHAIN 64u
/* A burst (zap_send_burst()) writes at most this many messages per call,
 * so that other senders queued on the connection get their turn. */
#define TCP_BURST_MAX (16u * (TCP_TXQ_BATCH + 1))
/* Unix-domain listen sockets (tcp_unix.c): the socket file's mode. */
#define TCP_UNIX_MODE_ENV "ZAP_UNIX_SOCKET_MODE"
#define TCP_UNIX_MODE 0600u
/* Readiness (tcp_progress.c): a hot connection with nothing to do for
 * this long goes back to epoll; the leader takes at most this many cold
 * connections from epoll per round (the rest stay ready for the next). */
#define TCP_HOT_IDLE_MS 200u
#define TCP_EPOLL_BATCH 64u
/* The accept thread's yield between two handshake steps: one that took
 * this long ran a busy thread, and then none for a while
 * (tcp_handshake.c, let_others_run()). */
#define TCP_HS_YIELD_LONG_NS 500000u
#define TCP_HS_YIELD_PAUSE_NS 100000000u
/* A receiver that finds a sender of its own process leading while it waits
 * for room on its path yields the core to it, looking at the queue between
 * two yields, for at most this long before it sleeps (tcp_progress.c,
 * follow_by_yielding()). */
#define TCP_FOLLOW_YIELD_NS 100000u
/* Hot connections past which those idle for less go cold as well: each is
 * one more socket in every round's poll() (tcp_int.h, "Readiness"). */
#define TCP_HOT_MAX 32u
/* TLS handshakes under way at once (below ZAP_TCP_MAX_PENDING): each holds
 * a TLS session, tens of KiB once its ClientHello is read, so a flood of
 * half-open ones is bounded by this, not by the descriptor limit. */
#define TCP_TLS_PENDING_MAX 256u

#endif /* ZAP_TCP_CONST_H */
