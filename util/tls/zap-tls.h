/* SPDX-License-Identifier: MIT */
/*
 * TLS 1.3 with mutual authentication for stream sockets (OpenSSL 3), as a
 * component of its own: the TCP wire (util/tcp) runs every connection
 * through it when a certificate is configured; tests drive it over
 * socketpairs. It knows nothing about frames or peers' addresses.
 *
 * Trust: a peer is accepted when its certificate's public key is pinned
 * (ZAP_TLS_PEERS: "sha256:<hex>" SPKI fingerprints) and the certificate is
 * within its validity period, or when its chain verifies against the CA
 * bundle (ZAP_TLS_CA). An endpoint's own key counts as pinned. Both ends must present a certificate and prove its
 * key (TLS 1.3 CertificateVerify); ALPN "zap/1" is required. A connection
 * may further require one exact fingerprint (ztls_conn_new()'s @want_fp).
 *
 * Threads: a struct ztls_ctx is immutable once made and may be shared by
 * any number of threads and connections. A struct ztls_conn is used by one
 * thread at a time (OpenSSL's SSL objects are not thread-safe, not even a
 * read beside a write); callers that read and write from different threads
 * serialise the calls (the TCP wire holds a per-connection lock).
 *
 * Errors: negative errno values, with a one-line reason in @why where a
 * function takes one; OpenSSL's error queue is drained into that reason and
 * never left behind for another caller.
 */
#ifndef ZAP_TLS_H
#define ZAP_TLS_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* "sha256:" and 64 hex digits, NUL-terminated. */
#define ZTLS_FP_LEN 72
#define ZTLS_FP_PREFIX "sha256:"
#define ZTLS_ALPN "zap/1"

/* ------------------------------------------------------------------------ */
/* Pins (tls_pins.c): pure, fuzzed (fuzz/fuzz-tls-pins.c)                     */
/* ------------------------------------------------------------------------ */

/* A set of SHA-256 SPKI fingerprints, sorted, without duplicates. */
struct ztls_pins {
	unsigned char (*fp)[32];
	size_t n;
};

/* Largest pin file accepted, and most pins in one. */
#define ZTLS_PINS_MAX_BYTES (1u << 20)
#define ZTLS_PINS_MAX 65536u

/*
 * Parse a pin file's text (@len bytes, NUL bytes refused). Lines are
 * "sha256:<64 hex digits>" (hex in either case); blanks around a line,
 * empty lines and lines starting with '#' are ignored; anything else is an
 * error naming the line. Duplicates are allowed and merged. An empty set is
 * valid here (the caller decides whether it may trust nobody).
 * Return 0 and *@out (free with ztls_pins_free()), or -EINVAL / -E2BIG
 * (more than ZTLS_PINS_MAX) / -ENOMEM with @why.
 */
int ztls_pins_parse(const char *text, size_t len, struct ztls_pins *out, char *why,
		    size_t whylen);
void ztls_pins_free(struct ztls_pins *p);
bool ztls_pins_has(const struct ztls_pins *p, const unsigned char fp[32]);

/* "sha256:<hex>" of @fp into @out (ZTLS_FP_LEN bytes). */
void ztls_fp_format(const unsigned char fp[32], char out[ZTLS_FP_LEN]);
/* The reverse: exactly "sha256:" and 64 hex digits (either case). 0 or
 * -EINVAL. */
int ztls_fp_parse(const char *s, size_t len, unsigned char fp[32]);

/* ------------------------------------------------------------------------ */
/* Endpoint configuration (tls_ctx.c)                                        */
/* ------------------------------------------------------------------------ */

struct ztls_config {
	const char *cert;  /* PEM certificate (chain) file; required */
	const char *key;   /* PEM private key file, mode 0600 or stricter */
	const char *ca;    /* PEM CA bundle, or NULL */
	const char *peers; /* pin file, or NULL; at least one of ca, peers */
	bool ktls;         /* ask OpenSSL for kernel TLS (SSL_OP_ENABLE_KTLS) */
	/* TLS 1.3 cipher suites in order of preference (OpenSSL's syntax), or
	 * NULL: ZTLS_SUITES. Benchmarks compare them (bench/tls_record.c). */
	const char *suites;
	/* No read-ahead: each connection buffers one record, not
	 * 256 KiB of read-ahead (for many short connections held by peers,
	 * like the gpudirect bootstrap's handshakes in flight). */
	bool small_reads;
};

/* AES-128-GCM first: the fastest bulk AEAD with AES-NI (docs/wires.md,
 * "TLS speed"). */
#define ZTLS_SUITES \
	"TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"

struct ztls_ctx;

/*
 * The refusal every transport makes when TLS settings come without a
 * certificate (a key, CA or pins alone): the open fails with this reason,
 * never runs in plaintext. NULL when the settings are whole or absent.
 * Header-only, so that a transport without TLS (dpdk) says the same
 * without linking OpenSSL.
 */
static inline const char *ztls_partial_config(const char *cert, const char *key,
					      const char *ca, const char *peers)
{
	if (cert || !(key || ca || peers))
		return NULL;
	return "ZAP_TLS_KEY, ZAP_TLS_CA or ZAP_TLS_PEERS set without ZAP_TLS_CERT: "
	       "refusing to run in plaintext";
}

/*
 * Load and check an endpoint's identity and trust: every file must be a
 * regular file (a FIFO or device is refused, never waited on) of bounded
 * size; the key file must not be accessible by group or others (as ssh
 * requires of private keys) and must match the certificate; the CA bundle
 * and the pin file must be ours or root's and writable by their owner
 * only, and so must every directory on the way to them (as ssh requires of
 * authorized_keys; sticky directories such as /tmp excepted); the
 * certificate must be within its validity period; a CA bundle or a
 * non-empty pin file is required. Return 0 and *@out, or a negative errno
 * with @why naming the file and the problem: -EINVAL (missing setting, not
 * a regular file, bad PEM, key mismatch, bad pin file), -EPERM (owner or
 * mode of a file or directory), -EFBIG, -ENOENT/-EACCES (open), -ENOMEM.
 */
