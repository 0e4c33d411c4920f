package etcdtest

import (
	"os/exec"
	"syscall"
)

// setDeathSignal kills the member when the process that started it dies, so
// that a test that crashes leaves no etcd behind.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
