/* SPDX-License-Identifier: MIT */
/*
 * The gpudirect bootstrap message (plugins/gpudirect/gd_proto.c), which a
 * peer sends over TCP before any queue pair exists: gd_boot_header() on
 * the first 8 bytes and gd_boot_decode() on the whole input. A message
 * that decodes has every field in its documented range, and encoding it
 * again gives back exactly the input bytes (one canonical form, so no two
 * different byte strings mean the same bootstrap).
 */
#include <errno.h>

#include "fuzz.h"
#include "gd_proto.h"

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

	uint8_t out[GD_BOOT_MAX];
	int n = gd_boot_encode(&b, out, sizeof(out));
	FUZZ_CHECK(n > 0 && (size_t)n == size);
	FUZZ_CHECK(!memcmp(out, data, size));
	return 0;
}
