package upstream

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// TestDialAuthorizes: a target's Authorize runs on every dial with the
// dial's context, and what it adds reaches the upstream's upgrade without
// changing the target's own headers (a pooled target is dialed again and
// again, concurrently); an Authorize error fails the dial before anything
// is sent.
func TestDialAuthorizes(t *testing.T) {
	var upgrades atomic.Int32
	var mu sync.Mutex
	var seen []string
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upgrades.Add(1)
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization")+"|"+r.Header.Get("X-Static"))
		mu.Unlock()
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		_ = c.Close()
	}))
	defer srv.Close()
	u, _ := url.Parse("ws" + strings.TrimPrefix(srv.URL, "http") + "/ws/live")
	d := &Dialer{Timeout: 5 * time.Second}

	var calls atomic.Int32
	static := http.Header{"X-Static": {"kept"}}
	tg := Target{URL: u, Header: static, Authorize: func(ctx context.Context, h http.Header) error {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("Authorize got a context without the dial's deadline")
		}
		n := calls.Add(1)
		h.Set("Authorization", "Bearer tok-"+strconv.Itoa(int(n)))
		return nil
	}}
	for range 2 {
		c, err := d.Dial(t.Context(), tg)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		c.Endpoint.Close()
	}
	mu.Lock()
	got := strings.Join(seen, ",")
	mu.Unlock()
	if got != "Bearer tok-1|kept,Bearer tok-2|kept" {
		t.Fatalf("the upstream saw %s, want each dial's own bearer beside the static header", got)
	}
	if len(static) != 1 || static.Get("Authorization") != "" {
		t.Fatalf("the target's headers changed: %v", static)
	}

	cause := errors.New("token endpoint refused")
	tg.Authorize = func(context.Context, http.Header) error { return cause }
	_, err := d.Dial(t.Context(), tg)
	var ue *Error
	if !errors.As(err, &ue) || ue.Status != 0 || !errors.Is(err, cause) {
		t.Fatalf("dial error %v, want an *Error wrapping the credential's", err)
	}
	if n := upgrades.Load(); n != 2 {
		t.Fatalf("the upstream saw %d upgrades, want 2: a dial without its credential must not connect", n)
	}
}
