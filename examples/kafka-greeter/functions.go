package main

import (
	"fmt"
	"log"
	"net/http"
	"strings"
	"time"

	"github.com/apache/flink-statefun/statefun-sdk-go/v3/pkg/statefun"
)

// The names are those of the StateFun playground's Go showcase, so that its
// module.yaml runs these functions with only its addresses changed
// (module-showcase.yaml).
var (
	// UserFnType keeps what is known about one user; the id is the
	// record key of the logins topic, the user id.
	UserFnType = statefun.TypeNameFrom("showcase.fns/user")
	// GreetingsFnType turns a user's profile into a greeting; the id is
	// the user id too.
	GreetingsFnType = statefun.TypeNameFrom("showcase.fns/greetings")
	// GreetsEgress is the Kafka egress of module.yaml.
	GreetsEgress = statefun.TypeNameFrom("showcase.io/greets")

	// UserLoginType is the ingress's valueType: the record value, JSON.
	UserLoginType = statefun.MakeJsonType(statefun.TypeNameFrom("showcase.types/userlogin"))
	// UserProfileType is the user function's message to the greetings
	// function.
	UserProfileType = statefun.MakeJsonType(statefun.TypeNameFrom("showcase.types/userprofile"))
)

// GreetingsTopic is the Kafka topic the greetings go to.
const GreetingsTopic = "greetings"

// The user function's state.
var (
	// SeenCount is how many logins the user made.
	SeenCount = statefun.ValueSpec{Name: "seen_count", ValueType: statefun.Int32Type}
	// FirstLogin and LastLogin are the Unix milliseconds of the first and
	// the latest login.
	FirstLogin = statefun.ValueSpec{Name: "first_login_ms", ValueType: statefun.Int64Type}
	LastLogin  = statefun.ValueSpec{Name: "last_login_ms", ValueType: statefun.Int64Type}
)

// UserLogin is one record of the logins topic, e.g.
// {"user_id": "bid", "user_name": "Bob", "login_type": "web"}.
type UserLogin struct {
	UserID    string `json:"user_id"`
	UserName  string `json:"user_name"`
	LoginType string `json:"login_type"`
}

// UserProfile is what the user function tells the greetings function
// about a login.
type UserProfile struct {
	Name      string `json:"name"`
	LoginType string `json:"login_type"`
	SeenCount int32  `json:"seen_count"`
	// FirstLoginMs is the Unix milliseconds of the user's first login.
	FirstLoginMs int64 `json:"first_login_ms"`
	// SinceLastMs is the time since the previous login; 0 on the first.
	SinceLastMs int64 `json:"since_last_ms"`
}

// Functions are the example's two functions. Now is their clock; tests
// fix it so that the greetings are predictable.
type Functions struct {
	Now func() time.Time
	// Log, when set, receives each greeting (the function server prints
	// them, as the showcase does).
	Log *log.Logger
}

// Handler serves both functions with the official Go SDK.
func (f Functions) Handler() http.Handler {
	if f.Now == nil {
		f.Now = time.Now
	}
	fns := statefun.StatefulFunctionsBuilder()
	for _, spec := range []statefun.StatefulFunctionSpec{
		{FunctionType: UserFnType, States: []statefun.ValueSpec{SeenCount, FirstLogin, LastLogin}, Function: statefun.StatefulFunctionPointer(f.User)},
		{FunctionType: GreetingsFnType, Function: statefun.StatefulFunctionPointer(f.Greetings)},
	} {
		if err := fns.WithSpec(spec); err != nil {
			panic(err)
		}
	}
	return fns.AsHandler()
}

// User counts the logins of one user, remembers the first and the latest,
// and sends the user's profile to the greetings function of the same id.
//
// A record that is not a login it can read is logged and skipped rather
// than failed: a failing function is retried, and one bad record would
// hold up every later login of that user.
func (f Functions) User(ctx statefun.Context, msg statefun.Message) error {
	var login UserLogin
	if !msg.Is(UserLoginType) {
		f.logf("user %s: skipping a message of type %s, want %s", ctx.Self().Id, msg.ValueTypeName(), UserLoginType.GetTypeName())
		return nil
	}
	if err := msg.As(UserLoginType, &login); err != nil {
		f.logf("user %s: skipping a login that is not JSON: %v", ctx.Self().Id, err)
		return nil
	}
	if login.UserName == "" {
		login.UserName = ctx.Self().Id
	}
	now := f.Now().UnixMilli()

	var seen int32
	ctx.Storage().Get(SeenCount, &seen)
	seen++
	var first, last int64
	if !ctx.Storage().Get(FirstLogin, &first) {
		first = now
	}
	since := int64(0)
	if ctx.Storage().Get(LastLogin, &last) {
		since = max(now-last, 0)
	}
	ctx.Storage().Set(SeenCount, seen)
	ctx.Storage().Set(FirstLogin, first)
	ctx.Storage().Set(LastLogin, now)

	ctx.Send(statefun.MessageBuilder{
		Target: statefun.Address{FunctionType: GreetingsFnType, Id: ctx.Self().Id},
		Value: UserProfile{
			Name:         login.UserName,
			LoginType:    strings.ToLower(login.LoginType),
			SeenCount:    seen,
			FirstLoginMs: first,
			SinceLastMs:  since,
		},
		ValueType: UserProfileType,
	})
	return nil
}

// Greetings writes a personal greeting to the greetings topic, keyed by
// the user id.
func (f Functions) Greetings(ctx statefun.Context, msg statefun.Message) error {
	var p UserProfile
	if err := msg.As(UserProfileType, &p); err != nil {
		f.logf("greetings %s: skipping a message that is not a profile: %v", ctx.Self().Id, err)
		return nil
	}
	g := Greeting(p)
	f.logf("greetings %s: %s", ctx.Self().Id, g)
	ctx.SendEgress(statefun.KafkaEgressBuilder{
		Target: GreetsEgress,
		Topic:  GreetingsTopic,
		Key:    ctx.Self().Id,
		Value:  []byte(g),
	})
	return nil
}

// Greeting is the text a user sees for a login.
func Greeting(p UserProfile) string {
	via := ""
	if p.LoginType != "" {
		via = " via " + p.LoginType
	}
	switch p.SeenCount {
	case 1:
		return fmt.Sprintf("Welcome %s! This is your first login%s.", p.Name, via)
	case 2:
		return fmt.Sprintf("Nice to see you again, %s (login 2%s).", p.Name, via)
	case 3:
		return fmt.Sprintf("Third time is a charm, %s (login 3%s).", p.Name, via)
	default:
		return fmt.Sprintf("Welcome back %s: login %d%s, %s after the last one; first seen %s.",
			p.Name, p.SeenCount, via, (time.Duration(p.SinceLastMs) * time.Millisecond).String(),
			time.UnixMilli(p.FirstLoginMs).UTC().Format(time.RFC3339))
	}
}

func (f Functions) logf(format string, args ...any) {
	if f.Log != nil {
		f.Log.Printf(format, args...)
	}
}
