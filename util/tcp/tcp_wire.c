/* SPDX-License-Identifier: MIT */
/*
 * TCP wire: see tcp_wire.h and WIRE.md.
 *
 * Threads and progress
 * --------------------
 * Data moves on the callers' threads, not on a background I/O thread: a
 * hand-off over a queue costs a context switch per message, which is most
 * of a loopback round trip. A thread that must wait (recv with an empty
 * queue, send on a full socket or busy connection) either becomes the one
 * *leader*, which polls every established connection and reads whatever is
 * there into the shared message queue, or waits on a condition variable as
 * a follower until the leader (or anyone) changes something. A sender
 * blocked on a full socket therefore still drains inbound data (as leader,
 * or because someone else leads), so two peers sending large messages to
 * each other cannot deadlock.
 *
 * With ZAP_TCP_SPIN_US set, the leader busy-polls its set (poll() with
 * timeout 0) for up to that long before blocking, trading a CPU core for
 * the kernel's sleep/wake-up on every message (see wire_poll()). Followers
 * still sleep: at most one thread per endpoint spins.
 *
 * One small thread does handshakes only: it accepts, reads the peer's HELLO
 * (with a deadline, so idle or hostile connections cannot hold anything up),
 * registers the connection and answers with our HELLO. Registering before
 * answering means a dialer that has our answer knows we registered it; the
 * tie-break in conn_register() relies on that.
 *
 * Locking
 * -------
 * w->mu guards the connection/peer/route tables, the message queue, the
 * waiter list and every tcp_conn field marked "mu". Receive-side state of a
 * connection (rbuf, rx_msg...) belongs to whichever thread is leader; the
 * leader reads sockets with w->mu released. Connections are freed only by
 * reap(), which runs only while no leader is polling (w->leader false, or
 * the leader itself between rounds), so the leader's snapshot stays valid.
 */
#include "tcp_wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define TCP_MAGIC 0x5a415057u /* "ZAPW" */
#define TCP_VERSION 1
#define TCP_HDR 16
#define TCP_T_HELLO 1
#define TCP_T_DATA 2
/* HELLO payload: instance id (8), connection nonce (8), address text. */
#define TCP_HELLO_FIXED 16
#define TCP_HELLO_MAX (TCP_HELLO_FIXED + ZAP_PEER_MAX - 1)
#define TCP_RBUF (64 * 1024)
/* Handshake limits (WIRE.md): defaults and their environment variables. */
#define TCP_HS_TIMEOUT_MS 10000
#define TCP_HS_ENV "ZAP_TCP_HANDSHAKE_MS"
#define TCP_HS_MIN_MS 10u
#define TCP_HS_MAX_MS 3600000u
#define TCP_PENDING_MAX 4096
#define TCP_PENDING_ENV "ZAP_TCP_MAX_PENDING"
#define TCP_PENDING_LIMIT 1048576u
#define TCP_ALLOC_RETRY_MS 5
#define TCP_SPIN_ENV "ZAP_TCP_SPIN_US"
#define TCP_SPIN_MAX_US 1000000u

struct tcp_peer;

struct tcp_conn {
	struct tcp_conn *next;
	int fd;
	bool dialed;             /* we connected; else accepted */
	uint64_t rid;            /* remote instance id, from its HELLO */
	uint64_t nonce;          /* dialer's connection nonce */
	char raddr[ZAP_PEER_MAX]; /* replyable remote address */
	struct tcp_peer *peer;   /* mu; NULL for the accepted end of a self-connection */

	/* mu */
	bool tx_busy;            /* a sender (or the handshake) owns the socket's tx */
	bool tx_used;
	bool retiring;           /* superseded: SHUT_WR once tx is free */
	bool tx_shut;
	bool dead;               /* close at the next reap */
	bool rx_eof;             /* no more data will be read */
	bool alloc_wait;         /* leader: allocator said -EAGAIN */
	bool rx_ready;           /* leader: may have buffered data, read without waiting */
	bool rx_big;             /* leader: last message was large */

	/* leader-private receive state */
	unsigned char *rbuf;
	size_t rhead, rlen;
	struct tcp_rx_msg *rx_msg; /* payload being read straight into place */
	size_t rx_off;
	int rx_res;              /* result of this round's read */
	char rx_why[160];

	/* handshake (accept thread or dialer) */
	unsigned char hs[TCP_HDR + TCP_HELLO_MAX];
	size_t hslen;
	uint64_t hs_deadline_ms;
};

/* One remote transport instance, by its id. */
struct tcp_peer {
	struct tcp_peer *next;
	uint64_t rid;
	struct tcp_conn *tx;     /* the connection our sends use, NULL if none */
	unsigned nconns;
};

/* Address string -> peer; dialing marks a connect in progress. */
struct tcp_route {
	struct tcp_route *next;
	struct tcp_peer *peer;
	bool dialing;
	char addr[ZAP_PEER_MAX];
};

struct tcp_waiter {
	struct tcp_waiter *next;
	bool tx;         /* waits for something send-side (tx slot, dial, room) */
	int ctx_fd;      /* polled by the leader for us, -1 if none */
	int out_fd;      /* waiting for POLLOUT, -1 if not */
	bool out_ready;
	bool ctx_fired;
};

enum { SLOT_KICK, SLOT_STOP, SLOT_CTX, SLOT_OUT, SLOT_CONN, SLOT_WCTX, SLOT_WOUT };
struct tcp_slot {
	int kind;
	void *p;
};

struct tcp_wire {
	const struct zap_host *host;
	const char *dom;
	struct tcp_rx_alloc alloc;
	uint64_t max_msg;
	uint64_t id;
	int lfd;
	int kick_fd;             /* wakes the leader; drained by it */
	int stop_fd;             /* readable once shut down; never drained */
	atomic_bool shut;
	unsigned spin_us;        /* ZAP_TCP_SPIN_US, read at open; 0: never spin */
	unsigned hs_timeout_ms;  /* ZAP_TCP_HANDSHAKE_MS, read at open */
	unsigned pending_max;    /* ZAP_TCP_MAX_PENDING, read at open */
	char bound[ZAP_PEER_MAX];  /* literal bound address, sent in HELLO */
	char addr[ZAP_PEER_MAX];   /* sendable form, for tcp_wire_address() */

	pthread_t acc;
	bool acc_started;
	struct tcp_conn *pending;  /* accept thread private */
	size_t npending;

	pthread_mutex_t mu;
	pthread_cond_t cond;
	struct tcp_conn *conns;
	struct tcp_peer *peers;
	struct tcp_route *routes;
	struct tcp_rx_msg *qhead, *qtail;
	struct tcp_waiter *waiters;
	unsigned nwaiters;
	bool leader;
	struct tcp_waiter *lead; /* the leader's waiter, while there is one */

	/* leader-private poll set */
	struct pollfd *pfd;
	struct tcp_slot *slot;
	size_t pcap;
};

/* ------------------------------------------------------------------------ */
/* Small helpers                                                             */
/* ------------------------------------------------------------------------ */

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t rand64(void)
{
	uint64_t v = 0;
	if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v)) {
		/* No entropy source: still unique enough to tell instances apart. */
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		v = ((uint64_t)ts.tv_nsec << 32) ^ (uint64_t)ts.tv_sec ^
		    ((uint64_t)getpid() << 16) ^ (uint64_t)(uintptr_t)&ts;
	}
	return v ? v : 1;
}

static void put_be32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
}

static void put_be64(unsigned char *p, uint64_t v)
{
	put_be32(p, (uint32_t)(v >> 32));
	put_be32(p + 4, (uint32_t)v);
}

static uint32_t get_be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static uint64_t get_be64(const unsigned char *p)
{
	return (uint64_t)get_be32(p) << 32 | get_be32(p + 4);
}

static void hdr_put(unsigned char *h, unsigned type, uint64_t len)
{
	put_be32(h, TCP_MAGIC);
	h[4] = TCP_VERSION;
	h[5] = (unsigned char)type;
	h[6] = 0;
	h[7] = 0;
	put_be64(h + 8, len);
}

int tcp_parse_header(const unsigned char *h, unsigned want, uint64_t max,
		     uint64_t *len, char *why, size_t whylen)
{
	uint32_t magic = get_be32(h);
	if (magic != TCP_MAGIC) {
		snprintf(why, whylen, "bad magic 0x%08" PRIx32 " (not a zap peer?)",
			 magic);
		return -EPROTO;
	}
	if (h[4] != TCP_VERSION) {
		snprintf(why, whylen, "unsupported wire version %u (we speak %u)",
			 h[4], TCP_VERSION);
		return -EPROTO;
	}
	if (h[5] != want) {
		snprintf(why, whylen, "unexpected frame type %u (expected %u)",
			 h[5], want);
		return -EPROTO;
	}
	if (h[6] || h[7]) {
		snprintf(why, whylen, "reserved header bytes set");
		return -EPROTO;
	}
	*len = get_be64(h + 8);
	if (*len > max) {
		snprintf(why, whylen,
			 "frame length %" PRIu64 " exceeds the maximum %" PRIu64
			 "%s", *len, max,
			 want == TCP_T_DATA ? " (ZAP_MAX_MSG_BYTES)" : "");
		return -EMSGSIZE;
	}
	return 0;
}

