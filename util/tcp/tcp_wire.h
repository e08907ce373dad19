/* SPDX-License-Identifier: MIT */
/*
 * The TCP wire shared by the `default` transport (built into libzap) and the
 * `uma` plugin (its own .so, linking the same static library): framing,
 * handshake, connection table, per-peer state and caller-driven progress.
 *
 * The only thing a user of the wire chooses is where received payloads
 * land: struct tcp_rx_alloc. default mallocs; uma hands out pool memory a
 * GPU can read. Everything else (wire format, ordering, cancellation) is
 * identical, so the two transports interoperate. See WIRE.md.
 */
#ifndef ZAP_TCP_WIRE_H
#define ZAP_TCP_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <zap/zap-plugin.h>

struct tcp_wire;

/*
 * A received message as the wire builds it. The allocator returns one of
 * these; the wire fills @peer, msg.peer and msg.len, and owns @next until
 * the message is handed to the application by tcp_wire_recv().
 */
struct tcp_rx_msg {
	struct zap_msg msg;      /* first: tcp_wire_recv() returns &msg */
	struct tcp_rx_msg *next; /* wire-private queue link */
	char peer[ZAP_PEER_MAX]; /* replyable sender address */
	char peer_id[72];        /* TLS: the sender's key, "sha256:<hex>" */
};

/*
 * Where received payloads land.
 * @alloc: return 0 and *@out with msg.size, msg.data (@len writable bytes),
 *         msg.device_ptr and msg.release set. msg.release must free the
 *         whole record, also after the wire was destroyed, and is also how
 *         the wire drops a message it could not complete.
 *         -EAGAIN: no memory right now; the wire stops reading that
 *         connection (TCP flow control holds the sender) until the next
 *         kick (tcp_wire_kick(), tcp_kick()), and then retries at once.
 *         Nothing retries on a timer: an allocator that says -EAGAIN must
 *         kick when memory comes back (a release), and must not say it
 *         when nothing it controls will free memory (say -ENOMEM then).
 *         Any other negative errno: the connection is closed with a
 *         logged reason.
 *         Called from the thread driving progress, without wire locks held;
 *         it must not block for long.
 */
struct tcp_rx_alloc {
	int (*alloc)(void *user, size_t len, struct tcp_rx_msg **out);
	void *user;
	/*
	 * Optional: make *@m's payload @len bytes (larger than before),
	 * keeping its contents; *@m may move. 0, or a negative errno (the
	 * connection is closed; *@m is still valid and released by the
	 * wire). With it, a large message's memory grows as its bytes
	 * arrive (alloc() is first asked for a part); without it, alloc()
	 * gets the whole declared length once the endpoint's budget for
	 * partly received messages allows it.
	 */
	int (*grow)(void *user, size_t len, struct tcp_rx_msg **m);
};

struct tcp_wire_args {
	const struct zap_host *host;
	const char *domain;    /* log domain and error prefix, e.g. "default" */
	const char *listen;    /* "host:port", port 0 allowed */
	uint64_t max_msg_size; /* largest payload sent or accepted */
	struct tcp_rx_alloc alloc;
	/* TLS (WIRE.md, "TLS"): with @tls_cert every connection is TLS 1.3
	 * with mutual authentication; NULL: plaintext. The others as
	 * zap_attr's tls_* fields. */
	const char *tls_cert, *tls_key, *tls_ca, *tls_peers;
	/* Benchmarks only: every sender writes its own frames, as before
	 * coalescing (bench/tcp_senders.c compares). */
	bool no_coalesce;
};

/* Bind, listen and start the handshake thread. Errors carry a reason. */
int tcp_wire_open(const struct tcp_wire_args *args, struct tcp_wire **out);

/* Wake every blocked call with -ESHUTDOWN, and fail later ones. Frees
 * nothing; safe concurrently with every other call. */
void tcp_wire_shutdown(struct tcp_wire *w);

/* Free the wire; no call may be in flight. Messages already returned stay
 * valid (their release does not touch the wire). Accepts NULL. */
