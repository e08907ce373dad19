package transport

// Everything that calls into libzap lives in this file, so that the C
// helpers below (static, hence visible to this file's cgo calls only) are
// in one place.

/*
#cgo pkg-config: zap
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zap/zap.h>

// One blocking call's C state, reused from call to call (see call.go).
// It lives in C memory, so libzap never holds a pointer into Go's heap:
// the zap ctx a Go context maps onto, the message zap_recv() returned and
// the failure text. The text is taken in the same cgo call that failed,
// because zap_strerror() reads a per-thread reason and a goroutine may
// change threads between two cgo calls.
//
// Pointers to libzap's opaque types travel inside it rather than as cgo
// arguments: cgo gives incomplete C types no Go pointer semantics, so
// each such argument is boxed for cgo's pointer check, an allocation per
// call.
//
// A small message is copied into @small and released within zap_recv()'s
// cgo call, which saves Recv a second cgo call; a larger one stays in
// @msg until Go has copied it out.
struct gozap_call {
	struct zap_transport *t;
	uint64_t timeout_ns;  // 0: no deadline
	struct zap_ctx *ctx;
	struct zap_msg *msg;  // NULL once released
	const void *data;
	size_t len;
	const char *peer;
	size_t peer_len;
	char why[600];
	char peer_buf[ZAP_PEER_MAX];
	unsigned char small[4096];
};

static int gozap_fail(struct gozap_call *c, int rc)
{
	if (rc)
		snprintf(c->why, sizeof(c->why), "%s", zap_strerror(rc));
	return rc;
}

static struct gozap_call *gozap_call_new(int *rc)
{
	struct gozap_call *c = calloc(1, sizeof(*c));

	if (!c) {
		*rc = -ENOMEM;
		return NULL;
	}
	*rc = zap_ctx_new(&c->ctx);
	if (*rc) {
		free(c);
		return NULL;
	}
	return c;
}

static void gozap_call_free(struct gozap_call *c)
{
	zap_ctx_free(c->ctx);
	free(c);
}

// Arm @c's ctx for one call: its deadline, or none (it may hold the
// previous call's).
static void gozap_arm(struct gozap_call *c)
{
	if (c->timeout_ns)
		zap_ctx_set_timeout(c->ctx, c->timeout_ns);
	else
		zap_ctx_set_deadline(c->ctx, 0);
}

static int gozap_send(struct gozap_call *c, _GoString_ peer, const void *buf,
		      size_t len)
{
	char p[ZAP_PEER_MAX];
	size_t n = _GoStringLen(peer);

	// Go strings have no NUL; a peer string longer than any address is
	// malformed, which is what zap_send() says of one.
	if (n >= sizeof(p) || memchr(_GoStringPtr(peer), 0, n)) {
		snprintf(c->why, sizeof(c->why), "invalid argument: malformed peer address");
		return -EINVAL;
	}
	memcpy(p, _GoStringPtr(peer), n);
	p[n] = '\0';
	gozap_arm(c);
	return gozap_fail(c, zap_send(c->t, p, buf, len, c->ctx));
}

static int gozap_recv(struct gozap_call *c)
{
	int rc;

	gozap_arm(c);
	rc = zap_recv(c->t, c->ctx, &c->msg);
	if (rc)
		return gozap_fail(c, rc);
	c->data = zap_msg_data(c->msg);
	c->len = zap_msg_len(c->msg);
	c->peer = zap_msg_peer(c->msg);
	c->peer_len = strlen(c->peer);
	if (c->len <= sizeof(c->small) && c->peer_len < sizeof(c->peer_buf)) {
		memcpy(c->small, c->data, c->len);
		memcpy(c->peer_buf, c->peer, c->peer_len);
		c->data = c->small;
		c->peer = c->peer_buf;
		zap_msg_release(c->msg);
		c->msg = NULL;
	}
	return 0;
}

static void gozap_msg_release(struct gozap_call *c)
{
	zap_msg_release(c->msg);
	c->msg = NULL;
}

static int gozap_buffer_alloc(struct gozap_call *c, size_t size,
			      struct zap_buffer **out)
{
	gozap_arm(c);
	return gozap_fail(c, zap_buffer_alloc(c->t, size, c->ctx, out));
}

static int gozap_pick(struct gozap_call *c, const char *pref,
		      struct zap_attr *attr, struct zap_transport **out)
{
	attr->size = sizeof(*attr);
	return gozap_fail(c, zap_pick(pref, 0, attr, out));
}

// The value of ZAP_SEND_TIMEOUT_MS as libzap's registry reads it, or
// NULL when it is unset or not valid (zap_pick() then fails, naming it).
static const char *gozap_env_send_timeout(void)
{
	struct zap_env_entry e;

	for (size_t i = 0; i < zap_env_count(); i++) {
		e.size = sizeof(e);
		if (zap_env_get(i, &e) == 0 && strcmp(e.name, "ZAP_SEND_TIMEOUT_MS") == 0)
			return e.source == ZAP_ENV_SET ? e.value : NULL;
	}
	return NULL;
}

static int gozap_explain(struct gozap_call *c, const char *pref,
			 struct zap_choice *out)
{
	out->size = sizeof(*out);
	return gozap_fail(c, zap_pick_explain(pref, 0, out));
}

static int gozap_address(struct zap_transport *t, char *buf, size_t len)
{
	return zap_transport_address(t, buf, len);
}

static int gozap_peer_path(struct zap_transport *t, const char *peer, char *buf, size_t len)
{
	return zap_peer_path(t, peer, buf, len);
}

static int gozap_caps(const struct zap_transport *t, struct zap_caps *caps)
{
	caps->size = sizeof(*caps);
	return zap_caps(t, caps);
}

static int gozap_report_get(struct gozap_call *c, size_t i,
			    struct zap_report_entry *e)
{
	e->size = sizeof(*e);
	return gozap_fail(c, zap_report_get(i, e));
}

static int gozap_dir_get(struct gozap_call *c, size_t i,
			 struct zap_dir_entry *d)
{
	d->size = sizeof(*d);
	return gozap_fail(c, zap_report_dir_get(i, d));
}

static int gozap_report_count(struct gozap_call *c)
{
	int n = zap_report_count();
	return n < 0 ? gozap_fail(c, n) : n;
}

// What an operator sees (observe.go). Each takes the failure text in the
// same cgo call, as gozap_fail() does.
static int gozap_stats(struct zap_transport *t, struct zap_stats *s, char *why,
		       size_t wl)
{
	s->size = sizeof(*s);
	int rc = zap_stats(t, s);
	if (rc)
		snprintf(why, wl, "%s", zap_strerror(rc));
	return rc;
}

static int gozap_peers(struct zap_transport *t, struct zap_peer_info *p, size_t n,
		       char *why, size_t wl)
{
	if (n)
		p[0].size = sizeof(*p);
	int rc = zap_peer_list(t, n ? p : NULL, n);
	if (rc < 0)
		snprintf(why, wl, "%s", zap_strerror(rc));
	return rc;
}

static int gozap_events(struct zap_transport *t, struct zap_event *e, size_t n,
			char *why, size_t wl)
{
	e[0].size = sizeof(*e);
	int rc = zap_events(t, e, n);
	if (rc < 0)
		snprintf(why, wl, "%s", zap_strerror(rc));
	return rc;
}

// The metrics text in C memory (the caller frees it), or NULL and *rc.
static char *gozap_metrics(struct zap_transport *t, int *rc, char *why, size_t wl)
{
	char *text = NULL;
	for (;;) {
		int n = zap_metrics_render(t, NULL, 0);
		if (n < 0) {
			*rc = n;
			break;
		}
		text = malloc((size_t)n + 1);
		if (!text) {
			*rc = -ENOMEM;
			break;
		}
		int k = zap_metrics_render(t, text, (size_t)n + 1);
		if (k >= 0 && k <= n)
			return text;
		free(text); // it grew in between: again
		text = NULL;
		if (k < 0) {
			*rc = k;
			break;
		}
	}
	snprintf(why, wl, "%s", zap_strerror(*rc));
	return NULL;
}

static int gozap_dir_count(struct gozap_call *c)
{
	int n = zap_report_dir_count();
	return n < 0 ? gozap_fail(c, n) : n;
}
*/
import "C"

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// cCall is the C half of one call; see struct gozap_call above.
type cCall = C.struct_gozap_call

