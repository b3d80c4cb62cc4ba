package module

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/statefun-go/statefun/internal/address"
)

// Component kinds, the values of a document's kind key.
const (
	// KindHTTPEndpointV2 binds functions to an HTTP endpoint with a
	// configurable transport.
	KindHTTPEndpointV2 = "io.statefun.endpoints.v2/http"
	// KindHTTPEndpointV1 binds functions to an HTTP endpoint that always
	// uses the okhttp transport; legacy 3.0 endpoints become this kind.
	KindHTTPEndpointV1 = "io.statefun.endpoints.v1/http"
	// KindPlaygroundIngress is the playground's HTTP ingress.
	KindPlaygroundIngress = "io.statefun.playground.v1/ingress"
	// KindPlaygroundEgress is the playground's HTTP egress.
	KindPlaygroundEgress = "io.statefun.playground.v1/egress"

	// KindKafkaIngress is a Kafka consumer whose records are routed to
	// functions by topic.
	KindKafkaIngress = "io.statefun.kafka.v1/ingress"
	// KindKafkaEgress is a Kafka producer for KafkaProducerRecord values.
	KindKafkaEgress = "io.statefun.kafka.v1/egress"
	// KindKinesisIngress is recognized but not supported yet.
	KindKinesisIngress = "io.statefun.kinesis.v1/ingress"
	// KindKinesisEgress is recognized but not supported yet.
	KindKinesisEgress = "io.statefun.kinesis.v1/egress"
)

// Transport types, the values of an endpoint's transport.type.
const (
	// TransportAsync is StateFun's Netty client, the default since 3.2: every
	// failure is retried until the call budget runs out.
	TransportAsync = "io.statefun.transports.v1/async"
	// TransportOkHTTP is StateFun's older OkHttp client: only I/O errors and
	// some status codes are retried.
	TransportOkHTTP = "io.statefun.transports.v1/okhttp"
)

// Defaults that apply when module.yaml leaves a property out. They are
// StateFun's code defaults (its documentation is stale on some of them).
const (
	// DefaultMaxNumBatchRequests is the per-address backlog at which an
	// endpoint applies backpressure.
	DefaultMaxNumBatchRequests = 1000

	// DefaultAsyncCall is the async transport's whole-request budget,
	// retries and backoff included.
	DefaultAsyncCall = 2 * time.Minute
	// DefaultAsyncConnect is the async transport's connect timeout.
	DefaultAsyncConnect = 20 * time.Second
	// DefaultAsyncLegacyCall is the call budget when the async transport is
	// configured through the legacy nested timeouts object.
	DefaultAsyncLegacyCall = time.Minute
	// DefaultAsyncLegacyConnect is the connect timeout when the async
	// transport is configured through the legacy nested timeouts object.
	DefaultAsyncLegacyConnect = 10 * time.Second
	// DefaultPoolTTL is how long the async transport keeps an idle pooled
	// connection.
	DefaultPoolTTL = 15 * time.Second
	// DefaultPoolSize is the async transport's connection pool size.
	DefaultPoolSize = 1024
	// DefaultPayloadMaxBytes is the largest request or response body the
	// async transport accepts: 32 MiB.
	DefaultPayloadMaxBytes = 32 << 20

	// DefaultOkHTTPCall is the okhttp transport's whole-call timeout.
	DefaultOkHTTPCall = time.Minute
	// DefaultOkHTTPConnect is the okhttp transport's connect timeout.
	DefaultOkHTTPConnect = 10 * time.Second
	// DefaultOkHTTPRead is the okhttp transport's read timeout.
	DefaultOkHTTPRead = 10 * time.Second
	// DefaultOkHTTPWrite is the okhttp transport's write timeout.
	DefaultOkHTTPWrite = 10 * time.Second
)

// The playground ingress and egress ids are fixed by the playground image;
// module.yaml cannot name them.
var (
	// PlaygroundIngressID is the id of the playground ingress.
	PlaygroundIngressID = address.TypeName{Namespace: "io.statefun.playground", Name: "ingress"}
	// PlaygroundEgressID is the id functions send playground egress records
	// to.
	PlaygroundEgressID = address.TypeName{Namespace: "io.statefun.playground", Name: "egress"}
)

// Module is a loaded and validated module.yaml. Its slices are in file
// order.
type Module struct {
	Endpoints []*Endpoint
	// Ingresses and Egresses are the playground HTTP ingress and egress.
	Ingresses []*PlaygroundIngress
	Egresses  []*PlaygroundEgress
	// KafkaIngresses and KafkaEgresses are the io.statefun.kafka.v1
	// components. Their ids are unique among Kafka ingresses and among
	// Kafka egresses, and differ from the playground's fixed ids.
	KafkaIngresses []*KafkaIngress
	KafkaEgresses  []*KafkaEgress

	// Warnings are problems that do not stop the module from loading, in
	// file order: unknown keys that StateFun ignores too and that are no
	// near miss of a known key (those are errors). Callers should log them.
	Warnings []*Error
}

