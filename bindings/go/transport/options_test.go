package transport

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func pickWith(t *testing.T, pref string, opts ...Option) Transport {
	t.Helper()
	tr, err := PickWith(pref, opts...)
	if err != nil {
		t.Fatalf("PickWith(%q): %v", pref, err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// Listen replaces ZAP_LISTEN (127.0.0.1:0 in these tests): the transport
// reports the address asked for, and messages reach it there.
func TestPickWithListen(t *testing.T) {
	// A port free a moment ago; another process may take it in between,
	// which fails the pick with EADDRINUSE, not the test's point: retry.
	var tr Transport
	var want string
	for i := 0; tr == nil; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		want = l.Addr().String()
		l.Close()
		tr, err = PickWith("=default", Listen(want))
		if err != nil && (!errors.Is(err, syscall.EADDRINUSE) || i == 10) {
			t.Fatalf("PickWith(Listen(%q)): %v", want, err)
		}
	}
	defer tr.Close()
	if got := addrOf(t, tr); got != want {
		t.Fatalf("LocalAddr = %q, want %q (the Listen option)", got, want)
	}

	// A Linux abstract socket name, unique to this process.
	name := fmt.Sprintf("unix:@zap-go-test-%d", os.Getpid())
	u := pickWith(t, "=default", Listen(name))
	if got := addrOf(t, u); got != name {
		t.Fatalf("LocalAddr = %q, want %q (the Listen option)", got, name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := tr.Send(ctx, name, []byte("over a unix socket")); err != nil {
		t.Fatalf("Send to %s: %v", name, err)
	}
	if _, msg, err := u.Recv(ctx); err != nil || string(msg) != "over a unix socket" {
		t.Fatalf("Recv on %s: %q, %v", name, msg, err)
	}

	// Malformed: refused whatever the preference, naming the attribute.
	for _, pref := range []string{"", "default", "=default"} {
		_, err := PickWith(pref, Listen("no port here"))
		if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "listen") {
			t.Errorf("PickWith(%q, Listen(malformed)): %v, want EINVAL naming listen", pref, err)
		}
	}
}

// MaxMsgSize is the transport's maximum: Caps says so, a larger Send
// fails with EMSGSIZE at the sender, and a peer learns it when it
// connects, so its larger Sends fail at its end, with nothing lost after.
func TestPickWithMaxMsgSize(t *testing.T) {
	const max = 1000
	small := pickWith(t, "default", MaxMsgSize(max))
	big := pickDefault(t)
	if got := small.Caps().MaxMsgSize; got != max {
		t.Fatalf("Caps().MaxMsgSize = %d, want %d", got, max)
	}
	if got := big.Caps().MaxMsgSize; got <= max {
		t.Fatalf("Caps().MaxMsgSize without the option = %d", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	to, back := addrOf(t, big), addrOf(t, small)
	if err := small.Send(ctx, to, make([]byte, max+1)); !errors.Is(err, syscall.EMSGSIZE) {
		t.Fatalf("Send of %d B with MaxMsgSize(%d): %v, want EMSGSIZE", max+1, max, err)
	}
	if err := small.Send(ctx, to, pattern(max, 1)); err != nil {
		t.Fatalf("Send of %d B with MaxMsgSize(%d): %v", max, max, err)
	}
	if _, msg, err := big.Recv(ctx); err != nil || string(msg) != string(pattern(max, 1)) {
		t.Fatalf("Recv: %d B, %v", len(msg), err)
	}
	// The other way: big has been told small's maximum.
	if err := big.Send(ctx, back, pattern(max, 2)); err != nil {
		t.Fatalf("Send of %d B to a peer with MaxMsgSize(%d): %v", max, max, err)
	}
	if err := big.Send(ctx, back, make([]byte, max+1)); !errors.Is(err, syscall.EMSGSIZE) {
		t.Fatalf("Send of %d B to a peer with MaxMsgSize(%d): %v, want EMSGSIZE", max+1, max, err)
	}
	if err := big.Send(ctx, back, pattern(3, 3)); err != nil {
		t.Fatalf("Send after the refused one: %v", err)
	}
	for _, want := range [][]byte{pattern(max, 2), pattern(3, 3)} {
		if _, msg, err := small.Recv(ctx); err != nil || string(msg) != string(want) {
			t.Fatalf("Recv: %d B, %v; want %d B", len(msg), err, len(want))
		}
	}

	if _, err := PickWith("default", MaxMsgSize(0)); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("MaxMsgSize(0): %v, want EINVAL", err)
	}
	if _, err := PickWith("default", MaxMsgSize(1<<40+1)); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("MaxMsgSize(1 TiB + 1): %v, want EINVAL", err)
	}
}

// SendTimeout bounds a Send whose context has no deadline: blocked on a
// peer that does not read, it fails with ETIMEDOUT (not a context error)
// once the timeout has passed.
func TestPickWithSendTimeout(t *testing.T) {
	const timeout = 200 * time.Millisecond
	a := pickWith(t, "default", SendTimeout(timeout))
	sink := pickDefault(t) // never receives
	to := addrOf(t, sink)
	big := make([]byte, 16<<20)
	var err error
	var took time.Duration
	// Sends succeed until the queues to sink are full; then one blocks.
	// within() fails a hang (a timeout that never fires).
	within(t, 2*time.Minute, "Send with SendTimeout to a peer that does not read", func() {
		for err == nil {
			start := time.Now()
			err = a.Send(context.Background(), to, big)
			took = time.Since(start)
		}
	})
	if !errors.Is(err, syscall.ETIMEDOUT) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send: %v, want ETIMEDOUT (the send timeout)", err)
	}
	if !strings.Contains(err.Error(), "send timeout") {
		t.Errorf("error does not say it was the send timeout: %v", err)
	}
	if took < timeout {
		t.Errorf("Send timed out after %v, before the %v timeout", took, timeout)
	}
	t.Logf("%v after %v", err, took)

	// A context deadline takes precedence: its error is the context's.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	for err = nil; err == nil; {
		err = a.Send(ctx, to, big)
	}
	if err != context.DeadlineExceeded {
		t.Fatalf("Send with a ctx deadline: %v, want context.DeadlineExceeded", err)
	}

	if _, err := PickWith("default", SendTimeout(-time.Second)); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("SendTimeout(-1s): %v, want EINVAL", err)
	}
}

