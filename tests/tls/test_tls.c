/* SPDX-License-Identifier: MIT */
/*
 * util/tls, two endpoints over socketpairs: mutual authentication with
 * pinned self-signed keys and with a CA, and every refusal the layer
 * promises (plaintext peer, unpinned key, certificate out of its validity
 * period, no client certificate, another node's certificate without its
 * key, a required fingerprint, a stalled handshake, a key file readable by
 * others). Refused clients that the layer itself would never build (an
 * expired or forged identity) are plain OpenSSL clients.
 */
#include <errno.h>
#include <malloc.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "tls-test-certs.h"
#include "zap-tls.h"

static char dir[256];
static struct tid A, B, C, Aold, Anew, CA, S1, S2;
static char pins_ab[600], pins_all[600], pins_empty[600];

static int setup(void **state)
{
	tid_tmpdir(dir, sizeof(dir));
	tid_make(&A, dir, "a", -60, 86400, NULL);
	tid_make(&B, dir, "b", -60, 86400, NULL);
	tid_make(&C, dir, "c", -60, 86400, NULL);
	tid_make(&Aold, dir, "old", -86400 * 2, -86400, NULL);
	tid_make(&Anew, dir, "new", 86400, 86400 * 2, NULL);
	tid_make(&CA, dir, "ca", -60, 86400, NULL);
	tid_make(&S1, dir, "s1", -60, 86400, &CA);
	tid_make(&S2, dir, "s2", -60, 86400, &CA);
	snprintf(pins_ab, sizeof(pins_ab), "%s/ab.pins", dir);
	snprintf(pins_all, sizeof(pins_all), "%s/all.pins", dir);
	snprintf(pins_empty, sizeof(pins_empty), "%s/empty.pins", dir);
	const struct tid *ab[] = {&A, &B};
	tid_pins(pins_ab, ab, 2);
	const struct tid *all[] = {&A, &B, &Aold, &Anew};
	tid_pins(pins_all, all, 4);
	tid_pins(pins_empty, NULL, 0);
	return 0;
}

static int teardown(void **state)
{
	struct tid *t[] = {&A, &B, &C, &Aold, &Anew, &CA, &S1, &S2};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		tid_free(t[i]);
	tid_rmdir(dir);
	return 0;
}

static struct ztls_ctx *ctx_of(const struct tid *t, const char *ca,
			       const char *peers)
{
	struct ztls_config cfg = {.cert = t->cert_path, .key = t->key_path,
				  .ca = ca, .peers = peers, .ktls = true};
	struct ztls_ctx *x = NULL;
	char why[512];
	int r = ztls_ctx_new(&cfg, &x, why, sizeof(why));
	if (r)
		fail_msg("ztls_ctx_new(%s): %d %s", t->cert_path, r, why);
	return x;
}

static void pair(int sv[2])
{
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
}

/* One side of a handshake: a ztls_conn or a raw OpenSSL client. */
struct side {
	struct ztls_conn *z;
	SSL *raw;
	int fd;
	int res;          /* 0 running, 1 done, <0 failed */
	short ev;
	char why[512];
};

static void step(struct side *s)
{
	if (s->res)
		return;
	if (s->z) {
		s->res = ztls_handshake(s->z, &s->ev, s->why, sizeof(s->why));
		return;
	}
	ERR_clear_error();
	int r = SSL_do_handshake(s->raw);
	if (r == 1) {
		s->res = 1;
		return;
	}
	int e = SSL_get_error(s->raw, r);
	if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
		s->ev = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
		return;
	}
	ERR_error_string_n(ERR_peek_last_error(), s->why, sizeof(s->why));
	ERR_clear_error();
	s->res = -EPROTO;
}

