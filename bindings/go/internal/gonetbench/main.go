// Command gonetbench is bench/go-net.sh's program: one workload run over
// two implementations, so that the numbers compare like with like:
//
//   - net: what a Go program writes plainly with the standard library, one
//     crypto/tls connection per peer (mutual TLS 1.3, peers pinned by the
//     SHA-256 of their public key), frames of a 4-byte big-endian length
//     and the bytes, one writer at a time per connection;
//   - zap: libzap through package transport (PickWith with Listen and the
//     TLS option, the same keys and pins).
//
// A message's first byte says what it is: 'E' echo it back, 'S' stream
// (count it), 'F' end of a stream (answer 'A' with the count), 'C' send
// back the server's CPU time. Not part of the API: a benchmark tool.
//
//	gonetbench keygen DIR NAME          NAME.crt, NAME.key, NAME.pin in DIR
//	gonetbench server -impl I -listen ADDR [-tls DIR]
//	gonetbench client -impl I -peer ADDR [-listen ADDR] [-tls DIR] [-iters N] [-bytes N]
//
// The server prints the address it listens on, one line, then serves
// until killed. The client runs every test and prints one JSON object.
package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/libzap/libzap/bindings/go/transport"
)

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "gonetbench:", err)
	os.Exit(1)
}

func main() {
	if len(os.Args) < 2 {
		fatal(errors.New("usage: gonetbench keygen|server|client ..."))
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	impl := fs.String("impl", "net", "net or zap")
	listen := fs.String("listen", "127.0.0.1:0", "local address")
	peer := fs.String("peer", "", "the server's address (client)")
	tlsDir := fs.String("tls", "", "directory of server.* and client.* keys and peers.pins; empty: plaintext")
	iters := fs.Int("iters", 20000, "64 B round trips per round-trip test")
	total := fs.Int64("bytes", 1<<30, "bytes per streaming test")
	switch os.Args[1] {
	case "keygen":
		if len(os.Args) != 4 {
			fatal(errors.New("usage: gonetbench keygen DIR NAME"))
		}
		if err := keygen(os.Args[2], os.Args[3]); err != nil {
			fatal(err)
		}
		return
	case "server", "client":
	default:
		fatal(fmt.Errorf("unknown command %q", os.Args[1]))
	}
	fs.Parse(os.Args[2:])
	var ep endpoint
	var err error
	switch *impl {
	case "net":
		ep, err = newNetEndpoint(*listen, *tlsDir, os.Args[1])
	case "zap":
		ep, err = newZapEndpoint(*listen, *tlsDir, os.Args[1])
	default:
		err = fmt.Errorf("unknown -impl %q", *impl)
	}
	if err != nil {
		fatal(err)
	}
	if os.Args[1] == "server" {
		fmt.Println(ep.addr())
		serve(ep)
		return
	}
	if err := runClient(ep, *peer, *iters, *total); err != nil {
		fatal(err)
	}
}

// keygen writes a self-signed ECDSA P-256 certificate, its key (0600) and
// its pin, "sha256:<hex of the SubjectPublicKeyInfo's SHA-256>".
func keygen(dir, name string) error {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		return err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return err
	}
	spki, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(spki)
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p+".crt", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(p+".key", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(p+".pin", []byte("sha256:"+hex.EncodeToString(sum[:])+"\n"), 0o644)
}

// endpoint is one side of either implementation. send may be called by
// two goroutines at once (the loaded round-trip test); recv by one.
type endpoint interface {
	addr() string
	send(peer string, msg []byte) error
	recv() (peer string, msg []byte, err error)
}

// serve answers messages until the process is killed.
func serve(ep endpoint) {
	streamed := map[string]uint64{}
	for {
		from, msg, err := ep.recv()
		if err != nil {
			fatal(err)
		}
		if len(msg) == 0 {
			continue
		}
		var reply []byte
		switch msg[0] {
		case 'E':
			reply = msg
		case 'S':
			streamed[from]++
		case 'F':
			reply = binary.BigEndian.AppendUint64([]byte{'A'}, streamed[from])
			streamed[from] = 0
		case 'C':
			reply = binary.BigEndian.AppendUint64([]byte{'C'}, uint64(cpuTime()))
		}
		if reply != nil {
			if err := ep.send(from, reply); err != nil {
				fatal(err)
			}
		}
	}
}

// cpuTime is this process's user + system time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ---- the plain implementation: net + crypto/tls ----

type netEndpoint struct {
	ln   net.Listener
	conf *tls.Config // nil: plaintext
	dial bool        // client: dials the peer; server: accepts

	mu    sync.Mutex
	conns map[string]*netConn
	in    chan netMsg
}

type netConn struct {
	c  net.Conn
	wm sync.Mutex // one frame at a time
	w  *bufio.Writer
}

type netMsg struct {
	from string
	msg  []byte
	err  error
}

func tlsConfig(dir, self string) (*tls.Config, error) {
	if dir == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, self+".crt"), filepath.Join(dir, self+".key"))
	if err != nil {
		return nil, err
	}
	pins, err := os.ReadFile(filepath.Join(dir, "peers.pins"))
	if err != nil {
		return nil, err
	}
	trusted := map[string]bool{}
	for _, l := range strings.Fields(string(pins)) {
		trusted[l] = true
	}
	// Pinned keys, not a CA: check the peer's public key by hand.
	verify := func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return errors.New("peer sent no certificate")
		}
		c, err := x509.ParseCertificate(raw[0])
		if err != nil {
			return err
		}
		sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
		if !trusted["sha256:"+hex.EncodeToString(sum[:])] {
			return errors.New("peer key not pinned")
		}
		return nil
	}
	return &tls.Config{
		Certificates:          []tls.Certificate{cert},
		MinVersion:            tls.VersionTLS13,
		ClientAuth:            tls.RequireAnyClientCert,
		InsecureSkipVerify:    true, // replaced by the pin check
		VerifyPeerCertificate: verify,
	}, nil
}