// ZAP_SEND_TIMEOUT_MS bounds a Send without a deadline as SendTimeout
// does, and SendTimeout(0) lifts it. libzap reads the variable once per
// process, so this runs the test binary again with it set
// (TestSendTimeoutEnvChild does the work there).
func TestSendTimeoutEnv(t *testing.T) {
	if os.Getenv("ZAP_GO_TEST_CHILD") != "" {
		t.Skip("in the child")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSendTimeoutEnvChild$", "-test.v")
	cmd.Env = append(os.Environ(), "ZAP_GO_TEST_CHILD=1", "ZAP_SEND_TIMEOUT_MS=200")
	out, err := cmd.CombinedOutput()
	t.Logf("child:\n%s", out)
	if err != nil || !strings.Contains(string(out), "--- PASS: TestSendTimeoutEnvChild") {
		t.Fatalf("child with ZAP_SEND_TIMEOUT_MS=200: %v", err)
	}
}

func TestSendTimeoutEnvChild(t *testing.T) {
	if os.Getenv("ZAP_GO_TEST_CHILD") == "" {
		t.Skip("run by TestSendTimeoutEnv with ZAP_SEND_TIMEOUT_MS set")
	}
	big := make([]byte, 16<<20)
	fill := func(tr Transport, to string) (time.Duration, error) {
		var err error
		var took time.Duration
		for err == nil {
			start := time.Now()
			err = tr.Send(context.Background(), to, big)
			took = time.Since(start)
		}
		return took, err
	}

	// The variable alone: ETIMEDOUT, not before 200 ms.
	a, sink := pickDefault(t), addrOf(t, pickDefault(t))
	var err error
	var took time.Duration
	within(t, 2*time.Minute, "Send with ZAP_SEND_TIMEOUT_MS to a peer that does not read", func() {
		took, err = fill(a, sink)
	})
	if !errors.Is(err, syscall.ETIMEDOUT) || took < 200*time.Millisecond {
		t.Fatalf("Send with ZAP_SEND_TIMEOUT_MS=200: %v after %v, want ETIMEDOUT after 200ms", err, took)
	}

	// SendTimeout(0): no bound. The Send blocks until Close wakes it.
	b, sink := pickWith(t, "default", SendTimeout(0)), addrOf(t, pickDefault(t))
	done := make(chan error, 1)
	go func() { _, err := fill(b, sink); done <- err }()
	select {
	case err := <-done:
		t.Fatalf("Send with SendTimeout(0) returned %v; the variable's 200 ms applied", err)
	case <-time.After(time.Second):
	}
	b.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Send blocked at Close: %v, want net.ErrClosed", err)
	}
}

