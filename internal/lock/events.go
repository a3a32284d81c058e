package lock

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The event stream. Every lifecycle event (acquired, reentered, released,
// expired, force_released; never a renewal, never a token) is also
// appended to one shared, capped Redis stream by the script that records
// it, in the same call: `lockd:events` (MAXLEN ~ Options.EventsMax). Its
// entry IDs are the IDs of GET /v1/events (Last-Event-ID), and webhooks read
// it through a consumer group (internal/webhook).
//
// On a Cluster a script may only write keys of its own slot, so it appends
// to its slot's outbox (`lockd:{<slot tag>}:events`) instead, and the
// sweeper that holds a master's sweeper lease (expiry.go) moves the
// outboxes' events of that master into the shared stream
// (`lockd:{events}:all`) every sweep: XADD there, then XDEL from the outbox.
// A sweeper that dies between the two leaves the events in the outbox and
// the next one moves them again: delivery is at least once, an event may
// appear twice (with the same key, type, fence and at). Events of one key
// stay in order; events of different slots reach the stream in the order
// the sweeps find them, within a sweep (250 ms) of each other.

// Change is one lifecycle event of the event stream.
type Change struct {
	// ID is the event's stream entry ID ("<ms>-<seq>"), increasing.
	ID       string
	Type     string
	Resource Resource
	At       time.Time
	Owner    string
	Fence    int64
	TTL      time.Duration
	Count    int
	Actor    string
	Reason   string
	// Set is the size of the lock set an "acquired" event granted the
	// key with (0: a lone grant).
	Set int
}

// ErrBadEventID is a Last-Event-ID that is not a stream ID.
var ErrBadEventID = errors.New("lock: not an event ID (<ms>-<seq>)")

// ValidEventID reports whether id is an event ID as the stream hands them
// out: "<ms>-<seq>", two decimal numbers that fit in 64 bits each, as
// Redis stream IDs do. Subscribe refuses any other with ErrBadEventID.
func ValidEventID(id string) bool {
	_, _, ok := parseStreamID(id)
	return ok
}

// Reset is the Type of the Change that Next returns in place of events a
// subscriber cannot have. Its Reason says why (ResetTrimmed, ResetTooFar)
// and its ID is where the subscription goes on from: the end of the stream
// at that moment. The subscriber has missed events: it reads again the
// state it keeps (lists the locks), then applies the events that follow.
const Reset = "reset"

// The Reasons of a Reset.
const (
	// ResetTrimmed: the stream no longer holds every event after the
	// Last-Event-ID; it trimmed some (Options.EventsMax newer events came).
	ResetTrimmed = "trimmed"
	// ResetTooFar: more than Options.EventsResumeMax events came after the
	// Last-Event-ID; those after the window are skipped.
	ResetTooFar = "too_far"
)

// DefaultEventsResumeMax is the default resume window: a reconnect after a
// blip, a restart or a rolling deploy is well within it, and a resume from
// far back costs Redis at most 21 XRANGE calls of 500 entries (about 1/10
// of a full 100,000-event stream), whatever the reader's prefix.
const DefaultEventsResumeMax = 10_000

// resumePage is how many events one XRANGE of a catch-up reads.
const resumePage = 500

// ErrTooSlow ends a subscription whose reader fell too far behind; it may
// subscribe again after the last event it read.
var ErrTooSlow = errors.New("lock: event reader too slow")

// EventStream is the Redis key of the shared event stream.
func (e *Engine) EventStream() string { return e.n.eventStream() }

// EventClient is the Redis client that reaches the event stream (for the
// webhook outbox's consumer group).
func (e *Engine) EventClient() redis.Cmdable { return e.n.st.Cmd() }

// eventStream is the Redis key of the node's shared event stream.
func (n *node) eventStream() string { return eventStreamKey(n.st.Sharded()) }

// relay moves the outbox events one Cluster sweep returned ({bucket,
// {id, fields}}, flat) into the shared stream.
func (n *node) relay(ctx context.Context, v any) error {
	l, _ := v.([]any)
	if len(l) == 0 {
		return nil
	}
	stream := n.eventStream()
	done := map[string][]string{}
	held, err := n.heldBack(ctx, l)
	if err != nil {
		return err
	}
	_, err = n.st.Cmd().Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := 0; i+1 < len(l); i += 2 {
			bucket, _ := l[i].(string)
			entry, _ := l[i+1].([]any)
			if len(entry) != 2 || held[bucket] != 0 && i >= held[bucket]-1 {
				continue
			}
			id, _ := entry[0].(string)
			fields, _ := entry[1].([]any)
			p.XAdd(ctx, &redis.XAddArgs{Stream: stream, MaxLen: int64(n.opts.EventsMax), Approx: true, Values: fields})
			done[bucket] = append(done[bucket], id)
		}
		return nil
	})
	if err != nil {
		return err
	}
	_, err = n.st.Cmd().Pipelined(ctx, func(p redis.Pipeliner) error {
		for bucket, ids := range done {
			p.XDel(ctx, bucket+"events", ids...)
		}
		return nil
	})
	return err
}

