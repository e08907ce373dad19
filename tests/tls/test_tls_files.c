/* SPDX-License-Identifier: MIT */
/*
 * util/tls's files (issue 35, trust configuration): the trust files
 * (ZAP_TLS_PEERS, ZAP_TLS_CA) are refused when anyone but their owner and
 * root could write them or a directory on the way to them, or when another
 * user owns them; a FIFO at any TLS path is refused, never waited on; the
 * files are read with a bound; a CA bundle of many roots draws a warning.
 *
 * alarm() bounds each case: the old code blocked for ever opening a FIFO.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include <openssl/pem.h>

#include "tls-test-certs.h"
#include "zap-tls.h"

#define OTHER_UID 12345

static char dir[256], pins[600];
static struct tid A, B, R[ZTLS_CA_FEW + 1];

static int setup(void **state)
{
	tid_tmpdir(dir, sizeof(dir));
	tid_make(&A, dir, "a", -60, 86400, NULL);
	tid_make(&B, dir, "b", -60, 86400, NULL);
	for (int i = 0; i <= ZTLS_CA_FEW; i++) {
		char cn[16];

		snprintf(cn, sizeof(cn), "root%d", i);
		tid_make(&R[i], dir, cn, -60, 86400, NULL);
	}
	snprintf(pins, sizeof(pins), "%s/peers", dir);
	const struct tid *ab[] = {&A, &B};
	tid_pins(pins, ab, 2);
	return 0;
}

static int teardown(void **state)
{
	tid_free(&A);
	tid_free(&B);
	for (int i = 0; i <= ZTLS_CA_FEW; i++)
		tid_free(&R[i]);
	tid_rmdir(dir);
	return 0;
}

static int each(void **state)
{
	alarm(20); /* a hang is a failure, not a stuck suite */
	return 0;
}

/* ztls_ctx_new() for A with @ca and @peers; the context freed. */
static int try_new(const char *ca, const char *peers, char *why, size_t whylen)
{
	struct ztls_config cfg = {.cert = A.cert_path, .key = A.key_path, .ca = ca,
				  .peers = peers};
	struct ztls_ctx *x = NULL;
	int r = ztls_ctx_new(&cfg, &x, why, whylen);

	ztls_ctx_free(x);
	return r;
}

static void expect_refused(const char *ca, const char *peers, int err, const char *part1,
			   const char *part2)
{
	char why[1024] = "";
	int r = try_new(ca, peers, why, sizeof(why));

	print_message("%d: %s\n", r, why);
	assert_int_equal(r, err);
	assert_non_null(strstr(why, part1));
	assert_non_null(strstr(why, part2));
}

static void copy_file(const char *from, const char *to, unsigned mode)
{
	char buf[4096];
	int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, mode);
	ssize_t n;

	assert_true(in >= 0 && out >= 0);
	while ((n = read(in, buf, sizeof(buf))) > 0)
		assert_int_equal(write(out, buf, (size_t)n), n);
	assert_int_equal(fchmod(out, mode), 0);
	close(in);
	close(out);
}

/* A fresh directory under the test directory, with @mode. */
static const char *subdir(const char *name, unsigned mode)
{
	static char d[8][600];
	static int k;
	char *p = d[k++ % 8];

	snprintf(p, 600, "%s/%s", dir, name);
	assert_int_equal(mkdir(p, 0700), 0);
	assert_int_equal(chmod(p, mode), 0);
	return p;
}