func newNetEndpoint(listen, tlsDir, role string) (*netEndpoint, error) {
	conf, err := tlsConfig(tlsDir, role)
	if err != nil {
		return nil, err
	}
	e := &netEndpoint{conf: conf, dial: role == "client", conns: map[string]*netConn{},
		in: make(chan netMsg, 1024)}
	if !e.dial {
		if e.ln, err = net.Listen("tcp", listen); err != nil {
			return nil, err
		}
		go e.accept()
	}
	return e, nil
}

func (e *netEndpoint) addr() string {
	if e.ln == nil {
		return ""
	}
	return e.ln.Addr().String()
}

func (e *netEndpoint) accept() {
	for {
		c, err := e.ln.Accept()
		if err != nil {
			e.in <- netMsg{err: err}
			return
		}
		go e.start(c)
	}
}

// start sets c up (TLS handshake, no Nagle) and reads its frames.
func (e *netEndpoint) start(c net.Conn) (*netConn, error) {
	c.(*net.TCPConn).SetNoDelay(true)
	if e.conf != nil {
		var t *tls.Conn
		if e.dial {
			t = tls.Client(c, e.conf)
		} else {
			t = tls.Server(c, e.conf)
		}
		if err := t.Handshake(); err != nil {
			c.Close()
			return nil, err
		}
		c = t
	}
	nc := &netConn{c: c, w: bufio.NewWriterSize(c, 64<<10)}
	key := c.RemoteAddr().String()
	e.mu.Lock()
	e.conns[key] = nc
	e.mu.Unlock()
	go e.read(key, c)
	return nc, nil
}

func (e *netEndpoint) read(key string, c net.Conn) {
	r := bufio.NewReaderSize(c, 64<<10)
	var hdr [4]byte
	for {
		_, err := io.ReadFull(r, hdr[:])
		var msg []byte
		if err == nil {
			msg = make([]byte, binary.BigEndian.Uint32(hdr[:]))
			_, err = io.ReadFull(r, msg)
		}
		if err != nil {
			// A client cannot go on without its server; a server
			// outlives its clients.
			if e.dial {
				e.in <- netMsg{err: err}
			}
			return
		}
		e.in <- netMsg{from: key, msg: msg}
	}
}