int tcp_addr_split(const char *s, char *host, size_t hl, char *port, size_t pl)
{
	const char *colon, *h = s;
	size_t n;

	if (!s || !*s)
		return -EINVAL;
	if (*s == '[') {
		const char *close = strchr(s, ']');
		if (!close || close[1] != ':')
			return -EINVAL;
		h = s + 1;
		n = (size_t)(close - h);
		colon = close + 1;
	} else {
		colon = strrchr(s, ':');
		if (!colon)
			return -EINVAL;
		n = (size_t)(colon - s);
		if (memchr(s, ':', n)) /* bare IPv6 needs brackets */
			return -EINVAL;
	}
	if (n >= hl || strlen(colon + 1) >= pl || !colon[1])
		return -EINVAL;
	memcpy(host, h, n);
	host[n] = '\0';
	for (const char *p = colon + 1; *p; p++)
		if (*p < '0' || *p > '9')
			return -EINVAL;
	if (strtoul(colon + 1, NULL, 10) > 65535)
		return -EINVAL;
	strcpy(port, colon + 1);
	for (const char *p = host; *p; p++)
		if (*p <= ' ' || *p > '~')
			return -EINVAL;
	return 0;
}

static void addr_format(const struct sockaddr *sa, socklen_t sl, char *buf,
			size_t len)
{
	/* An IPv6 literal with a scope name always fits. */
	char h[INET6_ADDRSTRLEN + IF_NAMESIZE + 2], p[NI_MAXSERV];

	if (getnameinfo(sa, sl, h, sizeof(h), p, sizeof(p),
			NI_NUMERICHOST | NI_NUMERICSERV)) {
		snprintf(buf, len, "?");
		return;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
		if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
			struct sockaddr_in s4 = {.sin_family = AF_INET,
						 .sin_port = s6->sin6_port};
			memcpy(&s4.sin_addr, &s6->sin6_addr.s6_addr[12], 4);
			addr_format((struct sockaddr *)&s4, sizeof(s4), buf, len);
			return;
		}
		snprintf(buf, len, "[%s]:%s", h, p);
	} else {
		snprintf(buf, len, "%s:%s", h, p);
	}
}

static bool host_is_wildcard(const char *h)
{
	return !*h || !strcmp(h, "0.0.0.0") || !strcmp(h, "::") ||
	       !strcmp(h, "*");
}

