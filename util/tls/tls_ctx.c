/* SPDX-License-Identifier: MIT */
/*
 * An endpoint's identity and trust: the key file, the certificate, the CA
 * bundle, the pin file (each read and checked by tls_files.c), and the
 * SSL_CTX that carries them (TLS 1.3 only, mutual authentication, ALPN
 * "zap/1", no session resumption, kernel TLS where the kernel offers it).
 * Written by ztls_ctx_new() alone; read-only afterwards (tls_int.h).
 */
#include "tls_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#define KEY_MAX_BYTES (1u << 20)
#define CERT_MAX_BYTES (1u << 20)
/* A system bundle is about 200 KiB. */
#define CA_MAX_BYTES (4u << 20)
#define ZTLS_READ_BUF (256u << 10)

unsigned long ztls_ssl_err(char *why, size_t whylen, const char *what)
{
	unsigned long e, last = 0;
	char buf[256] = "";

	while ((e = ERR_get_error())) {
		if (!last || ERR_GET_LIB(e) != ERR_LIB_SSL ||
		    ERR_GET_LIB(last) == ERR_LIB_SSL)
			last = e;
	}
	if (last) {
		const char *r = ERR_reason_error_string(last);
		snprintf(buf, sizeof(buf), "%s", r ? r : "unknown OpenSSL error");
	}
	if (why && whylen)
		snprintf(why, whylen, "%s%s%s", what, *buf ? ": " : "", buf);
	return last;
}

int ztls_spki_sha256(X509 *cert, unsigned char fp[32])
{
	unsigned char *der = NULL;
	unsigned int n = 0;
	int len = i2d_X509_PUBKEY(X509_get_X509_PUBKEY(cert), &der);
	int r = -1;

	if (len > 0 && EVP_Digest(der, (size_t)len, fp, &n, EVP_sha256(), NULL) &&
	    n == 32)
		r = 0;
	OPENSSL_free(der);
	return r;
}

static int no_passphrase(char *buf, int size, int rw, void *u)
{
	return 0; /* never prompt: an encrypted key fails to load */
}

/* The private key (tls_files.c checks its owner and mode on the open
 * file, so that the check and the read see the same file). */
static int load_key(const char *path, EVP_PKEY **out, char *why, size_t whylen)
{
	char *pem = NULL;
	size_t len = 0;
	int r;

	r = ztls_file_read("ZAP_TLS_KEY", path, ZTLS_FILE_SECRET, KEY_MAX_BYTES, &pem,
			   &len, why, whylen);
	if (r)
		return r;
	BIO *b = BIO_new_mem_buf(pem, (int)len);
	*out = b ? PEM_read_bio_PrivateKey(b, NULL, no_passphrase, NULL) : NULL;
	BIO_free(b);
	OPENSSL_cleanse(pem, len);
	free(pem);
	if (!*out) {
		char what[512];
		snprintf(what, sizeof(what),
			 "ZAP_TLS_KEY: %s holds no usable PEM private key (encrypted keys are not supported)",
			 path);
		ztls_ssl_err(why, whylen, what);
		r = -EINVAL;
	}
	return r;
}

static int load_pins(struct ztls_ctx *x, const char *path, char *why, size_t whylen)
{
	char *text = NULL, sub[200];
	size_t len = 0;
	int r;

	r = ztls_file_read("ZAP_TLS_PEERS", path, ZTLS_FILE_TRUST, ZTLS_PINS_MAX_BYTES,
			   &text, &len, why, whylen);
	if (r)
		return r;
	r = ztls_pins_parse(text, len, &x->pins, sub, sizeof(sub));
	free(text);
	if (r)
		snprintf(why, whylen, "ZAP_TLS_PEERS: %s: %s", path, sub);
	return r;
}

/* Our certificate and the chain after it, read through tls_files.c. */
static int load_cert(SSL_CTX *s, const char *path, char *why, size_t whylen)
{
	char *pem = NULL, what[512];
	size_t len = 0;
	X509 *c;
	int r;

	r = ztls_file_read("ZAP_TLS_CERT", path, ZTLS_FILE_PUBLIC, CERT_MAX_BYTES, &pem,
			   &len, why, whylen);
	if (r)
		return r;
	r = -EINVAL;
	BIO *b = BIO_new_mem_buf(pem, (int)len);
	c = b ? PEM_read_bio_X509_AUX(b, NULL, NULL, NULL) : NULL;
	if (!c || SSL_CTX_use_certificate(s, c) != 1)
		goto out;
	X509_free(c);
	SSL_CTX_clear_chain_certs(s);
	while ((c = PEM_read_bio_X509(b, NULL, NULL, NULL))) {
		if (SSL_CTX_add0_chain_cert(s, c) != 1)
			goto out;
	}
	/* The end of the file, not a damaged certificate after the first. */
	if (ERR_GET_REASON(ERR_peek_last_error()) == PEM_R_NO_START_LINE) {
		ERR_clear_error();
		r = 0;
	}
out:
	if (r) {
		X509_free(c);
		snprintf(what, sizeof(what),
			 "ZAP_TLS_CERT: %s holds no usable PEM certificate", path);
		ztls_ssl_err(why, whylen, what);
	}
	BIO_free(b);
	free(pem);
	return r;
}