static void test_trust_file_modes(void **state)
{
	char p[700];

	/* The pin file as made: fine. */
	assert_int_equal(try_new(NULL, pins, p, sizeof(p)), 0);
	/* Group- or world-writable: whoever could write it could add a key. */
	snprintf(p, sizeof(p), "%s/gw.pins", dir);
	copy_file(pins, p, 0664);
	expect_refused(NULL, p, -EPERM, "ZAP_TLS_PEERS", "chmod go-w");
	snprintf(p, sizeof(p), "%s/ww.pins", dir);
	copy_file(pins, p, 0646);
	expect_refused(NULL, p, -EPERM, "writable by group or others", "ww.pins");
	/* Another user's. */
	snprintf(p, sizeof(p), "%s/other.pins", dir);
	copy_file(pins, p, 0644);
	if (geteuid() == 0) {
		assert_int_equal(chown(p, OTHER_UID, OTHER_UID), 0);
		expect_refused(NULL, p, -EPERM, "owned by uid 12345", "other.pins");
	} else {
		print_message("not root: the foreign owner case is not run\n");
	}
	/* The CA bundle the same. */
	snprintf(p, sizeof(p), "%s/gw-ca.pem", dir);
	copy_file(R[0].cert_path, p, 0664);
	expect_refused(p, NULL, -EPERM, "ZAP_TLS_CA", "chmod go-w");
}

