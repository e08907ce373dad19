/* SPDX-License-Identifier: MIT */
/*
 * TCP wire internals: what the files of util/tcp share. tcp_wire.h is the
 * interface the transports use, WIRE.md the protocol.
 *
 *   tcp_const.h      the protocol's constants and the endpoint's limits
 *   tcp_codec.c      frame header and HELLO codec: the pure, fuzzed parsers
 *   tcp_conn.c       connections, peers and routes (the tie-break), wake-ups
 *   tcp_route.c      routes and peers found by address (hash tables)
 *   tcp_handshake.c  the HELLO (built, read) and the accept thread (its
 *                    handshakes under way: util/conn's struct
 *                    zconn_pend_set, deadlines, caps, whom to drop)
 *   tcp_dial.c       the dialer: connect, TLS, HELLO, version fallback
 *   tcp_progress.c   leader/follower progress: poll set, leader round, waiting
 *   tcp_rx.c         the leader's receive side: frames and parts (and a
 *                    path's chunks) into messages, the budget, the stall
 *                    clock
 *   tcp_ready.c      hot and cold connections (epoll); waiting for one
 *                    descriptor (the dialer's waits)
 *   tcp_api.c        open, close, address, recv, kicks
 *   tcp_send.c       the send path: route, tx side, large messages in parts
 *   tcp_path.h       the path interface: how bytes move on a connection
 *                    (an ops table; socket or shared memory, per peer)
 *   tcp_path_sock.c  the socket path: its ops (a burst's batch, a large
 *                    message's parts) over tcp_txq.c and tcp_rx.c
 *   tcp_txq.c        writing frames; coalescing the frames of senders
 *                    queued behind each other (one sendmsg() for many)
 *   tcp_unix.c       Unix-domain sockets: listen file, dial, SO_PEERCRED
 *                    identity and the checks of a local peer's claims
 *   tcp_shm.h        the same-host upgrade's internals (tcp_shm*.c only)
 *   tcp_shm_setup.c  the same-host upgrade set up: policy, regions, the
 *                    dialer and the acceptor of the side channel; it
 *                    installs the shm path on the connection
 *   tcp_shm_side.c   the side channel's binding, proofs and datagrams
 *   tcp_shm.c        the shm path: its ops, sending into a ring, wake-ups,
 *                    ends
 *   tcp_shm_rx.c     the shm path's receive: the ring's records
 *   tcp_stats.c      what an operator sees: counters and the peer listing
 *   tcp_util.h       clocks and byte order
 *
 * No two files call each other in a cycle (tests/check-file-cycles.py):
 * tcp_ready.c is at the bottom, the path's ops are reached through
 * c->path, never by name, from the files that use them.
 *
 * From the connection layer the wire shares with gpudirect's bootstrap
 * (util/conn, zap-conn.h): the HELLO's identity rule (tcp_hello_peer()
 * calls zconn_identity()), peer names with keys (send_check(), the
 * accepted side's name) and nothing of the accept loop, which stays here.
 *
 * Threads and progress
 * --------------------
 * Data moves on the callers' threads, not on a background I/O thread: a
 * hand-off over a queue costs a context switch per message, which is most
 * of a loopback round trip. A thread that must wait (recv with an empty
 * queue, send on a full socket or busy connection) either becomes the one
 * *leader*, which polls every established connection and reads whatever is
 * there into the shared message queue, or waits on a condition variable as
 * a follower until the leader (or anyone) changes something (a receiver
 * behind a leading sender of its process yields to it first for a while,
 * tcp_progress.c, follow_by_yielding()). A sender
 * blocked on a full socket therefore still drains inbound data (as leader,
 * or because someone else leads), so two peers sending large messages to
 * each other cannot deadlock.
 *
 * Readiness: the leader's cost per round depends on the connections with
 * work, not on how many exist. A connection is *cold* while nothing
 * happens on it: its socket sits in one epoll set (w->epfd), and the
 * leader polls only that set's descriptor. When epoll says a cold
 * connection is readable, the leader makes it *hot* (takes it out of the
 * epoll set and onto w->hot) and reads it from the next round on, polling
 * it directly as before: a poll() over a few hot sockets picks a message
 * up faster than epoll_wait() followed by the read. A hot connection
 * with nothing to do for TCP_HOT_IDLE_MS goes cold again, and with more
 * than TCP_HOT_MAX hot, one with nothing to do now: many peers that each
 * send now and then (a connect burst, votes from every validator) would
 * otherwise all be hot, and every round would poll each; one with state
 * the leader must look at every round (a partial frame, a paused
 * allocation, data held back, a ring, its end read) stays hot. Timers:
 * the stall clock only runs on hot connections (a partial frame keeps
 * one hot), and the idle timeout is checked by one scan of every
 * connection when the earliest idle deadline comes (w->next_idle_ms),
 * not every round.
 *
 * The leader busy-polls its set (poll() with timeout 0) for a while before
 * blocking, while recent waits say a message is due soon, trading CPU time
 * for the kernel's sleep/wake-up on every message; ZAP_TCP_SPIN_US fixes
 * that time instead (tcp_spin.c). Followers always sleep: at most one
 * thread per endpoint spins.
 *
 * One small thread does handshakes only: it accepts, reads the peer's HELLO
 * (with a deadline, so idle or hostile connections cannot hold anything up),
 * registers the connection and answers with our HELLO. Registering before
 * answering means a dialer that has our answer knows we registered it; the
 * tie-break in tw_conn_register() relies on that.
 *
 * Locking
 * -------
 * w->mu guards the connection/peer/route tables, the message queue, the
 * waiter list and every tcp_conn field marked "mu". It is taken only with
 * tw_lock() (which notes the holder), and a function documented "mu held"
 * checks that with TW_HELD(w), an assertion in the tests' builds
 * (-Dlock_checks=true, as scripts/test configures them): the
 * rule is checked, not only written down. Receive-side state of a
 * connection (rbuf, rx_msg...) belongs to whichever thread is leader; the
 * leader reads sockets with w->mu released. Connections are freed only by
 * tw_reap(), which runs only while no leader is polling (w->leader false, or
 * the leader itself between rounds), so the leader's snapshot stays valid.
 *
 * Bounds (WIRE.md, "Limits against floods"): the partial-message budget
 * (w->partial_bytes, w->oldest, c->rx_charge) is receive-side state and
 * so the leader's; tw_reap() returns a freed connection's charge, which is
 * safe for the same reason it may free it. w->qbytes and w->q_full are
 * under mu (the leader stops reading when the queue is full; a recv that
 * drains kicks it). c->last_ms is written by the leader (reads) and by
 * senders (under mu), so it is a relaxed atomic, read by the idle check
 * and by tw_evict_idle() (mu held). w->dials (mu) lists the nonces of
 * dials in progress, which prove a connection to ourselves.
 *
 * Coalescing (tcp_txq.c): c->txq, its senders' struct tcp_txreq states and
 * c->tx_chain are under mu. While a connection has queued frames its
 * tx_busy is set (the owner hands it on, tw_txq_handoff()), so it is not
 * reaped under them; a TAKEN frame's buffer is the owner's until it sets
 * DONE, which is why its sender then waits whatever its ctx says.
 *
 * Counters (tcp_stats.c): nothing on the send or receive path takes a
 * lock or an atomic read-modify-write of a line other threads write for
 * them. A connection's tx_msgs/tx_bytes are under mu (every writer of
 * frames already holds it when it learns what went out); its rx_msgs and
 * rx_bytes have one writer, the leader, which adds with a relaxed load
 * and store (tw_add1()), so readers under mu see a recent value. So do
 * the wire's per-message counters: st_tx_frames (every writer holds mu)
 * and st_rx_frames and st_rx_reads (the leader's); zap_stats() reads them
 * with relaxed loads, without mu. st_tx_calls counts socket writes by tx
 * sides' owners, which do not hold mu, and rare events (connections
 * opened and closed, upgrades, drops) are relaxed atomic adds on the wire
 * (w->st_*, tw_count()). A freed connection's traffic moves
 * into w->gone_* (mu) in tw_reap(), so the totals never go back.
 * Every connection that is dialed (connect() done) or accepted is closed
 * exactly once, under one enum zap_close_reason: established ones by
 * tw_conn_kill(), whose reason tw_reap() counts; handshakes where they
 * fail (tw_count_close()).
 *
 * Events (tcp_stats.c, zap_events()): a ring of the last TCP_EV_MAX under
 * its own mutex, w->ev->mu, a leaf: tw_event() takes it with or without
 * w->mu held and takes nothing inside it. Events are per connection, never
 * per message.
 *
 * Paths (tcp_path.h): c->path is tw_path_sock from the connection's
 * allocation, and is switched at most once, to the shm path of its pair
 * of rings (tcp_shm_setup.c: the dialer's before it registers, the
 * acceptor's under mu), with an atomic store, so the leader and senders
 * may load it without mu; the pair is freed with the connection (the end
 * op). Each op says what it needs held; an op is one indirect call, and
 * the socket path's send makes one per send (tx_pick is NULL).
 *
 * Shared memory (tcp_shm*.c): of the pair behind the shm path, the tx
 * ring belongs to the tx owner, the rx ring and rx_on to the leader, the
 * flags marked "mu" to w->mu; the side channel's descriptor never
 * changes once set. Which direction moved to the ring (tx_on, rx_on) is
 * the shm path's business: until then its ops hand the work to the
 * socket path's.
 */
