/* SPDX-License-Identifier: MIT */
/*
 * What the files of util/tls share.
 *
 *   tls_pins.c  pin files and fingerprint text (pure, fuzzed)
 *   tls_files.c reading the certificate, key, CA and pin files safely
 *   tls_ctx.c   an endpoint's identity and trust: files, SSL_CTX, the
 *               certificate check that replaces OpenSSL's chain check
 *   tls_conn.c  one connection: the socket BIO, handshake, read, write
 *
 * A struct ztls_ctx is written only by ztls_ctx_new() and read-only after
 * it returns (OpenSSL's SSL_CTX is safe to share once configured). A
 * struct ztls_conn belongs to one thread at a time (zap-tls.h).
 */
#ifndef ZAP_TLS_INT_H
#define ZAP_TLS_INT_H

#include "zap-tls.h"

#include <openssl/ssl.h>

struct ztls_ctx {
	SSL_CTX *ssl;
	struct ztls_pins pins;
	bool has_ca;
	bool ktls_kernel;        /* ktls asked for and the kernel offers it */
	char fp[ZTLS_FP_LEN];    /* our own certificate's key */
	unsigned char fpbin[32]; /* the same, binary */
	char trust[160];
	char warning[320]; /* for the caller to log at open, or "" */
};

struct ztls_conn {
	SSL *ssl;
	struct ztls_ctx *x;
	int fd;
	bool server;
	bool tls_seen; /* server: the first byte was a TLS record */
	bool done;     /* handshake complete */
	bool broken;   /* fatal error seen: no close_notify */
	bool has_want;
	unsigned char want[32];
	char peer_fp[ZTLS_FP_LEN];
	char vwhy[320]; /* why our certificate check refused */
	char cipher[64];
};

/* Which checks ztls_file_read() applies (tls_files.c). */
enum ztls_file_kind {
	ZTLS_FILE_PUBLIC, /* the certificate: a regular file */
	ZTLS_FILE_SECRET, /* the key: ours or root's, no access for others */
	ZTLS_FILE_TRUST,  /* CA bundle, pins: ours or root's, only we write
			   * it and every directory on the way to it */
};

/* Read the whole file @path (named @var in messages), at most @max bytes,
 * after the checks @kind asks for. 0 with *@buf (free() it; OPENSSL_cleanse
 * it first if secret) and *@len; or a negative errno with @why: -ENOENT,
 * -EACCES (open), -EINVAL (not a regular file), -EFBIG, -EPERM (owner or
 * mode), -ENOMEM. */
int ztls_file_read(const char *var, const char *path, enum ztls_file_kind kind,
		   size_t max, char **buf, size_t *len, char *why, size_t whylen);

/* SHA-256 of @cert's DER SubjectPublicKeyInfo. 0, or -1. */
int ztls_spki_sha256(X509 *cert, unsigned char fp[32]);

/* Drain OpenSSL's error queue into @why after "@what: ". Returns the
 * packed code of the last error (0 if none). */
unsigned long ztls_ssl_err(char *why, size_t whylen, const char *what);

/* The certificate check (SSL_CTX_set_cert_verify_callback). */
int ztls_verify_cb(X509_STORE_CTX *sc, void *arg);

/* The socket BIO used when kernel TLS is not in play: send() with
 * MSG_NOSIGNAL (OpenSSL's socket BIO write()s, which raises SIGPIPE in the
 * application when the peer has gone). */
BIO *ztls_bio_new(int fd);

#endif /* ZAP_TLS_INT_H */
