// Command go-hello is the Go program packaging/test-packages.sh builds
// against the installed packages alone: two endpoints of the installed Go
// package exchange a message, and it prints libzap's version, the
// transport and the message.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/libzap/libzap/bindings/go/transport"
)

func fail(err error) {
	fmt.Fprintln(os.Stderr, "go-hello:", err)
	os.Exit(1)
}

func main() {
	a, err := transport.PickWith("default", transport.Listen("127.0.0.1:0"))
	if err != nil {
		fail(err)
	}
	defer a.Close()
	b, err := transport.PickWith("default", transport.Listen("127.0.0.1:0"))
	if err != nil {
		fail(err)
	}
	defer b.Close()
	to, err := transport.LocalAddr(b)
	if err != nil {
		fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.Send(ctx, to, []byte("hello")); err != nil {
		fail(err)
	}
	_, msg, err := b.Recv(ctx)
	if err != nil {
		fail(err)
	}
	fmt.Printf("libzap %s, %s: %s\n", transport.Version(), b.Name(), msg)
}
