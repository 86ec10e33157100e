package soak

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

func TestFromErr(t *testing.T) {
	live := context.Background()
	gone, cancel := context.WithCancel(live)
	cancel()
	for _, tt := range []struct {
		ctx  context.Context
		err  error
		want string
	}{
		{live, &websocket.CloseError{Code: 1011, Text: "upstream connection lost"}, "unexpected_close_1011"},
		{live, fmt.Errorf("read: %w", &websocket.CloseError{Code: 1002, Text: "x"}), "unexpected_close_1002"},
		{live, io.ErrUnexpectedEOF, "unexpected_close_1006"},
		{live, &net.OpError{Op: "write", Err: os.NewSyscallError("write", syscall.EPIPE)}, "unexpected_close_1006"},
		{live, &net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, "unexpected_close_1006"},
		{live, os.ErrDeadlineExceeded, "timeout"},
		{live, websocket.ErrReadLimit, "protocol"},
		{gone, io.EOF, CauseCancelled},
	} {
		if o := fromErr(tt.ctx, tt.err); o.cause != tt.want || !o.upgraded {
			t.Errorf("fromErr(%v) = %+v, want cause %s, upgraded", tt.err, o, tt.want)
		}
	}
}

// rawRequest reads whatever the server answers a broken request with.
func TestRawRequest(t *testing.T) {
	for _, tt := range []struct {
		name    string
		answer  string // "" closes without answering
		want    string
		upgrade bool
	}{
		{"refused", "HTTP/1.1 431 Request Header Fields Too Large\r\n\r\n", "http_431", false},
		{"closed", "", causeClosedNoResponse, false},
		{"upgraded", "HTTP/1.1 101 Switching Protocols\r\n\r\n", "http_101", true},
		{"not http", "SSH-2.0-OpenSSH\r\n", "protocol", false},
	} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			buf := make([]byte, 64)
			_, _ = c.Read(buf)
			_, _ = io.WriteString(c, tt.answer)
		}()
		r := &runner{hostPort: ln.Addr().String(), handshakeTimeout: time.Second}
		o := r.rawRequest(context.Background(), []byte("\x00\xffgarbage\r\n\r\n"))
		ln.Close()
		if o.cause != tt.want || o.upgraded != tt.upgrade {
			t.Errorf("%s: %+v, want cause %s, upgraded %v", tt.name, o, tt.want, tt.upgrade)
		}
	}
}
