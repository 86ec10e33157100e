package soak

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/bench/load"
)

// Causes the soak's own clients give, besides wsbench's failure classes.
const (
	// causeHungUp: the client dropped its socket on purpose, as planned.
	causeHungUp = "hung_up"
	// causeClosedNoResponse: the gateway closed the connection without an
	// HTTP answer (as at its handshake timeout).
	causeClosedNoResponse = "closed_no_response"
	// causeNotDropped: a client that stopped reading was never dropped,
	// although more than the kernel's buffers waited for it longer than
	// the gateway's write timeout.
	causeNotDropped = "not_dropped"
	// causeUnderLimit: a client that stopped reading was not dropped, and
	// what waited for it fits the kernel's buffers: nothing waited in the
	// gateway (the upstream was slow), so there was nothing to time out.
	causeUnderLimit = "backlog_under_limit"
	// causeNotCutOff: the client sent to a stalled upstream for the whole
	// budget and the session was never ended.
	causeNotCutOff = "not_cut_off"
)

// Sizes of what the misbehaving clients send.
const (
	// stallChunk is one input_audio_buffer.append to a stalled upstream:
	// 48 KiB of PCM (1 s of audio), 64 KiB of base64.
	stallChunkPCM = 48 << 10
	// stallPace spaces the chunks: about 6 MB/s, enough to fill the socket
	// buffers in well under a second without turning the soak into a
	// bandwidth test.
	stallPace = 10 * time.Millisecond
	// stallBudget bounds what one stall session sends.
	stallBudget = 256 << 20
	// slowPace spaces a slow client's response.create requests (mockai
	// refuses those that come while a response is streaming).
	slowPace = 20 * time.Millisecond
	// slowIdle is how long a slow client that was not dropped reads on
	// after the last message before it counts what it read.
	slowIdle = 3 * time.Second
	// slowSlack covers what may still come after the client stops asking:
	// the response streaming then, and error events.
	slowSlack = 1 << 20
	// slowRcvBuf keeps a slow client's receive window small, so that the
	// backlog builds up in the gateway, behind a write the kernel does not
	// take.
	slowRcvBuf = 16 << 10
	// garbageMax bounds a garbage request; above the gateway's 8 KiB head
	// limit so some are refused for size.
	garbageMax = 12 << 10
)

var (
	msgResponseCreate = []byte(`{"type":"response.create"}`)
	msgStallChunk     = []byte(`{"type":"input_audio_buffer.append","audio":"` +
		base64.StdEncoding.EncodeToString(make([]byte, stallChunkPCM)) + `"}`)
)

// runner runs planned sessions against one gateway.
type runner struct {
	url      string // ws://host:port/v1/realtime?model=...
	hostPort string
	header   http.Header
	// timeout bounds one session; misbehaving sessions that wait on the
	// gateway on purpose get their own, shorter bounds within it.
	timeout time.Duration
	// handshakeTimeout is the gateway's HANDSHAKE_TIMEOUT_SECS.
	handshakeTimeout time.Duration
	maxMessage       int
	writeTimeout     time.Duration // the gateway's WRITE_TIMEOUT_SECS

	normal *load.Client            // normal calls (with input audio)
	faulty map[string]*load.Client // upstream faults, by query
	dialer websocket.Dialer
	slow   websocket.Dialer
}

