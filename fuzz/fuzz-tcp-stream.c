/* SPDX-License-Identifier: MIT */
/*
 * The default/uma wire's handshake and frame reader, end to end: one real
 * endpoint (zap_pick "=default", max message 64 KiB) and, per input, one
 * raw TCP connection that sends the input as its byte stream and then
 * closes (FIN, or a reset). The endpoint's accept thread reads the HELLO,
 * its progress engine the frames; this harness drives zap_recv() until the
 * endpoint has closed the connection.
 *
 * Oracle: an independent reading of WIRE.md over the same bytes. The
 * endpoint must answer with its own HELLO (of the version offered, 2 or 3)
 * exactly when the HELLO is valid, and deliver exactly the messages
 * completed before the first bad or truncated frame, in the order they
 * complete, byte for byte: DATA frames, and on version 3 messages in parts
 * (BEGIN, MORE) with DATA frames between them; each with the peer string
 * the connection proves (source 127.0.0.1, the announced port): a HELLO
 * claiming a name or another host is refused. It must
 * close every connection (protocol error, EOF) promptly: 5 s without that
 * is a hang.
 *
 * First input byte: bit 0 prepend a valid HELLO (then bits 2-3 choose its
 * address: a name, a literal, a wildcard, [::]; bit 6 its version, 3 or
 * 2); bit 1 write the stream in
 * pieces of 1, 5, 17 or 200 bytes (bits 4-5), yielding between them, so
 * that the endpoint reads partial headers, HELLOs and payloads.
 */
#include <sched.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <zap/zap.h>

#include "fuzz.h"
#include "zap-addr.h"

#define HDR 16
#define MAX_MSG (64u << 10)
#define SOLO_MAX (32u << 10) /* version 3: larger messages go in parts */
#define MAX_EXPECT 64
/* HELLO payload: id, nonce, maximum message size (8 each), address. */
#define HELLO_FIXED 24
#define HELLO_MAX (HELLO_FIXED + ZAP_PEER_MAX - 1)

static struct zap_transport *ep;
static struct sockaddr_in ep_sa;
static struct zap_ctx *ctx;
static uint64_t iter;

static void quiet(enum zap_log_level l, const char *d, const char *m, void *u)
{
	(void)l;
	(void)d;
	(void)m;
	(void)u;
}

static void setup(void)
{
	struct zap_attr a = {.size = sizeof(a), .listen = "127.0.0.1:0",
			     .max_msg_size = MAX_MSG};
	char addr[ZAP_PEER_MAX];

	setenv("ZAP_PLUGIN_PATH", "", 1);
	setenv("ZAP_TRANSPORT_QUIET", "1", 1);
	zap_set_log_handler(quiet, NULL);
	if (zap_pick("=default", 0, &a, &ep) || zap_transport_address(ep, addr, sizeof(addr)) ||
	    zap_ctx_new(&ctx)) {
		fprintf(stderr, "fuzz-tcp-stream: cannot open an endpoint\n");
		abort();
	}
	char *colon = strrchr(addr, ':');
	*colon = '\0';
	ep_sa.sin_family = AF_INET;
	ep_sa.sin_port = htons((uint16_t)atoi(colon + 1));
	inet_pton(AF_INET, addr, &ep_sa.sin_addr);
}

static uint64_t rd64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

static void wr64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--) {
		p[i] = (uint8_t)v;
		v >>= 8;
	}
}

/* WIRE.md's header: magic, version @ver, @type, reserved 0, length <= @max. */
static bool hdr_ok(const uint8_t *h, unsigned ver, unsigned type, uint64_t max,
		   uint64_t *len)
{
	if (h[0] != 0x5a || h[1] != 0x41 || h[2] != 0x50 || h[3] != 0x57 || h[4] != ver ||
	    h[5] != type || h[6] || h[7])
		return false;
	*len = rd64(h + 8);
	return *len <= max;
}

/* A HELLO address: no NUL, an address by the shared grammar (zap-addr.h,
 * whose parser fuzz-address.c checks against its own reading), port not 0,
 * and (WIRE.md, "What a HELLO may claim") a wildcard or a literal naming
 * the connection's source, 127.0.0.1 (also v4-mapped), and not the
 * endpoint's own address. Sets *@port. */
