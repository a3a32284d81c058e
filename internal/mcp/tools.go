package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/client"
)

// The tools' inputs and outputs use the REST API's names (key, ttl_ms,
// wait_ms, holder, remaining_ms, fence, next_cursor), so that the API's
// error messages name the tools' fields too; a lock's value is a claim's
// note. Tokens stay in lockd mcp: an agent names its claims by key.

// ClaimInput is the claim tool's input.
type ClaimInput struct {
	Key    string `json:"key" jsonschema:"what to claim: a file or a task, as a lock key of 1-200 characters of A-Z a-z 0-9 . _ : @ - (no slash: write src/app/main.go as src:app:main.go, task 42 as task:42)"`
	WaitMs int64  `json:"wait_ms,omitempty" jsonschema:"how long to wait, in ms, while another agent holds the key (0, the default: answer at once; at most 300000); waiters are served first come, first served"`
	TTLMs  int64  `json:"ttl_ms,omitempty" jsonschema:"leave out (recommended): the claim lasts as long as this MCP session and is let go when it ends. Given: the claim lasts this many ms (100 ... the server's --max-ttl) unless renewed with the renew tool"`
	Note   any    `json:"note,omitempty" jsonschema:"what you are doing, shown to other agents and on the dashboard with your claim: a string or a JSON object of at most 4 KiB; never a secret"`
	Agent  string `json:"agent,omitempty" jsonschema:"your name as others see it (1-128 printable characters); default the name your MCP client gave"`
}

// Claim is the answer of claim and renew: the claim, or who holds the key
// instead.
type Claim struct {
	Key     string `json:"key"`
	Granted bool   `json:"granted" jsonschema:"true when you hold the key now"`
	// The claim.
	Owner     string `json:"owner,omitempty" jsonschema:"the name the claim is shown under"`
	Fence     int64  `json:"fence,omitempty" jsonschema:"the claim's fencing number, strictly increasing per key: give it to a resource that rejects writes from older claims"`
	ExpiresAt string `json:"expires_at,omitempty" jsonschema:"when the claim lapses unless kept alive (RFC 3339)"`
	TTLMs     int64  `json:"ttl_ms,omitempty"`
	Lives     string `json:"lives,omitempty" jsonschema:"session: kept alive with this MCP session; ttl: lapses at expires_at unless you renew it"`
	Note      any    `json:"note,omitempty"`
	// The refusal.
	Code         string `json:"code,omitempty" jsonschema:"why not granted: lock_held (another holder), queued (free but kept for earlier waiters), lock_delay (held off after a lapse), min_hold (kept until its holder's hold window ends)"`
	Holder       string `json:"holder,omitempty" jsonschema:"who holds the key"`
	HolderNote   any    `json:"holder_note,omitempty" jsonschema:"the holder's note: what it is doing"`
	RemainingMs  int64  `json:"remaining_ms,omitempty" jsonschema:"how long the holder's claim has left unless it is renewed"`
	RetryAfterMs int64  `json:"retry_after_ms,omitempty" jsonschema:"when trying again may succeed"`
	Waiters      int    `json:"waiters,omitempty" jsonschema:"how many requests wait for the key"`
	Next         string `json:"next,omitempty" jsonschema:"who waits first"`
}

// RenewInput is the renew tool's input.
type RenewInput struct {
	Key   string `json:"key" jsonschema:"the key you hold"`
	TTLMs int64  `json:"ttl_ms,omitempty" jsonschema:"for a claim with a TTL of its own: its new TTL in ms from now (default its own TTL); ignored for a claim kept alive by the session"`
	Note  any    `json:"note,omitempty" jsonschema:"a new note for the claim (string or JSON object, at most 4 KiB); left out: unchanged"`
}

// KeyInput names one key.
type KeyInput struct {
	Key string `json:"key" jsonschema:"the lock key (1-200 characters of A-Z a-z 0-9 . _ : @ -)"`
}

// Released is the release tool's answer.
type Released struct {
	Key      string `json:"key"`
	Released bool   `json:"released"`
}

// Holder is one holder of a key.
type Holder struct {
	Owner       string `json:"owner"`
	Note        any    `json:"note,omitempty"`
	Fence       int64  `json:"fence"`
	Mode        string `json:"mode" jsonschema:"exclusive, shared or permit"`
	AcquiredAt  string `json:"acquired_at"`
	ExpiresAt   string `json:"expires_at"`
	RemainingMs int64  `json:"remaining_ms"`
	Yours       bool   `json:"yours,omitempty" jsonschema:"true when this is your own claim"`
	// ReleaseRequested is a request that this holder step aside.
	ReleaseRequested *StepAside `json:"release_requested,omitempty" jsonschema:"somebody asked this holder to let go (request_release): who, why and when; the holder decides"`
}

// StepAside is a request that a holder let go of its key.
type StepAside struct {
	By     string `json:"by"`
	Reason string `json:"reason,omitempty"`
	At     string `json:"at"`
}

// Waiter is one request waiting for a key.
type Waiter struct {
	Owner        string `json:"owner"`
	WaitingSince string `json:"waiting_since"`
}