// ReadEvents returns up to count events after the event with ID after
// ("" or "0": from the oldest kept), oldest first.
func (e *Engine) ReadEvents(ctx context.Context, after string, count int) ([]Change, error) {
	return e.n.readEvents(ctx, after, count)
}

// readEvents runs XRANGE on the event stream: ReadEvents.
func (n *node) readEvents(ctx context.Context, after string, count int) ([]Change, error) {
	start := "-"
	if after != "" && after != "0" {
		if !ValidEventID(after) {
			return nil, ErrBadEventID
		}
		start = "(" + after
	}
	ctx, cancel := n.bound(ctx)
	defer cancel()
	msgs, err := n.st.Cmd().XRangeN(ctx, n.eventStream(), start, "+", int64(count)).Result()
	if err != nil {
		return nil, wrap("events", err)
	}
	out := make([]Change, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, changeOf(m))
	}
	return out, nil
}

// streamEnd reads, in one O(1) call, the ID of the newest event the
// stream has had (last, "0-0" for none) and the ID a resume must not start
// before (since, "0-0" when any will do): a resume from before since may
// have missed events the stream no longer keeps.
func (n *node) streamEnd(ctx context.Context) (last, since string, err error) {
	ctx, cancel := n.bound(ctx)
	defer cancel()
	info, err := n.st.Cmd().XInfoStream(ctx, n.eventStream()).Result()
	if err != nil {
		if isReply(err, "ERR no such key") {
			return "0-0", "0-0", nil // no event yet (or Redis lost them all)
		}
		return "", "", wrap("events", err)
	}
	last = cmp.Or(info.LastGeneratedID, "0-0")
	// XDEL records the newest ID it deleted; trimming (MAXLEN) does not
	// (Redis 7.0), but it only ever drops the oldest events, so the stream
	// lost some when it has fewer than were added: then a resume from
	// before the oldest kept may have missed some. Redis before 7.0 does
	// not count what was added (0): it may have.
	since = cmp.Or(info.MaxDeletedEntryID, "0-0")
	if info.EntriesAdded == 0 || info.EntriesAdded > info.Length {
		oldest := info.FirstEntry.ID
		if oldest == "" {
			oldest = last // it lost every event it had
		}
		if idAfter(oldest, since) {
			since = oldest
		}
	}
	return last, since, nil
}

// ChangeOf reads one entry of the event stream (for readers of the stream
// that use their own commands, such as the webhook outbox's consumer group).
func ChangeOf(m redis.XMessage) Change { return changeOf(m) }

func changeOf(m redis.XMessage) Change {
	f := func(k string) string { s, _ := m.Values[k].(string); return s }
	return Change{
		ID: m.ID, Type: f("type"), Resource: resourceOf(f("key")), Owner: f("owner"), Actor: f("actor"), Reason: f("reason"),
		At:    time.UnixMilli(atoi(f("at"))).UTC(),
		Fence: atoi(f("fence")), TTL: time.Duration(atoi(f("ttl_ms"))) * time.Millisecond, Count: int(atoi(f("count"))),
		Set: int(atoi(f("set"))),
	}
}

// idAfter reports whether stream ID a comes after b.
func idAfter(a, b string) bool {
	am, as, _ := parseStreamID(a)
	bm, bs, _ := parseStreamID(b)
	return am > bm || am == bm && as > bs
}