func newRunner(url, key string, timeout, handshakeTimeout time.Duration, maxMessage int, writeTimeout time.Duration, deltas int) (*runner, error) {
	u, err := parseHostPort(url)
	if err != nil {
		return nil, err
	}
	r := &runner{url: url, hostPort: u, header: http.Header{"Authorization": {"Bearer " + key}},
		timeout: timeout, handshakeTimeout: handshakeTimeout, maxMessage: maxMessage,
		writeTimeout: writeTimeout, faulty: map[string]*load.Client{}}
	r.normal, err = load.NewClient(load.Config{URL: url, Key: key, Timeout: timeout, Audio: true, AudioLength: 200 * time.Millisecond})
	if err != nil {
		return nil, err
	}
	queries := []string{faultQuery(Plan{Kind: Upstream401})}
	for _, k := range afterChoices(deltas) {
		for _, kind := range []Kind{UpstreamDrop, UpstreamClose, UpstreamMalformed} {
			queries = append(queries, faultQuery(Plan{Kind: kind, After: k}))
		}
	}
	for _, q := range queries {
		c, err := load.NewClient(load.Config{URL: url + q, Key: key, Timeout: timeout})
		if err != nil {
			return nil, err
		}
		r.faulty[q] = c
	}
	r.dialer = websocket.Dialer{HandshakeTimeout: timeout}
	r.slow = websocket.Dialer{HandshakeTimeout: timeout, NetDialContext: (&net.Dialer{Control: smallRcvBuf(slowRcvBuf)}).DialContext}
	return r, nil
}

func parseHostPort(url string) (string, error) {
	rest, ok := strings.CutPrefix(url, "ws://")
	if !ok {
		return "", fmt.Errorf("soak: gateway URL %q is not ws://", url)
	}
	host, _, _ := strings.Cut(rest, "/")
	return host, nil
}

// faultQuery is the query suffix that asks mockai for the plan's fault.
func faultQuery(p Plan) string {
	switch p.Kind {
	case UpstreamDrop:
		return "&fault=drop&fault_after=" + strconv.Itoa(p.After)
	case UpstreamClose:
		return "&fault=close&fault_after=" + strconv.Itoa(p.After)
	case UpstreamMalformed:
		return "&fault=malformed&fault_after=" + strconv.Itoa(p.After)
	case UpstreamStall:
		return "&fault=stall"
	case Upstream401:
		return "&fault=401"
	}
	return ""
}

// outcome is how one session ended.
type outcome struct {
	cause, detail string
	// upgraded says the gateway answered 101: it then counts the session
	// in rtgate_sessions_total when it ends.
	upgraded bool
}

func failed(cause, detail string) outcome { return outcome{cause: cause, detail: detail} }

// run runs one planned session and returns how it ended.
func (r *runner) run(ctx context.Context, p Plan) outcome {
	rng := rand.New(rand.NewPCG(p.Rand, 0x50a4))
	switch p.Kind {
	case Normal:
		return fromSample(r.normal.Call(ctx, time.Now()))
	case UpstreamDrop, UpstreamClose, UpstreamMalformed, Upstream401:
		c := r.faulty[faultQuery(p)]
		if c == nil {
			return failed("soak_bug", "no client for "+faultQuery(p))
		}
		return fromSample(c.Call(ctx, time.Now()))
	case UpstreamStall:
		return r.stall(ctx)
	case SlowClient:
		return r.slowClient(ctx)
	case GarbageRequest:
		b := make([]byte, 1+rng.IntN(garbageMax))
		fillRandom(rng, b)
		if rng.IntN(2) == 0 {
			b = append(b, "\r\n\r\n"...)
		}
		return r.rawRequest(ctx, b)
	case PartialRequest:
		return r.rawRequest(ctx, []byte("GET /v1/realtime?model=gpt-realtime HTTP/1.1\r\nHost: "+r.hostPort+"\r\nUpgrade: websocket\r\n"))
	case UnmaskedFrame:
		frame := append([]byte{0x81, byte(len(msgResponseCreate))}, msgResponseCreate...)
		return r.badFrame(ctx, frame)
	case ReservedBits:
		b := make([]byte, 16+rng.IntN(64))
		fillRandom(rng, b)
		b[0] = 0x80 | 0x70&b[0] | 0x10 | 0x1 // FIN, RSV3 at least, text
		b[1] = 0x80 | byte(len(b)-6)         // masked; the rest is the mask and payload
		return r.badFrame(ctx, b)
	case OversizedMessage:
		return r.oversized(ctx)
	case Hangup:
		return r.hangup(ctx, rng.IntN(7), rng.IntN(2) == 0)
	}
	return failed("soak_bug", "unknown kind "+string(p.Kind))
}

