package frames

import "io"

// ByteSource is a Source over a byte slice: bytes the gateway already holds,
// such as frames that arrived with the HTTP upgrade or plaintext a TLS
// connection decrypted. Slices it returns alias b.
type ByteSource struct {
	b []byte
}

// NewByteSource returns a source reading b.
func NewByteSource(b []byte) *ByteSource { return &ByteSource{b: b} }

// Reset makes the source read b from the start, so that one ByteSource can
// serve many reads without allocating.
func (s *ByteSource) Reset(b []byte) { s.b = b }

// Len returns the bytes left.
func (s *ByteSource) Len() int { return len(s.b) }

// Peek returns the next n bytes without consuming them.
func (s *ByteSource) Peek(n int) ([]byte, error) {
	if n > len(s.b) {
		return nil, io.ErrUnexpectedEOF
	}
	return s.b[:n:n], nil
}

// Next returns and consumes the next n bytes.
func (s *ByteSource) Next(n int) ([]byte, error) {
	if n > len(s.b) {
		return nil, io.ErrUnexpectedEOF
	}
	p := s.b[:n:n]
	s.b = s.b[n:]
	return p, nil
}

// Skip consumes the next n bytes.
func (s *ByteSource) Skip(n int) error {
	_, err := s.Next(n)
	return err
}
