package subset_test

import (
	"fmt"
	"log"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/leastconn"
	"github.com/lbkit/lbkit/subset"
)

// Each of three clients, numbered 0 to 2 (a StatefulSet's ordinals, say),
// talks to 2 of the 6 backends; together they cover every backend once.
func Example() {
	bs := balancer.Endpoints("10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080",
		"10.0.0.4:8080", "10.0.0.5:8080", "10.0.0.6:8080")
	for i := range 3 {
		s, err := subset.New(leastconn.New(), subset.Config{Size: 2, Index: i, Count: 3})
		if err != nil {
			log.Fatal(err)
		}
		if err := s.Update(bs); err != nil {
			log.Fatal(err)
		}
		fmt.Println(i, s.Subset())
	}
	// Output:
	// 0 [10.0.0.4:8080 10.0.0.6:8080]
	// 1 [10.0.0.2:8080 10.0.0.3:8080]
	// 2 [10.0.0.1:8080 10.0.0.5:8080]
}

// Rendezvous hashing needs no numbering: a client that names itself gets
// the same subset in every process; without a ClientID each process draws
// its own (gRFC A68's random subsetting). Health goes inside, so that only
// the subset is probed; Unwrap returns it, for its Drain.
func Example_rendezvous() {
	h, err := health.New(leastconn.New(), health.Config{})
	if err != nil {
		log.Fatal(err)
	}
	s, err := subset.New(h, subset.Config{Size: 2, ClientID: "frontend-7f9c"})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close() // closes health too
	bs := balancer.Endpoints("10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080", "10.0.0.4:8080")
	if err := s.Update(bs); err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.Subset())

	// A backend outside the subset leaves: the subset stays. One inside
	// it leaves: it alone is replaced.
	if err := s.Update([]balancer.Backend{bs[0], bs[2], bs[3]}); err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.Subset())
	if err := s.Update(bs[2:]); err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.Subset())
	// Output:
	// [10.0.0.1:8080 10.0.0.4:8080]
	// [10.0.0.1:8080 10.0.0.4:8080]
	// [10.0.0.3:8080 10.0.0.4:8080]
}