// fromSample turns a wsbench call into an outcome.
func fromSample(s load.Sample) outcome {
	o := outcome{cause: CauseCompleted, upgraded: s.Reached >= load.PhaseDial}
	if !s.OK() {
		o.cause, o.detail = s.Failure, s.Detail
	}
	return o
}

// session is a connection opened by the soak's own clients.
type session struct {
	conn *websocket.Conn
	stop func() bool
}

func (s *session) close() {
	s.stop()
	s.conn.Close()
}

// open dials the gateway and reads session.created, with the session's
// deadline set on the socket. On failure the session is nil and the
// outcome says why.
func (r *runner) open(ctx context.Context, d *websocket.Dialer, query string) (*session, outcome) {
	deadline := time.Now().Add(r.timeout)
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	conn, resp, err := d.DialContext(dctx, r.url+query, r.header)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		if resp != nil {
			return nil, failed("handshake_"+strconv.Itoa(resp.StatusCode), err.Error())
		}
		return nil, failed("dial", err.Error())
	}
	conn.SetReadLimit(32 << 20)
	_ = conn.NetConn().SetDeadline(deadline)
	s := &session{conn: conn, stop: context.AfterFunc(ctx, func() { _ = conn.NetConn().SetDeadline(time.Unix(1, 0)) })}
	for {
		_, msg, err := conn.ReadMessage()
		if err != nil {
			s.close()
			return nil, fromErr(ctx, err)
		}
		typ, _ := load.EventType(msg) // not JSON: neither, read on
		switch typ {
		case "session.created":
			return s, outcome{upgraded: true}
		case "error":
			s.close()
			return nil, outcome{cause: "error_event", detail: string(msg[:min(len(msg), 300)]), upgraded: true}
		}
	}
}

// stall sends audio to an upstream that stopped reading, until the gateway
// ends the session (the upstream's kernel took nothing for the write
// timeout; past MAX_STALLED_BYTES the watchdog would cut it first).
func (r *runner) stall(ctx context.Context) outcome {
	s, o := r.open(ctx, &r.dialer, faultQuery(Plan{Kind: UpstreamStall}))
	if s == nil {
		return o
	}
	defer s.close()
	readErr := make(chan error, 1)
	go func() { readErr <- drain(s.conn) }()
	start, sent := time.Now(), 0
	ended := func(err error) outcome {
		if isTimeout(err) && ctx.Err() == nil {
			return outcome{cause: causeNotCutOff, upgraded: true, detail: fmt.Sprintf(
				"sent %.1f MB to a stalled upstream in %v; the session was never ended",
				float64(sent)/1e6, time.Since(start).Round(time.Millisecond))}
		}
		return fromErrf(ctx, err, "after %.1f MB in %v", float64(sent)/1e6, time.Since(start).Round(time.Millisecond))
	}
	tick := time.NewTicker(stallPace)
	defer tick.Stop()
	for sent < stallBudget {
		if err := s.conn.WriteMessage(websocket.TextMessage, msgStallChunk); err != nil {
			break // the read side tells how it ended
		}
		sent += len(msgStallChunk)
		select {
		case err := <-readErr:
			return ended(err)
		case <-tick.C:
		}
	}
	return ended(<-readErr) // bounded by the socket's deadline
}

// drain reads and discards messages until the connection ends.
func drain(conn *websocket.Conn) error {
	for {
		if _, _, err := conn.NextReader(); err != nil {
			return err
		}
	}
}

