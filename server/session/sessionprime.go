package session

// Session start for a client secret: the session starts configured as the
// secret said, and the client sees what OpenAI would show it.
//
// Before the session gets its upstream socket, the gateway itself owns that
// socket (a poller.Owner of its own, the primer): it sends the secret's
// session config as the first client event (session.update), consumes the
// upstream's session.created and its session.updated reply, and builds from
// that reply the client's session.created, which therefore already carries
// the configured session. Only then is the socket handed to the session
// (Session.AdoptWarm), with that frame first; client frames sent meanwhile
// were queued by the session and follow the gateway's session.update. A warm
// pool socket serves this as well as a fresh dial, so secrets keep the pool's
// fast connect. The reactor knows nothing of it: this is the sessions'
// protocol knowledge, built on the poller's Owner and hand-over API.
//
// An error event instead of session.updated (the upstream rejected the
// config) is handed to the client as it came, then the session is closed with
// 4000 and "<error.type>.<error.code>", as OpenAI closes on its own errors.
//
//	state          event                      next
//	awaitCreated   session.created            awaitUpdated
//	awaitCreated   session.updated            done   (reply before created: no id to reuse)
//	awaitUpdated   session.updated            done
//	await*         error                      rejected
//	await*         any other event            same   (consumed: the client did not cause it)
//	await*         close, gone, bad frame,    failed
//	               too much before the reply
//	done/rejected  more bytes                 same   (kept for the client, after the reply)

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/gobwas/ws"

	"rtgate/frames"
	"rtgate/poller"
	"rtgate/server/apps"
	"rtgate/server/balance"
	"rtgate/server/protocol"
	"rtgate/server/routes"
)

type primeState int

const (
	primeAwaitCreated primeState = iota
	primeAwaitUpdated
	primeDone
	primeRejected
	primeFailed
)

// primeEvent is what the primer saw.
type primeEvent int

const (
	evCreated primeEvent = iota
	evUpdated
	evError
	evOther
	evBroken // close frame, socket gone, bad frame, too much
)

// primeTable is the state table above; a missing entry keeps the state.
var primeTable = map[primeState]map[primeEvent]primeState{
	primeAwaitCreated: {evCreated: primeAwaitUpdated, evUpdated: primeDone, evError: primeRejected, evBroken: primeFailed},
	primeAwaitUpdated: {evUpdated: primeDone, evError: primeRejected, evBroken: primeFailed},
}

// maxPrimeBytes bounds what the primer holds before the reply.
const maxPrimeBytes = 256 << 10

// primer owns an upstream socket while the session config is applied.
type primer struct {
	h *poller.Handle

	mu        sync.Mutex
	state     primeState
	buf       []byte // unparsed upstream bytes
	createdID string // the upstream session.created's event_id
	out       []byte // for the client: the built session.created (or the error), then what followed
	errReason string // close reason after a rejection
	why       string // what went wrong, when failed
	settled   chan struct{}
	// acks, for a resume's replay (>= 0), counts the replies still to
	// come: every one is consumed, an error included (rejected items are
	// counted in replayErrors and lost), and the socket is ready once the
	// last came. -1 for a secret's session.
	acks         int
	replayErrors int
	created      []byte // the upstream's session.created payload, for a replay (its cap)
	warm         bool   // the socket came from the warm pool
}

func newPrimer(state primeState, acks int) *primer {
	return &primer{state: state, acks: acks, settled: make(chan struct{})}
}

// UpstreamReadable implements poller.Owner; it runs under the Handle's read
// lock.
func (p *primer) UpstreamReadable() {
	var got []byte
	_ = p.h.Endpoint().Read(func(src frames.Source) error {
		b, err := src.Next(src.Len())
		got = append(got, b...)
		return err
	})
	p.feed(got)
}

// UpstreamGone implements poller.Owner.
func (p *primer) UpstreamGone() {
	p.mu.Lock()
	p.step(evBroken, "the upstream closed before answering the session config")
	p.mu.Unlock()
}

// feed takes upstream bytes.
func (p *primer) feed(b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == primeDone || p.state == primeRejected {
		p.out = append(p.out, b...)
		return
	}
	if p.state == primeFailed {
		return
	}
	p.buf = append(p.buf, b...)
	for p.state == primeAwaitCreated || p.state == primeAwaitUpdated {
		h, hlen, ok, err := frames.ParseHeader(p.buf)
		if err != nil || (ok && (h.Masked || !h.Fin)) {
			p.step(evBroken, "the upstream sent an unexpected frame before answering the session config")
			return
		}
		if !ok || int64(len(p.buf)-hlen) < h.Length {
			if len(p.buf) > maxPrimeBytes {
				p.step(evBroken, "the upstream sent too much before answering the session config")
			}
			return
		}
		end := hlen + int(h.Length)
		frame, payload := p.buf[:end], p.buf[hlen:end]
		rest := p.buf[end:]
		switch h.OpCode {
		case ws.OpText, ws.OpBinary: // Gemini sends its JSON in binary frames
			p.event(frame, payload, rest)
		case ws.OpClose:
			why := "the upstream closed before answering the session config"
			if code, reason := ws.ParseCloseFrameData(payload); code != 0 {
				why += " (" + strconv.Itoa(int(code)) // Gemini says why only here: a handle it refused, 1008
				if reason != "" {
					why += ": " + reason
				}
				why += ")"
			}
			p.step(evBroken, why)
			return
		}
		p.buf = append([]byte(nil), rest...)
	}
	if p.state == primeDone || p.state == primeRejected {
		p.out = append(p.out, p.buf...)
		p.buf = nil
	}
}

