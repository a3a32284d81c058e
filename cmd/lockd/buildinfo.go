package main

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
)

// newBuildInfo is lockd_build_info: always 1, its labels say which lockd
// answers (the version and commit of --version), so that a dashboard can
// tell replicas of a rolling update apart.
func newBuildInfo() prometheus.Collector {
	v, rev := buildVersion()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "lockd_build_info",
		Help:        "Which lockd this is: always 1, with its version, commit and Go version as labels.",
		ConstLabels: prometheus.Labels{"version": v, "commit": rev, "goversion": runtime.Version()},
	})
	g.Set(1)
	return g
}
