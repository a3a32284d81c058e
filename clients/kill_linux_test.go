package clients

import (
	"os/exec"
	"syscall"
)

// killWithParent makes the kernel kill the child when the test binary dies
// (a timeout panic that skips the cleanups, say), so no lockd outlives it.
func killWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
