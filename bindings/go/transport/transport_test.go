package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestPickDefault(t *testing.T) {
	tr := pickDefault(t)
	if tr.Name() != "default" {
		t.Fatalf("Name() = %q", tr.Name())
	}
	c := tr.Caps()
	if c.MaxMsgSize == 0 || c.GPUResident || c.DeviceBuffers {
		t.Fatalf("default caps: %+v", c)
	}
	if a := addrOf(t, tr); !strings.HasPrefix(a, "127.0.0.1:") {
		t.Fatalf("LocalAddr = %q, want 127.0.0.1:port (ZAP_LISTEN)", a)
	}
	// Case and blanks do not matter.
	tr2, err := Pick("  DEFAULT ")
	if err != nil || tr2.Name() != "default" {
		t.Fatalf("Pick(\"  DEFAULT \") = %v, %v", tr2, err)
	}
	tr2.Close()
}

// Two endpoints of one process (one user, one host) move to shared
// memory; before any message there is no path.
func TestPeerPath(t *testing.T) {
	a, b := pickDefault(t), pickDefault(t)
	ba := addrOf(t, b)
	if _, err := PeerPath(a, ba); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("PeerPath before any message = %v, want ENOTCONN", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Send(ctx, ba, []byte("x")); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if _, _, err := b.Recv(ctx); err != nil {
		t.Fatalf("Recv: %v", err)
	}
	if p, err := PeerPath(a, ba); err != nil || p != "shm" {
		t.Fatalf("PeerPath = %q, %v; want shm", p, err)
	}
}

func TestRegistered(t *testing.T) {
	names := Registered()
	found := false
	for _, n := range names {
		found = found || n == "default"
	}
	if !found {
		t.Fatalf("Registered() = %q, no default", names)
	}
	t.Logf("registered: %q", names)
}

// On this machine dpdk is not configured: strict fails with the reason,
// a plain request falls back.
func TestDPDKNotAvailable(t *testing.T) {
	ch, err := Explain("dpdk")
	if err != nil {
		t.Fatalf("Explain(dpdk): %v", err)
	}
	if !ch.Fallback {
		t.Skipf("dpdk is available here (%s): nothing to check", ch.Reason)
	}
	tr, err := Pick("=dpdk")
	if err == nil {
		tr.Close()
		t.Fatal("Pick(=dpdk) succeeded, Explain said fallback")
	}
	if !errors.Is(err, ErrNotAvailable) {
		t.Fatalf("Pick(=dpdk): %v does not match ErrNotAvailable", err)
	}
	msg := err.Error()
	generic := "requested transport not available on this host"
	i := strings.Index(msg, generic)
	if i < 0 || !strings.Contains(msg[i+len(generic):], "dpdk") {
		t.Fatalf("Pick(=dpdk) error says no reason: %q", msg)
	}
	t.Logf("Pick(=dpdk): %v", err)

	tr, err = Pick("dpdk")
	if err != nil {
		t.Fatalf("Pick(dpdk) did not fall back: %v", err)
	}
	defer tr.Close()
	if tr.Name() == "dpdk" || tr.Name() != ch.Name {
		t.Fatalf("Pick(dpdk) = %q, Explain said %q", tr.Name(), ch.Name)
	}
	t.Logf("Pick(dpdk) fell back to %s: %s", tr.Name(), ch.Reason)

	if _, err := Pick("=nosuchtransport"); err == nil || !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("Pick(=nosuchtransport): %v, want EINVAL", err)
	}
}

func TestLoadReport(t *testing.T) {
	r, err := LoadReport()
	if err != nil {
		t.Fatal(err)
	}
	var def *PluginReport
	for i := range r.Plugins {
		if r.Plugins[i].Name == "default" {
			def = &r.Plugins[i]
		}
	}
	if def == nil || !def.Builtin || def.State != "loaded" {
		t.Fatalf("report has no loaded built-in default: %+v", r.Plugins)
	}
	if Version() == "" {
		t.Fatal("no version")
	}
}

