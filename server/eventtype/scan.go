package eventtype

import "unicode/utf8"

// scanBound bounds Of's look at an event.
const scanBound = 256

// Of returns the top-level "type" of a JSON event, looking at no more
// than its first 256 bytes and allocating nothing, so the relay can pick out
// the few events it acts on (response.done) without decoding every frame.
// typ is a subslice of p.
//
// The scan walks the top-level object's keys in order, skipping over each
// value (nested objects and arrays whole, so a "type" inside "session" is
// never taken for the event's). The realtime protocol puts type first, so
// the bound is ample in practice. ok is false, never a wrong value, when:
//   - the top-level type does not end within the first 256 bytes (after a
//     long value before it, say);
//   - a key before it, or the type value itself, holds a backslash escape
//     (decoding it would need a copy), or the value is not valid UTF-8 or
//     not a string;
//   - the start of p is not a JSON object.
//
// The bytes after the type are not looked at, so invalid JSON there goes
// unnoticed, and of duplicate top-level "type" keys the first one wins
// (encoding/json keeps the last; RFC 8259 leaves duplicates undefined).
// It is written by hand, not with encoding/json or a JSON library, because it
// runs on every upstream frame of every session: it must neither allocate
// nor read past the type, which a decoder cannot promise.
func Of(p []byte) (typ []byte, ok bool) {
	if len(p) > scanBound {
		p = p[:scanBound]
	}
	i, ok := valueOf(p, "type")
	if !ok || i >= len(p) || p[i] != '"' {
		return nil, false
	}
	end, escaped := scanString(p, i)
	if end < 0 || escaped || !utf8.Valid(p[i+1:end]) {
		return nil, false
	}
	return p[i+1 : end], true
}

// valueOf returns where the value of the top-level key of the JSON object p
// starts, walking the keys in order and skipping each value whole; ok is
// false when the key is not found within p (or p is not an object, or a key
// before it holds an escape).
func valueOf(p []byte, key string) (int, bool) {
	i := skipSpace(p, 0)
	if i >= len(p) || p[i] != '{' {
		return 0, false
	}
	i++
	for {
		i = skipSpace(p, i)
		if i >= len(p) || p[i] != '"' {
			return 0, false // the end of the object, or not JSON
		}
		end, escaped := scanString(p, i)
		if end < 0 || escaped {
			return 0, false
		}
		k := p[i+1 : end]
		i = skipSpace(p, end+1)
		if i >= len(p) || p[i] != ':' {
			return 0, false
		}
		i = skipSpace(p, i+1)
		if string(k) == key {
			return i, true
		}
		if i = skipValue(p, i); i < 0 {
			return 0, false
		}
		i = skipSpace(p, i)
		if i >= len(p) || p[i] != ',' {
			return 0, false
		}
		i++
	}
}

// Inner is the type of the event a wrapper event carries in its
// top-level field key (GPT-Live's response.event wraps a Responses event in
// "event"), under Of's rules and bound: ok is false when it is not
// within the first 256 bytes.
func Inner(p []byte, key string) (typ []byte, ok bool) {
	if len(p) > scanBound {
		p = p[:scanBound]
	}
	i, ok := valueOf(p, key)
	if !ok {
		return nil, false
	}
	return Of(p[i:])
}

func skipSpace(p []byte, i int) int {
	for i < len(p) && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r') {
		i++
	}
	return i
}

// scanString returns the index of the closing quote of the string opening
// at p[i], and whether it holds escapes; end is -1 if the string does not
// end within p or holds a control character (invalid JSON).
func scanString(p []byte, i int) (end int, escaped bool) {
	for j := i + 1; j < len(p); j++ {
		switch c := p[j]; {
		case c == '\\':
			escaped = true
			j++ // the escaped byte; \uXXXX's digits are plain bytes
		case c == '"':
			return j, escaped
		case c < 0x20:
			return -1, escaped
		}
	}
	return -1, escaped
}

// skipValue returns the index just past the JSON value starting at p[i], or
// -1 if it does not end within p. It does not validate the value: for valid
// JSON it finds the right end, which is all Of needs.
func skipValue(p []byte, i int) int {
	if i >= len(p) {
		return -1
	}
	switch p[i] {
	case '"':
		end, _ := scanString(p, i)
		if end < 0 {
			return -1
		}
		return end + 1
	case '{', '[':
		depth := 0
		for j := i; j < len(p); j++ {
			switch p[j] {
			case '"':
				end, _ := scanString(p, j)
				if end < 0 {
					return -1
				}
				j = end
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	// A number, true, false or null: it runs to the next delimiter, which
	// must be within p (else the scan cannot tell it has ended).
	j := i
	for j < len(p) {
		switch p[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			if j == i {
				return -1
			}
			return j
		}
		j++
	}
	return -1
}
