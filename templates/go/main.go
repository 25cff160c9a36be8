// {{name}}: a Windlass plugin. It publishes a Greeting's spec.message in a ConfigMap.
package main

import "windlass.dev/windlass"

// Plugin reconciles Greetings. Embedding DefaultFinalize gives it the default finalize phase:
// nothing to clean up.
type Plugin struct{ windlass.DefaultFinalize }

// Info declares what the plugin reconciles and produces; the host refuses anything more.
func (Plugin) Info() windlass.Info {
	return windlass.Info{
		Name:     "{{name}}",
		Version:  "0.1.0",
		Parents:  []string{"example.windlass.dev/v1alpha1/Greeting"},
		Children: []string{"v1/ConfigMap"},
	}
}

// Reconcile adds the ConfigMap `<name>-greeting` holding spec.message.
func (Plugin) Reconcile(ctx *windlass.Context) (*windlass.Output, error) {
	message, _ := ctx.Spec()["message"].(string)
	if message == "" {
		return nil, windlass.InvalidParent("spec.message: must be a non-empty string")
	}
	name := ctx.Name() + "-greeting"
	out := ctx.Output()
	err := out.Apply(windlass.Object{
		"apiVersion": "v1",
		"kind":       "ConfigMap",
		"metadata":   windlass.Object{"name": name},
		"data":       windlass.Object{"message": message},
	})
	if err != nil {
		return nil, err
	}
	out.Status("message", message)
	out.Condition("Greeted", true, "Published", name+" holds the message")
	return out, nil
}

// A WebAssembly reactor runs init functions, never main.
func init() { windlass.Export(Plugin{}) }

func main() {}
