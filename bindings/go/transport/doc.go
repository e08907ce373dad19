// Package transport is the pluggable GPU-aware ZAP transport, over libzap.
//
// It keeps the API of the original Go package name for name (Pick,
// Registered, ErrNotAvailable, Transport, Capabilities, Buffer,
// BufferAllocator), so switching is an import path; the transports are
// libzap's:
//
//	default   — kernel TCP sockets. Always available.
//	uma       — the default wire, received bytes in CUDA managed memory,
//	            so GPU kernels read them without a copy.
//	gpudirect — RDMA (libibverbs RC queue pairs) into GPU memory.
//	dpdk      — DPDK kernel bypass, configured by the operator.
//
// All four implement the same Transport interface. Pick() chooses the best
// available implementation at runtime, honoring a caller-supplied
// preference and falling through gracefully when a preferred path is
// unavailable. libzap discovers the plugins at run time (ZAP_PLUGIN_PATH,
// then its plugin directory); this package needs only libzap.so and its
// header at build time.
//
// Beyond the original: PickWith (Pick with options: Listen, TLS,
// MaxMsgSize, SendTimeout, MaxPoolBytes, in place of the environment
// variables), LocalAddr (the address peers send to), PeerPath
// (shared memory, Unix socket or TCP to a peer), Explain (the
// transport a preference gets, and why), LoadReport and Version (what the
// plugin scan found), and two Capabilities fields (DeviceBuffers,
// MaxMsgSize). cmd/zap-info-go in this module is a zap-info in Go.
//
// # Errors
//
// Errors wrap what they mean: errors.Is(err, ErrNotAvailable) for a
// transport (or a pool) that does not exist here, with libzap's reason in
// the text; ctx.Err() itself (context.Canceled, context.DeadlineExceeded)
// when the context ended first; net.ErrClosed once the transport is
// closed; otherwise libzap's errno, e.g. errors.Is(err, syscall.EMSGSIZE)
// for a message over Caps().MaxMsgSize.
//
// # Contexts
//
// A context's deadline and cancellation reach libzap as a zap ctx, so a
// Send or Recv blocked in libzap returns ctx.Err() promptly when the
// context ends. A context that can be cancelled costs one short-lived
// goroutine per call (Go 1.19 has no context.AfterFunc), which is done
// with the call when the call returns and exits then: none outlives its
// call. context.Background() costs no goroutine and no allocation.
//
// # Memory rules
//
//   - Recv returns a copy: the message is copied out of libzap's buffer
//     (which may be device-visible memory) into a new Go slice, and the
//     buffer goes back to libzap before Recv returns. The slice is the
//     caller's to keep and modify; nothing needs releasing.
//   - Send reads msg during the call only; msg may be reused or changed
//     once Send returns. libzap never keeps a pointer into Go's heap past
//     a call: all the state libzap holds between calls (contexts, messages,
//     buffers) is C memory.
//   - AllocBuffer is not in the Transport interface (which is the original
//     package's): reach it with a type assertion, t.(BufferAllocator),
//     which holds for every Transport from Pick and PickWith.
//   - A Buffer from AllocBuffer is C memory owned by the transport's pool,
//     not Go memory: Bytes() aliases it, the garbage collector never frees
//     it, and it must be Released (once; a second Release is a no-op).
//     Bytes() must not be used after Release. Buffers stay valid after the
//     transport is closed, until Released.
//   - A Transport must be Closed; one dropped without Close is closed by a
//     finalizer, eventually.
//
// # Concurrency
//
// Every method may be called from many goroutines at once: several may
// Send (to the same or different peers) and Recv on one Transport.
// Messages to one peer arrive in the order they were sent. Close wakes
// goroutines blocked in Send, Recv or AllocBuffer; they return an error
// matching net.ErrClosed.
//
// # Building
//
// cgo must find zap/zap.h and libzap.so: with libzap installed (libzap-dev)
// that is automatic; against a Meson build tree set
// CGO_CFLAGS=-I<src>/include, CGO_LDFLAGS=-L<build>/core and
// LD_LIBRARY_PATH=<build>/core (bindings/go/test.sh does this).
package transport
