package stateapi

import (
	_ "embed"
	"net/http"
	"strconv"
)

// openapiJSON is the OpenAPI 3.1 description of this API; openapi_test.go
// checks it against the real handlers.
//
//go:embed openapi.json
var openapiJSON []byte

func (s *Server) serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, r, "GET, HEAD")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(openapiJSON)))
	if r.Method != http.MethodHead {
		w.Write(openapiJSON)
	}
}