// KeyState is the who_holds tool's answer.
type KeyState struct {
	Key     string   `json:"key"`
	Held    bool     `json:"held"`
	Holders []Holder `json:"holders,omitempty"`
	Waiting []Waiter `json:"waiting,omitempty" jsonschema:"the requests waiting for it, first served first"`
}

// ListInput is the list_claims tool's input.
type ListInput struct {
	Prefix string `json:"prefix,omitempty" jsonschema:"only keys that start with this (e.g. src: or task:); default every key you may read"`
	Limit  int    `json:"limit,omitempty" jsonschema:"most keys per page, 1-1000 (default 100)"`
	Cursor string `json:"cursor,omitempty" jsonschema:"next_cursor of the previous page"`
}

// Listed is one held key in a listing.
type Listed struct {
	Key     string   `json:"key"`
	Holders []Holder `json:"holders"`
	Waiters int      `json:"waiters,omitempty"`
}

// Listing is the list_claims tool's answer.
type Listing struct {
	Claims     []Listed `json:"claims"`
	NextCursor string   `json:"next_cursor,omitempty" jsonschema:"present when there are more: pass it as cursor"`
}

// WaitInput is the wait_until_free tool's input.
type WaitInput struct {
	Key    string `json:"key" jsonschema:"the lock key to watch"`
	WaitMs int64  `json:"wait_ms,omitempty" jsonschema:"how long to wait at most, in ms (default 30000, at most 300000)"`
}

// Free is the wait_until_free tool's answer.
type Free struct {
	Key         string `json:"key"`
	Free        bool   `json:"free" jsonschema:"true when nobody holds the key now (someone may claim it before you do)"`
	Holder      string `json:"holder,omitempty"`
	RemainingMs int64  `json:"remaining_ms,omitempty"`
}

// CampaignInput is the campaign tool's input.
type CampaignInput struct {
	Election string `json:"election" jsonschema:"the election's name (1-200 characters of A-Z a-z 0-9 . _ : @ -), e.g. role:coordinator"`
	WaitMs   int64  `json:"wait_ms,omitempty" jsonschema:"how long to wait in line, in ms, while another candidate leads (0: answer at once; at most 300000)"`
	Note     any    `json:"note,omitempty" jsonschema:"the leader's value: how others reach you or what you decided (string or JSON object, at most 4 KiB)"`
	Agent    string `json:"agent,omitempty" jsonschema:"your name as candidate; default the name your MCP client gave"`
}

// Leadership is the campaign tool's answer.
type Leadership struct {
	Election  string `json:"election"`
	Leading   bool   `json:"leading" jsonschema:"true when you lead now"`
	Leader    string `json:"leader,omitempty"`
	Term      int64  `json:"term,omitempty" jsonschema:"the leadership's term, strictly increasing per election (a fence)"`
	ExpiresAt string `json:"expires_at,omitempty"`
	// The refusal.
	Code         string `json:"code,omitempty"`
	RemainingMs  int64  `json:"remaining_ms,omitempty"`
	RetryAfterMs int64  `json:"retry_after_ms,omitempty"`
}

// ElectionInput names one election.
type ElectionInput struct {
	Election string `json:"election" jsonschema:"the election's name"`
}

// Candidate is one candidate waiting in line.
type Candidate struct {
	Candidate    string `json:"candidate"`
	WaitingSince string `json:"waiting_since"`
}

// ElectionState is the leader tool's answer.
type ElectionState struct {
	Election   string      `json:"election"`
	Leader     string      `json:"leader,omitempty" jsonschema:"who leads; absent when nobody does"`
	Note       any         `json:"note,omitempty" jsonschema:"the leader's value"`
	Term       int64       `json:"term,omitempty"`
	Since      string      `json:"since,omitempty"`
	ExpiresAt  string      `json:"expires_at,omitempty"`
	Candidates []Candidate `json:"candidates,omitempty"`
	Yours      bool        `json:"yours,omitempty" jsonschema:"true when you lead"`
}

// RequestReleaseInput is the request_release tool's input.
type RequestReleaseInput struct {
	Key    string `json:"key" jsonschema:"the key whose holder you ask to step aside"`
	Reason string `json:"reason,omitempty" jsonschema:"why you need it, shown to the holder (at most 500 printable characters)"`
	Agent  string `json:"agent,omitempty" jsonschema:"your name as the holder sees it; default the name your MCP client gave"`
}

// ReleaseRequest is the request_release tool's answer.
type ReleaseRequest struct {
	Key         string `json:"key"`
	Requested   bool   `json:"requested" jsonschema:"true when the holder was asked; false when nobody holds the key (claim it)"`
	Holder      string `json:"holder,omitempty" jsonschema:"who was asked"`
	Fence       int64  `json:"fence,omitempty" jsonschema:"the claim that was asked"`
	RequestedAt string `json:"requested_at,omitempty"`
}

// Resigned is the resign tool's answer.
type Resigned struct {
	Election string `json:"election"`
	Resigned bool   `json:"resigned"`
}

// maxWaitFree bounds one tool call's wait: wait_until_free's, which
// polls, and a claim's or a campaign's wait in line. An agent host gives a
// tool call a few minutes at most; /mcp's write deadline follows it. A
// longer wait is several calls.
const maxWaitFree = 5 * time.Minute

