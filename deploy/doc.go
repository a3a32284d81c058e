// Package deploy holds lockd's deployment files: Compose files for the
// Redis topologies, Kubernetes manifests with a kustomization
// (kubernetes/), an example auth file, Prometheus alert rules
// (prometheus/lockd-alerts.yaml) and a Grafana dashboard
// (grafana/lockd-dashboard.json). Its tests check that they parse, that
// every metric they use is one lockd exports, and that the Kubernetes
// manifests decode strictly into the Kubernetes API types and agree with
// the Dockerfile, `lockd serve`'s flags and the contract's probes.
package deploy
