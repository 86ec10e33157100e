package mockai

import (
	"fmt"
	"net/url"
	"strconv"
)

// Query parameters a client uses to pick its own fault when the server runs with
// Config.FaultsFromQuery. A relay that passes the query through (the gateway does)
// lets a soak test choose, per connection, which sessions fail and how, and so know
// which failures it caused.
const (
	paramFault      = "fault"
	paramFaultAfter = "fault_after"
)

// maxFaultAfter bounds fault_after; it only needs to reach past a few responses.
const maxFaultAfter = 1 << 20

// queryFault reads the fault a connection asked for in its query. It returns the
// configuration for that connection (cfg itself when no fault was asked for, else a
// copy with the fault set), or the HTTP status the upgrade must be answered with
// instead (fault=<status>), or an error naming a bad parameter.
//
//	fault=drop|close|malformed  the matching *AfterFrames knob, with N = fault_after
//	                            (default 1); the other frame knobs are turned off
//	fault=stall                 StopReading (Live: before session.start is read)
//	fault=no_closed             Live: session.close gets close 1000 without session.closed
//	fault=<400-599>             that HTTP status instead of the upgrade
func (cfg *Config) queryFault(q url.Values) (*Config, int, error) {
	kind := q.Get(paramFault)
	rawAfter := q.Get(paramFaultAfter)
	if kind == "" {
		if rawAfter != "" {
			return nil, 0, fmt.Errorf("%s=%q needs %s", paramFaultAfter, rawAfter, paramFault)
		}
		return cfg, 0, nil
	}
	after := 1
	if rawAfter != "" {
		n, err := strconv.Atoi(rawAfter)
		if err != nil || n < 1 || n > maxFaultAfter {
			return nil, 0, fmt.Errorf("%s=%q: want a number of frames from 1 to %d", paramFaultAfter, rawAfter, maxFaultAfter)
		}
		after = n
	}
	c := *cfg
	c.CloseAfterFrames, c.DropAfterFrames, c.MalformedAfterFrames = 0, 0, 0
	switch kind {
	case "drop":
		c.DropAfterFrames = after
	case "close":
		c.CloseAfterFrames = after
	case "malformed":
		c.MalformedAfterFrames = after
	case "no_closed":
		if rawAfter != "" {
			return nil, 0, fmt.Errorf("%s=no_closed takes no %s", paramFault, paramFaultAfter)
		}
		c.Live.NoClosed = true
	case "stall":
		if rawAfter != "" {
			return nil, 0, fmt.Errorf("%s=stall takes no %s (it stalls after session.created)", paramFault, paramFaultAfter)
		}
		c.StopReading = true
	default:
		status, err := strconv.Atoi(kind)
		if err != nil || status < 400 || status > 599 {
			return nil, 0, fmt.Errorf("%s=%q: want drop, close, malformed, stall, no_closed or an HTTP error status (400-599)", paramFault, kind)
		}
		if rawAfter != "" {
			return nil, 0, fmt.Errorf("%s=%d takes no %s", paramFault, status, paramFaultAfter)
		}
		return nil, status, nil
	}
	return &c, 0, nil
}