// waitField checks a tool call's wait_ms.
func waitField(v int64) error {
	if v < 0 || v > maxWaitFree.Milliseconds() {
		return fmt.Errorf("invalid: wait_ms must be within 0...%d, got %d", maxWaitFree.Milliseconds(), v)
	}
	return nil
}

// tools are the tools of one MCP server; agentOf finds the calling MCP
// session's agent.
type tools struct {
	agentOf func(context.Context, *sdk.ServerSession, *sdk.RequestExtra) (*agent, error)
}

func (t *tools) add(s *sdk.Server) {
	sdk.AddTool(s, &sdk.Tool{Name: "claim", Title: "Claim a file or task",
		Description: "Claim a key (a file, a task, any shared thing) before you change what it names, so that no other agent works on it at the same time; " +
			"release it when done. Granted: you hold it until you release it or this MCP session ends (if you stop or disconnect, it is let go within the TTL). " +
			"Refused (granted false): another agent holds it; the answer names the holder, its note and time left: work on something else, or claim again with wait_ms to wait your turn. " +
			"Claiming a key you already hold answers your claim again.",
		Annotations: &sdk.ToolAnnotations{IdempotentHint: true, DestructiveHint: ptr(false), OpenWorldHint: ptr(false)},
	}, t.claim)
	sdk.AddTool(s, &sdk.Tool{Name: "renew", Title: "Renew a claim",
		Description: "Keep a claim that has a TTL of its own (claimed with ttl_ms) from lapsing, and/or replace its note. " +
			"Claims made without ttl_ms are kept alive by this MCP session and need no renewal. An error saying the claim is lost means someone broke it or it lapsed: stop the work it protects.",
		Annotations: &sdk.ToolAnnotations{IdempotentHint: true, DestructiveHint: ptr(false), OpenWorldHint: ptr(false)},
	}, t.renew)
	sdk.AddTool(s, &sdk.Tool{Name: "release", Title: "Release a claim",
		Description: "Let go of a key you claimed, as soon as you are done with it, so that others (perhaps waiting) can have it.",
		Annotations: &sdk.ToolAnnotations{IdempotentHint: true, DestructiveHint: ptr(false), OpenWorldHint: ptr(false)},
	}, t.release)
	sdk.AddTool(s, &sdk.Tool{Name: "who_holds", Title: "Who holds a key",
		Description: "See who holds a key (name, note, time left) and who waits for it, without claiming it. Use it before planning work on a file or task.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
	}, t.whoHolds)
	sdk.AddTool(s, &sdk.Tool{Name: "list_claims", Title: "List what is held",
		Description: "List the keys held under a prefix (e.g. src: or task:), each with its holders and their notes: what the other agents are working on. Page with cursor.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
	}, t.list)
	sdk.AddTool(s, &sdk.Tool{Name: "wait_until_free", Title: "Wait until a key is free",
		Description: "Wait, without claiming it, until nobody holds a key (another agent finished a task you depend on), up to wait_ms. " +
			"To take the key as soon as it is free, use claim with wait_ms instead: that keeps your place in line.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
	}, t.waitFree)
	sdk.AddTool(s, &sdk.Tool{Name: "campaign", Title: "Campaign to lead",
		Description: "Become the one leader of an election (e.g. the agent that coordinates, merges or deploys), waiting in line up to wait_ms; " +
			"you lead until you resign or this MCP session ends. Refused (leading false): another candidate leads, named in the answer.",
		Annotations: &sdk.ToolAnnotations{IdempotentHint: true, DestructiveHint: ptr(false), OpenWorldHint: ptr(false)},
	}, t.campaign)
	sdk.AddTool(s, &sdk.Tool{Name: "leader", Title: "Who leads",
		Description: "See who leads an election, its note and term, and the candidates in line.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
	}, t.leader)
	sdk.AddTool(s, &sdk.Tool{Name: "request_release", Title: "Ask a holder to step aside",
		Description: "Ask the agent or service that holds a key to let go of it, with your reason, when you need it and it is held. " +
			"The holder decides: it learns of the request (who_holds shows it on its claim) and may finish and release, or not. " +
			"Then claim with wait_ms to take the key when it is let go. Only an exclusive holder can be asked.",
		Annotations: &sdk.ToolAnnotations{IdempotentHint: true, DestructiveHint: ptr(false), OpenWorldHint: ptr(false)},
	}, t.requestRelease)
	sdk.AddTool(s, &sdk.Tool{Name: "resign", Title: "Resign a leadership",
		Description: "Stop leading an election you lead; the next candidate in line takes over.",
		Annotations: &sdk.ToolAnnotations{IdempotentHint: true, DestructiveHint: ptr(false), OpenWorldHint: ptr(false)},
	}, t.resign)
}