#ifndef ZAP_TCP_INT_H
#define ZAP_TCP_INT_H

#include "config.h"
#include "tcp_const.h"
#include "tcp_path.h"
#include "tcp_util.h"
#include "tcp_wire.h"
#include "zap-conn.h"
#include "zap-tls.h"

#include <assert.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>

_Static_assert(ZTLS_FP_LEN == sizeof(((struct tcp_rx_msg *)0)->peer_id),
	       "deliver() copies a key or credentials into peer_id");

struct tcp_peer;
struct tcp_shm;
/* kind, then each end: length and bytes (AF_UNIX: sun_path, <= 108) */
#define TW_SHM_BIND_MAX (1 + 2 * (1 + 108))
#define TW_SHM_KEY_MAX (8 + 32)
#define TW_SHM_EXPORT_LABEL "EXPORTER-zap-shm"

/*
 * A send's frame, on the sending thread's stack (tcp_txq.c). The state is
 * under mu. QUEUED: behind the tx owner, nothing written; TAKEN: in an
 * owner's batch, its buffer in use until the owner sets DONE (the sender
 * waits for that, whatever its ctx); OWNER: handed the tx side; DONE: @err
 * and @done (bytes of the frame written) are the result; AGAIN: nothing
 * written, claim a connection afresh; EXPRESS: counted in the
 * connection's x_users, to be written into its express ring by the
 * sender itself (tw_shm_express()).
 */
enum { TXQ_QUEUED, TXQ_TAKEN, TXQ_OWNER, TXQ_DONE, TXQ_AGAIN, TXQ_EXPRESS };
struct tcp_txreq {
	struct tcp_txreq *next;
	const void *buf;
	size_t len;
	unsigned char hdr[TCP_HDR + 8]; /* the header, then @ext bytes (BEGIN) */
	unsigned char ext;
	int state;
	int err;
	size_t done;
};

/* Bytes of @r's frame on the connection. */
static inline size_t tw_frame_bytes(const struct tcp_txreq *r)
{
	return TCP_HDR + r->ext + r->len;
}

/*
 * A sender of a large message on a version-3 connection, in line for the
 * connection's one open large message (c->big), on its stack (mu). The
 * line is FIFO, so large senders take turns message by message.
 */
