/* SPDX-License-Identifier: MIT */
/*
 * The connection layer's pure parts (util/conn, zap-conn.h): the identity
 * rule that the TCP wire's HELLO and gpudirect's bootstrap share, peer
 * names with keys, and the handshakes-under-way set both accept paths
 * keep (deadlines, cap, whom to drop for room). The accept engine runs
 * under gpudirect's bootstrap in tests/gpudirect/test-gd-hs.c (hostile
 * clients over loopback, plain and TLS), and the identity rule under the
 * TCP wire in tests/tcp.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "zap-conn.h"

/* Any well-formed key: names are checked, not proven, here. */
#define FP "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static void test_identity_rule(void **state)
{
	struct sockaddr_in v4 = { .sin_family = AF_INET, .sin_port = htons(1234) };
	struct sockaddr_in6 v6 = { .sin6_family = AF_INET6 };
	char key[ZAP_PEER_MAX], why[256];

	inet_pton(AF_INET, "192.0.2.7", &v4.sin_addr);
	assert_int_equal(zconn_identity("192.0.2.7:80", (struct sockaddr *)&v4,
					sizeof(v4), -1, "bootstrap message", key,
					sizeof(key), why, sizeof(why)),
			 0);
	assert_string_equal(key, "192.0.2.7:80");
	assert_int_equal(zconn_identity("0.0.0.0:81", (struct sockaddr *)&v4, sizeof(v4),
					-1, "bootstrap message", key, sizeof(key), why,
					sizeof(why)),
			 0);
	assert_string_equal(key, "192.0.2.7:81");
	/* One address grammar (zap-addr.h): an empty host is not a wildcard. */
	assert_int_equal(zconn_identity(":81", (struct sockaddr *)&v4, sizeof(v4), -1,
					"bootstrap message", key, sizeof(key), why,
					sizeof(why)),
			 -EPROTO);
	assert_int_equal(zconn_identity("192.0.2.8:80", (struct sockaddr *)&v4,
					sizeof(v4), -1, "bootstrap message", key,
					sizeof(key), why, sizeof(why)),
			 -EPROTO);
	assert_non_null(strstr(why, "192.0.2.7"));
	assert_int_equal(zconn_identity("peer.example:80", (struct sockaddr *)&v4,
					sizeof(v4), -1, "bootstrap message", key,
					sizeof(key), why, sizeof(why)),
			 -EPROTO);
	assert_int_equal(zconn_identity("192.0.2.7:0", (struct sockaddr *)&v4, sizeof(v4),
					-1, "bootstrap message", key, sizeof(key), why,
					sizeof(why)),
			 -EPROTO);
	assert_int_equal(zconn_identity("192.0.2.7", (struct sockaddr *)&v4, sizeof(v4),
					-1, "bootstrap message", key, sizeof(key), why,
					sizeof(why)),
			 -EPROTO);
	inet_pton(AF_INET6, "2001:db8::5", &v6.sin6_addr);
	assert_int_equal(zconn_identity("[2001:db8:0::5]:9", (struct sockaddr *)&v6,
					sizeof(v6), -1, "bootstrap message", key,
					sizeof(key), why, sizeof(why)),
			 0);
	assert_string_equal(key, "[2001:db8::5]:9");
	assert_int_equal(zconn_identity("[::]:9", (struct sockaddr *)&v6, sizeof(v6), -1,
					"bootstrap message", key, sizeof(key), why,
					sizeof(why)),
			 0);
	assert_string_equal(key, "[2001:db8::5]:9");
	assert_int_equal(zconn_identity("[2001:db8::6]:9", (struct sockaddr *)&v6,
					sizeof(v6), -1, "bootstrap message", key,
					sizeof(key), why, sizeof(why)),
			 -EPROTO);
	/* A v4-mapped source is its v4 address. */
	inet_pton(AF_INET6, "::ffff:192.0.2.7", &v6.sin6_addr);
	assert_int_equal(zconn_identity("192.0.2.7:10", (struct sockaddr *)&v6,
					sizeof(v6), -1, "bootstrap message", key,
					sizeof(key), why, sizeof(why)),
			 0);
	assert_string_equal(key, "192.0.2.7:10");
}

/* The TCP wire's parts of the rule: the port of a connection we dialed,
 * unix: claims, and the name cleared on refusal. */