func (t *tools) claim(ctx context.Context, req *sdk.CallToolRequest, in ClaimInput) (*sdk.CallToolResult, Claim, error) {
	a, err := t.agentOf(ctx, req.Session, req.Extra)
	if err != nil {
		return nil, Claim{}, err
	}
	note, err := noteOf(in.Note)
	if err != nil {
		return nil, Claim{}, err
	}
	if err := check(named("key", in.Key), waitField(in.WaitMs), nonNegative("ttl_ms", in.TTLMs), agentField(in.Agent)); err != nil {
		return nil, Claim{}, err
	}
	owner := a.name
	if in.Agent != "" {
		owner = in.Agent
	}
	if h := a.held(in.Key, false); h != nil {
		a.mu.Lock()
		out := claimOf(h)
		a.mu.Unlock()
		line := fmt.Sprintf("You already hold %s (fence %d, %s).", in.Key, out.Fence, livesText(out))
		if in.Note != nil {
			line += " Its note is unchanged: renew with a note to change it."
		}
		return text(line), out, nil
	}
	opts := client.AcquireOptions{Owner: owner, Wait: ms(in.WaitMs), Value: note}
	h := &hold{kept: in.TTLMs == 0, note: in.Note}
	if h.kept {
		if err := a.keepAlive(ctx, &opts, h); err != nil {
			return nil, Claim{}, failure("claim "+in.Key, err)
		}
	} else {
		opts.TTL, opts.NoAutoRenew = ms(in.TTLMs), true
	}
	wctx, cancel := a.within(ctx)
	defer cancel()
	l, err := a.ld.c.Acquire(wctx, in.Key, opts)
	if err != nil {
		if ref, ok := refusal(in.Key, err); ok {
			if ref.Holder != "" {
				// What the holder is doing helps decide whether to wait.
				if st, err := a.ld.c.State(ctx, in.Key); err == nil {
					for _, ho := range st.Holders {
						if ho.Owner == ref.Holder {
							ref.HolderNote = noteValue(ho.Value)
						}
					}
				}
			}
			return text(ref.refusedText()), ref, nil
		}
		if a.ctx.Err() != nil {
			err = errClosed
		}
		return nil, Claim{}, failure("claim "+in.Key, err)
	}
	h.lease = l
	if err := a.keep(in.Key, false, h); err != nil {
		return nil, Claim{}, err
	}
	a.mu.Lock()
	out := claimOf(h)
	a.mu.Unlock()
	return text(fmt.Sprintf("Claimed %s as %s (fence %d, %s). Release it when done.", in.Key, out.Owner, out.Fence, livesText(out))), out, nil
}

func (t *tools) renew(ctx context.Context, req *sdk.CallToolRequest, in RenewInput) (*sdk.CallToolResult, Claim, error) {
	a, err := t.agentOf(ctx, req.Session, req.Extra)
	if err != nil {
		return nil, Claim{}, err
	}
	note, err := noteOf(in.Note)
	if err != nil {
		return nil, Claim{}, err
	}
	if err := check(named("key", in.Key), nonNegative("ttl_ms", in.TTLMs)); err != nil {
		return nil, Claim{}, err
	}
	h := a.held(in.Key, false)
	if h == nil {
		return nil, Claim{}, notYours(ctx, a, in.Key)
	}
	if !h.kept || note != nil {
		body := api.RenewRequest{Token: h.lease.Token()}
		if p := h.lease.Proof(); p != "" {
			body.Proof = &p
		}
		if !h.kept {
			ttl := h.lease.TTL()
			if in.TTLMs > 0 {
				ttl = ms(in.TTLMs)
			}
			body.TtlMs = ptr(ttl.Milliseconds())
		}
		if note != nil {
			body.Value = &note
		}
		resp, err := a.ld.raw.RenewLock(ctx, in.Key, body)
		if err := answer(resp, err); err != nil {
			if lost(err) {
				a.forget(in.Key, false)
				return nil, Claim{}, fmt.Errorf("your claim on %s is lost (it lapsed or was force-released): stop the work it protected, and claim it again if you still need it", in.Key)
			}
			return nil, Claim{}, failure("renew "+in.Key, err)
		}
	}
	if note != nil {
		a.mu.Lock()
		h.note = in.Note
		a.mu.Unlock()
	}
	a.mu.Lock()
	out := claimOf(h)
	a.mu.Unlock()
	if st, err := a.ld.c.State(ctx, in.Key); err == nil {
		for _, ho := range st.Holders {
			if ho.Fence == out.Fence {
				out.ExpiresAt = stamp(ho.ExpiresAt)
			}
		}
	}
	return text(fmt.Sprintf("Renewed %s (%s).", in.Key, livesText(out))), out, nil
}

func (t *tools) release(ctx context.Context, req *sdk.CallToolRequest, in KeyInput) (*sdk.CallToolResult, Released, error) {
	a, err := t.agentOf(ctx, req.Session, req.Extra)
	if err != nil {
		return nil, Released{}, err
	}
	if err := check(named("key", in.Key)); err != nil {
		return nil, Released{}, err
	}
	h := a.held(in.Key, false)
	if h == nil {
		return nil, Released{}, notYours(ctx, a, in.Key)
	}
	a.forget(in.Key, false)
	if err := h.lease.Release(ctx); err != nil {
		if lost(err) {
			return nil, Released{}, fmt.Errorf("your claim on %s was already lost (it lapsed or was force-released): someone else may have worked on it since", in.Key)
		}
		return nil, Released{}, failure("release "+in.Key, err)
	}
	return text(fmt.Sprintf("Released %s.", in.Key)), Released{Key: in.Key, Released: true}, nil
}