struct tcp_bigwait {
	struct tcp_bigwait *next;
};

struct tcp_conn {
	struct tcp_conn *next;
	int fd;
	bool dialed;                /* we connected; else accepted */
	uint64_t rid;               /* remote instance id, from its HELLO */
	uint64_t peer_max;          /* largest message the peer accepts, from its HELLO */
	uint64_t nonce;             /* dialer's connection nonce */
	char raddr[ZAP_PEER_MAX];   /* replyable remote address (proven host) */
	struct sockaddr_storage sa; /* remote address, from accept/connect */
	socklen_t salen;
	char src[ZAP_PEER_MAX]; /* the same as text, for logs ("?" if none);
				 * accepted Unix: the peer's credentials */
	bool local;             /* AF_UNIX (tcp_unix.c) */
	char ident[72];         /* Unix: "uid=U gid=G pid=P", the identity
				 * (SO_PEERCRED); "" on TCP */
	struct tcp_peer *peer;  /* mu; NULL for the accepted end of a self-connection */
	uint64_t id;            /* mu: unique in the wire, set at register */
	int why;                /* enum zap_close_reason: set by tw_conn_kill()
				 * (mu); in a handshake, a refusal's kind */
	/* How bytes move (tcp_path.h): tw_path_sock, then at most once the
	 * shm path, published with an atomic store (the leader loads it
	 * while reading); see "Shared memory" above */
	struct tcp_path *_Atomic path;
	/* tcp_shm.c: the connection as both ends see it (WIRE.md, "Same
	 * host"), which the upgrade's proofs cover; set before it is shared */
	unsigned char shm_bind[TW_SHM_BIND_MAX];
	unsigned char shm_bind_len;
	/* ... and the key of its proofs: the nonce, and under TLS the
	 * exporter's secret (only the two ends have either) */
	unsigned char shm_key[TW_SHM_KEY_MAX];
	unsigned char shm_key_len;

	/* mu: hot (in the leader's poll set, on w->hot) or cold (in w->epfd);
	 * see "Readiness" above */
	bool hot;
	struct tcp_conn *hprev, *hnext;

	/* mu */
	bool tx_busy; /* a sender (or the handshake) owns the socket's tx */
	/* version 4: senders writing the express ring without the tx side
	 * (tcp_shm.c, tw_shm_express()); like tx_busy, it keeps the
	 * connection from its FIN, eviction and freeing (tw_tx_in_use()) */
	unsigned x_users;
	bool tx_used;
	bool retiring; /* superseded: SHUT_WR once tx is free */
	bool tx_shut;
	uint64_t after_fins;               /* peer->fins when it joined its peer */
	bool dead;                         /* close at the next reap */
	bool rx_eof;                       /* no more data will be read */
	struct tcp_txreq *txq, **txq_tail; /* frames queued behind tx_busy */
	uint64_t tx_msgs, tx_bytes;        /* whole messages written, payload */
	/* written under mu; atomic so that a large message's sender, writing
	 * a part without mu, can see that a frame waits (tcp_shm.c) */
	_Atomic unsigned txq_n;
	unsigned char ver; /* wire version, agreed in the HELLOs; set before use */
	/* version 3 (mu): the large message going out in parts (its sender's
	 * line entry), the senders in line behind it, and the path its parts
	 * take, chosen at its first (NULL until then; while it is the
	 * socket's, this direction may not switch to the ring until it is
	 * done). While big or bigq is set the connection is neither shut for
	 * writing nor freed. */
	struct tcp_bigwait *big, *bigq;
	struct tcp_path *big_path;
	unsigned tx_chain; /* hand-offs since tx_busy was last false */

	/* leader-private receive state */
	unsigned char *rbuf;
	size_t rhead, rlen;
	struct tcp_rx_msg *rx_msg; /* payload being read straight into place */
	size_t rx_off;
	size_t rx_cap;        /* payload bytes rx_msg has room for (grows) */
	size_t rx_len;        /* the frame's declared length */
	size_t rx_part;       /* bytes of rx_msg's current frame still to read */
	uint64_t rx_charge;   /* bytes of the partial budget rx_msg holds */
	uint64_t rx_total;    /* bytes read, ever */
	uint64_t rx_since_ms; /* last progress on a partial frame; 0: none */
	uint64_t rx_start;    /* rx_msg's place among those started (w->rx_starts) */
	uint64_t rx_opened;   /* messages that became rx_msg, ever */
	/* The stall clock's window (stall_clock()): the message it counts
	 * for (rx_opened then) and rx_off when it (re)started. */
	uint64_t rx_win_opened;
	size_t rx_win_off;
	/* Leader flags, kept apart from the "mu" ones above: a compiler may
	 * test several neighbouring bools with one wide load, and a word
	 * shared with fields the leader writes unlocked would make that load
	 * race (ThreadSanitizer saw it in tw_evict_from()). */
	bool alloc_wait;          /* -EAGAIN, paused until a kick */
	bool rx_ready;            /* may have buffered data, read without waiting */
	bool rx_big;              /* last message was large */
	bool budget_paused;       /* alloc_wait for the partial budget */
	_Atomic uint64_t last_ms; /* last frame byte in or out (relaxed) */
	_Atomic uint64_t rx_ms;   /* last frame byte in (relaxed) */
	_Atomic uint64_t rx_msgs, rx_bytes; /* delivered; leader writes (tw_add1()) */
	int rx_res;                         /* result of this round's read */
	char rx_why[160];

	/* TLS (tcp_tls.c): NULL on a plaintext endpoint */
	struct ztls_conn *tls;
	pthread_mutex_t tls_mu; /* every call into tls */
	bool tls_ok;            /* handshake: TLS done, HELLO next */
	bool tls_wpend;         /* sender: OpenSSL holds a record of the frame */
	short hs_events;        /* handshake: what the TLS step waits for */
	char fp[ZTLS_FP_LEN];   /* the peer's key, "sha256:<hex>"; "" plaintext */
	char tls_why[160];      /* the last TLS error on this connection */

