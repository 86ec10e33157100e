// Package fdlimit raises a process's open-file limit to what it may use: a
// load run (wsbench) or a mock upstream (mockai) holds one descriptor per
// session, far above the usual soft limit of 1024. It is its own package,
// below both commands, so that the mock upstream needs nothing of the
// benchmarks' process harness (bench/proc) for it.
package fdlimit