/*
 * The CA bundle, read through tls_files.c (a trust file), into the
 * context's store. Any chain to any of its roots is trusted, so a bundle
 * of many roots (a system one) is worth a warning: *@n is their number.
 */
static int load_ca(SSL_CTX *s, const char *path, size_t *n, char *why, size_t whylen)
{
	X509_STORE *store = SSL_CTX_get_cert_store(s);
	char *pem = NULL, what[512];
	size_t len = 0;
	X509 *c;
	int r;

	*n = 0;
	r = ztls_file_read("ZAP_TLS_CA", path, ZTLS_FILE_TRUST, CA_MAX_BYTES, &pem, &len,
			   why, whylen);
	if (r)
		return r;
	BIO *b = BIO_new_mem_buf(pem, (int)len);
	while (b && (c = PEM_read_bio_X509_AUX(b, NULL, NULL, NULL))) {
		int ok = X509_STORE_add_cert(store, c);

		X509_free(c);
		if (!ok)
			break;
		(*n)++;
	}
	if (*n && ERR_GET_REASON(ERR_peek_last_error()) == PEM_R_NO_START_LINE) {
		ERR_clear_error();
	} else {
		snprintf(what, sizeof(what), "ZAP_TLS_CA: cannot load %s", path);
		ztls_ssl_err(why, whylen, what);
		r = -EINVAL;
	}
	BIO_free(b);
	free(pem);
	return r;
}

/* Is @cert within its validity period now? 0, or -EINVAL with @why. */
static int check_validity(X509 *cert, const char *who, char *why, size_t whylen)
{
	if (X509_cmp_current_time(X509_get0_notBefore(cert)) >= 0) {
		snprintf(why, whylen, "%s certificate is not valid yet", who);
		return -EINVAL;
	}
	if (X509_cmp_current_time(X509_get0_notAfter(cert)) <= 0) {
		snprintf(why, whylen, "%s certificate has expired", who);
		return -EINVAL;
	}
	return 0;
}

int ztls_verify_cb(X509_STORE_CTX *sc, void *arg)
{
	struct ztls_ctx *x = arg;
	SSL *ssl = X509_STORE_CTX_get_ex_data(sc, SSL_get_ex_data_X509_STORE_CTX_idx());
	struct ztls_conn *c = ssl ? SSL_get_app_data(ssl) : NULL;
	X509 *leaf = X509_STORE_CTX_get0_cert(sc);
	unsigned char fp[32];
	char fps[ZTLS_FP_LEN];

	if (!c || !leaf || ztls_spki_sha256(leaf, fp)) {
		if (c)
			snprintf(c->vwhy, sizeof(c->vwhy),
				 "cannot read the peer's certificate");
		X509_STORE_CTX_set_error(sc, X509_V_ERR_APPLICATION_VERIFICATION);
		return 0;
	}
	ztls_fp_format(fp, fps);
	if (c->has_want && memcmp(fp, c->want, 32)) {
		char want[ZTLS_FP_LEN];
		ztls_fp_format(c->want, want);
		snprintf(c->vwhy, sizeof(c->vwhy),
			 "the peer's key is %s, not the required %s", fps, want);
		X509_STORE_CTX_set_error(sc, X509_V_ERR_APPLICATION_VERIFICATION);
		return 0;
	}
	/* Our own key is trusted as if pinned: a connection to ourselves,
	 * or two endpoints sharing one identity, are the same node. */
	if (ztls_pins_has(&x->pins, fp) || !memcmp(fp, x->fpbin, 32)) {
		char sub[120];
		if (check_validity(leaf, "its", sub, sizeof(sub))) {
			snprintf(c->vwhy, sizeof(c->vwhy), "pinned key %s, but %s", fps,
				 sub);
			X509_STORE_CTX_set_error(sc, X509_V_ERR_CERT_HAS_EXPIRED);
			return 0;
		}
		memcpy(c->peer_fp, fps, sizeof(fps));
		return 1;
	}
	if (x->has_ca) {
		int ok = X509_verify_cert(sc);
		if (ok > 0) {
			memcpy(c->peer_fp, fps, sizeof(fps));
			return 1;
		}
		snprintf(c->vwhy, sizeof(c->vwhy),
			 "key %s is not pinned and its certificate does not verify against ZAP_TLS_CA: %s",
			 fps,
			 X509_verify_cert_error_string(X509_STORE_CTX_get_error(sc)));
		return 0;
	}
	snprintf(c->vwhy, sizeof(c->vwhy), "key %s is not pinned (ZAP_TLS_PEERS)", fps);
	X509_STORE_CTX_set_error(sc, X509_V_ERR_APPLICATION_VERIFICATION);
	return 0;
}

