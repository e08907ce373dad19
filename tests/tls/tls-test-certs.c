/* SPDX-License-Identifier: MIT */
#include "tls-test-certs.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/core_names.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include <openssl/sha.h>
#include <openssl/x509v3.h>

#define DIE(...)                                                              \
	do {                                                                  \
		fprintf(stderr, __VA_ARGS__);                                 \
		fputc('\n', stderr);                                          \
		abort();                                                      \
	} while (0)

static void fp_of(X509 *c, char *out)
{
	unsigned char *der = NULL, md[32];
	int n = i2d_X509_PUBKEY(X509_get_X509_PUBKEY(c), &der);
	SHA256(der, (size_t)n, md);
	OPENSSL_free(der);
	strcpy(out, "sha256:");
	for (int i = 0; i < 32; i++)
		sprintf(out + 7 + 2 * i, "%02x", md[i]);
}

void tid_make(struct tid *t, const char *dir, const char *cn, long nb_s,
	      long na_s, const struct tid *ca)
{
	static long serial = 1;
	memset(t, 0, sizeof(*t));
	t->key = EVP_EC_gen("P-256");
	if (!t->key)
		DIE("EVP_EC_gen failed");
	X509 *c = X509_new();
	X509_set_version(c, 2);
	ASN1_INTEGER_set(X509_get_serialNumber(c), serial++);
	X509_gmtime_adj(X509_getm_notBefore(c), nb_s);
	X509_gmtime_adj(X509_getm_notAfter(c), na_s);
	X509_set_pubkey(c, t->key);
	X509_NAME *nm = X509_get_subject_name(c);
	X509_NAME_add_entry_by_txt(nm, "CN", MBSTRING_ASC, (const unsigned char *)cn,
				   -1, -1, 0);
	X509_set_issuer_name(c, ca ? X509_get_subject_name(ca->cert) : nm);
	X509V3_CTX v3;
	X509V3_set_ctx(&v3, ca ? ca->cert : c, c, NULL, NULL, 0);
	X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &v3, NID_basic_constraints,
						  ca ? "CA:FALSE" : "critical,CA:TRUE");
	X509_add_ext(c, ext, -1);
	X509_EXTENSION_free(ext);
	if (!X509_sign(c, ca ? ca->key : t->key, EVP_sha256()))
		DIE("X509_sign failed");
	t->cert = c;
	fp_of(c, t->fp);

	snprintf(t->cert_path, sizeof(t->cert_path), "%s/%s.crt", dir, cn);
	snprintf(t->key_path, sizeof(t->key_path), "%s/%s.key", dir, cn);
	FILE *f = fopen(t->cert_path, "w");
	if (!f || !PEM_write_X509(f, c))
		DIE("write %s", t->cert_path);
	fclose(f);
	int fd = open(t->key_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	f = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (!f || !PEM_write_PrivateKey(f, t->key, NULL, NULL, 0, NULL, NULL))
		DIE("write %s", t->key_path);
	fclose(f);
}

void tid_free(struct tid *t)
{
	EVP_PKEY_free(t->key);
	X509_free(t->cert);
	memset(t, 0, sizeof(*t));
}

void tid_pins(const char *path, const struct tid *const *ids, size_t n)
{
	FILE *f = fopen(path, "w");
	if (!f)
		DIE("write %s", path);
	fprintf(f, "# test pins\n");
	for (size_t i = 0; i < n; i++)
		fprintf(f, "%s\n", ids[i]->fp);
	fclose(f);
}

EVP_PKEY *tid_forged_key(const struct tid *victim)
{
	unsigned char pub[256];
	size_t publen = 0;
	BIGNUM *priv = NULL;
	EVP_PKEY *other = EVP_EC_gen("P-256"), *forged = NULL;

	if (!EVP_PKEY_get_octet_string_param(victim->key, OSSL_PKEY_PARAM_PUB_KEY,
					     pub, sizeof(pub), &publen) ||
	    !EVP_PKEY_get_bn_param(other, OSSL_PKEY_PARAM_PRIV_KEY, &priv))
		DIE("forged key: cannot read key parts");
	OSSL_PARAM_BLD *b = OSSL_PARAM_BLD_new();
	OSSL_PARAM_BLD_push_utf8_string(b, OSSL_PKEY_PARAM_GROUP_NAME, "prime256v1", 0);
	OSSL_PARAM_BLD_push_octet_string(b, OSSL_PKEY_PARAM_PUB_KEY, pub, publen);
	OSSL_PARAM_BLD_push_BN(b, OSSL_PKEY_PARAM_PRIV_KEY, priv);
	OSSL_PARAM *p = OSSL_PARAM_BLD_to_param(b);
	EVP_PKEY_CTX *pc = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL);
	if (!pc || EVP_PKEY_fromdata_init(pc) <= 0 ||
	    EVP_PKEY_fromdata(pc, &forged, EVP_PKEY_KEYPAIR, p) <= 0)
		DIE("forged key: fromdata failed");
	EVP_PKEY_CTX_free(pc);
	OSSL_PARAM_free(p);
	OSSL_PARAM_BLD_free(b);
	BN_free(priv);
	EVP_PKEY_free(other);
	return forged;
}

void tid_tmpdir(char *dir, size_t len)
{
	const char *t = getenv("TMPDIR");
	snprintf(dir, len, "%s/zap-tls-XXXXXX", t && *t ? t : "/tmp");
	if (!mkdtemp(dir))
		DIE("mkdtemp %s", dir);
}

void tid_rmdir(const char *dir)
{
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd))
		fprintf(stderr, "could not remove %s\n", dir);
}
