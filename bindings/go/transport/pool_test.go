package transport

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// pickPool opens gopool, the host-memory pool plugin built with the tests
// (bindings/go/testdata/gopool.c; cap 1 MiB). test.sh puts it on
// ZAP_PLUGIN_PATH; a bare `go test` skips, saying so.
func pickPool(t *testing.T) (Transport, BufferAllocator) {
	t.Helper()
	tr, err := Pick("=gopool")
	if err != nil {
		if os.Getenv("ZAP_GO_PEER") == "" {
			t.Skipf("no gopool test plugin (run bindings/go/test.sh BUILD_DIR): %v", err)
		}
		t.Fatalf("Pick(=gopool): %v", err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr, tr.(BufferAllocator)
}

func TestBuffer(t *testing.T) {
	_, ba := pickPool(t)
	b, err := ba.AllocBuffer(1000)
	if err != nil {
		t.Fatal(err)
	}
	p := b.Bytes()
	if len(p) != 1000 {
		t.Fatalf("len(Bytes()) = %d, want 1000", len(p))
	}
	copy(p, pattern(1000, 3))
	if string(b.Bytes()) != string(pattern(1000, 3)) {
		t.Fatal("Bytes() does not alias one buffer")
	}
	if b.DevicePtr() != nil {
		t.Fatal("host-memory buffer has a device pointer")
	}
	if n := ba.PoolBytes(); n < 1000 {
		t.Fatalf("PoolBytes() = %d with 1000 B out", n)
	}
	b.Release()
	b.Release() // no-op

	z, err := ba.AllocBuffer(0)
	if err != nil || len(z.Bytes()) != 0 {
		t.Fatalf("AllocBuffer(0) = %v, %v", z, err)
	}
	z.Release()

	if _, err := ba.AllocBuffer(2 << 20); !errors.Is(err, syscall.EMSGSIZE) {
		t.Fatalf("AllocBuffer over the largest class: %v, want EMSGSIZE", err)
	}
}

// A full pool blocks AllocBuffer until a Release; Close wakes a blocked
// AllocBuffer; a buffer held across Close stays usable until Released.
func TestBufferPoolFull(t *testing.T) {
	tr, ba := pickPool(t)
	full, err := ba.AllocBuffer(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		b, err := ba.AllocBuffer(1 << 20)
		if err == nil {
			b.Release()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("AllocBuffer on a full pool returned at once: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	full.Release()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("AllocBuffer after Release: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("AllocBuffer still blocked after Release")
	}

	held, err := ba.AllocBuffer(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_, err := ba.AllocBuffer(1 << 20)
		got <- err
	}()
	time.Sleep(200 * time.Millisecond)
	tr.Close()
	select {
	case err := <-got:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("AllocBuffer blocked across Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("AllocBuffer still blocked after Close")
	}
	held.Bytes()[0] = 1 // still valid memory
	held.Release()
	if _, err := ba.AllocBuffer(1); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("AllocBuffer after Close: %v", err)
	}
	if n := ba.PoolBytes(); n != 0 {
		t.Fatalf("PoolBytes after Close = %d", n)
	}
}

// uma, where this host has it (a CUDA device with managed memory): its
// pool hands out device-visible buffers, and messages from default land
// in managed memory, which Recv copies out. Skips, with the probe's
// reason, only where uma's probe said "not present"; a uma plugin that is
// missing, failed to load or whose probe failed is a failure.
func TestUMA(t *testing.T) {
	rep, err := LoadReport()
	if err != nil {
		t.Fatal(err)
	}
	var row *PluginReport
	for i := range rep.Plugins {
		if rep.Plugins[i].Name == "uma" {
			row = &rep.Plugins[i]
		}
	}
	if row == nil {
		t.Fatalf("no uma row in the load report (ZAP_PLUGIN_PATH?)")
	}
	if row.State == "not present" {
		t.Skipf("needs a CUDA device with managed memory: uma: not present: %s", row.Reason)
	}
	if row.State != "loaded" {
		t.Fatalf("uma: %s: %s", row.State, row.Reason)
	}
	tr, err := Pick("=uma")
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if c := tr.Caps(); !c.DeviceBuffers {
		t.Errorf("uma caps: %+v", c)
	}
	ba := tr.(BufferAllocator)
	b, err := ba.AllocBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	if b.DevicePtr() == nil {
		t.Error("uma buffer has no device pointer")
	}
	b.Release()

	src := pickDefault(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	want := pattern(1<<20, 9)
	if err := src.Send(ctx, addrOf(t, tr), want); err != nil {
		t.Fatal(err)
	}
	_, got, err := tr.Recv(ctx)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("uma Recv: %d B, %v", len(got), err)
	}
}