func (t *tools) requestRelease(ctx context.Context, req *sdk.CallToolRequest, in RequestReleaseInput) (*sdk.CallToolResult, ReleaseRequest, error) {
	a, err := t.agentOf(ctx, req.Session, req.Extra)
	if err != nil {
		return nil, ReleaseRequest{}, err
	}
	if err := check(named("key", in.Key), agentField(in.Agent)); err != nil {
		return nil, ReleaseRequest{}, err
	}
	by := a.name
	if in.Agent != "" {
		by = in.Agent
	}
	r, err := a.ld.c.RequestRelease(ctx, in.Key, by, in.Reason)
	if errors.Is(err, client.ErrNotFound) {
		return text(fmt.Sprintf("Nobody holds %s: claim it.", in.Key)), ReleaseRequest{Key: in.Key}, nil
	}
	if errors.Is(err, client.ErrNotExclusive) {
		return nil, ReleaseRequest{}, fmt.Errorf("key: %s is held by shared holders together; none of them can be asked alone", in.Key)
	}
	if err != nil {
		return nil, ReleaseRequest{}, failure("request release of "+in.Key, err)
	}
	out := ReleaseRequest{Key: in.Key, Requested: true, Holder: r.Owner, Fence: r.Fence, RequestedAt: stamp(r.RequestedAt)}
	return text(fmt.Sprintf("Asked %s to let go of %s; it decides. Claim with wait_ms to take it when it is let go.", r.Owner, in.Key)), out, nil
}

func (t *tools) whoHolds(ctx context.Context, req *sdk.CallToolRequest, in KeyInput) (*sdk.CallToolResult, KeyState, error) {
	a, err := t.agentOf(ctx, req.Session, req.Extra)
	if err != nil {
		return nil, KeyState{}, err
	}
	if err := check(named("key", in.Key)); err != nil {
		return nil, KeyState{}, err
	}
	st, err := a.ld.c.State(ctx, in.Key)
	if errors.Is(err, client.ErrNotFound) {
		return text(fmt.Sprintf("Nobody holds %s.", in.Key)), KeyState{Key: in.Key}, nil
	}
	if err != nil {
		return nil, KeyState{}, failure("read "+in.Key, err)
	}
	out := KeyState{Key: in.Key, Held: true, Holders: holdersOf(st, a.mine(in.Key))}
	for _, q := range st.Queue {
		out.Waiting = append(out.Waiting, Waiter{Owner: q.Owner, WaitingSince: stamp(q.WaitingSince)})
	}
	line := fmt.Sprintf("%s is held by %s", in.Key, holdersText(out.Holders))
	if len(out.Waiting) > 0 {
		line += fmt.Sprintf("; %d waiting, %s first", len(out.Waiting), out.Waiting[0].Owner)
	}
	return text(line + "."), out, nil
}

func (t *tools) list(ctx context.Context, req *sdk.CallToolRequest, in ListInput) (*sdk.CallToolResult, Listing, error) {
	a, err := t.agentOf(ctx, req.Session, req.Extra)
	if err != nil {
		return nil, Listing{}, err
	}
	page, err := a.ld.c.List(ctx, in.Prefix, in.Limit, in.Cursor)
	if err != nil {
		return nil, Listing{}, failure("list", err)
	}
	out := Listing{Claims: []Listed{}}
	if page.NextCursor != nil {
		out.NextCursor = *page.NextCursor
	}
	var parts []string
	for _, st := range page.Locks {
		l := Listed{Key: st.Key, Holders: holdersOf(st, a.mine(st.Key)), Waiters: len(st.Queue)}
		out.Claims = append(out.Claims, l)
		if len(parts) < 20 {
			parts = append(parts, st.Key+" by "+holdersText(l.Holders))
		}
	}
	where := "anywhere"
	if in.Prefix != "" {
		where = fmt.Sprintf("under %q", in.Prefix)
	}
	line := fmt.Sprintf("%d key(s) held %s", len(out.Claims), where)
	if len(parts) > 0 {
		line += ": " + strings.Join(parts, "; ")
		if len(out.Claims) > len(parts) {
			line += fmt.Sprintf("; and %d more", len(out.Claims)-len(parts))
		}
	}
	if out.NextCursor != "" {
		line += " (more: pass next_cursor)"
	}
	return text(line + "."), out, nil
}

func (t *tools) waitFree(ctx context.Context, req *sdk.CallToolRequest, in WaitInput) (*sdk.CallToolResult, Free, error) {
	a, err := t.agentOf(ctx, req.Session, req.Extra)
	if err != nil {
		return nil, Free{}, err
	}
	if err := check(named("key", in.Key)); err != nil {
		return nil, Free{}, err
	}
	wait := ms(in.WaitMs)
	switch {
	case in.WaitMs == 0:
		wait = 30 * time.Second
	case in.WaitMs < 0 || wait > maxWaitFree:
		return nil, Free{}, fmt.Errorf("invalid: wait_ms must be within 0...%d", maxWaitFree.Milliseconds())
	}
	wctx, cancel := a.within(ctx)
	defer cancel()
	// The API has no wait that grants nothing; this polls the key's state
	// from 50 ms apart up to 1 s apart (a few dozen reads a minute).
	deadline := time.Now().Add(wait)
	delay := 50 * time.Millisecond
	for {
		st, err := a.ld.c.State(wctx, in.Key)
		if errors.Is(err, client.ErrNotFound) {
			return text(fmt.Sprintf("%s is free now; claim it if you need it.", in.Key)), Free{Key: in.Key, Free: true}, nil
		}
		if err != nil {
			return nil, Free{}, failure("read "+in.Key, err)
		}
		left := time.Until(deadline)
		if left <= 0 {
			out := Free{Key: in.Key, Holder: st.Owner, RemainingMs: st.RemainingMs}
			return text(fmt.Sprintf("%s is still held by %s, for %s more.", in.Key, st.Owner, describe(ms(st.RemainingMs)))), out, nil
		}
		select {
		case <-wctx.Done():
			return nil, Free{}, failure("wait for "+in.Key, wctx.Err())
		case <-time.After(min(delay, left)):
		}
		delay = min(2*delay, time.Second)
	}
}

