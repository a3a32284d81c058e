package web

import (
	"fmt"
	"slices"
	"time"

	"github.com/lockd/lockd/internal/lock"
)

// rhythmSize is how many renewals the detail page charts: all that lockd
// keeps by default.
const rhythmSize = 100

// rhythm is the detail page's renewal chart, drawn on the server as SVG:
// one bar per renewal, its height the time since the previous renewal (or
// the grant) as a share of the TTL, and a line at two thirds of the TTL,
// past which the holder is at risk (it renewed with under a third left).
// Everything is computed here; the template only places it.
type rhythm struct {
	Width, Height int
	Bars          []rhythmBar
	RiskY         int    // the y of the at-risk line
	Summary       string // for people and screen readers
	Late          int    // renewals past the line
}

// rhythmBar is one renewal.
type rhythmBar struct {
	X, Y, W, H int
	Late       bool
	Title      string // hover text: when, interval, time left
}

const (
	chartW, chartH = 600, 120
	chartTop       = 4 // room above a bar of a full TTL
)

// newRhythm charts renewals (newest first, as the engine returns them);
// nil with fewer than two.
func newRhythm(renewals []lock.Event) *rhythm {
	if len(renewals) < 2 {
		return nil
	}
	evs := slices.Clone(renewals)
	slices.Reverse(evs) // oldest first, left to right
	// Each renewal's interval: the lease's TTL minus what was left when it
	// came is how long it had run since the previous renewal or grant.
	r := &rhythm{Width: chartW, Height: chartH}
	usable := chartH - chartTop
	r.RiskY = chartH - usable*2/3
	step := chartW / len(evs)
	var intervals []time.Duration
	for i, e := range evs {
		ttl := e.TTL
		if ttl <= 0 {
			continue
		}
		interval := max(ttl-e.Left, 0)
		share := min(float64(interval)/float64(ttl), 1)
		h := max(int(share*float64(usable)), 1)
		late := e.Left < ttl/3
		if late {
			r.Late++
		}
		intervals = append(intervals, interval)
		r.Bars = append(r.Bars, rhythmBar{
			X: i*step + 1, W: max(step-2, 1), Y: chartH - h, H: h, Late: late,
			Title: fmt.Sprintf("%s: %s after the last, %s of %s left", e.At.UTC().Format("15:04:05.000"),
				leaseSpan(interval), leaseSpan(e.Left), leaseSpan(ttl)),
		})
	}
	if len(intervals) == 0 {
		return nil
	}
	slices.Sort(intervals)
	r.Summary = fmt.Sprintf("%d renewals, every %s (median) of a %s TTL; %d came with under a third left.",
		len(intervals), leaseSpan(intervals[len(intervals)/2]), leaseSpan(evs[len(evs)-1].TTL), r.Late)
	return r
}