/* Server: pick "zap/1" or end the handshake (no_application_protocol). */
static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
		       const unsigned char *in, unsigned int inlen, void *arg)
{
	size_t al = sizeof(ZTLS_ALPN) - 1;

	for (unsigned i = 0; i < inlen;) {
		unsigned l = in[i];
		if (i + 1 + l > inlen)
			break;
		if (l == al && !memcmp(in + i + 1, ZTLS_ALPN, al)) {
			*out = in + i + 1;
			*outlen = (unsigned char)l;
			return SSL_TLSEXT_ERR_OK;
		}
		i += 1 + l;
	}
	return SSL_TLSEXT_ERR_ALERT_FATAL;
}

/* Whether the kernel offers the TLS upper-layer protocol (loaded). */
static bool kernel_has_tls_ulp(void)
{
	char buf[256];
	FILE *f = fopen("/proc/sys/net/ipv4/tcp_available_ulp", "re");
	bool yes = false;

	if (!f)
		return false;
	if (fgets(buf, sizeof(buf), f))
		for (char *t = strtok(buf, " \n"); t; t = strtok(NULL, " \n"))
			if (!strcmp(t, "tls"))
				yes = true;
	fclose(f);
	return yes;
}

/* TLS 1.3 only, no resumption, peer verification through our callback and
 * our ALPN: the settings every connection of this context shares. */
