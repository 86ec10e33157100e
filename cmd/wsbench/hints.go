package main

import (
	"fmt"
	"io"

	"rtgate/bench/load"
)

// printFirstFailures writes, after a run's report, the first error of each
// failure class with a hint at the usual cause, so that a wrong scheme or
// key is obvious from one line instead of a column of counts.
func printFirstFailures(w io.Writer, target string, samples []load.Sample) {
	for _, f := range load.FirstFailures(target, samples) {
		fmt.Fprintf(w, "wsbench: %s (%d calls), first: %s\n", f.Class, f.Count, f.Detail)
		if f.Hint != "" {
			fmt.Fprintf(w, "wsbench:   hint: %s\n", f.Hint)
		}
	}
}