static void tune_socket(int fd)
{
	int one = 1;
	/* Messages are whole frames written at once; Nagle only adds delay. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static void kick(struct tcp_wire *w)
{
	uint64_t one = 1;
	ssize_t r = write(w->kick_fd, &one, sizeof(one));
	(void)r;
}

static void wake_all(struct tcp_wire *w)
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
static void notify(struct tcp_wire *w, bool tx)
{
	wake_all(w);
	if (w->lead && w->lead->tx == tx)
		kick(w);
}

/* ------------------------------------------------------------------------ */
/* Connection table (all under w->mu)                                        */
/* ------------------------------------------------------------------------ */

/*
 * Tie-break: among the connections between two instances, the one with
 * the smallest (dialer instance id, connection nonce) is *the* connection.
 * Both ends compute the same order from the HELLOs. Each end sends on the
 * best connection it knows and only ever moves to a better one; the loser
 * is retired with SHUT_WR once its last frame is out, and closes at EOF.
 * A receiver holds back data on a connection while a worse one from the
 * same peer may still deliver (see conn_held()), so moving never reorders.
 */
static bool key_less(const struct tcp_wire *w, const struct tcp_conn *a,
		     const struct tcp_conn *b)
{
	uint64_t da = a->dialed ? w->id : a->rid;
	uint64_t db = b->dialed ? w->id : b->rid;
	return da != db ? da < db : a->nonce < b->nonce;
}

static void retire(struct tcp_conn *c)
{
	c->retiring = true;
	if (!c->tx_busy && !c->tx_shut) {
		shutdown(c->fd, SHUT_WR);
		c->tx_shut = true;
	}
}

static struct tcp_route *route_find(struct tcp_wire *w, const char *addr)
{
	for (struct tcp_route *r = w->routes; r; r = r->next)
		if (!strcmp(r->addr, addr))
			return r;
	return NULL;
}

static struct tcp_route *route_set(struct tcp_wire *w, const char *addr,
				   struct tcp_peer *p)
{
	struct tcp_route *r = route_find(w, addr);
	if (!r) {
		r = calloc(1, sizeof(*r));
		if (!r)
			return NULL;
		snprintf(r->addr, sizeof(r->addr), "%s", addr);
		r->next = w->routes;
		w->routes = r;
	}
	/* The newest registration wins: an address now names this instance
	 * (a restarted peer on the same port is a new instance). */
	r->peer = p;
	return r;
}

static void route_del(struct tcp_wire *w, struct tcp_route *dead)
{
	for (struct tcp_route **pp = &w->routes; *pp; pp = &(*pp)->next)
		if (*pp == dead) {
			*pp = dead->next;
			free(dead);
			return;
		}
}

static void peer_pick_tx(struct tcp_wire *w, struct tcp_peer *p)
{
	p->tx = NULL;
	for (struct tcp_conn *c = w->conns; c; c = c->next)
		if (c->peer == p && !c->dead && !c->retiring &&
		    (!p->tx || key_less(w, c, p->tx)))
			p->tx = c;
}

/* Whether a connection to @p is retired but still open for reading. */
static bool peer_draining(const struct tcp_wire *w, const struct tcp_peer *p)
{
	for (const struct tcp_conn *c = w->conns; c; c = c->next)
		if (c->peer == p && !c->dead)
			return true;
	return false;
}

static void conn_kill(struct tcp_wire *w, struct tcp_conn *c)
{
	if (c->dead)
		return;
	c->dead = true;
	c->rx_eof = true;
	if (c->peer && c->peer->tx == c)
		peer_pick_tx(w, c->peer);
}

/*
 * A connection closes only once both directions are finished: the peer's
 * FIN was read (rx_eof) and ours was sent after our last frame (tx_shut).
 *
 * The peer's FIN alone does not mean the peer is gone: it is also how the
 * peer retires a connection that lost the tie-break, and it keeps reading
 * it (WIRE.md, rule 2). When both ends dial at once, the end whose own
 * dialed connection loses may already be writing a large frame on it when
 * the peer's FIN arrives. Closing at that FIN (as this code once did) made
 * that sender fail mid-frame with -ECONNRESET, the peer dropped the
 * connection as "closed mid-message", and whoever waited for the rest of
 * the data waited forever (test_bidirectional_large hung ~1 run in 5).
 * So at EOF the connection is retired instead: no new frame starts on it,
 * the frame in flight is finished, then we send our FIN and close. A peer
 * that really went away fails that frame by itself (EPIPE/ECONNRESET).
 */
static void conn_rx_done(struct tcp_wire *w, struct tcp_conn *c)
{
	c->rx_eof = true;
	retire(c);
	if (c->tx_shut)
		conn_kill(w, c);
}

/* The tx owner (a sender, or the handshake's HELLO) let go of @c (mu
 * held): a retired connection gets its FIN now, and closes if the peer's
 * FIN was already read. */
static void conn_tx_done(struct tcp_wire *w, struct tcp_conn *c)
{
	if (c->dead)
		return;
	if (c->retiring && !c->tx_shut) {
		shutdown(c->fd, SHUT_WR);
		c->tx_shut = true;
	}
	if (c->rx_eof && c->tx_shut)
		conn_kill(w, c);
}

static void conn_free(struct tcp_conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	if (c->rx_msg)
		c->rx_msg->msg.release(&c->rx_msg->msg);
	free(c->rbuf);
	free(c);
}

/* Free dead connections nobody uses. Only while no leader is polling. */
static void reap(struct tcp_wire *w)
{
	struct tcp_conn **pp = &w->conns;
	while (*pp) {
		struct tcp_conn *c = *pp;
		if (!c->dead || c->tx_busy) {
			pp = &c->next;
			continue;
		}
		*pp = c->next;
		struct tcp_peer *p = c->peer;
		conn_free(c);
		if (p && --p->nconns == 0) {
			for (struct tcp_route **rp = &w->routes; *rp;) {
				if ((*rp)->peer == p) {
					struct tcp_route *r = *rp;
					*rp = r->next;
					free(r);
				} else {
					rp = &(*rp)->next;
				}
			}
			for (struct tcp_peer **qp = &w->peers; *qp; qp = &(*qp)->next)
				if (*qp == p) {
					*qp = p->next;
					break;
				}
			free(p);
		}
	}
}

/*
 * Add an established connection (HELLO seen). @dial_addr: the string the
 * application dialed, or NULL. Returns -ENOMEM on failure (c not added).
 */
static int conn_register(struct tcp_wire *w, struct tcp_conn *c,
			 const char *dial_addr)
{
	struct tcp_peer *p = NULL;
	bool self = c->rid == w->id;

	c->rbuf = malloc(TCP_RBUF);
	if (!c->rbuf)
		return -ENOMEM;
	c->next = w->conns;
	w->conns = c;
	if (self && !c->dialed) {
		/* The accepted end of a connection to ourselves only receives;
		 * the dialed end carries our sends. */
		c->peer = NULL;
		goto out;
	}
	for (p = w->peers; p; p = p->next)
		if (p->rid == c->rid)
			break;
	if (!p) {
		p = calloc(1, sizeof(*p));
		if (!p) {
			w->conns = c->next;
			free(c->rbuf);
			c->rbuf = NULL;
			return -ENOMEM;
		}
		p->rid = c->rid;
		p->next = w->peers;
		w->peers = p;
	}
	c->peer = p;
	p->nconns++;
	if (!p->tx) {
		p->tx = c;
	} else if (key_less(w, c, p->tx)) {
		w->host->log(ZAP_LOG_DEBUG, w->dom,
			     "%s: both ends dialed; moving to the %s connection",
			     c->raddr, c->dialed ? "dialed" : "accepted");
		retire(p->tx);
		p->tx = c;
	} else {
		retire(c);
	}
	route_set(w, c->raddr, p);
	if (dial_addr)
		route_set(w, dial_addr, p);
out:
	if (w->leader)
		kick(w);
	wake_all(w);
	return 0;
}

/*
 * Whether data on @c must wait: a worse connection from the same peer may
 * still deliver frames the peer sent before moving to @c.
 */
static bool conn_held(const struct tcp_wire *w, const struct tcp_conn *c)
{
	if (!c->peer || c->peer->nconns < 2)
		return false;
	for (const struct tcp_conn *x = w->conns; x; x = x->next)
		if (x != c && x->peer == c->peer && !x->rx_eof &&
		    key_less(w, c, x))
			return true;
	return false;
}

/* ------------------------------------------------------------------------ */
/* Handshake                                                                 */
/* ------------------------------------------------------------------------ */

static size_t hello_build(const struct tcp_wire *w, uint64_t nonce,
			  unsigned char *buf)
{
	size_t al = strlen(w->bound);
	hdr_put(buf, TCP_T_HELLO, TCP_HELLO_FIXED + al);
	put_be64(buf + TCP_HDR, w->id);
	put_be64(buf + TCP_HDR + 8, nonce);
	memcpy(buf + TCP_HDR + TCP_HELLO_FIXED, w->bound, al);
	return TCP_HDR + TCP_HELLO_FIXED + al;
}

int tcp_parse_hello(const unsigned char *p, size_t len, struct tcp_hello *h,
		    char *why, size_t whylen)
{
	size_t al;

	if (len < TCP_HELLO_FIXED + 3 || len > TCP_HELLO_MAX) {
		snprintf(why, whylen, "HELLO too %s", len > TCP_HELLO_MAX ? "long" : "short");
		return -EPROTO;
	}
	al = len - TCP_HELLO_FIXED;
	memcpy(h->addr, p + TCP_HELLO_FIXED, al);
	h->addr[al] = '\0';
	h->id = get_be64(p);
	h->nonce = get_be64(p + 8);
	if (strlen(h->addr) != al ||
	    tcp_addr_split(h->addr, h->host, sizeof(h->host), h->port,
			   sizeof(h->port)) ||
	    !strcmp(h->port, "0")) {
		snprintf(why, whylen, "HELLO carries a malformed address");
		return -EPROTO;
	}
	h->wildcard = host_is_wildcard(h->host);
	return 0;
}

int tcp_hello_peer(const struct tcp_hello *h, const struct sockaddr *src,
		   socklen_t sl, char *out, size_t len, char *why, size_t whylen)
{
	char s[ZAP_PEER_MAX], sh[ZAP_PEER_MAX], sp[8];

	if (!h->wildcard) {
		snprintf(out, len, "%s", h->addr);
		return 0;
	}
	addr_format(src, sl, s, sizeof(s));
	if (tcp_addr_split(s, sh, sizeof(sh), sp, sizeof(sp))) {
		snprintf(why, whylen, "unusable source address %s", s);
		return -EPROTO;
	}
	snprintf(out, len, strchr(sh, ':') ? "[%s]:%s" : "%s:%s", sh, h->port);
	return 0;
}

/*
 * Read more of a HELLO into c->hs without blocking.
 * Return: 1 complete, 0 need more, -EPIPE closed, other negative: protocol
 * error or socket error, reason in @why.
 */
static int hello_read(struct tcp_wire *w, struct tcp_conn *c, char *why,
		      size_t whylen)
{
	for (;;) {
		size_t need = TCP_HDR;
		uint64_t len = 0;
		if (c->hslen >= TCP_HDR) {
			int r = tcp_parse_header(c->hs, TCP_T_HELLO, TCP_HELLO_MAX,
						 &len, why, whylen);
			if (r)
				return r;
			if (len < TCP_HELLO_FIXED + 3) {
				snprintf(why, whylen, "HELLO too short");
				return -EPROTO;
			}
			need = TCP_HDR + (size_t)len;
			if (c->hslen == need)
				break;
		}
		ssize_t k = read(c->fd, c->hs + c->hslen, need - c->hslen);
		if (k > 0) {
			c->hslen += (size_t)k;
			continue;
		}
		if (k == 0) {
			snprintf(why, whylen, "closed during the handshake (%zu bytes in)",
				 c->hslen);
			return -EPIPE;
		}
		if (errno == EAGAIN || errno == EINTR)
			return 0;
		snprintf(why, whylen, "read: %s", strerror(errno));
		return -errno;
	}

	/* Parse: id, nonce, address; substitute a wildcard host. */
	struct tcp_hello hl;
	int r = tcp_parse_hello(c->hs + TCP_HDR, c->hslen - TCP_HDR, &hl, why,
				whylen);
	if (r)
		return r;
	c->rid = hl.id;
	if (!c->dialed)
		c->nonce = hl.nonce;
	if (hl.wildcard) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		if (getpeername(c->fd, (struct sockaddr *)&ss, &sl) < 0) {
			snprintf(why, whylen, "getpeername: %s", strerror(errno));
			return -errno;
		}
		r = tcp_hello_peer(&hl, (struct sockaddr *)&ss, sl, c->raddr,
				   sizeof(c->raddr), why, whylen);
		if (r)
			return r;
	} else {
		snprintf(c->raddr, sizeof(c->raddr), "%s", hl.addr);
	}
	return 1;
}

static void pending_drop(struct tcp_wire *w, struct tcp_conn *c,
			 enum zap_log_level lvl, const char *why)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char src[ZAP_PEER_MAX] = "?";
	if (getpeername(c->fd, (struct sockaddr *)&ss, &sl) == 0)
		addr_format((struct sockaddr *)&ss, sl, src, sizeof(src));
	w->host->log(lvl, w->dom, "dropping connection from %s: %s", src, why);
	for (struct tcp_conn **pp = &w->pending; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	w->npending--;
	conn_free(c);
}