	/* handshake (accept thread or dialer) */
	struct zconn_pend pend; /* accept thread: in w->pending, its deadline */
	short hs_armed;         /* accept thread: the events hs_epfd watches */
	unsigned char hs[TCP_HDR + TCP_HELLO_MAX];
	size_t hslen;
};

/*
 * One remote transport instance, by its id and its address as the
 * connection proved it (source host, claimed port): an instance id alone
 * is a claim anyone can copy, so a connection from elsewhere that repeats
 * it is another peer and never touches this one's connections.
 */
struct tcp_peer {
	struct tcp_peer *next, *prev; /* w->peers */
	struct tcp_peer *hnext;       /* the next in its w->ptab bucket */
	struct tcp_route *routes;     /* the routes to it (tw_route_set()) */
	uint64_t rid;
	char addr[ZAP_PEER_MAX];
	struct tcp_conn *tx; /* the connection our sends use, NULL if none */
	unsigned nconns;
	uint64_t fins; /* FINs we sent on its connections (tcp_conn.c) */
};

/*
 * Address string -> peer; dialing marks a connect in progress.
 *
 * A peer that dies can leave a connection we cannot tell from a live one:
 * its FIN waits behind data our closed receive window does not take (our
 * application reads slower than it sent), so a frame we write there is
 * taken by the kernel and lost. When that may be the case, the next send
 * to the address first dials it, which proves who listens there (a
 * listening port has one owner): the same instance keeps the route, a
 * restarted one takes it over. Triggers: @contested, a different instance
 * connected to us claiming the address (a restart, or a process posing
 * as the peer, which does not own the listener and so does not win), and
 * a tx connection stalled with unread data (tw_conn_check()). At most one
 * such dial per TCP_VERIFY_MS an address (@verify_ms).
 */
struct tcp_route {
	struct tcp_route *next, *prev; /* w->routes */
	struct tcp_route *hnext;       /* the next in its w->rtab bucket */
	struct tcp_route *pnext;       /* the next in peer->routes */
	struct tcp_peer *peer;         /* set by tw_route_set() only */
	bool dialing;
	bool contested;
	bool verifying; /* that dial is under way: senders wait for it */
	uint64_t verify_ms;
	char addr[ZAP_PEER_MAX];
};

/* A dial in progress (mu): its nonce proves a connection to ourselves. */
struct tcp_dial {
	struct tcp_dial *next;
	uint64_t nonce;
};

struct tcp_waiter {
	struct tcp_waiter *next;
	bool tx;    /* waits for something send-side (tx slot, dial, room) */
	int ctx_fd; /* polled by the leader for us, -1 if none */
	int out_fd; /* waiting for POLLOUT, -1 if not */
	bool out_ready;
	bool ctx_fired;
	/* waiting for room on this path (and the room it had, ->room()) */
	struct tcp_path *room;
	uint64_t room_had;
};

enum {
	SLOT_KICK,
	SLOT_STOP,
	SLOT_CTX,
	SLOT_OUT,
	SLOT_CONN,
	SLOT_WCTX,
	SLOT_WOUT,
	SLOT_SIDE, /* a path's side channel (tcp_path.h) */
	SLOT_EPOLL
};
struct tcp_slot {
	int kind;
	void *p;
};

/*
 * The kick eventfd, refcounted: the wire holds one reference and every
 * tcp_wire_kick_get() another, so a receive allocator's release may kick
 * after the wire is gone (the write then wakes nobody) and never writes to
 * a closed, perhaps reused, descriptor.
 */
struct tcp_kick {
	atomic_uint refs;
	int fd;
};

/* The leader's spin budget (tcp_spin.c); touched by the leader only. */
struct tcp_spin {
	bool fixed; /* ZAP_TCP_SPIN_US given: fixed_ns, nothing learned */
	uint64_t fixed_ns;
	uint64_t mean_ns; /* learned: weighted mean of recent wait times */
	uint64_t peak_ns; /* learned: longest recent wait (<= SPIN_MAX_NS), decaying */
	unsigned cool;    /* waits left that yield every round (core shared) */
};

