package recording

import "bytes"

// The per-event path walks only the top level of an event: an audio event
// is mostly one long base64 string, and decoding it as JSON would cost more
// than the rest of the relay. These helpers find a member's key and value by
// scanning; they validate no more than they need to find the members.

// member is one top-level member of a JSON object: p[keyStart:keyEnd] is the
// key with its quotes, p[valStart:valEnd] the value as written.
type member struct {
	keyStart, keyEnd, valStart, valEnd int
}

// key is the member's key without its quotes (escapes left as they are: the
// keys looked for have none).
func (m member) key(p []byte) []byte { return p[m.keyStart+1 : m.keyEnd-1] }

// str is the member's value without its quotes when it is a string without
// escapes, else nil.
func (m member) str(p []byte) []byte {
	if m.valEnd-m.valStart < 2 || p[m.valStart] != '"' {
		return nil
	}
	v := p[m.valStart+1 : m.valEnd-1]
	if bytes.IndexByte(v, '\\') >= 0 {
		return nil
	}
	return v
}

// walkObject calls fn for each top-level member of the object in p, in
// order, until fn returns false. It reports whether p looked like an object
// as far as it read.
func walkObject(p []byte, fn func(m member) bool) bool {
	i := skipSpace(p, 0)
	if i >= len(p) || p[i] != '{' {
		return false
	}
	i = skipSpace(p, i+1)
	if i < len(p) && p[i] == '}' {
		return true
	}
	for i < len(p) {
		if p[i] != '"' {
			return false
		}
		ke, ok := skipString(p, i)
		if !ok {
			return false
		}
		j := skipSpace(p, ke)
		if j >= len(p) || p[j] != ':' {
			return false
		}
		vs := skipSpace(p, j+1)
		ve, ok := skipValue(p, vs)
		if !ok {
			return false
		}
		if !fn(member{keyStart: i, keyEnd: ke, valStart: vs, valEnd: ve}) {
			return true
		}
		i = skipSpace(p, ve)
		if i >= len(p) {
			return false
		}
		switch p[i] {
		case '}':
			return true
		case ',':
			i = skipSpace(p, i+1)
		default:
			return false
		}
	}
	return false
}

func skipSpace(p []byte, i int) int {
	for i < len(p) && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the string that starts at p[i]
// (a quote). A quote is escaped when an odd number of backslashes precede
// it; finding quotes with IndexByte keeps a long base64 string cheap.
func skipString(p []byte, i int) (int, bool) {
	j := i + 1
	for {
		k := bytes.IndexByte(p[j:], '"')
		if k < 0 {
			return 0, false
		}
		q := j + k
		n := 0
		for b := q - 1; b > i && p[b] == '\\'; b-- {
			n++
		}
		if n%2 == 0 {
			return q + 1, true
		}
		j = q + 1
	}
}

// skipValue returns the index just past the value that starts at p[i].
func skipValue(p []byte, i int) (int, bool) {
	if i >= len(p) {
		return 0, false
	}
	switch p[i] {
	case '"':
		return skipString(p, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(p); j++ {
			switch p[j] {
			case '"':
				e, ok := skipString(p, j)
				if !ok {
					return 0, false
				}
				j = e - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, true
				}
			}
		}
		return 0, false
	default:
		j := i
		for j < len(p) && p[j] != ',' && p[j] != '}' && p[j] != ']' && p[j] != ' ' && p[j] != '\n' && p[j] != '\t' && p[j] != '\r' {
			j++
		}
		if j == i {
			return 0, false
		}
		return j, true
	}
}

// without returns p with member m removed (with the comma that joined it to
// its neighbour), appended to dst.
func without(dst, p []byte, m member) []byte {
	start, end := m.keyStart, m.valEnd
	// A preceding comma goes with the member; else (the first member) the
	// comma after it does.
	b := start - 1
	for b >= 0 && (p[b] == ' ' || p[b] == '\t' || p[b] == '\n' || p[b] == '\r') {
		b--
	}
	if b >= 0 && p[b] == ',' {
		start = b
	} else {
		e := skipSpace(p, end)
		if e < len(p) && p[e] == ',' {
			end = skipSpace(p, e+1)
		}
	}
	dst = append(dst, p[:start]...)
	return append(dst, p[end:]...)
}
