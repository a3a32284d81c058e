// Package deploy holds lockd's deployment files: Compose files for the
// Redis topologies, an example auth file, Prometheus alert rules
// (prometheus/lockd-alerts.yaml) and a Grafana dashboard
// (grafana/lockd-dashboard.json). Its test checks that they parse and that
// every metric they use is one lockd exports.
package deploy
