package lock

import (
	"fmt"
	"strconv"
	"time"
)

// reply reads the array a script returns. Lua numbers arrive as int64 and
// Lua strings as string; fences and timestamps travel as strings because
// Lua formats large numbers in exponent notation.
type reply struct {
	vals []any
	err  error
}

func newReply(v any) (*reply, error) {
	vals, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("lock: unexpected script reply %T", v)
	}
	return &reply{vals: vals}, nil
}

func (r *reply) len() int { return len(r.vals) }

func (r *reply) str(i int) string {
	if i >= len(r.vals) {
		r.fail(fmt.Errorf("lock: script reply has %d values, want index %d", len(r.vals), i))
		return ""
	}
	switch v := r.vals[i].(type) {
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	case nil:
		return ""
	default:
		r.fail(fmt.Errorf("lock: script reply value %d is %T", i, v))
		return ""
	}
}

func (r *reply) int(i int) int64 {
	s := r.str(i)
	if s == "" {
		return 0
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		r.fail(fmt.Errorf("lock: script reply value %d: %w", i, err))
	}
	return n
}

func (r *reply) ms(i int) time.Duration { return time.Duration(r.int(i)) * time.Millisecond }

func (r *reply) time(i int) time.Time { return time.UnixMilli(r.int(i)).UTC() }

func (r *reply) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}
