package main

import (
	"context"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"

	"github.com/lockd/lockd/internal/tracing"
)

// startTracing sets up --otlp-endpoint's exporter. Without the flag the
// tracer is nil: requests still get trace ids for the access log, and no
// span is recorded.
func startTracing(ctx context.Context, cfg serveConfig, log zerolog.Logger) (*tracing.Tracer, error) {
	if cfg.otlpEndpoint == "" {
		return nil, nil
	}
	// The exporter's failures (collector down or refusing) are logged as
	// lockd's own warnings rather than on stderr.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn().Err(err).Msg("tracing: spans not exported")
	}))
	tracer, err := tracing.New(ctx, tracing.Config{Endpoint: cfg.otlpEndpoint, Version: serviceVersion()})
	if err != nil {
		return nil, usageError("--otlp-endpoint: %v", err)
	}
	endpoint, _ := tracing.EndpointURL(cfg.otlpEndpoint) // checked by validate; has no credentials
	log.Info().Str("otlp_endpoint", endpoint).Msg("tracing: exporting spans over OTLP/HTTP")
	return tracer, nil
}

// stopTracing sends the spans not yet exported, for at most 5 s.
func stopTracing(tracer *tracing.Tracer, log zerolog.Logger) {
	if !tracer.Enabled() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tracer.Shutdown(ctx); err != nil {
		log.Warn().Err(err).Msg("tracing: spans left unexported at shutdown")
	}
}
