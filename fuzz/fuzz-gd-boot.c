/* SPDX-License-Identifier: MIT */
/*
 * The gpudirect bootstrap message (plugins/gpudirect/gd_proto.c), which a
 * peer sends over TCP before any queue pair exists: gd_boot_header() on
 * the first 8 bytes and gd_boot_decode() on the whole input. A message
 * that decodes has every field in its documented range, and encoding it
 * again gives back exactly the input bytes (one canonical form, so no two
 * different byte strings mean the same bootstrap). The listen address of
 * a message that decodes then goes through the identity rule
 * (zconn_identity(), util/conn, which the TCP wire's HELLO shares) from an
 * IPv4 and an IPv6 source: accepted only under the source's own address
 * and the claimed port (a unix: claim, which TCP cannot check, as the
 * source itself), refused naming the source otherwise.
 */
#include <errno.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include "fuzz.h"
#include "gd_proto.h"
#include "zap-conn.h"

/* The identity rule's answer for @claim from @src (printed @sh). */
static void identity_check(const char *claim, const struct sockaddr *src, unsigned sl,
			   const char *sh, bool v6)
{
	char key[ZAP_PEER_MAX], why[256], want[ZAP_PEER_MAX];
	const char *port = strrchr(claim, ':');
	int rc = zconn_identity(claim, src, sl, -1, "bootstrap message", key, sizeof(key),
				why, sizeof(why));

	FUZZ_CHECK(rc == 0 || rc == -EPROTO);
	if (rc) {
		FUZZ_CHECK(strstr(why, sh) != NULL);
		return;
	}
	/* Accepted: the source's address and the claimed port, nothing else
	 * (the sources here have port 0). */
	if (!strncmp(claim, "unix:", 5))
		port = ":0";
	FUZZ_CHECK(port != NULL);
	snprintf(want, sizeof(want), v6 ? "[%s]%s" : "%s%s", sh, port);
	FUZZ_CHECK(!strcmp(key, want));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct gd_boot b;
	char why[128];
	size_t body = 0;
	int rc;

	if (size >= GD_BOOT_HDR) {
		uint8_t *hdr = malloc(GD_BOOT_HDR); /* exactly 8 bytes */
		if (!hdr)
			abort();
		memcpy(hdr, data, GD_BOOT_HDR);
		why[0] = '\0';
		rc = gd_boot_header(hdr, &body, why, sizeof(why));
		FUZZ_CHECK(rc == 0 || rc == -EPROTO || rc == -EPROTONOSUPPORT);
		if (rc)
			FUZZ_CHECK(why[0]);
		else
			FUZZ_CHECK(body > GD_BOOT_FIXED &&
				   body <= GD_BOOT_FIXED + ZAP_PEER_MAX - 1);
		free(hdr);
	}

	why[0] = '\0';
	rc = gd_boot_decode(data, size, &b, why, sizeof(why));
	FUZZ_CHECK(rc == 0 || rc == -EPROTO || rc == -EPROTONOSUPPORT);
	if (rc) {
		FUZZ_CHECK(why[0]);
		return 0;
	}
	FUZZ_CHECK(b.instance != 0);
	FUZZ_CHECK(b.qpn && b.qpn <= 0xffffff && b.psn <= 0xffffff);
	FUZZ_CHECK(b.mtu >= 1 && b.mtu <= 5);
	FUZZ_CHECK(b.slots && b.slots <= GD_SLOTS_MAX);
	FUZZ_CHECK(b.slot_bytes >= GD_SLOT_MIN && b.slot_bytes <= GD_SLOT_MAX &&
		   !(b.slot_bytes & (b.slot_bytes - 1)));
	FUZZ_CHECK(b.credit_addr && !(b.credit_addr & 7));
	FUZZ_CHECK(fuzz_terminated(b.listen, sizeof(b.listen)) && b.listen[0]);

	struct sockaddr_in v4 = { .sin_family = AF_INET };
	struct sockaddr_in6 v6 = { .sin6_family = AF_INET6 };
	inet_pton(AF_INET, "192.0.2.7", &v4.sin_addr);
	inet_pton(AF_INET6, "2001:db8::7", &v6.sin6_addr);
	identity_check(b.listen, (struct sockaddr *)&v4, sizeof(v4), "192.0.2.7", false);
	identity_check(b.listen, (struct sockaddr *)&v6, sizeof(v6), "2001:db8::7", true);

	uint8_t out[GD_BOOT_MAX];
	int n = gd_boot_encode(&b, out, sizeof(out));
	FUZZ_CHECK(n > 0 && (size_t)n == size);
	FUZZ_CHECK(!memcmp(out, data, size));
	return 0;
}
