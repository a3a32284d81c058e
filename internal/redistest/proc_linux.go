package redistest

import (
	"os/exec"
	"syscall"
)

// killWithParent makes the kernel kill the redis-server when the test binary
// dies (a timeout panic, say, that skips Close), so no server outlives it.
// Pdeathsig is tied to the thread that started the child; the Go runtime
// only ends threads locked with LockOSThread, which the harness does not use.
func killWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