struct tcp_wire {
	/* w->mu's holder, for TW_HELD() (written only by it, under mu; only
	 * in -Dlock_checks=true builds) */
	pthread_t mu_owner;
	bool mu_held;
	const struct zap_host *host;
	const char *dom;
	struct tcp_rx_alloc alloc;
	uint64_t max_msg;
	uint64_t id;
	int lfd;
	struct tcp_kick *kick; /* owns kick_fd */
	int kick_fd;           /* wakes the leader; drained by it */
	/* A leader that busy-polls looks at kick_due every round, so a kick
	 * meanwhile needs no eventfd (tw_kick()): lead_spins while it does,
	 * kick_due until the leader's round takes the kick. */
	atomic_bool lead_spins, kick_due;
	int stop_fd; /* readable once shut down; never drained */
	atomic_bool shut;
	struct tcp_spin spin;   /* leader only (ZAP_TCP_SPIN_US read at open) */
	unsigned hs_timeout_ms; /* ZAP_TCP_HANDSHAKE_MS, read at open */
	unsigned pending_max;   /* ZAP_TCP_MAX_PENDING, read at open */
	unsigned stall_ms;      /* ZAP_TCP_STALL_MS, read at open */
	uint64_t min_rate;      /* ZAP_TCP_MIN_RATE (bytes/s), read at open */
	unsigned idle_ms;       /* ZAP_TCP_IDLE_MS, read at open */
	size_t conn_max;      /* descriptors for connections: RLIMIT_NOFILE - headroom */
	size_t nconns;        /* mu: established connections not yet freed */
	uint64_t partial_max; /* ZAP_TCP_PARTIAL_BYTES, read at open */
	uint64_t rxq_max;     /* ZAP_TCP_RX_QUEUE_BYTES, read at open */
	uint64_t partial_bytes;  /* leader: budget held by partial messages */
	struct tcp_conn *oldest; /* leader: the partial allowed past the budget */
	/* leader: partial messages started so far. Their order, not a
	 * millisecond clock: peers that started theirs in the same
	 * millisecond took turns as the oldest, and two grew past the
	 * budget (test_tcp_hostile.c, test_partial_budget_and_stall). */
	uint64_t rx_starts;
	bool budget_wait;         /* leader: a connection waits for budget */
	uint64_t qbytes;          /* mu: payload bytes queued for recv */
	bool q_full;              /* mu: connections not read for a full queue */
	bool reap_due;            /* mu: a connection died since the last reap */
	struct ztls_ctx *tls;     /* NULL: plaintext; set at open, then read-only */
	bool no_coalesce;         /* tcp_wire_args.no_coalesce, read-only */
	bool keep_cc;             /* ZAP_TCP_SAME_HOST_CC=keep, read at open */
	char bound[ZAP_PEER_MAX]; /* literal bound address, sent in HELLO */
	char addr[ZAP_PEER_MAX];  /* sendable form, for tcp_wire_address() */
	/* tcp_wire_stats() (relaxed atomics): system calls and frames; who
	 * writes them and how: "Counters" above */
	_Atomic uint64_t st_tx_calls, st_tx_frames, st_rx_reads, st_rx_frames;
	/* tcp_wire_obs() (relaxed atomics, rare events; see "Counters") */
	_Atomic uint64_t st_dialed, st_accepted, st_closed[ZAP_CLOSE_REASON_SLOTS];
	_Atomic uint64_t st_shm_up, st_shm_refused, st_drop_partial;
	_Atomic uint64_t st_partial_now;      /* partial_bytes, as its writer stores it */
	uint64_t gone_tx_msgs, gone_tx_bytes; /* mu: of freed connections */
	uint64_t gone_rx_msgs, gone_rx_bytes;
	uint64_t next_conn_id; /* mu */
	size_t qmsgs;          /* mu: messages queued for recv */
	struct tcp_events *ev; /* zap_events(): its own lock (see above) */

	/* Shared memory (tcp_shm.c) */
	int shm_policy;                /* ZAP_SHM, read at open */
	int shm_lfd;                   /* side-channel listener, -1 if none */
	atomic_uint nshm;              /* connections holding rings */
	struct tcp_shm_pend *shm_pend; /* accept thread private */
	size_t nshm_pend;
	struct tcp_shm *_Atomic shm_linger_in; /* rings left to linger: any thread */
	struct tcp_shm *shm_linger;            /* accept thread private */
	int shm_linger_fd;   /* eventfd: a ring was left to linger; -1 if off */
	unsigned lead_rings; /* leader: rings being read in this round */

	/* unix:/path listener (tcp_unix.c): our socket file, unlinked at
	 * close if it is still this one (device, inode); "" none */
	char unix_path[ZAP_PEER_MAX];
	dev_t unix_dev;
	ino_t unix_ino;

	pthread_t acc;
	bool acc_started;
	/* accept thread private: connections in the handshake (the
	 * connection layer's set, zap-conn.h: newest first, so the oldest's
	 * deadline, in ms, comes first; capped by pending_max and under TLS
	 * TCP_TLS_PENDING_MAX), in the epoll set hs_epfd, which the accept
	 * thread polls (one descriptor, however many handshakes are under
	 * way) */
	struct zconn_pend_set pending;
	int hs_epfd;
	bool hs_burst;              /* many TLS handshakes were under way (give_back()) */
	uint64_t hs_yield_after_ns; /* accept thread: no yield before (let_others_run()) */

	pthread_mutex_t mu;
	pthread_cond_t cond;
	struct tcp_conn *conns;
	struct tcp_peer *peers;
	struct tcp_route *routes;
	struct tcp_route **rtab; /* mu: routes by address, rtab_n buckets */
	size_t rtab_n, nroutes;
	struct tcp_peer **ptab; /* mu: peers by address, ptab_n buckets */
	size_t ptab_n, npeers;
	uint64_t hash_seed; /* addresses' hash (tcp_route.c), secret */
	uint64_t route_gen; /* new whenever a route is freed (tcp_route.c) */
	/* Readiness (mu, but epfd itself never changes): the hot connections,
	 * and when the idle scan is next due. */
	int epfd;
	struct tcp_conn *hot;
	size_t nhot;
	uint64_t next_idle_ms;
	struct tcp_dial *dials;
	struct tcp_rx_msg *qhead, *qtail;
	struct tcp_waiter *waiters;
	unsigned nwaiters;
	bool leader;
	bool follow_yielding; /* a receiver yields to a leading sender (tcp_progress.c) */
	struct tcp_waiter *lead; /* the leader's waiter, while there is one */

	/* leader-private poll set, and the cold connections epoll reported */
	struct pollfd *pfd;
	struct tcp_slot *slot;
	size_t pcap;
	struct tcp_conn *woke[TCP_EPOLL_BATCH];
	size_t nwoke;
};

/*
 * w->mu, checked: every lock of it goes through tw_lock()/tw_unlock() (and
 * the condition waits below). In builds configured with -Dlock_checks=true
 * (scripts/test's) they note the holder, and a function documented "mu
 * held" asserts it with TW_HELD(w). Other builds compile both away: the
 * bookkeeping and the checks cost more per shared-memory message than a
 * shipped hot path should pay for a check that only tests read
 * (bench/MEASUREMENTS.md, "lock-checks").
 */
#if ZAP_LOCK_CHECKS
static inline void tw_note_holder(struct tcp_wire *w, bool held)
{
	if (held)
		w->mu_owner = pthread_self();
	w->mu_held = held;
}
#define TW_HELD(w) assert((w)->mu_held &&pthread_equal((w)->mu_owner, pthread_self()))
#else
static inline void tw_note_holder(struct tcp_wire *w, bool held)
{
	(void)w;
	(void)held;
}
#define TW_HELD(w) ((void)(w))
#endif

