package windlass_test

import (
	"testing"
	"time"

	"windlass.dev/windlass"
	"windlass.dev/windlass/windlasstest"
)

type greeter struct{ windlass.DefaultFinalize }

func (greeter) Info() windlass.Info {
	return windlass.Info{Name: "greeter", Version: "0.1.0", Parents: []string{"example.com/v1/Greeting"}, Children: []string{"v1/ConfigMap"}}
}

func (greeter) Reconcile(ctx *windlass.Context) (*windlass.Output, error) {
	var spec struct {
		Message string `json:"message"`
	}
	if err := ctx.SpecInto(&spec); err != nil {
		return nil, err
	}
	if spec.Message == "" {
		return nil, windlass.InvalidParent("spec.message: must be a non-empty string")
	}
	out := ctx.Output()
	if err := out.Apply(windlass.Object{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": windlass.Object{"name": ctx.Name() + "-greeting"}, "data": windlass.Object{"message": spec.Message}}); err != nil {
		return nil, err
	}
	out.Status("message", spec.Message)
	out.Condition("Greeted", true, "Published", "done")
	out.RequeueAfter(time.Minute)
	out.RequeueAfter(time.Second * 30)
	return out, nil
}

const parent = `{"apiVersion":"example.com/v1","kind":"Greeting","metadata":{"name":"hi","namespace":"demo","generation":3,"labels":{"a":"b"}},"spec":{"message":"hello"}}`

func TestReconcile(t *testing.T) {
	out, err := windlasstest.New(parent).
		Desired(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"hi-greeting"},"data":{"message":"old"}}`, `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"}}`).
		Run(greeter{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(out.Desired()); n != 2 {
		t.Fatalf("want 2 desired (replaced in place), got %d", n)
	}
	if got := windlass.Lookup(out.Find("v1/ConfigMap", "hi-greeting"), "data", "message"); got != "hello" {
		t.Fatalf("data.message = %v", got)
	}
	if d, ok := out.Requeue(); !ok || d != 30*time.Second {
		t.Fatalf("requeue %v %v", d, ok)
	}
	parts, err := out.Parts()
	if err != nil || *parts.Status != `{"message":"hello"}` || *parts.RequeueAfterSecs != 30 {
		t.Fatalf("parts %+v %v", parts, err)
	}
	if out.Remove("v1/Secret", "s") == nil || len(out.Desired()) != 1 {
		t.Fatal("remove")
	}
}

func TestContext(t *testing.T) {
	ctx, err := windlasstest.New(parent).Observed(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}`).Config(`{"k":1}`).Context()
	if err != nil {
		t.Fatal(err)
	}
	if ctx.Name() != "hi" || ctx.Namespace() != "demo" || ctx.Generation() != 3 || ctx.Label("a") != "b" {
		t.Fatal("metadata")
	}
	if len(ctx.ObservedOf("v1/ConfigMap")) != 1 || ctx.FindObserved("v1/ConfigMap", "x") == nil || ctx.FindObserved("v1/Secret", "x") != nil {
		t.Fatal("observed")
	}
	if ctx.Config()["k"] != 1.0 {
		t.Fatal("config")
	}
}

func TestErrors(t *testing.T) {
	_, err := windlasstest.New(`{"apiVersion":"example.com/v1","kind":"Greeting","metadata":{"name":"hi"},"spec":{}}`).Run(greeter{})
	if windlasstest.Kind(err) != windlass.KindInvalidParent || windlasstest.Message(err) != "spec.message: must be a non-empty string" {
		t.Fatalf("got %v", err)
	}
	_, err = windlasstest.New(`[1]`).Run(greeter{})
	if windlasstest.Kind(err) != windlass.KindInvalidParent {
		t.Fatalf("got %v", err)
	}
	_, err = windlasstest.New(parent).Config(`nope`).Run(greeter{})
	if windlasstest.Kind(err) != windlass.KindInvalidConfig {
		t.Fatalf("got %v", err)
	}
	_, err = windlasstest.New(parent).Observed(`{`).Run(greeter{})
	if windlasstest.Kind(err) != windlass.KindFailed {
		t.Fatalf("got %v", err)
	}
	out := windlass.NewOutput(nil)
	if err := out.Apply(windlass.Object{"kind": "ConfigMap"}); windlasstest.Kind(err) != windlass.KindFailed {
		t.Fatalf("apply without apiVersion: %v", err)
	}
}

func TestFinalizeDefault(t *testing.T) {
	out, err := windlasstest.New(parent).Desired(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"}}`).Finalizing().Run(greeter{})
	if err != nil || !out.IsFinalized() || len(out.Desired()) != 1 {
		t.Fatalf("%v %v", out, err)
	}
}

type panicker struct{ greeter }

func (panicker) Reconcile(*windlass.Context) (*windlass.Output, error) { panic("boom") }

func TestPanicIsFailed(t *testing.T) {
	_, err := windlasstest.New(parent).Run(panicker{})
	if windlasstest.Kind(err) != windlass.KindFailed || windlasstest.Message(err) != "panic: boom" {
		t.Fatalf("got %v", err)
	}
}

func TestKindOfNoErrorSaysSo(t *testing.T) {
	defer func() {
		if r := recover(); r != "windlasstest: expected an error, got nil" {
			t.Fatalf("recovered %v", r)
		}
	}()
	windlasstest.Kind(nil)
}