func (t *tools) campaign(ctx context.Context, req *sdk.CallToolRequest, in CampaignInput) (*sdk.CallToolResult, Leadership, error) {
	a, err := t.agentOf(ctx, req.Session, req.Extra)
	if err != nil {
		return nil, Leadership{}, err
	}
	note, err := noteOf(in.Note)
	if err != nil {
		return nil, Leadership{}, err
	}
	if err := check(named("election", in.Election), waitField(in.WaitMs), agentField(in.Agent)); err != nil {
		return nil, Leadership{}, err
	}
	if h := a.held(in.Election, true); h != nil {
		info := h.lease.Info()
		out := Leadership{Election: in.Election, Leading: true, Leader: info.Owner, Term: info.Fence, ExpiresAt: stamp(info.ExpiresAt)}
		return text(fmt.Sprintf("You already lead %s (term %d).", in.Election, out.Term)), out, nil
	}
	owner := a.name
	if in.Agent != "" {
		owner = in.Agent
	}
	opts := client.CampaignOptions{Owner: owner, Wait: ms(in.WaitMs), Value: note}
	h := &hold{kept: true}
	if err := a.keepAlive(ctx, &opts, h); err != nil {
		return nil, Leadership{}, failure("campaign in "+in.Election, err)
	}
	wctx, cancel := a.within(ctx)
	defer cancel()
	l, err := a.ld.c.Campaign(wctx, in.Election, opts)
	if err != nil {
		if ref, ok := refusal(in.Election, err); ok {
			out := Leadership{Election: in.Election, Leader: ref.Holder, Code: ref.Code, RemainingMs: ref.RemainingMs, RetryAfterMs: ref.RetryAfterMs}
			line := fmt.Sprintf("Not leading %s: %s leads", in.Election, ref.Holder)
			if ref.Code == string(api.ProblemCodeQueued) {
				line = fmt.Sprintf("Not leading %s: %d earlier candidate(s) come first, %s next", in.Election, ref.Waiters, ref.Next)
			}
			return text(line + "; campaign with wait_ms to wait in line."), out, nil
		}
		if a.ctx.Err() != nil {
			err = errClosed
		}
		return nil, Leadership{}, electionFailure("campaign in "+in.Election, err)
	}
	h.lease = l
	if err := a.keep(in.Election, true, h); err != nil {
		return nil, Leadership{}, err
	}
	info := l.Info()
	out := Leadership{Election: in.Election, Leading: true, Leader: info.Owner, Term: info.Fence, ExpiresAt: stamp(info.ExpiresAt)}
	return text(fmt.Sprintf("You lead %s as %s (term %d) until you resign or this MCP session ends.", in.Election, info.Owner, info.Fence)), out, nil
}

func (t *tools) leader(ctx context.Context, req *sdk.CallToolRequest, in ElectionInput) (*sdk.CallToolResult, ElectionState, error) {
	a, err := t.agentOf(ctx, req.Session, req.Extra)
	if err != nil {
		return nil, ElectionState{}, err
	}
	if err := check(named("election", in.Election)); err != nil {
		return nil, ElectionState{}, err
	}
	st, err := a.ld.c.Leader(ctx, in.Election)
	if errors.Is(err, client.ErrNotFound) {
		return text(fmt.Sprintf("Nobody leads %s and nobody campaigns.", in.Election)), ElectionState{Election: in.Election}, nil
	}
	if err != nil {
		return nil, ElectionState{}, electionFailure("read "+in.Election, err)
	}
	out := ElectionState{Election: in.Election, Note: noteValue(st.Value)}
	for _, c := range st.Candidates {
		out.Candidates = append(out.Candidates, Candidate{Candidate: c.Candidate, WaitingSince: stamp(c.WaitingSince)})
	}
	if st.Leader == nil {
		return text(fmt.Sprintf("Nobody leads %s; %d candidate(s) in line.", in.Election, len(out.Candidates))), out, nil
	}
	out.Leader = *st.Leader
	if st.Term != nil {
		out.Term = *st.Term
	}
	if st.Since != nil {
		out.Since = stamp(*st.Since)
	}
	if st.ExpiresAt != nil {
		out.ExpiresAt = stamp(*st.ExpiresAt)
	}
	if h := a.held(in.Election, true); h != nil && h.lease.Fence() == out.Term {
		out.Yours = true
	}
	return text(fmt.Sprintf("%s leads %s (term %d); %d candidate(s) in line.", out.Leader, in.Election, out.Term, len(out.Candidates))), out, nil
}

