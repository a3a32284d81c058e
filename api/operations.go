package api

import (
	"fmt"
	"net/http"
	"strings"

	"gopkg.in/yaml.v3"
)

// Operation is one operation of the contract as the server's policy needs
// it, read from openapi.yaml so that the scope an operation requires is
// decided in one place, the document clients read too.
type Operation struct {
	// ID is the operationId, e.g. "acquireLock".
	ID string
	// Method is the HTTP method, upper case.
	Method string
	// Path is the path template, e.g. "/v1/locks/{key}/acquire": the same
	// string the generated chi routes use, so a matched route's pattern
	// finds its operation.
	Path string
	// Scope is the operation's x-lockd-scope: "read", "write", "admin", or
	// "none" for the operations that never need a key (the probes).
	Scope string
	// Kind is the operation's x-lockd-kind: "lock", "semaphore" or "election" for the
	// operations on one kind of resource, "" for the others.
	Kind string
	// Body reports whether the operation takes a request body.
	Body bool
}

// operations is every operation of OpenAPI, by method and path template.
var operations = mustOperations(OpenAPI)

// OperationFor is the operation that serves method on the path template
// pattern (a chi route pattern), if the contract has one.
func OperationFor(method, pattern string) (Operation, bool) {
	op, ok := operations[method+" "+pattern]
	return op, ok
}

// Operations lists every operation of the contract.
func Operations() []Operation {
	out := make([]Operation, 0, len(operations))
	for _, op := range operations {
		out = append(out, op)
	}
	return out
}

func mustOperations(doc []byte) map[string]Operation {
	ops, err := parseOperations(doc)
	if err != nil {
		// The document is embedded at build time; TestOperations proves
		// that this cannot happen with the committed one.
		panic("api: openapi.yaml: " + err.Error())
	}
	return ops
}

// parseOperations reads only what the policy needs; a full OpenAPI loader
// would be a large dependency for six fields.
func parseOperations(doc []byte) (map[string]Operation, error) {
	var d struct {
		Paths map[string]map[string]struct {
			OperationID string    `yaml:"operationId"`
			Scope       string    `yaml:"x-lockd-scope"`
			Kind        string    `yaml:"x-lockd-kind"`
			RequestBody yaml.Node `yaml:"requestBody"`
		} `yaml:"paths"`
	}
	if err := yaml.Unmarshal(doc, &d); err != nil {
		return nil, err
	}
	ops := map[string]Operation{}
	for path, item := range d.Paths {
		for method, o := range item {
			m := strings.ToUpper(method)
			switch m {
			case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
			default:
				continue // parameters, summary, x-… on the path item
			}
			switch o.Scope {
			case "read", "write", "admin", "none":
			default:
				return nil, fmt.Errorf("%s %s (%s): x-lockd-scope is %q, want read, write, admin or none", m, path, o.OperationID, o.Scope)
			}
			switch o.Kind {
			case "", "lock", "semaphore", "election":
			default:
				return nil, fmt.Errorf("%s %s (%s): x-lockd-kind is %q, want lock, semaphore or election", m, path, o.OperationID, o.Kind)
			}
			if o.OperationID == "" {
				return nil, fmt.Errorf("%s %s has no operationId", m, path)
			}
			ops[m+" "+path] = Operation{ID: o.OperationID, Method: m, Path: path, Scope: o.Scope, Kind: o.Kind, Body: !o.RequestBody.IsZero()}
		}
	}
	return ops, nil
}
