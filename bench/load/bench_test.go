package load

import (
	"context"
	"testing"
	"time"

	"rtgate/mockai"
)

// BenchmarkCall measures one complete call against an in-process mockai
// (25 deltas of 4800 bytes, no delays); CPU profiles of it show what the
// client costs per call.
func BenchmarkCall(b *testing.B) {
	srv, err := mockai.Start(mockai.Config{AudioDeltas: 25}, "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	c, err := NewClient(Config{URL: srv.BaseURL() + "/realtime?model=gpt-realtime", Timeout: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if s := c.Call(context.Background(), time.Now()); !s.OK() {
			b.Fatalf("call failed: %s %s", s.Failure, s.Detail)
		}
	}
}