static bool hello_addr_ok(const char *a, size_t n, char *port)
{
	char s[ZAP_PEER_MAX];
	struct zaddr z;
	struct in6_addr a6;
	static const uint8_t lo_mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff,
					      127, 0, 0, 1};

	if (!n || n >= sizeof(s) || memchr(a, '\0', n))
		return false;
	memcpy(s, a, n);
	s[n] = '\0';
	if (zaddr_parse(s, &z) || !z.port_num)
		return false;
	strcpy(port, z.port);
	if (z.wildcard)
		return true;
	if (z.kind == ZADDR_NAME)
		return false;
	if (z.kind == ZADDR_IPV4 && strcmp(z.host, "127.0.0.1"))
		return false;
	if (z.kind == ZADDR_IPV6 && (inet_pton(AF_INET6, z.host, &a6) != 1 ||
				     memcmp(&a6, lo_mapped, 16)))
		return false;
	return z.port_num != ntohs(ep_sa.sin_port);
}

struct expect {
	bool hello_ok;
	unsigned ver;
	char peer[ZAP_PEER_MAX];
	size_t n;                /* messages completed before anything bad */
	uint8_t *msg[MAX_EXPECT]; /* their bytes */
	size_t len[MAX_EXPECT];
};

static void expect_add(struct expect *e, const uint8_t *p, size_t len)
{
	e->msg[e->n] = malloc(len ? len : 1);
	if (!e->msg[e->n])
		abort();
	memcpy(e->msg[e->n], p, len);
	e->len[e->n++] = len;
}

/* Version 3's frames after the HELLO at @pos: DATA up to SOLO_MAX, and one
 * message at a time in parts, BEGIN (total u64, bytes) then MORE. */
static void reference_v3(const uint8_t *s, size_t n, size_t pos, struct expect *e)
{
	uint8_t *open = NULL;
	uint64_t total = 0, got = 0, len;

	while (n - pos >= HDR && e->n < MAX_EXPECT) {
		const uint8_t *h = s + pos;
		if (hdr_ok(h, 3, 2, SOLO_MAX, &len)) {
			if (len > n - pos - HDR)
				break;
			expect_add(e, h + HDR, len);
		} else if (hdr_ok(h, 3, 4, MAX_MSG + 8, &len)) {
			if (open || len < 9 || n - pos - HDR < 8)
				break;
			total = rd64(h + HDR);
			if (total > MAX_MSG || len - 8 > total || len > n - pos - HDR)
				break;
			open = malloc(total);
			if (!open)
				abort();
			memcpy(open, h + HDR + 8, len - 8);
			got = len - 8;
		} else if (hdr_ok(h, 3, 5, MAX_MSG + 8, &len)) {
			if (!open || !len || len > total - got || len > n - pos - HDR)
				break;
			memcpy(open + got, h + HDR, len);
			got += len;
		} else {
			break;
		}
		if (open && got == total) {
			expect_add(e, open, total);
			free(open);
			open = NULL;
		}
		pos += HDR + len;
	}
	free(open);
}

