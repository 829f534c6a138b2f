// Package strictjson reads request JSON strictly and words every refusal
// the API's way: a *quota.ValidationError naming the field, never the JSON
// library's own message. The HTTP handlers (internal/httpapi) and the
// merge-patched policy (internal/admin) decode with it, so that one mistake
// reads the same on every endpoint.
package strictjson