type cTransport = C.struct_zap_transport
type cBuffer = C.struct_zap_buffer

func newCCall() (*cCall, error) {
	var rc C.int
	c := C.gozap_call_new(&rc)
	if c == nil {
		return nil, &zapError{op: "ctx", code: errnoOf(rc), text: syscall.Errno(-rc).Error()}
	}
	return c, nil
}

func freeCCall(c *cCall)    { C.gozap_call_free(c) }
func cancelCCall(c *cCall)  { C.zap_ctx_cancel(c.ctx) }
func whyOf(c *cCall) string { return C.GoString(&c.why[0]) }

type cInt = C.int
type cUint64 = C.uint64_t

func errnoOf(rc C.int) syscall.Errno { return syscall.Errno(-rc) }

// pick opens a transport with the attributes o sets; "" lets libzap read
// ZAP_TRANSPORT. libzap reads the attribute strings during zap_pick()
// only, so they are freed when it returns.
func pick(preference string, o *options) (*zapTransport, error) {
	c, err := newCCall()
	if err != nil {
		return nil, err
	}
	defer freeCCall(c)
	var strs []*C.char
	defer func() {
		for _, p := range strs {
			C.free(unsafe.Pointer(p))
		}
	}()
	cstr := func(s string) *C.char {
		if s == "" {
			return nil
		}
		p := C.CString(s)
		strs = append(strs, p)
		return p
	}
	cpref := cstr(preference)
	var attr C.struct_zap_attr
	attr.listen = cstr(o.listen)
	attr.max_msg_size = C.uint64_t(o.maxMsgSize)
	attr.pool_bytes = C.uint64_t(o.poolBytes)
	if o.hasTimeout {
		attr.send_timeout_ms = C.ZAP_TIMEOUT_NONE
		if o.sendTimeout > 0 {
			attr.send_timeout_ms = C.uint64_t((o.sendTimeout + time.Millisecond - 1) / time.Millisecond)
		}
	}
	attr.tls_cert = cstr(o.tls.CertFile)
	attr.tls_key = cstr(o.tls.KeyFile)
	attr.tls_ca = cstr(o.tls.CAFile)
	attr.tls_peers = cstr(o.tls.PeersFile)
	var t *C.struct_zap_transport
	if rc := C.gozap_pick(c, cpref, &attr, &t); rc != 0 {
		return nil, &zapError{op: opName("pick", preference), code: errnoOf(rc), text: whyOf(c)}
	}
	tr := &zapTransport{t: t, name: C.GoString(C.zap_transport_name(t))}
	tr.drained.L = &tr.mu
	tr.caps, _ = capsOf(t)
	tr.sendTimeout = envSendTimeout()
	if o.hasTimeout {
		tr.sendTimeout = time.Duration(attr.send_timeout_ms) * time.Millisecond
		if o.sendTimeout == 0 {
			tr.sendTimeout = 0
		}
	}
	return tr, nil
}

