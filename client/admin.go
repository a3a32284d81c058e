package client

import (
	"context"

	"github.com/lockd/lockd/api"
)

// EndQuarantine ends the restart quarantine for every lockd on the
// server's Redis (POST /v1/admin/quarantine/end): after Redis lost its
// data they grant again at once, although leases Redis forgot may still
// be live. It needs an admin key not limited to prefixes; reason is
// required and logged with the key's name.
func (c *Client) EndQuarantine(ctx context.Context, reason string) (api.QuarantineEnded, error) {
	resp, err := c.raw.EndQuarantine(ctx, api.EndQuarantineRequest{Reason: reason})
	return decode[api.QuarantineEnded](ctx, resp, err)
}
