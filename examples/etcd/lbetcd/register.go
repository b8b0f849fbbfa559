package lbetcd

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/discovery"
)

// DefaultTTL is the lease TTL of a Registration: go-zero's discov
// registers its servers with a 10 s lease (TimeToLive); kratos's etcd
// registry uses 15 s. A backend that dies leaves the set at most this
// long after its last keep-alive.
const DefaultTTL = 10 * time.Second

// RegisterConfig says what a Registration writes.
type RegisterConfig struct {
	// Key is the key to write, under the Watchers' Prefix:
	// "/services/cart/10.0.0.1:8080". Required. One key per endpoint;
	// any name under the prefix will do, the address is in the value.
	Key string
	// Record is the endpoint. Its Address is required; Parse must take
	// it, or Register refuses it.
	Record Record
	// Format is how the value is written. Default JSON. Naming and Plain
	// carry the address (and, for Naming, Metadata) only: a record with
	// a weight, zone, priority or state is refused in them.
	Format Format
	// TTL is the lease's time to live, a whole number of seconds (etcd
	// grants leases in seconds), at least 1 s. Zero: DefaultTTL. etcd
	// raises a TTL below its minimum (1.5 × its election timeout, 2 s
	// with etcd's defaults) to that minimum.
	TTL time.Duration
	// Timeout bounds each request to etcd (grant, put, revoke). Zero:
	// DefaultTimeout.
	Timeout time.Duration
	// Backoff is the wait between two attempts to register again after
	// the lease was lost. Zero: gRPC's connection backoff, with its
	// jitter.
	Backoff discovery.Backoff
	// OnError, if set, is told of each lease lost and each failed attempt
	// to register again, from the Registration's goroutine, with no lock
	// held. It must not call Close.
	OnError func(error)
}

// Registration keeps a backend's key in etcd for as long as the process
// lives: the key is written under a lease that a keep-alive renews (every
// TTL/3, etcd's client), so that it goes when Close revokes the lease, or
// TTL after the process dies and its keep-alives stop. A lease lost while
// the process lives (it expired during a partition longer than TTL, or
// someone revoked it) is replaced: the Registration grants a new lease
// and writes the key again, retrying with Backoff's waits.
//
// A key deleted by someone else while the lease lives stays deleted: an
// operator who deletes it means the backend to leave.
//
// Create it with Register; all methods are safe for concurrent use.
type Registration struct {
	// Immutable after Register.
	client *clientv3.Client
	lessor clientv3.Lease // of its own: Close ends its goroutines
	cfg    RegisterConfig
	ttl    int64 // seconds

	// Guarded by mu.
	mu     sync.Mutex
	value  []byte // what the key holds
	lease  clientv3.LeaseID
	closed bool

	wmu    sync.Mutex // serialises the writes of the key
	cancel context.CancelFunc
	done   chan struct{}
}

// Register writes cfg.Record under cfg.Key with a lease of cfg.TTL, and
// keeps the lease alive until Close. ctx bounds this first registration
// only (with cfg.Timeout); the Registration then lives until Close. It
// returns an error wrapping ErrConfig or ErrBadRecord for a config it
// refuses, and etcd's error if the first registration fails (nothing is
// left running then).
func Register(ctx context.Context, client *clientv3.Client, cfg RegisterConfig) (*Registration, error) {
	switch {
	case client == nil:
		return nil, fmt.Errorf("%w: nil client", ErrConfig)
	case cfg.Key == "":
		return nil, fmt.Errorf("%w: empty Key", ErrConfig)
	case cfg.TTL < 0 || cfg.TTL%time.Second != 0 || (cfg.TTL > 0 && cfg.TTL < time.Second):
		return nil, fmt.Errorf("%w: TTL %v, want a whole number of seconds, at least 1 s (0 for %v)", ErrConfig, cfg.TTL, DefaultTTL)
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("%w: negative Timeout %v", ErrConfig, cfg.Timeout)
	case cfg.Backoff.Base < 0 || cfg.Backoff.Max < 0:
		return nil, fmt.Errorf("%w: Backoff.Base (%v) and Backoff.Max (%v) must not be negative", ErrConfig, cfg.Backoff.Base, cfg.Backoff.Max)
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	value, err := encode(cfg.Format, cfg.Record)
	if err != nil {
		return nil, fmt.Errorf("lbetcd: register %q: %w", cfg.Key, err)
	}
	r := &Registration{
		client: client,
		lessor: clientv3.NewLease(client),
		cfg:    cfg,
		ttl:    int64(cfg.TTL / time.Second),
		value:  value,
		done:   make(chan struct{}),
	}
	var run context.Context
	run, r.cancel = context.WithCancel(context.Background())
	ka, err := r.register(ctx, run)
	if err != nil {
		r.cancel()
		_ = r.lessor.Close()
		return nil, err
	}
	go r.run(run, ka)
	return r, nil
}

// register grants a lease, writes the key under it, and starts its
// keep-alive for as long as run lasts. ctx bounds the grant and the put.
// A lease it replaces is revoked (the key has left it already).
func (r *Registration) register(ctx, run context.Context) (<-chan *clientv3.LeaseKeepAliveResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	g, err := r.lessor.Grant(ctx, r.ttl)
	if err != nil {
		return nil, fmt.Errorf("lbetcd: register %q: grant: %w", r.cfg.Key, err)
	}
	r.wmu.Lock()
	r.mu.Lock()
	value := r.value
	r.mu.Unlock()
	_, err = r.client.Put(ctx, r.cfg.Key, string(value), clientv3.WithLease(g.ID))
	if err == nil {
		r.mu.Lock()
		old := r.lease
		r.lease = g.ID
		r.mu.Unlock()
		r.wmu.Unlock()
		if old != 0 {
			if err := r.revoke(old); err != nil {
				r.fail(fmt.Errorf("lbetcd: register %q: revoking lease %x, which the key left: %w (it expires within its TTL)", r.cfg.Key, int64(old), err))
			}
		}
	} else {
		r.wmu.Unlock()
		_ = r.revoke(g.ID) // it holds nothing; if this fails, it expires
		return nil, fmt.Errorf("lbetcd: register %q: put: %w", r.cfg.Key, err)
	}
	ka, err := r.lessor.KeepAlive(run, g.ID)
	if err != nil {
		return nil, fmt.Errorf("lbetcd: register %q: keep-alive: %w", r.cfg.Key, err)
	}
	return ka, nil
}

// revoke revokes a lease, best effort: one that is not revoked expires.
func (r *Registration) revoke(id clientv3.LeaseID) error {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeout)
	defer cancel()
	_, err := r.lessor.Revoke(ctx, id)
	return err
}

