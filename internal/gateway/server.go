package gateway

import (
	"context"
	"errors"
	"net"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/quotacenter/quota-center/internal/quota"
)

// Server is the gRPC listener (QC_GRPC_ADDR): the rate limit service,
// grpc.health.v1 (the overall health "" and the rate limit service's name)
// and server reflection.
type Server struct {
	grpc   *grpc.Server
	health *health.Server
}

// NewServer registers svc on a gRPC server; creds nil serves plaintext.
func NewServer(svc *Service, creds credentials.TransportCredentials) *Server {
	opts := []grpc.ServerOption{grpc.ChainUnaryInterceptor(clipStatus), grpc.NumStreamWorkers(streamWorkers)}
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}
	g := grpc.NewServer(opts...)
	rls.RegisterRateLimitServiceServer(g, svc)
	h := health.NewServer()
	healthpb.RegisterHealthServer(g, h)
	h.SetServingStatus(rls.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	reflection.Register(g)
	return &Server{grpc: g, health: h}
}

// streamWorkers is the number of long-lived goroutines that answer calls
// (grpc.NumStreamWorkers); a call finding none free gets a goroutine of its
// own, as without the option. A call's stack grows to ~16 KiB on its way
// through the charge (gRPC, Redis and MySQL clients), and a fresh goroutine
// per call copied its stack several times: runtime.copystack was ~11 % of
// quota-center's CPU under scripts/bench-gateway.sh (50 concurrent calls).
// A worker keeps its grown stack (gRPC resets it every 65,536 calls); idle
// workers cost their stacks, ~2-4 MiB in all.
const streamWorkers = 128

// clipStatus bounds an error's status message to quota.MaxMessageBytes:
// some quote the request (an unknown domain, a descriptor's value), which
// may be megabytes long.
func clipStatus(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	resp, err := next(ctx, req)
	if st, ok := status.FromError(err); ok && err != nil && len(st.Message()) > quota.MaxMessageBytes {
		return resp, status.Error(st.Code(), quota.ClipMessage(st.Message()))
	}
	return resp, err
}

// Serve answers on l until Stop; it returns nil after Stop.
func (s *Server) Serve(l net.Listener) error {
	err := s.grpc.Serve(l)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Drain reports NOT_SERVING on health, so that load balancers and Envoy's
// health checks stop sending, while calls are still answered.
func (s *Server) Drain() { s.health.Shutdown() }

// Stop ends the server once the calls in flight are answered.
func (s *Server) Stop() {
	s.health.Shutdown()
	s.grpc.GracefulStop()
}