static void test_identity_dialed_and_unix(void **state)
{
	struct sockaddr_in v4 = { .sin_family = AF_INET, .sin_port = htons(1234) };
	char key[ZAP_PEER_MAX], why[256];

	(void)state;
	inet_pton(AF_INET, "192.0.2.7", &v4.sin_addr);
	assert_int_equal(zconn_identity("192.0.2.7:80", (struct sockaddr *)&v4,
					sizeof(v4), 80, "HELLO", key, sizeof(key), why,
					sizeof(why)),
			 0);
	assert_string_equal(key, "192.0.2.7:80");
	assert_int_equal(zconn_identity("192.0.2.7:81", (struct sockaddr *)&v4,
					sizeof(v4), 80, "HELLO", key, sizeof(key), why,
					sizeof(why)),
			 -EPROTO);
	assert_non_null(strstr(why, "another port than the one dialed"));
	assert_string_equal(key, "");
	/* Accepted over TCP, a unix: claim is the source itself. */
	assert_int_equal(zconn_identity("unix:/run/x.sock", (struct sockaddr *)&v4,
					sizeof(v4), -1, "HELLO", key, sizeof(key), why,
					sizeof(why)),
			 0);
	assert_string_equal(key, "192.0.2.7:1234");
	assert_int_equal(zconn_identity("unix:/run/x.sock", (struct sockaddr *)&v4,
					sizeof(v4), 80, "HELLO", key, sizeof(key), why,
					sizeof(why)),
			 -EPROTO);
	assert_non_null(strstr(why, "HELLO from 192.0.2.7:1234 claims unix:/run/x.sock"));
	assert_int_equal(zconn_identity("192.0.2.8:80", (struct sockaddr *)&v4,
					sizeof(v4), -1, "HELLO", key, sizeof(key), why,
					sizeof(why)),
			 -EPROTO);
	assert_string_equal(why,
			    "HELLO from 192.0.2.7:1234 claims 192.0.2.8:80, which is "
			    "not its source address");
	assert_string_equal(key, "");
}

/* Peer strings a send names: a key only with TLS, normalised to lower
 * case, malformed keys refused. */
static void test_peer_norm(void **state)
{
	char out[ZAP_PEER_MAX], why[256], up[ZAP_PEER_MAX], lo[ZAP_PEER_MAX];

	assert_int_equal(zconn_peer_norm("10.0.0.1:5", false, out, sizeof(out), why,
					 sizeof(why)),
			 0);
	assert_string_equal(out, "10.0.0.1:5");
	snprintf(lo, sizeof(lo), "10.0.0.1:5#%s", FP);
	snprintf(up, sizeof(up), "10.0.0.1:5#sha256:");
	for (const char *h = FP + 7; *h; h++)
		snprintf(up + strlen(up), sizeof(up) - strlen(up), "%c",
			 *h >= 'a' ? *h - 32 : *h);
	assert_int_equal(zconn_peer_norm(up, false, out, sizeof(out), why, sizeof(why)),
			 -EINVAL);
	assert_non_null(strstr(why, "TLS is off"));
	assert_int_equal(zconn_peer_norm(up, true, out, sizeof(out), why, sizeof(why)),
			 0);
	assert_string_equal(out, lo);
	assert_int_equal(zconn_peer_norm("10.0.0.1:5#sha256:abc", true, out, sizeof(out),
					 why, sizeof(why)),
			 -EINVAL);
	assert_int_equal(zconn_peer_norm("10.0.0.1:5#", true, out, sizeof(out), why,
					 sizeof(why)),
			 -EINVAL);
	/* Its own normal form (a send uses it without the copy): no key, and
	 * room for it; a name that fills the buffer is refused as too long. */
	assert_true(zconn_peer_plain("10.0.0.1:5", sizeof(out)));
	assert_false(zconn_peer_plain(up, sizeof(out)));
	assert_false(zconn_peer_plain("10.0.0.1:5", 10));
	assert_true(zconn_peer_plain("10.0.0.1:5", 11));
	assert_int_equal(zconn_peer_norm("10.0.0.1:5", false, out, 10, why, sizeof(why)),
			 -EINVAL);
	assert_non_null(strstr(why, "too long"));
}

