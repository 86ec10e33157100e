package load

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// The Realtime server sends a few events per call whose keys are not in a
// helpful order (session.created, response.done: a few KB each). Decoding
// them with encoding/json just to read one field was a quarter of the
// client's CPU per call, so this file finds a top-level field by skipping
// over the other values without decoding them. It checks structure (quotes,
// brackets, separators) as it goes, so text that is not a JSON object is
// still an error, but it does not validate numbers or escape sequences.

var errNotObject = errors.New("not a JSON object")

// stringField returns the string value of key in the JSON object obj;
// found is false when the object has no such key.
func stringField(obj []byte, key string) (val string, found bool, err error) {
	raw, found, err := field(obj, key)
	if err != nil || !found {
		return "", found, err
	}
	if len(raw) < 2 || raw[0] != '"' {
		return "", true, fmt.Errorf("%q is not a string", key)
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1]), true, nil
	}
	if err := json.Unmarshal(raw, &val); err != nil {
		return "", true, fmt.Errorf("%q: %w", key, err)
	}
	return val, true, nil
}

// field returns the raw bytes of key's value in the JSON object obj.
func field(obj []byte, key string) (raw []byte, found bool, err error) {
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return nil, false, errNotObject
	}
	i = skipSpace(obj, i+1)
	if i < len(obj) && obj[i] == '}' {
		return nil, false, trailing(obj, i+1)
	}
	for {
		if i >= len(obj) || obj[i] != '"' {
			return nil, false, errNotObject
		}
		kEnd, err := skipString(obj, i)
		if err != nil {
			return nil, false, err
		}
		k := obj[i+1 : kEnd-1]
		i = skipSpace(obj, kEnd)
		if i >= len(obj) || obj[i] != ':' {
			return nil, false, errNotObject
		}
		start := skipSpace(obj, i+1)
		end, err := skipValue(obj, start)
		if err != nil {
			return nil, false, err
		}
		if !found && string(k) == key {
			raw, found = obj[start:end], true
		}
		i = skipSpace(obj, end)
		switch {
		case i < len(obj) && obj[i] == ',':
			i = skipSpace(obj, i+1)
		case i < len(obj) && obj[i] == '}':
			return raw, found, trailing(obj, i+1)
		default:
			return nil, false, errNotObject
		}
	}
}

func trailing(obj []byte, i int) error {
	if skipSpace(obj, i) != len(obj) {
		return errors.New("data after the JSON object")
	}
	return nil
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the string starting at b[i] == '"'.
func skipString(b []byte, i int) (int, error) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, nil
		}
	}
	return 0, errors.New("unterminated JSON string")
}

// skipValue returns the index just past the value starting at b[i].
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errors.New("missing JSON value")
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		// Nested containers: count depth, stepping over strings, and
		// require each closer to match its opener.
		stack := make([]byte, 0, 16)
		for j := i; j < len(b); j++ {
			switch c := b[j]; c {
			case '"':
				end, err := skipString(b, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			case '{', '[':
				stack = append(stack, c)
			case '}', ']':
				if len(stack) == 0 || (c == '}') != (stack[len(stack)-1] == '{') {
					return 0, errors.New("mismatched JSON brackets")
				}
				stack = stack[:len(stack)-1]
				if len(stack) == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, errors.New("unterminated JSON container")
	default:
		// Number, true, false or null.
		j := i
		for j < len(b) && !endsLiteral(b[j]) {
			j++
		}
		if j == i {
			return 0, errors.New("missing JSON value")
		}
		return j, nil
	}
}

func endsLiteral(c byte) bool {
	switch c {
	case ',', '}', ']', ' ', '\t', '\r', '\n':
		return true
	}
	return false
}