var envTimeout struct {
	once sync.Once
	d    time.Duration
}

// envSendTimeout is ZAP_SEND_TIMEOUT_MS (0: unset), read once per
// process as libzap reads it. A value libzap refuses never gets here: the
// pick fails first.
func envSendTimeout() time.Duration {
	envTimeout.once.Do(func() {
		if v := C.gozap_env_send_timeout(); v != nil {
			if ms, err := strconv.ParseUint(strings.TrimSpace(C.GoString(v)), 10, 32); err == nil {
				envTimeout.d = time.Duration(ms) * time.Millisecond
			}
		}
	})
	return envTimeout.d
}

func opName(op, preference string) string {
	if preference == "" {
		return op
	}
	return fmt.Sprintf("%s %q", op, preference)
}

func capsOf(t *C.struct_zap_transport) (Capabilities, error) {
	var cc C.struct_zap_caps
	if rc := C.gozap_caps(t, &cc); rc != 0 {
		return Capabilities{}, &zapError{op: "caps", code: errnoOf(rc), text: errnoOf(rc).Error()}
	}
	return capsFromC(&cc), nil
}

func capsFromC(cc *C.struct_zap_caps) Capabilities {
	return Capabilities{
		GPUResident:      bool(cc.gpu_resident),
		ZeroCopy:         bool(cc.zero_copy),
		MinLatencyMicros: float64(cc.min_latency_us),
		DeviceBuffers:    bool(cc.device_buffers),
		MaxMsgSize:       uint64(cc.max_msg_size),
	}
}

