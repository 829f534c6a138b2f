package config

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

const (
	tok1 = "tok1-0123456789abcdef"
	tok2 = "tok2-0123456789abcdef"
	key1 = "key1-0123456789abcdef"
	key2 = "key2-0123456789abcdef"
)

// load runs Load("serve") with the auth flags set as given ("" leaves a
// flag out).
func load(t *testing.T, adminTokens, apiKeys string) (Config, error) {
	t.Helper()
	var args []string
	if adminTokens != "" {
		args = append(args, "--admin-tokens", adminTokens)
	}
	if apiKeys != "" {
		args = append(args, "--api-keys", apiKeys)
	}
	c, _, err := Load("serve", args)
	return c, err
}

func TestAdminTokensParse(t *testing.T) {
	tests := []struct {
		name string
		give string
		want []AdminToken
	}{
		{"none", "", nil},
		{"blank is none", "  ", nil},
		{"a named token", "alice:" + tok1, []AdminToken{{"alice", tok1}}},
		{"a bare token is named admin", tok1, []AdminToken{{"admin", tok1}}},
		{"several, with spaces", " alice:" + tok1 + " , bob:" + tok2 + " ", []AdminToken{{"alice", tok1}, {"bob", tok2}}},
		{"a token may hold ':' after a name", "ci:a:b:" + tok1, []AdminToken{{"ci", "a:b:" + tok1}}},
		{"two tokens may share a name (rotation)", "alice:" + tok1 + ",alice:" + tok2, []AdminToken{{"alice", tok1}, {"alice", tok2}}},
		{"names may hold . _ @ -", "ops.team_1@corp-x:" + tok1, []AdminToken{{"ops.team_1@corp-x", tok1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := load(t, tt.give, "")
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if !reflect.DeepEqual(c.Auth.AdminTokens, tt.want) {
				t.Fatalf("tokens %#v, want %#v", c.Auth.AdminTokens, tt.want)
			}
		})
	}
}

func TestAdminTokensRejectBadForms(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		wantErr string
	}{
		{"an empty entry", "alice:" + tok1 + ",", "admin-tokens entry 2 is empty"},
		{"an empty token after the name", "alice:", "admin-tokens entry 1: token is empty"},
		{"an empty name", ":" + tok1, "admin-tokens entry 1: name must be"},
		{"a short token", "alice:short-token", "token must be 16 to 256 characters, got 11"},
		{"a short bare token", "0123456789abcde", "token must be 16 to 256 characters, got 15"},
		{"a long token", "alice:" + strings.Repeat("x", 257), "token must be 16 to 256 characters, got 257"},
		{"a token with a space", "alice:" + tok1 + " x" + tok2, "token must be visible ASCII"},
		{"a token with a ';'", "alice:" + tok1 + ";x", "token must be visible ASCII"},
		{"a token with a non-ASCII character", "alice:" + tok1 + "é", "token must be visible ASCII"},
		{"a name with a space", "al ice:" + tok1, "admin-tokens entry 1: name must be"},
		{"a name that is too long", strings.Repeat("n", 65) + ":" + tok1, "admin-tokens entry 1: name must be"},
		{"a duplicate token", "alice:" + tok1 + ",bob:" + tok1, "admin-tokens entry 2: same token as entry 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(t, tt.give, "")
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
			for _, secret := range []string{tok1, tok2, "short-token", "0123456789abcde"} {
				if strings.Contains(err.Error(), secret) {
					t.Fatalf("error quotes a token: %v", err)
				}
			}
		})
	}
}

