package lock

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// noticeKind says what a notice tells the hub.
type noticeKind int

const (
	// noticeMessage: a message on a channel (released, expired, renewed:…).
	noticeMessage noticeKind = iota
	// noticeSubscribed: Redis confirmed a subscription to the channel;
	// messages before it may have been missed.
	noticeSubscribed
	// noticeReset: the subscription moved (reconnect, failover, slot
	// migration); any channel may have missed messages.
	noticeReset
)

type notice struct {
	kind    noticeKind
	channel string
	payload string
}

// subscription is a process's wake-up subscription, one channel per key
// that has local waiters. It follows the topology by itself: after a move
// it delivers noticeReset, and the hub re-checks every waiting key.
type subscription interface {
	Subscribe(ctx context.Context, channel string) error
	Unsubscribe(ctx context.Context, channels ...string) error
	Notices() <-chan notice
	Close() error
}

// nodeSubscription is one pub/sub connection to one server. With Sentinel
// it also watches which server is master and, when that changes, moves the
// subscription there: go-redis reconnects a broken pub/sub connection to the
// new master, but after a graceful failover the old connection stays open
// on the old master, which is not demoted for seconds, and every wake-up
// published on the new master meanwhile would be lost.
type nodeSubscription struct {
	rdb      redis.UniversalClient
	sentinel *Sentinel
	out      chan notice

	mu     sync.Mutex
	ps     *redis.PubSub
	wanted map[string]bool

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newNodeSubscription(rdb redis.UniversalClient, sentinel *Sentinel) *nodeSubscription {
	ctx, cancel := context.WithCancel(context.Background())
	n := &nodeSubscription{
		rdb: rdb, sentinel: sentinel, out: make(chan notice, 256),
		wanted: map[string]bool{}, ctx: ctx, cancel: cancel,
	}
	n.ps = rdb.Subscribe(ctx)
	n.wg.Add(1)
	go n.receive(n.ps)
	if sentinel != nil {
		n.wg.Add(1)
		go n.watchMaster()
	}
	return n
}

func (n *nodeSubscription) Notices() <-chan notice { return n.out }

func (n *nodeSubscription) Subscribe(ctx context.Context, channel string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.wanted[channel] = true
	return n.ps.Subscribe(ctx, channel)
}

func (n *nodeSubscription) Unsubscribe(ctx context.Context, channels ...string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, c := range channels {
		delete(n.wanted, c)
	}
	return n.ps.Unsubscribe(ctx, channels...)
}

func (n *nodeSubscription) Close() error {
	n.cancel()
	n.mu.Lock()
	err := n.ps.Close()
	n.mu.Unlock()
	n.wg.Wait()
	return err
}

// receive pumps one PubSub's messages until it is closed. go-redis
// reconnects and resubscribes after an error; the confirmations that follow
// tell the hub to re-check those keys.
func (n *nodeSubscription) receive(ps *redis.PubSub) {
	defer n.wg.Done()
	pump(n.ctx, ps, n.out, nil)
}

// pump forwards a PubSub's messages as notices until ctx ends or the PubSub
// is closed.
func pump(ctx context.Context, ps *redis.PubSub, out chan<- notice, broken func()) {
	backoff := 50 * time.Millisecond
	for {
		msg, err := ps.ReceiveTimeout(ctx, 30*time.Second)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, redis.ErrClosed) {
				return
			}
			if isTimeout(err) {
				// Quiet connection: a PING finds out whether it is dead.
				_ = ps.Ping(ctx)
				continue
			}
			if broken != nil {
				broken()
			}
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		var nt notice
		switch m := msg.(type) {
		case *redis.Subscription:
			switch m.Kind {
			case "subscribe", "ssubscribe":
				nt = notice{kind: noticeSubscribed, channel: m.Channel}
			case "sunsubscribe":
				// Redis dropped a sharded subscription (its slot moved);
				// the owner re-homes it.
				nt = notice{kind: noticeReset, channel: m.Channel}
			default:
				continue
			}
		case *redis.Message:
			nt = notice{kind: noticeMessage, channel: m.Channel, payload: m.Payload}
		default:
			continue
		}
		select {
		case out <- nt:
		case <-ctx.Done():
			return
		}
	}
}

// watchMaster asks the sentinels which server is master every
// masterPoll, and moves the subscription when it changed.
func (n *nodeSubscription) watchMaster() {
	defer n.wg.Done()
	t := time.NewTicker(masterPoll)
	defer t.Stop()
	last := ""
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		addr, err := n.masterAddr()
		if err != nil || addr == "" {
			continue
		}
		if last != "" && addr != last {
			n.move()
		}
		last = addr
	}
}

