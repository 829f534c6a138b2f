package strictjson

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestNoNullOfPrefilterAnswersAsTheDecoder: NoNullOf, which skips the
// decoding pass for a body without the pattern ':' [whitespace] 'n'
// (mayHaveNullMember), answers every body as the decoding pass alone does:
// the same error (field and reason) or nil. The bodies are hand-picked
// edge cases (whitespace around ':', a word other than null starting with
// 'n', a truncated null, nulls nested or in strings, duplicates, invalid
// JSON) and random mutations of apply bodies.
func TestNoNullOfPrefilterAnswersAsTheDecoder(t *testing.T) {
	names := [][]string{nil, {"businessLine", "critical", "continuation", "sessionId", "minAmount"}}
	bodies := []string{
		`{"resourceName":"r","applyAmount":1,"clientId":"wrk"}`,
		`{"critical":null}`, `{"critical" : null}`, "{\"critical\":\t\r\n null}", `{"critical":nope}`,
		`{"critical":nul`, `{"critical":n`, `{"critical":`, `{"a":"x:n","critical":true}`, `{"a":"x: null"}`,
		`{"critical":true,"critical":null}`, `{"x":{"critical":null}}`, `{"x":[null],"minAmount":null}`,
		`{"sessionId":null,"bogus":1}`, `{"bogus":1,"sessionId":null}`, `null`, ` {"minAmount" :null} `,
		`{"a":1,,"critical":null}`, `{"a" null}`, `{:null}`, `{"a":1}:n`, `{"a":true}{"critical":null}`,
	}
	rng := rand.New(rand.NewPCG(23, 3))
	alphabet := []byte(`{}[]:," nulltrfae0123456789\t\nabcxyz`)
	for range 20000 {
		b := []byte(bodies[rng.IntN(len(bodies))])
		for range 1 + rng.IntN(4) {
			switch i := rng.IntN(len(b) + 1); rng.IntN(3) {
			case 0: // insert
				b = append(b[:i:i], append([]byte{alphabet[rng.IntN(len(alphabet))]}, b[i:]...)...)
			case 1: // delete
				if i < len(b) {
					b = append(b[:i:i], b[i+1:]...)
				}
			default: // replace
				if i < len(b) {
					b[i] = alphabet[rng.IntN(len(alphabet))]
				}
			}
		}
		bodies = append(bodies, string(b))
	}
	skipped := 0
	for _, body := range bodies {
		for _, ns := range names {
			got, want := NoNullOf([]byte(body), ns...), noNullDecoded([]byte(body), ns)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("%q names %v: NoNullOf %v, the decoding pass %v", body, ns, got, want)
			}
			if !mayHaveNullMember([]byte(body)) {
				skipped++
			}
		}
	}
	if skipped == 0 || skipped == 2*len(bodies) {
		t.Fatalf("the prefilter skipped %d of %d bodies: the test does not exercise both paths", skipped, 2*len(bodies))
	}
}

// TestMayHaveNullMember: the pattern, with JSON whitespace (and only it)
// between ':' and 'n'.
func TestMayHaveNullMember(t *testing.T) {
	for body, want := range map[string]bool{
		`{"a":null}`: true, `{"a": null}`: true, "{\"a\":\t\r\nnull}": true, `{"a":nope}`: true, `"x:n"`: true,
		`{"a":1}`: false, `{"name":"n"}`: false, `{"a":"null"}`: false, `{"a":\vnull}`: false, `:`: false, `n`: false, ``: false,
		`{"a": }`: false,
	} {
		if got := mayHaveNullMember([]byte(body)); got != want {
			t.Errorf("%q: %v, want %v", body, got, want)
		}
	}
}
