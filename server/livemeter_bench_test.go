package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"syscall"
	"testing"
	"time"
)

// cpuNow is this process's user+system CPU time.
func cpuNow(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkLiveMeterSideband measures what the gateway's own metering
// sideband to a GPT-Live WebRTC session costs: 20 sessions created through
// the gateway (mockai as a process over wss://, reflecting 100 ms of PCM16
// each way every 100 ms: ~128 KB/s of base64 per sideband), held 5 s; the
// gateway's CPU over the hold (this process: the load is only the creates)
// per session-second, against the same hold with no session.
func BenchmarkLiveMeterSideband(b *testing.B) {
	const sessions, hold = 20, 5 * time.Second
	mock, roots := tlsMockaiProcess(b)
	path := liveAppsConfig(b, mock.baseURL)
	g := startGateway(b, nil, func(c *Settings) { c.RoutesFile, c.UpstreamRoots = path, roots })
	idleStart := cpuNow(b)
	time.Sleep(hold)
	idle := cpuNow(b) - idleStart
	b.ResetTimer()
	var busy time.Duration
	for range b.N {
		var ids []string
		for range sessions {
			body, _ := json.Marshal(map[string]any{"session": map[string]any{"model": "gpt-live"},
				"transport": map[string]any{"type": "webrtc", "sdp": sdpOffer}})
			req, _ := http.NewRequest(http.MethodPost, "http://"+g.addr+"/v1/live/sessions", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+testMasterKey)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			var out struct{ Session struct{ ID string } }
			_ = json.NewDecoder(resp.Body).Decode(&out)
			resp.Body.Close()
			ids = append(ids, out.Session.ID)
		}
		deadline := time.Now().Add(10 * time.Second)
		for meteringSidebands(b, g) < sessions && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if meteringSidebands(b, g) < sessions {
			b.Fatalf("%d metering sidebands attached, want %d", meteringSidebands(b, g), sessions)
		}
		start := cpuNow(b)
		time.Sleep(hold)
		busy += cpuNow(b) - start
		for _, id := range ids {
			req, _ := http.NewRequest(http.MethodPost, "http://"+g.addr+"/v1/live/sessions/"+id+"/hangup", nil)
			req.Header.Set("Authorization", "Bearer "+testMasterKey)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}
		for meteringSidebands(b, g) > 0 && time.Now().Before(deadline.Add(10*time.Second)) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	sessionSeconds := float64(b.N) * sessions * hold.Seconds()
	b.ReportMetric(float64((busy-time.Duration(b.N)*idle).Microseconds())/1000/sessionSeconds, "cpu-ms/session-s")
	b.ReportMetric(float64(idle.Microseconds())/1000/hold.Seconds(), "idle-cpu-ms/s")
}
