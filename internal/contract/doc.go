// Package contract holds the HTTP API's contract tests (test files only):
// they start a real quota-center (dev mode, and production mode on the real
// Redis and MySQL when they are reachable), call every operation of
// api/openapi.yaml with answers of success and of error (400, 401, 403,
// 404, 409, 413, 415, 429, 503), validate every answer against the document
// with kin-openapi's openapi3filter, and decode it with the client that
// oapi-codegen generates from the same document (package apiclient), as a
// user's generated client would: an answer the document does not describe
// fails the test. TestGeneratedClientIsInSync keeps apiclient generated
// from the current document.
package contract
