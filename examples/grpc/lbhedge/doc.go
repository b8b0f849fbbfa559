// Package lbhedge hedges gRPC unary RPCs: a client interceptor that, when
// an RPC of an idempotent method has no answer after a delay, sends it
// again to another backend and takes the first answer, as gRFC A6's
// hedgingPolicy describes and grpc-go does not implement (grpc-go issue
// #2823). It follows lbhttp's hedging rules: the first answer wins and
// the other attempts are cancelled, each hedge spends a retry from an
// lbhttp.Budget (which lbhttp Transports may share), and the delay is a
// percentile of recent latencies from an lbhttp.Percentile sketch,
// between a floor and a ceiling.
//
//	h, err := lbhedge.New(lbhedge.Config{
//		Methods: []string{"/orders.Orders/Get", "/orders.Orders/List"},
//	})
//	if err != nil { ... }
//	lbpolicy.Register()
//	cc, err := grpc.NewClient("dns:///orders.internal:50051",
//		grpc.WithTransportCredentials(creds),
//		grpc.WithUnaryInterceptor(h.Unary),
//		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"lbkit_least_conn": {}}]}`))
//
// What a caller must do:
//
//   - Name the methods that may be hedged, in Config.Methods or with the
//     Config.Hedge predicate. Nothing is hedged unless named: a hedged
//     RPC may reach two servers, so only methods that can run twice
//     (reads, idempotent writes) belong there. New refuses a Config that
//     names none.
//   - Use one of lbpolicy's policies: each attempt carries an
//     lbpolicy.Attempt in its context, so the picker learns the
//     attempt's number and the endpoint to avoid (the one the attempt
//     before it was picked on), and records where it sent the attempt. A
//     hedge waits until the attempt before it has been picked: one still
//     waiting for a READY endpoint gets no hedge (it would wait in the
//     same queue, and could land on the same endpoint), and the timer
//     looks again one delay later. A hedge that could only go to the
//     endpoint to avoid (a set of one) is refused at the pick and not
//     sent. Under another policy nothing says where an attempt went, so
//     no hedge is sent: the interceptor then only adds its cost.
//   - Give RPCs a deadline: a hedge is not sent past it, nor at all when
//     the deadline falls before the delay ends.
//   - Keep gRPC's own retryPolicy if you have one: it retries inside each
//     attempt, under that attempt's context. Do not count on a service
//     config's hedgingPolicy: grpc-go does not implement it.
//
// # Defaults and their anchors
//
//	field          default                       anchor
//	MaxAttempts    2 (at most 5)                 gRFC A6 maxAttempts (capped at 5)
//	Percentile     95                            "The Tail at Scale" (Dean, Barroso 2013); lbhttp HedgePercentile
//	MinDelay       0 (floor); the fixed delay    gRFC A6 hedgingDelay
//	               when Percentile < 0
//	MaxDelay       none (ceiling)
//	NonFatalCodes  UNAVAILABLE                   gRFC A6 nonFatalStatusCodes
//	Budget         20% + 10/s over 10 s          Finagle RetryBudget; lbhttp.BudgetConfig
//
// # The race
//
// The first attempt runs on the caller's goroutine, with the caller's
// reply. Once the sketch has lbhttp.PercentileMinSamples latencies (until
// then no RPC is hedged), a timer set to the delay sends a hedge on its
// own goroutine, decoding into a fresh message of the reply's type, and
// another each delay after while fewer than MaxAttempts are out:
//
//   - an answer, OK or a fatal code (one not in NonFatalCodes), is the
//     RPC's: the other attempts are cancelled (their servers see their
//     contexts end) and a winning hedge's reply is copied into the
//     caller's (with its header, trailer and peer, for the grpc.Header,
//     grpc.Trailer and grpc.Peer options);
//   - a non-fatal failure leaves the RPC to the attempts still out and
//     sends the next hedge at once (A6), and if none is left to send or
//     out, the last failure is the RPC's;
//   - each hedge takes a retry from the budget first; when it says no,
//     that hedge and any later one of the RPC are not sent.
//
// The sketch is fed by every answer, and by every attempt that lost the
// race at the time it had waited (so that the slow answers hedging hides
// still hold the percentile up); not by fast non-fatal failures, nor by
// RPCs the caller cancelled. Every RPC of a hedged method counts as a
// request for the budget.
//
// TestHedgeTail runs two real servers on loopback, one of which answers
// one call in twenty at twenty times its usual latency, and measures the
// p99 of the same load with and without the interceptor (the 95th
// percentile, MaxDelay twice the servers' latency) in alternating rounds
// of one run: hedging cuts it at least threefold for at most 10% more
// RPCs, as the servers count them. Set MaxDelay where the client's own
// delays (a loaded machine, a garbage-collection pause) can push the
// percentile well above the servers' latency: without a ceiling the delay
// climbs with them, and hedges come too late to help.
//
// # Cost
//
// A method not named costs a map lookup (and the predicate, if any). A
// hedged method's RPC that answers before the delay (the common case)
// costs the budget's Request, a sketch Observe, a context.WithCancel and
// an lbpolicy.WithAttempt context, and a timer reset and stop on a race
// record taken from a sync.Pool. A hedge costs a goroutine (the timer's),
// a reply message, a copy of the call options and, if it wins, a
// proto.Merge into the caller's reply. BenchmarkUnary measures an
// unhedged fast call with and without the interceptor, over loopback and
// with a stand-in invoker; go test -run '^$' -bench . ./lbhedge/ runs it.
package lbhedge
