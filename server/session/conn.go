package session

import (
	"rtgate/poller"
	"rtgate/server/frontdoor"
)

// refusal is every refusal the gateway answers over HTTP; the front door
// renders it.
type refusal = frontdoor.Refusal

// clientConn is an accepted connection as the sessions keep it: the front
// door's Conn and, in the same allocation, the state a plain session
// keeps for its whole life, rather than four allocations of their own (each
// rounds up to a size class and is one more object for the collector). Only
// pointers to them are handed out (sess, the registry's *sessionInfo), and
// a clientConn is never copied. What outlives the client socket (a session
// still closing its upstream) keeps the whole struct alive, which costs
// nothing more: the connection's netpoll context holds it anyway.
type clientConn struct {
	frontdoor.Conn
	session poller.Session // sess, once upgraded
	info    sessionInfo
	watch   setupWatch
	cwatch  clientWatch // continuity's inspector on the client's frames (watchClient)
}

// NewConn is the front door's Handler.NewConn: the connection's one
// allocation.
func (m *Manager) NewConn() *frontdoor.Conn {
	c := &clientConn{}
	c.SetOwner(c)
	return &c.Conn
}

// ClientLeft is the front door's Handler.ClientLeft: the client socket
// closed.
func (m *Manager) ClientLeft(sess *poller.Session) { m.clientLeft(sess) }