// run drains the keep-alive's answers until the lease is lost, then
// registers again, until ctx ends.
func (r *Registration) run(ctx context.Context, ka <-chan *clientv3.LeaseKeepAliveResponse) {
	defer close(r.done)
	for {
		for range ka {
		}
		// The channel closes when ctx ends, when etcd says the lease is
		// gone, and when no answer came for a TTL (etcd unreachable).
		if ctx.Err() != nil {
			return
		}
		r.mu.Lock()
		id := r.lease
		r.mu.Unlock()
		r.fail(fmt.Errorf("lbetcd: register %q: lease %x lost; registering again", r.cfg.Key, int64(id)))
		for n := 0; ; n++ {
			var err error
			if ka, err = r.register(ctx, ctx); err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			r.fail(err)
			if !sleep(ctx, r.cfg.Backoff.Delay(n)) {
				return
			}
		}
	}
}

func (r *Registration) fail(err error) {
	if r.cfg.OnError != nil {
		r.cfg.OnError(err)
	}
}

// Lease returns the ID of the lease the key is under now.
func (r *Registration) Lease() clientv3.LeaseID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lease
}

// Drain writes the record again with state "draining" (format JSON
// only), under the same lease: Watchers drain the endpoint, so that its
// requests in flight finish and no new ones start. Call it before a
// graceful shutdown, wait for the requests to finish, then Close. A
// registration made again after a lost lease writes the draining record.
// ctx bounds the write, with RegisterConfig.Timeout.
func (r *Registration) Drain(ctx context.Context) error {
	if r.cfg.Format != JSON {
		return fmt.Errorf("%w: drain %q: the %v format carries no state", ErrConfig, r.cfg.Key, r.cfg.Format)
	}
	rec := r.cfg.Record
	rec.State = "draining"
	value, err := encode(JSON, rec)
	if err != nil {
		return fmt.Errorf("lbetcd: drain %q: %w", r.cfg.Key, err)
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	r.wmu.Lock()
	defer r.wmu.Unlock()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return fmt.Errorf("lbetcd: drain %q: %w", r.cfg.Key, balancer.ErrClosed)
	}
	r.value = value
	id := r.lease
	r.mu.Unlock()
	if _, err := r.client.Put(ctx, r.cfg.Key, string(value), clientv3.WithLease(id)); err != nil {
		return fmt.Errorf("lbetcd: drain %q: %w", r.cfg.Key, err)
	}
	return nil
}

// Close stops the keep-alive, revokes the lease (which deletes the key at
// once), and waits for the Registration's goroutines. The revoke waits at
// most RegisterConfig.Timeout; if it fails (etcd unreachable), Close
// returns its error and the key goes when the lease expires, within TTL.
// A second Close returns nil.
func (r *Registration) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	<-r.done
	// After a Drain in flight, which would write the key again; no Drain
	// starts once closed is set.
	r.wmu.Lock()
	var err error
	if rerr := r.revoke(r.Lease()); rerr != nil {
		err = fmt.Errorf("lbetcd: close %q: revoke: %w", r.cfg.Key, rerr)
	}
	r.wmu.Unlock()
	_ = r.lessor.Close()
	return err
}