// slowClient asks for response after response without reading any, until
// the gateway drops it: a client that takes nothing is dropped once the
// kernel has taken nothing from the gateway for WRITE_TIMEOUT_SECS
// (MAX_STALLED_BYTES, the ceiling for a client that still reads, is far
// above what piles up here). If it was not dropped when it stops asking, it
// goes on reading nothing for longer than the write timeout, then reads
// what is left: that is what waited for it, in the kernel's socket buffers
// and in the gateway. More than the kernel can hold means the gateway held
// a backlog for a client that took nothing for longer than the write
// timeout without dropping it (causeNotDropped); less means nothing waited
// in the gateway, so there was nothing to drop (causeUnderLimit).
func (r *runner) slowClient(ctx context.Context) outcome {
	s, o := r.open(ctx, &r.slow, "")
	if s == nil {
		return o
	}
	defer s.close()
	start := time.Now()
	budget := start.Add(r.timeout / 2)
	asked := 0
	for time.Now().Before(budget) {
		if err := s.conn.WriteMessage(websocket.TextMessage, msgResponseCreate); err != nil {
			break
		}
		asked++
		select {
		case <-ctx.Done():
			return outcome{cause: CauseCancelled, detail: "run interrupted", upgraded: true}
		case <-time.After(slowPace):
		}
	}
	// Still reading nothing: whatever waits in the gateway now ages past
	// the write timeout.
	select {
	case <-ctx.Done():
		return outcome{cause: CauseCancelled, detail: "run interrupted", upgraded: true}
	case <-time.After(r.writeTimeout + time.Second):
	}
	// Read what was left; a dropped client reads what its own socket held,
	// then the end.
	backlog, err := drainIdle(s.conn, slowIdle)
	if err == nil { // nothing more came for slowIdle: still connected
		kb := kernelBuffers()
		detail := fmt.Sprintf("asked for %d responses in %v without reading; then read %.1f MB (kernel buffers hold up to %.1f MB, WRITE_TIMEOUT_SECS %v)",
			asked, time.Since(start).Round(time.Millisecond), float64(backlog)/1e6, float64(kb)/1e6, r.writeTimeout)
		if backlog > kb+slowSlack {
			return outcome{cause: causeNotDropped, upgraded: true, detail: detail + "; never dropped"}
		}
		return outcome{cause: causeUnderLimit, upgraded: true, detail: detail}
	}
	return fromErrf(ctx, err, "after %d response.create in %v", asked, time.Since(start).Round(time.Millisecond))
}

// drainIdle reads until the connection ends (returning why) or nothing
// arrives for idle (returning nil), and counts the bytes read.
func drainIdle(conn *websocket.Conn, idle time.Duration) (int64, error) {
	var n int64
	for {
		_ = conn.SetReadDeadline(time.Now().Add(idle))
		_, rd, err := conn.NextReader()
		if err == nil {
			var m int64
			m, err = io.Copy(io.Discard, rd)
			n += m
		}
		if err != nil {
			if isTimeout(err) {
				return n, nil
			}
			return n, err
		}
	}
}

// kernelBuffers is the most the kernel can hold between the gateway and a
// slow client: the gateway's send buffer at its largest (tcp_wmem's
// maximum; 4 MiB where it cannot be read) and the client's receive buffer.
func kernelBuffers() int64 {
	wmem := int64(4 << 20)
	if b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_wmem"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 3 {
			if v, err := strconv.ParseInt(f[2], 10, 64); err == nil {
				wmem = v
			}
		}
	}
	return wmem + 2*slowRcvBuf // the kernel doubles SO_RCVBUF
}

