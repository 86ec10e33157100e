package xai

import "bytes"

// The normaliser finds what it repairs by walking the event's JSON in place,
// not by decoding it: an audio delta (most of xAI's traffic) is a few short
// members and one long base64 string, and a walk that skips that string with
// bytes.IndexByte reads it at memchr speed and allocates nothing, where a
// decoder (encoding/json, or any library) would copy the string out. The
// walk also gives byte positions, so a repair splices bytes into the original
// message and leaves everything else as xAI sent it, key order included: the
// gateway's usage meter reads an event's type off its first 256 bytes
// (eventtype.Of), so the type must stay first.
//
// The walk is not a validator. For valid JSON it finds the right spans; for
// invalid JSON it either reports failure (the message then passes through as
// it came) or finds spans a client's parser will reject anyway. Keys are
// compared as written: a key spelled with escapes ("\u0074ype") is not
// recognised, and the member is left alone.

// span is where a JSON value lies in a message: p[start:end]. start is -1
// when the value is absent.
type span struct{ start, end int }

var absent = span{-1, -1}

func (s span) ok() bool { return s.start >= 0 }

// isString reports whether the value is a JSON string.
func (s span) isString(p []byte) bool { return s.ok() && p[s.start] == '"' && s.end-s.start >= 2 }

// str is a string value's contents as written, escapes included; nil if the
// value is not a string.
func (s span) str(p []byte) []byte {
	if !s.isString(p) {
		return nil
	}
	return p[s.start+1 : s.end-1]
}

// is reports whether the value is exactly the JSON text lit.
func (s span) is(p []byte, lit string) bool { return s.ok() && string(p[s.start:s.end]) == lit }

// members walks the members of one JSON object.
type members struct {
	p     []byte
	i     int  // where the next member (or the closing brace) is looked for
	n     int  // members read so far
	close int  // the closing brace, once reached
	bad   bool // the object is not well formed
}

// objectAt starts a walk of the object that the value s holds; ok is false
// when s is not an object.
func objectAt(p []byte, s span) (members, bool) {
	if !s.ok() || p[s.start] != '{' {
		return members{}, false
	}
	return members{p: p, i: s.start + 1, close: -1}, true
}

// next returns the next member: its key as written and its value. ok is
// false at the end of the object (close is then set) or when the object is
// not well formed (bad is set).
func (m *members) next() (key []byte, v span, ok bool) {
	p := m.p
	i := skipSpace(p, m.i)
	if i >= len(p) {
		m.bad = true
		return nil, absent, false
	}
	if p[i] == '}' {
		m.close, m.i = i, i+1
		return nil, absent, false
	}
	if m.n > 0 {
		if p[i] != ',' {
			m.bad = true
			return nil, absent, false
		}
		i = skipSpace(p, i+1)
	}
	if i >= len(p) || p[i] != '"' {
		m.bad = true
		return nil, absent, false
	}
	e := stringEnd(p, i)
	if e < 0 {
		m.bad = true
		return nil, absent, false
	}
	key = p[i+1 : e]
	i = skipSpace(p, e+1)
	if i >= len(p) || p[i] != ':' {
		m.bad = true
		return nil, absent, false
	}
	i = skipSpace(p, i+1)
	ve := valueEnd(p, i)
	if ve < 0 {
		m.bad = true
		return nil, absent, false
	}
	m.i = ve
	m.n++
	return key, span{i, ve}, true
}

// finish walks the rest of the object; ok is false when it is not well
// formed. Afterwards m.close is the closing brace and m.n the member count.
func (m *members) finish() bool {
	for {
		if _, _, ok := m.next(); !ok {
			return !m.bad
		}
	}
}

// member finds the value of key in the object s; ok is false when s is not
// a well-formed object. A missing key is absent with ok true.
func member(p []byte, s span, key string) (v span, ok bool) {
	m, ok := objectAt(p, s)
	if !ok {
		return absent, false
	}
	for {
		k, v, more := m.next()
		if !more {
			return absent, !m.bad
		}
		if string(k) == key {
			return v, true
		}
	}
}

// shape is where an object's members end and whether it has any: what an
// insertion into it needs.
type shape struct {
	open, close int
	empty       bool
}

// shapeOf walks the object s; ok is false when s is not a well-formed
// object.
func shapeOf(p []byte, s span) (shape, bool) {
	m, ok := objectAt(p, s)
	if !ok || !m.finish() {
		return shape{}, false
	}
	return shape{open: s.start, close: m.close, empty: m.n == 0}, true
}

// elements walks the elements of one JSON array.
type elements struct {
	p   []byte
	i   int
	n   int
	bad bool
}

func arrayAt(p []byte, s span) (elements, bool) {
	if !s.ok() || p[s.start] != '[' {
		return elements{}, false
	}
	return elements{p: p, i: s.start + 1}, true
}

// next returns the next element; ok is false at the end of the array or
// when it is not well formed (bad).
func (a *elements) next() (v span, ok bool) {
	p := a.p
	i := skipSpace(p, a.i)
	if i >= len(p) {
		a.bad = true
		return absent, false
	}
	if p[i] == ']' {
		a.i = i + 1
		return absent, false
	}
	if a.n > 0 {
		if p[i] != ',' {
			a.bad = true
			return absent, false
		}
		i = skipSpace(p, i+1)
	}
	ve := valueEnd(p, i)
	if ve < 0 {
		a.bad = true
		return absent, false
	}
	a.i = ve
	a.n++
	return span{i, ve}, true
}

func skipSpace(p []byte, i int) int {
	for i < len(p) && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index of the quote that closes the string opening at
// p[i], or -1 if it does not close within p. A quote preceded by an odd run
// of backslashes is escaped. The search is bytes.IndexByte: base64 audio
// holds neither quotes nor backslashes, so a delta's payload is one call.
func stringEnd(p []byte, i int) int {
	j := i + 1
	for j < len(p) {
		q := bytes.IndexByte(p[j:], '"')
		if q < 0 {
			return -1
		}
		q += j
		bs := 0
		for k := q - 1; k > i && p[k] == '\\'; k-- {
			bs++
		}
		if bs%2 == 0 {
			return q
		}
		j = q + 1
	}
	return -1
}

// valueEnd returns the index just past the JSON value starting at p[i], or
// -1 if it does not end within p.
func valueEnd(p []byte, i int) int {
	if i >= len(p) {
		return -1
	}
	switch p[i] {
	case '"':
		e := stringEnd(p, i)
		if e < 0 {
			return -1
		}
		return e + 1
	case '{', '[':
		depth := 0
		for j := i; j < len(p); j++ {
			switch p[j] {
			case '"':
				if j = stringEnd(p, j); j < 0 {
					return -1
				}
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	case ',', '}', ']', ':':
		return -1
	}
	// A number, true, false or null: it runs to the next delimiter.
	j := i
	for j < len(p) {
		switch p[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return j
		}
		j++
	}
	return j
}

// smallInt reads a JSON number that is a small non-negative integer (an
// index); ok is false for anything else.
func smallInt(p []byte, s span) (int, bool) {
	if !s.ok() || s.end-s.start > 9 {
		return 0, false
	}
	v := 0
	for _, c := range p[s.start:s.end] {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, true
}
