// Package api is lockd's wire contract: the OpenAPI document that describes
// every endpoint and the Go types, chi server interface and HTTP client that
// oapi-codegen generates from it.
//
// The generated code (api.gen.go, and bodies.gen.go from
// ./internal/genbodies) is checked in; run `go generate ./...` after
// editing openapi.yaml. A test fails when the two disagree.
package api

import _ "embed"

//go:generate go tool oapi-codegen -config oapi-codegen.yaml openapi.yaml
//go:generate go run ./internal/genbodies -o bodies.gen.go openapi.yaml

// OpenAPI is the document this server implements, served at /openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte
