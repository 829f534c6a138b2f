package app

import (
	"context"
	"fmt"
	"net"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/config"
	"github.com/quotacenter/quota-center/internal/gateway"
)

// buildGateway builds the Envoy rate limit service listener when
// QC_GRPC_ADDR is set (nil, nil otherwise) and listens, so that a taken
// port fails the start; instance.run serves it. The mapping file is
// validated before anything listens.
func buildGateway(ctx context.Context, cfg config.Config, svc gateway.Quota, log *zap.Logger, reg prometheus.Registerer) (*gateway.Server, net.Listener, error) {
	if cfg.GRPC.Addr == "" {
		return nil, nil, nil
	}
	gcfg, err := gateway.LoadConfig(cfg.GRPC.GatewayConfig)
	if err != nil {
		return nil, nil, err
	}
	creds, err := gateway.TLSFiles{Cert: cfg.GRPC.TLSCert, Key: cfg.GRPC.TLSKey, ClientCA: cfg.GRPC.TLSClientCA}.Credentials()
	if err != nil {
		return nil, nil, err
	}
	keys := make([]gateway.Key, len(cfg.Auth.APIKeys))
	for i, k := range cfg.Auth.APIKeys {
		keys[i] = gateway.Key{Key: string(k.Key), ClientID: k.ClientID, Resources: k.Resources, AllResources: k.AllResources}
	}
	gsvc := gateway.NewService(gateway.Options{
		Config: gcfg, Quota: svc, Keys: gateway.NewKeys(keys), Log: log.Named("gateway"), Metrics: gateway.NewMetrics(reg),
	})
	if err := gsvc.Start(ctx); err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", cfg.GRPC.Addr)
	if err != nil {
		return nil, nil, fmt.Errorf("listen grpc %s: %w", cfg.GRPC.Addr, err)
	}
	log.Info("grpc listening (Envoy rate limit service)", zap.String("addr", ln.Addr().String()),
		zap.String("gateway_config", gcfg.Path), zap.Bool("tls", creds != nil), zap.Bool("api_keys", len(keys) > 0))
	return gateway.NewServer(gsvc, creds), ln, nil
}