void tcp_wire_destroy(struct tcp_wire *w);

/* zap_send() semantics. */
int tcp_wire_send(struct tcp_wire *w, const char *peer, const void *buf, size_t len,
		  struct zap_ctx *ctx);

/* zap_send_burst() semantics: the count of @msgs taken, or an error when
 * none was. */
int tcp_wire_send_burst(struct tcp_wire *w, const char *peer, const struct zap_iov *msgs,
			size_t n, struct zap_ctx *ctx);

/* zap_recv() semantics; *out is a struct tcp_rx_msg's msg. */
int tcp_wire_recv(struct tcp_wire *w, struct zap_ctx *ctx, struct zap_msg **out);

/* zap_transport_address() semantics: a sendable form of the bound address. */
int tcp_wire_address(const struct tcp_wire *w, char *buf, size_t len);

uint64_t tcp_wire_max_msg(const struct tcp_wire *w);

/*
 * The path our messages to @peer (a peer string as zap_send() takes it)
 * take now: "shm" (shared-memory rings, WIRE.md "Same host"), "unix" or
 * "tcp". 0, -ENOTCONN when there is no connection to @peer, -ENOSPC when
 * @len is too small. Thread-safe.
 */
int tcp_wire_path(struct tcp_wire *w, const char *peer, char *buf, size_t len);

/*
 * Counters since open, for tests and benchmarks (relaxed reads, any
 * thread): send and read system calls on connections, and whole DATA
 * frames written and received. Frames per call is what coalescing and
 * batched receives buy (issue #16).
 */
struct tcp_wire_stats {
	uint64_t tx_calls, tx_frames;
	uint64_t rx_reads, rx_frames;
};
void tcp_wire_stats(const struct tcp_wire *w, struct tcp_wire_stats *out);

/*
 * What an operator sees (zap_stats(), zap_peer_list()): fill @out, of
 * out->size bytes (members within it only), and the connections now, at
 * most @n entries out->size bytes apart; tcp_wire_peers() returns how many
 * there are. Any thread, also after tcp_wire_shutdown().
 */
void tcp_wire_obs(struct tcp_wire *w, struct zap_stats *out);
int tcp_wire_peers(struct tcp_wire *w, struct zap_peer_info *out, size_t n);
/* zap_events(): move up to @n (>= 1) queued events into @out (entries
 * out->size bytes apart), oldest first; how many. */
int tcp_wire_events(struct tcp_wire *w, struct zap_event *out, size_t n);

/* Retry connections paused by an -EAGAIN allocation now. Thread-safe. */
void tcp_wire_kick(struct tcp_wire *w);

/*
 * The same kick as a handle that outlives the wire, for the release of
 * received memory, which may run after tcp_wire_destroy(): kicking then
 * wakes nobody. tcp_wire_kick_get() takes a reference (any thread, while
 * the wire exists); tcp_kick() kicks (any thread, NULL: nothing);
 * tcp_kick_put() drops the reference (NULL: nothing).
 */
struct tcp_kick;
struct tcp_kick *tcp_wire_kick_get(struct tcp_wire *w);
void tcp_kick(struct tcp_kick *k);
void tcp_kick_put(struct tcp_kick *k);

/*
 * The parsers of bytes a peer sends, pure (no socket, no wire), so that
 * fuzz/fuzz-tcp-wire.c calls them directly. The wire uses exactly these.
 */

/* Check a 16-byte frame header: magic, version @ver (0: any version this
 * side speaks, for a HELLO that offers one), type @want, reserved bytes,
 * length <= @max. 0 and *@len; -EPROTO or -EMSGSIZE with @why. */
int tcp_parse_header(const unsigned char *h, unsigned ver, unsigned want, uint64_t max,
		     uint64_t *len, char *why, size_t whylen);

