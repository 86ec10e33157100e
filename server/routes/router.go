package routes

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// LiteLLM's routing strategies (router_settings.routing_strategy), as
// rtgate ranks a model group's healthy deployments (server/balance):
const (
	// LeastBusy: fewest live sessions and dials in flight, ties at
	// random. rtgate's default (LiteLLM's default is simple-shuffle).
	LeastBusy = "least-busy"
	// SimpleShuffle: at random, weighted by litellm_params.weight, else
	// rpm, else tpm, else evenly (LiteLLM's default).
	SimpleShuffle = "simple-shuffle"
	// LatencyBased: lowest recent time to first audio (the turns'
	// measure), with routing_strategy_args and a little exploration.
	LatencyBased = "latency-based-routing"
	// Accepted, and ranked as least-busy: a realtime session's tokens are
	// known only as it goes, and its cost per connect is the same on every
	// deployment of a group.
	UsageBased   = "usage-based-routing"
	UsageBasedV2 = "usage-based-routing-v2"
	CostBased    = "cost-based-routing"
)

// strategies are the routing_strategy values a file may give.
var strategies = []string{SimpleShuffle, LeastBusy, LatencyBased, UsageBased, UsageBasedV2, CostBased}

// Router is router_settings, as far as ranking deployments goes.
type Router struct {
	// Strategy is one of the strategies above; "" is LeastBusy.
	Strategy string
	// latency-based-routing's routing_strategy_args, LiteLLM's names and
	// defaults: TTL (ttl, seconds; 1 hour) is how long a sample counts;
	// MaxLatencyListSize (max_latency_list_size; 10) how many recent
	// samples per deployment are averaged; LowestLatencyBuffer
	// (lowest_latency_buffer; 0) makes every deployment within (1+buffer)
	// times the lowest average as good as the lowest (picked at random).
	TTL                 time.Duration
	MaxLatencyListSize  int
	LowestLatencyBuffer float64
}

// DefaultRouter is the routing with no router_settings.
func DefaultRouter() Router {
	return Router{Strategy: LeastBusy, TTL: time.Hour, MaxLatencyListSize: 10}
}

// routerSettings is the part of router_settings rtgate reads; LiteLLM's
// other router settings (redis_host, num_retries, fallbacks, ...) are
// accepted and named in the start-up notice.
type routerSettings struct {
	RoutingStrategy     yaml.Node `yaml:"routing_strategy"`
	RoutingStrategyArgs yaml.Node `yaml:"routing_strategy_args"`
}

type strategyArgs struct {
	TTL                 yaml.Node `yaml:"ttl"`
	LowestLatencyBuffer yaml.Node `yaml:"lowest_latency_buffer"`
	MaxLatencyListSize  yaml.Node `yaml:"max_latency_list_size"`
}

// router reads router_settings (n) into t.Router.
func (l *loader) router(n *yaml.Node, path string, t *Table) {
	t.Router = DefaultRouter()
	if !given(n) {
		return
	}
	var rs routerSettings
	if !l.decodeLenient(n, path, &rs) {
		return
	}
	if given(&rs.RoutingStrategy) {
		if s, ok := l.str(&rs.RoutingStrategy, join(path, "routing_strategy")); ok {
			if !slices.Contains(strategies, s) {
				l.fail(deref(&rs.RoutingStrategy), join(path, "routing_strategy"), "unknown routing strategy %q (known: %s)",
					s, strings.Join(strategies, ", "))
			}
			t.Router.Strategy = s
		}
	}
	if !given(&rs.RoutingStrategyArgs) {
		return
	}
	argsPath := join(path, "routing_strategy_args")
	var args strategyArgs
	if !l.decodeLenient(&rs.RoutingStrategyArgs, argsPath, &args) {
		return
	}
	ttl := t.Router.TTL.Seconds()
	before := len(l.errs)
	l.number(&args.TTL, join(argsPath, "ttl"), &ttl, "%q is not a number of seconds (more than 0)")
	if ttl <= 0 && len(l.errs) == before {
		l.fail(deref(&args.TTL), join(argsPath, "ttl"), "must be more than 0 seconds")
	}
	t.Router.TTL = time.Duration(ttl * float64(time.Second))
	l.number(&args.LowestLatencyBuffer, join(argsPath, "lowest_latency_buffer"), &t.Router.LowestLatencyBuffer,
		"%q is not a number (a fraction, at least 0)")
	before = len(l.errs)
	l.wholeNumber(&args.MaxLatencyListSize, join(argsPath, "max_latency_list_size"), &t.Router.MaxLatencyListSize,
		"%q is not a whole number of samples (at least 1)")
	if t.Router.MaxLatencyListSize < 1 && len(l.errs) == before {
		l.fail(deref(&args.MaxLatencyListSize), join(argsPath, "max_latency_list_size"), "must be at least 1")
	}
}

// decodeLenient decodes mapping n into dst (a struct of yaml.Nodes) and
// notes its other fields as accepted and ignored (LiteLLM's settings that
// mean nothing here), rather than refusing them.
func (l *loader) decodeLenient(n *yaml.Node, path string, dst any) bool {
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		l.fail(n, path, "must be a mapping (name: value lines), not %s", kindName(n))
		return false
	}
	if err := n.Decode(dst); err != nil {
		l.fail(n, path, "%v", err)
		return false
	}
	known := yamlNames(typeOf(dst))
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; !slices.Contains(known, k.Value) {
			l.noteIgnoredField(fmt.Sprintf("%s.%s", path, k.Value), k.Line)
		}
	}
	return true
}