/* Run both handshakes until neither can move (or 5 s). */
static void pump(struct side *a, struct side *b)
{
	for (int i = 0; i < 500 && (!a->res || !b->res); i++) {
		step(a);
		step(b);
		if (a->res < 0 || b->res < 0) {
			/* let the other side see the alert or close */
			for (int k = 0; k < 20 && (!a->res || !b->res); k++) {
				step(a);
				step(b);
				poll(NULL, 0, 1);
			}
			return;
		}
		struct pollfd p[2] = {{.fd = a->res ? -1 : a->fd, .events = a->ev},
				      {.fd = b->res ? -1 : b->fd, .events = b->ev}};
		poll(p, 2, 10);
	}
}

static void side_z(struct side *s, struct ztls_ctx *x, int fd, bool server,
		   const char *want)
{
	memset(s, 0, sizeof(*s));
	s->fd = fd;
	s->ev = POLLIN;
	assert_int_equal(ztls_conn_new(x, fd, server, want, &s->z, s->why,
				       sizeof(s->why)), 0);
}

/* A generic TLS 1.3 client offering ALPN zap/1, with @cert/@key (either
 * may be NULL) and no check of the server. */
static void side_raw(struct side *s, int fd, X509 *cert, EVP_PKEY *key)
{
	SSL_CTX *x = SSL_CTX_new(TLS_client_method());
	memset(s, 0, sizeof(*s));
	SSL_CTX_set_min_proto_version(x, TLS1_3_VERSION);
	SSL_CTX_set_alpn_protos(x, (const unsigned char *)"\x05zap/1", 6);
	if (cert)
		assert_int_equal(SSL_CTX_use_certificate(x, cert), 1);
	if (key)
		assert_int_equal(SSL_CTX_use_PrivateKey(x, key), 1);
	s->raw = SSL_new(x);
	SSL_CTX_free(x); /* the SSL holds a reference */
	SSL_set_fd(s->raw, fd);
	SSL_set_connect_state(s->raw);
	s->fd = fd;
	s->ev = POLLIN;
}

static void side_free(struct side *s)
{
	ztls_conn_free(s->z);
	SSL_free(s->raw);
	close(s->fd);
}

/* Send @n bytes one way through established connections. */
static void transfer(struct ztls_conn *from, int ffd, struct ztls_conn *to,
		     int tfd, size_t n)
{
	unsigned char *src = malloc(n + 1), *dst = malloc(n + 1);
	size_t sent = 0, got = 0;
	char why[256];

	for (size_t i = 0; i < n; i++)
		src[i] = (unsigned char)(i * 7 + 3);
	while (got < n) {
		short ev1 = 0, ev2 = 0;
		if (sent < n) {
			ssize_t k = ztls_write(from, src + sent, n - sent, &ev1, why,
					       sizeof(why));
			if (k > 0)
				sent += (size_t)k;
			else if (k != -EAGAIN)
				fail_msg("write: %zd %s", k, why);
		}
		ssize_t k = ztls_read(to, dst + got, n - got, &ev2, why, sizeof(why));
		if (k > 0) {
			got += (size_t)k;
			continue;
		}
		if (k != -EAGAIN)
			fail_msg("read: %zd %s", k, why);
		struct pollfd p[2] = {{.fd = ffd, .events = sent < n ? ev1 : 0},
				      {.fd = tfd, .events = ev2}};
		poll(p, 2, 100);
	}
	assert_memory_equal(src, dst, n);
	free(src);
	free(dst);
}

