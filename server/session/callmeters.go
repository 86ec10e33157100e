package session

import (
	"context"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"github.com/gobwas/ws"
	"github.com/prometheus/client_golang/prometheus"

	"rtgate/frames"
	"rtgate/poller"
	"rtgate/server/admission"
	"rtgate/server/routes"
	"rtgate/server/usage"
	"rtgate/upstream"
)

// callMeters are the gateway's own sidebands to the calls it forwarded,
// which meter each call's usage against the key that made it.
type callMeters struct {
	ctx     context.Context // the gateway's: a sideband's dial ends with it
	timeout time.Duration   // the dial timeout
	dialer  *upstream.Dialer
	log     *slog.Logger
	metrics *metrics
	records *records
	live    sync.Map // *callMeter → struct{}
	// sessions are the GPT-Live WebRTC sessions being metered, by id
	// (*liveMetering).
	sessions sync.Map
	// A GPT-Live WebRTC session's budget (server/api's createLive): the ledger, and how
	// a session over budget is ended (its call hung up upstream).
	budgets *budgets
	hangUp  func(d *routes.Deployment, id string)
	// hangUpCall ends a Realtime call (over its key's budget, or of a
	// revoked key).
	hangUpCall func(d *routes.Deployment, id string)
}

// start holds the gateway's own sideband to a call and books its usage
// against key (its metrics and its budget: over it, the call is hung up)
// until the call ends; adm, the call's admission, is given back then (or
// at once when the sideband cannot connect: the gateway cannot know when
// such a call ends).
func (cm *callMeters) start(key *routes.ClientKey, group string, d *routes.Deployment, callID string, adm *admission.Admission) {
	ctx, cancel := context.WithTimeout(cm.ctx, cm.timeout)
	defer cancel()
	conn, err := cm.dialer.Dial(ctx, dialTarget(d, url.Values{"call_id": {callID}}))
	if err != nil {
		adm.Release()
		cm.log.Warn("call not metered: its sideband did not connect", "call_id", callID, "deployment", d.Name, "err", err)
		cm.metrics.dialFailures.WithLabelValues(group).Inc()
		return
	}
	info := &sessionInfo{id: usage.NewSessionID(), key: key, group: group, deployment: d, start: time.Now()}
	cm.budgets.meter(info, func(string) { cm.hangUpCall(d, callID) })
	m := cm.watch(info, callID, conn, nil)
	m.adm = adm
	m.start(conn.Preface)
}

// watch makes conn, the gateway's own sideband to call (or Live session, lm
// not nil) callID, meter it for info until it ends.
func (cm *callMeters) watch(info *sessionInfo, callID string, conn *upstream.Upgraded, lm *liveMetering) *callMeter {
	m := &callMeter{meters: cm, info: info, callID: callID, h: poller.NewHandle(conn.Endpoint), lm: lm, gone: make(chan struct{})}
	m.sc.Init(frames.UpstreamSide, 0)
	m.sc.SetInspector(m)
	cm.live.Store(m, struct{}{})
	return m
}

// start starts reading the sideband, preface (what came with the upgrade's
// answer) first.
func (m *callMeter) start(preface []byte) {
	m.h.Start(m, func() {
		if len(preface) > 0 {
			m.scan(frames.NewByteSource(preface))
		}
	})
}

// callMeter is the poller.Owner of a call's metering sideband: it reads the
// call's events (nothing is forwarded) and records the usage when the
// sideband ends.
type callMeter struct {
	meters *callMeters
	info   *sessionInfo
	callID string
	h      *poller.Handle
	sc     frames.Scanner // under the Handle's read lock
	once   sync.Once
	lm     *liveMetering        // a GPT-Live session's; nil for a Realtime call
	gone   chan struct{}        // closed once it has ended
	adm    *admission.Admission // a Realtime call's admission, given back when it ends
}

// Wants implements frames.Inspector: the events that carry usage.
func (m *callMeter) Wants(prefix []byte) bool {
	if ls := m.info.live; ls != nil {
		return ls.meter.Wants(prefix)
	}
	return m.info.meter.Wants(prefix)
}

// Inspect implements frames.Inspector: a call can last an hour, so its usage
// reaches the metrics as each response ends, and the usage log when the call
// does.
func (m *callMeter) Inspect(p []byte) {
	if ls := m.info.live; ls != nil {
		ls.meter.Inspect(p) // GPT-Live: seconds, backend tokens (liveState.bookBackend)
		return
	}
	if add, ok := m.info.meter.Book(p); ok {
		m.meters.metrics.countTokens(m.info.group, m.info.key.Name, add)
	}
}

// UpstreamReadable implements poller.Owner.
func (m *callMeter) UpstreamReadable() {
	if err := m.h.Endpoint().Read(func(src frames.Source) error { m.scan(src); return nil }); err != nil {
		m.h.Endpoint().Drop()
	}
}

func (m *callMeter) scan(src frames.Source) {
	for src.Len() > 0 {
		cl, err := m.sc.Forward(src, nil)
		if err != nil {
			m.h.Endpoint().Drop()
			return
		}
		if cl != nil { // the call ended: answer the close, then the socket goes
			_ = m.h.Endpoint().Send(frames.AppendClose(nil, cl.Code, "", true))
			m.h.Endpoint().Close()
			return
		}
	}
}

// UpstreamGone implements poller.Owner: the call ended.
func (m *callMeter) UpstreamGone() {
	m.once.Do(func() {
		cm := m.meters
		cm.live.Delete(m)
		defer close(m.gone)
		if m.lm != nil {
			m.lm.ownGone(m) // its session's record, unless it made way for the app's sideband
			return
		}
		m.adm.Release()
		cm.log.Info("call metered", "call_id", m.callID, "session_id", m.info.id)
		rec := usage.Record{SessionID: m.info.id, KeyName: m.info.key.Name, ModelGroup: m.info.group,
			Deployment: m.info.currentDeployment().Name, StartedAt: m.info.start.UTC(), EndedAt: time.Now().UTC(),
			DurationMS: time.Since(m.info.start).Milliseconds(), Outcome: "call_ended", Usage: m.info.meter.Usage,
			Protocol: "realtime"}
		cm.records.record(m.info, &rec)
	})
}

// close ends every metering sideband (shutdown).
// gauges count, when scraped, the gateway's own metering sidebands open now
// and the GPT-Live WebRTC sessions being metered (each holds its key's
// admission until it ends).
func (cm *callMeters) gauges() []prometheus.Collector {
	count := func(m *sync.Map) func() float64 {
		return func() float64 {
			n := 0
			m.Range(func(any, any) bool { n++; return true })
			return float64(n)
		}
	}
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rtgate_metering_sidebands_open",
			Help: "The gateway's own sidebands metering the WebRTC calls and GPT-Live WebRTC sessions it forwarded, open now."},
			count(&cm.live)),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rtgate_live_webrtc_sessions_metered",
			Help: "GPT-Live WebRTC sessions the gateway meters now (each holds its key's admission until it ends)."},
			count(&cm.sessions)),
	}
}

func (cm *callMeters) close() {
	cm.live.Range(func(k, _ any) bool {
		m := k.(*callMeter)
		_ = m.h.Endpoint().Send(frames.AppendClose(nil, ws.StatusGoingAway, "gateway shutting down", true))
		m.h.Endpoint().Close()
		return true
	})
}