/* A HELLO payload, parsed. */
struct tcp_hello {
	uint64_t id, nonce;
	uint64_t max_msg;        /* largest message the sender accepts, >= 1 */
	char addr[ZAP_PEER_MAX]; /* the sender's listen address, as sent */
	char host[ZAP_PEER_MAX]; /* its host part, IPv6 without brackets */
	char port[8];            /* its port, digits, not "0" */
	uint16_t port_num;       /* the same, 1-65535 */
	bool wildcard;           /* host is 0.0.0.0 or :: */
	bool unix_addr;          /* "unix:/path" or "unix:@name": host holds
				  * "/path" or "@name", port "", port_num 0 */
};

/* Parse the @len payload bytes after a HELLO header. 0, or -EPROTO with
 * @why (too short or long, instance id 0, NUL in the address, an address
 * zaddr_parse() refuses (zap-addr.h), port 0 on a TCP address). */
int tcp_parse_hello(const unsigned char *p, size_t len, struct tcp_hello *h, char *why,
		    size_t whylen);

/*
 * The replyable peer string for @h arriving on a connection whose remote
 * address is @src: @src's host with the announced port (zaddr_format(): no
 * IPv6 zone id). The announced host must be a wildcard or an IPv4/IPv6
 * literal naming @src's host (a name is refused, never looked up); on a
 * connection we dialed (@dialed_port >= 0, the port we connected to) the
 * announced port must be that one. 0, or -EPROTO with @why naming @src
 * (@src neither IPv4 nor IPv6, @len too small, or a claim @src does not
 * back).
 * A unix: address on a connection we accepted over TCP cannot be checked:
 * the peer string is then @src as it is (source host and port), which
 * replies reach while the connection is open; on a connection we dialed
 * it is refused (we dialed a TCP port).
 */
int tcp_hello_peer(const struct tcp_hello *h, const struct sockaddr *src, socklen_t sl,
		   int dialed_port, char *out, size_t len, char *why, size_t whylen);

/*
 * The replyable peer string for @h arriving on an accepted Unix-domain
 * connection (@who names the peer's credentials for @why): a TCP wildcard
 * becomes loopback with its port ("127.0.0.1:p", "[::1]:p"); a loopback
 * literal is taken as it is; any other TCP address is refused. A unix:
 * address is copied to @out and 1 returned: only the socket can prove it
 * (tw_unix_hello_peer(), tcp_unix.c: its listener's uid must be the peer's).
 * 0 or 1, or -EPROTO with @why (and @out "").
 */
int tcp_hello_peer_local(const struct tcp_hello *h, const char *who, char *out,
			 size_t len, char *why, size_t whylen);

/*
 * The same-host upgrade's side-channel messages (WIRE.md, "Same host"):
 * one SOCK_SEQPACKET datagram of TCP_SHM_MSG bytes each, native byte
 * order: magic, log2 of the ring size, two 32-byte fields (challenges and
 * HMAC-SHA256 proofs; zero where a message has none).
 */
#define TCP_SHM_MSG 72
#define TCP_SHM_CHAL 0x5a534832u /* "ZSH2": acceptor's challenge */
#define TCP_SHM_REQ 0x5a535132u  /* "ZSQ2": dialer's challenge and proof */
#define TCP_SHM_ANS 0x5a534132u  /* "ZSA2": acceptor's proof, its ring */
#define TCP_SHM_RING 0x5a535232u /* "ZSR2": the dialer's ring */
#define TCP_SHM_DONE 0x5a534332u /* "ZSC2": installed, switch */
struct tcp_shm_msg {
	uint32_t magic, log2;
	unsigned char a[32], b[32];
};

/* Check a side-channel datagram: @len bytes at @buf, @trunc when the
 * kernel cut it or its control block, @nfd descriptors with it; expected:
 * magic @want, the ring size TCP_SHM_LOG2 and @want_fds descriptors. 0
 * and *@m, or -EPROTO with @why. */
int tcp_parse_shm_msg(const void *buf, size_t len, bool trunc, int nfd, uint32_t want,
		      int want_fds, struct tcp_shm_msg *m, char *why, size_t whylen);

/* Plain decimal in [@min, @max] (the wire's environment limits). 0 or
 * -EINVAL. */
int tcp_parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out);

#endif /* ZAP_TCP_WIRE_H */
