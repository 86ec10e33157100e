package scenario

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"rtgate/bench/load"
	"rtgate/bench/proc"
)

// callTimeout bounds one call, from its dial to the gateway's close frame.
const callTimeout = 20 * time.Second

// caller makes Realtime calls through the gateway the way a voice client
// does, with gorilla/websocket: a client independent of the gateway's code.
type caller struct {
	url    string
	header http.Header
	dialer websocket.Dialer
}

func newCaller(g *proc.Gateway) *caller {
	return &caller{
		url:    g.URL(),
		header: http.Header{"Authorization": {"Bearer " + clientKey}},
		dialer: websocket.Dialer{HandshakeTimeout: callTimeout},
	}
}

// refusal is a connect the gateway answered with an HTTP error instead of
// an upgrade.
type refusal struct {
	status int
	code   string // the OpenAI-shaped body's error.code
}

func (r *refusal) Error() string { return fmt.Sprintf("refused: HTTP %d %s", r.status, r.code) }

// open dials url with the client key and extra headers and waits for the
// session.created event; ctx bounds both.
func (c *caller) open(ctx context.Context, url string, extra http.Header) (*websocket.Conn, error) {
	h := c.header.Clone()
	maps.Copy(h, extra)
	conn, resp, err := c.dialer.DialContext(ctx, url, h)
	if err != nil {
		if resp == nil {
			return nil, fmt.Errorf("dial: %w", err)
		}
		defer resp.Body.Close()
		var body struct{ Error struct{ Code string } }
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return nil, &refusal{status: resp.StatusCode, code: body.Error.Code}
	}
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetReadDeadline(d)
	}
	typ, err := readEvent(conn)
	if err != nil || typ != "session.created" {
		conn.Close()
		return nil, fmt.Errorf("first event %q: %v", typ, err)
	}
	return conn, nil
}

// call is one short exchange: open, response.create, every event up to
// response.done, the session held for hold (a caller who listens a while
// before hanging up), then close 1000 and the gateway's close in return.
func (c *caller) call(ctx context.Context, hold time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	conn, err := c.open(ctx, c.url, nil)
	if err != nil {
		return err
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	_ = conn.SetWriteDeadline(deadline)
	if err := conn.WriteMessage(websocket.TextMessage, []byte(`{"type":"response.create"}`)); err != nil {
		return fmt.Errorf("send response.create: %w", err)
	}
	for {
		typ, err := readEvent(conn)
		if err != nil {
			return fmt.Errorf("before response.done: %w", err)
		}
		if typ == "error" {
			return errors.New("error event before response.done")
		}
		if typ == "response.done" {
			break
		}
	}
	if hold > 0 {
		t := time.NewTimer(hold)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("hold: %w", ctx.Err())
		}
	}
	return hangUp(conn)
}

// hangUp sends close 1000 and reads until the gateway's close, which must
// be 1000 too.
func hangUp(conn *websocket.Conn) error {
	if err := conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(1000, "done"),
		time.Now().Add(5*time.Second)); err != nil {
		return fmt.Errorf("send close: %w", err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		if _, _, err := conn.ReadMessage(); err != nil {
			if websocket.IsCloseError(err, 1000) {
				return nil
			}
			return fmt.Errorf("close: %w", err)
		}
	}
}

// readEvent reads one message and returns its event type.
func readEvent(conn *websocket.Conn) (string, error) {
	_, msg, err := conn.ReadMessage()
	if err != nil {
		return "", err
	}
	return load.EventType(msg)
}

// loadResult counts the calls of a load and its failures by message.
type loadResult struct {
	mu       sync.Mutex
	made, ok int
	failures map[string]int
}

func (r *loadResult) add(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.made++
	if err == nil {
		r.ok++
		return
	}
	if r.failures == nil {
		r.failures = map[string]int{}
	}
	msg := err.Error()
	if len(msg) > 120 {
		msg = msg[:120]
	}
	r.failures[msg]++
}

// failureSummary lists the commonest failures, for a test's message.
func (r *loadResult) failureSummary() string {
	msgs := slices.SortedFunc(maps.Keys(r.failures), func(a, b string) int { return r.failures[b] - r.failures[a] })
	var b strings.Builder
	for i, m := range msgs {
		if i == 5 {
			fmt.Fprintf(&b, "; and %d other kinds", len(msgs)-5)
			break
		}
		fmt.Fprintf(&b, "; %d× %s", r.failures[m], m)
	}
	return strings.TrimPrefix(b.String(), "; ")
}

// runCalls makes n calls through c from conc callers in a closed loop, each
// caller starting its next call as its last one ends; each call holds its
// session a random while in [0, maxHold) after response.done, so calls
// vary in length and connects arrive continuously instead of in waves.
// before(i), when set, runs just before call i is dialed; once it returns
// false, that call and the calls after it are not made (those under way
// go on). ctx bounds the whole load: calls not started by its end are not
// made.
func runCalls(ctx context.Context, c *caller, n, conc int, maxHold time.Duration, before func(i int) bool) *loadResult {
	res := &loadResult{}
	starting, stop := context.WithCancel(ctx)
	defer stop()
	load.ForEach(starting, n, conc, func(i int) {
		if before != nil && !before(i) {
			stop()
			return
		}
		res.add(c.call(ctx, time.Duration(rand.Int64N(int64(maxHold)))))
	})
	return res
}
