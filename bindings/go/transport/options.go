package transport

import (
	"fmt"
	"runtime"
	"syscall"
	"time"
)

// Beyond the seed: options for the transport PickWith opens. Each one
// sets a field of libzap's struct zap_attr; a setting not given takes its
// environment variable, as with Pick, and libzap checks every value.

// An Option sets one attribute of the transport PickWith opens.
type Option func(*options) error

// options is what PickWith hands to zap_pick() (see pickWith in cgo.go).
// Zero values are "not given": libzap reads the environment for those.
type options struct {
	listen      string
	maxMsgSize  uint64
	poolBytes   uint64
	sendTimeout time.Duration // meaningful when hasTimeout
	hasTimeout  bool
	tls         TLSFiles
}

// TLSFiles names the PEM files of a TLS endpoint (libzap's tls_*
// attributes). An empty field takes its environment variable
// (ZAP_TLS_CERT, ZAP_TLS_KEY, ZAP_TLS_CA, ZAP_TLS_PEERS). With a
// certificate, every connection is TLS 1.3 with mutual authentication and
// no plaintext fallback, and a peer's identity is its public key: peer
// strings from Recv read "host:port#sha256:<hex>".
type TLSFiles struct {
	// CertFile is this endpoint's certificate (chain).
	CertFile string
	// KeyFile is CertFile's private key; libzap refuses a key file that
	// group or others may read.
	KeyFile string
	// CAFile is a CA bundle: peers whose chain verifies against it are
	// trusted.
	CAFile string
	// PeersFile is a pin file: one "sha256:<hex>" per line, the SHA-256
	// of a trusted peer's DER SubjectPublicKeyInfo. With a certificate,
	// at least one of CAFile and PeersFile is required.
	PeersFile string
}

// Listen sets the local address the transport listens on (attribute
// listen, else ZAP_LISTEN, else "0.0.0.0:0"): "host:port", port 0 for
// any free port, or for default and uma a Unix-domain socket,
// "unix:/abs/path" or "unix:@abstract-name". LocalAddr reports the address
// bound. A malformed address fails PickWith with an error matching
// syscall.EINVAL; one in use, with the open error (syscall.EADDRINUSE)
// under a strict preference, else a fallback.
func Listen(addr string) Option {
	return func(o *options) error {
		if addr == "" {
			return optErr("Listen: empty address")
		}
		o.listen = addr
		return nil
	}
}

// MaxMsgSize sets the largest message the transport sends or accepts
// (attribute max_msg_size, else ZAP_MAX_MSG_BYTES, else 64 MiB), from 1
// byte to 1 TiB; Caps().MaxMsgSize reports it. A larger Send fails with
// an error matching syscall.EMSGSIZE, and so does a Send larger than the
// receiving peer's maximum, which peers announce when they connect.
func MaxMsgSize(n uint64) Option {
	return func(o *options) error {
		if n == 0 {
			return optErr("MaxMsgSize: 0 bytes")
		}
		o.maxMsgSize = n
		return nil
	}
}

// MaxPoolBytes caps the transport's buffer pool, for transports with one
// (attribute pool_bytes; uma's default is ZAP_UMA_POOL_BYTES, else 4 GiB).
// AllocBuffer blocks while the pool is full; a buffer larger than the
// largest the pool can hold fails with an error matching syscall.EMSGSIZE.
// Transports without a pool ignore it.
func MaxPoolBytes(n uint64) Option {
	return func(o *options) error {
		if n == 0 {
			return optErr("MaxPoolBytes: 0 bytes")
		}
		o.poolBytes = n
		return nil
	}
}

// SendTimeout bounds how long a Send whose context has no deadline may
// block (attribute send_timeout_ms, else ZAP_SEND_TIMEOUT_MS, else no
// bound); a Send waits while a peer is not reading and the transport's
// queue to it is full. When it passes, Send fails with an error matching
// syscall.ETIMEDOUT and nothing of the message is delivered. A context
// deadline takes precedence. d is rounded up to whole milliseconds; 0
// means no bound, whatever ZAP_SEND_TIMEOUT_MS says.
func SendTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return optErr(fmt.Sprintf("SendTimeout: negative duration %v", d))
		}
		o.sendTimeout, o.hasTimeout = d, true
		return nil
	}
}

// TLS sets the endpoint's TLS files (libzap reads them when the transport
// opens). A file that is missing, unsafe (a readable key) or malformed,
// or a certificate without CAFile or PeersFile, fails PickWith with an
// error matching syscall.EINVAL that names it.
func TLS(files TLSFiles) Option {
	return func(o *options) error {
		o.tls = files
		return nil
	}
}

func optErr(text string) error {
	return &zapError{op: "option", code: syscall.EINVAL, text: text}
}

// PickWith is Pick with options: it opens the transport preference
// selects, with the attributes opts set, each in place of its environment
// variable. Options apply to the transport opened, whichever one the
// preference falls back to; one a transport has no use for is ignored
// (MaxPoolBytes without a pool). A value libzap refuses fails PickWith
// with an error matching syscall.EINVAL whatever the preference, with no
// fallback. Later options override earlier ones.
//
//	t, err := transport.PickWith("",
//		transport.Listen("10.0.0.1:7000"),
//		transport.MaxMsgSize(1<<20),
//		transport.SendTimeout(2*time.Second),
//		transport.TLS(transport.TLSFiles{CertFile: "node.crt",
//			KeyFile: "node.key", CAFile: "cluster-ca.crt"}))
func PickWith(preference string, opts ...Option) (Transport, error) {
	var o options
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	tr, err := pick(preference, &o)
	if err != nil {
		return nil, err
	}
	// A transport dropped without Close still gives back its socket and
	// threads. Only unreachable transports are finalized, so no call can
	// be in flight then.
	runtime.SetFinalizer(tr, (*zapTransport).Close)
	return tr, nil
}
