//go:build race

package server

// raceEnabled says the test binary was built with -race; see
// TestScaleManyConcurrentSessions for why that matters.
const raceEnabled = true