/*
 * Whether the receive queue is at ZAP_TCP_RX_QUEUE_BYTES (mu held): each
 * message counts its payload (w->qbytes, the rxq_bytes gauge) and the
 * record that holds it. Counting the payload alone, a peer's empty
 * messages never filled the queue, and an endpoint whose application took
 * none read them for as long as it had memory (test_tcp_hostile.c,
 * test_rx_queue_bounded_empty).
 */
static inline bool tw_rxq_full(const struct tcp_wire *w)
{
	return w->qbytes + (uint64_t)w->qmsgs * sizeof(struct tcp_rx_msg) >= w->rxq_max;
}

static inline void tw_lock(struct tcp_wire *w)
{
	pthread_mutex_lock(&w->mu);
	tw_note_holder(w, true);
}

static inline void tw_unlock(struct tcp_wire *w)
{
	tw_note_holder(w, false);
	pthread_mutex_unlock(&w->mu);
}

static inline void tw_cond_wait(struct tcp_wire *w)
{
	tw_note_holder(w, false);
	pthread_cond_wait(&w->cond, &w->mu);
	tw_note_holder(w, true);
}

static inline void tw_cond_timedwait(struct tcp_wire *w, const struct timespec *ts)
{
	tw_note_holder(w, false);
	pthread_cond_timedwait(&w->cond, &w->mu, ts);
	tw_note_holder(w, true);
}

/* tcp_codec.c */
/* A frame header of wire version @ver. */
void tw_hdr_put(unsigned char *h, unsigned ver, unsigned type, uint64_t len);
/* Whether @addr, a struct in_addr (AF_INET) or in6_addr (AF_INET6), is a
 * loopback address: 127/8, ::1, or a v4-mapped 127/8. */
bool tw_ip_loopback(int family, const void *addr);

/* tcp_conn.c: wake-ups */
uint64_t tw_rand64(void);
void tw_tune_socket(int fd);
bool tw_same_host(const struct sockaddr *local, const struct sockaddr *peer);
void tw_tune_same_host(const struct tcp_wire *w, int fd);
/* Set by a spinning leader that yields its core (tcp_spin.c); a large
 * message's sender, copying into a ring (tcp_shm.c) or a socket
 * (tcp_send.c, tcp_path_sock.c), yields to it. */
extern atomic_bool tw_core_wanted;
void tw_spin_init(struct tcp_spin *s, bool fixed, unsigned fixed_us);
uint64_t tw_spin_budget(const struct tcp_spin *s);
void tw_spin_learn(struct tcp_spin *s, uint64_t waited_ns);
int tw_spin_poll(struct tcp_spin *s, struct pollfd *pfd, size_t n, int timeout,
		 bool (*ready)(void *arg, bool sleeping), void *arg, bool rings);
void tw_conn_set_src(struct tcp_conn *c, const struct sockaddr *sa, socklen_t sl);
void tw_kick(struct tcp_wire *w);
/* Inline, both: zap_recv() notifies for every message it leaves queued,
 * and nearly always nobody waits (a call was 15 instructions of a 64 B
 * message). */
static inline void tw_wake_all(struct tcp_wire *w)
{
	if (w->nwaiters)
		pthread_cond_broadcast(&w->cond);
}
/*
 * Something a waiter may be waiting for changed (mu held). Followers sleep
 * on the condition variable; the leader sleeps in poll(), so it needs the
 * eventfd, but only if it waits for this kind of change: that keeps the
 * single-threaded paths free of extra system calls.
 */
static inline void tw_notify(struct tcp_wire *w, bool tx)
{
	TW_HELD(w);
	tw_wake_all(w);
	if (w->lead && w->lead->tx == tx)
		tw_kick(w);
}

/* tcp_conn.c: the connection table, all under w->mu */
void tw_retire(struct tcp_conn *c);
/* Readiness (tcp_ready.c; mu held but for open and close). */
int tw_ready_open(struct tcp_wire *w);
void tw_ready_close(struct tcp_wire *w);
/* A new connection, cold; its idle deadline counts from @now. *@kick:
 * a leader blocked in poll() must look again (a connection registered
 * while thousands connect at once otherwise costs it nothing). */
int tw_ready_add(struct tcp_wire *w, struct tcp_conn *c, uint64_t now, bool *kick);
/* Before @c is freed. */
void tw_ready_del(struct tcp_wire *w, struct tcp_conn *c);
/* Cold to hot (epoll saw it readable). */
void tw_conn_heat(struct tcp_wire *w, struct tcp_conn *c);
/* Hot to cold: whether @c has had nothing to do for TCP_HOT_IDLE_MS, or
 * now with more than TCP_HOT_MAX hot (the caller then checks
 * tw_conn_held()), and the move; false if the move failed (it stays hot). */
bool tw_conn_may_cool(const struct tcp_wire *w, const struct tcp_conn *c, uint64_t now);
bool tw_conn_cool(struct tcp_wire *w, struct tcp_conn *c);
/* Wait for @events on @fd, the ctx or shutdown (the dialer's waits). */
int tw_wait_fd(struct tcp_wire *w, int fd, short events, struct zap_ctx *ctx,
	       int limit_ms);