// event acts on one whole upstream text frame.
func (p *primer) event(frame, payload, rest []byte) {
	var ev struct {
		Type    string          `json:"type"`
		EventID string          `json:"event_id"`
		Session json.RawMessage `json:"session"`
		Error   struct {
			Type string `json:"type"`
			Code string `json:"code"`
		} `json:"error"`
		SetupComplete json.RawMessage `json:"setupComplete"` // Gemini's answer to a resume's setup
	}
	if json.Unmarshal(payload, &ev) != nil {
		p.step(evBroken, "the upstream sent an event that is not JSON")
		return
	}
	if p.acks >= 0 {
		if ev.Type == "session.created" || ev.Type == "session.started" { // GPT-Live's
			p.created = append([]byte(nil), payload...)
		}
		if ev.Type == "" && ev.SetupComplete != nil {
			ev.Type = "setupComplete"
		}
		p.replayEvent(ev.Type)
		return
	}
	switch ev.Type {
	case "session.created":
		p.createdID = ev.EventID
		p.step(evCreated, "")
	case "session.updated":
		id := p.createdID
		if id == "" {
			id = protocol.NewEventID()
		}
		built, _ := json.Marshal(struct {
			Type    string          `json:"type"`
			EventID string          `json:"event_id"`
			Session json.RawMessage `json:"session"`
		}{"session.created", id, ev.Session})
		p.out = frames.AppendFrame(p.out[:0], ws.OpText, built, false)
		p.step(evUpdated, "")
	case "error":
		p.out = append(p.out[:0], frame...)
		p.errReason = ev.Error.Type + "." + ev.Error.Code
		p.step(evError, "")
	default:
		p.step(evOther, "")
	}
}

// replayEvent counts a resume's replies: session.created first, then one
// reply per frame replayed (session.updated, conversation.item.done or the
// beta conversation.item.created, or an error). A GPT-Live resume sends one
// session.start (acks 0), answered by session.started; a Gemini resume its
// setup with the resumption handle (acks 0), answered by setupComplete.
func (p *primer) replayEvent(typ string) {
	switch typ {
	case "session.created", "session.started", "conversation.created", // xAI may open with conversation.created
		"setupComplete": // Gemini says nothing before it (acks 0: the resume is ready)
		p.step(evCreated, "")
	case "error":
		p.replayErrors++
		p.acks--
	case "session.updated", "conversation.item.done", "conversation.item.created":
		p.acks--
	default:
		return
	}
	p.replayDone()
}

// replayDone settles a replay once every reply came. Callers hold mu.
func (p *primer) replayDone() {
	if p.acks == 0 && p.state == primeAwaitUpdated {
		p.step(evUpdated, "")
	}
}

// step applies the state table; callers hold mu.
func (p *primer) step(e primeEvent, why string) {
	next, ok := primeTable[p.state][e]
	if !ok || next == p.state {
		return
	}
	p.state = next
	if next == primeFailed {
		p.why = why
	}
	if next == primeDone || next == primeRejected || next == primeFailed {
		close(p.settled)
	}
}

// primeSession gives a secret's session its configured upstream: a warm
// socket when the pool has one, else a fresh dial; it runs in its own
// goroutine.
func (m *Manager) primeSession(sess *poller.Session, info *sessionInfo, cands []*routes.Deployment, q url.Values, h http.Header) {
	ctx, cancel := info.attemptContext(m.ctx, m.cfg.DialTimeout)
	defer cancel()
	if err := m.secrets.LoadConfig(ctx, info.grant); err != nil {
		m.log.Warn("client secret's session config unavailable", "key", info.key.Name, "secret_id", info.grant.Claims.ID, "err", err)
		sess.DialFailed(info.proto().Refusal("session_config_unavailable", apps.ErrSecretConfig.Error(), 0))
		return
	}
	info.keepBase(info.grant.Config)
	prime := info.proto().Prime(info.grant.Config)
	p, d := m.primed(ctx, sess, info, cands, q, h, func(*routes.Deployment) []byte { return prime }, -1)
	if p == nil {
		return
	}
	state, why, reason := p.await(ctx)
	if state == primeFailed {
		p.h.Endpoint().Drop()
		if info.left() {
			sess.Cancel()
			return
		}
		m.log.Warn("session config not applied", "key", info.key.Name, "deployment", d.Name, "why", why)
		sess.DialFailed(info.proto().Refusal("upstream_unavailable", why, 0))
		return
	}
	if !adoptPrimed(m.balancer, sess, info, p, d, sess.AdoptWarm) {
		sess.DialFailed(info.proto().Refusal("upstream_unavailable", "the upstream closed after the session config", 0))
		return
	}
	if state == primeRejected {
		m.log.Info("upstream rejected the client secret's session config", "key", info.key.Name,
			"secret_id", info.grant.Claims.ID, "error", reason)
		sess.Terminate(4000, reason, nil)
	}
}

