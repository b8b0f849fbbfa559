package lbpolicy_test

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	lbk "github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/leastconn"
)

// recorderPolicy is registered by TestMain: leastconn, wrapped to record
// what Done is told, through lbpolicy.NewBuilder as a user would wrap a
// picker of their own.
const recorderPolicy = "lbkit_test_recorder"

// lastRecorder is the recorder the newest channel built. Tests run one at
// a time.
var lastRecorder atomic.Pointer[recorder]

// recorder is a leastconn picker that counts picks and keeps every Result
// given to Done.
type recorder struct {
	*leastconn.Picker
	picks atomic.Int64

	mu      sync.Mutex
	results []lbk.Result
	ids     []string
	sets    []string // each Update's IDs, sorted and joined
}

var (
	_ lbk.Balancer = (*recorder)(nil)
	_ lbk.Feedback = (*recorder)(nil)
)

func newRecorder() *recorder {
	r := &recorder{Picker: leastconn.New()}
	lastRecorder.Store(r)
	return r
}

func (r *recorder) Pick(req lbk.Request) (lbk.Backend, error) {
	b, err := r.Picker.Pick(req)
	if err == nil {
		r.picks.Add(1)
	}
	return b, err
}

func (r *recorder) Update(bs []lbk.Backend) error {
	ids := make([]string, len(bs))
	for i, b := range bs {
		ids[i] = b.ID()
	}
	slices.Sort(ids)
	r.mu.Lock()
	r.sets = append(r.sets, strings.Join(ids, ","))
	r.mu.Unlock()
	return r.Picker.Update(bs)
}

// updates returns a copy of the sets given to Update so far.
func (r *recorder) updates() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.sets...)
}

func (r *recorder) Done(b lbk.Backend, res lbk.Result) {
	r.mu.Lock()
	r.results = append(r.results, res)
	r.ids = append(r.ids, b.ID())
	r.mu.Unlock()
	r.Picker.Done(b, res)
}

// snapshot returns copies of the results and IDs so far.
func (r *recorder) snapshot() ([]lbk.Result, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]lbk.Result(nil), r.results...), append([]string(nil), r.ids...)
}
