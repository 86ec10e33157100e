// Package testhooks carries tests' pauses into the windows of the
// gateway's races (the front door's, Door; a session's, Session), so that a race happens the same way every run, without a
// test-only part in the front door's API.
//
// The hooks travel in the context the front door is given
// (frontdoor.Deps.Context), the way net/http/httptrace carries a client's
// trace: a test puts a Slot into the context it builds the gateway with
// (With), the front door takes it out once, when it is made (From), and
// calls the hooks set in it at each hook point. Production code never puts
// one there, so the front door's slot is nil and a hook point costs a nil
// check. The package is internal to server: nothing outside the gateway can
// set them.
package testhooks

import (
	"context"
	"sync/atomic"

	"github.com/cloudwego/netpoll"
)

// Door are the front door's hook points. Any may be nil.
type Door struct {
	HandshakeTimer     func()                                          // the handshake timer fired, before it acts
	HandshakeTimerDone func()                                          // and after it acted
	TLSHandshaken      func(conn netpoll.Connection, waitReads func()) // the TLS handshake is done, before its goroutine reads the request; waitReads returns once no handler moves the connection's bytes
	TLSRequest         func(relaying bool)                             // the TLS goroutine handled the first request (relaying: it opened a session), before it lets the connection go
	LoopShutdown       func(open int64)                                // shutdown is about to call netpoll's, with open client connections left
	HeadRead           func(offLoop bool)                              // readHead is about to read the request, on netpoll's handler or not (offLoop)
	Request            func(conn netpoll.Connection)                   // at the start of each read handler of an accepted connection
	Serve              func()                                          // serve is about to hand the listener, adopted, to netpoll
	RefusalTaken       func(waiting int64)                             // a refused plain connection waits for its request, waiting in all
	RefusalGivenBack   func()                                          // and it no longer waits
}

// Session are the session path's hook points. Any may be nil.
type Session struct {
	SidebandLookup func() // a sideband's call is about to be looked up in Redis (off netpoll's handler)
}

// SessionSlot holds the session hooks a test has set (nil: none).
type SessionSlot = atomic.Pointer[Session]

// Slot holds the hooks a test has set, swapped whole at any time (nil:
// none).
type Slot = atomic.Pointer[Door]

type (
	slotKey        struct{}
	sessionSlotKey struct{}
)

// With is ctx carrying slot, for the gateway a test builds.
func With(ctx context.Context, slot *Slot) context.Context {
	return context.WithValue(ctx, slotKey{}, slot)
}

// WithSession is ctx carrying slot, for the gateway a test builds.
func WithSession(ctx context.Context, slot *SessionSlot) context.Context {
	return context.WithValue(ctx, sessionSlotKey{}, slot)
}

// SessionFrom is the session slot ctx carries; nil in production.
func SessionFrom(ctx context.Context) *SessionSlot {
	s, _ := ctx.Value(sessionSlotKey{}).(*SessionSlot)
	return s
}

// From is the slot ctx carries; nil in production.
func From(ctx context.Context) *Slot {
	s, _ := ctx.Value(slotKey{}).(*Slot)
	return s
}