/* The accepted side: register, then answer with our HELLO. */
static void pending_finish(struct tcp_wire *w, struct tcp_conn *c)
{
	unsigned char buf[TCP_HDR + TCP_HELLO_MAX];
	size_t n = hello_build(w, c->nonce, buf);
	int r;

	for (struct tcp_conn **pp = &w->pending; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	w->npending--;
	c->next = NULL;

	w->host->log(ZAP_LOG_DEBUG, w->dom, "accepted connection from %s",
		     c->raddr);
	pthread_mutex_lock(&w->mu);
	/* Hold tx so that a retire decided here waits for our HELLO. */
	c->tx_busy = true;
	r = conn_register(w, c, NULL);
	pthread_mutex_unlock(&w->mu);
	if (r) {
		w->host->log(ZAP_LOG_WARN, w->dom,
			     "dropping connection from %s: out of memory", c->raddr);
		conn_free(c);
		return;
	}

	/* A fresh socket's send buffer always takes a HELLO. */
	ssize_t k = send(c->fd, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT);
	pthread_mutex_lock(&w->mu);
	c->tx_busy = false;
	if (k != (ssize_t)n) {
		w->host->log(ZAP_LOG_WARN, w->dom,
			     "dropping connection from %s: cannot answer HELLO: %s",
			     c->raddr, k < 0 ? strerror(errno) : "short write");
		conn_kill(w, c);
	} else {
		conn_tx_done(w, c);
	}
	if (w->leader)
		kick(w);
	else
		reap(w);
	notify(w, true);
	pthread_mutex_unlock(&w->mu);
}

static void accept_ready(struct tcp_wire *w, bool *backoff)
{
	for (;;) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int fd = accept4(w->lfd, (struct sockaddr *)&ss, &sl,
				 SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
			    errno == ENOMEM) {
				/* Leave the backlog in the kernel and retry
				 * later rather than spin on a readable socket. */
				w->host->log(ZAP_LOG_WARN, w->dom,
					     "accept: %s; pausing new connections",
					     strerror(errno));
				*backoff = true;
			}
			return;
		}
		struct tcp_conn *c = calloc(1, sizeof(*c));
		if (!c) {
			w->host->log(ZAP_LOG_WARN, w->dom,
				     "dropping new connection: out of memory");
			close(fd);
			continue;
		}
		c->fd = fd;
		c->hs_deadline_ms = now_ms() + w->hs_timeout_ms;
		tune_socket(fd);
		if (w->npending >= w->pending_max) {
			/* Too many half-open handshakes: shed the oldest so
			 * that a flood cannot lock well-behaved peers out. */
			struct tcp_conn *old = w->pending;
			while (old && old->next)
				old = old->next;
			if (old)
				pending_drop(w, old, ZAP_LOG_WARN,
					     "too many connections in handshake");
		}
		c->next = w->pending;
		w->pending = c;
		w->npending++;
	}
}

static void *accept_main(void *arg)
{
	struct tcp_wire *w = arg;
	struct pollfd *pfd = NULL;
	struct tcp_conn **pc = NULL;
	size_t cap = 0;
	bool backoff = false;

	while (!atomic_load(&w->shut)) {
		size_t n = 0, want = w->npending + 2;
		if (want > cap) {
			size_t nc = want * 2;
			struct pollfd *np = realloc(pfd, nc * sizeof(*np));
			if (np)
				pfd = np;
			struct tcp_conn **npc = realloc(pc, nc * sizeof(*npc));
			if (npc)
				pc = npc;
			if (!np || !npc) {
				poll(NULL, 0, 100);
				continue;
			}
			cap = nc;
		}
		uint64_t now = now_ms(), next = now + w->hs_timeout_ms;
		pfd[n++] = (struct pollfd){.fd = w->stop_fd, .events = POLLIN};
		pfd[n++] = (struct pollfd){.fd = backoff ? -1 : w->lfd,
					   .events = POLLIN};
		for (struct tcp_conn *c = w->pending; c; c = c->next) {
			if (c->hs_deadline_ms < next)
				next = c->hs_deadline_ms;
			pc[n] = c;
			pfd[n++] = (struct pollfd){.fd = c->fd, .events = POLLIN};
		}
		int timeout = next > now ? (int)(next - now) : 0;
		if (backoff && timeout > 100)
			timeout = 100;
		backoff = false;
		int r = poll(pfd, n, timeout);
		if (r < 0 && errno != EINTR) {
			w->host->log(ZAP_LOG_ERROR, w->dom, "poll: %s", strerror(errno));
			poll(NULL, 0, 100);
			continue;
		}
		if (atomic_load(&w->shut))
			break;
		now = now_ms();
		for (size_t i = 2; i < n; i++) {
			struct tcp_conn *c = pc[i];
			char why[160];
			if (pfd[i].revents) {
				int h = hello_read(w, c, why, sizeof(why));
				if (h == 1)
					pending_finish(w, c);
				else if (h < 0)
					pending_drop(w, c,
						     h == -EPIPE && !c->hslen
							     ? ZAP_LOG_INFO
							     : ZAP_LOG_WARN,
						     why);
			} else if (c->hs_deadline_ms <= now) {
				pending_drop(w, c, ZAP_LOG_INFO,
					     "no HELLO within the handshake timeout");
			}
		}
		if (pfd[1].revents)
			accept_ready(w, &backoff);
	}
	free(pfd);
	free(pc);
	return NULL;
}

/* ------------------------------------------------------------------------ */
/* Leader / follower progress                                                */
/* ------------------------------------------------------------------------ */

static bool waiter_live(const struct tcp_wire *w, const struct tcp_waiter *me)
{
	for (const struct tcp_waiter *x = w->waiters; x; x = x->next)
		if (x == me)
			return true;
	return false;
}

static void waiter_del(struct tcp_wire *w, struct tcp_waiter *me)
{
	for (struct tcp_waiter **pp = &w->waiters; *pp; pp = &(*pp)->next)
		if (*pp == me) {
			*pp = me->next;
			w->nwaiters--;
			return;
		}
}

static int pollset_reserve(struct tcp_wire *w, size_t n)
{
	if (n <= w->pcap)
		return 0;
	size_t nc = n * 2;
	struct pollfd *p = realloc(w->pfd, nc * sizeof(*p));
	if (p)
		w->pfd = p;
	struct tcp_slot *s = realloc(w->slot, nc * sizeof(*s));
	if (s)
		w->slot = s;
	if (!p || !s)
		return -ENOMEM;
	w->pcap = nc;
	return 0;
}

static void deliver(struct tcp_conn *c, struct tcp_rx_msg *m, size_t len,
		    struct tcp_rx_msg ***tail)
{
	m->msg.len = len;
	memcpy(m->peer, c->raddr, sizeof(m->peer));
	m->msg.peer = m->peer;
	m->next = NULL;
	**tail = m;
	*tail = &m->next;
}

#define RX_EOF 1
#define RX_EOF_PARTIAL 2 /* FIN after part of a frame: that frame is dropped */

/*
 * Read what is available on @c without blocking and turn complete frames
 * into messages. Stops after the first batch of messages so the caller
 * gets one promptly (rx_ready says whether to come back without polling).
 * Return 0, RX_EOF, RX_EOF_PARTIAL (c->rx_why says what was dropped), or a
 * negative errno with c->rx_why set.
 */
static int conn_rx(struct tcp_wire *w, struct tcp_conn *c,
		   struct tcp_rx_msg ***tail)
{
	int got = 0;

	c->rx_ready = false;
	for (;;) {
		if (c->rx_msg) {
			struct tcp_rx_msg *m = c->rx_msg;
			size_t want = m->msg.len - c->rx_off;
			ssize_t k = read(c->fd, (char *)m->msg.data + c->rx_off, want);
			if (k > 0) {
				c->rx_off += (size_t)k;
				if (c->rx_off == m->msg.len) {
					c->rx_msg = NULL;
					c->rx_big = m->msg.len >= TCP_RBUF;
					deliver(c, m, m->msg.len, tail);
					c->rx_ready = true;
					return 0;
				}
				continue;
			}
			if (k == 0) {
				/* Everything before this frame was delivered;
				 * the peer abandoned this one (WIRE.md,
				 * "Closing"). Drop it, and only it. */
				snprintf(c->rx_why, sizeof(c->rx_why),
					 "peer closed mid-message (%zu of %zu bytes)",
					 c->rx_off, m->msg.len);
				c->rx_msg = NULL;
				m->msg.release(&m->msg);
				return RX_EOF_PARTIAL;
			}
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				return 0;
			snprintf(c->rx_why, sizeof(c->rx_why), "read: %s",
				 strerror(errno));
			return -errno;
		}

		/* Parse complete frames from the buffer. */
		while (c->rlen - c->rhead >= TCP_HDR) {
			unsigned char *h = c->rbuf + c->rhead;
			uint64_t len;
			int r = tcp_parse_header(h, TCP_T_DATA, w->max_msg, &len,
						 c->rx_why, sizeof(c->rx_why));
			if (r)
				return r;
			size_t avail = c->rlen - c->rhead - TCP_HDR;
			if (len > avail && len - avail <= TCP_RBUF - c->rlen) {
				/* The rest fits the buffer: wait for it there,
				 * small frames cost one read each. */
				break;
			}
			struct tcp_rx_msg *m = NULL;
			r = w->alloc.alloc(w->alloc.user, (size_t)len, &m);
			if (r == -EAGAIN) {
				c->alloc_wait = true;
				return 0;
			}
			if (r) {
				snprintf(c->rx_why, sizeof(c->rx_why),
					 "cannot allocate %" PRIu64 " bytes: %s",
					 len, strerror(-r));
				return r;
			}
			m->msg.len = (size_t)len;
			size_t take = avail < len ? avail : (size_t)len;
			if (take)
				memcpy((void *)m->msg.data, h + TCP_HDR, take);
			c->rhead += TCP_HDR + take;
			if (take < len) {
				c->rx_msg = m;
				c->rx_off = take;
				break;
			}
			deliver(c, m, (size_t)len, tail);
			c->rx_big = false;
			got++;
		}
		if (c->rhead == c->rlen) {
			c->rhead = c->rlen = 0;
		} else if (c->rhead && (c->rx_msg || TCP_RBUF - c->rlen < TCP_HDR ||
					c->rhead > TCP_RBUF / 2)) {
			memmove(c->rbuf, c->rbuf + c->rhead, c->rlen - c->rhead);
			c->rlen -= c->rhead;
			c->rhead = 0;
		}
		if (c->rx_msg)
			continue;
		if (got) {
			c->rx_ready = true;
			return 0;
		}
		if (c->rhead) { /* make room for the rest of a frame */
			memmove(c->rbuf, c->rbuf + c->rhead, c->rlen - c->rhead);
			c->rlen -= c->rhead;
			c->rhead = 0;
		}
		/* After a large message expect another: read just its header
		 * so the payload lands in place instead of through rbuf. */
		size_t room = TCP_RBUF - c->rlen;
		if (c->rx_big && c->rlen < TCP_HDR)
			room = TCP_HDR - c->rlen;
		ssize_t k = read(c->fd, c->rbuf + c->rlen, room);
		if (k > 0) {
			c->rlen += (size_t)k;
			continue;
		}
		if (k == 0) {
			if (c->rlen) {
				snprintf(c->rx_why, sizeof(c->rx_why),
					 "peer closed mid-frame (%zu bytes pending)",
					 c->rlen);
				c->rhead = c->rlen = 0;
				return RX_EOF_PARTIAL;
			}
			return RX_EOF;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN)
			return 0;
		snprintf(c->rx_why, sizeof(c->rx_why), "read: %s", strerror(errno));
		return -errno;
	}
}

