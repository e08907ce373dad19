package transport

import (
	"context"
	"fmt"
	"time"
)

// What an operator sees of a transport: its counters, its peers, its
// events and its metrics in the Prometheus text format (libzap's
// zap_stats(), zap_peer_list(), zap_events() and zap_metrics_render();
// docs/metrics.md in the libzap tree). Transports that keep none (gpudirect
// and dpdk so far) answer an error matching syscall.EOPNOTSUPP.

// Stats are a transport's counters since it opened, and its queues now.
type Stats struct {
	MessagesSent, BytesSent         uint64
	MessagesReceived, BytesReceived uint64
	ConnsDialed, ConnsAccepted      uint64
	ConnsOpen                       uint64
	// ConnsClosed counts closed and refused connections by reason
	// ("peer_eof", "idle", "tls", ...); reasons with none are absent.
	ConnsClosed             map[string]uint64
	ShmUpgrades, ShmRefused uint64
	DropsPartial            uint64 // partly received messages lost
	DropsShutdown           uint64 // after Close began: messages never taken
	RxQueueMessages         uint64
	RxQueueBytes            uint64
	RxQueueLimit            uint64 // ZAP_TCP_RX_QUEUE_BYTES
	PartialBytes            uint64
	PartialLimit            uint64 // ZAP_TCP_PARTIAL_BYTES
	Peers                   uint64
	EventsLost              uint64 // events dropped before Events took them
	// What the dpdk and gpudirect transports keep (docs/metrics.md): 0
	// where a transport has no such thing, and with a libzap older than
	// the binding.
	Retransmits    uint64 // frames sent again (dpdk)
	PeersForgotten uint64 // peers dropped from the peer table (dpdk)
	FramesRefused  uint64 // frames refused: malformed, spoofed source, stale (dpdk)
	CreditWaits    uint64 // sends that waited for a credit (gpudirect)
	PinnedBytes    uint64 // memory registered with the NIC now (gpudirect)
}

// PeerInfo is one connection to a peer.
type PeerInfo struct {
	Peer                            string // as Recv reports it and Send takes it
	Identity                        string // TLS key "sha256:<hex>", Unix "uid=.. gid=.. pid=..", or ""
	Path                            string // "tcp", "unix" or "shm"
	TLS                             bool
	Dialed                          bool
	ConnID                          uint64
	MessagesSent, BytesSent         uint64
	MessagesReceived, BytesReceived uint64
	Idle                            time.Duration // since the last frame byte either way
	RTT                             time.Duration // the kernel's smoothed estimate; negative: none
	RTTVar                          time.Duration
}

// Event is one thing that happened to a peer.
type Event struct {
	Type     string // "connected", "upgraded", "disconnected", "refused"
	Reason   string // disconnected, refused: the close reason, as in Stats.ConnsClosed
	Time     time.Time
	ConnID   uint64
	Dialed   bool
	Peer     string // refused: the source address, or the peer a dial was for
	Identity string // refused: the key the peer presented, when known
	Path     string
	Detail   string // refused and some disconnects: the reason in words
}

// observed runs f on t's C transport under t's lock, unless t is closed.
func observed[T any](t Transport, op string, f func(*cTransport) (T, error)) (T, error) {
	var zero T
	tr, ok := t.(*zapTransport)
	if !ok {
		return zero, fmt.Errorf("zap/transport: %s: %T is not from Pick", op, t)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.closing {
		return zero, closedErr(op)
	}
	return f(tr.t)
}

// StatsOf returns t's counters. t must come from Pick.
func StatsOf(t Transport) (Stats, error) { return observed(t, "stats", statsC) }

// Peers lists t's connections now. t must come from Pick.
func Peers(t Transport) ([]PeerInfo, error) { return observed(t, "peers", peersC) }

// Metrics renders t's counters and peers in the Prometheus text format.
func Metrics(t Transport) (string, error) { return observed(t, "metrics", metricsC) }

// Events takes the events that happened on t since the last call, oldest
// first (libzap keeps the last 128: call it regularly, or use
// WatchEvents).
func Events(t Transport) ([]Event, error) { return observed(t, "events", eventsC) }

// WatchEvents delivers t's events on a channel, taking them every @every
// (a second when 0), until ctx is done or t is closed; then it closes the
// channel. A receiver slower than the events holds the watcher up, and
// libzap counts what it then drops in Stats.EventsLost. Use either
// WatchEvents or Events on a transport, not both.
func WatchEvents(ctx context.Context, t Transport, every time.Duration) <-chan Event {
	if every <= 0 {
		every = time.Second
	}
	ch := make(chan Event, 64)
	go func() {
		defer close(ch)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			evs, err := Events(t)
			for _, e := range evs {
				select {
				case ch <- e:
				case <-ctx.Done():
					return
				}
			}
			if err != nil {
				return
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch
}
