package httpapi

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/quotacenter/quota-center/api/client"
	"github.com/quotacenter/quota-center/internal/quota"
)

// jsonFields lists the JSON names of a struct's fields.
func jsonFields(v any, skip ...string) []string {
	var out []string
	rt := reflect.TypeOf(v)
	for i := 0; i < rt.NumField(); i++ {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" && !slices.Contains(skip, name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// TestWireTypesMatchTheGoClient holds the JSON the handlers read and write
// against the Go client's types (api/client), field by field, so that a
// field the server adds (as the pools' businessLine, drawn, quotaTight and
// reason did) cannot go missing from the client. api/openapi_test.go holds
// the client's types against api/openapi.yaml.
func TestWireTypesMatchTheGoClient(t *testing.T) {
	envelope := []string{"success", "code"}
	for _, tc := range []struct {
		name           string
		server, client any
	}{
		{"apply request", applyRequest{}, client.ApplyRequest{}},
		{"apply answer", applyResponse{}, client.ApplyResponse{}},
		{"drawn", quota.PoolSplit{}, client.Drawn{}},
		{"heartbeat answer", heartbeatResponse{}, client.HeartbeatResponse{}},
		{"finish request", sessionRequest{}, client.FinishRequest{}},
		{"finish answer", finishResponse{}, client.FinishResponse{}},
	} {
		s, c := jsonFields(tc.server, envelope...), jsonFields(tc.client, envelope...)
		if !slices.Equal(s, c) {
			t.Errorf("%s: server fields %v, Go client fields %v", tc.name, s, c)
		}
	}
	// Error answers: the client reads every field but the envelope into
	// *client.Error (status as SessionStatus), and reports into
	// ReconcileSkipped's error.
	want := []string{"lineRemaining", "message", "nextResetAt", "reason", "remainingQuota", "status"}
	if got := jsonFields(errorBody{}, envelope...); !slices.Equal(got, want) {
		t.Errorf("error body fields %v: the Go client reads %v (add the new one to api/client errors.go)", got, want)
	}
}
