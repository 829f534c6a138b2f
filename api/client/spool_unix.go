//go:build unix

package client

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive flock on f without waiting; it fails while
// another open file (of this process or another) holds one. The kernel
// releases it when the process dies.
func lockFile(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}

const spoolSupported = true
