package poller

// SetCloseHook makes f run in e's closeConn between its choice of
// netpoll's Close and the Close. Call it before e is shared.
func (e *Endpoint) SetCloseHook(f func()) { e.closeHook = f }

// InlineHandlers reports whether Tune chose HandlersInline.
func InlineHandlers() bool { return inlineHandlers.Load() }