static int ctx_protocol(struct ztls_ctx *x, SSL_CTX *s, const struct ztls_config *cfg,
			char *why, size_t whylen)
{
	static const unsigned char alpn[] = "\x05" ZTLS_ALPN;

	SSL_CTX_set_min_proto_version(s, TLS1_3_VERSION);
	SSL_CTX_set_max_proto_version(s, TLS1_3_VERSION);
	if (SSL_CTX_set_ciphersuites(s, cfg->suites ? cfg->suites : ZTLS_SUITES) != 1) {
		ztls_ssl_err(why, whylen, "TLS 1.3 cipher suites");
		return -EINVAL;
	}
	/* No resumption: every connection proves its key afresh. */
	SSL_CTX_set_session_cache_mode(s, SSL_SESS_CACHE_OFF);
	SSL_CTX_set_num_tickets(s, 0);
	SSL_CTX_set_options(s, SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION |
				       SSL_OP_IGNORE_UNEXPECTED_EOF);
	SSL_CTX_set_mode(s, SSL_MODE_ENABLE_PARTIAL_WRITE |
				    SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	x->ktls_kernel = cfg->ktls && kernel_has_tls_ulp();
	if (x->ktls_kernel)
		SSL_CTX_set_options(s, SSL_OP_ENABLE_KTLS);
	else if (!cfg->small_reads) {
		/* Read ahead into a buffer of several records: one read()
		 * per burst instead of two per record (header, body). */
		SSL_CTX_set_read_ahead(s, 1);
		SSL_CTX_set_default_read_buffer_len(s, ZTLS_READ_BUF);
	}
	SSL_CTX_set_verify(s, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
	SSL_CTX_set_cert_verify_callback(s, ztls_verify_cb, x);
	SSL_CTX_set_alpn_select_cb(s, alpn_select, x);
	if (SSL_CTX_set_alpn_protos(s, alpn, sizeof(alpn) - 1)) {
		ztls_ssl_err(why, whylen, "ALPN");
		return -ENOMEM;
	}
	return 0;
}

/* This endpoint's certificate (in date, its key fingerprint kept for the
 * peer's pins and the logs) and the private key that must match it. */
static int ctx_identity(struct ztls_ctx *x, SSL_CTX *s, const struct ztls_config *cfg,
			char *why, size_t whylen)
{
	EVP_PKEY *key = NULL;
	unsigned char fp[32];
	int r;

	r = load_cert(s, cfg->cert, why, whylen);
	if (r)
		return r;
	X509 *own = SSL_CTX_get0_certificate(s);
	char sub[120];
	if (check_validity(own, "this endpoint's", sub, sizeof(sub))) {
		snprintf(why, whylen, "ZAP_TLS_CERT: %s: %s", cfg->cert, sub);
		return -EINVAL;
	}
	if (ztls_spki_sha256(own, fp)) {
		ztls_ssl_err(why, whylen, "ZAP_TLS_CERT: cannot hash the public key");
		return -EINVAL;
	}
	ztls_fp_format(fp, x->fp);
	memcpy(x->fpbin, fp, 32);

	r = load_key(cfg->key, &key, why, whylen);
	if (r)
		return r;
	if (SSL_CTX_use_PrivateKey(s, key) != 1 || SSL_CTX_check_private_key(s) != 1) {
		char what[512];
		snprintf(what, sizeof(what),
			 "ZAP_TLS_KEY: %s does not match ZAP_TLS_CERT %s", cfg->key,
			 cfg->cert);
		ztls_ssl_err(why, whylen, what);
		EVP_PKEY_free(key);
		return -EINVAL;
	}
	EVP_PKEY_free(key);
	return 0;
}

/* Whom this endpoint trusts: a CA bundle, pinned keys or both; refused
 * when neither gives a peer a way in. */
static int ctx_trust(struct ztls_ctx *x, SSL_CTX *s, const struct ztls_config *cfg,
		     char *why, size_t whylen)
{
	int r;

	if (cfg->ca) {
		size_t roots;

		r = load_ca(s, cfg->ca, &roots, why, whylen);
		if (r)
			return r;
		x->has_ca = true;
		if (roots > ZTLS_CA_FEW)
			snprintf(x->warning, sizeof(x->warning),
				 "ZAP_TLS_CA: %s holds %zu certificates: any peer with a certificate from any of them is trusted (a system bundle trusts any public certificate); give only the CA that signs your nodes",
				 cfg->ca, roots);
	}
	if (cfg->peers) {
		r = load_pins(x, cfg->peers, why, whylen);
		if (r)
			return r;
	}
	if (!x->has_ca && !x->pins.n) {
		snprintf(
			why, whylen,
			cfg->peers
				? "ZAP_TLS_PEERS: %s pins no key and ZAP_TLS_CA is not set: this endpoint would trust nobody"
				: "%sneither ZAP_TLS_CA nor ZAP_TLS_PEERS is set: this endpoint would trust nobody",
			cfg->peers ? cfg->peers : "");
		return -EINVAL;
	}
	snprintf(x->trust, sizeof(x->trust), "%zu pinned key%s%s", x->pins.n,
		 x->pins.n == 1 ? "" : "s", x->has_ca ? ", CA bundle" : "");
	return 0;
}

/* The SSL_CTX is x's as soon as it exists, so the caller's ztls_ctx_free()
 * releases it whichever step fails. */
static int ctx_setup(struct ztls_ctx *x, const struct ztls_config *cfg, char *why,
		     size_t whylen)
{
	SSL_CTX *s = SSL_CTX_new(TLS_method());
	int r;

	if (!s) {
		ztls_ssl_err(why, whylen, "SSL_CTX_new");
		return -ENOMEM;
	}
	x->ssl = s;
	r = ctx_protocol(x, s, cfg, why, whylen);
	if (!r)
		r = ctx_identity(x, s, cfg, why, whylen);
	if (!r)
		r = ctx_trust(x, s, cfg, why, whylen);
	return r;
}

int ztls_ctx_new(const struct ztls_config *cfg, struct ztls_ctx **out, char *why,
		 size_t whylen)
{
	struct ztls_ctx *x;
	int r;

	*out = NULL;
	if (!cfg->cert || !*cfg->cert || !cfg->key || !*cfg->key) {
		snprintf(why, whylen,
			 "%s is not set (TLS needs a certificate and its key)",
			 !cfg->cert || !*cfg->cert ? "ZAP_TLS_CERT" : "ZAP_TLS_KEY");
		return -EINVAL;
	}
	x = calloc(1, sizeof(*x));
	if (!x) {
		snprintf(why, whylen, "out of memory");
		return -ENOMEM;
	}
	ERR_clear_error();
	r = ctx_setup(x, cfg, why, whylen);
	ERR_clear_error();
	if (r) {
		ztls_ctx_free(x);
		return r;
	}
	*out = x;
	return 0;
}

void ztls_ctx_free(struct ztls_ctx *x)
{
	if (!x)
		return;
	SSL_CTX_free(x->ssl);
	ztls_pins_free(&x->pins);
	free(x);
}

const char *ztls_ctx_fingerprint(const struct ztls_ctx *x)
{
	return x->fp;
}

const char *ztls_ctx_trust(const struct ztls_ctx *x)
{
	return x->trust;
}

const char *ztls_ctx_warning(const struct ztls_ctx *x)
{
	return x->warning[0] ? x->warning : NULL;
}

bool ztls_ctx_ktls(const struct ztls_ctx *x)
{
	return x->ktls_kernel;
}
