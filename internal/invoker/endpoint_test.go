package invoker

import (
	"net/http"
	"testing"
)

func TestOctetStream(t *testing.T) {
	tests := []struct {
		values []string
		ok     bool
	}{
		{nil, true},
		{[]string{"application/octet-stream"}, true},
		{[]string{"APPLICATION/OCTET-STREAM"}, true},
		{[]string{"application/octet-stream;charset=utf-8"}, true},
		{[]string{"text/plain, application/octet-stream"}, true},
		{[]string{"text/plain", "application/octet-stream"}, true},
		{[]string{""}, false},
		{[]string{"text/plain"}, false},
		{[]string{"application/octet-streamx"}, false},
		{[]string{"application/x-protobuf"}, false},
	}
	for _, tt := range tests {
		h := http.Header{}
		for _, v := range tt.values {
			h.Add("Content-Type", v)
		}
		if _, ok := octetStream(h); ok != tt.ok {
			t.Errorf("octetStream(%q) = %v, want %v", tt.values, ok, tt.ok)
		}
	}
}

func TestKindString(t *testing.T) {
	for k := KindUnknown; k <= KindTooLarge; k++ {
		if s := k.String(); s == "" || (k != KindUnknown && s == "unknown") {
			t.Errorf("Kind(%d) has no name", k)
		}
	}
	if Kind(99).String() != "unknown" || Kind(-1).String() != "unknown" {
		t.Error("out-of-range kinds should be unknown")
	}
}
