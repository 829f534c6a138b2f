package client_test

import "runtime"

func runtimeGOMAXPROCS() int { return runtime.GOMAXPROCS(0) }
