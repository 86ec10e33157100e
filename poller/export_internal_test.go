package poller

import "testing"

// SetCloseHook makes f run in closeConn between its choice of netpoll's
// Close and the Close, until the test ends.
func SetCloseHook(t testing.TB, f func(*Endpoint)) {
	closeHook.Store(&f)
	t.Cleanup(func() { closeHook.Store(nil) })
}

// InlineHandlers reports whether Tune chose HandlersInline.
func InlineHandlers() bool { return inlineHandlers.Load() }
