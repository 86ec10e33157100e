// Package closecheck holds one test: every place in the module that calls
// netpoll's Connection.Close or Detach (on netpoll.Connection, or on a type
// that implements it) against an allowlist with the reason each is safe
// under the inline invariant (package poller's doc). A new call fails the test
// until someone has checked it and added it with its reason.
//
// It is its own package so that make test runs it once, not once per
// netpoll runner with the poller's and server's suites.
package closecheck