// MaxPoolBytes caps the pool: gopool's largest buffer is its cap.
func TestPickWithMaxPoolBytes(t *testing.T) {
	pickPool(t) // skips where the gopool test plugin is not installed
	const cap = 64 << 10
	tr := pickWith(t, "=gopool", MaxPoolBytes(cap))
	ba := tr.(BufferAllocator)
	if _, err := ba.AllocBuffer(cap + 1); !errors.Is(err, syscall.EMSGSIZE) {
		t.Fatalf("AllocBuffer(%d) with MaxPoolBytes(%d): %v, want EMSGSIZE", cap+1, cap, err)
	}
	b, err := ba.AllocBuffer(cap)
	if err != nil {
		t.Fatalf("AllocBuffer(%d) with MaxPoolBytes(%d): %v", cap, cap, err)
	}
	b.Release()
	// Without the option the cap is gopool's default, 1 MiB.
	_, def := pickPool(t)
	b, err = def.AllocBuffer(cap + 1)
	if err != nil {
		t.Fatalf("AllocBuffer(%d) without MaxPoolBytes: %v", cap+1, err)
	}
	b.Release()
}

// tlsIdentity writes a self-signed certificate and its key (mode 0600)
// into dir and returns their paths and the key's pin, "sha256:<hex>".
func tlsIdentity(t *testing.T, dir, name string) (cert, key, pin string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	spki, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	cert = filepath.Join(dir, name+".crt")
	key = filepath.Join(dir, name+".key")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(spki)
	return cert, key, "sha256:" + hex.EncodeToString(sum[:])
}

// TLS: two endpoints with pinned keys talk, and the receiver sees the
// sender's key in its peer string; a plaintext endpoint gets nowhere; a
// missing file is a configuration error.
func TestPickWithTLS(t *testing.T) {
	dir := t.TempDir()
	certA, keyA, pinA := tlsIdentity(t, dir, "a")
	certB, keyB, pinB := tlsIdentity(t, dir, "b")
	pins := filepath.Join(dir, "peers")
	if err := os.WriteFile(pins, []byte(pinA+"\n"+pinB+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := pickWith(t, "default", TLS(TLSFiles{CertFile: certA, KeyFile: keyA, PeersFile: pins}))
	b := pickWith(t, "default", TLS(TLSFiles{CertFile: certB, KeyFile: keyB, PeersFile: pins}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.Send(ctx, addrOf(t, b), []byte("sealed")); err != nil {
		t.Fatalf("TLS Send: %v", err)
	}
	from, msg, err := b.Recv(ctx)
	if err != nil || string(msg) != "sealed" {
		t.Fatalf("TLS Recv: %q, %v", msg, err)
	}
	if want := addrOf(t, a) + "#" + pinA; from != want {
		t.Fatalf("TLS Recv from %q, want %q (address and key)", from, want)
	}
	if err := b.Send(ctx, from, []byte("reply")); err != nil {
		t.Fatalf("TLS reply: %v", err)
	}
	if _, msg, err := a.Recv(ctx); err != nil || string(msg) != "reply" {
		t.Fatalf("TLS Recv of the reply: %q, %v", msg, err)
	}

	plain := pickDefault(t)
	if err = plain.Send(ctx, addrOf(t, b), []byte("in clear")); err == nil {
		// The first send may be queued before the peer hangs up; the
		// connection is gone by the next.
		time.Sleep(100 * time.Millisecond)
		for i := 0; i < 20 && err == nil; i++ {
			err = plain.Send(ctx, addrOf(t, b), []byte("in clear"))
		}
		if err == nil {
			t.Fatal("plaintext Sends to a TLS endpoint all succeeded")
		}
	}
	t.Logf("plaintext to TLS: %v", err)

	_, err = PickWith("default", TLS(TLSFiles{CertFile: filepath.Join(dir, "missing.crt"),
		KeyFile: keyA, PeersFile: pins}))
	if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "missing.crt") {
		t.Fatalf("PickWith(TLS with a missing certificate): %v, want EINVAL naming the file", err)
	}
}
