// sampledb-chaos: chaos testing as a SampleDB capability. With spec.chaos.killPrimaryEvery set
// (10m, 30m, 1h, 2h, …) it runs a CronJob that deletes the SampleDB's primary Pod on that
// schedule, so that failover is exercised all the time rather than on the day it matters. The
// CronJob's pod runs as its own ServiceAccount, whose Role may list and delete Pods of the
// namespace and nothing else.
//
// The host refuses ServiceAccounts, Roles and RoleBindings, a pod's serviceAccountName and a
// mounted token unless the WasmPlugin grants them (docs/SECURITY.md): its WasmPlugin must grant
// the four kinds, `podSecurity.serviceAccounts: ["{parent}-chaos"]` (the account named after
// the SampleDB) and `podSecurity.automountServiceAccountToken: true`.
package main

import (
	"encoding/json"
	"fmt"
	"strconv"

	"windlass.dev/windlass"
)

const (
	// Image runs kubectl; it deletes the primary Pod.
	Image = "registry.k8s.io/kubectl:v1.36.3"
	// ChaosLabel marks the CronJob's Jobs and Pods.
	ChaosLabel = "samples.windlass.dev/chaos"
	// RoleLabel is the label the primary plugin puts on the primary Pod (value "primary").
	RoleLabel = "samples.windlass.dev/role"
	// Condition is the condition this plugin reports.
	Condition = "Chaos"
)

// Accepted describes the intervals killPrimaryEvery accepts, for error messages.
const Accepted = "minutes dividing an hour (1m, 2m, 3m, 4m, 5m, 6m, 10m, 12m, 15m, 20m, 30m, 60m) " +
	"or hours dividing a day (1h, 2h, 3h, 4h, 6h, 8h, 12h, 24h)"

// Plugin reconciles SampleDBs. It has nothing to clean up: the host deletes its children with
// the parent.
type Plugin struct{ windlass.DefaultFinalize }

// Info declares what the plugin reconciles and produces; the host refuses anything more.
func (Plugin) Info() windlass.Info {
	return windlass.Info{
		Name:    "sampledb-chaos",
		Version: "0.1.0",
		Parents: []string{"samples.windlass.dev/v1alpha1/SampleDB"},
		Children: []string{
			"v1/ServiceAccount",
			"rbac.authorization.k8s.io/v1/Role",
			"rbac.authorization.k8s.io/v1/RoleBinding",
			"batch/v1/CronJob",
		},
	}
}

// Schedule is the cron schedule of an interval: Nm with N dividing 60 is `*/N * * * *` (60m is
// 1h), Nh with N dividing 24 is `0 */N * * *`. Anything else is an InvalidParent error naming
// spec.chaos.killPrimaryEvery.
func Schedule(every string) (string, error) {
	// A number without sign or leading zero, then m or h (without regexp, which adds half a megabyte to the component).
	digits, unit := "", ""
	if len(every) >= 2 && len(every) <= 5 {
		digits, unit = every[:len(every)-1], every[len(every)-1:]
	}
	n, err := strconv.Atoi(digits)
	if err == nil && digits[0] >= '1' && digits[0] <= '9' && (unit == "m" || unit == "h") {
		if unit == "m" && n == 60 {
			n, unit = 1, "h"
		}
		switch {
		case unit == "m" && n < 60 && 60%n == 0:
			return fmt.Sprintf("*/%d * * * *", n), nil
		case unit == "h" && 24%n == 0:
			return fmt.Sprintf("0 */%d * * *", n), nil
		}
	}
	return "", windlass.InvalidParent(fmt.Sprintf(
		"spec.chaos.killPrimaryEvery: %q is not an accepted interval: %s", every, Accepted))
}

// killPrimaryEvery reads spec.chaos.killPrimaryEvery; on is false when chaos is off (spec.chaos
// or the field absent or null).
func killPrimaryEvery(spec windlass.Object) (every string, on bool, err error) {
	chaos, present := spec["chaos"]
	if !present || chaos == nil {
		return "", false, nil
	}
	fields, ok := chaos.(windlass.Object)
	if !ok {
		return "", false, windlass.InvalidParent("spec.chaos: must be an object (with killPrimaryEvery)")
	}
	value, present := fields["killPrimaryEvery"]
	if !present || value == nil {
		return "", false, nil
	}
	every, ok = value.(string)
	if !ok {
		b, _ := json.Marshal(value)
		return "", false, windlass.InvalidParent(fmt.Sprintf(
			"spec.chaos.killPrimaryEvery: %s is not an accepted interval (a string): %s", b, Accepted))
	}
	return every, true, nil
}

