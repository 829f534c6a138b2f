package faults

import "syscall"

// sysProcAttr kills a server when the process that started it dies, so a
// killed test binary leaves no private server behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
