package lbetcd_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/discovery"
	"github.com/lbkit/lbkit/examples/etcd/lbetcd"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name   string
		format lbetcd.Format
		value  string
		want   discovery.Endpoint
		is     error // nil: accepted
	}{
		{"json minimal", lbetcd.JSON, `{"address":"10.0.0.1:80"}`, discovery.Endpoint{Addr: "10.0.0.1:80"}, nil},
		{"json full", lbetcd.JSON, `{"address":"[::1]:80","weight":3,"zone":"a","priority":2,"state":"draining","metadata":{"v":"2"}}`,
			discovery.Endpoint{Addr: "[::1]:80", Weight: 3, Locality: balancer.Locality{Zone: "a", Priority: 2}, State: discovery.Draining, Labels: map[string]string{"v": "2"}}, nil},
		{"json unhealthy", lbetcd.JSON, `{"address":"10.0.0.1:80","state":"unhealthy"}`, discovery.Endpoint{Addr: "10.0.0.1:80", State: discovery.Unhealthy}, nil},
		{"json healthy spelled", lbetcd.JSON, `{"address":"10.0.0.1:80","state":"healthy"}`, discovery.Endpoint{Addr: "10.0.0.1:80"}, nil},
		{"json name", lbetcd.JSON, `{"address":"api.internal:80"}`, discovery.Endpoint{Addr: "api.internal:80"}, nil},
		{"json unknown field", lbetcd.JSON, `{"address":"10.0.0.1:80","ttl":5}`, discovery.Endpoint{Addr: "10.0.0.1:80"}, nil},
		{"json null weight", lbetcd.JSON, `{"address":"10.0.0.1:80","weight":null}`, discovery.Endpoint{Addr: "10.0.0.1:80"}, nil},
		{"json max weight", lbetcd.JSON, `{"address":"10.0.0.1:80","weight":1000000}`, discovery.Endpoint{Addr: "10.0.0.1:80", Weight: 1000000}, nil},
		{"json weight over", lbetcd.JSON, `{"address":"10.0.0.1:80","weight":1000001}`, discovery.Endpoint{}, balancer.ErrBadWeight},
		{"json negative weight", lbetcd.JSON, `{"address":"10.0.0.1:80","weight":-1}`, discovery.Endpoint{}, balancer.ErrBadWeight},
		{"json weight string", lbetcd.JSON, `{"address":"10.0.0.1:80","weight":"3"}`, discovery.Endpoint{}, lbetcd.ErrBadRecord},
		{"json negative priority", lbetcd.JSON, `{"address":"10.0.0.1:80","priority":-1}`, discovery.Endpoint{}, balancer.ErrBadLocality},
		{"json metadata number", lbetcd.JSON, `{"address":"10.0.0.1:80","metadata":{"a":1}}`, discovery.Endpoint{}, lbetcd.ErrBadRecord},
		{"json array", lbetcd.JSON, `[{"address":"10.0.0.1:80"}]`, discovery.Endpoint{}, lbetcd.ErrBadRecord},
		{"json string", lbetcd.JSON, `"10.0.0.1:80"`, discovery.Endpoint{}, lbetcd.ErrBadRecord},
		{"json trailing", lbetcd.JSON, `{"address":"10.0.0.1:80"} {}`, discovery.Endpoint{}, lbetcd.ErrBadRecord},
		{"json port 0", lbetcd.JSON, `{"address":"10.0.0.1:0"}`, discovery.Endpoint{}, balancer.ErrBadAddr},
		{"json no port", lbetcd.JSON, `{"address":"10.0.0.1"}`, discovery.Endpoint{}, balancer.ErrBadAddr},
		{"json url", lbetcd.JSON, `{"address":"http://10.0.0.1:80"}`, discovery.Endpoint{}, balancer.ErrBadAddr},

		{"naming", lbetcd.Naming, `{"Op":0,"Addr":"10.0.0.1:80","Metadata":{"v":"2","n":3,"o":{"x":1}}}`,
			discovery.Endpoint{Addr: "10.0.0.1:80", Labels: map[string]string{"v": "2", "n": "3", "o": `{"x":1}`}}, nil},
		{"naming no op", lbetcd.Naming, `{"Addr":"10.0.0.1:80"}`, discovery.Endpoint{Addr: "10.0.0.1:80"}, nil},
		{"naming metadata string", lbetcd.Naming, `{"Op":0,"Addr":"10.0.0.1:80","Metadata":"x"}`, discovery.Endpoint{Addr: "10.0.0.1:80"}, nil},
		{"naming delete", lbetcd.Naming, `{"Op":1,"Addr":"10.0.0.1:80"}`, discovery.Endpoint{}, lbetcd.ErrBadRecord},
		{"naming no addr", lbetcd.Naming, `{"Op":0}`, discovery.Endpoint{}, lbetcd.ErrBadRecord},
		{"naming bad addr", lbetcd.Naming, `{"Op":0,"Addr":"x"}`, discovery.Endpoint{}, balancer.ErrBadAddr},
		{"naming not json", lbetcd.Naming, `10.0.0.1:80`, discovery.Endpoint{}, lbetcd.ErrBadRecord},

		{"plain", lbetcd.Plain, "10.0.0.1:80", discovery.Endpoint{Addr: "10.0.0.1:80"}, nil},
		{"plain newline", lbetcd.Plain, "10.0.0.1:80\n", discovery.Endpoint{Addr: "10.0.0.1:80"}, nil},
		{"plain json", lbetcd.Plain, `{"address":"10.0.0.1:80"}`, discovery.Endpoint{}, balancer.ErrBadAddr},
		{"plain empty", lbetcd.Plain, "", discovery.Endpoint{}, lbetcd.ErrBadRecord},

		{"unknown format", lbetcd.Format(9), `{"address":"10.0.0.1:80"}`, discovery.Endpoint{}, lbetcd.ErrBadRecord},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := lbetcd.Parse(tc.format, []byte(tc.value))
			if tc.is != nil {
				require.ErrorIs(t, err, tc.is)
				assert.ErrorIs(t, err, lbetcd.ErrBadRecord)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// FuzzParse: no value makes Parse panic, and what it accepts is an
// endpoint discovery.Publisher takes.
func FuzzParse(f *testing.F) {
	for _, s := range []string{`{"address":"10.0.0.1:80","weight":3,"zone":"a","priority":2,"state":"draining","metadata":{"v":"2"}}`,
		`{"Op":0,"Addr":"[::1]:80","Metadata":{"n":3}}`, "10.0.0.1:80", "", "null", `{"address":1}`} {
		f.Add(uint8(0), s)
		f.Add(uint8(1), s)
		f.Add(uint8(2), s)
	}
	f.Fuzz(func(t *testing.T, format uint8, value string) {
		e, err := lbetcd.Parse(lbetcd.Format(format%4), []byte(value))
		if err != nil {
			if !assert.ErrorIs(t, err, lbetcd.ErrBadRecord) {
				t.FailNow()
			}
			return
		}
		pub, err := discovery.New(newRecorder(), discovery.Config{})
		require.NoError(t, err)
		_, err = pub.Publish([]discovery.Endpoint{e})
		require.NoError(t, err, "Parse accepted %q (%+v), Publish refused it", value, e)
	})
}
