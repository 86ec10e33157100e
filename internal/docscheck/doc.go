// Package docscheck holds no code: its test checks that every relative link
// in README.md and docs/**/*.md points at a file that exists and, where the
// link names an anchor, at a heading of that file, so the documentation can
// be split and moved without links rotting.
package docscheck