/* Join and match: a keyed name serves its own key, a keyless address any
 * key proven on it. */
static void test_peer_join_match(void **state)
{
	char out[ZAP_PEER_MAX], small[16];
	const char *ka = "127.0.0.6:7430#" FP;

	(void)state;
	assert_int_equal(zconn_peer_join("127.0.0.6:7430", FP, out, sizeof(out)), 0);
	assert_string_equal(out, ka);
	assert_int_equal(zconn_peer_join("127.0.0.6:7430", "", out, sizeof(out)), 0);
	assert_string_equal(out, "127.0.0.6:7430");
	assert_int_equal(zconn_peer_join("127.0.0.6:7430", FP, small, sizeof(small)),
			 -ENAMETOOLONG);
	assert_true(zconn_peer_match(ka, ka));
	assert_true(zconn_peer_match(ka, "127.0.0.6:7430"));
	assert_false(zconn_peer_match(ka, "127.0.0.6:743"));
	assert_false(zconn_peer_match("127.0.0.6:7430", ka));
}

/* The host buckets room is shared by: one per host, whatever the port or
 * the IPv6 spelling of an IPv4 address; a Unix peer by its uid and gid. */
static void test_host_bucket(void **state)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(1) };
	struct sockaddr_in b = a;
	struct sockaddr_in6 m = { .sin6_family = AF_INET6, .sin6_port = htons(2) };
	const struct sockaddr *sa = (const struct sockaddr *)&a;
	unsigned ha;

	(void)state;
	inet_pton(AF_INET, "127.0.0.2", &a.sin_addr);
	inet_pton(AF_INET, "127.0.0.3", &b.sin_addr);
	inet_pton(AF_INET6, "::ffff:127.0.0.2", &m.sin6_addr);
	ha = zconn_host_bucket(sa, sizeof(a), NULL);
	assert_true(ha < ZCONN_HOST_BUCKETS);
	assert_int_not_equal(ha, zconn_host_bucket((struct sockaddr *)&b, sizeof(b), NULL));
	assert_int_equal(ha, zconn_host_bucket((struct sockaddr *)&m, sizeof(m), NULL));
	a.sin_port = htons(9);
	assert_int_equal(ha, zconn_host_bucket(sa, sizeof(a), NULL));
	/* Too short a length is not read as an address. */
	assert_int_equal(zconn_host_bucket(sa, 4, NULL), zconn_host_bucket(sa, 0, NULL));
	assert_int_equal(zconn_host_bucket(sa, 0, "uid=5 gid=6 pid=7"),
			 zconn_host_bucket(sa, 0, "uid=5 gid=6 pid=8"));
	assert_int_not_equal(zconn_host_bucket(sa, 0, "uid=5 gid=6 pid=7"),
			     zconn_host_bucket(sa, 0, "uid=9 gid=6 pid=7"));
}

/* @n handshakes of hosts @host (oldest first), deadlines 10, 20, ... */
static void pend_fill(struct zconn_pend_set *s, struct zconn_pend *p,
		      const unsigned *host, unsigned n)
{
	zconn_pend_init(s, n);
	for (unsigned i = 0; i < n; i++) {
		p[i] = (struct zconn_pend){ .born = i,
					    .deadline = 10 * (i + 1),
					    .host = host[i],
					    .evictable = true };
		zconn_pend_add(s, &p[i]);
	}
}

/* Deadlines come oldest first; the cap counts what is in. */
static void test_pend_deadlines(void **state)
{
	static const unsigned host[] = { 1, 2, 3 };
	struct zconn_pend_set s;
	struct zconn_pend p[3];

	(void)state;
	zconn_pend_init(&s, 3);
	assert_int_equal(zconn_pend_next_deadline(&s), UINT64_MAX);
	assert_null(zconn_pend_expired(&s, UINT64_MAX));
	assert_null(zconn_pend_oldest(&s));
	pend_fill(&s, p, host, 3);
	assert_true(zconn_pend_full(&s));
	assert_ptr_equal(s.newest, &p[2]);
	assert_ptr_equal(zconn_pend_oldest(&s), &p[0]);
	assert_int_equal(zconn_pend_next_deadline(&s), 10);
	assert_null(zconn_pend_expired(&s, 9));
	assert_ptr_equal(zconn_pend_expired(&s, 10), &p[0]);
	/* Taken out from the middle, then the oldest: the order holds. */
	zconn_pend_del(&s, &p[1]);
	assert_false(zconn_pend_full(&s));
	assert_int_equal(s.count, 2);
	assert_ptr_equal(zconn_pend_expired(&s, 25), &p[0]);
	zconn_pend_del(&s, &p[0]);
	assert_null(zconn_pend_expired(&s, 25));
	assert_int_equal(zconn_pend_next_deadline(&s), 30);
	assert_ptr_equal(zconn_pend_expired(&s, 30), &p[2]);
	zconn_pend_del(&s, &p[2]);
	assert_int_equal(s.count, 0);
	assert_null(s.newest);
	assert_null(zconn_pend_oldest(&s));
}

