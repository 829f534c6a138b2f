//go:build !unix

package client

import (
	"errors"
	"os"
)

func lockFile(*os.File) error { return errors.New("file locks are not supported on this platform") }

const spoolSupported = false