static int ms_min(int a, int b)
{
	if (a < 0)
		return b;
	if (b < 0)
		return a;
	return a < b ? a : b;
}

/*
 * poll(pfd, n, timeout), except that with spinning on (ZAP_TCP_SPIN_US)
 * and a non-zero timeout the leader first busy-waits for up to w->spin_us
 * by re-polling the same set with timeout 0. The set holds the kick and
 * stop eventfds, every waiter's ctx fd and POLLOUT interest and every
 * connection, so a message, a kick, a cancel or zap_close() ends the spin
 * at the next round, exactly as it would end the blocking poll(); shutdown
 * and the ctx (its deadline has no fd) are also checked between rounds.
 * Only then does the leader block for the rest of @timeout.
 *
 * @spin false: block at once. A leader that is a sender waiting for room
 * on a full socket does not spin: its wait is bandwidth-bound, and when it
 * spun, it refilled the socket in small slivers as soon as any room
 * appeared: 1 MiB streaming between two spinning endpoints fell to
 * 2.3-2.9 GB/s here, against 5.4-6.3 with only receives spinning and
 * 3.0-4.1 blocking.
 *
 * Measured here (bench/spin_methods.c, 64 B ping-pong on two cores), a
 * poll(…, 0) round costs about 0.4 us and picks a message up as fast as a
 * non-blocking read() loop on the connection, and faster than
 * epoll_wait(…, 0) followed by the read; it needs no second fd set and
 * covers every fd each round, so it is what spinning uses.
 */
static int wire_poll(struct tcp_wire *w, struct pollfd *pfd, size_t n,
		     int timeout, bool spin, struct zap_ctx *ctx)
{
	if (!spin || !w->spin_us || timeout == 0)
		return poll(pfd, n, timeout);

	uint64_t t0 = now_ns(), now = t0;
	uint64_t end = t0 + (uint64_t)w->spin_us * 1000u;
	if (timeout > 0 && end > t0 + (uint64_t)timeout * 1000000u)
		end = t0 + (uint64_t)timeout * 1000000u;
	while (now < end) {
		int r = poll(pfd, n, 0);
		if (r)
			return r;
		if (atomic_load(&w->shut) || w->host->ctx_err(ctx))
			return 0; /* wait_check() in the caller reports it */
		now = now_ns();
	}
	if (timeout > 0) {
		uint64_t spent_ms = (now - t0) / 1000000u;
		timeout = spent_ms >= (uint64_t)timeout ? 0
							: timeout - (int)spent_ms;
	}
	return poll(pfd, n, timeout);
}

/*
 * One round as leader: poll everything, read what is ready, queue the
 * messages. Called and returns with w->mu held; drops it around poll and
 * reads. @me->out_fd is our own POLLOUT interest (or -1).
 */
static int leader_round(struct tcp_wire *w, struct tcp_waiter *me,
			struct zap_ctx *ctx)
{
	const struct zap_host *host = w->host;
	size_t n = 0, want = 4;
	int timeout = host->ctx_timeout_ms(ctx);
	int cfd = host->ctx_fd(ctx);
	struct tcp_rx_msg *mhead = NULL, **mtail = &mhead;
	int err = 0;

	reap(w);
	for (struct tcp_conn *c = w->conns; c; c = c->next)
		want++;
	want += 2u * w->nwaiters;
	if (pollset_reserve(w, want))
		return -ENOMEM;
	struct pollfd *pfd = w->pfd;
	struct tcp_slot *sl = w->slot;

	pfd[n] = (struct pollfd){.fd = w->kick_fd, .events = POLLIN};
	sl[n++] = (struct tcp_slot){SLOT_KICK, NULL};
	pfd[n] = (struct pollfd){.fd = w->stop_fd, .events = POLLIN};
	sl[n++] = (struct tcp_slot){SLOT_STOP, NULL};
	if (cfd >= 0) {
		pfd[n] = (struct pollfd){.fd = cfd, .events = POLLIN};
		sl[n++] = (struct tcp_slot){SLOT_CTX, NULL};
	}
	if (me->out_fd >= 0) {
		pfd[n] = (struct pollfd){.fd = me->out_fd, .events = POLLOUT};
		sl[n++] = (struct tcp_slot){SLOT_OUT, NULL};
	}
	for (struct tcp_waiter *x = w->waiters; x; x = x->next) {
		if (x->ctx_fd >= 0 && !x->ctx_fired) {
			pfd[n] = (struct pollfd){.fd = x->ctx_fd, .events = POLLIN};
			sl[n++] = (struct tcp_slot){SLOT_WCTX, x};
		}
		if (x->out_fd >= 0 && !x->out_ready) {
			pfd[n] = (struct pollfd){.fd = x->out_fd, .events = POLLOUT};
			sl[n++] = (struct tcp_slot){SLOT_WOUT, x};
		}
	}
	size_t first_conn = n;
	for (struct tcp_conn *c = w->conns; c; c = c->next) {
		if (c->rx_eof || c->dead)
			continue;
		if (c->alloc_wait) {
			timeout = ms_min(timeout, TCP_ALLOC_RETRY_MS);
			c->alloc_wait = false;
			c->rx_ready = true; /* retry the allocation */
			continue;
		}
		if (conn_held(w, c))
			continue;
		if (c->rx_ready)
			timeout = 0;
		c->rx_res = 0;
		pfd[n] = (struct pollfd){.fd = c->fd, .events = POLLIN};
		sl[n++] = (struct tcp_slot){SLOT_CONN, c};
	}
	/* alloc_wait conns were skipped from polling but must be retried; put
	 * them in as rx_ready slots with no fd. */
	for (struct tcp_conn *c = w->conns; c; c = c->next)
		if (c->rx_ready && !c->rx_eof && !c->dead &&
		    !conn_held(w, c)) {
			bool listed = false;
			for (size_t i = first_conn; i < n; i++)
				if (sl[i].p == c)
					listed = true;
			if (!listed) {
				c->rx_res = 0;
				pfd[n] = (struct pollfd){.fd = -1};
				sl[n++] = (struct tcp_slot){SLOT_CONN, c};
			}
		}

	pthread_mutex_unlock(&w->mu);

	int r = wire_poll(w, pfd, n, timeout, me->out_fd < 0, ctx);
	if (r < 0 && errno != EINTR) {
		err = -errno;
		r = 0;
	}
	if (r < 0)
		r = 0;
	for (size_t i = first_conn; i < n; i++) {
		struct tcp_conn *c = sl[i].p;
		if (pfd[i].revents || c->rx_ready)
			c->rx_res = conn_rx(w, c, &mtail);
	}

