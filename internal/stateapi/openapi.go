package stateapi

import (
	_ "embed"
	"net/http"
)

// openapiJSON is the OpenAPI 3.1 description of this API; openapi_test.go
// checks it against the real handlers.
//
//go:embed openapi.json
var openapiJSON []byte

func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write(openapiJSON)
}
