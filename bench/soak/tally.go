package soak

import (
	"maps"
	"slices"
	"sync"
	"time"

	"rtgate/bench/stats"
)

// Record is one finished session.
type Record struct {
	Index  int           `json:"index"`
	Plan   Plan          `json:"plan"`
	Cause  string        `json:"cause"`
	Detail string        `json:"detail,omitempty"`
	Took   time.Duration `json:"took_ns"`
	// Upgraded says the gateway answered 101 (and so counts the session).
	Upgraded bool `json:"upgraded"`
	// Explained says the plan's fault (or, for a normal session, success)
	// accounts for the cause.
	Explained bool `json:"explained"`
}

// maxUnexplained bounds the unexplained sessions kept whole for the report;
// all of them are counted.
const maxUnexplained = 100

// Tally counts finished sessions. It is safe for concurrent use.
type Tally struct {
	mu          sync.Mutex
	attempted   int
	completed   int
	upgraded    int
	unexplained int
	byKind      map[Kind]*kindTally
	examples    []Record
}

type kindTally struct {
	attempted, completed, unexplained int
	causes, unexplainedCauses         map[string]int
	took                              []time.Duration
}

// NewTally returns an empty tally.
func NewTally() *Tally { return &Tally{byKind: map[Kind]*kindTally{}} }

// Add attributes a finished session and counts it; it returns the record
// with Explained set.
func (t *Tally) Add(r Record) Record {
	r.Explained = Explains(r.Plan, r.Cause, r.Detail)
	t.mu.Lock()
	defer t.mu.Unlock()
	kt := t.byKind[r.Plan.Kind]
	if kt == nil {
		kt = &kindTally{causes: map[string]int{}, unexplainedCauses: map[string]int{}}
		t.byKind[r.Plan.Kind] = kt
	}
	t.attempted++
	kt.attempted++
	if r.Upgraded {
		t.upgraded++
	}
	kt.causes[r.Cause]++
	kt.took = append(kt.took, r.Took)
	if r.Cause == CauseCompleted {
		t.completed++
		kt.completed++
	}
	if !r.Explained {
		t.unexplained++
		kt.unexplained++
		kt.unexplainedCauses[r.Cause]++
		if len(t.examples) < maxUnexplained {
			t.examples = append(t.examples, r)
		}
	}
	return r
}

// Counts is a snapshot of a tally, as reported.
type Counts struct {
	Attempted int `json:"attempted"`
	Completed int `json:"completed"`
	// Upgraded counts the sessions the gateway answered with 101.
	Upgraded int `json:"upgraded"`
	// Failed is every session that did not complete, by cause.
	Failed        int            `json:"failed"`
	FailedByCause map[string]int `json:"failed_by_cause"`
	// Unexplained sessions fail the run; Examples holds the first of them.
	Unexplained int          `json:"unexplained"`
	Examples    []Record     `json:"unexplained_examples"`
	Kinds       []KindCounts `json:"kinds"`
}

// KindCounts is one kind's sessions.
type KindCounts struct {
	Kind        Kind           `json:"kind"`
	Fault       string         `json:"fault"`
	Attempted   int            `json:"attempted"`
	Completed   int            `json:"completed"`
	Unexplained int            `json:"unexplained"`
	Causes      map[string]int `json:"causes"`
	// UnexplainedCauses counts, by cause, the endings this kind's fault
	// does not explain.
	UnexplainedCauses map[string]int `json:"unexplained_causes,omitempty"`
	// Took is how long the sessions lasted, from the first byte to the end.
	Took stats.Summary `json:"took"`
}

// Counts returns the tally so far, kinds in report order.
func (t *Tally) Counts() Counts {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := Counts{
		Attempted:     t.attempted,
		Completed:     t.completed,
		Upgraded:      t.upgraded,
		Failed:        t.attempted - t.completed,
		FailedByCause: map[string]int{},
		Unexplained:   t.unexplained,
		Examples:      slices.Clone(t.examples),
	}
	for _, k := range Kinds() {
		kt := t.byKind[k]
		if kt == nil {
			continue
		}
		kc := KindCounts{Kind: k, Fault: Describe(k), Attempted: kt.attempted, Completed: kt.completed,
			Unexplained: kt.unexplained, Causes: maps.Clone(kt.causes), Took: stats.Summarize(kt.took)}
		if len(kt.unexplainedCauses) > 0 {
			kc.UnexplainedCauses = maps.Clone(kt.unexplainedCauses)
		}
		for cause, n := range kt.causes {
			if cause != CauseCompleted {
				c.FailedByCause[cause] += n
			}
		}
		c.Kinds = append(c.Kinds, kc)
	}
	return c
}