// Go <-> C: sizes from 0 B to the 64 MiB maximum, in both directions.
// zgp:check: Go sends, C checks the bytes. zgp:send: C sends, Go checks.
// And an echo (Go -> C -> Go) of the same bytes.
func TestInteropSizes(t *testing.T) {
	peer := startPeer(t)
	tr := pickDefault(t)
	max := int(tr.Caps().MaxMsgSize)
	if max != 64<<20 {
		t.Logf("max message size %d (ZAP_MAX_MSG_BYTES set?)", max)
	}
	const seed = 7
	pat := pattern(max, seed)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	recv := func() []byte {
		t.Helper()
		from, msg, err := tr.Recv(ctx)
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		if from != peer {
			t.Fatalf("Recv from %q, want %q", from, peer)
		}
		return msg
	}
	send := func(b []byte) {
		t.Helper()
		if err := tr.Send(ctx, peer, b); err != nil {
			t.Fatalf("Send %d B: %v", len(b), err)
		}
	}
	for _, n := range []int{0, 1, 63, 64, 4095, 4096, 65537, 1<<20 + 7, 16 << 20, max} {
		send([]byte(fmt.Sprintf("zgp:check %d %d", n, seed)))
		send(pat[:n])
		if got := recv(); string(got) != "ok" {
			t.Fatalf("C checked %d B from Go: %s", n, got)
		}
		send([]byte(fmt.Sprintf("zgp:send %d %d", n, seed)))
		if got := recv(); !bytes.Equal(got, pat[:n]) {
			t.Fatalf("%d B from C: got %d B, differing", n, len(got))
		}
		send(pat[:n])
		if got := recv(); !bytes.Equal(got, pat[:n]) {
			t.Fatalf("echo of %d B: got %d B, differing", n, len(got))
		}
	}
	// One byte over the maximum fails at the sender.
	big := make([]byte, max+1)
	if err := tr.Send(ctx, peer, big); !errors.Is(err, syscall.EMSGSIZE) {
		t.Fatalf("Send %d B: %v, want EMSGSIZE", len(big), err)
	}
}

