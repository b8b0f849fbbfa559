package sim

// Event kinds.
const (
	evSend        uint8 = iota // a user's think time is over: it sends a request
	evFinish                   // a backend answers the user's request
	evRefused                  // the user's connection attempt is refused
	evOn                       // the profile adds the user
	evOff                      // the profile removes the user
	evKill                     // the backend dies
	evRevive                   // the backend comes back
	evProbe                    // a proxy checks every backend
	evTick                     // health wrappers apply due transitions
	evCapacity                 // a backend's capacity changes: a neighbour arrives or leaves
	evStep                     // probing pickers turn their probe loop
	evProbeArrive              // a probe reaches its backend
	evProbeAnswer              // a probe's answer reaches its proxy
	evRefresh                  // pickers that weigh reports recompute their weights
	evAnswer                   // a backend's answer, crossing zones, reaches the user's proxy
	evTimeout                  // an attempt's timeout (Timeout): it ends if still under way
	evGiveUp                   // a user's ClientTimeout after its request began
	evHedge                    // a hedge is due, if the attempt still waits (Hedge)
	evUnavailable              // a backend's 503 answer to an attempt
	evStall                    // a backend stalls (token 1) or resumes (0)
	evStorm                    // a backend starts (token 1) or stops (0) answering 503
)

// event is one thing due at a virtual time. Events due at the same time run
// in the order they were scheduled (seq), which makes a run deterministic.
type event struct {
	at    int64 // virtual nanoseconds since the start
	seq   uint64
	arg   int32  // the user, backend or proxy
	token uint32 // for the events of an attempt: which; for evStall and evStorm: 1 to start, 0 to end
	kind  uint8
}

// queue holds the pending events and gives them back in (at, seq) order.
//
// Most events of a run are scheduled a constant delay after the current
// time: a user's next send (the think time), a refusal (RefuseTime), the
// answer of a backend with a fixed service time. Since the current time
// never goes back, the events of one such delay are scheduled in time
// order, and a first-in, first-out lane keeps them sorted at O(1) a push
// and a pop; the rest go to a binary heap. pop takes the earliest of the
// heap's top and the lanes' heads (a run has a handful of lanes), so the
// order is exactly the heap's alone: the same run gives the same result.
// With 100,000 users, a heap of every event sifts through 17 levels of a
// 3 MB array at each pop, where the lanes' pushes and pops are O(1)
// (BenchmarkSimulate measures the cost per simulated request; the
// package doc's "Cost").
type queue struct {
	heap  []event // a binary min-heap by (at, seq), written out for the concrete type: container/heap would box every event
	lanes []lane
	seq   uint64
	n     int // events in the heap and the lanes
}

// lane is a FIFO ring of events whose times never decrease.
type lane struct {
	buf  []event // len is a power of two, or zero
	head int
	n    int
	last int64 // the time of the last event pushed
}

// maxLanes bounds the lanes a queue is given: pop looks at every lane's
// head.
const maxLanes = 8

// addLane adds a lane and returns its index, or −1 when there are
// maxLanes already (the caller then pushes to the heap).
func (q *queue) addLane() int {
	if len(q.lanes) == maxLanes {
		return -1
	}
	q.lanes = append(q.lanes, lane{})
	return len(q.lanes) - 1
}

// len returns the number of pending events.
func (q *queue) len() int { return q.n }

// push schedules an event in the heap.
func (q *queue) push(at int64, kind uint8, arg int32, token uint32) {
	q.seq++
	q.n++
	q.heap = append(q.heap, event{at: at, seq: q.seq, arg: arg, token: token, kind: kind})
	i := len(q.heap) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !q.heap[i].before(&q.heap[p]) {
			break
		}
		q.heap[i], q.heap[p] = q.heap[p], q.heap[i]
		i = p
	}
}

// pushLane schedules an event in lane l, or in the heap when l is −1 or
// at is before the lane's last event (which would break its order).
func (q *queue) pushLane(l int, at int64, kind uint8, arg int32, token uint32) {
	if l < 0 || at < q.lanes[l].last {
		q.push(at, kind, arg, token)
		return
	}
	ln := &q.lanes[l]
	if ln.n == len(ln.buf) {
		ln.grow()
	}
	q.seq++
	q.n++
	ln.buf[(ln.head+ln.n)&(len(ln.buf)-1)] = event{at: at, seq: q.seq, arg: arg, token: token, kind: kind}
	ln.n++
	ln.last = at
}

// reserve makes room in lane l for n events, so that it need not grow
// while they are pushed.
func (q *queue) reserve(l, n int) {
	if ln := &q.lanes[l]; len(ln.buf) < n {
		ln.growTo(n)
	}
}

// grow doubles the ring, keeping the events in order.
func (l *lane) grow() { l.growTo(2 * len(l.buf)) }

// growTo makes the ring hold at least n events (a power of two, at least
// 64), keeping the events in order.
func (l *lane) growTo(n int) {
	size := 64
	for size < n {
		size *= 2
	}
	buf := make([]event, size)
	for i := range l.n {
		buf[i] = l.buf[(l.head+i)&(len(l.buf)-1)]
	}
	l.buf, l.head = buf, 0
}

// pop removes and returns the earliest event; the queue must not be
// empty.
func (q *queue) pop() event {
	var first *event
	from := -1 // the heap
	if len(q.heap) > 0 {
		first = &q.heap[0]
	}
	for i := range q.lanes {
		ln := &q.lanes[i]
		if ln.n == 0 {
			continue
		}
		if head := &ln.buf[ln.head]; first == nil || head.before(first) {
			first, from = head, i
		}
	}
	q.n--
	if from >= 0 {
		ln := &q.lanes[from]
		ev := *first
		ln.head = (ln.head + 1) & (len(ln.buf) - 1)
		ln.n--
		return ev
	}
	return q.popHeap()
}

// popHeap removes and returns the heap's earliest event.
func (q *queue) popHeap() event {
	top := q.heap[0]
	n := len(q.heap) - 1
	q.heap[0] = q.heap[n]
	q.heap = q.heap[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		c := l
		if r := l + 1; r < n && q.heap[r].before(&q.heap[l]) {
			c = r
		}
		if !q.heap[c].before(&q.heap[i]) {
			break
		}
		q.heap[i], q.heap[c] = q.heap[c], q.heap[i]
		i = c
	}
	return top
}

func (e *event) before(o *event) bool {
	return e.at < o.at || e.at == o.at && e.seq < o.seq
}