// masterPoll is how often lockd asks the sentinels for the master: a
// wake-up published on a new master is heard at most this much later
// (the PTTL timer stays as the fallback).
const masterPoll = 250 * time.Millisecond

func (n *nodeSubscription) masterAddr() (string, error) {
	return masterAddr(n.ctx, n.sentinel)
}

// move replaces the PubSub by a new one on the current master, subscribed
// to every wanted channel, and tells the hub to re-check every key.
func (n *nodeSubscription) move() {
	n.mu.Lock()
	old := n.ps
	channels := make([]string, 0, len(n.wanted))
	for c := range n.wanted {
		channels = append(channels, c)
	}
	n.ps = n.rdb.Subscribe(n.ctx, channels...)
	n.wg.Add(1)
	go n.receive(n.ps)
	n.mu.Unlock()
	_ = old.Close()
	select {
	case n.out <- notice{kind: noticeReset}:
	case <-n.ctx.Done():
	}
}

// clusterSubscription keeps one sharded pub/sub connection per master and
// each channel on the master that owns its slot. go-redis pins a PubSub to
// one node and does not follow a slot that moves, so this type does: it
// re-homes a channel when Redis drops it (sunsubscribe) and when the slot
// map says its owner changed (checked every slotPoll).
type clusterSubscription struct {
	rdb *redis.ClusterClient
	out chan notice

	mu     sync.Mutex
	byNode map[string]*redis.PubSub // master address → its PubSub
	home   map[string]string        // channel → master address
	// placed holds the channels whose SSUBSCRIBE Redis has not confirmed
	// yet, and since when: a node that does not own the slot yet (a
	// replica being promoted) answers MOVED instead, and the channel must
	// be placed again.
	placed map[string]time.Time
	moved  chan struct{}

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

const (
	slotPoll  = 500 * time.Millisecond
	slotHurry = 20 * time.Millisecond
	// unconfirmedAfter is how long a placed channel may wait for Redis's
	// confirmation before it is placed again.
	unconfirmedAfter = 200 * time.Millisecond
)

func newClusterSubscription(rdb *redis.ClusterClient) *clusterSubscription {
	ctx, cancel := context.WithCancel(context.Background())
	c := &clusterSubscription{
		rdb: rdb, out: make(chan notice, 256),
		byNode: map[string]*redis.PubSub{}, home: map[string]string{}, placed: map[string]time.Time{},
		moved: make(chan struct{}, 1), ctx: ctx, cancel: cancel,
	}
	c.wg.Add(1)
	go c.watch()
	return c
}

func (c *clusterSubscription) Notices() <-chan notice { return c.out }

func (c *clusterSubscription) Subscribe(ctx context.Context, channel string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.home[channel] = ""
	return c.place(ctx, channel)
}

// place subscribes channel on its slot's master. Called with c.mu.
func (c *clusterSubscription) place(ctx context.Context, channel string) error {
	node, err := c.rdb.MasterForKey(ctx, channel)
	if err != nil {
		return err
	}
	return c.placeOn(ctx, channel, node.Options().Addr)
}

// placeOn subscribes channel on the node at addr. Called with c.mu.
func (c *clusterSubscription) placeOn(ctx context.Context, channel, addr string) error {
	if old := c.home[channel]; old != "" && old != addr {
		if ps := c.byNode[old]; ps != nil {
			_ = ps.SUnsubscribe(ctx, channel)
		}
	}
	ps := c.byNode[addr]
	if ps == nil {
		node, err := c.nodeAt(ctx, addr)
		if err != nil {
			return err
		}
		// A plain client's PubSub stays on that node.
		ps = node.Subscribe(c.ctx)
		c.byNode[addr] = ps
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.pumpNode(ps)
		}()
	}
	c.home[channel] = addr
	c.placed[channel] = time.Now()
	return ps.SSubscribe(ctx, channel)
}

// pumpNode forwards one master's messages; a dropped channel is re-homed.
func (c *clusterSubscription) pumpNode(ps *redis.PubSub) {
	out := make(chan notice, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		// A broken connection may mean its master died: look for the
		// new owners at once.
		pump(c.ctx, ps, out, c.kick)
	}()
	for {
		select {
		case nt := <-out:
			if nt.kind == noticeReset {
				c.kick()
				continue
			}
			if nt.kind == noticeSubscribed {
				c.mu.Lock()
				delete(c.placed, nt.channel)
				c.mu.Unlock()
			}
			select {
			case c.out <- nt:
			case <-c.ctx.Done():
				return
			}
		case <-done:
			return
		}
	}
}

