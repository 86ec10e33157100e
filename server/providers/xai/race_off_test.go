//go:build !race

package xai_test

// raceEnabled says the test binary was built with -race, where sync.Pool
// drops a share of what is put back (TestAudioDeltaDoesNotAllocate).
const raceEnabled = false