static void reference(const uint8_t *s, size_t n, struct expect *e)
{
	uint64_t len;
	size_t pos;

	memset(e, 0, sizeof(*e));
	if (n < HDR || (!hdr_ok(s, 2, 1, HELLO_MAX, &len) && !hdr_ok(s, 3, 1, HELLO_MAX, &len)) ||
	    len < HELLO_FIXED + 3 || HDR + len > n)
		return;
	e->ver = s[4];
	char port[8];
	if (!rd64(s + HDR) || !rd64(s + HDR + 16) ||
	    !hello_addr_ok((const char *)s + HDR + HELLO_FIXED, len - HELLO_FIXED, port))
		return;
	e->hello_ok = true;
	snprintf(e->peer, sizeof(e->peer), "127.0.0.1:%s", port);
	pos = HDR + len;
	if (e->ver == 3) {
		reference_v3(s, n, pos, e);
		return;
	}
	while (n - pos >= HDR && e->n < MAX_EXPECT) {
		if (!hdr_ok(s + pos, 2, 2, MAX_MSG, &len) || len > n - pos - HDR)
			return;
		expect_add(e, s + pos + HDR, len);
		pos += HDR + len;
	}
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const addrs[4] = { "fuzz-peer.example:7", "127.0.0.1:65535",
					      "0.0.0.0:4242", "[::]:9" };
	if (!ep)
		setup();
	if (!size || size > 8192)
		return 0;
	unsigned mode = data[0];
	data++;
	size--;

	/* The stream: optionally a valid HELLO, then the input. */
	size_t n = size;
	uint8_t *s = malloc(HELLO_MAX + HDR + size);
	if (!s)
		abort();
	if (mode & 1) {
		const char *a = addrs[(mode >> 2) & 3];
		size_t al = strlen(a);
		const uint8_t h[8] = { 0x5a, 0x41, 0x50, 0x57, mode & 64 ? 2 : 3, 1, 0, 0 };
		memcpy(s, h, 8);
		wr64(s + 8, HELLO_FIXED + al);
		wr64(s + HDR, 0x1000 + ++iter); /* a new instance each time */
		wr64(s + HDR + 8, iter * 77);
		wr64(s + HDR + 16, MAX_MSG);
		memcpy(s + HDR + HELLO_FIXED, a, al);
		memcpy(s + HDR + HELLO_FIXED + al, data, size);
		n = HDR + HELLO_FIXED + al + size;
	} else {
		memcpy(s, data, size);
	}
	struct expect e;
	reference(s, n, &e);

	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1, cr = fd < 0 ? -1 : connect(fd, (struct sockaddr *)&ep_sa, sizeof(ep_sa));
	if (cr && errno == EINTR) {
		/* libFuzzer's timer signal: the connect goes on regardless. */
		struct pollfd p = { .fd = fd, .events = POLLOUT };
		int err = 0;
		socklen_t el = sizeof(err);
		while ((cr = poll(&p, 1, 5000)) < 0 && errno == EINTR)
			;
		cr = cr == 1 && !getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) && !err ? 0 : -1;
	}
	if (cr) {
		perror("fuzz-tcp-stream: connect");
		abort();
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* The stream goes out whole (a socket buffer holds it), then FIN. */
	static const size_t pieces[4] = { 1, 5, 17, 200 };
	size_t done = 0, piece = mode & 2 ? pieces[(mode >> 4) & 3] : n;
	while (done < n) {
		size_t want = n - done < piece ? n - done : piece;
		ssize_t k = send(fd, s + done, want, MSG_NOSIGNAL);
		if (k <= 0)
			break; /* the endpoint may already have hung up */
		done += (size_t)k;
		if (mode & 2)
			sched_yield();
	}
	shutdown(fd, SHUT_WR);

	/* Drive the endpoint until it closes the connection; collect. */
	uint8_t answer[HDR + HELLO_MAX];
	size_t got_answer = 0, got = 0;
	bool closed = false, extra = false;
	uint64_t deadline = now_ms() + 5000;
	for (;;) {
		struct zap_msg *m;
		/* Once the endpoint has closed the connection, every message
		 * from it is queued already: take them without waiting. */
		zap_ctx_set_timeout(ctx, closed ? 0 : 1000000ull);
		int r = zap_recv(ep, ctx, &m);
		if (!r) {
			if (got >= e.n) {
				extra = true;
			} else {
				FUZZ_CHECK(zap_msg_len(m) == e.len[got]);
				FUZZ_CHECK(!memcmp(zap_msg_data(m), e.msg[got], e.len[got]));
				FUZZ_CHECK(!strcmp(zap_msg_peer(m), e.peer));
			}
			got++;
			zap_msg_release(m);
		} else {
			FUZZ_CHECK(r == -ETIMEDOUT);
			if (closed)
				break;
		}
		if (!closed) {
			struct pollfd p = {.fd = fd, .events = POLLIN};
			if (poll(&p, 1, 0) > 0) {
				ssize_t k = recv(fd, answer + got_answer,
						 sizeof(answer) - got_answer, MSG_DONTWAIT);
				if (k > 0 && got_answer + (size_t)k <= sizeof(answer))
					got_answer += (size_t)k;
				else if (k <= 0 && !(k < 0 && errno == EAGAIN))
					closed = true;
			}
		}
		if (now_ms() > deadline) {
			fprintf(stderr, "fuzz-tcp-stream: the endpoint did not close the "
					"connection within 5 s (%zu of %zu messages)\n", got, e.n);
			abort();
		}
	}
	close(fd);
	FUZZ_CHECK(!extra);
	FUZZ_CHECK(got == e.n);
	/* The endpoint answers a valid HELLO with its own, and only then. */
	FUZZ_CHECK(!!got_answer == e.hello_ok);
	if (got_answer) {
		uint64_t len;
		FUZZ_CHECK(got_answer >= HDR && hdr_ok(answer, e.ver, 1, HELLO_MAX, &len) &&
			   got_answer == HDR + len);
	}
	for (size_t i = 0; i < e.n; i++)
		free(e.msg[i]);
	free(s);
	return 0;
}
