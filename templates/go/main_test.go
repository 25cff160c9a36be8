package main

import (
	"testing"

	"windlass.dev/windlass"
	"windlass.dev/windlass/windlasstest"
)

const greeting = `{
  "apiVersion": "example.windlass.dev/v1alpha1",
  "kind": "Greeting",
  "metadata": {"name": "hello", "namespace": "demo"},
  "spec": {"message": "Hello, world"}
}`

func TestInfo(t *testing.T) {
	info := Plugin{}.Info()
	if info.Name != "{{name}}" || info.Version != "0.1.0" || info.Finalizes {
		t.Fatalf("info: %+v", info)
	}
}

func TestPublishesTheMessage(t *testing.T) {
	out, err := windlasstest.New(greeting).Run(Plugin{})
	if err != nil {
		t.Fatal(err)
	}
	cm := out.Find("v1/ConfigMap", "hello-greeting")
	if got := windlass.Lookup(cm, "data", "message"); got != "Hello, world" {
		t.Fatalf("data.message = %v", got)
	}
	if got := out.StatusFragment()["message"]; got != "Hello, world" {
		t.Fatalf("status.message = %v", got)
	}
	c := out.ConditionOf("Greeted")
	if c == nil || !c.Status || c.Reason != "Published" || c.Message != "hello-greeting holds the message" {
		t.Fatalf("condition: %+v", c)
	}
	if len(out.Events()) != 0 {
		t.Fatalf("events: %+v", out.Events())
	}
	if _, ok := out.Requeue(); ok {
		t.Fatal("no requeue expected")
	}
}

func TestKeepsEarlierPluginsObjects(t *testing.T) {
	earlier := `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"other"}}`
	out, err := windlasstest.New(greeting).Desired(earlier).Run(Plugin{})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Desired()) != 2 || out.Find("v1/Secret", "other") == nil {
		t.Fatalf("desired: %v", out.Desired())
	}
}

func TestRejectsAnEmptyMessage(t *testing.T) {
	for _, spec := range []string{`{}`, `{"message": ""}`, `{"message": 3}`} {
		parent := `{"apiVersion":"example.windlass.dev/v1alpha1","kind":"Greeting","metadata":{"name":"hello"},"spec":` + spec + `}`
		_, err := windlasstest.New(parent).Run(Plugin{})
		if windlasstest.Kind(err) != windlass.KindInvalidParent || windlasstest.Message(err) != "spec.message: must be a non-empty string" {
			t.Fatalf("spec %s: got %v", spec, err)
		}
	}
}

func TestFinalizeHasNothingToCleanUp(t *testing.T) {
	out, err := windlasstest.New(greeting).Finalizing().Run(Plugin{})
	if err != nil || !out.IsFinalized() || len(out.Desired()) != 0 {
		t.Fatalf("finalize: %v %v", out, err)
	}
}
