package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// ErrNotAvailable is returned by Pick when no transport at the requested
// preference level is buildable on this host.
//
// Errors from this package that mean "not available" (libzap's
// ZAP_ENOTAVAIL) match it with errors.Is, and their text goes on with
// libzap's reason, e.g. "... not available on this host: dpdk: not
// configured (ZAP_DPDK_EAL_ARGS unset)". AllocBuffer returns it too when
// the transport has no pool of its own.
var ErrNotAvailable = errors.New("zap/transport: requested transport not available on this host")

// Capabilities describes what a Transport implementation supports.
type Capabilities struct {
	// GPUResident is true when message bytes never visit CPU memory.
	GPUResident bool
	// ZeroCopy is true when no memcpy happens between NIC and the buffer
	// returned by Recv. (GPU residency implies zero copy; the reverse
	// does not — UMA is GPU-resident-and-zero-copy without DMA.)
	ZeroCopy bool
	// MinLatencyMicros is a hint for the implementation's floor latency
	// on a warm path (informational; not a contract). 0 when unmeasured.
	MinLatencyMicros float64

	// Beyond the seed: fields libzap reports as well.

	// DeviceBuffers is true when AllocBuffer gives device-visible memory.
	DeviceBuffers bool
	// MaxMsgSize is the largest message Send and Recv accept.
	MaxMsgSize uint64
}

// Transport moves whole messages between endpoints: one message per Send
// and per Recv, delivered intact and, to one peer, in order. Batching and
// request/reply correlation belong to the application above it.
//
// Every Transport from Pick and PickWith is also a BufferAllocator: get
// at its pool with a type assertion, t.(BufferAllocator).
//
// All methods are safe for concurrent use by many goroutines.
type Transport interface {
	// Name returns the canonical low-cardinality transport identifier
	// (matches the env-var spelling): "default", "uma", "gpudirect",
	// "dpdk". Used in metrics labels and log lines.
	Name() string
	// Send delivers msg to peer. Implementations may zero-copy directly
	// from GPU memory; the caller MUST NOT reuse the msg buffer until
	// the call returns.
	Send(ctx context.Context, peer string, msg []byte) error
	// Recv blocks until the next message arrives or ctx is cancelled.
	// Returned msg may alias a GPU-mapped buffer; the caller MUST copy
	// before returning the buffer to the transport.
	//
	// In this package Recv always returns a copy in Go memory: the slice
	// is the caller's to keep, and nothing needs returning.
	Recv(ctx context.Context) (peer string, msg []byte, err error)
	// Close releases any held resources (sockets, GPU mapped regions,
	// DPDK queues, IB QPs).
	Close() error
	// Caps reports what this transport supports. Callers that need
	// GPU-resident bytes (UMA / GPUDirect) gate on Caps().GPUResident
	// at construction time, not per-call.
	Caps() Capabilities
}

// Buffer is one slab of managed memory handed out by a BufferAllocator.
// For the UMA transport on Linux+CUDA, the underlying pointer is CUDA
// managed memory — the same bytes the GPU sees. Calling Bytes() gives a Go
// slice that shares the storage; calling DevicePtr() gives the raw device
// pointer for CUDA kernel launches.
//
// Release returns the buffer to its allocator. Double-Release is a no-op.
// The memory is libzap's (C memory), not Go's: the garbage collector does
// not free it, so every Buffer must be Released, and Bytes() must not be
// used after Release.
type Buffer interface {
	// Bytes returns a Go slice aliasing the buffer. Length is the
	// requested size, not the slab class size. Mutating the slice
	// mutates GPU-visible memory (when GPU-resident).
	Bytes() []byte
	// DevicePtr returns the raw device pointer. For UMA this is the
	// same address as &Bytes()[0] (unified memory). For non-UMA
	// allocators this is nil and the caller must not pass it to CUDA.
	DevicePtr() unsafe.Pointer
	// Release returns the buffer to its allocator. The slice returned
	// by Bytes() must not be used after Release.
	Release()
}

// BufferAllocator hands out managed buffers from a transport's pool.
//
// The Transport interface does not include it (its method set is the
// original package's), but every Transport from Pick and PickWith
// implements it, so a type assertion gets at it:
//
//	ba := t.(transport.BufferAllocator) // holds for every t from Pick
//	b, err := ba.AllocBuffer(1 << 20)
//	if errors.Is(err, transport.ErrNotAvailable) {
//		// no pool here (default): use heap memory
//	}
//
// The assertion fails only for a Transport that is not from this package
// (a test double, say). Whether t has a pool is AllocBuffer's answer:
// transports that cannot deliver pool memory (default TCP) return an
// error matching ErrNotAvailable, so the caller knows to fall back to
// heap allocation. Caps().DeviceBuffers says beforehand whether buffers
// are device-visible.
//
// Capacity in bytes is the operator-configurable pool size (MaxPoolBytes,
// else ZAP_UMA_POOL_BYTES for uma, default 4 GiB); allocations from a full
// pool block until a buffer is Released (or the transport is closed).
type BufferAllocator interface {
	// AllocBuffer returns a buffer of at least `size` bytes. The
	// returned Buffer.Bytes() slice has length `size` even though the
	// underlying slab class may be larger.
	AllocBuffer(size int) (Buffer, error)
	// PoolBytes returns the total bytes currently owned by the pool
	// (configurable maximum). Used for metrics. 0 without a pool.
	PoolBytes() int
}

