package transport_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/libzap/libzap/bindings/go/transport"
)

// Open the best transport this host has (ZAP_TRANSPORT, else auto), or
// the one asked for; "default" is always there.
func ExamplePick() {
	t, err := transport.Pick("default")
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close()
	fmt.Println(t.Name())
	// Output: default
}

// Options in place of the environment variables: where to listen, the
// largest message, how long a Send without a deadline may wait, TLS files
// (transport.TLS). Each transport gets its own, so one process can open
// endpoints on several fixed addresses.
func ExamplePickWith() {
	t, err := transport.PickWith("default",
		transport.Listen("127.0.0.1:0"), // port 0: any free port
		transport.MaxMsgSize(1<<20),
		transport.SendTimeout(2*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close()
	fmt.Println(t.Caps().MaxMsgSize)
	// Output: 1048576
}

// A strict preference ("=name") fails instead of falling back, and says
// why; a plain one falls back, and Explain tells to what and why.
func ExamplePick_strict() {
	t, err := transport.Pick("=dpdk")
	if errors.Is(err, transport.ErrNotAvailable) {
		fmt.Println("no dpdk here:", err)
		ch, _ := transport.Explain("dpdk")
		fmt.Printf("dpdk would fall back to %s: %s\n", ch.Name, ch.Reason)
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close()
	fmt.Println("dpdk is configured")
}

// Send a message to another endpoint and reply to its sender. The slice
// Recv returns is a copy, the caller's to keep.
func ExampleTransport() {
	a, err := transport.Pick("default")
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	b, err := transport.Pick("default")
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	addr, err := transport.LocalAddr(b) // what b's peers send to
	if err != nil {
		log.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.Send(ctx, addr, []byte("ping")); err != nil {
		log.Fatal(err)
	}
	from, msg, err := b.Recv(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if err := b.Send(ctx, from, append(msg, " pong"...)); err != nil {
		log.Fatal(err)
	}
	_, reply, err := a.Recv(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(reply))
	// Output: ping pong
}

// A context's deadline and cancellation reach a call blocked in libzap.
func ExampleTransport_Recv_deadline() {
	t, err := transport.Pick("default")
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, _, err = t.Recv(ctx) // nobody sends
	fmt.Println(err == context.DeadlineExceeded)
	// Output: true
}

// Use pool memory where the transport has a pool (uma: CUDA managed
// memory a GPU kernel reads in place), heap memory where it has none.
// The Transport interface has no AllocBuffer: a type assertion reaches
// it, and succeeds for every Transport from Pick and PickWith.
func ExampleBufferAllocator() {
	t, err := transport.Pick("")
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close()
	var msg []byte
	if ba, ok := t.(transport.BufferAllocator); ok {
		b, err := ba.AllocBuffer(4096)
		switch {
		case err == nil:
			defer b.Release() // pool memory is not garbage collected
			msg = b.Bytes()
		case errors.Is(err, transport.ErrNotAvailable):
			msg = make([]byte, 4096) // no pool here (default)
		default:
			log.Fatal(err)
		}
	}
	fmt.Println(len(msg))
	// Output: 4096
}

// What the plugin scan found: a zap-info in a few lines (cmd/zap-info-go
// is the whole program).
func ExampleLoadReport() {
	r, err := transport.LoadReport()
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range r.Plugins {
		fmt.Printf("%-10s %-12s rank %4d  %s\n", p.Name, p.State, p.Rank, p.Reason)
	}
}
