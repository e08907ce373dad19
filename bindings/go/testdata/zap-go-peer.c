/* SPDX-License-Identifier: MIT */
/*
 * zap-go-peer: the C end of the Go binding's tests. A plain libzap program,
 * so the Go tests check the binding against the C library as any C user
 * drives it, in both directions.
 *
 *   zap-go-peer [PREF]     pick PREF (default "default") listening on
 *                          127.0.0.1:0, print the bound address on stdout,
 *                          then serve until "zgp:quit".
 *
 * Every message is echoed to its sender, except control messages, which
 * start with "zgp:":
 *   zgp:send SIZE SEED   send SIZE bytes of pattern(SEED) to the sender
 *                        (C produces, Go checks)
 *   zgp:check SIZE SEED  the next message must be SIZE bytes of
 *                        pattern(SEED); reply "ok" or "bad: why"
 *                        (Go produces, C checks)
 *   zgp:quit             reply "bye" and exit 0
 * pattern(SEED)[i] = ((i * 2654435761) mod 2^32 >> 24) + SEED, mod 256;
 * the Go tests compute the same bytes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zap/zap.h>

static void fill(unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)((((uint32_t)i * 2654435761u) >> 24) + seed);
}

static long mismatch(const unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != (unsigned char)((((uint32_t)i * 2654435761u) >> 24) + seed))
			return (long)i;
	return -1;
}

static void die(const char *what, int rc)
{
	fprintf(stderr, "zap-go-peer: %s: %s\n", what, zap_strerror(rc));
	exit(1);
}

static void reply(struct zap_transport *t, const char *peer, const void *b,
		  size_t n)
{
	int rc = zap_send(t, peer, b, n, NULL);
	if (rc)
		die("send", rc);
}

int main(int argc, char **argv)
{
	struct zap_attr attr = {.size = sizeof(attr), .listen = "127.0.0.1:0"};
	struct zap_transport *t;
	char addr[ZAP_PEER_MAX];
	int rc;

	rc = zap_pick(argc > 1 ? argv[1] : "default", 0, &attr, &t);
	if (rc)
		die("pick", rc);
	rc = zap_transport_address(t, addr, sizeof(addr));
	if (rc)
		die("address", rc);
	printf("%s\n", addr);
	fflush(stdout);

	for (;;) {
		struct zap_msg *m;
		char cmd[64], peer[ZAP_PEER_MAX];
		unsigned long long size;
		unsigned seed;

		rc = zap_recv(t, NULL, &m);
		if (rc)
			die("recv", rc);
		size_t n = zap_msg_len(m);
		const unsigned char *d = zap_msg_data(m);
		snprintf(peer, sizeof(peer), "%s", zap_msg_peer(m));
		if (n < 4 || n >= sizeof(cmd) || memcmp(d, "zgp:", 4)) {
			reply(t, peer, d, n); /* echo */
			zap_msg_release(m);
			continue;
		}
		memcpy(cmd, d, n);
		cmd[n] = '\0';
		zap_msg_release(m);
		if (!strcmp(cmd, "zgp:quit")) {
			reply(t, peer, "bye", 3);
			break;
		}
		if (sscanf(cmd, "zgp:send %llu %u", &size, &seed) == 2) {
			unsigned char *b = malloc(size ? size : 1);
			if (!b)
				die("send buffer", -ENOMEM);
			fill(b, size, seed);
			reply(t, peer, b, size);
			free(b);
		} else if (sscanf(cmd, "zgp:check %llu %u", &size, &seed) == 2) {
			char why[128] = "ok";
			rc = zap_recv(t, NULL, &m);
			if (rc)
				die("recv", rc);
			long at = mismatch(zap_msg_data(m), zap_msg_len(m), seed);
			if (zap_msg_len(m) != size)
				snprintf(why, sizeof(why), "bad: %zu bytes, want %llu",
					 zap_msg_len(m), size);
			else if (at >= 0)
				snprintf(why, sizeof(why), "bad: byte %ld differs", at);
			zap_msg_release(m);
			reply(t, peer, why, strlen(why));
		} else {
			fprintf(stderr, "zap-go-peer: unknown command \"%s\"\n", cmd);
			reply(t, peer, "bad: unknown command", 20);
		}
	}
	zap_close(t);
	return 0;
}