	pthread_mutex_lock(&w->mu);
	bool changed = false;
	for (size_t i = 0; i < n; i++) {
		short re = pfd[i].revents;
		switch (sl[i].kind) {
		case SLOT_KICK:
			if (re && !atomic_load(&w->shut)) {
				uint64_t v;
				ssize_t k = read(w->kick_fd, &v, sizeof(v));
				(void)k;
			}
			break;
		case SLOT_OUT:
			if (re)
				me->out_ready = true;
			break;
		case SLOT_WCTX:
		case SLOT_WOUT:
			if (re && waiter_live(w, sl[i].p)) {
				struct tcp_waiter *x = sl[i].p;
				if (sl[i].kind == SLOT_WCTX)
					x->ctx_fired = true;
				else
					x->out_ready = true;
				changed = true;
			}
			break;
		case SLOT_CONN: {
			struct tcp_conn *c = sl[i].p;
			if (c->rx_res == RX_EOF || c->rx_res == RX_EOF_PARTIAL) {
				if (c->rx_res == RX_EOF_PARTIAL)
					host->log(ZAP_LOG_WARN, w->dom,
						  "dropping a partial message from %s: %s",
						  c->raddr, c->rx_why);
				else
					host->log(ZAP_LOG_DEBUG, w->dom,
						  "%s closed the connection", c->raddr);
				/* Everything was read. Close now (a clean FIN:
				 * the peer still reads what we queued before),
				 * or, if a frame of ours is still going out,
				 * right after it: see conn_rx_done(). */
				conn_rx_done(w, c);
				changed = true;
			} else if (c->rx_res < 0) {
				host->log(ZAP_LOG_WARN, w->dom,
					  "dropping connection to %s: %s",
					  c->raddr, c->rx_why);
				conn_kill(w, c);
				changed = true;
			}
			c->rx_res = 0;
			break;
		}
		default:
			break;
		}
	}
	if (mhead) {
		if (w->qtail)
			w->qtail->next = mhead;
		else
			w->qhead = mhead;
		struct tcp_rx_msg *t = mhead;
		while (t->next)
			t = t->next;
		w->qtail = t;
		changed = true;
	}
	if (changed)
		wake_all(w);
	return err;
}

static int wait_check(struct tcp_wire *w, struct tcp_waiter *me,
		      struct zap_ctx *ctx)
{
	if (atomic_load(&w->shut))
		return -ESHUTDOWN;
	int e = w->host->ctx_err(ctx);
	if (e)
		return e;
	(void)me;
	return 0;
}

/*
 * Wait for something to change (mu held): lead one poll round if nobody
 * does, else sleep as a follower until woken or the ctx deadline.
 */
static int wait_step(struct tcp_wire *w, struct tcp_waiter *me,
		     struct zap_ctx *ctx)
{
	int err = wait_check(w, me, ctx);
	if (err)
		return err;
	if (!w->leader) {
		w->leader = true;
		w->lead = me;
		err = leader_round(w, me, ctx);
		w->leader = false;
		w->lead = NULL;
		/* Someone else may need to lead now. */
		wake_all(w);
		return err;
	}

	me->ctx_fd = w->host->ctx_fd(ctx);
	me->next = w->waiters;
	w->waiters = me;
	w->nwaiters++;
	if (me->ctx_fd >= 0 || me->out_fd >= 0)
		kick(w); /* the leader must add our fds to its set */
	int tmo = w->host->ctx_timeout_ms(ctx);
	if (tmo < 0) {
		pthread_cond_wait(&w->cond, &w->mu);
	} else {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += tmo / 1000;
		ts.tv_nsec += (long)(tmo % 1000) * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&w->cond, &w->mu, &ts);
	}
	waiter_del(w, me);
	me->ctx_fired = false;
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Dial                                                                      */
/* ------------------------------------------------------------------------ */

/* Wait for @events on @fd, the ctx or shutdown. 0, or a negative errno. */
static int wait_fd(struct tcp_wire *w, int fd, short events,
		   struct zap_ctx *ctx, int limit_ms)
{
	for (;;) {
		struct pollfd p[3] = {
			{.fd = fd, .events = events},
			{.fd = w->stop_fd, .events = POLLIN},
			{.fd = w->host->ctx_fd(ctx), .events = POLLIN},
		};
		int tmo = ms_min(w->host->ctx_timeout_ms(ctx), limit_ms);
		int r = poll(p, 3, tmo);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (atomic_load(&w->shut))
			return -ESHUTDOWN;
		int e = w->host->ctx_err(ctx);
		if (e)
			return e;
		if (p[0].revents)
			return 0;
		if (r == 0)
			return -ETIMEDOUT;
	}
}

static int dial_one(struct tcp_wire *w, const char *peer,
		    const struct addrinfo *ai, struct zap_ctx *ctx, int *out)
{
	int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
			ai->ai_protocol);
	if (fd < 0)
		return w->host->fail(-errno, "%s: socket: %s", w->dom,
				     strerror(errno));
	tune_socket(fd);
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
		if (errno != EINPROGRESS) {
			int e = errno;
			close(fd);
			return w->host->fail(-e, "%s: connect to %s: %s%s", w->dom,
					     peer, strerror(e),
					     e == ECONNREFUSED
						     ? " (nothing listens there)"
						     : "");
		}
		int r = wait_fd(w, fd, POLLOUT, ctx, -1);
		if (r) {
			close(fd);
			return r == -ECANCELED || r == -ETIMEDOUT || r == -ESHUTDOWN
				       ? r
				       : w->host->fail(r, "%s: connect to %s: %s",
						       w->dom, peer, strerror(-r));
		}
		int soerr = 0;
		socklen_t sl = sizeof(soerr);
		getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
		if (soerr) {
			close(fd);
			return w->host->fail(-soerr, "%s: connect to %s: %s%s",
					     w->dom, peer, strerror(soerr),
					     soerr == ECONNREFUSED
						     ? " (nothing listens there)"
						     : "");
		}
	}
	*out = fd;
	return 0;
}

/*
 * Connect to @peer, exchange HELLOs, register. mu not held. The peer's
 * handshake thread answers independently of its application, so this
 * waits about one round trip, not for the peer to call zap_recv().
 */
static int dial(struct tcp_wire *w, const char *peer, struct zap_ctx *ctx)
{
	char host[ZAP_PEER_MAX], port[8];
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_NUMERICSERV};
	struct addrinfo *res = NULL;
	struct tcp_conn *c = NULL;
	int fd = -1, r;

	if (tcp_addr_split(peer, host, sizeof(host), port, sizeof(port)) || !*host ||
	    !strcmp(port, "0"))
		return w->host->fail(-EINVAL,
				     "%s: malformed peer address \"%s\" (want host:port or [v6]:port)",
				     w->dom, peer);
	r = getaddrinfo(host, port, &hints, &res);
	if (r)
		return w->host->fail(r == EAI_NONAME || r == EAI_AGAIN
					     ? -EHOSTUNREACH
					     : -EINVAL,
				     "%s: cannot resolve %s: %s", w->dom, host,
				     gai_strerror(r));
	r = -EHOSTUNREACH;
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		r = dial_one(w, peer, ai, ctx, &fd);
		if (!r || r == -ECANCELED || r == -ETIMEDOUT || r == -ESHUTDOWN)
			break;
	}
	freeaddrinfo(res);
	if (r)
		return r;

	c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return -ENOMEM;
	}
	c->fd = fd;
	c->dialed = true;
	c->nonce = rand64();
	unsigned char hb[TCP_HDR + TCP_HELLO_MAX];
	size_t hn = hello_build(w, c->nonce, hb);
	/* A fresh socket's send buffer always takes a HELLO. */
	ssize_t k = send(fd, hb, hn, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (k != (ssize_t)hn) {
		r = w->host->fail(k < 0 ? -errno : -EPIPE, "%s: send HELLO to %s: %s",
				  w->dom, peer, k < 0 ? strerror(errno) : "short write");
		goto fail;
	}
	uint64_t deadline = now_ms() + w->hs_timeout_ms;
	for (;;) {
		char why[160];
		int h = hello_read(w, c, why, sizeof(why));
		if (h == 1)
			break;
		if (h < 0) {
			r = w->host->fail(h == -EPIPE ? -ECONNRESET : h,
					  "%s: handshake with %s failed: %s", w->dom,
					  peer, why);
			goto fail;
		}
		uint64_t now = now_ms();
		if (now >= deadline) {
			r = w->host->fail(-ETIMEDOUT, "%s: %s did not answer the handshake",
					  w->dom, peer);
			goto fail;
		}
		r = wait_fd(w, fd, POLLIN, ctx, (int)(deadline - now));
		if (r == -ETIMEDOUT && !w->host->ctx_err(ctx))
			continue; /* our own handshake limit; checked above */
		if (r)
			goto fail;
	}

	pthread_mutex_lock(&w->mu);
	r = conn_register(w, c, peer);
	pthread_mutex_unlock(&w->mu);
	if (r)
		goto fail;
	w->host->log(ZAP_LOG_DEBUG, w->dom, "connected to %s (%s)", peer, c->raddr);
	return 0;
fail:
	conn_free(c);
	return r;
}

