//go:build !linux

package redistest

import "os/exec"

// killWithParent does nothing outside Linux, which alone has Pdeathsig:
// there a test binary that dies without Close leaves its servers running.
func killWithParent(cmd *exec.Cmd) {}
