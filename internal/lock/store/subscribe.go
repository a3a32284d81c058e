package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// noticeKind says what a PubSub's message tells the Listener.
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

// Subscription is a process's wake-up subscription, one channel per key
// that has waiters. It tells its Listener what it hears, by key, and
// follows the topology by itself: after a move the Listener hears Reset
// and re-checks every waiting key.
type Subscription interface {
	// Subscribe subscribes to the key's channel; the Listener hears
	// Subscribed when Redis confirms it. It may answer an error and
	// subscribe later (go-redis subscribes again when it reconnects).
	Subscribe(ctx context.Context, key string) error
	// Unsubscribe drops the keys' channels.
	Unsubscribe(ctx context.Context, keys ...string) error
	// Close ends the subscription: the Listener hears nothing after it.
	Close() error
}

// Listener hears what a Subscription receives, by key (lockd's wait hub).
// Its methods are called from the subscription's own goroutines, and must
// not block.
type Listener interface {
	// Subscribed: Redis confirmed the subscription to the key's channel;
	// messages before it may have been missed.
	Subscribed(key string)
	// Message: a message on the key's channel (released, expired,
	// renewed:…).
	Message(key, payload string)
	// Reset: the subscription moved (reconnect, failover, slot
	// migration); any key may have missed messages.
	Reset()
}

// Channels names the channel of a key's wake-ups (Of), and reads the key
// back from a channel's name (Key: "" for a channel that is no key's). On
// a Cluster the channel must hash to the key's slot.
type Channels struct {
	Of  func(key string) string
	Key func(channel string) string
}

// all is the channels of keys.
func (c Channels) all(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = c.Of(k)
	}
	return out
}

// ear tells a Listener what a PubSub received, by key.
type ear struct {
	l     Listener
	names Channels
}

func (e ear) hear(nt notice) {
	switch nt.kind {
	case noticeReset:
		e.l.Reset()
	case noticeSubscribed:
		if key := e.names.Key(nt.channel); key != "" {
			e.l.Subscribed(key)
		}
	case noticeMessage:
		if key := e.names.Key(nt.channel); key != "" {
			e.l.Message(key, nt.payload)
		}
	}
}

// nodeSubscription is one pub/sub connection to one server. go-redis
// reconnects it after an error and subscribes again; the confirmations
// that follow tell the listener to re-check those keys.
type nodeSubscription struct {
	ear

	mu sync.Mutex
	ps *redis.PubSub

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newNodeSubscription(rdb redis.UniversalClient, names Channels, l Listener) *nodeSubscription {
	ctx, cancel := context.WithCancel(context.Background())
	n := &nodeSubscription{ear: ear{l, names}, ctx: ctx, cancel: cancel}
	n.ps = rdb.Subscribe(ctx)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		pump(n.ctx, n.ps, n.hear, nil)
	}()
	return n
}

func (n *nodeSubscription) Subscribe(ctx context.Context, key string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ps.Subscribe(ctx, n.names.Of(key))
}

func (n *nodeSubscription) Unsubscribe(ctx context.Context, keys ...string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ps.Unsubscribe(ctx, n.names.all(keys)...)
}

func (n *nodeSubscription) Close() error {
	n.cancel()
	n.mu.Lock()
	err := n.ps.Close()
	n.mu.Unlock()
	n.wg.Wait()
	return err
}

// pump hands a PubSub's messages to deliver, as notices, until ctx ends or
// the PubSub is closed.
func pump(ctx context.Context, ps *redis.PubSub, deliver func(notice), broken func()) {
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
		deliver(nt)
	}
}