static void test_pinned_ok(void **state)
{
	struct ztls_ctx *xa = ctx_of(&A, NULL, pins_ab), *xb = ctx_of(&B, NULL, pins_ab);
	struct side s, c;
	int sv[2];

	assert_string_equal(ztls_ctx_fingerprint(xa), A.fp);
	pair(sv);
	side_z(&s, xa, sv[0], true, NULL);
	side_z(&c, xb, sv[1], false, A.fp); /* and require A's key */
	pump(&s, &c);
	assert_int_equal(s.res, 1);
	assert_int_equal(c.res, 1);
	assert_string_equal(ztls_conn_peer_fp(s.z), B.fp);
	assert_string_equal(ztls_conn_peer_fp(c.z), A.fp);
	assert_non_null(strstr(ztls_conn_cipher(s.z), "TLSv1.3"));
	/* The suite preferred by default (ZTLS_SUITES; bench/tls_record.c). */
	assert_non_null(strstr(ztls_conn_cipher(s.z), "TLS_AES_128_GCM_SHA256"));
	/* No TLS ULP here: userspace; the accessors answer either way. */
	(void)ztls_conn_ktls_send(s.z);
	(void)ztls_conn_ktls_recv(s.z);
	size_t sizes[] = {1, 100, 16384, 16385, 1 << 20, 3 << 20};
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		transfer(c.z, c.fd, s.z, s.fd, sizes[i]);
		transfer(s.z, s.fd, c.z, c.fd, sizes[i]);
	}
	/* A close_notify reads as end of stream. */
	ztls_conn_free(c.z);
	c.z = NULL;
	char b[8], why[128];
	short ev;
	ssize_t k;
	for (int i = 0; i < 100 && (k = ztls_read(s.z, b, sizeof(b), &ev, why, sizeof(why))) == -EAGAIN; i++)
		poll(NULL, 0, 5);
	assert_int_equal(k, 0);
	side_free(&s);
	side_free(&c);
	ztls_ctx_free(xa);
	ztls_ctx_free(xb);
}

static void test_ca_ok(void **state)
{
	char ca[600];
	snprintf(ca, sizeof(ca), "%s/ca.crt", dir);
	struct ztls_ctx *x1 = ctx_of(&S1, ca, NULL), *x2 = ctx_of(&S2, ca, NULL);
	struct side s, c;
	int sv[2];

	pair(sv);
	side_z(&s, x1, sv[0], true, NULL);
	side_z(&c, x2, sv[1], false, NULL);
	pump(&s, &c);
	assert_int_equal(s.res, 1);
	assert_int_equal(c.res, 1);
	assert_string_equal(ztls_conn_peer_fp(s.z), S2.fp);
	side_free(&s);
	side_free(&c);
	/* A self-signed key the CA did not sign: refused. */
	struct ztls_ctx *xc = ctx_of(&C, ca, pins_ab);
	pair(sv);
	side_z(&s, x1, sv[0], true, NULL);
	side_z(&c, xc, sv[1], false, NULL);
	pump(&s, &c);
	assert_int_equal(s.res, -EACCES);
	if (!strstr(s.why, "does not verify against ZAP_TLS_CA"))
		fail_msg("%s", s.why);
	side_free(&s);
	side_free(&c);
	ztls_ctx_free(x1);
	ztls_ctx_free(x2);
	ztls_ctx_free(xc);
}

static void test_plaintext_refused(void **state)
{
	struct ztls_ctx *xa = ctx_of(&A, NULL, pins_ab);
	struct side s, c;
	int sv[2];
	static const unsigned char hello[16] = "ZAPW\0\1\0\1";

	pair(sv);
	side_z(&s, xa, sv[0], true, NULL);
	assert_int_equal(write(sv[1], hello, sizeof(hello)), (ssize_t)sizeof(hello));
	memset(&c, 0, sizeof(c));
	c.fd = sv[1];
	c.res = 1;
	pump(&s, &c);
	assert_int_equal(s.res, -EPROTO);
	assert_non_null(strstr(s.why, "plaintext zap HELLO"));
	/* It heard back a fatal TLS alert (unexpected_message), which tells
	 * the plaintext side that this end requires TLS. */
	{
		static const unsigned char alert[] = { 0x15, 0x03, 0x03, 0x00,
						       0x02, 0x02, 0x0a };
		unsigned char got[sizeof(alert)];

		assert_int_equal(read(sv[1], got, sizeof(got)), (ssize_t)sizeof(got));
		assert_memory_equal(got, alert, sizeof(alert));
	}
	side_free(&s);
	close(sv[1]);

	/* The other way: a TLS client reaching a plaintext endpoint, which
	 * closes on the bad magic, hears of it as a close. */
	pair(sv);
	side_z(&c, xa, sv[1], false, NULL);
	for (int i = 0; i < 10; i++)
		step(&c);
	close(sv[0]);
	pump(&c, &(struct side){.res = 1, .fd = -1});
	assert_int_equal(c.res, -ECONNRESET);
	if (!strstr(c.why, "plaintext peer"))
		fail_msg("%s", c.why);
	side_free(&c);
	ztls_ctx_free(xa);
}

