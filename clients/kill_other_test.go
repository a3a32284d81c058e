//go:build !linux

package clients

import "os/exec"

// killWithParent has no portable equivalent outside Linux: the test's
// cleanups end the child.
func killWithParent(*exec.Cmd) {}
