package consistent_test

import (
	"errors"
	"fmt"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/consistent"
)

// Keys keep their backend when another backend leaves: only the keys of the
// one that left move. The mapping is the same in every process.
func Example() {
	r := consistent.NewRing()
	if err := r.Update(balancer.Endpoints("cache-a:11211", "cache-b:11211", "cache-c:11211", "cache-d:11211")); err != nil {
		panic(err)
	}
	users := []string{"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"}
	before := map[string]string{}
	for _, u := range users {
		b, _ := r.Pick(balancer.Request{Key: u})
		before[u] = b.ID()
		fmt.Println(u, "→", b.ID())
	}

	// cache-b leaves.
	_ = r.Update(balancer.Endpoints("cache-a:11211", "cache-c:11211", "cache-d:11211"))
	fmt.Println("after cache-b left:")
	for _, u := range users {
		b, _ := r.Pick(balancer.Request{Key: u})
		if b.ID() != before[u] {
			fmt.Println(u, "moved from", before[u], "to", b.ID())
		}
	}
	// Output:
	// alice → cache-c:11211
	// bob → cache-c:11211
	// carol → cache-d:11211
	// dave → cache-b:11211
	// erin → cache-d:11211
	// frank → cache-a:11211
	// grace → cache-c:11211
	// heidi → cache-d:11211
	// after cache-b left:
	// dave moved from cache-b:11211 to cache-c:11211
}

// A retry names the attempt: each retry of a key reaches the next distinct
// backend on the ring, the same one in every process.
func ExampleRing_Pick_retry() {
	r := consistent.NewRing()
	_ = r.Update(balancer.Endpoints("10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"))
	for attempt := range 4 {
		b, _ := r.Pick(balancer.Request{Key: "session-42", Attempt: attempt})
		fmt.Println(attempt, b.ID())
	}
	// Output:
	// 0 10.0.0.3:80
	// 1 10.0.0.2:80
	// 2 10.0.0.1:80
	// 3 10.0.0.3:80
}

// With bounded loads, a hot key fills its backend up to ⌈c·average⌉ and
// spills to the next backend on the ring, instead of overloading one.
func ExampleWithBoundedLoad() {
	r := consistent.NewRing(consistent.WithBoundedLoad(1.25))
	_ = r.Update(balancer.Endpoints("10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80"))
	inFlight := map[string]int{}
	var picked []balancer.Backend
	for range 12 { // 12 requests for one key, none finished yet
		b, _ := r.Pick(balancer.Request{Key: "hot-product"})
		inFlight[b.ID()]++
		picked = append(picked, b)
	}
	// The m-th request may go to a backend with fewer than ⌈1.25·m/4⌉ in
	// flight: 1 for the first three, so they went to the key's backend and
	// the next two clockwise; 2 for the next three; and so on up to 4 for the
	// twelfth. The three took turns and the fourth was never needed.
	fmt.Println(inFlight)
	for _, b := range picked { // every Pick needs its Done
		r.Done(b, balancer.Result{})
	}
	// Output:
	// map[10.0.0.2:80:4 10.0.0.3:80:4 10.0.0.4:80:4]
}

// Maglev looks a key up in one table read, and weights count: the
// weight-2 backend owns twice the slots of the others.
func ExampleNewMaglev() {
	m := consistent.NewMaglev()
	_ = m.Update([]balancer.Backend{
		balancer.NewEndpoint("10.0.0.1:80", 1),
		balancer.NewEndpoint("10.0.0.2:80", 2),
		balancer.NewEndpoint("10.0.0.3:80", 1),
	})
	count := map[string]int{}
	for i := range 10000 {
		b, _ := m.Pick(balancer.Request{Key: fmt.Sprint("user-", i)})
		count[b.ID()]++
	}
	fmt.Println(count)
	// Output:
	// map[10.0.0.1:80:2373 10.0.0.2:80:5007 10.0.0.3:80:2620]
}

// A backend with a hash key is placed by the key, not by its address: when
// cache-1's pod comes back on a new IP with the same key, it keeps its
// users. The ID, the new address, is what the pick returns.
func Example_hashKey() {
	r := consistent.NewRing()
	set := func(addr1 string) []balancer.Backend {
		return []balancer.Backend{
			balancer.NewEndpoint("10.0.0.10:6379", 1).WithHashKey("cache-0"),
			balancer.NewEndpoint(addr1, 1).WithHashKey("cache-1"),
			balancer.NewEndpoint("10.0.0.12:6379", 1).WithHashKey("cache-2"),
		}
	}
	users := []string{"alice", "bob", "carol", "dave", "erin", "frank"}
	_ = r.Update(set("10.0.0.11:6379"))
	for _, u := range users {
		b, _ := r.Pick(balancer.Request{Key: u})
		fmt.Println(u, "→", balancer.HashKeyOf(b), b.ID())
	}
	_ = r.Update(set("10.0.7.99:6379")) // cache-1 rescheduled
	fmt.Println("after cache-1 moved:")
	for _, u := range users {
		b, _ := r.Pick(balancer.Request{Key: u})
		fmt.Println(u, "→", balancer.HashKeyOf(b), b.ID())
	}
	// Two backends with one hash key are refused; the set stays.
	err := r.Update([]balancer.Backend{
		balancer.NewEndpoint("10.0.0.10:6379", 1).WithHashKey("cache-0"),
		balancer.NewEndpoint("10.0.0.13:6379", 1).WithHashKey("cache-0"),
	})
	fmt.Println(errors.Is(err, balancer.ErrDuplicateHashKey))
	// Output:
	// alice → cache-0 10.0.0.10:6379
	// bob → cache-1 10.0.0.11:6379
	// carol → cache-1 10.0.0.11:6379
	// dave → cache-2 10.0.0.12:6379
	// erin → cache-1 10.0.0.11:6379
	// frank → cache-0 10.0.0.10:6379
	// after cache-1 moved:
	// alice → cache-0 10.0.0.10:6379
	// bob → cache-1 10.0.7.99:6379
	// carol → cache-1 10.0.7.99:6379
	// dave → cache-2 10.0.0.12:6379
	// erin → cache-1 10.0.7.99:6379
	// frank → cache-0 10.0.0.10:6379
	// true
}