static void test_unpinned_refused(void **state)
{
	struct ztls_ctx *xa = ctx_of(&A, NULL, pins_ab), *xc = ctx_of(&C, NULL, pins_ab);
	struct side s, c;
	int sv[2];

	/* C pins A, but A does not pin C: the server refuses. */
	pair(sv);
	side_z(&s, xa, sv[0], true, NULL);
	side_z(&c, xc, sv[1], false, NULL);
	pump(&s, &c);
	assert_int_equal(s.res, -EACCES);
	assert_non_null(strstr(s.why, "is not pinned"));
	assert_non_null(strstr(s.why, C.fp));
	side_free(&s);
	side_free(&c);

	/* A client that does not pin its server refuses it. */
	pair(sv);
	side_z(&s, xc, sv[0], true, NULL);
	side_z(&c, xa, sv[1], false, NULL);
	pump(&s, &c);
	assert_int_equal(c.res, -EACCES);
	assert_non_null(strstr(c.why, "is not pinned"));
	assert_true(s.res < 0);
	side_free(&s);
	side_free(&c);
	ztls_ctx_free(xa);
	ztls_ctx_free(xc);
}

static void test_required_fp(void **state)
{
	struct ztls_ctx *xa = ctx_of(&A, NULL, pins_ab), *xb = ctx_of(&B, NULL, pins_ab);
	struct side s, c;
	int sv[2];

	/* B trusts A, but this connection must reach C's key. */
	pair(sv);
	side_z(&s, xa, sv[0], true, NULL);
	side_z(&c, xb, sv[1], false, C.fp);
	pump(&s, &c);
	assert_int_equal(c.res, -EACCES);
	assert_non_null(strstr(c.why, "not the required"));
	side_free(&s);
	side_free(&c);
	struct ztls_conn *z;
	char why[256];
	assert_int_equal(ztls_conn_new(xb, -1, false, "sha256:12", &z, why, sizeof(why)),
			 -EINVAL);
	ztls_ctx_free(xa);
	ztls_ctx_free(xb);
}

static void raw_refused(struct ztls_ctx *server, X509 *cert, EVP_PKEY *key,
			int want, const char *reason)
{
	struct side s, c;
	int sv[2];

	pair(sv);
	side_z(&s, server, sv[0], true, NULL);
	side_raw(&c, sv[1], cert, key);
	pump(&s, &c);
	if (s.res != want || !strstr(s.why, reason))
		fail_msg("server: %d \"%s\", want %d \"%s\"", s.res, s.why, want,
			 reason);
	side_free(&s);
	side_free(&c);
}

static void test_validity_refused(void **state)
{
	/* Pinned, but outside the validity period. */
	struct ztls_ctx *xa = ctx_of(&A, NULL, pins_all);
	raw_refused(xa, Aold.cert, Aold.key, -EACCES, "expired");
	raw_refused(xa, Anew.cert, Anew.key, -EACCES, "not valid yet");
	/* A well-behaved client is still served. */
	raw_refused(xa, B.cert, B.key, 1, "");
	ztls_ctx_free(xa);

	/* Our own certificate out of its period: refused at setup. */
	struct ztls_config cfg = {.cert = Aold.cert_path, .key = Aold.key_path,
				  .peers = pins_ab};
	struct ztls_ctx *x;
	char why[512];
	assert_int_equal(ztls_ctx_new(&cfg, &x, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "expired"));
}

