package main

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"windlass.dev/windlass"
	"windlass.dev/windlass/windlasstest"
)

// parent is SampleDB orders in namespace shop, with spec.chaos as given ("" for none).
func parent(chaos string) string {
	spec := `"version": "16.4", "replicas": 3, "storage": {"size": "20Gi"}`
	if chaos != "" {
		spec += `, "chaos": ` + chaos
	}
	return `{
  "apiVersion": "samples.windlass.dev/v1alpha1",
  "kind": "SampleDB",
  "metadata": {"name": "orders", "namespace": "shop", "uid": "9d0c7c57-3a7e-4c55-b2a4-6d8f1b1f5e01"},
  "spec": {` + spec + `}
}`
}

func every(interval string) string { return parent(`{"killPrimaryEvery": "` + interval + `"}`) }

// earlier is what an earlier plugin of the pipeline produced.
const earlier = `{"apiVersion":"apps/v1","kind":"StatefulSet","metadata":{"name":"orders","labels":{"a":"b"}},"spec":{"replicas":3}}`

func run(t *testing.T, parent string) *windlass.Output {
	t.Helper()
	out, err := windlasstest.New(parent).Desired(earlier).Run(Plugin{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// normal is v as the host would read it back: decoded JSON.
func normal(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var n any
	if err := json.Unmarshal(b, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

func same(t *testing.T, what string, got any, want string) {
	t.Helper()
	var w any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: bad expectation: %v", what, err)
	}
	if g := normal(t, got); !reflect.DeepEqual(g, w) {
		gb, _ := json.Marshal(g)
		t.Fatalf("%s:\n got %s\nwant %s", what, gb, want)
	}
}

func TestInfo(t *testing.T) {
	info := Plugin{}.Info()
	want := windlass.Info{
		Name:    "sampledb-chaos",
		Version: "0.1.0",
		Parents: []string{"samples.windlass.dev/v1alpha1/SampleDB"},
		Children: []string{"v1/ServiceAccount", "rbac.authorization.k8s.io/v1/Role",
			"rbac.authorization.k8s.io/v1/RoleBinding", "batch/v1/CronJob"},
	}
	if !reflect.DeepEqual(info, want) {
		t.Fatalf("info: %+v", info)
	}
}

func TestOffWithoutChaos(t *testing.T) {
	for _, p := range []string{
		parent(""),
		parent(`{}`),
		parent(`null`),
		parent(`{"killPrimaryEvery": null}`),
	} {
		out := run(t, p)
		same(t, "desired", out.Desired(), "["+earlier+"]")
		c := out.ConditionOf("Chaos")
		if c == nil || c.Status || c.Reason != "Off" || c.Message != "spec.chaos.killPrimaryEvery is not set" {
			t.Fatalf("%s: condition %+v", p, c)
		}
		if len(out.Conditions()) != 1 || len(out.Events()) != 0 || len(out.StatusFragment()) != 0 {
			t.Fatalf("%s: output %+v %+v %+v", p, out.Conditions(), out.Events(), out.StatusFragment())
		}
		if _, ok := out.Requeue(); ok {
			t.Fatal("no requeue expected")
		}
	}
}

func TestOnProducesTheFourObjects(t *testing.T) {
	out := run(t, every("10m"))
	desired := out.Desired()
	if len(desired) != 5 {
		t.Fatalf("desired: %v", normal(t, desired))
	}
	same(t, "the earlier plugin's object", desired[0], earlier)
	labels := `{"app.kubernetes.io/instance":"orders","app.kubernetes.io/name":"sampledb-chaos","samples.windlass.dev/chaos":"kill-primary"}`
	same(t, "ServiceAccount", out.Find("v1/ServiceAccount", "orders-chaos"),
		`{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"orders-chaos","labels":`+labels+`}}`)
	same(t, "Role", out.Find("rbac.authorization.k8s.io/v1/Role", "orders-chaos"),
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"orders-chaos","labels":`+labels+`},
		  "rules":[{"apiGroups":[""],"resources":["pods"],"verbs":["list","delete"]}]}`)
	same(t, "RoleBinding", out.Find("rbac.authorization.k8s.io/v1/RoleBinding", "orders-chaos"),
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"orders-chaos","labels":`+labels+`},
		  "roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"orders-chaos"},
		  "subjects":[{"kind":"ServiceAccount","name":"orders-chaos","namespace":"shop"}]}`)
	cron := out.Find("batch/v1/CronJob", "orders-chaos")
	if cron == nil {
		t.Fatal("no CronJob")
	}
	same(t, "CronJob labels", windlass.Lookup(cron, "metadata", "labels"), labels)
	spec := normal(t, windlass.Lookup(cron, "spec")).(windlass.Object)
	for key, want := range map[string]any{
		"schedule": "*/10 * * * *", "concurrencyPolicy": "Forbid",
		"successfulJobsHistoryLimit": 1.0, "failedJobsHistoryLimit": 1.0,
	} {
		if spec[key] != want {
			t.Fatalf("spec.%s = %v, want %v", key, spec[key], want)
		}
	}
	if len(spec) != 5 {
		t.Fatalf("spec has more than expected: %v", spec)
	}
	same(t, "job template labels", windlass.Lookup(spec, "jobTemplate", "metadata"), `{"labels":`+labels+`}`)
	same(t, "backoffLimit", windlass.Lookup(spec, "jobTemplate", "spec", "backoffLimit"), `0`)
	same(t, "pod template labels", windlass.Lookup(spec, "jobTemplate", "spec", "template", "metadata"), `{"labels":`+labels+`}`)

	c := out.ConditionOf("Chaos")
	if c == nil || !c.Status || c.Reason != "KillingPrimary" || c.Message != "the primary Pod is deleted every 10m" {
		t.Fatalf("condition: %+v", c)
	}
	if len(out.Events()) != 0 || len(out.StatusFragment()) != 0 {
		t.Fatalf("events %+v status %+v", out.Events(), out.StatusFragment())
	}
}

func TestPodSpec(t *testing.T) {
	out := run(t, every("30m"))
	pod := windlass.Lookup(out.Find("batch/v1/CronJob", "orders-chaos"), "spec", "jobTemplate", "spec", "template", "spec")
	same(t, "pod spec", pod, `{
	  "restartPolicy": "Never",
	  "serviceAccountName": "orders-chaos",
	  "automountServiceAccountToken": true,
	  "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
	  "containers": [{
	    "name": "kill-primary",
	    "image": "registry.k8s.io/kubectl:v1.36.3",
	    "command": ["kubectl", "delete", "pod", "--namespace", "shop",
	                "--selector", "app.kubernetes.io/instance=orders,samples.windlass.dev/role=primary",
	                "--wait=false"],
	    "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
	    "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}}
	  }]
	}`)
}

func TestNamesFollowTheParent(t *testing.T) {
	p := strings.NewReplacer(`"orders"`, `"billing"`, `"shop"`, `"finance"`).Replace(every("1h"))
	out := run(t, p)
	cron := out.Find("batch/v1/CronJob", "billing-chaos")
	if cron == nil || out.Find("v1/ServiceAccount", "billing-chaos") == nil ||
		out.Find("rbac.authorization.k8s.io/v1/Role", "billing-chaos") == nil {
		t.Fatalf("desired: %v", normal(t, out.Desired()))
	}
	same(t, "command", windlass.Lookup(cron, "spec", "jobTemplate", "spec", "template", "spec", "containers").([]any)[0].(windlass.Object)["command"],
		`["kubectl","delete","pod","--namespace","finance","--selector","app.kubernetes.io/instance=billing,samples.windlass.dev/role=primary","--wait=false"]`)
	same(t, "subjects", out.Find("rbac.authorization.k8s.io/v1/RoleBinding", "billing-chaos")["subjects"],
		`[{"kind":"ServiceAccount","name":"billing-chaos","namespace":"finance"}]`)
}

func TestSchedules(t *testing.T) {
	for interval, want := range map[string]string{
		"1m": "*/1 * * * *", "2m": "*/2 * * * *", "5m": "*/5 * * * *", "10m": "*/10 * * * *",
		"15m": "*/15 * * * *", "20m": "*/20 * * * *", "30m": "*/30 * * * *",
		"60m": "0 */1 * * *", "1h": "0 */1 * * *", "2h": "0 */2 * * *", "3h": "0 */3 * * *",
		"6h": "0 */6 * * *", "8h": "0 */8 * * *", "12h": "0 */12 * * *", "24h": "0 */24 * * *",
	} {
		t.Run(interval, func(t *testing.T) {
			out := run(t, every(interval))
			got := windlass.Lookup(out.Find("batch/v1/CronJob", "orders-chaos"), "spec", "schedule")
			if got != want {
				t.Errorf("schedule %v, want %q", got, want)
			}
			if c := out.ConditionOf("Chaos"); c == nil || c.Message != "the primary Pod is deleted every "+interval {
				t.Errorf("condition %+v", c)
			}
		})
	}
}

func TestRejectsIntervalsItCannotSchedule(t *testing.T) {
	for _, interval := range []string{
		"", "0m", "7m", "45m", "90m", "120m", "0h", "5h", "48h", "1d", "10", "m", "10 m", " 10m",
		"10M", "1h30m", "010m", "-10m", "+5m", "1_0m", "1.5h", "10s", "99999m", "1440m",
	} {
		_, err := windlasstest.New(every(interval)).Run(Plugin{})
		if err == nil {
			t.Errorf("%q: accepted", interval)
			continue
		}
		want := `spec.chaos.killPrimaryEvery: "` + interval + `" is not an accepted interval: ` + Accepted
		if windlasstest.Kind(err) != windlass.KindInvalidParent || windlasstest.Message(err) != want {
			t.Errorf("%q: got %v", interval, err)
		}
	}
	for chaos, want := range map[string]string{
		`{"killPrimaryEvery": 10}`:     `spec.chaos.killPrimaryEvery: 10 is not an accepted interval (a string): ` + Accepted,
		`{"killPrimaryEvery": ["1h"]}`: `spec.chaos.killPrimaryEvery: ["1h"] is not an accepted interval (a string): ` + Accepted,
		`"10m"`:                        `spec.chaos: must be an object (with killPrimaryEvery)`,
		`true`:                         `spec.chaos: must be an object (with killPrimaryEvery)`,
	} {
		_, err := windlasstest.New(parent(chaos)).Run(Plugin{})
		if err == nil {
			t.Errorf("%s: accepted", chaos)
			continue
		}
		if windlasstest.Kind(err) != windlass.KindInvalidParent || windlasstest.Message(err) != want {
			t.Errorf("%s: got %v", chaos, err)
		}
	}
	if !strings.Contains(Accepted, "10m") || !strings.Contains(Accepted, "2h") {
		t.Fatal(Accepted)
	}
}

func TestFinalizeHasNothingToCleanUp(t *testing.T) {
	out, err := windlasstest.New(every("10m")).Desired(earlier).Finalizing().Run(Plugin{})
	if err != nil || !out.IsFinalized() {
		t.Fatalf("finalize: %v %v", out, err)
	}
	same(t, "desired", out.Desired(), "["+earlier+"]")
	if (Plugin{}).Info().Finalizes {
		t.Fatal("finalizes")
	}
}
