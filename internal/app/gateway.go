package app

import (
	"context"
	"fmt"
	"net"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/config"
	"github.com/quotacenter/quota-center/internal/gateway"
	"github.com/quotacenter/quota-center/internal/quota"
)

// startGateway starts the Envoy rate limit service listener when
// QC_GRPC_ADDR is set; stop (never nil) ends it once the calls in flight
// are answered. The mapping file is validated before anything listens.
func startGateway(ctx context.Context, cfg config.Config, svc *quota.Service, log *zap.Logger, reg prometheus.Registerer) (stop func(), err error) {
	if cfg.GRPC.Addr == "" {
		return func() {}, nil
	}
	gcfg, err := gateway.LoadConfig(cfg.GRPC.GatewayConfig)
	if err != nil {
		return nil, err
	}
	creds, err := gateway.TLSFiles{Cert: cfg.GRPC.TLSCert, Key: cfg.GRPC.TLSKey, ClientCA: cfg.GRPC.TLSClientCA}.Credentials()
	if err != nil {
		return nil, err
	}
	keys := make([]gateway.Key, len(cfg.Auth.APIKeys))
	for i, k := range cfg.Auth.APIKeys {
		keys[i] = gateway.Key{Key: string(k.Key), ClientID: k.ClientID, Resources: k.Resources, AllResources: k.AllResources}
	}
	gsvc := gateway.NewService(gateway.Options{
		Config: gcfg, Quota: svc, Keys: gateway.NewKeys(keys), Log: log.Named("gateway"), Metrics: gateway.NewMetrics(reg),
	})
	if err := gsvc.Start(ctx); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.GRPC.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen grpc %s: %w", cfg.GRPC.Addr, err)
	}
	srv := gateway.NewServer(gsvc, creds)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil {
			log.Error("grpc server stopped", zap.Error(err))
		}
	}()
	log.Info("grpc listening (Envoy rate limit service)", zap.String("addr", ln.Addr().String()),
		zap.String("gateway_config", gcfg.Path), zap.Bool("tls", creds != nil), zap.Bool("api_keys", len(keys) > 0))
	return func() {
		srv.Stop()
		<-done
	}, nil
}
