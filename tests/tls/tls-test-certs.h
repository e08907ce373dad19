/* SPDX-License-Identifier: MIT */
/*
 * Test identities made at test time with the OpenSSL API (no private key
 * is committed): EC P-256 keys, self-signed or CA-signed certificates with
 * a chosen validity window, written to a private temporary directory.
 */
#ifndef ZAP_TLS_TEST_CERTS_H
#define ZAP_TLS_TEST_CERTS_H

#include <openssl/evp.h>
#include <openssl/x509.h>

struct tid {
	EVP_PKEY *key;
	X509 *cert;
	char cert_path[512], key_path[512];
	char fp[80];  /* sha256:<hex> of the SPKI */
};

/* A new key and a certificate for @cn, valid from now+@nb_s to now+@na_s
 * seconds, signed by @ca (NULL: self-signed), written under @dir. */
void tid_make(struct tid *t, const char *dir, const char *cn, long nb_s,
	      long na_s, const struct tid *ca);
void tid_free(struct tid *t);
/* Write a pin file of the given identities' fingerprints. */
void tid_pins(const char *path, const struct tid *const *ids, size_t n);
/* A key whose public half is @victim's but whose private half is random:
 * it "matches" @victim's certificate yet cannot sign for it. */
EVP_PKEY *tid_forged_key(const struct tid *victim);
/* mkdtemp under $TMPDIR or /tmp; rm -rf of it. */
void tid_tmpdir(char *dir, size_t len);
void tid_rmdir(const char *dir);

#endif
