package strictjson_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/strictjson"
)

func reason(t *testing.T, err error) string {
	t.Helper()
	var ve *quota.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("%v (%T), want a *quota.ValidationError", err, err)
	}
	return ve.Field + ": " + ve.Reason
}

func TestAmount(t *testing.T) {
	for _, tc := range []struct {
		raw      string
		required bool
		want     int64
		err      string
	}{
		{"42", true, 42, ""},
		{"-7", true, -7, ""},
		{" 0 ", true, 0, ""},
		{"", false, 0, ""},
		{"null", false, 0, ""},
		{"", true, 0, "n: is required"},
		{"null", true, 0, "n: is required"},
		{`"5"`, true, 0, "n: must be a JSON number, not a string"},
		{"true", true, 0, "n: must be a JSON number, not a boolean"},
		{"false", true, 0, "n: must be a JSON number, not a boolean"},
		{"{}", true, 0, "n: must be a JSON number, not an object"},
		{"[1]", true, 0, "n: must be a JSON number, not an array"},
		{"-0", true, 0, "n: must not be -0"},
		{"1.5", true, 0, "n: " + strictjson.ReasonWholeNumber},
		{"1e3", true, 0, "n: " + strictjson.ReasonWholeNumber},
		{"9007199254740991", true, quota.MaxAmount, ""},
		{"9007199254740992", true, 0, "n: must be at most 2^53-1"},
		{"-9007199254740992", true, 0, "n: must be at most 2^53-1"},
	} {
		got, err := strictjson.Amount("n", []byte(tc.raw), tc.required)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("%q: %d, %v; want %d", tc.raw, got, err, tc.want)
		case tc.err != "" && (err == nil || reason(t, err) != tc.err):
			t.Errorf("%q: %d, %v; want %q", tc.raw, got, err, tc.err)
		}
	}
}

func TestIsInteger(t *testing.T) {
	for s, want := range map[string]bool{"0": true, "7": true, "-12": true, "": false, "-": false, "+7": false,
		"007": false, "-01": false, "1.0": false, "1e2": false, "1,000": false, " 1": false} {
		if strictjson.IsInteger(s) != want {
			t.Errorf("IsInteger(%q) = %v, want %v", s, !want, want)
		}
	}
}

func TestUnmarshalWordsEveryRefusal(t *testing.T) {
	type body struct {
		Name  string   `json:"name"`
		N     int64    `json:"n"`
		On    bool     `json:"on"`
		Tags  []string `json:"tags"`
		Inner struct {
			X int `json:"x"`
		} `json:"inner"`
	}
	for _, tc := range []struct{ in, want string }{
		{`{"name":"a","name":"b"}`, "name: is given twice"},
		{`{"name":"a"`, "body: is truncated JSON"},
		{`{"name":"a",,}`, `body: is not valid JSON: unexpected "," at byte 12`},
		{`{"name":"a"} x`, `body: is not valid JSON: unexpected "x" at byte 13`},
		{`{"Name":"a"}`, "Name: " + strictjson.ReasonUnknownField},
		{`{"inner":{"y":1}}`, "y: " + strictjson.ReasonUnknownField},
		{`[1]`, "body: must be a JSON object"},
		{`{"n":1.5}`, "n: " + strictjson.ReasonWholeNumber},
		{`{"n":"1"}`, "n: must be a JSON number, not a string"},
		{`{"n":true}`, "n: must be a JSON number, not a boolean"},
		{`{"name":5}`, "name: must be a JSON string, not a number"},
		{`{"on":"yes"}`, "on: must be a JSON boolean, not a string"},
		{`{"tags":{}}`, "tags: must be a JSON array, not an object"},
		{`{"inner":[]}`, "inner: must be a JSON object, not an array"},
	} {
		var b body
		err := strictjson.Unmarshal([]byte(tc.in), &b)
		if err == nil {
			t.Errorf("%s: accepted", tc.in)
			continue
		}
		if got := reason(t, err); got != tc.want || strings.Contains(got, "json") {
			t.Errorf("%s: %q, want %q", tc.in, got, tc.want)
		}
	}
	b := body{N: 9}
	if err := strictjson.Unmarshal([]byte(`{"name":"a"}`), &b); err != nil || b.Name != "a" || b.N != 9 {
		t.Fatalf("a valid body: %+v, %v; want name a and the preset n kept", b, err)
	}
}

// TestNoNullMember: the first null member of an object is named; nested
// nulls, other values and bodies that are not objects are left alone.
func TestNoNullMember(t *testing.T) {
	for body, want := range map[string]string{
		`{"a":1,"b":null,"c":null}`:   "b",
		`{"a":null}`:                  "a",
		`{"a":{"b":null},"c":[null]}`: "",
		`{"a":"null","b":false}`:      "",
		`[null]`:                      "",
		`{"a":`:                       "",
		`{}`:                          "",
	} {
		err := strictjson.NoNullMember([]byte(body))
		var ve *quota.ValidationError
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v, want nil", body, err)
		case want != "" && (!errors.As(err, &ve) || ve.Field != want):
			t.Errorf("%s: %v, want a ValidationError of %s", body, err, want)
		}
	}
}