// Pick returns the requested transport, falling back to the next-best
// available implementation when the request is unavailable. Empty
// preference selects automatically: gpudirect > dpdk > uma > default.
//
// The preference string is matched case-insensitively against Name().
// Special value "default" returns the standard transport unconditionally.
// libzap's syntax applies beyond the seed: "a,b" tries in order, "^a"
// excludes, and "=name" is strict: no fallback, an error matching
// ErrNotAvailable that says why instead. Explain tells, without opening
// anything, which transport a preference gets and why.
//
// Pick reads ZAP_TRANSPORT once (used when preference is empty);
// subsequent changes to the env var have no effect on already-constructed
// transports. The new transport listens on ZAP_LISTEN (default
// "0.0.0.0:0"); LocalAddr tells the address bound.
//
// First call also emits one log line listing the transports that were
// probed and which won. Set ZAP_TRANSPORT_QUIET=1 to silence.
//
// PickWith takes options (listen address, TLS files, limits) in place of
// those variables.
func Pick(preference string) (Transport, error) { return PickWith(preference) }

// Registered returns the list of transports that this binary can attempt to
// instantiate: libzap's built-in default plus every plugin that loaded
// with a valid descriptor, best rank first, as zap-info lists them (and
// cmd/zap-info-go, a zap-info in Go). LoadReport says why the others did
// not load.
func Registered() []string { return registeredC() }