func (e *netEndpoint) send(peer string, msg []byte) error {
	e.mu.Lock()
	nc := e.conns[peer]
	e.mu.Unlock()
	if nc == nil {
		if !e.dial {
			return fmt.Errorf("no connection from %s", peer)
		}
		c, err := net.Dial("tcp", peer)
		if err != nil {
			return err
		}
		if nc, err = e.start(c); err != nil {
			return err
		}
		e.mu.Lock()
		e.conns[peer] = nc // the client sends by the address it dialed
		e.mu.Unlock()
	}
	nc.wm.Lock()
	defer nc.wm.Unlock()
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(msg)))
	nc.w.Write(hdr[:])
	nc.w.Write(msg)
	return nc.w.Flush()
}

func (e *netEndpoint) recv() (string, []byte, error) {
	m := <-e.in
	return m.from, m.msg, m.err
}

// ---- libzap through the binding ----

type zapEndpoint struct{ t transport.Transport }

func newZapEndpoint(listen, tlsDir, role string) (*zapEndpoint, error) {
	opts := []transport.Option{transport.Listen(listen)}
	if tlsDir != "" {
		opts = append(opts, transport.TLS(transport.TLSFiles{
			CertFile:  filepath.Join(tlsDir, role+".crt"),
			KeyFile:   filepath.Join(tlsDir, role+".key"),
			PeersFile: filepath.Join(tlsDir, "peers.pins"),
		}))
	}
	t, err := transport.PickWith("=default", opts...)
	if err != nil {
		return nil, err
	}
	return &zapEndpoint{t: t}, nil
}

func (z *zapEndpoint) addr() string {
	a, err := transport.LocalAddr(z.t)
	if err != nil {
		fatal(err)
	}
	return a
}

func (z *zapEndpoint) send(peer string, msg []byte) error {
	return z.t.Send(context.Background(), peer, msg)
}

func (z *zapEndpoint) recv() (string, []byte, error) {
	return z.t.Recv(context.Background())
}

// ---- the client: every test, one JSON object ----

type result struct {
	Test      string  `json:"test"`
	Size      int     `json:"size"`
	Msgs      int     `json:"msgs"`
	MeanUs    float64 `json:"mean_us,omitempty"`
	P99Us     float64 `json:"p99_us,omitempty"`
	MBps      float64 `json:"mb_per_s,omitempty"`
	CPUUsMsg  float64 `json:"cpu_us_per_msg"` // client + server
	Streamed  int     `json:"streamed,omitempty"`
	Path      string  `json:"path,omitempty"`
	Transport string  `json:"transport"`
}

type client struct {
	ep   endpoint
	peer string
}

func (c *client) serverCPU() (time.Duration, error) {
	if err := c.ep.send(c.peer, []byte{'C'}); err != nil {
		return 0, err
	}
	for {
		_, m, err := c.ep.recv()
		if err != nil {
			return 0, err
		}
		if len(m) == 9 && m[0] == 'C' {
			return time.Duration(binary.BigEndian.Uint64(m[1:])), nil
		}
	}
}

// measure runs f and returns the CPU time both processes spent in it.
func (c *client) measure(f func() error) (time.Duration, error) {
	s0, err := c.serverCPU()
	if err != nil {
		return 0, err
	}
	c0 := cpuTime()
	if err := f(); err != nil {
		return 0, err
	}
	c1 := cpuTime()
	s1, err := c.serverCPU()
	if err != nil {
		return 0, err
	}
	return c1 - c0 + s1 - s0, nil
}

// rtts sends n 64 B echo requests one after another; the latencies.
func (c *client) rtts(n int) ([]time.Duration, error) {
	msg := make([]byte, 64)
	msg[0] = 'E'
	lat := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		start := time.Now()
		if err := c.ep.send(c.peer, msg); err != nil {
			return nil, err
		}
		for {
			_, m, err := c.ep.recv()
			if err != nil {
				return nil, err
			}
			if len(m) == 64 && m[0] == 'E' {
				break
			}
		}
		lat = append(lat, time.Since(start))
	}
	return lat, nil
}