/* ------------------------------------------------------------------------ */
/* Send and receive                                                          */
/* ------------------------------------------------------------------------ */

int tcp_wire_send(struct tcp_wire *w, const char *peer, const void *buf,
		  size_t len, struct zap_ctx *ctx)
{
	struct tcp_waiter me = {.tx = true, .ctx_fd = -1, .out_fd = -1};
	struct tcp_conn *c = NULL;
	bool retried = false;
	int err = 0;

	if (len > w->max_msg)
		return w->host->fail(-EMSGSIZE,
				     "%s: message of %zu bytes exceeds the maximum %" PRIu64
				     " (ZAP_MAX_MSG_BYTES)",
				     w->dom, len, w->max_msg);
	if (strlen(peer) >= ZAP_PEER_MAX)
		return w->host->fail(-EINVAL, "%s: peer address too long", w->dom);

	pthread_mutex_lock(&w->mu);
again:
	for (;;) {
		err = wait_check(w, &me, ctx);
		if (err)
			goto out_unlock;
		struct tcp_route *r = route_find(w, peer);
		if (!r) {
			r = calloc(1, sizeof(*r));
			if (!r) {
				err = -ENOMEM;
				goto out_unlock;
			}
			/* Placeholder: concurrent senders to the same new
			 * address wait for this dial instead of racing it. */
			snprintf(r->addr, sizeof(r->addr), "%s", peer);
			r->dialing = true;
			r->next = w->routes;
			w->routes = r;
			pthread_mutex_unlock(&w->mu);
			err = dial(w, peer, ctx);
			pthread_mutex_lock(&w->mu);
			/* conn_register() turned the placeholder into a
			 * route; on failure remove it. */
			r = route_find(w, peer);
			if (r && r->dialing) {
				if (err)
					route_del(w, r);
				else
					r->dialing = false;
			}
			notify(w, true);
			if (err)
				goto out_unlock;
			continue;
		}
		if (r->dialing && !r->peer) {
			err = wait_step(w, &me, ctx);
			if (err)
				goto out_unlock;
			continue;
		}
		r->dialing = false;
		c = r->peer ? r->peer->tx : NULL;
		if (!c && r->peer && peer_draining(w, r->peer)) {
			/* A connection to this peer is retired but still
			 * being read (e.g. after a send abandoned mid-frame):
			 * frames we wrote there must reach the peer before
			 * any on a new connection, so dial once it closed. */
			err = wait_step(w, &me, ctx);
			if (err)
				goto out_unlock;
			continue;
		}
		if (!c) {
			/* The peer's connections are gone: dial again. */
			route_del(w, r);
			continue;
		}
		if (!c->tx_busy)
			break;
		err = wait_step(w, &me, ctx);
		if (err)
			goto out_unlock;
	}
	c->tx_busy = true;
	pthread_mutex_unlock(&w->mu);

	unsigned char hdr[TCP_HDR];
	hdr_put(hdr, TCP_T_DATA, len);
	struct iovec iov[2] = {{hdr, TCP_HDR}, {(void *)buf, len}};
	struct msghdr mh = {.msg_iov = iov, .msg_iovlen = len ? 2 : 1};
	size_t total = TCP_HDR + len, done = 0;
	bool locked = false;

	while (done < total) {
		ssize_t k = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (k > 0) {
			done += (size_t)k;
			while (mh.msg_iovlen && (size_t)k >= mh.msg_iov->iov_len) {
				k -= (ssize_t)mh.msg_iov->iov_len;
				mh.msg_iov++;
				mh.msg_iovlen--;
			}
			if (mh.msg_iovlen) {
				mh.msg_iov->iov_base = (char *)mh.msg_iov->iov_base + k;
				mh.msg_iov->iov_len -= (size_t)k;
			}
			continue;
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && errno == EAGAIN) {
			/* Full socket: wait for room while (as leader, or
			 * through the leader) still draining inbound data. */
			pthread_mutex_lock(&w->mu);
			me.out_fd = c->fd;
			me.out_ready = false;
			while (!me.out_ready && !err && !c->dead)
				err = wait_step(w, &me, ctx);
			me.out_fd = -1;
			if (c->dead && !err)
				err = w->host->fail(-ECONNRESET,
						    "%s: connection to %s was lost",
						    w->dom, c->raddr);
			if (err) {
				locked = true;
				break;
			}
			pthread_mutex_unlock(&w->mu);
			continue;
		}
		err = k < 0 ? -errno : -EPIPE;
		err = w->host->fail(err, "%s: send to %s: %s", w->dom, c->raddr,
				    strerror(-err));
		break;
	}

	if (!locked)
		pthread_mutex_lock(&w->mu);
	c->tx_busy = false;
	c->tx_used = true;
	if (err && done && (err == -ECANCELED || err == -ETIMEDOUT) &&
	    !c->dead) {
		/*
		 * A partial frame cannot be taken back, so no new frame may
		 * start on this connection. Closing it would discard what
		 * the peer sent us and not yet read, and (unread data) make
		 * the kernel reset it, so the peer would lose our earlier,
		 * complete frames still in flight. Instead retire it: FIN
		 * after the partial frame (the peer drops only that one),
		 * keep reading to the peer's FIN, then close.
		 */
		w->host->log(ZAP_LOG_WARN, w->dom,
			     "retiring connection to %s: send interrupted mid-frame (%s)",
			     c->raddr, strerror(-err));
		retire(c);
		if (c->peer && c->peer->tx == c)
			peer_pick_tx(w, c->peer);
		w->host->fail(err, "%s: send to %s interrupted mid-frame; connection retired",
			      w->dom, c->raddr);
	} else if (err && done) {
		/* A partial frame cannot be taken back: the stream is lost. */
		w->host->log(ZAP_LOG_WARN, w->dom,
			     "dropping connection to %s: send interrupted mid-frame (%s)",
			     c->raddr, strerror(-err));
		conn_kill(w, c);
		if (err == -ECANCELED || err == -ETIMEDOUT)
			w->host->fail(err, "%s: send to %s interrupted mid-frame; connection closed",
				      w->dom, c->raddr);
	} else if (err && err != -ECANCELED && err != -ETIMEDOUT &&
		   err != -ESHUTDOWN) {
		conn_kill(w, c);
	}
	conn_tx_done(w, c);
	if (!w->leader)
		reap(w);
	else if (c->dead)
		kick(w);
	notify(w, true);
	if (err && !done && !retried && (err == -EPIPE || err == -ECONNRESET)) {
		/*
		 * The connection was stale: its peer had gone (and may be back,
		 * restarted at the same address) before we read its FIN or
		 * reset. Nothing of this frame was written, so it cannot
		 * arrive twice: send it once more, on a fresh connection.
		 */
		retried = true;
		c = NULL;
		err = 0;
		goto again;
	}
out_unlock:
	pthread_mutex_unlock(&w->mu);
	return err;
}

int tcp_wire_recv(struct tcp_wire *w, struct zap_ctx *ctx, struct zap_msg **out)
{
	struct tcp_waiter me = {.ctx_fd = -1, .out_fd = -1};
	int err = 0;

	pthread_mutex_lock(&w->mu);
	while (!w->qhead) {
		err = wait_step(w, &me, ctx);
		if (err)
			goto out;
	}
	if (atomic_load(&w->shut)) {
		err = -ESHUTDOWN;
		goto out;
	}
	struct tcp_rx_msg *m = w->qhead;
	w->qhead = m->next;
	if (!w->qhead)
		w->qtail = NULL;
	else
		notify(w, false); /* more for other receivers */
	m->next = NULL;
	*out = &m->msg;
out:
	pthread_mutex_unlock(&w->mu);
	return err;
}

/* ------------------------------------------------------------------------ */
/* Open / close                                                              */
/* ------------------------------------------------------------------------ */

/* The address others can reach a wildcard listener at: the source address
 * of the default route (no packet is sent), else loopback. */
static void wildcard_sendable(int family, const char *port, char *buf,
			      size_t len)
{
	struct sockaddr_storage ss = {0};
	socklen_t sl;
	int fd = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (family == AF_INET6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(9);
		inet_pton(AF_INET6, "2001:db8::1", &s6->sin6_addr);
		sl = sizeof(*s6);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
		s4->sin_family = AF_INET;
		s4->sin_port = htons(9);
		inet_pton(AF_INET, "192.0.2.1", &s4->sin_addr);
		sl = sizeof(*s4);
	}
	if (fd >= 0 && connect(fd, (struct sockaddr *)&ss, sl) == 0) {
		struct sockaddr_storage me;
		socklen_t ml = sizeof(me);
		if (getsockname(fd, (struct sockaddr *)&me, &ml) == 0) {
			char a[ZAP_PEER_MAX], h[ZAP_PEER_MAX], p[8];
			addr_format((struct sockaddr *)&me, ml, a, sizeof(a));
			if (!tcp_addr_split(a, h, sizeof(h), p, sizeof(p)) &&
			    !host_is_wildcard(h)) {
				snprintf(buf, len, strchr(h, ':') ? "[%s]:%s" : "%s:%s",
					 h, port);
				close(fd);
				return;
			}
		}
	}
	if (fd >= 0)
		close(fd);
	snprintf(buf, len, family == AF_INET6 ? "[::1]:%s" : "127.0.0.1:%s", port);
}