// 64 goroutines share one transport, each sending to the C echo peer and
// receiving (any goroutine's) replies; every message comes back exactly
// once and intact.
func TestConcurrent64(t *testing.T) {
	peer := startPeer(t)
	tr := pickDefault(t)
	const workers, each = 64, 100
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var mu sync.Mutex
	seen := make(map[uint64]bool)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				id := uint64(w)<<32 | uint64(i)
				msg := pattern(8+(w*each+i)%3000, byte(w))
				binary.LittleEndian.PutUint64(msg, id)
				if err := tr.Send(ctx, peer, msg); err != nil {
					errs <- err
					return
				}
				_, got, err := tr.Recv(ctx)
				if err != nil {
					errs <- err
					return
				}
				gid := binary.LittleEndian.Uint64(got)
				gw, gi := int(gid>>32), int(uint32(gid))
				want := pattern(8+(gw*each+gi)%3000, byte(gw))
				binary.LittleEndian.PutUint64(want, gid)
				if !bytes.Equal(got, want) {
					errs <- fmt.Errorf("message %d/%d came back damaged", gw, gi)
					return
				}
				mu.Lock()
				dup := seen[gid]
				seen[gid] = true
				mu.Unlock()
				if dup {
					errs <- fmt.Errorf("message %d/%d came back twice", gw, gi)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(seen) != workers*each {
		t.Fatalf("%d messages came back, want %d", len(seen), workers*each)
	}
}

// A Recv blocked in libzap returns ctx.Err() promptly on cancel and at
// the deadline.
func TestRecvCancelAndDeadline(t *testing.T) {
	tr := pickDefault(t)
	ctx, cancel := context.WithCancel(context.Background())
	start := time.Now() // before the timer, so that it cannot look early
	time.AfterFunc(100*time.Millisecond, cancel)
	within(t, 5*time.Second, "Recv after cancel", func() {
		_, _, err := tr.Recv(ctx)
		if err != context.Canceled {
			t.Errorf("Recv: %v, want context.Canceled", err)
		}
	})
	// No upper bound: the point is that the call returns at all (within()
	// fails a hang), and speed on a busy host is not a test's business.
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("cancelled Recv returned after %v, before the cancel at 100ms", d)
	}

	start = time.Now()
	ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, _, err := tr.Recv(ctx)
	if err != context.DeadlineExceeded {
		t.Errorf("Recv: %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("Recv with a 200ms deadline returned after %v", d)
	}

	// Already done: no call into libzap at all.
	if _, _, err := tr.Recv(ctx); err != context.DeadlineExceeded {
		t.Errorf("Recv on expired ctx: %v", err)
	}
}

// A Send blocked on a peer that does not read (TCP pushes back) returns
// ctx.Err() on the deadline and on cancel (the 10 s loops fail a hang).
func TestSendBlockedCancelAndDeadline(t *testing.T) {
	a := pickDefault(t)
	b := pickDefault(t) // never receives while a sends
	to := addrOf(t, b)
	big := make([]byte, 64<<20)

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	var err error
	for err == nil && time.Since(start) < 10*time.Second {
		err = a.Send(ctx, to, big)
	}
	if err != context.DeadlineExceeded {
		t.Fatalf("Send to a peer that does not read: %v, want context.DeadlineExceeded", err)
	}

	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start = time.Now()
	for err = nil; err == nil && time.Since(start) < 10*time.Second; {
		err = a.Send(ctx, to, big)
	}
	if err != context.Canceled {
		t.Fatalf("Send: %v, want context.Canceled", err)
	}
}

// Close wakes every goroutine blocked in Recv or Send; they and later
// calls get net.ErrClosed.
func TestCloseWhileBlocked(t *testing.T) {
	tr, err := Pick("default")
	if err != nil {
		t.Fatal(err)
	}
	sink := pickDefault(t) // never receives, so Send blocks
	to := addrOf(t, sink)
	const receivers, senders = 8, 2
	errs := make(chan error, receivers+senders)
	for i := 0; i < receivers; i++ {
		go func() {
			_, _, err := tr.Recv(context.Background())
			errs <- err
		}()
	}
	big := make([]byte, 64<<20)
	for i := 0; i < senders; i++ {
		go func() {
			var err error
			for err == nil {
				err = tr.Send(context.Background(), to, big)
			}
			errs <- err
		}()
	}
	time.Sleep(500 * time.Millisecond) // let them block
	within(t, 5*time.Second, "Close", func() {
		if err := tr.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	for i := 0; i < receivers+senders; i++ {
		select {
		case err := <-errs:
			if !errors.Is(err, net.ErrClosed) {
				t.Errorf("blocked call after Close: %v, want net.ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%d calls still blocked after Close", receivers+senders-i)
		}
	}
	if err := tr.Send(context.Background(), to, nil); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Send after Close: %v", err)
	}
	if _, _, err := tr.Recv(context.Background()); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Recv after Close: %v", err)
	}
	if err := tr.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if tr.Name() != "default" || tr.Caps().MaxMsgSize == 0 {
		t.Errorf("Name/Caps after Close: %q %+v", tr.Name(), tr.Caps())
	}
}

// Calls with cancellable contexts leave no goroutine behind.
func TestNoGoroutineLeak(t *testing.T) {
	a := pickDefault(t)
	b := pickDefault(t)
	to := addrOf(t, b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Warm up (libzap's connection, the runtime's own goroutines).
	a.Send(ctx, to, []byte("x"))
	b.Recv(ctx)
	before := runtime.NumGoroutine()
	for i := 0; i < 500; i++ {
		if err := a.Send(ctx, to, []byte("ping")); err != nil {
			t.Fatal(err)
		}
		if _, _, err := b.Recv(ctx); err != nil {
			t.Fatal(err)
		}
		short, c2 := context.WithTimeout(ctx, time.Millisecond)
		b.Recv(short) // times out
		c2()
	}
	// A watcher that was just handed off may still be on its way out.
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Fatalf("%d goroutines after 1500 calls, %d before", n, before)
	}
}

func TestAllocBufferWithoutPool(t *testing.T) {
	tr := pickDefault(t)
	ba, ok := tr.(BufferAllocator)
	if !ok {
		t.Fatal("Transport from Pick is not a BufferAllocator")
	}
	if _, err := ba.AllocBuffer(4096); !errors.Is(err, ErrNotAvailable) {
		t.Fatalf("AllocBuffer on default: %v, want ErrNotAvailable", err)
	}
	if n := ba.PoolBytes(); n != 0 {
		t.Fatalf("PoolBytes on default = %d", n)
	}
}

func TestSendBadPeer(t *testing.T) {
	tr := pickDefault(t)
	err := tr.Send(context.Background(), "no port here", []byte("x"))
	if !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("Send to a malformed peer: %v, want EINVAL", err)
	}
	err = tr.Send(context.Background(), strings.Repeat("x", 300)+":1", nil)
	if !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("Send to an overlong peer: %v, want EINVAL", err)
	}
}

// The fast path allocates nothing but Recv's copy: the binding's
// per-call state lives in pooled C memory.
func TestAllocsPerCall(t *testing.T) {
	a := pickDefault(t)
	b := pickDefault(t)
	to := addrOf(t, b)
	ctx := context.Background()
	msg := make([]byte, 64)
	a.Send(ctx, to, msg) // connect
	b.Recv(ctx)
	if n := testing.AllocsPerRun(200, func() {
		if err := a.Send(ctx, to, msg); err != nil {
			t.Fatal(err)
		}
		if _, _, err := b.Recv(ctx); err != nil {
			t.Fatal(err)
		}
	}); n > 1 {
		t.Fatalf("%.1f allocations per Send+Recv, want 1 (Recv's copy)", n)
	}
}
