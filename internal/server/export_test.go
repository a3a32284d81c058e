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

func (c ContentionForTest) Acquired(res lock.Resource, waited time.Duration) {
	c.c.acquired(res, lock.Granted, nil, waited, true)
}

func (c ContentionForTest) Ended(res lock.Resource, held time.Duration) {
	c.c.ended(res, "released", held)
}
