// Package windlasstest runs a Windlass plugin natively on JSON fixtures, without a WebAssembly
// runtime: fast unit tests with `go test`. The host runs the same code compiled to wasm, from
// the same JSON texts.
package windlasstest

import (
	"encoding/json"
	"fmt"

	"windlass.dev/windlass"
)

// Harness holds a parent, observed objects, the earlier plugins' desired set and config, for
// one run.
type Harness struct {
	phase    windlass.Phase
	parent   string
	observed []string
	desired  []string
	config   string
	now      string
}

// New is a harness for the parent given as JSON text (or any value that encodes to a JSON
// object, such as a windlass.Object).
func New(parent any) *Harness {
	return &Harness{parent: text(parent), config: "{}", now: "2026-01-01T00:00:00Z"}
}

func text(v any) string {
	switch t := v.(type) {
	case string:
		return t
	case []byte:
		return string(t)
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("windlasstest: a fixture does not encode to JSON: %v", err))
	}
	return string(b)
}

// Observed adds observed objects (JSON texts or values).
func (h *Harness) Observed(objects ...any) *Harness {
	for _, o := range objects {
		h.observed = append(h.observed, text(o))
	}
	return h
}

// Desired sets the desired set the earlier plugins produced (JSON texts or values).
func (h *Harness) Desired(objects ...any) *Harness {
	h.desired = nil
	for _, o := range objects {
		h.desired = append(h.desired, text(o))
	}
	return h
}

// Config sets the plugin's config (JSON text or value).
func (h *Harness) Config(config any) *Harness { h.config = text(config); return h }

// Now sets the time of the run (RFC 3339).
func (h *Harness) Now(now string) *Harness { h.now = now; return h }

// Finalizing runs the finalize phase instead of reconcile.
func (h *Harness) Finalizing() *Harness { h.phase = windlass.PhaseFinalize; return h }

// Context is the context the plugin will see.
func (h *Harness) Context() (*windlass.Context, error) {
	return windlass.NewContext(h.phase, h.parent, h.observed, h.desired, h.config, h.now)
}

// Run runs the plugin's phase as the host would, including encoding the output.
func (h *Harness) Run(p windlass.Plugin) (*windlass.Output, error) {
	ctx, err := h.Context()
	if err != nil {
		return nil, err
	}
	out, err := windlass.Run(p, ctx)
	if err != nil {
		return nil, err
	}
	if _, err := out.Parts(); err != nil {
		return nil, err
	}
	return out, nil
}

// Kind is the plugin-error kind of an error (windlass.KindFailed for a plain error). It
// panics, saying so, when there is no error: check for one first.
func Kind(err error) windlass.ErrorKind { return mustError(err).Kind }

// Message is the message the host receives for an error; like Kind, it needs an error.
func Message(err error) string { return mustError(err).Message }

func mustError(err error) *windlass.Error {
	e := windlass.AsError(err)
	if e == nil {
		panic("windlasstest: expected an error, got nil")
	}
	return e
}
