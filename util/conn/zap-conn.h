/* SPDX-License-Identifier: MIT */
/*
 * The connection layer the stream transports share: what the TCP wire
 * (util/tcp, under the default transport and uma) and gpudirect's
 * bootstrap (plugins/gpudirect) each do with one TCP connection before it
 * carries transport-specific bytes, written once so that there is one
 * accept path to harden:
 *
 *   - identity: the name a peer goes by is what its connection proves
 *     (the source host, the port it claims to listen on, and with TLS the
 *     key it proved: "host:port#sha256:<hex>"), never what it claims alone;
 *   - peer names a send gives: checked and normalised, keyed or keyless;
 *   - non-blocking byte I/O on a socket, plain or through util/tls, and
 *     the dialling side's TLS handshake;
 *   - the handshakes under way (struct zconn_pend_set): newest first, with
 *     deadlines, a cap and the choice of whom to drop to make room (the
 *     busiest source host's oldest), kept by both accept paths;
 *   - an accept engine: many handshakes at once, each with a deadline, a
 *     cap in flight with eviction of the oldest that has not delivered its
 *     message, TLS, and a length-prefixed message read whole into a fixed
 *     buffer before anything is allocated for the peer.
 *
 * The rules and the error messages are the TCP wire's
 * (plugins/default/WIRE.md, "HELLO" and "TLS"). What is not here: the
 * wire's own accept thread (util/tcp/tcp_handshake.c) keeps its epoll
 * loop, its HELLO and the descriptor-cap eviction of established
 * connections; its handshakes under way are a struct zconn_pend_set
 * (docs/architecture.md).
 *
 * Shared state: none. A struct zconn_acc is used by one thread (its
 * accept thread, or a test); a struct ztls_conn by one thread at a time.
 */
#ifndef ZAP_CONN_H
#define ZAP_CONN_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <zap/zap.h> /* ZAP_PEER_MAX */

struct ztls_ctx;
struct ztls_conn;

/* ---- identity and peer names (conn_peer.c) ------------------------------- */

/*
 * The replyable peer string for a peer that claims to listen on @claim
 * (its address text, zap-addr.h grammar) in its first message (@what,
 * e.g. "HELLO", for @why), arriving on a connection whose remote address
 * is @src: @src's host with the claimed port (zaddr_format(): no IPv6
 * zone id). The claimed host must be a wildcard or an IPv4/IPv6 literal
 * naming @src's host (a name is refused, never looked up); on a
 * connection we dialed (@dialed_port >= 0, the port we connected to) the
 * claimed port must be that one. A unix: claim on a connection we
 * accepted over TCP cannot be checked: the peer is then @src itself, host
 * and port, which replies reach while the connection is open; on one we
 * dialed it is refused. 0, or -EPROTO with @why naming @src (a malformed
 * claim, @src neither IPv4 nor IPv6, @len too small, or a claim @src does
 * not back); @out is then "".
 */
int zconn_identity(const char *claim, const struct sockaddr *src, socklen_t sl,
		   int dialed_port, const char *what, char *out, size_t len, char *why,
		   size_t whylen);

/*
 * A peer string a send names, checked and normalised into @out (@ol
 * bytes): "host:port" as is; "host:port#sha256:<hex>" only with TLS
 * (@tls), the key in lower case so that it equals the name a received
 * message carries. 0, or -EINVAL with @why (no transport prefix).
 */
int zconn_peer_norm(const char *peer, bool tls, char *out, size_t ol, char *why,
		    size_t whylen);

/* Whether @peer is its own normal form for an @ol-byte buffer: no key,
 * and shorter than @ol. zconn_peer_norm() copies such a one unchanged, so
 * a caller that can use @peer as given skips the copy. Inline: a call
 * cost a 64 B send 15 instructions (2%). */
static inline bool zconn_peer_plain(const char *peer, size_t ol)
{
	/* One pass: the first '#' or the end (strchr() and strnlen() were
	 * two, 38 instructions of a 64 B send). */
	const char *e = strchrnul(peer, '#');

	return !*e && (size_t)(e - peer) < ol;
}

/* "@addr#@fp" into @out (@fp "": @addr alone); @out may be @addr.
 * 0, or -ENAMETOOLONG. */
int zconn_peer_join(const char *addr, const char *fp, char *out, size_t ol);

/*
 * Whether a peer named @have (what its connection proved) serves a send
 * to @want (a normalised peer string): the same name, or @want names no
 * key and @have is that address with the key it proved (any trusted key
 * may answer a keyless address).
 */
bool zconn_peer_match(const char *have, const char *want);

/*
 * Which of ZCONN_HOST_BUCKETS a peer's source host falls in, for sharing
 * room fairly between hosts: its IP address from @sa (a v4-mapped IPv6 one
 * as IPv4), else (a Unix socket) @ident's bytes up to " pid=" (the TCP
 * wire's "uid=U gid=G pid=P"), or none. Hosts that share a bucket count as
 * one, which only blurs the choice of whom to ask for room.
 */
