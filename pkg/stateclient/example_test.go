package stateclient_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/statefun-go/statefun/pkg/stateclient"
)

// Read a counter, add one, and write it back only if nobody wrote it in
// between.
func Example() {
	ctx := context.Background()
	c, err := stateclient.New("http://127.0.0.1:8070", stateclient.WithToken("my-token"))
	if err != nil {
		log.Fatal(err)
	}
	bob := stateclient.Address{Namespace: "example", Type: "person", ID: "Bob/Smith"}
	v, err := c.Get(ctx, bob, "visits", "text/plain")
	if stateclient.IsNotFound(err) {
		fmt.Println("no visits yet")
		return
	} else if err != nil {
		log.Fatal(err)
	}
	var n int
	fmt.Sscan(string(v.Bytes), &n)
	rc, err := c.Put(ctx, bob, "visits", fmt.Appendf(nil, "%d", n+1), "text/plain",
		stateclient.PutOptions{IfMatch: v.Version, Reason: "manual correction"})
	var p *stateclient.ProblemError
	switch {
	case stateclient.IsPreconditionFailed(err) && errors.As(err, &p):
		fmt.Println("changed meanwhile; now at version", p.CurrentVersion)
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Println("written as version", rc.Version, "by mutation", rc.Mutation)
	}
}

// Page through the ids of a type.
func ExampleClient_AllIDs() {
	c, _ := stateclient.New("http://127.0.0.1:8070")
	for id, err := range c.AllIDs(context.Background(), stateclient.TypeName{Namespace: "example", Type: "person"}, "", "", 0) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(id)
	}
}