/* Link a new route @r (its addr set) into the list and the hash. */
void tw_route_add(struct tcp_wire *w, struct tcp_route *r);
struct tcp_route *tw_route_find(struct tcp_wire *w, const char *addr);
void tw_route_gen_next(struct tcp_wire *w);
struct tcp_route *tw_route_set(struct tcp_wire *w, const char *addr, struct tcp_peer *p);
void tw_route_del(struct tcp_wire *w, struct tcp_route *dead);
struct tcp_peer *tw_peer_find(struct tcp_wire *w, uint64_t rid, const char *addr);
void tw_peer_add(struct tcp_wire *w, struct tcp_peer *p);
void tw_peer_del(struct tcp_wire *w, struct tcp_peer *p);
void tw_peer_drop_routes(struct tcp_wire *w, struct tcp_peer *p);
void tw_peer_pick_tx(struct tcp_wire *w, struct tcp_peer *p);
bool tw_peer_draining(const struct tcp_wire *w, const struct tcp_peer *p);
/* Close @c at the next reap, counted under @why (enum zap_close_reason). */
void tw_conn_kill(struct tcp_wire *w, struct tcp_conn *c, int why);
void tw_conn_rx_done(struct tcp_wire *w, struct tcp_conn *c);
void tw_conn_tx_done(struct tcp_wire *w, struct tcp_conn *c);
/* Whether a sender writes on @c (mu held): its tx owner, or one writing
 * the express ring. */
static inline bool tw_tx_in_use(const struct tcp_conn *c)
{
	return c->tx_busy || c->x_users;
}
void tw_conn_free(struct tcp_conn *c);
void tw_reap(struct tcp_wire *w);
int tw_conn_register(struct tcp_wire *w, struct tcp_conn *c, const char *dial_addr);
bool tw_self_proven(const struct tcp_wire *w, const struct tcp_conn *c);
/* tw_evict_from() over every connection, idle TCP_EVICT_MIN_IDLE_MS at least. */
bool tw_evict_idle(struct tcp_wire *w, const char *why);
bool tw_evict_from(struct tcp_wire *w, const char *why,
		   bool (*pick)(const struct tcp_conn *c, const void *arg),
		   const void *arg, uint64_t min_idle_ms);
unsigned tw_conn_host(const struct tcp_conn *c);
/* The connection a handshake in w->pending is. */
static inline struct tcp_conn *tw_pend_conn(struct zconn_pend *p)
{
	return (struct tcp_conn *)((char *)p - offsetof(struct tcp_conn, pend));
}
enum { TW_CONN_OK, TW_CONN_SHUT, TW_CONN_STALLED };
int tw_conn_check_at(struct tcp_wire *w, struct tcp_conn *c, uint64_t now);
/* A connection that sent or received within this millisecond (@now, the
 * coarse clock) is taken as it is, inline: what nearly every send of a
 * stream asks; else tw_conn_check_at() looks. */
static inline int tw_conn_check(struct tcp_wire *w, struct tcp_conn *c, uint64_t now)
{
	if (now == atomic_load_explicit(&c->last_ms, memory_order_relaxed))
		return TW_CONN_OK;
	return tw_conn_check_at(w, c, now);
}
static inline void tw_touch(struct tcp_conn *c, uint64_t now)
{
	atomic_store_explicit(&c->last_ms, now, memory_order_relaxed);
}
bool tw_conn_held(const struct tcp_wire *w, const struct tcp_conn *c);
/* The idle timeout: close the connections idle for w->idle_ms. */
void tw_idle_scan(struct tcp_wire *w, uint64_t now);

/* tcp_tls.c: TLS, and the I/O calls that go through it when it is on */
int tw_tls_open(struct tcp_wire *w, const struct tcp_wire_args *a);
void tw_tls_close(struct tcp_wire *w);
int tw_tls_conn_new(struct tcp_wire *w, struct tcp_conn *c, bool server,
		    const char *want_fp, char *why, size_t whylen);
void tw_tls_conn_free(struct tcp_conn *c);
int tw_tls_step(struct tcp_conn *c, char *why, size_t whylen);
void tw_tls_log_up(struct tcp_wire *w, const struct tcp_conn *c);
ssize_t tw_io_read(struct tcp_conn *c, void *buf, size_t len);
struct iovec;
ssize_t tw_io_send(struct tcp_conn *c, const struct iovec *iov, size_t n);
bool tw_io_pending(struct tcp_conn *c);
const char *tw_io_err(const struct tcp_conn *c, int e);

/* tcp_txq.c: the tx side of a connection (mu held unless said) */
bool tw_txq_join(const struct tcp_wire *w, struct tcp_conn *c, struct tcp_txreq *r);
int tw_txq_wait(struct tcp_wire *w, struct tcp_conn *c, struct tcp_txreq *r,
		struct tcp_waiter *me, struct zap_ctx *ctx);
int tw_txq_send(struct tcp_wire *w, struct tcp_conn *c, struct tcp_txreq *own,
		size_t nown, struct tcp_waiter *me, struct zap_ctx *ctx, bool *partial,
		bool may_wait);
void tw_txq_handoff(struct tcp_wire *w, struct tcp_conn *c);
int tw_txq_flush(struct tcp_wire *w, struct tcp_conn *c, struct tcp_waiter *me,
		 struct zap_ctx *ctx, bool *partial);
size_t tw_txq_take(struct tcp_conn *c, struct tcp_txreq **req, size_t max);
void tw_txq_taken(struct tcp_wire *w, struct tcp_conn *c, struct tcp_txreq **req,
		  size_t n, size_t wrote);
/*
 * Whether a burst may start another frame on @c (mu held; tcp_send.c and
 * the paths' send ops): the checks a
 * new send makes when it claims the connection. One that is retiring or
 * no longer its peer's tx connection takes no new frames (their order
 * with the frames on the next connection depends on it).
 */
static inline bool tw_burst_goes_on(const struct tcp_conn *c)
{
	return !c->dead && !c->retiring && !c->tx_shut && c->peer && c->peer->tx == c;
}

static inline void tw_count(_Atomic uint64_t *n, uint64_t k)
{
	atomic_fetch_add_explicit(n, k, memory_order_relaxed);
}
/* Add to a counter only one thread writes at a time (the leader, or
 * writers that hold mu): no locked instruction. */
static inline void tw_add1(_Atomic uint64_t *n, uint64_t k)
{
	atomic_store_explicit(n, atomic_load_explicit(n, memory_order_relaxed) + k,
			      memory_order_relaxed);
}

