// Package httpapi is quota-center's HTTP surface: chi routes, strict JSON
// request decoding, response shapes (field names as in the main design, so
// its clients work unchanged), middleware, metrics, and writeError — the one
// map from domain errors to HTTP status and JSON code.
//
// It imports quota; never redisstore or mysqlstore.
package httpapi
