// Package jsonscan reads single members of a JSON event by hand, without
// decoding it and without allocating, for the paths that run on many frames
// of a session: the turn clock's look at the client's appends and creates,
// and session continuity's GPT-Live transcript deltas. It finds the first
// member with a given name wherever it is (an event's own, or a nested
// object's, such as response.create's response.conversation), which a
// match inside a string value can never be: quotes inside strings are
// escaped. Whatever it cannot read plainly it reports as not found, for
// the caller to fall back on encoding/json.
package jsonscan

import (
	"bytes"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// String is the raw value (between its quotes, escapes as they are) of the
// first string member named key (with its quotes: `"delta"`) in p.
func String(p []byte, key string) ([]byte, bool) {
	v, ok := member(p, key)
	if !ok || len(v) == 0 || v[0] != '"' {
		return nil, false
	}
	v = v[1:]
	for i := 0; ; {
		j := bytes.IndexByte(v[i:], '"')
		if j < 0 {
			return nil, false
		}
		i += j
		slashes := 0
		for k := i - 1; k >= 0 && v[k] == '\\'; k-- {
			slashes++
		}
		if slashes%2 == 0 {
			return v[:i], true
		}
		i++
	}
}

// Int is the value, truncated to an integer, of the first number member
// named key in p.
func Int(p []byte, key string) (int64, bool) {
	v, ok := member(p, key)
	if !ok {
		return 0, false
	}
	end := 0
	for end < len(v) && (v[end] == '-' || v[end] == '+' || v[end] == '.' || v[end] == 'e' || v[end] == 'E' ||
		(v[end] >= '0' && v[end] <= '9')) {
		end++
	}
	f, err := strconv.ParseFloat(string(v[:end]), 64)
	return int64(f), err == nil
}

// member is what follows the first member name key and its colon in p.
func member(p []byte, key string) ([]byte, bool) {
	for off := 0; ; {
		i := bytes.Index(p[off:], []byte(key))
		if i < 0 {
			return nil, false
		}
		i += off
		off = i + len(key)
		if before := bytes.TrimRight(p[:i], " \t\r\n"); len(before) == 0 || (before[len(before)-1] != '{' && before[len(before)-1] != ',') {
			continue
		}
		rest := bytes.TrimLeft(p[off:], " \t\r\n")
		if len(rest) == 0 || rest[0] != ':' {
			continue
		}
		return bytes.TrimLeft(rest[1:], " \t\r\n"), true
	}
}

// AppendUnescaped appends the text a raw JSON string value (String's)
// stands for to dst; false (and dst as it was) when raw holds an escape
// that is not JSON's.
func AppendUnescaped(dst, raw []byte) ([]byte, bool) {
	n := len(dst)
	for len(raw) > 0 {
		i := bytes.IndexByte(raw, '\\')
		if i < 0 {
			return append(dst, raw...), true
		}
		dst = append(dst, raw[:i]...)
		raw = raw[i:]
		if len(raw) < 2 {
			return dst[:n], false
		}
		switch c := raw[1]; c {
		case '"', '\\', '/':
			dst = append(dst, c)
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, used, ok := unicodeEscape(raw)
			if !ok {
				return dst[:n], false
			}
			dst = utf8.AppendRune(dst, r)
			raw = raw[used:]
			continue
		default:
			return dst[:n], false
		}
		raw = raw[2:]
	}
	return dst, true
}

// unicodeEscape reads a \uXXXX escape at the start of raw (a surrogate pair
// as two): the rune and the bytes it took.
func unicodeEscape(raw []byte) (rune, int, bool) {
	r, ok := hex4(raw)
	if !ok {
		return 0, 0, false
	}
	if utf16.IsSurrogate(r) {
		if r2, ok := hex4(raw[6:]); ok && len(raw) >= 12 && raw[6] == '\\' {
			if pair := utf16.DecodeRune(r, r2); pair != utf8.RuneError {
				return pair, 12, true
			}
		}
		return utf8.RuneError, 6, true // a lone surrogate: as encoding/json reads it
	}
	return r, 6, true
}

// hex4 reads \uXXXX at the start of raw.
func hex4(raw []byte) (rune, bool) {
	if len(raw) < 6 || raw[0] != '\\' || raw[1] != 'u' {
		return 0, false
	}
	var r rune
	for _, c := range raw[2:6] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