// LocalAddr returns the address other endpoints Send to in order to reach
// t (for default and uma, the bound "host:port", e.g. "127.0.0.1:40123").
// t must come from Pick.
func LocalAddr(t Transport) (string, error) {
	tr, ok := t.(*zapTransport)
	if !ok {
		return "", fmt.Errorf("zap/transport: LocalAddr: %T is not from Pick", t)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.closing {
		return "", closedErr("address")
	}
	return addressOf(tr.t)
}

// PeerPath says how t's messages to peer travel now: "shm" (shared-memory
// rings: a peer process on this host that may share memory with us),
// "unix" or "tcp" (zap_peer_path()). An error wrapping syscall.ENOTCONN
// means t has no connection to peer (none yet, or it closed). t must come
// from Pick.
func PeerPath(t Transport, peer string) (string, error) {
	tr, ok := t.(*zapTransport)
	if !ok {
		return "", fmt.Errorf("zap/transport: PeerPath: %T is not from Pick", t)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.closing {
		return "", closedErr("path")
	}
	return peerPathOf(tr.t, peer)
}

// zapError is a failed libzap call: errors.Is matches its errno (say
// syscall.EMSGSIZE) and, for ZAP_ENOTAVAIL, ErrNotAvailable.
type zapError struct {
	op   string        // what failed: "pick \"=dpdk\"", "send 10.0.0.2:7000"...
	code syscall.Errno // positive errno
	text string        // zap_strerror(): generic text and libzap's reason
}

func (e *zapError) Error() string { return "zap/transport: " + e.op + ": " + e.text }
func (e *zapError) Unwrap() error { return e.code }
func (e *zapError) Is(target error) bool {
	return target == ErrNotAvailable && e.code == syscall.ENODEV
}

func closedErr(op string) error {
	return fmt.Errorf("zap/transport: %s: %w", op, net.ErrClosed)
}

// zapTransport is the Transport Pick returns.
//
// Closing: zap_close() frees the C transport, so no call may enter libzap
// with it afterwards, and a call blocked in libzap must be woken first.
// Every call therefore puts its slot on @active under @mu before entering
// libzap (and backs out when @closing is set); Close sets @closing, fires
// the zap ctx of every active call, waits for @active to empty and only
// then calls zap_close(). Calls woken that way return an error matching
// net.ErrClosed. This rests on libzap's contract that a blocked call
// returns promptly once its ctx fires, whatever the transport.
type zapTransport struct {
	name string
	caps Capabilities // as opened; returned once closed

	// sendTimeout bounds a Send whose context has no deadline (0: none):
	// SendTimeout, else ZAP_SEND_TIMEOUT_MS. libzap applies its own only
	// to a zap_send() given no zap ctx, and every call here passes one.
	sendTimeout time.Duration

	mu      sync.Mutex
	t       *cTransport // nil once closed
	closing bool
	active  *slot // calls in flight, a doubly linked list
	free    *slot // idle slots (linked by next), at most maxFreeSlots
	nfree   int
	drained sync.Cond // on mu; signalled when active empties while closing

	lastPeer atomic.Pointer[string] // see takeMsg
}

func (tr *zapTransport) Name() string { return tr.name }

func (tr *zapTransport) Caps() Capabilities {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.closing {
		return tr.caps
	}
	if c, err := capsOf(tr.t); err == nil {
		tr.caps = c
	}
	return tr.caps
}

// Send delivers msg to peer ("host:port" for default and uma; a peer
// string from Recv replies). msg may be reused once Send returns: libzap
// has copied it or handed it to the kernel by then. A ctx without a
// deadline is bounded by the transport's send timeout, if it has one
// (SendTimeout, ZAP_SEND_TIMEOUT_MS). Errors: ctx.Err() when ctx ends
// first; net.ErrClosed after Close; syscall.ETIMEDOUT when the send
// timeout passes; otherwise libzap's errno (errors.Is(err,
// syscall.EMSGSIZE), syscall.ECONNREFUSED...) with its reason in the
// text.
func (tr *zapTransport) Send(ctx context.Context, peer string, msg []byte) error {
	cl := call{bound: tr.sendTimeout}
	if err := cl.begin(tr, ctx, "send"); err != nil {
		return err
	}
	cl.peer = peer
	rc := sendC(cl.c, peer, msg)
	return cl.end(rc, "send")
}

// Recv waits for the next message from any peer. The slice is a copy in
// Go memory, the caller's to keep; peer is the sender, as a string Send
// accepts to reply.
func (tr *zapTransport) Recv(ctx context.Context) (string, []byte, error) {
	var cl call
	if err := cl.begin(tr, ctx, "recv"); err != nil {
		return "", nil, err
	}
	rc := recvC(cl.c)
	if rc != 0 {
		return "", nil, cl.end(rc, "recv")
	}
	var lp string
	last := tr.lastPeer.Load()
	if last != nil {
		lp = *last
	}
	peer, msg := takeMsg(cl.c, lp)
	if last == nil || peer != lp {
		p := peer // only this copy escapes, and only when peer changed
		tr.lastPeer.Store(&p)
	}
	return peer, msg, cl.end(0, "recv")
}

// Close closes the transport. Calls blocked in Send, Recv or AllocBuffer
// in other goroutines return an error matching net.ErrClosed, and so do
// later calls. Buffers still held stay valid until Released. Close is
// idempotent: later calls return nil.
func (tr *zapTransport) Close() error {
	tr.mu.Lock()
	if tr.closing {
		tr.mu.Unlock()
		return nil
	}
	tr.closing = true
	for s := tr.active; s != nil; s = s.next {
		cancelCCall(s.c)
	}
	for tr.active != nil {
		tr.drained.Wait()
	}
	for s := tr.free; s != nil; s = s.next {
		freeCCall(s.c)
	}
	tr.free, tr.nfree = nil, 0
	t := tr.t
	tr.t = nil
	tr.mu.Unlock()
	runtime.SetFinalizer(tr, nil)
	closeC(t)
	return nil
}

// AllocBuffer takes a buffer of size bytes from the transport's pool,
// blocking while the pool is full. Without a pool (default) the error
// matches ErrNotAvailable.
func (tr *zapTransport) AllocBuffer(size int) (Buffer, error) {
	if size < 0 {
		return nil, fmt.Errorf("zap/transport: AllocBuffer: negative size %d", size)
	}
	var cl call
	if err := cl.begin(tr, context.Background(), "alloc buffer"); err != nil {
		return nil, err
	}
	b, rc := bufferAllocC(cl.c, size)
	if err := cl.end(rc, "alloc buffer"); err != nil {
		return nil, err
	}
	return b, nil
}

// PoolBytes returns the bytes the transport's pool owns now (in use plus
// cached for reuse); 0 when it has none or it is closed.
func (tr *zapTransport) PoolBytes() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.closing {
		return 0
	}
	n := poolBytesC(tr.t)
	if n < 0 {
		return 0
	}
	return int(n)
}

// buffer is the Buffer AllocBuffer returns. Its memory is libzap's.
type buffer struct {
	b        *cBuffer
	bytes    []byte
	dev      unsafe.Pointer
	released atomic.Bool
}

func (b *buffer) Bytes() []byte             { return b.bytes }
func (b *buffer) DevicePtr() unsafe.Pointer { return b.dev }

// Release gives the buffer back. Only the first Release reaches libzap:
// libzap's own double-release check holds only until the pool hands the
// memory out again, and a Go program may well Release twice after that.
func (b *buffer) Release() {
	if b.released.CompareAndSwap(false, true) {
		bufferReleaseC(b.b)
	}
}
