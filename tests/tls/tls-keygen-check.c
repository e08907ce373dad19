/* SPDX-License-Identifier: MIT */
/* tls-keygen-check CERT KEY PEERS: load an identity with util/tls and print
 * its fingerprint (tests/tls/keygen-doc.sh). */
#include <stdio.h>

#include "zap-tls.h"

int main(int argc, char **argv)
{
	struct ztls_config cfg = {.cert = argv[1], .key = argv[2], .peers = argv[3]};
	struct ztls_ctx *x;
	char why[512];

	if (argc != 4) {
		fprintf(stderr, "usage: tls-keygen-check CERT KEY PEERS\n");
		return 2;
	}
	if (ztls_ctx_new(&cfg, &x, why, sizeof(why))) {
		fprintf(stderr, "%s\n", why);
		return 1;
	}
	printf("%s\n", ztls_ctx_fingerprint(x));
	ztls_ctx_free(x);
	return 0;
}
