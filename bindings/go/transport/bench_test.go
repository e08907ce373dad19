package transport

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/libzap/libzap/bindings/go/internal/cbench"
)

// BenchmarkRoundTrip64 is one 64 B round trip per op: Send, then Recv of
// the echo. The echo comes from a C program on libzap: the zap-perf
// server at ZAP_BENCH_SERVER (bench/go-vs-c.sh starts one and runs
// zap-perf's own client against it in the same run, for the C figure),
// else zap-go-peer.
//
// "c" is the same loop in C, straight on libzap, in this process: the
// baseline. "background" is the binding's fast path (a context that
// cannot be cancelled); "cancellable" pays for the watcher goroutine a
// cancellable context needs (see call.go).
func BenchmarkRoundTrip64(b *testing.B) {
	b.Run("c", func(b *testing.B) {
		server := os.Getenv("ZAP_BENCH_SERVER")
		if server == "" {
			server = startPeer(b)
		}
		ns, err := cbench.RoundTrips(server, os.Getenv("ZAP_BENCH_SERVER") != "", 64, b.N)
		if err != nil {
			b.Fatal(err)
		}
		// The loop ran in C: report its own timing, not the harness's.
		b.ReportMetric(ns, "ns/op")
	})
	cancellable, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, bc := range []struct {
		name string
		ctx  context.Context
	}{{"background", context.Background()}, {"cancellable", cancellable}} {
		b.Run(bc.name, func(b *testing.B) { roundTrips(b, bc.ctx, 64) })
	}
}

func roundTrips(b *testing.B, ctx context.Context, size int) {
	tr := pickDefault(b)
	msg := make([]byte, size)
	const warmup = 100
	server := os.Getenv("ZAP_BENCH_SERVER")
	if server == "" {
		server = startPeer(b)
	} else {
		// zap-perf's protocol: announce a latency test of this many
		// echoes; the server answers "ok", then echoes each message.
		cmd := fmt.Sprintf("zperf lat %d %d 0", size, b.N+warmup)
		if err := tr.Send(ctx, server, []byte(cmd)); err != nil {
			b.Fatal(err)
		}
		if _, ok, err := tr.Recv(ctx); err != nil || string(ok) != "ok" {
			b.Fatalf("zap-perf server at %s: %q, %v", server, ok, err)
		}
	}
	rt := func() {
		if err := tr.Send(ctx, server, msg); err != nil {
			b.Fatal(err)
		}
		if _, got, err := tr.Recv(ctx); err != nil || len(got) != size {
			b.Fatalf("echo: %d B, %v", len(got), err)
		}
	}
	for i := 0; i < warmup; i++ {
		rt()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rt()
	}
}

// BenchmarkPipeline64 is the cost of the calls themselves: per op, one
// 64 B Send from one endpoint and one Recv on another, in batches of 64
// (64 sends, then 64 receives), so that no call waits for the other side
// and the scheduler's wake-ups, which dominate a blocking round trip, stay
// out of it. "c" runs the same loop in C straight on libzap; the
// difference is what the binding adds per Send+Recv, the calls of one
// round trip.
func BenchmarkPipeline64(b *testing.B) {
	const size, batch = 64, 64
	b.Run("c", func(b *testing.B) {
		ns, err := cbench.Pipeline(size, b.N, batch)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(ns, "ns/op")
	})
	b.Run("go", func(b *testing.B) {
		src, dst := pickDefault(b), pickDefault(b)
		to := addrOf(b, dst)
		ctx := context.Background()
		msg := make([]byte, size)
		if err := src.Send(ctx, to, msg); err != nil {
			b.Fatal(err)
		}
		if _, _, err := dst.Recv(ctx); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for done := 0; done < b.N; done += batch {
			k := batch
			if b.N-done < k {
				k = b.N - done
			}
			for i := 0; i < k; i++ {
				if err := src.Send(ctx, to, msg); err != nil {
					b.Fatal(err)
				}
			}
			for i := 0; i < k; i++ {
				if _, _, err := dst.Recv(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