/* The busiest host gives up its oldest; what the caller counts per host
 * (the TCP wire's established connections) makes a host busier; a
 * handshake that is not evictable is passed over. */
static void test_pend_victim(void **state)
{
	static const unsigned host[] = { 5, 7, 5, 7, 5 };
	static unsigned count[ZCONN_HOST_BUCKETS];
	struct zconn_pend_set s;
	struct zconn_pend p[5];
	unsigned best = 0;

	(void)state;
	pend_fill(&s, p, host, 5);
	assert_ptr_equal(zconn_pend_victim(&s, count, &best), &p[0]);
	assert_int_equal(best, 5);
	assert_int_equal(count[5], 3);
	memset(count, 0, sizeof(count));
	count[7] = 5;
	assert_ptr_equal(zconn_pend_victim(&s, count, &best), &p[1]);
	assert_int_equal(best, 7);
	assert_int_equal(count[7], 7);
	memset(count, 0, sizeof(count));
	p[0].evictable = false;
	assert_ptr_equal(zconn_pend_victim(&s, count, &best), &p[2]);
	/* The busiest host holds only what the caller counted: no handshake
	 * of it to drop (the caller makes room there itself). */
	memset(count, 0, sizeof(count));
	count[9] = 10;
	assert_null(zconn_pend_victim(&s, count, &best));
	assert_int_equal(best, 9);
	/* None evictable at all. */
	memset(count, 0, sizeof(count));
	for (unsigned i = 0; i < 5; i++)
		p[i].evictable = false;
	assert_null(zconn_pend_victim(&s, count, &best));
	assert_null(zconn_pend_oldest_evictable(&s));
	p[3].evictable = true;
	assert_ptr_equal(zconn_pend_oldest_evictable(&s), &p[3]);
}

/* Ties: with no host holding two, the oldest evictable handshake goes,
 * whatever its bucket; between hosts holding as many, the lowest bucket's
 * oldest (the TCP wire's rule). */
static void test_pend_ties(void **state)
{
	static const unsigned one[] = { 3, 1, 2 }, two[] = { 8, 4, 8, 4 };
	static unsigned count[ZCONN_HOST_BUCKETS];
	struct zconn_pend_set s;
	struct zconn_pend p[4];
	unsigned best = 0;

	(void)state;
	pend_fill(&s, p, one, 3);
	assert_ptr_equal(zconn_pend_victim(&s, count, &best), &p[0]);
	assert_int_equal(best, 1);
	memset(count, 0, sizeof(count));
	p[0].evictable = false;
	assert_ptr_equal(zconn_pend_victim(&s, count, &best), &p[1]);
	memset(count, 0, sizeof(count));
	/* Extra counts below two change nothing. */
	count[6] = 1;
	p[0].evictable = true;
	assert_ptr_equal(zconn_pend_victim(&s, count, &best), &p[0]);
	memset(count, 0, sizeof(count));
	pend_fill(&s, p, two, 4);
	assert_ptr_equal(zconn_pend_victim(&s, count, &best), &p[1]);
	assert_int_equal(best, 4);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_identity_rule),
		cmocka_unit_test(test_identity_dialed_and_unix),
		cmocka_unit_test(test_peer_norm),
		cmocka_unit_test(test_peer_join_match),
		cmocka_unit_test(test_host_bucket),
		cmocka_unit_test(test_pend_deadlines),
		cmocka_unit_test(test_pend_victim),
		cmocka_unit_test(test_pend_ties),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
