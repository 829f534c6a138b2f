// Package apiclient is the HTTP API's client as oapi-codegen generates it
// from api/openapi.yaml (client.gen.go; regenerate with
// `go generate ./internal/contract/...`). It exists for the contract tests
// of internal/contract, which decode every answer of a live server with it,
// as a user's generated client would. It is not the SDK (api/client) and
// nothing but tests imports it, so the SDK's dependencies stay small.
package apiclient

//go:generate go tool oapi-codegen -config oapi-codegen.yaml ../../../api/openapi.yaml
