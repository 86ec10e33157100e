package soak

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
)

const sampleMetrics = `# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 42
go_memstats_heap_inuse_bytes 3.3554432e+07
go_memstats_heap_alloc_bytes 2.097152e+07
process_open_fds 17
process_resident_memory_bytes 5.24288e+07
rtgate_sessions_open 3
rtgate_sessions_total{outcome="client_closed"} 10
rtgate_sessions_total{outcome="upstream_lost"} 2
rtgate_sessions_total{outcome="odd, \"quoted\" } outcome"} 5
rtgate_pool_warm_sockets{key="58f66862",model="gpt-realtime"} 2
rtgate_pool_warm_sockets{key="85cd30ff",model="gpt-realtime"} 4
rtgate_pool_hits_total{key="85cd30ff",model="gpt-realtime"} 7
rtgate_pool_misses_total{key="85cd30ff",model="gpt-realtime"} 1
rtgate_pool_misses_total{key="58f66862",model="gpt-realtime"} 2
rtgate_sessions_open_created 1.7e9
`

func TestParseMetrics(t *testing.T) {
	rd, err := parseMetrics(strings.NewReader(sampleMetrics))
	if err != nil {
		t.Fatal(err)
	}
	want := Reading{RSS: 50 << 20, FDs: 17, Goroutines: 42, HeapInuse: 32 << 20, HeapAlloc: 20 << 20, SessionsOpen: 3, WarmSockets: 6,
		PoolHits: 7, PoolMisses: 3}
	want.Outcomes = rd.Outcomes // compared below
	if !reflect.DeepEqual(rd, want) {
		t.Errorf("reading %+v, want %+v", rd, want)
	}
	// A label value with a comma, quotes and a brace is read whole.
	if rd.Outcomes["client_closed"] != 10 || rd.Outcomes["upstream_lost"] != 2 || rd.Outcomes[`odd, "quoted" } outcome`] != 5 ||
		len(rd.Outcomes) != 3 {
		t.Errorf("outcomes %v", rd.Outcomes)
	}

	for _, tt := range []struct{ name, text, want string }{
		{"missing", "go_goroutines 1\nprocess_open_fds 2\n", "process_resident_memory_bytes, rtgate_sessions_open missing"},
		{"bad value", strings.Replace(sampleMetrics, "process_open_fds 17", "process_open_fds many", 1), `line 6: expected float as value, got "`},
		{"no value", strings.Replace(sampleMetrics, "process_open_fds 17", "process_open_fds", 1), `line 6: expected float as value, got "`},
		{"bad labels", strings.Replace(sampleMetrics, `{outcome="client_closed"}`, `{outcome="client_closed"`, 1), "metrics: text format parsing error"},
	} {
		if _, err := parseMetrics(strings.NewReader(tt.text)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want %q", tt.name, err, tt.want)
		}
	}
}

func TestAdmin(t *testing.T) {
	var gcs int
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(sampleMetrics)) })
	mux.HandleFunc("/debug/pprof/heap", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("gc") == "1" {
			gcs++
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	adm := newAdmin(strings.TrimPrefix(srv.URL, "http://"))
	ctx := context.Background()
	if rd, err := adm.read(ctx); err != nil || rd.Goroutines != 42 {
		t.Errorf("read: %+v, %v", rd, err)
	}
	if err := adm.collectGarbage(ctx); err != nil || gcs != 1 {
		t.Errorf("collectGarbage: %v, %d collections asked for", err, gcs)
	}
	if _, err := adm.get(ctx, "/nowhere"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("missing page: %v, want a 404 error", err)
	}
	// A closed port is an error, not a zero reading.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	if _, err := newAdmin(addr).read(ctx); err == nil {
		t.Error("read from a closed port: no error")
	}
}