// sentinelSubscription is the wake-up subscription under Sentinel: one
// pub/sub connection to the server that the sentinels name as master,
// moved when they name another.
//
// It is made on a client of that one server, not through the failover
// client, whose PubSub go-redis dials to the master named by the one
// sentinel it picked. Sentinels learn of a failover at different times:
// the leader first, the others from its hello messages (about 0.1 s later
// when the machine is quiet, longer when it is busy). When this
// subscription saw the switch first and moved, go-redis could dial the old
// master again, and nothing moved it after that. Sentinel leaves the old
// master a writable master for about 10 s after SENTINEL FAILOVER, hearing
// nothing published on the new one, until it demotes it and disconnects its
// clients; waiters were then woken about 10 s late (4 of 20 runs under
// load, TestWakeAfterFailoverUnderLoad).
type sentinelSubscription struct {
	sentinel  *Sentinel
	data      *redis.Options // the failover client's options, for the data nodes
	sentinels []*redis.SentinelClient
	ear
	// changed is signalled when a sentinel announces a new master
	// (+switch-master), so that the subscription moves without waiting
	// for the next poll.
	changed chan struct{}

	mu     sync.Mutex
	addr   string          // the master the subscription is on; "" until known
	node   *redis.Client   // a client of addr alone
	ps     *redis.PubSub   // on node; nil until the master is known
	wanted map[string]bool // channels

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// masterPoll is how often lockd asks the sentinels for the master, in case
// it missed a +switch-master (a sentinel's connection was down).
const masterPoll = 250 * time.Millisecond

func newSentinelSubscription(rdb *redis.Client, sentinel *Sentinel, names Channels, l Listener) *sentinelSubscription {
	ctx, cancel := context.WithCancel(context.Background())
	s := &sentinelSubscription{
		sentinel: sentinel, data: rdb.Options(), ear: ear{l, names},
		changed: make(chan struct{}, 1), wanted: map[string]bool{}, ctx: ctx, cancel: cancel,
	}
	for _, addr := range sentinel.Addrs {
		// TLS as go-redis's own sentinel clients have it: the failover
		// client's.
		s.sentinels = append(s.sentinels, redis.NewSentinelClient(&redis.Options{
			Addr: addr, Username: sentinel.Username, Password: sentinel.Password, TLSConfig: s.data.TLSConfig,
			DialTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond,
			MaxRetries: -1, PoolSize: 2, Protocol: 2, DisableIdentity: true,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		}))
	}
	for _, sc := range s.sentinels {
		s.wg.Add(1)
		go s.announcements(sc)
	}
	s.wg.Add(1)
	go s.watch()
	return s
}

func (s *sentinelSubscription) Subscribe(ctx context.Context, key string) error {
	channel := s.names.Of(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wanted[channel] = true
	if s.ps == nil {
		// No master known yet: the first move subscribes the channel, and
		// its confirmation tells the listener.
		return nil
	}
	return s.ps.Subscribe(ctx, channel)
}

func (s *sentinelSubscription) Unsubscribe(ctx context.Context, keys ...string) error {
	channels := s.names.all(keys)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range channels {
		delete(s.wanted, c)
	}
	if s.ps == nil {
		return nil
	}
	return s.ps.Unsubscribe(ctx, channels...)
}

func (s *sentinelSubscription) Close() error {
	s.cancel()
	s.mu.Lock()
	var err error
	if s.ps != nil {
		err = s.ps.Close()
		_ = s.node.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	for _, sc := range s.sentinels {
		_ = sc.Close()
	}
	return err
}

// announcements listens for +switch-master on one sentinel. Each sentinel
// announces the switch when it learns of it, so the first announcement
// comes from the first sentinel that knows.
func (s *sentinelSubscription) announcements(sc *redis.SentinelClient) {
	defer s.wg.Done()
	ps := sc.Subscribe(s.ctx, "+switch-master")
	defer ps.Close()
	ch := ps.Channel()
	for {
		select {
		case <-s.ctx.Done():
			return
		case m, ok := <-ch:
			if !ok {
				return
			}
			// "<master name> <old ip> <old port> <new ip> <new port>"
			if name, _, _ := strings.Cut(m.Payload, " "); name == s.sentinel.MasterName {
				select {
				case s.changed <- struct{}{}:
				default:
				}
			}
		}
	}
}

// watch asks the sentinels for the master at once, then every masterPoll
// and on every announcement, and moves the subscription when the master
// changed.
func (s *sentinelSubscription) watch() {
	defer s.wg.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		case <-s.changed:
		}
		if addr, err := s.master(); err == nil && addr != s.current() {
			s.move(addr)
		}
		t.Reset(masterPoll)
	}
}

func (s *sentinelSubscription) current() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// master asks every sentinel at once which server is master, and believes
// the one with the highest configuration epoch: a sentinel that has not yet
// heard of a failover names the old master, with the old epoch. Each is
// asked for its epoch (SENTINEL MASTER) before the address
// (GET-MASTER-ADDR-BY-NAME), so that the address is never older than the
// epoch it is judged by. (SENTINEL MASTER's own address is not used: the
// leader of a failover gives the new epoch with the old address there
// while it reconfigures, and GET-MASTER-ADDR-BY-NAME already names the new
// master.)
func (s *sentinelSubscription) master() (string, error) {
	ctx, cancel := context.WithTimeout(s.ctx, 500*time.Millisecond)
	defer cancel()
	type answer struct {
		addr  string
		epoch int64
	}
	answers := make([]answer, len(s.sentinels))
	var wg sync.WaitGroup
	for i, sc := range s.sentinels {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = answer{epoch: -1}
			m, err := sc.Master(ctx, s.sentinel.MasterName).Result()
			if err != nil {
				return
			}
			epoch, err := strconv.ParseInt(m["config-epoch"], 10, 64)
			if err != nil {
				return
			}
			hp, err := sc.GetMasterAddrByName(ctx, s.sentinel.MasterName).Result()
			if err != nil || len(hp) != 2 {
				return
			}
			answers[i] = answer{addr: net.JoinHostPort(hp[0], hp[1]), epoch: epoch}
		}()
	}
	wg.Wait()
	best := answer{epoch: -1}
	for _, a := range answers {
		if a.epoch > best.epoch {
			best = a
		}
	}
	if best.addr == "" {
		return "", fmt.Errorf("store: no sentinel answered for %s", s.sentinel.MasterName)
	}
	return best.addr, nil
}