static void test_trust_file_dirs(void **state)
{
	char p[700], link[700];
	const char *d;

	/* A directory others may write: they could swap the file. */
	d = subdir("gwdir", 0775);
	snprintf(p, sizeof(p), "%s/peers", d);
	copy_file(pins, p, 0644);
	expect_refused(NULL, p, -EPERM, "directory", "gwdir (on the way to");
	/* ...also for the CA bundle. */
	snprintf(p, sizeof(p), "%s/ca.pem", d);
	copy_file(R[0].cert_path, p, 0644);
	expect_refused(p, NULL, -EPERM, "ZAP_TLS_CA: directory", "gwdir");
	/* A parent directory. */
	d = subdir("wwparent", 0777);
	snprintf(p, sizeof(p), "%s/inner", d);
	assert_int_equal(mkdir(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/inner/peers", d);
	copy_file(pins, p, 0644);
	expect_refused(NULL, p, -EPERM, "wwparent (on the way to", "chmod go-w");
	/* A symbolic link in a safe directory to a file in an unsafe one:
	 * the file opened is checked, not just the name given. */
	snprintf(link, sizeof(link), "%s/to-gw.pins", dir);
	snprintf(p, sizeof(p), "%s/gwdir/peers", dir);
	assert_int_equal(symlink(p, link), 0);
	expect_refused(NULL, link, -EPERM, "gwdir (on the way to", "to-gw.pins");
	/* A symbolic link in an unsafe directory to a safe file: the link
	 * can be changed. */
	snprintf(link, sizeof(link), "%s/gwdir/to-safe.pins", dir);
	assert_int_equal(symlink(pins, link), 0);
	expect_refused(NULL, link, -EPERM, "gwdir (on the way to", "to-safe.pins");
	/* A sticky directory (/tmp's mode) is fine: others cannot rename or
	 * remove our entries there. */
	d = subdir("sticky", 01777);
	snprintf(p, sizeof(p), "%s/peers", d);
	copy_file(pins, p, 0644);
	assert_int_equal(try_new(NULL, p, link, sizeof(link)), 0);
	/* A relative path is checked from the working directory. */
	char cwd[512];
	assert_non_null(getcwd(cwd, sizeof(cwd)));
	assert_int_equal(chdir(dir), 0);
	expect_refused(NULL, "gwdir/peers", -EPERM, "gwdir (on the way to", "gwdir/peers");
	assert_int_equal(try_new(NULL, "peers", link, sizeof(link)), 0);
	assert_int_equal(chdir(cwd), 0);
}

/* A FIFO at any TLS path is refused at once (nobody writes to these). */
static void test_fifo(void **state)
{
	struct ztls_config cfg = {.cert = A.cert_path, .key = A.key_path, .peers = pins};
	struct ztls_ctx *x = NULL;
	char fifo[600], why[1024];

	snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	const char **slot[] = {&cfg.cert, &cfg.key, &cfg.ca, &cfg.peers};
	const char *names[] = {"ZAP_TLS_CERT", "ZAP_TLS_KEY", "ZAP_TLS_CA", "ZAP_TLS_PEERS"};
	for (int i = 0; i < 4; i++) {
		const char *keep = *slot[i];

		*slot[i] = fifo;
		assert_int_equal(ztls_ctx_new(&cfg, &x, why, sizeof(why)), -EINVAL);
		print_message("%s\n", why);
		assert_non_null(strstr(why, names[i]));
		assert_non_null(strstr(why, "not a regular file"));
		*slot[i] = keep;
	}
	/* A device too. */
	cfg.ca = "/dev/zero";
	assert_int_equal(ztls_ctx_new(&cfg, &x, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "not a regular file"));
}

/* Files are read with a bound, not whole whatever their size. */
static void test_bounded(void **state)
{
	struct ztls_config cfg = {.cert = A.cert_path, .key = A.key_path, .peers = pins};
	struct ztls_ctx *x = NULL;
	char big[600], why[1024];
	int fd;

	snprintf(big, sizeof(big), "%s/big.pem", dir);
	fd = open(big, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 64 << 20), 0); /* sparse */
	close(fd);
	cfg.cert = big;
	assert_int_equal(ztls_ctx_new(&cfg, &x, why, sizeof(why)), -EFBIG);
	assert_non_null(strstr(why, "ZAP_TLS_CERT"));
	cfg.cert = A.cert_path;
	cfg.ca = big;
	assert_int_equal(ztls_ctx_new(&cfg, &x, why, sizeof(why)), -EFBIG);
	assert_non_null(strstr(why, "ZAP_TLS_CA"));
}

/* A certificate with its chain still loads from the file's bytes. */
static void test_cert_chain(void **state)
{
	char chain[600], why[1024];
	FILE *f;

	snprintf(chain, sizeof(chain), "%s/chain.pem", dir);
	f = fopen(chain, "w");
	assert_non_null(f);
	PEM_write_X509(f, A.cert);
	PEM_write_X509(f, R[0].cert);
	fclose(f);
	struct ztls_config cfg = {.cert = chain, .key = A.key_path, .peers = pins};
	struct ztls_ctx *x = NULL;
	assert_int_equal(ztls_ctx_new(&cfg, &x, why, sizeof(why)), 0);
	assert_string_equal(ztls_ctx_fingerprint(x), A.fp);
	ztls_ctx_free(x);
	/* Garbage after the first certificate is an error, as before. */
	f = fopen(chain, "a");
	assert_non_null(f);
	fputs("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n", f);
	fclose(f);
	assert_int_equal(ztls_ctx_new(&cfg, &x, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "ZAP_TLS_CERT"));
}

/* A bundle of more than ZTLS_CA_FEW roots (a system bundle trusts any
 * public certificate) is worth a warning; a few are not. */
static void test_many_roots(void **state)
{
	char ca[600], why[1024];
	struct ztls_ctx *x = NULL;
	FILE *f;

	snprintf(ca, sizeof(ca), "%s/bundle.pem", dir);
	for (int n = 1; n <= ZTLS_CA_FEW + 1; n++) {
		f = fopen(ca, "w");
		assert_non_null(f);
		for (int i = 0; i < n; i++)
			PEM_write_X509(f, R[i].cert);
		fclose(f);
		struct ztls_config cfg = {.cert = A.cert_path, .key = A.key_path, .ca = ca};
		assert_int_equal(ztls_ctx_new(&cfg, &x, why, sizeof(why)), 0);
		if (n <= ZTLS_CA_FEW) {
			assert_null(ztls_ctx_warning(x));
		} else {
			const char *w = ztls_ctx_warning(x);

			assert_non_null(w);
			print_message("%s\n", w);
			assert_non_null(strstr(w, "9 certificates"));
			assert_non_null(strstr(w, "ZAP_TLS_CA"));
			assert_non_null(strstr(w, "any public certificate"));
		}
		ztls_ctx_free(x);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_trust_file_modes, each),
		cmocka_unit_test_setup(test_trust_file_dirs, each),
		cmocka_unit_test_setup(test_fifo, each),
		cmocka_unit_test_setup(test_bounded, each),
		cmocka_unit_test_setup(test_cert_chain, each),
		cmocka_unit_test_setup(test_many_roots, each),
	};

	return cmocka_run_group_tests_name("tls-files", tests, setup, teardown);
}