// primed gets an upstream socket owned by a primer that has sent
// it send(d) (client frames for its deployment d): a warm socket of cands[0]
// when the pool has one (GPT-Live's pool for a Live session), else a fresh
// dial through the hedged race. acks is -1 to build the
// client's session.created from the session.updated reply (a secret's
// session), else the number of replies to send (a resume's replay: every
// reply is consumed). On a nil primer the session was already told
// (dialFor).
func (m *Manager) primed(ctx context.Context, sess *poller.Session, info *sessionInfo, cands []*routes.Deployment,
	q url.Values, h http.Header, send func(*routes.Deployment) []byte, acks int) (*primer, *routes.Deployment) {
	if info.live != nil {
		if p := m.livePrimed(cands[0], info, h, send(cands[0]), acks); p != nil {
			return p, cands[0]
		}
	} else if m.pool != nil && info.kind.traits().pooled && !cands[0].Translated() { // the pool warms conversations' sockets only, never Gemini's
		d := cands[0]
		p := newPrimer(primeAwaitUpdated, acks)
		if hd, held := m.pool.Take(target(d, q, h), info.group, p); hd != nil {
			// Taken with its read lock held: send, note the
			// session.created it holds, then let reads flow to the primer.
			p.h = hd
			if err := hd.Endpoint().Send(send(d)); err == nil {
				p.feedCreated(held)
				p.warm = true
				if acks < 0 {
					info.poolHit = true // a resume's socket is not the connect's
				}
				hd.FinishHandOver()
				m.balancer.Succeeded(d)
				return p, d
			}
			hd.FinishHandOver()
			hd.Endpoint().Drop()
		}
	}
	conn, d := m.dialFor(ctx, sess, info, cands, q, h)
	if conn == nil {
		return nil, nil
	}
	p := newPrimer(primeAwaitCreated, acks)
	p.h = poller.NewHandle(conn.Endpoint)
	if err := conn.Endpoint.Send(send(d)); err != nil {
		conn.Endpoint.Drop()
		dialFailed(info.proto(), sess, 0)
		return nil, nil
	}
	p.h.Start(p, func() { p.feed(conn.Preface) })
	return p, d
}

// await waits until the primer settled or ctx ends, and returns how it
// ended.
func (p *primer) await(ctx context.Context) (state primeState, why, reason string) {
	select {
	case <-p.settled:
	case <-ctx.Done():
		p.mu.Lock()
		p.step(evBroken, "no answer to the session config in time")
		p.mu.Unlock()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state, p.why, p.errReason
}

// adoptPrimed hands a primer's socket to the session with adopt
// (AdoptWarm, AdoptResumed); false, the socket dropped, if it went away.
func adoptPrimed(b *balance.Balancer, sess *poller.Session, info *sessionInfo, p *primer, d *routes.Deployment,
	adopt func(func(poller.Owner) (*poller.Handle, []byte)) bool) bool {
	adopted := adopt(func(o poller.Owner) (*poller.Handle, []byte) {
		if !handOver(p.h, o) {
			return nil, nil
		}
		info.attached(b, sess, d) // before the first frame reaches the client
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.h, p.out
	})
	if !adopted {
		p.h.Endpoint().Drop()
	}
	return adopted
}

// feedCreated takes the warm socket's held session.created.
func (p *primer) feedCreated(held []byte) {
	h, hlen, ok, err := frames.ParseHeader(held)
	if err == nil && ok && len(held) >= hlen+int(h.Length) {
		var ev struct {
			EventID string `json:"event_id"`
		}
		if json.Unmarshal(held[hlen:hlen+int(h.Length)], &ev) == nil {
			p.createdID = ev.EventID
		}
		if p.acks >= 0 {
			p.created = append([]byte(nil), held[hlen:hlen+int(h.Length)]...)
		}
		held = held[hlen+int(h.Length):]
	}
	if p.acks >= 0 {
		p.mu.Lock()
		p.replayDone() // nothing replayed: ready already
		p.mu.Unlock()
	}
	if len(held) > 0 {
		p.feed(held)
	}
}

// handOver makes o the owner of h's socket; a read of the primer may hold
// the lock for a moment, so it retries briefly (this runs in the session's
// own start goroutine, never on a poller).
func handOver(h *poller.Handle, o poller.Owner) bool {
	for i := 0; i < 1000; i++ {
		if h.TryHandOver(o) {
			return true
		}
		if !h.Endpoint().Conn().IsActive() {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return false
}