func closeC(t *C.struct_zap_transport) { C.zap_close(t) }

func addressOf(t *C.struct_zap_transport) (string, error) {
	var buf [C.ZAP_PEER_MAX]C.char
	if rc := C.gozap_address(t, &buf[0], C.size_t(len(buf))); rc != 0 {
		return "", &zapError{op: "address", code: errnoOf(rc), text: errnoOf(rc).Error()}
	}
	return C.GoString(&buf[0]), nil
}

func peerPathOf(t *C.struct_zap_transport, peer string) (string, error) {
	var buf [16]C.char
	cp := C.CString(peer)
	defer C.free(unsafe.Pointer(cp))
	if rc := C.gozap_peer_path(t, cp, &buf[0], C.size_t(len(buf))); rc != 0 {
		return "", &zapError{op: "path " + peer, code: errnoOf(rc), text: errnoOf(rc).Error()}
	}
	return C.GoString(&buf[0]), nil
}

// sendC runs zap_send() with c's ctx. msg may live in Go's heap: libzap
// reads it during the call only (zap_send: "the caller may reuse @buf
// once this returns"), which is what cgo's pointer rules allow.
func sendC(c *cCall, peer string, msg []byte) C.int {
	var p unsafe.Pointer
	if len(msg) > 0 {
		p = unsafe.Pointer(&msg[0])
	}
	return C.gozap_send(c, peer, p, C.size_t(len(msg)))
}

func recvC(c *cCall) C.int { return C.gozap_recv(c) }

// takeMsg copies the received message into Go memory and releases it
// (unless gozap_recv already has), so the slice Recv returns is the
// caller's to keep. The peer string is
// reused from the previous message when the bytes match (the common case
// of one conversation), which saves an allocation per call.
func takeMsg(c *cCall, last string) (string, []byte) {
	n := int(c.len)
	msg := make([]byte, n)
	if n > 0 {
		copy(msg, unsafe.Slice((*byte)(c.data), n))
	}
	pb := unsafe.Slice((*byte)(unsafe.Pointer(c.peer)), int(c.peer_len))
	peer := last
	if string(pb) != peer { // compiles to a comparison, no allocation
		peer = string(pb)
	}
	if c.msg != nil { // a large message: see struct gozap_call
		C.gozap_msg_release(c)
	}
	return peer, msg
}

func bufferAllocC(c *cCall, size int) (*buffer, C.int) {
	var b *C.struct_zap_buffer
	if rc := C.gozap_buffer_alloc(c, C.size_t(size), &b); rc != 0 {
		return nil, rc
	}
	buf := &buffer{b: b, dev: C.zap_buffer_device_ptr(b)}
	if size > 0 {
		buf.bytes = unsafe.Slice((*byte)(C.zap_buffer_bytes(b)), size)
	} else {
		buf.bytes = []byte{}
	}
	return buf, 0
}

func bufferReleaseC(b *C.struct_zap_buffer) { C.zap_buffer_release(b) }

func poolBytesC(t *C.struct_zap_transport) int64 { return int64(C.zap_pool_bytes(t)) }

