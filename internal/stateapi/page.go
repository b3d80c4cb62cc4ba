package stateapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// pageWriter streams a page — {"<field>": [items...], "next": cursor} —
// one item at a time, in the layout of writeJSON, so that a page of large
// items (audit before-images, dead-letter values) never sits in memory as
// a whole. The status is sent with the first item; a handler whose scan
// fails after that must cut the connection (panic http.ErrAbortHandler)
// rather than end a page that would parse as complete.
type pageWriter struct {
	w     http.ResponseWriter
	field string
	n     int
	err   error
}

// item writes one item, the page's head before the first; it reports
// whether the write succeeded.
func (p *pageWriter) item(v any) bool {
	b, err := json.MarshalIndent(v, "    ", "  ")
	if err != nil {
		p.err = err
		return false
	}
	sep := ",\n    "
	if p.n == 0 {
		p.w.Header().Set("Content-Type", "application/json")
		p.w.WriteHeader(http.StatusOK)
		fb, _ := json.Marshal(p.field)
		sep = fmt.Sprintf("{\n  %s: [\n    ", fb)
	}
	p.n++
	if _, err := io.WriteString(p.w, sep); err != nil {
		p.err = err
		return false
	}
	if _, err := p.w.Write(b); err != nil {
		p.err = err
		return false
	}
	return true
}

// end closes the page: the items array and the next cursor.
func (p *pageWriter) end(next *string) {
	nb, _ := json.Marshal(next)
	if p.n == 0 {
		fb, _ := json.Marshal(p.field)
		p.w.Header().Set("Content-Type", "application/json")
		p.w.WriteHeader(http.StatusOK)
		fmt.Fprintf(p.w, "{\n  %s: [],\n  \"next\": %s\n}\n", fb, nb)
		return
	}
	fmt.Fprintf(p.w, "\n  ],\n  \"next\": %s\n}\n", nb)
}