/*
 * What a transport's open returns for a failed ztls_ctx_new() @r: the
 * settings are wrong whatever errno says why (a missing file, its mode, bad
 * PEM), and a configuration error is -EINVAL everywhere (docs/loader.md);
 * only running out of memory stays itself.
 */
static inline int ztls_open_err(int r)
{
	return r == -ENOMEM ? r : -EINVAL;
}

int ztls_ctx_new(const struct ztls_config *cfg, struct ztls_ctx **out, char *why,
		 size_t whylen);
void ztls_ctx_free(struct ztls_ctx *x);

/* This endpoint's own fingerprint, "sha256:<hex>". */
const char *ztls_ctx_fingerprint(const struct ztls_ctx *x);
/* A one-line description of the trust settings ("pins: 3 keys; CA: file"). */
const char *ztls_ctx_trust(const struct ztls_ctx *x);
/* Roots in a CA bundle beyond which ztls_ctx_warning() speaks up. */
#define ZTLS_CA_FEW 8
/* A warning for the caller to log once at open, or NULL: a CA bundle of
 * more than ZTLS_CA_FEW certificates (a system bundle, whose every public
 * certificate would be trusted as a peer). */
const char *ztls_ctx_warning(const struct ztls_ctx *x);
/* Whether kernel TLS was asked for and the kernel offers it (the TLS ULP
 * is listed in /proc/sys/net/ipv4/tcp_available_ulp): then connections use
 * OpenSSL's socket BIO with SSL_OP_ENABLE_KTLS, else a userspace BIO. */
bool ztls_ctx_ktls(const struct ztls_ctx *x);

/* ------------------------------------------------------------------------ */
/* Connections (tls_conn.c)                                                  */
/* ------------------------------------------------------------------------ */

struct ztls_conn;

/*
 * Wrap the connected, non-blocking socket @fd (not taken over: the caller
 * still closes it, after ztls_conn_free()). @server: the accepting side.
 * @want_fp: NULL, or the only fingerprint ("sha256:<hex>") this connection
 * may reach, on top of the trust settings. 0 and *@out, -EINVAL (bad
 * @want_fp), -ENOMEM.
 */
int ztls_conn_new(struct ztls_ctx *x, int fd, bool server, const char *want_fp,
		  struct ztls_conn **out, char *why, size_t whylen);
/* Free; sends a close_notify if the handshake had completed and the socket
 * takes it without blocking. Accepts NULL. */
void ztls_conn_free(struct ztls_conn *c);

/*
 * Advance the handshake without blocking. 1: done (the peer is
 * authenticated); 0: call again once *@events (POLLIN or POLLOUT) is ready
 * on the socket; negative: failed, reason in @why: -EPROTO (not TLS, e.g.
 * a plaintext zap peer; wrong protocol or ALPN), -EACCES (the peer's
 * certificate is not trusted, out of its validity period, missing, or its
 * key was not proven), -ECONNRESET (closed during the handshake), -EPIPE
 * (server: closed before sending anything, e.g. a port probe), another
 * errno from the socket.
 */
int ztls_handshake(struct ztls_conn *c, short *events, char *why, size_t whylen);

/*
 * The same to completion, waiting with poll() until @deadline_ms
 * (CLOCK_MONOTONIC milliseconds) or until @stop_fd (-1: none) is readable.
 * 0, -ETIMEDOUT (a stalled peer), -ESHUTDOWN (@stop_fd), or
 * ztls_handshake()'s errors.
 */
int ztls_handshake_wait(struct ztls_conn *c, uint64_t deadline_ms, int stop_fd, char *why,
			size_t whylen);

/*
 * Read up to @len bytes. >0 bytes; 0 the peer closed (close_notify or
 * FIN); -EAGAIN with *@events to wait for; another negative errno with @why
 * (-EPROTO for a TLS error, -ECONNRESET).
 */
ssize_t ztls_read(struct ztls_conn *c, void *buf, size_t len, short *events, char *why,
		  size_t whylen);
/* Write up to @len bytes (partial writes). >0 bytes written; -EAGAIN with
 * *@events; another negative errno (-EPIPE when the peer went away). */
ssize_t ztls_write(struct ztls_conn *c, const void *buf, size_t len, short *events,
		   char *why, size_t whylen);
/* Whether decrypted or read-ahead bytes wait inside the TLS layer, so that
 * a read may succeed although the socket does not poll readable. */
bool ztls_pending(const struct ztls_conn *c);

/* The authenticated peer's fingerprint, "sha256:<hex>"; "" before the
 * handshake completed. Valid until ztls_conn_free(). */
const char *ztls_conn_peer_fp(const struct ztls_conn *c);
/* The negotiated protocol and cipher ("TLSv1.3 TLS_AES_128_GCM_SHA256"). */
const char *ztls_conn_cipher(const struct ztls_conn *c);
/* Whether the kernel encrypts (send) / decrypts (recv) this connection. */
bool ztls_conn_ktls_send(const struct ztls_conn *c);
/* The TLS 1.3 exporter (RFC 8446 7.5) for @label, no context: @len bytes
 * that both ends of this connection, and nobody else, can compute. After
 * the handshake completed; 0, or -EIO. */
int ztls_conn_export(struct ztls_conn *c, const char *label, unsigned char *out,
		     size_t len);
bool ztls_conn_ktls_recv(const struct ztls_conn *c);

#endif /* ZAP_TLS_H */