static int wire_listen(struct tcp_wire *w, const char *listen_addr)
{
	char host[ZAP_PEER_MAX], port[8];
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
	struct addrinfo *res = NULL;
	int r, fd = -1, one = 1;

	if (tcp_addr_split(listen_addr, host, sizeof(host), port, sizeof(port)))
		return w->host->fail(-EINVAL,
				     "%s: malformed listen address \"%s\" (ZAP_LISTEN; want host:port)",
				     w->dom, listen_addr);
	r = getaddrinfo(host_is_wildcard(host) && strcmp(host, "::") ? NULL : host,
			port, &hints, &res);
	if (r)
		return w->host->fail(-EINVAL, "%s: cannot resolve listen address %s: %s",
				     w->dom, listen_addr, gai_strerror(r));
	r = -EADDRNOTAVAIL;
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		/* A bare wildcard binds IPv4 any, which every peer string
		 * form reaches; "[::]" asks for dual-stack explicitly. */
		if (!strcmp(host, "::") ? ai->ai_family != AF_INET6
					 : (host_is_wildcard(host) &&
					    ai->ai_family != AF_INET))
			continue;
		fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
			    ai->ai_protocol);
		if (fd < 0) {
			r = -errno;
			continue;
		}
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (ai->ai_family == AF_INET6) {
			int zero = 0;
			setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
		}
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
		    listen(fd, SOMAXCONN) == 0) {
			r = 0;
			break;
		}
		r = -errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (r)
		return w->host->fail(r, "%s: cannot listen on %s: %s", w->dom,
				     listen_addr, strerror(-r));

	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	getsockname(fd, (struct sockaddr *)&ss, &sl);
	addr_format((struct sockaddr *)&ss, sl, w->bound, sizeof(w->bound));
	tcp_addr_split(w->bound, host, sizeof(host), port, sizeof(port));
	if (host_is_wildcard(host))
		wildcard_sendable(ss.ss_family, port, w->addr, sizeof(w->addr));
	else
		snprintf(w->addr, sizeof(w->addr), "%s", w->bound);
	w->lfd = fd;
	return 0;
}

/* ZAP_TCP_SPIN_US: microseconds to busy-poll before sleeping; plain
 * decimal, 0..TCP_SPIN_MAX_US, unset or empty = 0. */
static int spin_setting(const struct zap_host *host, const char *dom,
			unsigned *out)
{
	const char *v = getenv(TCP_SPIN_ENV);
	unsigned long n = 0;

	*out = 0;
	if (!v || !*v)
		return 0;
	for (const char *p = v; *p; p++) {
		if (*p < '0' || *p > '9' || n > TCP_SPIN_MAX_US)
			return host->fail(-EINVAL,
					  "%s: %s=\"%.32s\" is not a number of microseconds from 0 to %u",
					  dom, TCP_SPIN_ENV, v, TCP_SPIN_MAX_US);
		n = n * 10 + (unsigned long)(*p - '0');
	}
	if (n > TCP_SPIN_MAX_US)
		return host->fail(-EINVAL,
				  "%s: %s=\"%.32s\" is not a number of microseconds from 0 to %u",
				  dom, TCP_SPIN_ENV, v, TCP_SPIN_MAX_US);
	*out = (unsigned)n;
	return 0;
}

int tcp_parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	uint64_t n = 0;

	if (!*s)
		return -EINVAL;
	for (; *s; s++) {
		uint64_t d = (uint64_t)(*s - '0');

		if (*s < '0' || *s > '9' || n > (UINT64_MAX - d) / 10)
			return -EINVAL;
		n = n * 10 + d;
	}
	if (n < min || n > max)
		return -EINVAL;
	*out = n;
	return 0;
}

/* A limit from the environment: plain decimal in [@min, @max]; unset or
 * empty: @def. A bad value fails the open, naming the variable. */
static int env_limit(const struct zap_host *host, const char *dom,
		     const char *name, unsigned def, unsigned min, unsigned max,
		     const char *unit, unsigned *out)
{
	const char *v = getenv(name);
	uint64_t n;

	*out = def;
	if (!v || !*v)
		return 0;
	if (tcp_parse_uint(v, min, max, &n))
		return host->fail(-EINVAL, "%s: %s=\"%.32s\" is not a number of %s from %u to %u",
				  dom, name, v, unit, min, max);
	*out = (unsigned)n;
	return 0;
}

int tcp_wire_open(const struct tcp_wire_args *args, struct tcp_wire **out)
{
	const struct zap_host *host = args->host;
	struct tcp_wire *w = calloc(1, sizeof(*w));
	int r;

	if (!w)
		return host->fail(-ENOMEM, "%s: out of memory", args->domain);
	w->host = host;
	w->dom = args->domain;
	w->alloc = args->alloc;
	w->max_msg = args->max_msg_size;
	w->id = rand64();
	w->lfd = w->kick_fd = w->stop_fd = -1;
	atomic_init(&w->shut, false);
	pthread_mutex_init(&w->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w->cond, &ca);
	pthread_condattr_destroy(&ca);

	r = spin_setting(host, w->dom, &w->spin_us);
	if (!r)
		r = env_limit(host, w->dom, TCP_HS_ENV, TCP_HS_TIMEOUT_MS,
			      TCP_HS_MIN_MS, TCP_HS_MAX_MS, "milliseconds",
			      &w->hs_timeout_ms);
	if (!r)
		r = env_limit(host, w->dom, TCP_PENDING_ENV, TCP_PENDING_MAX, 1,
			      TCP_PENDING_LIMIT, "connections", &w->pending_max);
	if (r)
		goto fail;

	w->kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	w->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w->kick_fd < 0 || w->stop_fd < 0) {
		r = host->fail(-errno, "%s: eventfd: %s", w->dom, strerror(errno));
		goto fail;
	}
	r = wire_listen(w, args->listen);
	if (r)
		goto fail;
	r = pthread_create(&w->acc, NULL, accept_main, w);
	if (r) {
		r = host->fail(-r, "%s: cannot start the handshake thread: %s",
			       w->dom, strerror(r));
		goto fail;
	}
	w->acc_started = true;
	host->log(ZAP_LOG_DEBUG, w->dom, "listening on %s (reachable as %s)",
		  w->bound, w->addr);
	*out = w;
	return 0;
fail:
	tcp_wire_destroy(w);
	return r;
}

void tcp_wire_shutdown(struct tcp_wire *w)
{
	uint64_t one = 1;
	ssize_t k;

	if (!w)
		return;
	atomic_store(&w->shut, true);
	k = write(w->stop_fd, &one, sizeof(one));
	(void)k;
	pthread_mutex_lock(&w->mu);
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->mu);
}

void tcp_wire_destroy(struct tcp_wire *w)
{
	if (!w)
		return;
	if (w->acc_started) {
		tcp_wire_shutdown(w);
		pthread_join(w->acc, NULL);
	}
	while (w->pending) {
		struct tcp_conn *c = w->pending;
		w->pending = c->next;
		conn_free(c);
	}
	while (w->conns) {
		struct tcp_conn *c = w->conns;
		w->conns = c->next;
		conn_free(c);
	}
	while (w->peers) {
		struct tcp_peer *p = w->peers;
		w->peers = p->next;
		free(p);
	}
	while (w->routes) {
		struct tcp_route *r = w->routes;
		w->routes = r->next;
		free(r);
	}
	while (w->qhead) {
		struct tcp_rx_msg *m = w->qhead;
		w->qhead = m->next;
		m->msg.release(&m->msg);
	}
	if (w->lfd >= 0)
		close(w->lfd);
	if (w->kick_fd >= 0)
		close(w->kick_fd);
	if (w->stop_fd >= 0)
		close(w->stop_fd);
	free(w->pfd);
	free(w->slot);
	pthread_cond_destroy(&w->cond);
	pthread_mutex_destroy(&w->mu);
	free(w);
}

int tcp_wire_address(const struct tcp_wire *w, char *buf, size_t len)
{
	if (strlen(w->addr) >= len)
		return -ENOSPC;
	memcpy(buf, w->addr, strlen(w->addr) + 1);
	return 0;
}

uint64_t tcp_wire_max_msg(const struct tcp_wire *w)
{
	return w->max_msg;
}

void tcp_wire_kick(struct tcp_wire *w)
{
	kick(w);
}
