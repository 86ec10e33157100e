package closecheck

import (
	"go/ast"
	"go/types"
	"testing"

	"golang.org/x/tools/go/packages"
)

// netpollCloseSites lists, for every non-test file of the module, each use
// of the Close or Detach method of netpoll's Connection, or of a type that
// implements it (a call or a method value), by the function it is in:
// "pkg.Func" or "pkg.(*Type).Method", with a count.
func netpollCloseSites(t *testing.T) map[string]int {
	t.Helper()
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax |
		packages.NeedTypes | packages.NeedTypesInfo | packages.NeedImports | packages.NeedDeps, Dir: "../.."}
	pkgs, err := packages.Load(cfg, "./...")
	if err != nil {
		t.Fatalf("loading the module: %v", err)
	}
	var conn *types.Interface
	packages.Visit(pkgs, nil, func(p *packages.Package) {
		if p.PkgPath == "github.com/cloudwego/netpoll" {
			conn = p.Types.Scope().Lookup("Connection").Type().Underlying().(*types.Interface)
		}
	})
	if conn == nil {
		t.Fatal("netpoll.Connection not found among the module's dependencies")
	}
	sites := map[string]int{}
	for _, p := range pkgs {
		for _, e := range p.Errors {
			t.Fatalf("%s: %v", p.PkgPath, e)
		}
		for _, f := range p.Syntax {
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				name := p.PkgPath + "." + fd.Name.Name
				if fd.Recv != nil && len(fd.Recv.List) == 1 {
					name = p.PkgPath + ".(" + types.ExprString(fd.Recv.List[0].Type) + ")." + fd.Name.Name
				}
				ast.Inspect(fd.Body, func(n ast.Node) bool {
					se, ok := n.(*ast.SelectorExpr)
					if !ok || (se.Sel.Name != "Close" && se.Sel.Name != "Detach") {
						return true
					}
					sel, ok := p.TypesInfo.Selections[se]
					if !ok || (sel.Kind() != types.MethodVal && sel.Kind() != types.MethodExpr) {
						return true
					}
					recv := sel.Recv()
					if types.Implements(recv, conn) || types.Implements(types.NewPointer(recv), conn) {
						sites[name]++
					}
					return true
				})
			}
		}
	}
	return sites
}

// Reasons shared by several entries.
const (
	onPool = "runs only while the connection is not relaying: its handler tasks run on netpoll's pool " +
		"(clientConn.InlineEndpoint is nil), where a Close landing in a task is carried out by that task's goroutine, not a poller"
	beforeHandler = "a dialed socket whose read handler is not installed and never will be once this Close is chosen"
)

// allowed is every function that may call netpoll's Close or Detach, how
// many times, and why that keeps the inline invariant.
var allowed = map[string]struct {
	n      int
	reason string
}{
	"rtgate/poller.(*Endpoint).closeConn": {1, "under the pool runner; or " + beforeHandler +
		" (Handle.Start checks closedByUs under the endpoint's lock, which closeConn's callers set before choosing); or shutdown failed"},
	"rtgate/poller.(*Handle).Start": {1, "the socket is inactive: the poller saw its hang-up while it had no handler, " +
		"so it detached it and runs no task for it, and Start never runs on a poller"},
	"rtgate/server/frontdoor.(*Door).answerRefused":      {1, "a connection refused at accept: its context has no Conn, so it never runs inline"},
	"rtgate/server/frontdoor.(*Door).onRequest":          {1, "a connection refused at accept (no Conn): never inline"},
	"rtgate/server/frontdoor.(*Door).refuseAtAccept":     {2, "in OnPrepare, before netpoll registers the socket with a poller"},
	"rtgate/server/frontdoor.(*Conn).bufferWhilePending": {1, "a Redis admission is out: " + onPool + " (Conn.StartRelay defers inline until the admission's goroutine lets go)"},
	"rtgate/server/frontdoor.(*Conn).collectTLS":         {3, "the TLS handshake phase: " + onPool},
	"rtgate/server/frontdoor.(*Conn).readBody":           {1, "an API request's body: " + onPool},
	"rtgate/server/frontdoor.(*Conn).readHead":           {1, "the HTTP phase, in a handler or in the TLS goroutine: " + onPool},
	"rtgate/server/frontdoor.(*Conn).refuseNotTLS":       {1, "the TLS handshake phase: " + onPool},
	"rtgate/server/frontdoor.(*Conn).tlsHandshake":       {1, "the TLS handshake failed: " + onPool},
	"rtgate/upstream.(*Dialer).Dial":                     {1, beforeHandler + ": the handshake's own goroutine, after the handshake returned (the deadline only shuts the socket down)"},
}

// TestNetpollClosesAreAllowed fails on a call to netpoll's Close or Detach
// that is not in allowed, and on an entry that no longer matches the code
// (so the list stays short and true).
func TestNetpollClosesAreAllowed(t *testing.T) {
	sites := netpollCloseSites(t)
	for fn, n := range sites {
		a, ok := allowed[fn]
		switch {
		case !ok:
			t.Errorf("%s calls netpoll's Close/Detach %d times and is not in the allowlist: under inline handlers "+
				"a Close that lands in the socket's handler task spins its poller (package poller's doc); end the socket "+
				"with a hang-up (Endpoint.Close/Drop, server's hangUp) or add it with the reason it is safe", fn, n)
		case n != a.n:
			t.Errorf("%s calls netpoll's Close/Detach %d times, the allowlist says %d (%s): check the new one", fn, n, a.n, a.reason)
		}
	}
	for fn := range allowed {
		if _, ok := sites[fn]; !ok {
			t.Errorf("allowlist entry %s no longer calls netpoll's Close/Detach: remove it", fn)
		}
	}
	if len(sites) == 0 {
		t.Fatal("found no call at all: the search is broken")
	}
}
