package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/webhook"
)

// startWebhooks delivers the event stream to --webhooks-file's endpoints
// until the returned function is called. Every replica runs a dispatcher;
// the consumer groups in Redis make each event one replica's to deliver.
// An engine without an event stream (Redlock) is a usage error, never a
// server that quietly delivers nothing; validate refuses it first.
func startWebhooks(cfg serveConfig, engine lock.Service, log zerolog.Logger, reg prometheus.Registerer) (func(), error) {
	if len(cfg.webhooks) == 0 {
		return func() {}, nil
	}
	src, err := engine.EventSource()
	if errors.Is(err, lock.ErrUnsupported) {
		return nil, usageError("--webhooks-file needs an event stream, which this topology does not have")
	}
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	d := webhook.New(src.Client, src.Stream, cfg.webhooks, webhook.Options{
		Consumer: fmt.Sprintf("%s-%d", host, os.Getpid()),
		// The error names the endpoint and what went wrong, never its
		// secret or URL (which may carry credentials). Reasons such as
		// "connection refused" stay in this log, for the admin who
		// configured the endpoint; metrics count outcomes only.
		OnError: func(hook string, err error) { log.Warn().Str("webhook", hook).Err(err).Msg("webhook delivery") },
	}, reg)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.Run(ctx)
	}()
	names := make([]string, len(cfg.webhooks))
	for i, h := range cfg.webhooks {
		names[i] = h.Name
		if h.Plaintext() {
			log.Warn().Str("webhook", h.Name).Msg("webhook over plain http:// to another host: whoever is on the path " +
				"can read the events and hold them back (the signature only stops changes); use https://")
		}
	}
	log.Info().Strs("webhooks", names).Msg("delivering events to webhooks")
	return func() { cancel(); wg.Wait() }, nil
}