// Reconcile adds the ServiceAccount, Role, RoleBinding and CronJob `<name>-chaos` when
// spec.chaos.killPrimaryEvery is set, and reports the condition Chaos either way. The earlier
// plugins' objects pass through unchanged.
func (Plugin) Reconcile(ctx *windlass.Context) (*windlass.Output, error) {
	every, on, err := killPrimaryEvery(ctx.Spec())
	if err != nil {
		return nil, err
	}
	out := ctx.Output()
	if !on {
		out.Condition(Condition, false, "Off", "spec.chaos.killPrimaryEvery is not set")
		return out, nil
	}
	schedule, err := Schedule(every)
	if err != nil {
		return nil, err
	}
	name, namespace := ctx.Name(), ctx.Namespace()
	if namespace == "" {
		return nil, windlass.InvalidParent("metadata.namespace: must be set (a SampleDB is namespaced)")
	}
	for _, o := range Children(name, namespace, schedule) {
		if err := out.Apply(o); err != nil {
			return nil, err
		}
	}
	out.Condition(Condition, true, "KillingPrimary", "the primary Pod is deleted every "+every)
	return out, nil
}

// Labels are the labels of the children, their Jobs and their Pods. Not the database Pods'
// `app.kubernetes.io/name: sampledb`: the chaos Pod must not fall under the selectors of the
// database's Services, StatefulSet and PodDisruptionBudget.
func Labels(name string) windlass.Object {
	return windlass.Object{
		"app.kubernetes.io/instance": name,
		"app.kubernetes.io/name":     "sampledb-chaos",
		ChaosLabel:                   "kill-primary",
	}
}

// Children are the objects that kill the primary of SampleDB name in namespace on schedule.
func Children(name, namespace, schedule string) []windlass.Object {
	account := name + "-chaos"
	meta := func() windlass.Object {
		return windlass.Object{"name": account, "labels": Labels(name)}
	}
	serviceAccount := windlass.Object{
		"apiVersion": "v1",
		"kind":       "ServiceAccount",
		"metadata":   meta(),
	}
	role := windlass.Object{
		"apiVersion": "rbac.authorization.k8s.io/v1",
		"kind":       "Role",
		"metadata":   meta(),
		"rules": []any{windlass.Object{
			"apiGroups": []any{""},
			"resources": []any{"pods"},
			"verbs":     []any{"list", "delete"},
		}},
	}
	binding := windlass.Object{
		"apiVersion": "rbac.authorization.k8s.io/v1",
		"kind":       "RoleBinding",
		"metadata":   meta(),
		"roleRef": windlass.Object{
			"apiGroup": "rbac.authorization.k8s.io",
			"kind":     "Role",
			"name":     account,
		},
		"subjects": []any{windlass.Object{
			"kind":      "ServiceAccount",
			"name":      account,
			"namespace": namespace,
		}},
	}
	selector := "app.kubernetes.io/instance=" + name + "," + RoleLabel + "=primary"
	pod := windlass.Object{
		"restartPolicy":                "Never",
		"serviceAccountName":           account,
		"automountServiceAccountToken": true,
		"securityContext": windlass.Object{
			"runAsNonRoot":   true,
			"runAsUser":      65532,
			"seccompProfile": windlass.Object{"type": "RuntimeDefault"},
		},
		"containers": []any{windlass.Object{
			"name":  "kill-primary",
			"image": Image,
			"command": []any{
				"kubectl", "delete", "pod",
				"--namespace", namespace,
				"--selector", selector,
				"--wait=false",
			},
			"securityContext": windlass.Object{
				"allowPrivilegeEscalation": false,
				"capabilities":             windlass.Object{"drop": []any{"ALL"}},
			},
			"resources": windlass.Object{
				"requests": windlass.Object{"cpu": "10m", "memory": "32Mi"},
				"limits":   windlass.Object{"memory": "64Mi"},
			},
		}},
	}
	cronJob := windlass.Object{
		"apiVersion": "batch/v1",
		"kind":       "CronJob",
		"metadata":   meta(),
		"spec": windlass.Object{
			"schedule":                   schedule,
			"concurrencyPolicy":          "Forbid",
			"successfulJobsHistoryLimit": 1,
			"failedJobsHistoryLimit":     1,
			"jobTemplate": windlass.Object{
				"metadata": windlass.Object{"labels": Labels(name)},
				"spec": windlass.Object{
					"backoffLimit": 0,
					"template": windlass.Object{
						"metadata": windlass.Object{"labels": Labels(name)},
						"spec":     pod,
					},
				},
			},
		},
	}
	return []windlass.Object{serviceAccount, role, binding, cronJob}
}

// A WebAssembly reactor runs init functions, never main.
func init() { windlass.Export(Plugin{}) }

// Natively (`go build` for the host's OS) the plugin serves requests on stdin: the host
// benchmark's native variants run it so, beside its component.
func main() { windlass.Serve() }
