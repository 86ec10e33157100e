package frontdoor

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// FuzzHandshake runs the gateway's request-head path (headEnd, parseRequest,
// CheckUpgrade, credentials) on arbitrary bytes. Seeds live in
// testdata/fuzz/FuzzHandshake/; `make fuzz` runs it for a bounded time.
func FuzzHandshake(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		end := headEnd(data)
		if end < 0 {
			if bytes.Contains(data, []byte("\r\n\r\n")) {
				t.Fatal("headEnd found no head in input that holds a blank line")
			}
			return
		}
		head := data[:end]
		if !bytes.HasSuffix(head, []byte("\r\n\r\n")) || bytes.Contains(head[:end-1], []byte("\r\n\r\n")) {
			t.Fatalf("headEnd %d does not end the head at the first blank line", end)
		}

		req, herr := parseRequest(head)
		if (req == nil) == (herr == nil) {
			t.Fatalf("parseRequest returned request %v and error %v: want exactly one", req != nil, herr)
		}
		if herr != nil {
			checkRefusal(t, herr)
			return
		}

		accept, herr := CheckUpgrade(req)
		if herr != nil {
			if accept != "" {
				t.Fatalf("CheckUpgrade refused (%v) but returned an accept value", herr)
			}
			checkRefusal(t, herr)
		} else {
			key := req.Header.Get("Sec-WebSocket-Key")
			raw, err := base64.StdEncoding.DecodeString(key)
			if err != nil || len(raw) != 16 {
				t.Fatalf("CheckUpgrade accepted key %q, which is not 16 bytes in base64", key)
			}
			// RFC 6455 section 4.2.2, computed here independently.
			sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
			if want := base64.StdEncoding.EncodeToString(sum[:]); accept != want {
				t.Fatalf("accept %q, want %q", accept, want)
			}
			resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(UpgradeResponse(accept, SubprotocolRealtime))), nil)
			if err != nil || resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Accept") != accept {
				t.Fatalf("101 answer does not parse back: %v", err)
			}
		}

		creds := ReadCredentials(req.Header)
		if creds.Key != "" && !keyInInput(creds.Key, data) {
			t.Fatalf("credentials returned key %q, which is not in the request", creds.Key)
		}
		if strings.TrimSpace(creds.Key) != creds.Key {
			t.Fatalf("credentials returned key %q with surrounding space", creds.Key)
		}
	})
}

// obsFold is a header line continued on the next (RFC 7230 obs-fold).
// net/textproto joins such lines with one space, so a key can legitimately
// span a fold.
var obsFold = regexp.MustCompile(`[ \t]*\r?\n[ \t]+`)

func keyInInput(key string, data []byte) bool {
	return bytes.Contains(data, []byte(key)) || bytes.Contains(obsFold.ReplaceAll(data, []byte(" ")), []byte(key))
}

// checkRefusal checks that a refusal is a client error and renders as an
// HTTP response with an OpenAI-shaped JSON body that says why.
func checkRefusal(t *testing.T, herr *Refusal) {
	t.Helper()
	if herr.Status < 400 || herr.Status > 499 {
		t.Fatalf("refusal with status %d, want 4xx: %v", herr.Status, herr)
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(herr.response())), nil)
	if err != nil {
		t.Fatalf("refusal does not parse as an HTTP response: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != herr.Status {
		t.Fatalf("refusal response: status %d, body error %v", resp.StatusCode, err)
	}
	var e struct {
		Error struct{ Type, Code, Message string }
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Code == "" || e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("refusal body %q is not an OpenAI-shaped error (%v)", body, err)
	}
}
