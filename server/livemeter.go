package server

// Metering GPT-Live's WebRTC sessions. Their events travel between the
// browser and OpenAI, outside the gateway, so the gateway attaches its own
// sideband (…/{id}/attach?graceful_close=true) to each session it created
// (or whose SIP call it accepted, or forked) and reads the usage there, as
// it meters Realtime WebRTC calls (calls.go's callMeter): cumulative
// usage.seconds in session.usage.updated and session.closed, backend tokens
// in response.event. The sideband also carries the session's reflected
// audio both ways (about 128 KB/s of base64): the scanner only looks at
// each frame's first bytes for its type, and skips the rest.
//
// A WebRTC session is billed at least 15 s (OpenAI bills 15 s at creation,
// credited against the duration). If the gateway's sideband cannot attach
// (the upstream refuses a second sideband, or cannot be reached), the
// session is billed that floor at once and its record marked unmetered:
// the app's own sideband through the gateway is relayed but not metered
// (not implemented: see the README).

import (
	"context"
	"net/url"
	"time"

	"rtgate/server/routes"
	"rtgate/server/usage"
)

// liveWebRTCFloor is the least a WebRTC session is billed, in seconds.
const liveWebRTCFloor = 15.0

// startLive holds the gateway's own sideband to Live session id on d and
// meters it against key until it ends.
func (cm *callMeters) startLive(key *routes.ClientKey, d *routes.Deployment, id string) {
	info := &sessionInfo{id: usage.NewSessionID(), key: key, group: d.Group, deployment: d, start: time.Now()}
	ls := &liveState{info: info}
	ls.meter.OnTokens = func(model string, add usage.Usage) { ls.backendUSD += ls.backendPrices(model).Cost(add) }
	info.live = ls
	ctx, cancel := context.WithTimeout(cm.ctx, cm.timeout)
	defer cancel()
	conn, err := cm.dialer.Dial(ctx, d.LiveTarget("/"+id+"/attach", url.Values{"graceful_close": {"true"}}))
	if err != nil {
		cm.log.Warn("Live session not metered: the gateway's sideband did not attach; billing the 15 s floor, unmetered",
			"session", id, "deployment", d.Name, "err", err)
		cm.metrics.dialFailures.WithLabelValues(d.Group).Inc()
		rec := usage.Record{SessionID: info.id, KeyName: key.Name, ModelGroup: d.Group, Deployment: d.Name,
			StartedAt: info.start.UTC(), EndedAt: time.Now().UTC(), Outcome: "unmetered", Unmetered: true}
		ls.fillWebRTC(&rec)
		cm.records.record(info, &rec)
		return
	}
	cm.watch(info, id, conn)
}

// fillWebRTC completes a WebRTC session's record: as a WebSocket session's
// (fill), with the 15 s floor; an unmetered one is not unconfirmed, it is
// marked as what it is.
func (ls *liveState) fillWebRTC(rec *usage.Record) {
	ls.meter.Seconds = max(ls.meter.Seconds, liveWebRTCFloor)
	ls.fill(rec)
	rec.Unconfirmed = rec.Unconfirmed && !rec.Unmetered
}