static void test_no_client_cert_refused(void **state)
{
	struct ztls_ctx *xa = ctx_of(&A, NULL, pins_ab);
	raw_refused(xa, NULL, NULL, -EACCES, "presented no certificate");
	ztls_ctx_free(xa);
}

static void test_stolen_cert_refused(void **state)
{
	/* B's certificate (pinned) with a key that only looks like B's. */
	struct ztls_ctx *xa = ctx_of(&A, NULL, pins_ab);
	EVP_PKEY *forged = tid_forged_key(&B);
	raw_refused(xa, B.cert, forged, -EACCES, "did not prove the key");
	EVP_PKEY_free(forged);
	ztls_ctx_free(xa);
}

static uint64_t ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void test_stalled_handshake(void **state)
{
	struct ztls_ctx *xa = ctx_of(&A, NULL, pins_ab);
	struct ztls_conn *z;
	char why[256];
	int sv[2];

	/* Silent, then a slowloris sending a record header and stopping. */
	for (int round = 0; round < 2; round++) {
		pair(sv);
		if (round)
			assert_int_equal(write(sv[1], "\x16\x03\x01\x02\x00", 5), 5);
		assert_int_equal(ztls_conn_new(xa, sv[0], true, NULL, &z, why, sizeof(why)), 0);
		uint64_t t0 = ms();
		int r = ztls_handshake_wait(z, t0 + 200, -1, why, sizeof(why));
		uint64_t dt = ms() - t0;
		assert_int_equal(r, -ETIMEDOUT);
		assert_true(dt >= 190 && dt < 2000);
		assert_non_null(strstr(why, "handshake timeout"));
		ztls_conn_free(z);
		close(sv[0]);
		close(sv[1]);
	}
	ztls_ctx_free(xa);
}

/* Heap bytes two connected ends hold after their handshake, and whether
 * 1 MiB still goes both ways: with and without read-ahead. */
static size_t held_by_pair(bool small_reads)
{
	struct ztls_config cfg = {.cert = A.cert_path, .key = A.key_path,
				  .peers = pins_ab, .small_reads = small_reads};
	struct ztls_ctx *x = NULL;
	struct side s, c;
	char why[512];
	int sv[2];

	assert_int_equal(ztls_ctx_new(&cfg, &x, why, sizeof(why)), 0);
	pair(sv);
	size_t before = mallinfo2().uordblks;
	side_z(&s, x, sv[0], true, NULL);
	side_z(&c, x, sv[1], false, NULL);
	pump(&s, &c);
	assert_int_equal(s.res, 1);
	assert_int_equal(c.res, 1);
	size_t held = mallinfo2().uordblks - before;
	transfer(c.z, c.fd, s.z, s.fd, 1 << 20);
	transfer(s.z, s.fd, c.z, c.fd, 1 << 20);
	side_free(&s);
	side_free(&c);
	ztls_ctx_free(x);
	return held;
}

/* small_reads (the gpudirect bootstrap): a connection buffers one record,
 * not the 256 KiB read-ahead. */
static void test_small_reads(void **state)
{
	size_t big = held_by_pair(false), small = held_by_pair(true);

	print_message("held by two connected ends: %zu bytes with read-ahead, %zu without\n",
		      big, small);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
	/* The sanitizers' allocators keep no mallinfo2() counts: the
	 * transfers above ran, the sizes are checked in normal builds. */
	print_message("sanitizer build: heap sizes not measured\n");
	return;
#endif
	assert_true(big >= 2 * (256u << 10));
	assert_true(small < 256u << 10);
}

