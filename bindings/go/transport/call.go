package transport

import (
	"context"
	"fmt"
	"time"
)

// How a Go context reaches libzap.
//
// Each blocking call borrows a slot, a C call state (struct gozap_call: a
// zap ctx plus room for the result), from its transport's free list:
// creating a zap ctx costs an eventfd, too much per call. A deadline
// becomes the zap ctx's timeout, set by the C helper on entry.
//
// Cancellation needs someone to call zap_ctx_cancel() when ctx.Done()
// closes. Go 1.19 has no context.AfterFunc, so a call whose ctx can be
// cancelled starts one watcher goroutine and stops it before returning:
// the handoff on an unbuffered channel guarantees that once end() has it,
// the watcher has finished touching the zap ctx and is exiting, and tells
// whether it fired the ctx. A fired zap ctx cannot be re-armed, so its
// slot is freed instead of reused. context.Background() and other
// contexts that cannot be cancelled take neither the goroutine nor any
// allocation.

const maxFreeSlots = 64 // per transport; each holds an eventfd

// slot is one C call state and its place in the transport's list of
// calls in flight (see zapTransport).
type slot struct {
	c          *cCall
	prev, next *slot
}

// call is one blocking call on a transport, between begin and end.
type call struct {
	tr   *zapTransport
	ctx  context.Context
	s    *slot
	c    *cCall    // s.c; c.t and c.timeout_ns set by begin
	stop chan bool // nil: no watcher
	peer string    // for Send's error text, built only on error

	// bound, set before begin: the limit of a call whose ctx has no
	// deadline (Send: the transport's send timeout; 0: none). bounded:
	// begin applied it, so -ETIMEDOUT is that limit, not ctx's.
	bound   time.Duration
	bounded bool
}

// begin registers the call with tr and maps ctx onto the slot's zap ctx.
// On error nothing is left to undo.
func (cl *call) begin(tr *zapTransport, ctx context.Context, op string) error {
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
	} else if cl.bound > 0 {
		timeout, cl.bounded = uint64(cl.bound), true
	}
	tr.mu.Lock()
	if tr.closing {
		tr.mu.Unlock()
		return closedErr(op)
	}
	s := tr.free
	if s != nil {
		tr.free = s.next
		tr.nfree--
	} else {
		// Outside the lock: zap_ctx_new() is a system call.
		tr.mu.Unlock()
		c, err := newCCall()
		if err != nil {
			return err
		}
		s = &slot{c: c}
		tr.mu.Lock()
		if tr.closing {
			tr.mu.Unlock()
			freeCCall(c)
			return closedErr(op)
		}
	}
	s.prev, s.next = nil, tr.active
	if tr.active != nil {
		tr.active.prev = s
	}
	tr.active = s
	s.c.t = tr.t
	tr.mu.Unlock()
	s.c.timeout_ns = cUint64(timeout)
	cl.tr, cl.ctx, cl.s, cl.c = tr, ctx, s, s.c
	if done := ctx.Done(); done != nil {
		cl.stop = make(chan bool)
		go watch(done, s.c, cl.stop)
	}
	return nil
}

func watch(done <-chan struct{}, c *cCall, stop chan<- bool) {
	select {
	case <-done:
		cancelCCall(c)
		stop <- true // hold until end() takes it: c stays ours till then
	case stop <- false:
	}
}

// end stops the watcher, unregisters the call, returns the slot to the
// free list (or frees it) and turns rc into the error the caller sees.
func (cl *call) end(rc cInt, op string) error {
	fired := false
	if cl.stop != nil {
		fired = <-cl.stop
	}
	var err error
	if rc != 0 {
		err = cl.err(rc, op)
	}
	tr, s := cl.tr, cl.s
	tr.mu.Lock()
	if s.prev != nil {
		s.prev.next = s.next
	} else {
		tr.active = s.next
	}
	if s.next != nil {
		s.next.prev = s.prev
	}
	// Close fires the ctx of every call in flight: none of those is
	// reused either.
	reuse := !fired && !tr.closing && tr.nfree < maxFreeSlots
	if reuse {
		s.prev, s.next = nil, tr.free
		tr.free = s
		tr.nfree++
	}
	if tr.closing && tr.active == nil {
		tr.drained.Broadcast()
	}
	tr.mu.Unlock()
	if !reuse {
		freeCCall(s.c)
	}
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
		if code == eTimedOut && cl.bounded {
			return &zapError{op: cl.opPeer(op), code: code,
				text: fmt.Sprintf("%s: the send timeout (%v) passed", whyOf(cl.c), cl.bound)}
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
	return &zapError{op: cl.opPeer(op), code: code, text: whyOf(cl.c)}
}

func (cl *call) opPeer(op string) string {
	if cl.peer != "" {
		return op + " " + cl.peer
	}
	return op
}
