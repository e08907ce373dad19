// Package cbench runs the round-trip loop of the Go benchmark in C, over
// libzap directly, in the benchmark's own process: the baseline the
// binding's added cost per call is measured against (cgo is not allowed
// in _test.go files, hence a package). Not part of the API.
package cbench

/*
#cgo pkg-config: zap
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zap/zap.h>

static double cb_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

// n round trips of size bytes to server after warm ones; announces them
// first when zperf (zap-perf's protocol). Returns 0 and the mean in *ns.
static int cb_run(const char *server, int zperf, size_t size, long n,
		  long warm, double *ns, char *why, size_t whylen)
{
	struct zap_transport *t;
	struct zap_msg *m;
	unsigned char *buf = calloc(1, size ? size : 1);
	double t0 = 0;
	int rc;

	if (!buf)
		return -ENOMEM;
	rc = zap_pick("default", 0, NULL, &t);
	if (rc)
		goto out;
	if (zperf) {
		char cmd[96];
		int len = snprintf(cmd, sizeof(cmd), "zperf lat %zu %ld 0", size, n + warm);
		if ((rc = zap_send(t, server, cmd, (size_t)len, NULL)) ||
		    (rc = zap_recv(t, NULL, &m)))
			goto close;
		zap_msg_release(m);
	}
	for (long i = 0; i < n + warm; i++) {
		if (i == warm)
			t0 = cb_now_ns();
		if ((rc = zap_send(t, server, buf, size, NULL)) ||
		    (rc = zap_recv(t, NULL, &m)))
			goto close;
		zap_msg_release(m);
	}
	*ns = (cb_now_ns() - t0) / (double)(n ? n : 1);
close:
	if (rc)
		snprintf(why, whylen, "%s", zap_strerror(rc));
	zap_close(t);
out:
	if (rc && !why[0])
		snprintf(why, whylen, "%s", zap_strerror(rc));
	free(buf);
	return rc;
}

// n one-way messages of size bytes from one endpoint to another in this
// process, batch at a time: batch sends, then batch receives, so that no
// call waits (the kernel holds a batch). What it measures is the cost of
// the calls themselves, without the scheduler's wake-ups.
static int cb_pipe(size_t size, long n, long batch, double *ns, char *why,
		   size_t whylen)
{
	struct zap_transport *a = NULL, *b = NULL;
	struct zap_msg *m;
	char to[ZAP_PEER_MAX];
	unsigned char *buf = calloc(1, size ? size : 1);
	double t0;
	int rc = -ENOMEM;

	if (!buf ||
	    (rc = zap_pick("default", 0, NULL, &a)) ||
	    (rc = zap_pick("default", 0, NULL, &b)) ||
	    (rc = zap_transport_address(b, to, sizeof(to))) ||
	    (rc = zap_send(a, to, buf, size, NULL)) ||
	    (rc = zap_recv(b, NULL, &m)))
		goto out;
	zap_msg_release(m);
	t0 = cb_now_ns();
	for (long done = 0; done < n; done += batch) {
		long k = n - done < batch ? n - done : batch;
		for (long i = 0; i < k; i++)
			if ((rc = zap_send(a, to, buf, size, NULL)))
				goto out;
		for (long i = 0; i < k; i++) {
			if ((rc = zap_recv(b, NULL, &m)))
				goto out;
			zap_msg_release(m);
		}
	}
	*ns = (cb_now_ns() - t0) / (double)(n ? n : 1);
out:
	if (rc)
		snprintf(why, whylen, "%s", zap_strerror(rc));
	zap_close(a);
	zap_close(b);
	free(buf);
	return rc;
}
*/
import "C"

import (
	"errors"
	"unsafe"
)

// RoundTrips runs n round trips of size bytes to server (after 100
// unmeasured ones) from C and returns the mean in nanoseconds. zperf:
// server is a zap-perf server, which wants each run announced.
func RoundTrips(server string, zperf bool, size, n int) (float64, error) {
	cs := C.CString(server)
	defer C.free(unsafe.Pointer(cs))
	var why [512]C.char
	var ns C.double
	z := C.int(0)
	if zperf {
		z = 1
	}
	if rc := C.cb_run(cs, z, C.size_t(size), C.long(n), 100, &ns, &why[0], C.size_t(len(why))); rc != 0 {
		return 0, errors.New("cbench: " + C.GoString(&why[0]))
	}
	return float64(ns), nil
}

// Pipeline sends n messages of size bytes between two endpoints in this
// process, batch sends then batch receives, and returns the mean time
// per message (one send and one receive) in nanoseconds.
func Pipeline(size, n, batch int) (float64, error) {
	var why [512]C.char
	var ns C.double
	if rc := C.cb_pipe(C.size_t(size), C.long(n), C.long(batch), &ns, &why[0], C.size_t(len(why))); rc != 0 {
		return 0, errors.New("cbench: " + C.GoString(&why[0]))
	}
	return float64(ns), nil
}
