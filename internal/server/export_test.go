package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockd/lockd/internal/lock"
)

// ContentionForTest drives the contention metrics without HTTP.
type ContentionForTest struct{ c *contention }

func NewContentionForTest(reg prometheus.Registerer, cfg ContentionConfig) ContentionForTest {
	return ContentionForTest{newContention(reg, cfg, nil)}
}

func (c ContentionForTest) Acquired(key string, waited time.Duration) {
	c.c.acquired(key, lock.Granted, nil, waited, true)
}

func (c ContentionForTest) Ended(key string, held time.Duration) { c.c.ended(key, "released", held) }
