/* SPDX-License-Identifier: MIT */
/*
 * The same-host upgrade's side-channel datagrams (util/tcp/tcp_codec.c,
 * tcp_parse_shm_msg(); WIRE.md "Same host"): whatever a process holding
 * or reaching an "@zap-shm-<id>" name sends. The proofs inside are
 * compared with HMACs the wire computes itself; what a peer controls is
 * the layout, the magic, the ring size and the descriptors that came.
 *
 * First byte: bit 0 the kernel's truncation flag, bits 1-2 the number of
 * descriptors that came (0-3), bit 3 whether one is expected, bits 4-6
 * which message is expected (mod 5); the rest is the datagram.
 */
#include <errno.h>
#include <stdbool.h>

#include "fuzz.h"
#include "tcp_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint32_t magics[] = { TCP_SHM_CHAL, TCP_SHM_REQ, TCP_SHM_ANS,
					   TCP_SHM_RING, TCP_SHM_DONE };
	struct tcp_shm_msg m;
	char why[160] = "";

	if (size < 1)
		return 0;
	bool trunc = data[0] & 1;
	int nfd = (data[0] >> 1) & 3, want_fds = (data[0] >> 3) & 1;
	uint32_t want = magics[((data[0] >> 4) & 7) % 5];
	size_t len = size - 1;
	/* An exact-size copy, so that ASan sees any read past the datagram. */
	uint8_t *buf = malloc(len ? len : 1);
	if (!buf)
		abort();
	memcpy(buf, data + 1, len);
	int r = tcp_parse_shm_msg(buf, len, trunc, nfd, want, want_fds, &m, why, sizeof(why));
	uint32_t magic = 0, log2 = 0;
	if (len >= 8) {
		memcpy(&magic, buf, 4);
		memcpy(&log2, buf + 4, 4);
	}
	/* WIRE.md: exactly 72 bytes, the expected magic, ring size 2^21, and
	 * exactly the descriptors the message carries; anything else is
	 * refused with a reason. */
	bool ok = !trunc && len == TCP_SHM_MSG && magic == want && log2 == 21 &&
		  nfd == want_fds;
	if (ok) {
		FUZZ_CHECK(r == 0);
		FUZZ_CHECK(m.magic == want && m.log2 == 21);
		FUZZ_CHECK(!memcmp(m.a, buf + 8, 32) && !memcmp(m.b, buf + 40, 32));
	} else {
		FUZZ_CHECK(r == -EPROTO && why[0]);
	}
	free(buf);
	return 0;
}
