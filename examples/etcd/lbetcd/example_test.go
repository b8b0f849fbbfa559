package lbetcd_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/lbkit/lbkit/examples/etcd/lbetcd"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/lbhttp"
	"github.com/lbkit/lbkit/wrr"
)

// Two HTTP backends register themselves in etcd; a proxy watches their
// prefix and sends requests to them; a bad record is reported, not used.
// The etcd is embedded in the example, on loopback.
func Example() {
	endpoint, stop, err := startEtcd()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	ctx := context.Background()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cli.Close()

	// The backends: each writes its record under a lease it keeps alive.
	for _, name := range []string{"a", "b"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, name) }))
		defer srv.Close()
		addr := srv.Listener.Addr().String()
		reg, err := lbetcd.Register(ctx, cli, lbetcd.RegisterConfig{
			Key:    "/services/cart/" + name,
			Record: lbetcd.Record{Address: addr, Zone: "z1", Metadata: map[string]string{"name": name}},
		})
		if err != nil {
			fmt.Println(err)
			return
		}
		defer reg.Close()
	}

	// The proxy: health ▶ wrr, fed by a Watcher of the prefix.
	lb, err := health.New(wrr.New(), health.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lb.Close()
	syncs := make(chan lbetcd.Sync, 8)
	w, err := lbetcd.New(cli, lb, lbetcd.Config{Prefix: "/services/cart/", OnSync: func(s lbetcd.Sync) { syncs <- s }})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := w.Start(ctx); err != nil { // returns once the first set is in
		fmt.Println(err)
		return
	}
	defer w.Close()
	s := <-syncs
	fmt.Println("listed:", s.Keys, "keys,", len(s.Healthy), "healthy")

	proxy, err := lbhttp.NewProxy(lb, lbhttp.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	front := httptest.NewServer(proxy)
	defer front.Close()
	var answers []string
	for range 4 {
		resp, err := http.Get(front.URL)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answers = append(answers, string(body))
	}
	slices.Sort(answers)
	fmt.Println("answers:", answers)

	// A record that is no endpoint is skipped, and reported.
	if _, err := cli.Put(ctx, "/services/cart/c", `{"address":"10.0.0.3:8080","weight":-1}`); err != nil {
		fmt.Println(err)
		return
	}
	s = <-syncs
	fmt.Println("keys:", s.Keys, "healthy:", len(s.Healthy))
	for _, p := range s.Problems {
		fmt.Println("problem:", p)
	}
	// Output:
	// listed: 2 keys, 2 healthy
	// answers: [a a b b]
	// keys: 3 healthy: 2
	// problem: /services/cart/c: lbetcd: bad record: balancer: weight out of range: -1, want 1 to 1000000 (0 or left out for 1)
}

// startEtcd starts an etcd in a temporary directory, on free loopback
// ports, and returns its client address and a function that stops it
// and removes the directory.
func startEtcd() (string, func(), error) {
	dir, err := os.MkdirTemp("", "lbetcd-example-")
	if err != nil {
		return "", nil, err
	}
	port := func() (int, error) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port, nil
	}
	cp, err1 := port()
	pp, err2 := port()
	if err1 != nil || err2 != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("ports: %v, %v", err1, err2)
	}
	client := url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(cp)}
	peer := url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(pp)}
	cfg := embed.NewConfig()
	cfg.Name = "example"
	cfg.Dir = dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		e.Close()
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("etcd not ready in 60 s")
	}
	return client.Host, func() { e.Close(); os.RemoveAll(dir) }, nil
}
