//go:build !linux

package faults

import "syscall"

// sysProcAttr: no parent-death signal outside Linux; Close stops the servers.
func sysProcAttr() *syscall.SysProcAttr { return nil }
