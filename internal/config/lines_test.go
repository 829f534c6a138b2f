package config

import "testing"

func TestAPIKeyBoundToABusinessLine(t *testing.T) {
	keys, err := ParseAPIKeys("key-one-0123456789=svc:llm,img#search;key-two-0123456789=other:*")
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || keys[0].Line != "search" || len(keys[0].Resources) != 2 || keys[0].Resources[1] != "img" || keys[1].Line != "" || !keys[1].AllResources {
		t.Fatalf("keys %+v", keys)
	}
	for _, bad := range []string{"key-one-0123456789=svc:llm#", "key-one-0123456789=svc:llm#Bad Line"} {
		if _, err := ParseAPIKeys(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}