func registeredC() []string {
	var names **C.char
	n := int(C.zap_registered(&names))
	if n <= 0 {
		return nil
	}
	out := make([]string, 0, n)
	for _, p := range unsafe.Slice(names, n) {
		out = append(out, C.GoString(p))
	}
	return out
}

func explainC(preference string) (Choice, error) {
	c, err := newCCall()
	if err != nil {
		return Choice{}, err
	}
	defer freeCCall(c)
	var cpref *C.char
	if preference != "" {
		cpref = C.CString(preference)
		defer C.free(unsafe.Pointer(cpref))
	}
	var ch C.struct_zap_choice
	rc := C.gozap_explain(c, cpref, &ch)
	out := Choice{
		Name:     C.GoString(&ch.name[0]),
		Fallback: bool(ch.fallback),
		Reason:   C.GoString(&ch.reason[0]),
	}
	if rc != 0 {
		return out, &zapError{op: opName("explain", preference), code: errnoOf(rc), text: whyOf(c)}
	}
	return out, nil
}

func loadReportC() (Report, error) {
	c, err := newCCall()
	if err != nil {
		return Report{}, err
	}
	defer freeCCall(c)
	var r Report
	n := C.gozap_dir_count(c)
	if n < 0 {
		return r, &zapError{op: "report", code: errnoOf(n), text: whyOf(c)}
	}
	for i := 0; i < int(n); i++ {
		var d C.struct_zap_dir_entry
		if rc := C.gozap_dir_get(c, C.size_t(i), &d); rc != 0 {
			return r, &zapError{op: "report", code: errnoOf(rc), text: whyOf(c)}
		}
		r.Dirs = append(r.Dirs, PluginDir{
			Path:   C.GoString(d.path),
			Source: C.GoString(d.source),
			Status: C.GoString(d.status),
		})
	}
	n = C.gozap_report_count(c)
	if n < 0 {
		return r, &zapError{op: "report", code: errnoOf(n), text: whyOf(c)}
	}
	for i := 0; i < int(n); i++ {
		var e C.struct_zap_report_entry
		if rc := C.gozap_report_get(c, C.size_t(i), &e); rc != 0 {
			return r, &zapError{op: "report", code: errnoOf(rc), text: whyOf(c)}
		}
		r.Plugins = append(r.Plugins, PluginReport{
			Name:    C.GoString(e.name),
			Path:    C.GoString(e.path),
			State:   C.GoString(C.zap_plugin_state_name(e.state)),
			Reason:  C.GoString(e.reason),
			Detail:  C.GoString(e.detail),
			Version: C.GoString(e.version),
			Rank:    int(e.rank),
			Builtin: bool(e.builtin),
			Caps:    capsFromC(&e.caps),
		})
	}
	return r, nil
}

func versionC() string { return C.GoString(C.zap_version()) }

func observeErr(op string, rc C.int, why []C.char) error {
	return &zapError{op: op, code: errnoOf(rc), text: C.GoString(&why[0])}
}

func statsC(t *C.struct_zap_transport) (Stats, error) {
	var s C.struct_zap_stats
	var why [300]C.char
	if rc := C.gozap_stats(t, &s, &why[0], C.size_t(len(why))); rc != 0 {
		return Stats{}, observeErr("stats", rc, why[:])
	}
	st := Stats{
		MessagesSent: uint64(s.msgs_sent), BytesSent: uint64(s.bytes_sent),
		MessagesReceived: uint64(s.msgs_received), BytesReceived: uint64(s.bytes_received),
		ConnsDialed: uint64(s.conns_dialed), ConnsAccepted: uint64(s.conns_accepted),
		ConnsOpen: uint64(s.conns_open), ConnsClosed: map[string]uint64{},
		ShmUpgrades: uint64(s.shm_upgrades), ShmRefused: uint64(s.shm_refused),
		DropsPartial: uint64(s.drops_partial), DropsShutdown: uint64(s.drops_shutdown),
		RxQueueMessages: uint64(s.rxq_msgs), RxQueueBytes: uint64(s.rxq_bytes),
		RxQueueLimit: uint64(s.rxq_limit), PartialBytes: uint64(s.partial_bytes),
		PartialLimit: uint64(s.partial_limit), Peers: uint64(s.peers),
		EventsLost: uint64(s.events_lost), Retransmits: uint64(s.retransmits),
		PeersForgotten: uint64(s.peers_forgotten), FramesRefused: uint64(s.frames_refused),
		CreditWaits: uint64(s.credit_waits), PinnedBytes: uint64(s.pinned_bytes),
	}
	for i, n := range s.conns_closed {
		if n != 0 {
			st.ConnsClosed[closeReasonC(i)] += uint64(n)
		}
	}
	return st, nil
}