func TestAPIKeysParse(t *testing.T) {
	tests := []struct {
		name string
		give string
		want []APIKey
	}{
		{"none", "", nil},
		{"a key for two resources", key1 + "=svc-a:res1,res2", []APIKey{{Key: key1, ClientID: "svc-a", Resources: []string{"res1", "res2"}}}},
		{"a key for every resource", key1 + "=svc-a:*", []APIKey{{Key: key1, ClientID: "svc-a", AllResources: true}}},
		{"several, with spaces", " " + key1 + " = svc-a : res1 , res2 ; " + key2 + "=svc-b:* ",
			[]APIKey{{Key: key1, ClientID: "svc-a", Resources: []string{"res1", "res2"}}, {Key: key2, ClientID: "svc-b", AllResources: true}}},
		{"a key may end in = padding", key1 + "==svc-a:res1", []APIKey{{Key: key1 + "=", ClientID: "svc-a", Resources: []string{"res1"}}}},
		{"a clientId may hold ':' '@' '/'", key1 + "=team:svc@dc/1:res1", []APIKey{{Key: key1, ClientID: "team:svc@dc/1", Resources: []string{"res1"}}}},
		{"one client may have two keys", key1 + "=svc-a:res1;" + key2 + "=svc-a:res2",
			[]APIKey{{Key: key1, ClientID: "svc-a", Resources: []string{"res1"}}, {Key: key2, ClientID: "svc-a", Resources: []string{"res2"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := load(t, "", tt.give)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if !reflect.DeepEqual(c.Auth.APIKeys, tt.want) {
				t.Fatalf("keys %#v, want %#v", c.Auth.APIKeys, tt.want)
			}
		})
	}
}

func TestAPIKeysRejectBadForms(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		wantErr string
	}{
		{"an empty entry", key1 + "=svc-a:*;", "api-keys entry 2: is empty"},
		{"no '='", key1 + "svc-a:*", "api-keys entry 1: want key=clientId:res1,res2 or key=clientId:*"},
		{"no ':' after the clientId", key1 + "=svc-a", "api-keys entry 1: want key=clientId"},
		{"an empty key", "=svc-a:*", "api-keys entry 1: key is empty"},
		{"a short key", "short-key=svc-a:*", "api-keys entry 1: key must be 16 to 256 characters, got 9"},
		{"a key with a space", "key1 0123456789abcdef=svc-a:*", "key must be visible ASCII"},
		{"a duplicate key", key1 + "=svc-a:*;" + key1 + "=svc-b:*", "api-keys entry 2: same key as entry 1"},
		{"a key that is also an admin token", tok1 + "=svc-a:*", "api-keys entry 1: key is also an admin token"},
		{"an empty clientId", key1 + "=:res1", "api-keys entry 1: clientId must be"},
		{"a clientId with a space", key1 + "=svc a:res1", "api-keys entry 1: clientId must be"},
		{"a clientId that is too long", key1 + "=" + strings.Repeat("c", 129) + ":res1", "api-keys entry 1: clientId must be"},
		{"no resources", key1 + "=svc-a:", "resource 1 of the list must be"},
		{"an upper-case resource", key1 + "=svc-a:res1,Res2", "api-keys entry 1: resource 2 of the list must be"},
		{"an empty resource in the list", key1 + "=svc-a:res1,,res2", "resource 2 of the list must be"},
		{"* with other resources", key1 + "=svc-a:res1,*", "* must stand alone"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(t, "alice:"+tok1, tt.give)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
			for _, secret := range []string{key1, tok1, "short-key", "0123456789abcdef"} {
				if strings.Contains(err.Error(), secret) {
					t.Fatalf("error quotes a secret: %v", err)
				}
			}
		})
	}
}

func TestAuthFromTheEnvironment(t *testing.T) {
	t.Setenv("QC_ADMIN_TOKENS", "alice:"+tok1)
	t.Setenv("QC_API_KEYS", key1+"=svc-a:*")
	c, _, err := Load("serve", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Auth.AdminTokens) != 1 || c.Auth.AdminTokens[0].Name != "alice" ||
		len(c.Auth.APIKeys) != 1 || c.Auth.APIKeys[0].ClientID != "svc-a" {
		t.Fatalf("auth %+v", c.Auth)
	}
}

func TestMigrateIgnoresAuth(t *testing.T) {
	if _, _, err := Load("migrate", []string{"--mysql-dsn", "u@tcp(h:3306)/db", "--admin-tokens", "short"}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
}

func TestRedactedShowsNamesNotSecrets(t *testing.T) {
	c, err := load(t, "alice:"+tok1+","+tok2, key1+"=svc-a:res1;"+key2+"=svc-b:*")
	if err != nil {
		t.Fatal(err)
	}
	r := c.Redacted()
	js, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{string(js), fmt.Sprintf("%+v", r), fmt.Sprintf("%#v", r)} {
		for _, secret := range []string{tok1, tok2, key1, key2} {
			if strings.Contains(out, secret) {
				t.Fatalf("redacted config shows a secret: %s", out)
			}
		}
		for _, shown := range []string{"alice", "admin", "svc-a", "svc-b", "res1"} {
			if !strings.Contains(out, shown) {
				t.Fatalf("redacted config hides %q: %s", shown, out)
			}
		}
	}
	t.Run("it leaves the config itself alone", func(t *testing.T) {
		if string(c.Auth.AdminTokens[0].Token) != tok1 || string(c.Auth.APIKeys[1].Key) != key2 {
			t.Fatalf("Redacted changed the original: %#v", c.Auth)
		}
	})
	t.Run("the secrets print masked even unredacted", func(t *testing.T) {
		js, _ := json.Marshal(c)
		for _, out := range []string{string(js), fmt.Sprintf("%v", c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c), fmt.Sprint(c.Auth.AdminTokens[0].Token)} {
			for _, secret := range []string{tok1, tok2, key1, key2} {
				if strings.Contains(out, secret) {
					t.Fatalf("config prints a secret: %s", out)
				}
			}
		}
	})
}
