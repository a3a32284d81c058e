# lockd's everyday commands. `make test` is the one CI runs.

.PHONY: run test test-quick check generate bench build image lint-spec screenshot

# Run lockd on the embedded in-process store (no Redis needed).
run:
	go run ./cmd/lockd serve

# Install what the tests need when it is missing, then run every test on a
# real redis-server (started and stopped by the tests themselves).
test:
	./scripts/install-deps
	go test -race -count=1 ./...

# The suite without what takes longest: the Sentinel, Cluster and Redlock
# topologies, fault injection, the Python and TypeScript clients, the
# browser, and the race detector. For a quick look while working; CI runs
# make test.
test-quick:
	./scripts/install-deps
	go test -count=1 -skip 'Sentinel|Cluster|Redlock|Faults|Failover|Python|TypeScript|Browser' ./...

# Formatting, vet, staticcheck (pinned as a go tool) and generated code
# that matches its sources (the TypeScript client's types need the npm
# tools of tools/js: ./scripts/install-deps).
check:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	go vet ./...
	go tool staticcheck ./...
	go generate ./...
	git diff --exit-code -- api internal/web clients/typescript/src/api.ts

generate:
	go generate ./...

# api/openapi.yaml through two outside linters, Redocly (recommended rules)
# and Spectral (spectral:oas): any error fails; warnings are printed.
# Their npm packages are pinned in tools/js (scripts/install-deps installs them).
lint-spec:
	./scripts/install-deps
	cd tools/js && REDOCLY_SUPPRESS_UPDATE_NOTICE=true npx --no-install redocly lint --config redocly.yaml --format stylish ../../api/openapi.yaml
	cd tools/js && npx --no-install spectral lint --ruleset .spectral.yaml --fail-severity error ../../api/openapi.yaml

# docs/dashboard.png, from the dashboard's browser test in headless Chromium.
screenshot:
	./scripts/install-deps
	go test -count=1 -run '^TestBrowser_FindAndForceRelease$$' ./internal/web -screenshot "$(CURDIR)/docs/dashboard.png"

# The performance figures: lockd beside a bare server, hand-off, engine ops,
# webhook deliveries to a slow endpoint.
bench:
	./scripts/install-deps
	go test -run '^$$' -bench . -benchtime 1x ./internal/server/
	go test -run '^$$' -bench . -benchmem ./internal/lock/
	go test -run '^$$' -bench . -benchtime 1x ./internal/webhook/

# The binary as the Dockerfile builds it: static, stamped with the version
# and commit of the checkout (lockd --version, the spans' service.version);
# without Git, with what the Go toolchain records.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)
COMMIT ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null)
build:
	VERSION='$(VERSION)' COMMIT='$(COMMIT)'; CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$${VERSION} -X main.commit=$${COMMIT}" -o bin/lockd ./cmd/lockd

# The image, stamped as `make build` stamps the binary and tagged with the
# version: lockd:$(VERSION).
image:
	docker build --build-arg VERSION='$(VERSION)' --build-arg COMMIT='$(COMMIT)' -t lockd:$(VERSION) .
