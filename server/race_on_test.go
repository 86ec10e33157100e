//go:build race

package server

// raceEnabled says the test binary was built with -race, which makes the
// scale tests open fewer sessions.
const raceEnabled = true