func (t *tools) resign(ctx context.Context, req *sdk.CallToolRequest, in ElectionInput) (*sdk.CallToolResult, Resigned, error) {
	a, err := t.agentOf(ctx, req.Session, req.Extra)
	if err != nil {
		return nil, Resigned{}, err
	}
	if err := check(named("election", in.Election)); err != nil {
		return nil, Resigned{}, err
	}
	h := a.held(in.Election, true)
	if h == nil {
		return nil, Resigned{}, fmt.Errorf("you do not lead %s (see the leader tool)", in.Election)
	}
	a.forget(in.Election, true)
	if err := h.lease.Release(ctx); err != nil {
		if lost(err) {
			return nil, Resigned{}, fmt.Errorf("your leadership of %s was already lost", in.Election)
		}
		return nil, Resigned{}, failure("resign "+in.Election, err)
	}
	return text(fmt.Sprintf("Resigned %s.", in.Election)), Resigned{Election: in.Election, Resigned: true}, nil
}

// claimOf describes the agent's hold on a key; the caller holds the
// agent's lock (the note may change).
func claimOf(h *hold) Claim {
	info := h.lease.Info()
	c := Claim{Key: info.Key, Granted: true, Owner: info.Owner, Fence: info.Fence, ExpiresAt: stamp(info.ExpiresAt), TTLMs: info.TtlMs, Lives: "ttl", Note: h.note}
	if h.kept {
		c.Lives = "session"
	}
	return c
}

func livesText(c Claim) string {
	if c.Lives == "session" {
		return "kept while this MCP session lasts"
	}
	if t, err := time.Parse(time.RFC3339Nano, c.ExpiresAt); err == nil {
		return "lapses in " + describe(time.Until(t)) + " unless renewed"
	}
	return "lapses unless renewed"
}

// refusal turns an acquire's "not now" into a structured answer: who holds
// the key and for how long, or who waits first.
func refusal(key string, err error) (Claim, bool) {
	c := Claim{Key: key}
	var he *client.HeldError
	var qe *client.QueuedError
	var ae *client.APIError
	switch {
	case errors.As(err, &he):
		c.Code, c.Holder, c.RemainingMs, c.RetryAfterMs = string(api.ProblemCodeLockHeld), he.Holder, he.Remaining.Milliseconds(), he.RetryAfter.Milliseconds()
	case errors.As(err, &qe):
		c.Code, c.Waiters, c.Next, c.RetryAfterMs = string(api.ProblemCodeQueued), qe.Waiters, qe.Next, qe.RetryAfter.Milliseconds()
	case errors.Is(err, client.ErrLockDelay) && errors.As(err, &ae):
		c.Code, c.RetryAfterMs = string(api.ProblemCodeLockDelay), ae.RetryAfter.Milliseconds()
	case errors.Is(err, client.ErrMinHold) && errors.As(err, &ae):
		c.Code, c.RetryAfterMs = string(api.ProblemCodeMinHold), ae.RetryAfter.Milliseconds()
	default:
		return c, false
	}
	return c, true
}

func (c Claim) refusedText() string {
	switch c.Code {
	case string(api.ProblemCodeQueued):
		return fmt.Sprintf("Not granted: %s is free but kept for %d earlier waiter(s), %s next; claim with wait_ms to wait your turn.", c.Key, c.Waiters, c.Next)
	case string(api.ProblemCodeLockDelay):
		return fmt.Sprintf("Not granted: %s is held off for %s after its last claim lapsed; try again then.", c.Key, describe(ms(c.RetryAfterMs)))
	case string(api.ProblemCodeMinHold):
		return fmt.Sprintf("Not granted: %s was released inside its hold window, which keeps it for %s more; try again then.", c.Key, describe(ms(c.RetryAfterMs)))
	}
	holder := c.Holder
	if n, err := json.Marshal(c.HolderNote); err == nil && c.HolderNote != nil {
		holder += " (" + string(n) + ")"
	}
	return fmt.Sprintf("Not granted: %s is held by %s, whose claim has %s left unless renewed; work on something else, or claim with wait_ms to wait for it.", c.Key, holder, describe(ms(c.RemainingMs)))
}

// notYours is the error for renewing or releasing a key the agent does
// not hold: it says who does.
func notYours(ctx context.Context, a *agent, key string) error {
	st, err := a.ld.c.State(ctx, key)
	if err != nil {
		return fmt.Errorf("you hold no claim on %s (nobody does now)", key)
	}
	return fmt.Errorf("you hold no claim on %s: %s holds it", key, st.Owner)
}

