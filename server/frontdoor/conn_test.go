package frontdoor

import (
	"context"
	"testing"

	"rtgate/poller"
)

// A Conn is the netpoll context of its connection (no
// context.WithValue per connection): it must answer the lookups the server's
// handlers and netpoll's inline runner make, and nothing else.
func TestConnIsItsOwnContext(t *testing.T) {
	c := &Conn{}
	var ctx context.Context = c
	for _, tc := range []struct {
		name string
		key  any
		want any
	}{
		{"the server's key", ctxKey{}, c},
		{"the inline runner's key", poller.InlineKey{}, c},
		{"the refusal mark", refusedKey{}, nil},
		{"anything else", "ctxKey", nil},
	} {
		if got := ctx.Value(tc.key); got != tc.want {
			t.Errorf("%s: Value = %v, want %v", tc.name, got, tc.want)
		}
	}
	if _, ok := ctx.Value(poller.InlineKey{}).(poller.Inliner); !ok {
		t.Error("the inline runner finds no Inliner")
	}
	if ctx.Done() != nil || ctx.Err() != nil {
		t.Error("a connection's context is never cancelled")
	}
	if _, has := ctx.Deadline(); has {
		t.Error("a connection's context has no deadline")
	}
}
