package stateapi

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
)

// writeJSON answers what an indenting json.Encoder writes, byte for byte,
// answer after answer from its pooled encoders, large ones included.
func TestWriteJSONAsAnEncoderWrites(t *testing.T) {
	vals := []any{
		problem{Type: "about:blank", Title: "<&> quoted \"x\"", Status: 412, Detail: "é\u2028"},
		map[string]any{"b": []int{1, 2}, "a": map[string]string{"k": "v"}},
		[]string{strings.Repeat("x", 100<<10)}, // over the pooled buffer's cap
		"plain",
	}
	for round := range 3 {
		for _, v := range vals {
			var want bytes.Buffer
			enc := json.NewEncoder(&want)
			enc.SetIndent("", "  ")
			if err := enc.Encode(v); err != nil {
				t.Fatal(err)
			}
			rec := httptest.NewRecorder()
			writeJSON(rec, 201, v)
			if rec.Code != 201 || rec.Header().Get("Content-Type") != "application/json" || !bytes.Equal(rec.Body.Bytes(), want.Bytes()) {
				t.Fatalf("round %d, %T: status %d, type %q, body %.80q; want %.80q", round, v, rec.Code, rec.Header().Get("Content-Type"), rec.Body.String(), want.String())
			}
		}
	}
}