func closeReasonC(i int) string { return C.GoString(C.zap_close_reason_name(C.int(i))) }

func peersC(t *C.struct_zap_transport) ([]PeerInfo, error) {
	var why [300]C.char
	for room := 16; ; {
		// Go memory without Go pointers: cgo may pass it to C.
		p := make([]C.struct_zap_peer_info, room)
		rc := C.gozap_peers(t, &p[0], C.size_t(room), &why[0], C.size_t(len(why)))
		if rc < 0 {
			return nil, observeErr("peers", rc, why[:])
		}
		if int(rc) > room {
			room = int(rc) + 16
			continue
		}
		out := make([]PeerInfo, int(rc))
		for i := range out {
			e := &p[i]
			out[i] = PeerInfo{
				Peer: C.GoString(&e.peer[0]), Identity: C.GoString(&e.identity[0]),
				Path: C.GoString(&e.path[0]), TLS: bool(e.tls), Dialed: bool(e.dialed),
				ConnID:       uint64(e.conn_id),
				MessagesSent: uint64(e.msgs_sent), BytesSent: uint64(e.bytes_sent),
				MessagesReceived: uint64(e.msgs_received),
				BytesReceived:    uint64(e.bytes_received),
				Idle:             time.Duration(e.idle_ms) * time.Millisecond,
				RTT:              time.Duration(e.rtt_us) * time.Microsecond,
				RTTVar:           time.Duration(e.rtt_var_us) * time.Microsecond,
			}
		}
		return out, nil
	}
}

func eventsC(t *C.struct_zap_transport) ([]Event, error) {
	var why [300]C.char
	var out []Event
	for {
		var e [32]C.struct_zap_event
		rc := C.gozap_events(t, &e[0], C.size_t(len(e)), &why[0], C.size_t(len(why)))
		if rc < 0 {
			return out, observeErr("events", rc, why[:])
		}
		for i := 0; i < int(rc); i++ {
			x := &e[i]
			out = append(out, Event{
				Type:   C.GoString(C.zap_event_type_name(x._type)),
				Reason: "",
				Time:   time.UnixMilli(int64(x.time_ms)),
				ConnID: uint64(x.conn_id), Dialed: bool(x.dialed),
				Peer: C.GoString(&x.peer[0]), Identity: C.GoString(&x.identity[0]),
				Path: C.GoString(&x.path[0]), Detail: C.GoString(&x.detail[0]),
			})
			if x._type == C.ZAP_EVENT_DISCONNECTED || x._type == C.ZAP_EVENT_REFUSED {
				out[len(out)-1].Reason = closeReasonC(int(x.reason))
			}
		}
		if int(rc) < len(e) {
			return out, nil
		}
	}
}

func metricsC(t *C.struct_zap_transport) (string, error) {
	var why [300]C.char
	var rc C.int
	text := C.gozap_metrics(t, &rc, &why[0], C.size_t(len(why)))
	if text == nil {
		return "", observeErr("metrics", rc, why[:])
	}
	defer C.free(unsafe.Pointer(text))
	return C.GoString(text), nil
}

// errShutdown and friends are the codes mapped specially in call.go.
const (
	eCanceled = syscall.ECANCELED
	eTimedOut = syscall.ETIMEDOUT
	eShutdown = syscall.ESHUTDOWN
)