/* tcp_stats.c: events. @c: the connection (its peer, identity, path);
 * @peer: the peer string instead of c->raddr (a dial), or NULL; @detail:
 * words for REFUSED and DISCONNECTED, or NULL. */
#define TCP_EV_MAX 128u
int tw_events_open(struct tcp_wire *w);
void tw_events_close(struct tcp_wire *w);
void tw_event(struct tcp_wire *w, int type, int reason, const struct tcp_conn *c,
	      const char *peer, const char *detail);

/* tcp_stats.c: a connection that never got established (a refused or
 * failed handshake) or is freed ends here, counted once under @why. */
static inline void tw_count_close(struct tcp_wire *w, int why)
{
	if (why < 0 || why >= ZAP_CLOSE_REASON_SLOTS)
		why = ZAP_CLOSE_OTHER;
	tw_count(&w->st_closed[why], 1);
}
/* The close reason for a failure @err (a negative errno) of a handshake
 * or of the socket: oversize, protocol, TLS, reset, ... */
int tw_close_why(int err);
/* tw_reap(), before freeing @c (mu held, no leader): its traffic into
 * the wire's totals, its close and any partial message it held. */
void tw_conn_count_gone(struct tcp_wire *w, const struct tcp_conn *c);
/* A handshake that failed with @err: @c->why if the check that refused
 * it named one, else tw_close_why(@err). */
static inline int tw_hs_why(const struct tcp_conn *c, int err)
{
	return c->why ? c->why : tw_close_why(err);
}

/* tcp_handshake.c: the HELLO (both sides) and the accept thread */
void *tw_accept_main(void *arg);
size_t tw_hello_build(const struct tcp_wire *w, const struct tcp_conn *c,
		      unsigned char *buf);
int tw_hello_read(struct tcp_wire *w, struct tcp_conn *c, char *why, size_t whylen);
/* tcp_dial.c: the dialer */
int tw_dial(struct tcp_wire *w, const char *peer, struct zap_ctx *ctx);

/* tcp_unix.c: Unix-domain listen, dial, credentials and claims */
struct zaddr;
int tw_unix_listen(struct tcp_wire *w, const struct zaddr *a);
void tw_unix_unlink(struct tcp_wire *w);
void tw_unix_accepted(struct tcp_conn *c);
struct ucred;
bool tw_peer_cred(int fd, struct ucred *cr, char *buf, size_t len);
int tw_unix_connect(struct tcp_wire *w, const char *peer, const struct zaddr *a,
		    struct zap_ctx *ctx, int *fd, struct sockaddr_storage *sa,
		    socklen_t *salen);
struct tcp_hello;
int tw_unix_hello_peer(struct tcp_wire *w, struct tcp_conn *c, const struct tcp_hello *h,
		       char *why, size_t whylen);

/* tcp_shm_setup.c: the same-host upgrade (its internals: tcp_shm.h) */
#define TCP_SHM_PENDING 16u /* side channels half set up at once, at most */
int tw_shm_open(struct tcp_wire *w);
void tw_shm_close(struct tcp_wire *w);
void tw_shm_bind(struct tcp_conn *c);
void tw_shm_dial(struct tcp_wire *w, struct tcp_conn *c, uint64_t deadline_ms,
		 struct zap_ctx *ctx);
size_t tw_shm_accept_fds(struct tcp_wire *w, struct pollfd *pfd, uint64_t *next_ms);
void tw_shm_accept_ready(struct tcp_wire *w, const struct pollfd *pfd, size_t n);
/* tcp_shm.c: version 4's express ring (mu held) */
bool tw_shm_express_ok(const struct tcp_conn *c, size_t len);
int tw_shm_express(struct tcp_wire *w, struct tcp_conn *c, const void *buf, size_t len);
int tw_shm_direct(struct tcp_wire *w, struct tcp_conn *c, const void *buf, size_t len,
		  uint64_t now);

/* tcp_rx.c: the leader reads @c (mu released), delivering onto *@tail;
 * 0, a negative error or one of these (c->rx_res) */
#define RX_EOF 1
#define RX_EOF_PARTIAL 2 /* FIN after part of a frame: that frame is dropped */
#define RX_MORE 3        /* internal to tw_conn_rx(): keep reading */
int tw_conn_rx(struct tcp_wire *w, struct tcp_conn *c, struct tcp_rx_msg ***tail,
	       uint64_t now, bool readable);
/* The socket path's receive op; the message assembler of a path that
 * hands over chunks (tcp_shm_rx.c), and its end mid-message. */
int tw_rx_sock(struct tcp_wire *w, struct tcp_conn *c, struct tcp_path *p,
	       struct tcp_rx_msg ***tail, uint64_t now, bool readable);
int tw_rx_chunk(struct tcp_wire *w, struct tcp_conn *c, struct tcp_rx_msg ***tail,
		uint64_t total, uint64_t off, const void *data, size_t len, bool last);
int tw_rx_drop_partial(struct tcp_wire *w, struct tcp_conn *c);

/* The name of @c's path for zap_peers() and events: "shm" once our
 * sends may use the ring, else the socket's ("tcp", "unix"). */
static inline const char *tw_conn_path(const struct tcp_conn *c)
{
	struct tcp_path *p = atomic_load(&((struct tcp_conn *)c)->path);

	return p->ops->upgraded(p) ? p->ops->name : c->local ? "unix" : "tcp";
}

/* tcp_progress.c (mu held) */
int tw_wait_check(struct tcp_wire *w, struct tcp_waiter *me, struct zap_ctx *ctx);
int tw_wait_step(struct tcp_wire *w, struct tcp_waiter *me, struct zap_ctx *ctx);
void tw_wait_plain(struct tcp_wire *w, struct tcp_waiter *me);

#endif /* ZAP_TCP_INT_H */