func (c *clusterSubscription) unconfirmed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.placed) > 0
}

func (c *clusterSubscription) kick() {
	select {
	case c.moved <- struct{}{}:
	default:
	}
}

// watch re-homes channels whose slot moved, found by a fresh slot map
// every slotPoll, or every slotHurry for a while after Redis dropped a
// subscription: go-redis reloads the slot map in the background, so the
// new owner shows a moment later.
func (c *clusterSubscription) watch() {
	defer c.wg.Done()
	t := time.NewTimer(slotPoll)
	defer t.Stop()
	var hurry time.Time
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		case <-c.moved:
			hurry = time.Now().Add(2 * time.Second)
		}
		c.rdb.ReloadState(c.ctx)
		if c.rehome() {
			select {
			case c.out <- notice{kind: noticeReset}:
			case <-c.ctx.Done():
				return
			}
		}
		next := slotPoll
		if time.Now().Before(hurry) || c.unconfirmed() {
			next = slotHurry
		}
		t.Reset(next)
	}
}

// rehome moves every channel whose owner changed and drops PubSubs of
// nodes that own none; it reports whether anything moved. It asks the
// nodes for the slot map (CLUSTER SLOTS) rather than trust go-redis's copy,
// which go-redis reloads in the background, at most every 200 ms, from a
// random node that may be the dead one. (CLUSTER SHARDS: Redis 7, as
// SPUBLISH is.)
func (c *clusterSubscription) rehome() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.home) == 0 && len(c.byNode) == 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(c.ctx, time.Second)
	defer cancel()
	slots := c.freshSlots(ctx)
	moved := false
	for ch, addr := range c.home {
		owner := ownerIn(slots, slotOf(ch))
		if owner == "" {
			node, err := c.rdb.MasterForKey(ctx, ch)
			if err != nil {
				continue
			}
			owner = node.Options().Addr
		}
		since, unconfirmed := c.placed[ch]
		if owner != addr || (unconfirmed && time.Since(since) > unconfirmedAfter) {
			if err := c.placeOn(ctx, ch, owner); err == nil {
				moved = true
			}
		}
	}
	used := map[string]bool{}
	for _, addr := range c.home {
		used[addr] = true
	}
	for addr, ps := range c.byNode {
		if !used[addr] {
			_ = ps.Close()
			delete(c.byNode, addr)
		}
	}
	return moved
}

// freshSlots asks the nodes, one after another, for the slot map, and
// returns the first answer (nil if none answers).
func (c *clusterSubscription) freshSlots(ctx context.Context) []slotOwner {
	var mu sync.Mutex
	var nodes []*redis.Client
	_ = c.rdb.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error {
		mu.Lock()
		nodes = append(nodes, n)
		mu.Unlock()
		return nil
	})
	for _, n := range nodes {
		nctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		shards, err := n.ClusterShards(nctx).Result()
		cancel()
		if owners := slotOwners(shards); err == nil && len(owners) > 0 {
			return owners
		}
	}
	return nil
}

// nodeAt is go-redis's client of the node at addr.
func (c *clusterSubscription) nodeAt(ctx context.Context, addr string) (*redis.Client, error) {
	return clusterNode(ctx, c.rdb, addr)
}

// ownerIn is the master of slot, or "".
func ownerIn(owners []slotOwner, slot int) string {
	for _, o := range owners {
		if o.start <= slot && slot <= o.end {
			return o.addr
		}
	}
	return ""
}

func (c *clusterSubscription) Unsubscribe(ctx context.Context, channels ...string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	byNode := map[string][]string{}
	for _, ch := range channels {
		if addr := c.home[ch]; addr != "" {
			byNode[addr] = append(byNode[addr], ch)
		}
		delete(c.home, ch)
		delete(c.placed, ch)
	}
	var errs []error
	for addr, chs := range byNode {
		if ps := c.byNode[addr]; ps != nil {
			// One SUNSUBSCRIBE per channel: channels of several slots in
			// one command are refused (CROSSSLOT).
			for _, ch := range chs {
				errs = append(errs, ps.SUnsubscribe(ctx, ch))
			}
		}
	}
	return errors.Join(errs...)
}

func (c *clusterSubscription) Close() error {
	c.cancel()
	c.mu.Lock()
	pss := slices.Collect(func(yield func(*redis.PubSub) bool) {
		for _, ps := range c.byNode {
			if !yield(ps) {
				return
			}
		}
	})
	c.byNode = map[string]*redis.PubSub{}
	c.mu.Unlock()
	for _, ps := range pss {
		_ = ps.Close()
	}
	c.wg.Wait()
	return nil
}
