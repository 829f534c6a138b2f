package config

import (
	"fmt"
	"net"
	"strings"
)

// isLoopbackAddr reports whether the listen address host:port binds a
// loopback interface only: localhost, 127.0.0.0/8 or ::1. An empty host
// (":8080"), 0.0.0.0, :: and every other name or address are not.
func isLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	host, _, _ = strings.Cut(host, "%") // an IPv6 zone
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// validateDevListen refuses, in dev mode, a listener that is not on
// loopback, unless Dev.InsecureNonLoopback says it is meant: dev mode keeps
// nothing and, without QC_ADMIN_TOKENS and QC_API_KEYS, its admin and
// client endpoints are open, so an image that sets QC_HTTP_ADDR=:8080 and
// is started without backends must not serve it on every interface
// (issue 22 §4).
func (c Config) validateDevListen() []error {
	if !c.DevMode() || c.Dev.InsecureNonLoopback {
		return nil
	}
	var errs []error
	for _, l := range []struct{ flag, env, addr string }{
		{"http-addr", "QC_HTTP_ADDR", c.HTTP.Addr}, {"grpc-addr", "QC_GRPC_ADDR", c.GRPC.Addr},
		{"pprof-addr", "QC_PPROF_ADDR", c.HTTP.PprofAddr}, // never authenticated
	} {
		if l.addr != "" && !isLoopbackAddr(l.addr) {
			errs = append(errs, fmt.Errorf("dev mode (no QC_REDIS_ADDR, no QC_MYSQL_DSN) listens on loopback only, but %s (%s) is %q: "+
				"use a 127.0.0.1 address, configure the backends (production), or set QC_DEV_INSECURE_NON_LOOPBACK=true "+
				"to serve dev mode's in-memory, possibly unauthenticated endpoints beyond this machine on purpose", l.flag, l.env, l.addr))
		}
	}
	return errs
}