#define ZCONN_HOST_BUCKETS 1024u
unsigned zconn_host_bucket(const struct sockaddr *sa, socklen_t sl, const char *ident);

/* @host (no brackets) as a socket address with @port, if it is an IPv4 or
 * IPv6 literal. */
bool zconn_literal(const char *host, uint16_t port, struct sockaddr_storage *ss,
		   socklen_t *sl);

/* ---- handshakes under way (conn_pend.c) ---------------------------------- */

/*
 * The bookkeeping both accept paths share (the TCP wire's accept thread,
 * util/tcp/tcp_handshake.c, and the accept engine below): the handshakes
 * under way, newest first, each with a deadline and a host bucket, a cap,
 * and whom to drop to make room. A struct zconn_pend is embedded in the
 * caller's handshake; the caller fills born, deadline, host and evictable
 * before zconn_pend_add() and may clear evictable later (a handshake that
 * holds more than its socket). Deadlines must not decrease in the order of
 * adding (each is its add time plus one timeout), so the oldest's comes
 * first.
 */
struct zconn_pend {
	struct zconn_pend *newer, *older;
	uint64_t born, deadline; /* the caller's clock and unit */
	unsigned host;           /* zconn_host_bucket() of the source */
	bool evictable;          /* zconn_pend_victim() may choose it */
};

struct zconn_pend_set {
	struct zconn_pend *newest, *oldest;
	unsigned count, cap;
};

/* An empty set holding at most @cap (zconn_pend_full()). */
void zconn_pend_init(struct zconn_pend_set *s, unsigned cap);
/* @p joins as the newest; zconn_pend_del() takes it out. */
void zconn_pend_add(struct zconn_pend_set *s, struct zconn_pend *p);
void zconn_pend_del(struct zconn_pend_set *s, struct zconn_pend *p);

static inline bool zconn_pend_full(const struct zconn_pend_set *s)
{
	return s->count >= s->cap;
}

static inline struct zconn_pend *zconn_pend_oldest(const struct zconn_pend_set *s)
{
	return s->oldest;
}

/* The first deadline (the oldest's), or UINT64_MAX with none under way. */
uint64_t zconn_pend_next_deadline(const struct zconn_pend_set *s);
/* The oldest if its deadline is at or before @now, else NULL: drop it
 * (zconn_pend_del()) and ask again until NULL. */
struct zconn_pend *zconn_pend_expired(const struct zconn_pend_set *s, uint64_t now);
struct zconn_pend *zconn_pend_oldest_evictable(const struct zconn_pend_set *s);

/*
 * Whom to drop to make room. @count is ZCONN_HOST_BUCKETS counters, zero
 * or holding what else the caller counts per host (the TCP wire: its
 * established connections); every entry of @s is added to them. The
 * busiest host (ties: the lowest bucket) is *@busiest, holding
 * count[*busiest]: so many connections from a few hosts make the room
 * for a newcomer from elsewhere. Returned: the oldest evictable entry of
 * the busiest host, or with no host holding two the oldest evictable
 * entry; NULL when there is none (the busiest host may hold only what the
 * caller counted: the caller may make room there instead).
 */
struct zconn_pend *zconn_pend_victim(const struct zconn_pend_set *s, unsigned *count,
				     unsigned *busiest);

/* ---- byte I/O, plain or TLS (conn_io.c) ---------------------------------- */

/*
 * Receive / send up to @len bytes on the non-blocking socket @fd, through
 * @tc when it is not NULL. >0 bytes; 0 (receive) the peer closed; -EAGAIN
 * with *@ev (POLLIN or POLLOUT) to wait for; another negative errno with
 * @why.
 */
ssize_t zconn_recv(int fd, struct ztls_conn *tc, void *buf, size_t len, short *ev,
		   char *why, size_t whylen);
ssize_t zconn_send(int fd, struct ztls_conn *tc, const void *buf, size_t len, short *ev,
		   char *why, size_t whylen);

/* Wait until @ev (POLLIN or POLLOUT) may be ready on @fd: 0, or a
 * negative errno that ends the exchange (deadline, cancel, shutdown). */
typedef int (*zconn_wait_fn)(void *user, int fd, short ev);

/*
 * All @len bytes received into / sent from @buf (@wr) on @fd, through @tc
 * when it is not NULL, waiting with @wait. 0; -ECONNRESET with @why when
 * the peer closed; @wait's error; another negative errno with @why.
 */
int zconn_all(int fd, struct ztls_conn *tc, void *buf, size_t len, bool wr,
	      zconn_wait_fn wait, void *user, char *why, size_t whylen);

/*
 * The dialling side's TLS handshake on the connected non-blocking @fd,
 * with @x's identity and trust, to the key @want only ("sha256:<hex>", or
 * NULL: any trusted key), waiting with @wait. 0 and *@out (free with
 * ztls_conn_free() before closing @fd), or a negative errno with @why:
 * -EACCES (the peer's key is not trusted or not @want, or it refused
 * ours), -EPROTO (not TLS), @wait's error.
 */
