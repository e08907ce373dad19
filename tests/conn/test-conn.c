/* SPDX-License-Identifier: MIT */
/*
 * The connection layer's pure parts (util/conn, zap-conn.h): the identity
 * rule that the TCP wire's HELLO and gpudirect's bootstrap share, and peer
 * names with keys. The accept engine runs under gpudirect's bootstrap in
 * tests/gpudirect/test-gd-hs.c (hostile clients over loopback, plain and
 * TLS), and the identity rule under the TCP wire in tests/tcp.
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_identity_rule),
		cmocka_unit_test(test_identity_dialed_and_unix),
		cmocka_unit_test(test_peer_norm),
		cmocka_unit_test(test_peer_join_match),
		cmocka_unit_test(test_host_bucket),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