// stream sends messages of size bytes until stop says so, then 'F', and
// waits for the count. n counts the messages sent.
func (c *client) stream(size int, stop func(sent int) bool, n *int64) error {
	msg := make([]byte, size)
	msg[0] = 'S'
	for sent := 0; !stop(sent); sent++ {
		if err := c.ep.send(c.peer, msg); err != nil {
			return err
		}
		atomic.AddInt64(n, 1)
	}
	return nil
}

func (c *client) finish(want int64) error {
	if err := c.ep.send(c.peer, []byte{'F'}); err != nil {
		return err
	}
	for {
		_, m, err := c.ep.recv()
		if err != nil {
			return err
		}
		if len(m) == 9 && m[0] == 'A' {
			if got := int64(binary.BigEndian.Uint64(m[1:])); got != want {
				return fmt.Errorf("server counted %d streamed messages, %d sent", got, want)
			}
			return nil
		}
	}
}

func stats(lat []time.Duration) (mean, p99 float64) {
	var sum time.Duration
	for _, l := range lat {
		sum += l
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return float64(sum) / float64(len(lat)) / 1e3, float64(lat[len(lat)*99/100]) / 1e3
}

func runClient(ep endpoint, peer string, iters int, total int64) error {
	c := &client{ep: ep, peer: peer}
	var out []result
	name, path := "go-net", "tcp"
	// Warm up: connection, handshake, and for libzap the path it settles on.
	if _, err := c.rtts(100); err != nil {
		return err
	}
	if z, ok := ep.(*zapEndpoint); ok {
		name = "libzap"
		if p, err := transport.PeerPath(z.t, peer); err == nil {
			path = p
		}
	}

	var lat []time.Duration
	cpu, err := c.measure(func() (err error) { lat, err = c.rtts(iters); return })
	if err != nil {
		return err
	}
	mean, p99 := stats(lat)
	out = append(out, result{Test: "rtt", Size: 64, Msgs: iters, MeanUs: mean, P99Us: p99,
		CPUUsMsg: float64(cpu) / 1e3 / float64(2*iters)})

	for _, size := range []int{100 << 10, 1 << 20} {
		n := int(total / int64(size))
		if n < 10 {
			n = 10
		}
		var sent int64
		var took time.Duration
		cpu, err := c.measure(func() error {
			start := time.Now()
			if err := c.stream(size, func(i int) bool { return i >= n }, &sent); err != nil {
				return err
			}
			if err := c.finish(sent); err != nil {
				return err
			}
			took = time.Since(start)
			return nil
		})
		if err != nil {
			return err
		}
		out = append(out, result{Test: "stream", Size: size, Msgs: n,
			MBps:     float64(int64(n)*int64(size)) / took.Seconds() / 1e6,
			CPUUsMsg: float64(cpu) / 1e3 / float64(n)})
	}

	// 64 B round trips while 1 MiB messages stream to the same peer.
	var sent int64
	var done atomic.Bool
	errc := make(chan error, 1)
	cpu, err = c.measure(func() error {
		go func() {
			errc <- c.stream(1<<20, func(int) bool { return done.Load() }, &sent)
		}()
		for atomic.LoadInt64(&sent) < 4 { // the stream is under way
			time.Sleep(time.Millisecond)
		}
		var err error
		lat, err = c.rtts(iters / 10)
		done.Store(true)
		if serr := <-errc; err == nil {
			err = serr
		}
		if err == nil {
			err = c.finish(sent)
		}
		return err
	})
	if err != nil {
		return err
	}
	mean, p99 = stats(lat)
	out = append(out, result{Test: "rtt-under-stream", Size: 64, Msgs: iters / 10,
		MeanUs: mean, P99Us: p99, Streamed: int(sent),
		CPUUsMsg: float64(cpu) / 1e3 / float64(2*(iters/10)+int(sent))})

	for i := range out {
		out[i].Transport, out[i].Path = name, path
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}