int zconn_tls_dial(struct ztls_ctx *x, int fd, const char *want, zconn_wait_fn wait,
		   void *user, struct ztls_conn **out, char *why, size_t whylen);

/* ---- the accept engine (conn_accept.c) ----------------------------------- */

/*
 * One handshake, accepted side (the dialler writes first):
 *   0. with TLS (cfg.tls), the TLS 1.3 handshake with mutual auth, in
 *      non-blocking steps: a peer that is not TLS, or whose key is not
 *      trusted, is refused; everything below runs over TLS;
 *   1. read the peer's message: hdr_len bytes, then what msg_len() says
 *      the whole message is (at most msg_max), into the handshake's own
 *      buffer;
 *   2. on_msg(): decode it, check who sent it (zconn_identity()), build
 *      what the peer needs, and give the answer;
 *   3. write the answer, read the peer's ack_len bytes of confirmation
 *      (none when 0); on_ready() (or on_fail() when anything after 2
 *      fails).
 * A handshake that has not finished by its deadline is dropped (on_fail()
 * if it got to 2). When max_inflight handshakes are in flight, a new
 * connection evicts one that has not yet delivered a whole message (so
 * idle sockets cannot shut peers out): from the source host holding the
 * most handshakes (zconn_host_bucket(), zconn_pend_victim()), the oldest
 * of its, so that many sockets from a few hosts make the room for a
 * newcomer from elsewhere, as on the TCP wire; with no host holding two,
 * or the busiest host's all delivered, the oldest that has not. If every
 * one has delivered, it waits in the listen backlog.
 */
struct zconn_acc_cfg {
	unsigned max_inflight; /* handshakes at once, >= 1 */
	uint64_t timeout_ns;   /* each handshake's deadline, from accept */
	struct ztls_ctx *tls;  /* TLS for every handshake, or NULL: plaintext */
	size_t hdr_len;        /* the message's header, read first, >= 1 */
	size_t msg_max;        /* the largest whole message, >= hdr_len */
	size_t out_max;        /* the largest answer */
	size_t ack_len;        /* the peer's confirmation after our answer */
	const char *what;      /* the message, in reasons: "bootstrap message" */
	const char *cap_var;   /* the variable that sets max_inflight, in reasons */
	const char *time_var;  /* the one that sets timeout_ns */
	/* From the header @hdr: 0 and the whole message's length (header
	 * included) in *@len, or a negative errno with @why (refused). */
	int (*msg_len)(void *user, const uint8_t *hdr, size_t *len, char *why,
		       size_t whylen);
	/*
	 * The whole message @msg (@len bytes) from @src; @fp the key the
	 * peer proved ("sha256:<hex>"), or "" without TLS. Write the answer
	 * into @out (@cap bytes) and return its length with *@pair, or a
	 * negative errno with @why (refused).
	 */
	int (*on_msg)(void *user, const uint8_t *msg, size_t len,
		      const struct sockaddr *src, socklen_t sl, const char *fp,
		      void **pair, uint8_t *out, size_t cap, char *why, size_t whylen);
	void (*on_ready)(void *user, void *pair); /* takes the pair */
	void (*on_fail)(void *user, void *pair);  /* frees the pair */
	/* A handshake dropped (@src "host:port"), with why; may be NULL. */
	void (*on_drop)(void *user, const char *src, const char *why);
	void *user;
};

struct zconn_acc_stats {
	unsigned inflight;
	uint64_t ready, refused, timed_out, evicted;
};

struct zconn_acc;

/* 0 and *@out, or -EINVAL (a field missing or out of range) / -ENOMEM. */
int zconn_acc_new(const struct zconn_acc_cfg *cfg, struct zconn_acc **out);
/* Drops every handshake in flight (on_fail() for those with a pair). */
void zconn_acc_free(struct zconn_acc *a);
/* Whether a new connection may be accepted now (room, or one to evict). */
bool zconn_acc_room(const struct zconn_acc *a);
/* Take an accepted, non-blocking socket (closed by the engine). 0, or
 * -EAGAIN (no room: the caller closes it) / -ENOMEM. @now (nanoseconds,
 * any origin) must not go backwards from one call to the next. */
int zconn_acc_add(struct zconn_acc *a, int fd, uint64_t now);
/* pollfds for the handshakes in flight, at most @max: their count. */
unsigned zconn_acc_pollfds(const struct zconn_acc *a, struct pollfd *pfd, unsigned max);
/* Milliseconds until the next deadline (-1: none). */
int zconn_acc_timeout_ms(const struct zconn_acc *a, uint64_t now);
/* Move every handshake on as far as it goes without blocking; drop those
 * past their deadline. */
void zconn_acc_step(struct zconn_acc *a, uint64_t now);
void zconn_acc_get_stats(const struct zconn_acc *a, struct zconn_acc_stats *st);
/*
 * The accept loop: accept on the listening socket @lfd (while there is
 * room), run the handshakes, until @wake is readable. 0, or a negative
 * errno when poll fails.
 */
int zconn_acc_serve(struct zconn_acc *a, int lfd, int wake);

#endif /* ZAP_CONN_H */
