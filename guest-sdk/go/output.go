package windlass

import (
	"bytes"
	"encoding/json"
	"math"
	"time"
)

// Condition is a condition to set on the parent (status.conditions).
type Condition struct {
	// Kind is the condition type, UpperCamelCase (e.g. StorageReady).
	Kind string
	// Status is true when the condition holds.
	Status bool
	// Reason is one UpperCamelCase word.
	Reason string
	// Message is for humans.
	Message string
}

// Event is a Kubernetes Event the host records on the parent.
type Event struct {
	// Warning is true for a Warning event, false for a Normal one.
	Warning bool
	// Reason is one UpperCamelCase word.
	Reason string
	// Message is for humans.
	Message string
}

// Output is what a plugin returns: the whole desired set and what to report.
type Output struct {
	desired    []Object
	status     Object
	conditions []Condition
	events     []Event
	requeue    *time.Duration
	finalized  bool
}

// NewOutput holds the given desired set (usually Context.Output is what you want).
func NewOutput(desired []Object) *Output {
	return &Output{desired: append([]Object(nil), desired...), status: Object{}}
}

// Apply adds an object to the desired set, replacing one of the same kind and name. Any value
// that encodes to a JSON object works (an Object, a struct with json tags). The host sets the
// namespace, owner reference and labels. It fails when the object lacks apiVersion, kind or
// metadata.name.
func (o *Output) Apply(object any) error {
	obj, ok := object.(Object)
	if !ok {
		b, err := json.Marshal(object)
		if err != nil {
			return Failedf("cannot encode a child: %v", err)
		}
		if err := json.Unmarshal(b, &obj); err != nil || obj == nil {
			return Failedf("a child must encode to a JSON object: %s", truncate(string(b), 200))
		}
	}
	av, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	name := nameOf(obj)
	if av == "" || kind == "" || name == "" {
		b, _ := json.Marshal(obj)
		return Failedf("a child needs apiVersion, kind and metadata.name: %s", truncate(string(b), 200))
	}
	key := av + "/" + kind
	for i, d := range o.desired {
		if HasKind(d, key) && nameOf(d) == name {
			o.desired[i] = obj
			return nil
		}
	}
	o.desired = append(o.desired, obj)
	return nil
}

// Remove takes an object (group/version/Kind and name) out of the desired set and returns it,
// or nil when there was none.
func (o *Output) Remove(kind, name string) Object {
	for i, d := range o.desired {
		if HasKind(d, kind) && nameOf(d) == name {
			o.desired = append(o.desired[:i], o.desired[i+1:]...)
			return d
		}
	}
	return nil
}

// Find returns the desired object of a kind and name (to read or edit in place), or nil.
func (o *Output) Find(kind, name string) Object {
	for _, d := range o.desired {
		if HasKind(d, kind) && nameOf(d) == name {
			return d
		}
	}
	return nil
}

// Desired is the whole desired set.
func (o *Output) Desired() []Object { return o.desired }

// SetDesired replaces the whole desired set.
func (o *Output) SetDesired(objects []Object) { o.desired = objects }

// Status sets a top-level field of the status fragment merged into the parent's status.
func (o *Output) Status(key string, value any) { o.status[key] = value }

// StatusFragment is the status fragment so far.
func (o *Output) StatusFragment() Object { return o.status }

// Condition sets a condition, replacing one of the same kind.
func (o *Output) Condition(kind string, status bool, reason, message string) {
	c := Condition{Kind: kind, Status: status, Reason: reason, Message: message}
	for i := range o.conditions {
		if o.conditions[i].Kind == kind {
			o.conditions[i] = c
			return
		}
	}
	o.conditions = append(o.conditions, c)
}

// Conditions are the conditions so far.
func (o *Output) Conditions() []Condition { return o.conditions }

// ConditionOf returns the condition of a kind, or nil.
func (o *Output) ConditionOf(kind string) *Condition {
	for i := range o.conditions {
		if o.conditions[i].Kind == kind {
			return &o.conditions[i]
		}
	}
	return nil
}

// Event records a Normal event.
func (o *Output) Event(reason, message string) {
	o.events = append(o.events, Event{Reason: reason, Message: message})
}

// Warning records a Warning event.
func (o *Output) Warning(reason, message string) {
	o.events = append(o.events, Event{Warning: true, Reason: reason, Message: message})
}

// Events are the events so far.
func (o *Output) Events() []Event { return o.events }

// RequeueAfter asks the host to run the pipeline again after d (the earliest request of all
// plugins wins; whole seconds).
func (o *Output) RequeueAfter(d time.Duration) {
	if o.requeue == nil || d < *o.requeue {
		o.requeue = &d
	}
}

// Requeue is the requeue asked for, if any.
func (o *Output) Requeue() (time.Duration, bool) {
	if o.requeue == nil {
		return 0, false
	}
	return *o.requeue, true
}

// Finalized says, in the finalize phase, whether this plugin's cleanup is complete.
func (o *Output) Finalized(done bool) { o.finalized = done }

// IsFinalized is whether the plugin reported its cleanup complete.
func (o *Output) IsFinalized() bool { return o.finalized }

// Parts is an Output as the WIT response carries it.
type Parts struct {
	Desired          []string
	Status           *string
	Conditions       []Condition
	Events           []Event
	RequeueAfterSecs *uint32
	Finalized        bool
}

// Parts encodes the output as the host receives it.
func (o *Output) Parts() (*Parts, error) {
	p := &Parts{Conditions: o.conditions, Events: o.events, Finalized: o.finalized}
	for _, d := range o.desired {
		s, err := encodeJSON(d)
		if err != nil {
			return nil, Failedf("cannot encode a desired object: %v", err)
		}
		p.Desired = append(p.Desired, s)
	}
	if len(o.status) > 0 {
		s, err := encodeJSON(o.status)
		if err != nil {
			return nil, Failedf("cannot encode the status: %v", err)
		}
		p.Status = &s
	}
	if o.requeue != nil {
		secs := o.requeue.Seconds()
		var v uint32
		switch {
		case secs <= 0:
			v = 0
		case secs >= math.MaxUint32:
			v = math.MaxUint32
		default:
			v = uint32(secs)
		}
		p.RequeueAfterSecs = &v
	}
	return p, nil
}

func encodeJSON(v any) (string, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return string(bytes.TrimRight(b.Bytes(), "\n")), nil
}

func truncate(s string, max int) string {
	r := []rune(s)
	if len(r) <= max {
		return s
	}
	return string(r[:max])
}