// move puts the subscription on the server at addr: a new PubSub there,
// subscribed to every wanted channel, then the old one closed. Redis
// confirms each channel on the new connection, and each confirmation has
// the listener try that key again: a release published while nobody listened
// on the new master (between the switch and this move) is not missed.
func (s *sentinelSubscription) move(addr string) {
	s.mu.Lock()
	if s.ctx.Err() != nil {
		s.mu.Unlock()
		return // closed
	}
	oldNode, oldPS := s.node, s.ps
	channels := make([]string, 0, len(s.wanted))
	for c := range s.wanted {
		channels = append(channels, c)
	}
	s.addr = addr
	s.node = redis.NewClient(dataNodeOptions(s.data, addr))
	s.ps = s.node.Subscribe(s.ctx, channels...)
	ps := s.ps
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		pump(s.ctx, ps, s.hear, nil)
	}()
	s.mu.Unlock()
	if oldPS != nil {
		_ = oldPS.Close()
		_ = oldNode.Close()
	}
}

// dataNodeOptions are the options of a client of the data node at addr
// alone: the failover client's credentials, database, TLS and timeouts,
// without its dialer, which dials whichever master its sentinel names.
func dataNodeOptions(fo *redis.Options, addr string) *redis.Options {
	return &redis.Options{
		Addr:                       addr,
		Username:                   fo.Username,
		Password:                   fo.Password,
		CredentialsProvider:        fo.CredentialsProvider,
		CredentialsProviderContext: fo.CredentialsProviderContext,
		DB:                         fo.DB,
		TLSConfig:                  fo.TLSConfig,
		Protocol:                   fo.Protocol,
		DialTimeout:                fo.DialTimeout,
		ReadTimeout:                fo.ReadTimeout,
		WriteTimeout:               fo.WriteTimeout,
		PoolTimeout:                fo.PoolTimeout,
		MaxRetries:                 fo.MaxRetries,
		ContextTimeoutEnabled:      fo.ContextTimeoutEnabled,
		DisableIdentity:            fo.DisableIdentity,
		MaintNotificationsConfig:   &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		// Only the PubSub is used, on its own connection.
		PoolSize: 1,
	}
}

// clusterSubscription keeps one sharded pub/sub connection per master and
// each channel on the master that owns its slot. go-redis pins a PubSub to
// one node and does not follow a slot that moves, so this type does: it
// re-homes a channel when Redis drops it (sunsubscribe) and when the slot
// map says its owner changed (checked every slotPoll).
type clusterSubscription struct {
	rdb *redis.ClusterClient
	ear

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

func newClusterSubscription(rdb *redis.ClusterClient, names Channels, l Listener) *clusterSubscription {
	ctx, cancel := context.WithCancel(context.Background())
	c := &clusterSubscription{
		rdb: rdb, ear: ear{l, names},
		byNode: map[string]*redis.PubSub{}, home: map[string]string{}, placed: map[string]time.Time{},
		moved: make(chan struct{}, 1), ctx: ctx, cancel: cancel,
	}
	c.wg.Add(1)
	go c.watch()
	return c
}

func (c *clusterSubscription) Subscribe(ctx context.Context, key string) error {
	channel := c.names.Of(key)
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
			c.pumpNode(addr, ps)
		}()
	}
	c.home[channel] = addr
	c.placed[channel] = time.Now()
	return ps.SSubscribe(ctx, channel)
}

// pumpNode hands the messages of the master at addr to the listener. A
// channel Redis dropped there while it lived there is placed again (a
// sunsubscribe of a channel that moved away is the answer to this
// type's own SUNSUBSCRIBE, and changes nothing). A broken connection may
// mean its master died: the new owners are looked for at once.
func (c *clusterSubscription) pumpNode(addr string, ps *redis.PubSub) {
	pump(c.ctx, ps, func(nt notice) {
		switch nt.kind {
		case noticeReset:
			if nt.channel != "" {
				c.dropped(nt.channel, addr)
			}
			c.kick()
			return
		case noticeSubscribed:
			c.mu.Lock()
			delete(c.placed, nt.channel)
			c.mu.Unlock()
		}
		c.hear(nt)
	}, c.kick)
}

// dropped marks channel, which Redis unsubscribed on the node at addr, as
// not subscribed there: the next rehome places it again, even on the same
// node. In a CLUSTER FAILOVER the replica taking over a slot can confirm
// a subscription and drop it again a moment later; rehome saw the channel
// at home on the slot's owner and left it there, unsubscribed, and its
// waiters heard no release (1 run in 15 under load).
func (c *clusterSubscription) dropped(channel, addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.home[channel] == addr {
		c.placed[channel] = time.Time{}
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
			c.l.Reset()
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
		owner := ownerIn(slots, SlotOf(ch))
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

func (c *clusterSubscription) Unsubscribe(ctx context.Context, keys ...string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	byNode := map[string][]string{}
	for _, ch := range c.names.all(keys) {
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