// Position is where a component or value appears in a module file.
type Position struct {
	File     string
	Document int // 1-based index in the YAML stream, counting empty documents
	Line     int // 1-based
	Column   int // 1-based
}

// String returns "file:line:column".
func (p Position) String() string {
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Column)
}

// Endpoint is an HTTP endpoint that serves a set of function types.
type Endpoint struct {
	// Kind is KindHTTPEndpointV2 or KindHTTPEndpointV1 (also for endpoints
	// converted from the legacy format).
	Kind string
	// Functions selects the function types the endpoint serves.
	Functions FunctionSelector
	// URLPathTemplate is the endpoint URL, possibly with {function.name}
	// placeholders. Use URL to expand it.
	URLPathTemplate string
	// MaxNumBatchRequests is the per-address backlog at which invocations
	// stop being accepted (backpressure), not a batch size. A value <= 0
	// turns the cap off.
	MaxNumBatchRequests int
	// Transport configures the HTTP client.
	Transport Transport
	// Pos is where the endpoint's document (or legacy list entry) starts.
	Pos Position
}

// FunctionSelector is the functions property of an endpoint: one function
// type, or every type in a namespace.
type FunctionSelector struct {
	Namespace string
	Name      string // empty when Wildcard
	Wildcard  bool   // "<namespace>/*"
}

// Matches reports whether s selects function type t. A wildcard matches on
// exact namespace equality; namespaces are not hierarchical.
func (s FunctionSelector) Matches(t address.TypeName) bool {
	if s.Namespace != t.Namespace {
		return false
	}
	return s.Wildcard || s.Name == t.Name
}

// String returns the selector as written in module.yaml.
func (s FunctionSelector) String() string {
	if s.Wildcard {
		return s.Namespace + "/*"
	}
	return s.Namespace + "/" + s.Name
}

// Transport configures the HTTP client of an endpoint. The fields that do
// not apply to Type are zero: Read and Write for the async transport, and
// PoolTTL, PoolSize, PayloadMaxBytes and the TLS fields for okhttp.
type Transport struct {
	// Type is TransportAsync or TransportOkHTTP.
	Type string

	// Call is the budget for one request, retries and backoff included.
	Call time.Duration
	// Connect bounds establishing one connection.
	Connect time.Duration
	// Read bounds one read (okhttp only).
	Read time.Duration
	// Write bounds one write (okhttp only).
	Write time.Duration

	// PoolTTL is how long an idle connection stays pooled (async only).
	PoolTTL time.Duration
	// PoolSize caps the pooled connections (async only).
	PoolSize int
	// PayloadMaxBytes caps request and response bodies (async only).
	PayloadMaxBytes int64

	// TrustCACerts, ClientCert and ClientKey configure TLS (async only):
	// the paths of PEM files of the CA certificates to trust, and of the
	// client certificate and its unencrypted key for mutual TLS. module.yaml
	// may write them as paths or file: URLs; these are the paths. Empty
	// means unset.
	TrustCACerts string
	ClientCert   string
	ClientKey    string
}

// PlaygroundIngress is the playground's HTTP ingress. It accepts messages at
// /<namespace>/<name>/<id> on Port; its id is always PlaygroundIngressID.
type PlaygroundIngress struct {
	Port int
	Pos  Position
}

// PlaygroundEgress is the playground's HTTP egress. It serves GET /<topic>
// on Port for each of Topics; its id is always PlaygroundEgressID.
type PlaygroundEgress struct {
	Port   int
	Topics []string // in file order, without duplicates
	Pos    Position
}

// EndpointFor returns the endpoint bound to function type t. A binding for
// the exact type wins over a namespace wildcard, as in StateFun. It scans
// the endpoints, so callers that resolve often should cache the answer.
func (m *Module) EndpointFor(t address.TypeName) (*Endpoint, bool) {
	var wildcard *Endpoint
	for _, e := range m.Endpoints {
		if !e.Functions.Matches(t) {
			continue
		}
		if !e.Functions.Wildcard {
			return e, true
		}
		if wildcard == nil {
			wildcard = e
		}
	}
	return wildcard, wildcard != nil
}

// functionNamePlaceholder is replaced by the function type's name in a URL
// template, everywhere it appears, as StateFun's String.replace does.
const functionNamePlaceholder = "{function.name}"

// URL returns the endpoint URL for function type t: URLPathTemplate with
// every {function.name} replaced by t.Name, path-escaped. For the names
// StateFun can call (letters, digits, '-', '_', '.', '~') escaping changes
// nothing; for any other name it keeps the URL valid, so that a wildcard
// endpoint cannot turn a name with a space, '%', '?' or '#' into a URL the
// invoker refuses or that asks for another path.
func (e *Endpoint) URL(t address.TypeName) string {
	return strings.ReplaceAll(e.URLPathTemplate, functionNamePlaceholder, url.PathEscape(t.Name))
}