// rawRequest sends b instead of a WebSocket handshake and reads the answer.
func (r *runner) rawRequest(ctx context.Context, b []byte) outcome {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", r.hostPort)
	if err != nil {
		return failed("dial", err.Error())
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	wait := r.handshakeTimeout + 5*time.Second
	_ = conn.SetDeadline(time.Now().Add(wait))
	_, _ = conn.Write(b) // a refusal may come before all of it is written; the answer tells
	line, err := bufio.NewReader(conn).ReadString('\n')
	switch {
	case ctx.Err() != nil:
		return failed(CauseCancelled, "run interrupted")
	case err != nil && line == "" && isTimeout(err):
		return failed("no_answer", fmt.Sprintf("no answer and not closed within %v", wait))
	case err != nil && line == "":
		return failed(causeClosedNoResponse, err.Error())
	}
	proto, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
	status, _, _ := strings.Cut(rest, " ")
	if !strings.HasPrefix(proto, "HTTP/1.") || len(status) != 3 {
		return failed("protocol", fmt.Sprintf("not an HTTP status line: %.60q", line))
	}
	return outcome{cause: "http_" + status, detail: strings.TrimSpace(line), upgraded: status == "101"}
}

// badFrame writes raw bytes as the client's first frame after
// session.created and reads until the gateway closes.
func (r *runner) badFrame(ctx context.Context, frame []byte) outcome {
	s, o := r.open(ctx, &r.dialer, "")
	if s == nil {
		return o
	}
	defer s.close()
	if _, err := s.conn.NetConn().Write(frame); err != nil {
		return fromErrf(ctx, err, "writing the frame")
	}
	return fromErrf(ctx, drain(s.conn), "after the frame")
}

// oversized sends one message larger than the gateway accepts.
func (r *runner) oversized(ctx context.Context) outcome {
	s, o := r.open(ctx, &r.dialer, "")
	if s == nil {
		return o
	}
	defer s.close()
	msg := make([]byte, r.maxMessage+r.maxMessage/2)
	for i := range msg {
		msg[i] = 'A'
	}
	if err := s.conn.WriteMessage(websocket.TextMessage, msg); err != nil {
		return fromErrf(ctx, err, "writing %d bytes", len(msg))
	}
	return fromErrf(ctx, drain(s.conn), "after a %d-byte message", len(msg))
}

// hangup asks for a response, reads frames of it, then drops the socket
// without a close frame; with rst, by a reset.
func (r *runner) hangup(ctx context.Context, frames int, rst bool) outcome {
	s, o := r.open(ctx, &r.dialer, "")
	if s == nil {
		return o
	}
	defer s.close()
	if err := s.conn.WriteMessage(websocket.TextMessage, msgResponseCreate); err != nil {
		return fromErrf(ctx, err, "asking for a response")
	}
	for i := range frames {
		if _, _, err := s.conn.ReadMessage(); err != nil {
			return fromErrf(ctx, err, "reading frame %d of the response", i+1)
		}
	}
	how := "FIN"
	if tc, ok := s.conn.NetConn().(*net.TCPConn); ok && rst {
		_ = tc.SetLinger(0)
		how = "RST"
	}
	_ = s.conn.NetConn().Close()
	return outcome{cause: causeHungUp, upgraded: true, detail: fmt.Sprintf("after %d frames of the response, by %s", frames, how)}
}

// fromErrf names how an upgraded session's socket ended, in wsbench's
// vocabulary, with context added to the detail.
func fromErrf(ctx context.Context, err error, format string, args ...any) outcome {
	o := fromErr(ctx, err)
	o.detail += " (" + fmt.Sprintf(format, args...) + ")"
	return o
}

func fromErr(ctx context.Context, err error) outcome {
	o := outcome{upgraded: true, detail: fmt.Sprint(err)}
	var ce *websocket.CloseError
	switch {
	case ctx.Err() != nil:
		o.cause, o.detail = CauseCancelled, "run interrupted"
	case errors.As(err, &ce):
		o.cause = "unexpected_close_" + strconv.Itoa(ce.Code)
	case isTimeout(err):
		o.cause = "timeout"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, net.ErrClosed):
		o.cause = "unexpected_close_1006"
	default:
		o.cause = "protocol"
	}
	return o
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

func fillRandom(r *rand.Rand, b []byte) {
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}
