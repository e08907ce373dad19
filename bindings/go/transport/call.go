package transport

import (
	"context"
	"sync"
	"time"
)

// How a Go context reaches libzap.
//
// Each blocking call borrows a C call state (struct gozap_call: a zap ctx
// plus room for the result) from a free list: creating a zap ctx costs an
// eventfd, too much per call. A deadline becomes the zap ctx's timeout.
// Cancellation needs someone to call zap_ctx_cancel() when ctx.Done()
// closes; Go 1.19 has no context.AfterFunc, so a call whose ctx can be
// cancelled starts one watcher goroutine, and stops it before returning:
// the handoff on an unbuffered channel guarantees that, once end()
// returns, the watcher has finished touching the zap ctx (so it can go
// back to the free list) and is exiting. context.Background() and other
// contexts that cannot be cancelled take neither the goroutine nor any
// allocation.

const maxFreeCalls = 128 // each holds an eventfd

var freeCalls struct {
	sync.Mutex
	list []*cCall
}

func getCall() (*cCall, error) {
	freeCalls.Lock()
	if n := len(freeCalls.list); n > 0 {
		c := freeCalls.list[n-1]
		freeCalls.list = freeCalls.list[:n-1]
		freeCalls.Unlock()
		return c, nil
	}
	freeCalls.Unlock()
	return newCCall()
}

func putCall(c *cCall) {
	if !resetCCall(c) {
		freeCCall(c) // its ctx fired; libzap cannot re-arm it
		return
	}
	freeCalls.Lock()
	if len(freeCalls.list) < maxFreeCalls {
		freeCalls.list = append(freeCalls.list, c)
		c = nil
	}
	freeCalls.Unlock()
	if c != nil {
		freeCCall(c)
	}
}

// call is one blocking call on a transport, between begin and end.
type call struct {
	tr   *zapTransport
	ctx  context.Context
	c    *cCall        // c.t and c.timeout_ns set by begin
	stop chan struct{} // nil: no watcher
	peer string        // for Send's error text, built only on error
}

// begin registers the call with tr (see zapTransport) and maps ctx onto
// the borrowed zap ctx. On error nothing is left to undo.
func (cl *call) begin(tr *zapTransport, ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var timeout uint64
	if d, ok := ctx.Deadline(); ok {
		left := time.Until(d)
		if left <= 0 {
			return context.DeadlineExceeded
		}
		timeout = uint64(left)
	}
	c, err := getCall()
	if err != nil {
		return err
	}
	tr.mu.Lock()
	if tr.closing {
		tr.mu.Unlock()
		putCall(c)
		return closedErr("call")
	}
	if tr.inflight == nil {
		tr.inflight = make(map[*cCall]struct{})
		tr.drained = sync.NewCond(&tr.mu)
	}
	tr.inflight[c] = struct{}{}
	c.t = tr.t
	tr.mu.Unlock()
	c.timeout_ns = cUint64(timeout)
	cl.tr, cl.ctx, cl.c = tr, ctx, c
	if done := ctx.Done(); done != nil {
		cl.stop = make(chan struct{})
		go watch(done, c, cl.stop)
	}
	return nil
}

func watch(done <-chan struct{}, c *cCall, stop chan struct{}) {
	select {
	case <-done:
		cancelCCall(c)
		<-stop // hold until the call is over, so end() knows we are done
	case <-stop:
	}
}

// end stops the watcher, unregisters the call, returns the C state to the
// free list and turns rc into the error the caller sees.
func (cl *call) end(rc cInt, op string) error {
	if cl.stop != nil {
		cl.stop <- struct{}{}
	}
	var err error
	if rc != 0 {
		err = cl.err(rc, op)
	}
	tr := cl.tr
	tr.mu.Lock()
	delete(tr.inflight, cl.c)
	if tr.closing && len(tr.inflight) == 0 {
		tr.drained.Broadcast()
	}
	tr.mu.Unlock()
	putCall(cl.c)
	return err
}

// err maps a failed call's code: a fired zap ctx is the Go context's
// error (or net.ErrClosed when Close fired it); anything else is libzap's
// errno with its reason.
func (cl *call) err(rc cInt, op string) error {
	code := errnoOf(rc)
	switch code {
	case eCanceled, eTimedOut:
		if err := cl.ctx.Err(); err != nil {
			return err
		}
		if code == eTimedOut {
			// libzap's clock got there before Go's timer fired.
			return context.DeadlineExceeded
		}
		cl.tr.mu.Lock()
		closing := cl.tr.closing
		cl.tr.mu.Unlock()
		if closing {
			return closedErr(op)
		}
	case eShutdown:
		return closedErr(op)
	}
	if cl.peer != "" {
		op += " " + cl.peer
	}
	return &zapError{op: op, code: code, text: whyOf(cl.c)}
}