// failure is the tool error for err: what the API refused, and why.
func failure(what string, err error) error {
	var ae *client.APIError
	switch {
	case errors.Is(err, errClosed):
		return err
	case errors.Is(err, client.ErrInvalid), errors.Is(err, client.ErrUnsupported), errors.Is(err, client.ErrLimitMismatch), errors.Is(err, client.ErrModeMismatch):
		return fmt.Errorf("invalid: %s", detail(err))
	case errors.Is(err, client.ErrUnauthorized), errors.Is(err, client.ErrForbidden):
		return fmt.Errorf("%s refused: %s", what, detail(err))
	case errors.Is(err, client.ErrSessionNotFound):
		return fmt.Errorf("%s: this agent's lockd session was lost (it lapsed); your claims in it are gone: claim again", what)
	case errors.Is(err, client.ErrUnavailable):
		return fmt.Errorf("%s: lockd is unavailable (%s); retry in a moment", what, detail(err))
	case errors.As(err, &ae) && ae.Status == http.StatusTooManyRequests:
		return fmt.Errorf("%s refused: %s", what, detail(err))
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: cancelled", what)
	}
	return fmt.Errorf("%s: %s", what, detail(err))
}

// electionFailure is failure for an election, whose name the API checks
// as a lock key: its words about "key" are about the election field.
func electionFailure(what string, err error) error {
	if errors.Is(err, client.ErrInvalid) {
		return fmt.Errorf("invalid: election: %s", detail(err))
	}
	return failure(what, err)
}

// check is the first of errs that is not nil: the tools check locally
// what the API cannot name by the tools' fields.
func check(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func named(field, v string) error {
	switch {
	case v == "":
		return fmt.Errorf("invalid: %s is required: 1-200 characters of A-Z a-z 0-9 . _ : @ -", field)
	case strings.Contains(v, "/"):
		return fmt.Errorf("invalid: %s may not hold a slash: write %s as %s", field, v, strings.ReplaceAll(strings.Trim(v, "/"), "/", ":"))
	}
	return nil
}

func nonNegative(field string, v int64) error {
	if v < 0 {
		return fmt.Errorf("invalid: %s must not be negative, got %d", field, v)
	}
	return nil
}

// agentField checks an agent's name as the API checks an owner's.
func agentField(v string) error {
	if v != "" && (ownerName(v) != v || len([]rune(v)) > 128) {
		return fmt.Errorf("invalid: agent must be 1-128 printable characters")
	}
	return nil
}

// detail is the API's own words for err when it has them.
func detail(err error) string {
	var ae *client.APIError
	if errors.As(err, &ae) && ae.Problem.Detail != nil && *ae.Problem.Detail != "" {
		return *ae.Problem.Detail + " (" + string(ae.Problem.Code) + ")"
	}
	return strings.TrimPrefix(err.Error(), "lockd: ")
}

func lost(err error) bool {
	return errors.Is(err, client.ErrLeaseLost) || errors.Is(err, client.ErrNotFound)
}

// answer is the error of a raw API call, as the Go client would report it.
func answer(resp *http.Response, err error) error {
	if err != nil {
		return fmt.Errorf("%w: %w", client.ErrUnavailable, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	ae := &client.APIError{Status: resp.StatusCode}
	_ = json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 1<<20)).Decode(&ae.Problem)
	return ae
}

// noteOf is a note as a lock's value: any JSON but null, at most 4 KiB.
func noteOf(n any) (json.RawMessage, error) {
	if n == nil {
		return nil, nil
	}
	b, err := json.Marshal(n)
	if err != nil {
		return nil, fmt.Errorf("invalid: note: %v", err)
	}
	if len(b) > 4096 {
		return nil, fmt.Errorf("invalid: note must be at most 4 KiB as compact JSON, got %d bytes", len(b))
	}
	return b, nil
}

// noteValue is a lock's value as a note.
func noteValue(v *api.Value) any {
	if v == nil || len(*v) == 0 {
		return nil
	}
	var n any
	if json.Unmarshal(*v, &n) != nil {
		return nil
	}
	return n
}

func holdersOf(st api.LockState, mine int64) []Holder {
	out := make([]Holder, 0, len(st.Holders))
	for _, h := range st.Holders {
		ho := Holder{
			Owner: h.Owner, Note: noteValue(h.Value), Fence: h.Fence, Mode: string(h.Mode),
			AcquiredAt: stamp(h.AcquiredAt), ExpiresAt: stamp(h.ExpiresAt), RemainingMs: h.RemainingMs,
			Yours: mine != 0 && h.Fence == mine,
		}
		// A request to step aside is the exclusive holder's, in the state.
		if rq := st.ReleaseRequested; rq != nil && h.Fence == st.Fence {
			ho.ReleaseRequested = &StepAside{By: rq.By, Reason: rq.Reason, At: stamp(rq.At)}
		}
		out = append(out, ho)
	}
	return out
}

func holdersText(hs []Holder) string {
	parts := make([]string, 0, len(hs))
	for _, h := range hs {
		p := h.Owner
		if h.Yours {
			p += " (you)"
		}
		if n, ok := h.Note.(string); ok && n != "" {
			p += fmt.Sprintf(" %q", n)
		}
		p += ", " + describe(ms(h.RemainingMs)) + " left"
		if rq := h.ReleaseRequested; rq != nil {
			p += fmt.Sprintf(", asked to let go by %s", rq.By)
			if rq.Reason != "" {
				p += fmt.Sprintf(" (%q)", rq.Reason)
			}
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, " and ")
}

// text is a result whose content is one readable line; the SDK adds the
// structured content.
func text(line string) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: line}}}
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

func ptr[T any](v T) *T { return &v }