static void test_config_refused(void **state)
{
	struct ztls_config cfg = {.cert = A.cert_path, .key = A.key_path,
				  .peers = pins_ab};
	struct ztls_ctx *x = NULL;
	char why[512];

	assert_int_equal(chmod(A.key_path, 0644), 0);
	assert_int_equal(ztls_ctx_new(&cfg, &x, why, sizeof(why)), -EPERM);
	assert_non_null(strstr(why, "permissions 0644"));
	assert_non_null(strstr(why, "too open"));
	assert_int_equal(chmod(A.key_path, 0640), 0);
	assert_int_equal(ztls_ctx_new(&cfg, &x, why, sizeof(why)), -EPERM);
	assert_int_equal(chmod(A.key_path, 0600), 0);

	/* Nobody to trust. */
	cfg.peers = NULL;
	assert_int_equal(ztls_ctx_new(&cfg, &x, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "trust nobody"));
	cfg.peers = pins_empty;
	assert_int_equal(ztls_ctx_new(&cfg, &x, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "trust nobody"));

	/* A key that is not the certificate's. */
	cfg.peers = pins_ab;
	cfg.key = B.key_path;
	assert_int_equal(ztls_ctx_new(&cfg, &x, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "does not match"));

	/* Cipher suites OpenSSL does not know. */
	cfg.key = A.key_path;
	cfg.suites = "TLS_NO_SUCH_SUITE";
	assert_int_equal(ztls_ctx_new(&cfg, &x, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "cipher suites"));
	cfg.suites = NULL;

	/* Missing files and settings. */
	cfg.key = "/nonexistent/key.pem";
	assert_int_equal(ztls_ctx_new(&cfg, &x, why, sizeof(why)), -ENOENT);
	cfg.key = NULL;
	assert_int_equal(ztls_ctx_new(&cfg, &x, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "ZAP_TLS_KEY"));
	assert_null(x);
}

static void test_pins_parse(void **state)
{
	struct ztls_pins p;
	char why[256];
	char good[400];
	unsigned char fa[32], fb[32];

	snprintf(good, sizeof(good), "# nodes\n\n  %s  \r\n%s\n%s", A.fp, B.fp, A.fp);
	for (char *q = strstr(good, B.fp) + 7; *q && *q != '\n'; q++)
		if (*q >= 'a' && *q <= 'f')
			*q = (char)(*q - 'a' + 'A'); /* hex in either case */
	assert_int_equal(ztls_pins_parse(good, strlen(good), &p, why, sizeof(why)), 0);
	assert_int_equal(p.n, 2);
	assert_int_equal(ztls_fp_parse(A.fp, strlen(A.fp), fa), 0);
	assert_int_equal(ztls_fp_parse(B.fp, strlen(B.fp), fb), 0);
	assert_true(ztls_pins_has(&p, fa));
	assert_true(ztls_pins_has(&p, fb));
	fa[0] ^= 1;
	assert_false(ztls_pins_has(&p, fa));
	ztls_pins_free(&p);

	const char *bad[] = {"sha256:00", "sha1:0000", "sha256: " "00", A.fp + 1,
			     "sha256:zz00000000000000000000000000000000000000000000000000000000000000"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(ztls_pins_parse(bad[i], strlen(bad[i]), &p, why, sizeof(why)),
				 -EINVAL);
		assert_non_null(strstr(why, "line 1"));
	}
	assert_int_equal(ztls_pins_parse("a\0b", 3, &p, why, sizeof(why)), -EINVAL);
	assert_int_equal(ztls_pins_parse("", 0, &p, why, sizeof(why)), 0);
	assert_int_equal(p.n, 0);
	ztls_pins_free(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pins_parse),
		cmocka_unit_test(test_pinned_ok),
		cmocka_unit_test(test_ca_ok),
		cmocka_unit_test(test_plaintext_refused),
		cmocka_unit_test(test_unpinned_refused),
		cmocka_unit_test(test_required_fp),
		cmocka_unit_test(test_validity_refused),
		cmocka_unit_test(test_no_client_cert_refused),
		cmocka_unit_test(test_stolen_cert_refused),
		cmocka_unit_test(test_stalled_handshake),
		cmocka_unit_test(test_config_refused),
		cmocka_unit_test(test_small_reads),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
