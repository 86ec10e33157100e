package upstream

import (
	"cmp"
	"slices"
	"time"
)

// KeyStatus is one pooled key as the pool holds it now, for status pages.
// It names the key the way the metrics do (model and short hash) and the
// upstream by host only: nothing in it is secret.
type KeyStatus struct {
	Model    string
	ID       string // the first 8 hex digits of the key's digest, as in the metrics' key label
	Upstream string // host[:port] of the upstream URL
	Warm     int    // ready sockets
	Target   int    // what the pool aims to hold
	Dialing  int    // warm-up dials in flight
	Backoff  time.Duration
}

// Status lists the pooled keys, by model then id. It takes the pool's lock
// once; meant for a sampler that runs about once a second.
func (p *Pool) Status() []KeyStatus {
	p.mu.Lock()
	out := make([]KeyStatus, 0, len(p.keys))
	for _, kp := range p.keys {
		host := ""
		if kp.target.URL != nil {
			host = kp.target.URL.Host
		}
		out = append(out, KeyStatus{Model: kp.model, ID: kp.id, Upstream: host, Warm: len(kp.warm),
			Target: kp.size, Dialing: kp.warming, Backoff: kp.backoff})
	}
	p.mu.Unlock()
	slices.SortFunc(out, func(a, b KeyStatus) int { return cmp.Or(cmp.Compare(a.Model, b.Model), cmp.Compare(a.ID, b.ID)) })
	return out
}
