package windlass

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Phase says which part of the parent's life the host is running.
type Phase int

const (
	// PhaseReconcile: the parent exists; compute what should exist.
	PhaseReconcile Phase = iota
	// PhaseFinalize: the parent is being deleted; clean up, then report finalized.
	PhaseFinalize
)

func (p Phase) String() string {
	if p == PhaseFinalize {
		return "finalize"
	}
	return "reconcile"
}

// Object is a Kubernetes object as decoded JSON (numbers are float64).
type Object = map[string]any

// Context is everything the host gave a plugin for one run.
type Context struct {
	// Phase is reconcile or finalize.
	Phase Phase
	// Parent is the custom resource being reconciled, with metadata, spec and status as the
	// host last read them.
	Parent Object
	// Observed are the objects the host observed for this parent: its children and objects of
	// the kinds the plugin declared to read.
	Observed []Object
	// Desired is what the earlier plugins of the pipeline want.
	Desired []Object
	// Now is the time of the run (RFC 3339), given by the host so that runs are reproducible.
	Now string

	config Object
}

// NewContext builds a context from the JSON texts the host sends. The errors are InvalidParent
// for an unreadable parent, InvalidConfig for an unreadable config and Failed for unreadable
// observed or desired objects.
func NewContext(phase Phase, parent string, observed, desired []string, config, now string) (*Context, error) {
	ctx := &Context{Phase: phase, Now: now}
	p, err := decodeObject(parent)
	if err != nil {
		return nil, InvalidParent(err.Error())
	}
	ctx.Parent = p
	if len(bytes.TrimSpace([]byte(config))) == 0 {
		ctx.config = Object{}
	} else if ctx.config, err = decodeObject(config); err != nil {
		return nil, InvalidConfig(err.Error())
	}
	if ctx.Observed, err = decodeAll(observed, "observed"); err != nil {
		return nil, err
	}
	if ctx.Desired, err = decodeAll(desired, "desired"); err != nil {
		return nil, err
	}
	return ctx, nil
}

func decodeObject(text string) (Object, error) {
	var v any
	if err := json.Unmarshal([]byte(text), &v); err != nil {
		return nil, fmt.Errorf("not valid JSON: %v", err)
	}
	o, ok := v.(Object)
	if !ok {
		return nil, fmt.Errorf("not a JSON object")
	}
	return o, nil
}

func decodeAll(texts []string, what string) ([]Object, error) {
	out := make([]Object, 0, len(texts))
	for i, t := range texts {
		o, err := decodeObject(t)
		if err != nil {
			return nil, Failedf("%s[%d] is %v", what, i, err)
		}
		out = append(out, o)
	}
	return out, nil
}

// Name is the parent's metadata.name.
func (c *Context) Name() string { s, _ := Lookup(c.Parent, "metadata", "name").(string); return s }

// Namespace is the parent's namespace ("" for a cluster-scoped parent).
func (c *Context) Namespace() string {
	s, _ := Lookup(c.Parent, "metadata", "namespace").(string)
	return s
}

// UID is the parent's metadata.uid.
func (c *Context) UID() string { s, _ := Lookup(c.Parent, "metadata", "uid").(string); return s }

// Generation is the parent's metadata.generation (0 when absent).
func (c *Context) Generation() int64 {
	f, _ := Lookup(c.Parent, "metadata", "generation").(float64)
	return int64(f)
}

// Label is a label of the parent ("" when absent).
func (c *Context) Label(key string) string {
	s, _ := Lookup(c.Parent, "metadata", "labels", key).(string)
	return s
}

// Spec is the parent's spec (empty when absent).
func (c *Context) Spec() Object {
	if s, ok := c.Parent["spec"].(Object); ok {
		return s
	}
	return Object{}
}

// Status is the parent's current status (empty when absent).
func (c *Context) Status() Object {
	if s, ok := c.Parent["status"].(Object); ok {
		return s
	}
	return Object{}
}

// Config is this plugin's configuration from its WasmPlugin (empty when none).
func (c *Context) Config() Object { return c.config }

// SpecInto decodes the parent's spec into v (a pointer to a struct of the plugin's, with json
// tags); a mismatch is an InvalidParent error naming the field.
func (c *Context) SpecInto(v any) error {
	if err := convert(c.Spec(), v); err != nil {
		return InvalidParent("spec: " + err.Error())
	}
	return nil
}

// ConfigInto decodes the plugin's config into v; a mismatch is an InvalidConfig error.
func (c *Context) ConfigInto(v any) error {
	if err := convert(c.config, v); err != nil {
		return InvalidConfig(err.Error())
	}
	return nil
}

func convert(from any, to any) error {
	b, err := json.Marshal(from)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, to)
}

// ObservedOf returns the observed objects of one kind (group/version/Kind, v1/Kind for core).
func (c *Context) ObservedOf(kind string) []Object {
	var out []Object
	for _, o := range c.Observed {
		if HasKind(o, kind) {
			out = append(out, o)
		}
	}
	return out
}

// FindObserved returns the observed object of a kind with this name, or nil.
func (c *Context) FindObserved(kind, name string) Object {
	for _, o := range c.Observed {
		if HasKind(o, kind) && nameOf(o) == name {
			return o
		}
	}
	return nil
}

// Output starts an output from the earlier plugins' desired set, ready to add to.
func (c *Context) Output() *Output {
	return &Output{desired: append([]Object(nil), c.Desired...), status: Object{}}
}

// HasKind is true when the object's apiVersion and kind make kind (group/version/Kind).
func HasKind(o Object, kind string) bool {
	av, _ := o["apiVersion"].(string)
	k, _ := o["kind"].(string)
	return av != "" && k != "" && kind == av+"/"+k
}

func nameOf(o Object) string { s, _ := Lookup(o, "metadata", "name").(string); return s }

// Lookup walks nested objects by key and returns the value found, or nil.
func Lookup(v any, path ...string) any {
	for _, k := range path {
		m, ok := v.(Object)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}
