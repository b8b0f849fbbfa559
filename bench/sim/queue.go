package sim

// Event kinds.
const (
	evSend    uint8 = iota // a user's think time is over: it sends a request
	evFinish               // a backend answers the user's request
	evRefused              // the user's connection attempt is refused
	evOn                   // the profile adds the user
	evOff                  // the profile removes the user
	evKill                 // the backend dies
	evRevive               // the backend comes back
	evProbe                // a proxy checks every backend
	evTick                 // health wrappers apply due transitions
)

// event is one thing due at a virtual time. Events due at the same time run
// in the order they were scheduled (seq), which makes a run deterministic.
type event struct {
	at    int64 // virtual nanoseconds since the start
	seq   uint64
	arg   int32  // the user, backend or proxy
	token uint32 // for evFinish and evRefused: the attempt it answers
	kind  uint8
}

// queue is a binary min-heap of events by (at, seq), written out for the
// concrete type: container/heap would box every event in an interface.
type queue struct {
	ev  []event
	seq uint64
}

func (q *queue) push(at int64, kind uint8, arg int32, token uint32) {
	q.seq++
	q.ev = append(q.ev, event{at: at, seq: q.seq, arg: arg, token: token, kind: kind})
	i := len(q.ev) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !q.ev[i].before(&q.ev[p]) {
			break
		}
		q.ev[i], q.ev[p] = q.ev[p], q.ev[i]
		i = p
	}
}

// pop removes and returns the earliest event; the queue must not be empty.
func (q *queue) pop() event {
	top := q.ev[0]
	n := len(q.ev) - 1
	q.ev[0] = q.ev[n]
	q.ev = q.ev[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		c := l
		if r := l + 1; r < n && q.ev[r].before(&q.ev[l]) {
			c = r
		}
		if !q.ev[c].before(&q.ev[i]) {
			break
		}
		q.ev[i], q.ev[c] = q.ev[c], q.ev[i]
		i = c
	}
	return top
}

func (e *event) before(o *event) bool {
	return e.at < o.at || e.at == o.at && e.seq < o.seq
}
