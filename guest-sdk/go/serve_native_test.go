//go:build !wasip1

package windlass_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"windlass.dev/windlass"
)

func TestServeLines(t *testing.T) {
	windlass.Export(greeter{})
	req := func(parent string) string {
		b, err := json.Marshal(map[string]any{"phase": "reconcile", "parent": parent, "observed": []string{},
			"desired": []string{}, "config": "{}", "now": "2026-01-01T00:00:00Z"})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	in := strings.Join([]string{req(parent), "", req(`{"metadata":{"name":"hi"},"spec":{}}`), "{"}, "\n")
	var out bytes.Buffer
	if err := windlass.ServeLines(strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("want the info and 3 answers, got %d lines: %q", len(lines), out.String())
	}
	if lines[0] != `{"name":"greeter","version":"0.1.0","parentKinds":["example.com/v1/Greeting"],`+
		`"childKinds":["v1/ConfigMap"],"readsKinds":[],"finalizes":false}` {
		t.Fatalf("info %s", lines[0])
	}
	lines = lines[1:]
	var ok struct {
		Ok struct {
			Desired          []string
			Status           *string
			Conditions       []map[string]any
			Events           []map[string]any
			RequeueAfterSecs *uint32
			Finalized        bool
		}
	}
	if err := json.Unmarshal([]byte(lines[0]), &ok); err != nil {
		t.Fatal(err)
	}
	if len(ok.Ok.Desired) != 1 || !strings.Contains(ok.Ok.Desired[0], `"hi-greeting"`) ||
		ok.Ok.Status == nil || *ok.Ok.Status != `{"message":"hello"}` ||
		ok.Ok.RequeueAfterSecs == nil || *ok.Ok.RequeueAfterSecs != 30 ||
		len(ok.Ok.Conditions) != 1 || ok.Ok.Conditions[0]["kind"] != "Greeted" || ok.Ok.Events == nil {
		t.Fatalf("answer %s", lines[0])
	}
	if lines[1] != `{"err":{"tag":"invalid-parent","val":"spec.message: must be a non-empty string"}}` {
		t.Fatalf("refusal %s", lines[1])
	}
	if !strings.HasPrefix(lines[2], `{"err":{"tag":"failed","val":"request is not JSON`) {
		t.Fatalf("bad line %s", lines[2])
	}
}
