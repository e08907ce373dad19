package transport

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	// Loopback only: every endpoint these tests open listens on
	// 127.0.0.1. os.Setenv reaches C's environment under cgo, where
	// libzap reads it.
	if os.Getenv("ZAP_LISTEN") == "" {
		os.Setenv("ZAP_LISTEN", "127.0.0.1:0")
	}
	os.Setenv("ZAP_TRANSPORT_QUIET", "1")
	os.Exit(m.Run())
}

// pattern(i) is the byte zap-go-peer expects and produces at offset i
// (for seed 0; seed s adds s).
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(uint32(i)*2654435761>>24) + seed
	}
	return b
}

func pickDefault(t testing.TB) Transport {
	t.Helper()
	tr, err := Pick("default")
	if err != nil {
		t.Fatalf("Pick(default): %v", err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

func addrOf(t testing.TB, tr Transport) string {
	t.Helper()
	a, err := LocalAddr(tr)
	if err != nil {
		t.Fatalf("LocalAddr: %v", err)
	}
	return a
}

// startPeer runs zap-go-peer (a C program on libzap, built by Meson; path
// in ZAP_GO_PEER, set by test.sh) and returns its address. Skips, saying
// so, when ZAP_GO_PEER is unset (a bare `go test`), fails when it is set
// but does not run.
func startPeer(t testing.TB) string {
	t.Helper()
	path := os.Getenv("ZAP_GO_PEER")
	if path == "" {
		t.Skip("ZAP_GO_PEER unset: no C peer to talk to (run bindings/go/test.sh BUILD_DIR)")
	}
	cmd := exec.Command(path, "default")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("%s printed no address: %v", path, err)
	}
	addr := strings.TrimSpace(line)
	t.Cleanup(func() {
		// Ask it to quit; kill it if that does not work in time.
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		if q, err := Pick("default"); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if q.Send(ctx, addr, []byte("zgp:quit")) == nil {
				q.Recv(ctx)
			}
			cancel()
			q.Close()
		}
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("zap-go-peer: %v", err)
			}
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Errorf("zap-go-peer did not quit")
		}
	})
	return addr
}

// within runs f and fails unless it returns within d.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { f(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s: still blocked after %v", what, d)
	}
}
