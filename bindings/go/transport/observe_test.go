package transport

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// Counters, peers and metrics against known traffic from concurrent
// senders (test.sh also runs this under -race), and the events of a
// connection from its start to its end, through WatchEvents.
func TestObserve(t *testing.T) {
	a, b := pickDefault(t), pickDefault(t)
	ab, bb := addrOf(t, a), addrOf(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	watched := WatchEvents(ctx, b, 10*time.Millisecond)

	const senders, each = 4, 50
	var wg sync.WaitGroup
	var want uint64
	for g := 0; g < senders; g++ {
		for i := 0; i < each; i++ {
			want += uint64(g*100 + i)
		}
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if err := a.Send(ctx, bb, pattern(g*100+i, 0)); err != nil {
					t.Errorf("Send: %v", err)
					return
				}
			}
		}(g)
	}
	var got uint64
	for n := 0; n < senders*each; n++ {
		_, msg, err := b.Recv(ctx)
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		got += uint64(len(msg))
	}
	wg.Wait()
	if got != want {
		t.Fatalf("received %d bytes, want %d", got, want)
	}

	sa, err := StatsOf(a)
	if err != nil {
		t.Fatalf("StatsOf: %v", err)
	}
	sb, err := StatsOf(b)
	if err != nil {
		t.Fatalf("StatsOf: %v", err)
	}
	if sa.MessagesSent != senders*each || sa.BytesSent != want ||
		sb.MessagesReceived != senders*each || sb.BytesReceived != want {
		t.Fatalf("counts: sent %d/%d received %d/%d, want %d/%d",
			sa.MessagesSent, sa.BytesSent, sb.MessagesReceived, sb.BytesReceived,
			senders*each, want)
	}
	if sb.ConnsAccepted != 1 || sb.ConnsOpen != 1 || len(sb.ConnsClosed) != 0 {
		t.Fatalf("connections: %+v", sb)
	}
	peers, err := Peers(a)
	if err != nil || len(peers) != 1 || peers[0].Peer != bb || !peers[0].Dialed ||
		peers[0].MessagesSent != senders*each {
		t.Fatalf("Peers(a) = %+v, %v", peers, err)
	}
	text, err := Metrics(a)
	if err != nil || !strings.Contains(text, "zap_messages_sent_total{transport=\"default\",endpoint=\""+ab+"\"} 200\n") {
		t.Fatalf("Metrics: %v\n%s", err, text)
	}

	// a goes: b's connection ends in order; the events say so. b needs
	// a receiver to notice.
	a.Close()
	rctx, rcancel := context.WithCancel(ctx)
	go func() {
		for rctx.Err() == nil {
			c, cc := context.WithTimeout(rctx, 20*time.Millisecond)
			b.Recv(c)
			cc()
		}
	}()
	defer rcancel()
	var seen []string
	for e := range watched {
		seen = append(seen, e.Type)
		if e.Type == "connected" && (e.Dialed || e.ConnID != 1) {
			t.Fatalf("connected event %+v", e)
		}
		if e.Type == "disconnected" {
			if e.Reason != "peer_eof" {
				t.Fatalf("disconnected event %+v", e)
			}
			break
		}
	}
	if len(seen) == 0 || seen[0] != "connected" || seen[len(seen)-1] != "disconnected" {
		t.Fatalf("events %v", seen)
	}
	sb, _ = StatsOf(b)
	if sb.ConnsClosed["peer_eof"] != 1 {
		t.Fatalf("ConnsClosed %v", sb.ConnsClosed)
	}
	if _, err := StatsOf(a); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("StatsOf(closed) = %v", err)
	}
}