// feed tails the event stream for this process's subscribers: one
// blocking XREAD at a time however many read, and none while nobody does.
type feed struct {
	n *node

	mu      sync.Mutex
	subs    map[*Subscription]struct{}
	running bool
	last    string // the newest ID the tail has read
	closed  bool

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// subBuffer is how many events a subscriber may lag behind the tail before
// it is dropped (ErrTooSlow). Its channel holds pointers to events that
// every subscriber shares: a channel of Change values (152 bytes each)
// would take 152 KiB per subscriber at subscribe time, 180 MiB for the
// default caps of event streams and live dashboard pages, most of a pod's
// memory limit before a single event.
const subBuffer = 1024

func newFeed(n *node) *feed {
	ctx, cancel := context.WithCancel(context.Background())
	return &feed{n: n, subs: map[*Subscription]struct{}{}, ctx: ctx, cancel: cancel}
}

func (f *feed) close() {
	f.mu.Lock()
	f.closed = true
	for s := range f.subs {
		close(s.c)
		delete(f.subs, s)
	}
	f.mu.Unlock()
	f.cancel()
	f.wg.Wait()
}

// Subscription reads the event stream from a point on; see Subscribe.
type Subscription struct {
	f       *feed
	c       chan *Change // shared with every other subscriber: never written
	last    string       // the last ID handed out
	backlog []Change     // read from the stream, not yet handed out
	catchUp bool         // the stream may hold events after last not yet read
	window  int          // how many more events the catch-up may read
	reset   string       // when set, the Reason of a Reset to hand out next
	dropped bool
	read    int            // events the catch-up has read so far
	caught  func(read int) // told once the catch-up is over (OnCatchUp)
}

// MaxRead is the most events the catch-up may still read from the stream:
// 0 when there is none (no Last-Event-ID, or one the stream has trimmed).
// A resume's reads are its cost in Redis, whatever the caller then keeps
// of them.
func (s *Subscription) MaxRead() int {
	if !s.catchUp {
		return 0
	}
	return s.window + 1
}

// OnCatchUp has f told, once the catch-up has made its last read, how many
// events it read in all; never if it had none to make (MaxRead 0), or when
// the subscription is closed first. Set it before the first Next.
func (s *Subscription) OnCatchUp(f func(read int)) { s.caught = f }

// Subscribe follows the event stream: the events after the one with ID
// after (a Last-Event-ID), or with after "" those from now on. Close it
// when done.
//
// A resume reads a bounded part of the stream, whatever the caller then
// keeps of it: at most Options.EventsResumeMax events (plus one, to tell
// whether more follow). When the stream trimmed events after after, Next
// first returns a Reset (ResetTrimmed), having read nothing; when more
// than the window follow after, it returns those of the window, then a
// Reset (ResetTooFar). Either way the subscription then goes on from the
// end of the stream: a subscriber is never left to think it missed
// nothing.
func (e *Engine) Subscribe(ctx context.Context, after string) (*Subscription, error) {
	if after != "" && !ValidEventID(after) {
		return nil, ErrBadEventID
	}
	// "From now on" is the stream's end now, not where the tail has got
	// to: a tail that lags would hand a new reader events of the past.
	now, since, err := e.n.streamEnd(ctx)
	if err != nil {
		return nil, err
	}
	f := e.feed
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, ErrClosed
	}
	if !f.running {
		f.last, f.running = now, true
		f.wg.Add(1)
		go f.tail()
	}
	s := &Subscription{f: f, c: make(chan *Change, subBuffer), last: after, catchUp: after != "", window: e.n.opts.EventsResumeMax}
	switch {
	case after == "":
		s.last = now
	case idAfter(since, after):
		s.catchUp, s.reset = false, ResetTrimmed
	}
	f.subs[s] = struct{}{}
	return s, nil
}

// Next returns the next event, waiting for one until ctx ends.
func (s *Subscription) Next(ctx context.Context) (Change, error) {
	for {
		if len(s.backlog) > 0 {
			c := s.backlog[0]
			s.backlog = s.backlog[1:]
			s.last = c.ID
			return c, nil
		}
		if s.reset != "" {
			now, _, err := s.f.n.streamEnd(ctx)
			if err != nil {
				return Change{}, err
			}
			c := Change{ID: now, Type: Reset, Reason: s.reset}
			s.last, s.reset = now, ""
			return c, nil
		}
		if s.catchUp {
			// One more than the window has left tells whether more follow.
			n := min(resumePage, s.window+1)
			got, err := s.f.n.readEvents(ctx, s.last, n)
			if err != nil {
				return Change{}, err
			}
			s.read += len(got)
			if len(got) > s.window {
				got, s.reset = got[:s.window], ResetTooFar
			}
			s.window -= len(got)
			s.backlog, s.catchUp = got, s.reset == "" && len(got) == n
			if !s.catchUp && s.caught != nil {
				s.caught(s.read)
			}
			continue
		}
		select {
		case c, ok := <-s.c:
			if !ok {
				if s.dropped {
					return Change{}, ErrTooSlow
				}
				return Change{}, ErrClosed
			}
			if s.last != "" && !idAfter(c.ID, s.last) {
				continue // already read from the stream while catching up
			}
			s.last = c.ID
			return *c, nil
		case <-ctx.Done():
			return Change{}, ctx.Err()
		}
	}
}

// Close ends the subscription.
func (s *Subscription) Close() {
	f := s.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.subs[s]; ok {
		delete(f.subs, s)
		close(s.c)
	}
}

// tail reads the stream with blocking XREADs and hands every event to every
// subscriber, until none is left.
func (f *feed) tail() {
	defer f.wg.Done()
	backoff := 50 * time.Millisecond
	for {
		f.mu.Lock()
		if len(f.subs) == 0 || f.closed {
			f.running = false
			f.mu.Unlock()
			return
		}
		last := f.last
		f.mu.Unlock()
		res, err := f.n.st.Cmd().XRead(f.ctx, &redis.XReadArgs{
			Streams: []string{f.n.eventStream(), last}, Count: 500, Block: 2 * time.Second,
		}).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			if f.ctx.Err() != nil {
				f.mu.Lock()
				f.running = false
				f.mu.Unlock()
				return
			}
			select {
			case <-time.After(backoff):
			case <-f.ctx.Done():
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		f.mu.Lock()
		for _, st := range res {
			for _, m := range st.Messages {
				c := new(Change)
				*c = changeOf(m)
				f.last = m.ID
				for s := range f.subs {
					select {
					case s.c <- c:
					default:
						// Never block the tail on one slow reader.
						s.dropped = true
						close(s.c)
						delete(f.subs, s)
					}
				}
			}
		}
		f.mu.Unlock()
	}
}
