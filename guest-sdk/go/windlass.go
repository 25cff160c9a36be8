// Package windlass writes Windlass plugins in Go.
//
// A plugin is a type implementing [Plugin], registered with [Export] from the plugin's init
// function and built for GOOS=wasip1 GOARCH=wasm with -buildmode=c-shared, then turned into a
// component of the WIT world windlass:plugin/plugin (see build.sh in the Go template). It receives
// the parent custom resource, what the host observed and what earlier plugins want, and returns
// the desired objects, a status fragment, conditions and events. The host applies nothing a
// plugin returns before checking it.
//
//	type Greeter struct{ windlass.DefaultFinalize }
//
//	func (Greeter) Info() windlass.Info {
//		return windlass.Info{Name: "greeter", Version: "0.1.0",
//			Parents: []string{"example.com/v1/Greeting"}, Children: []string{"v1/ConfigMap"}}
//	}
//
//	func (Greeter) Reconcile(ctx *windlass.Context) (*windlass.Output, error) {
//		out := ctx.Output()
//		...
//		return out, nil
//	}
//
//	func init() { windlass.Export(Greeter{}) }
//
//	func main() {}
//
// The same code runs natively under `go test` (the WebAssembly glue is built only for wasip1);
// package windlasstest runs a plugin on fixtures.
package windlass

import (
	"errors"
	"fmt"
)

// Info is what a plugin declares about itself; the host refuses output beyond it.
type Info struct {
	// Name is a short DNS-1123 label naming the plugin.
	Name string
	// Version is the plugin's version (semver).
	Version string
	// Parents are the parent kinds the plugin reconciles, as group/version/Kind (v1/Kind for core).
	Parents []string
	// Children are the kinds the plugin may produce, as group/version/Kind.
	Children []string
	// Reads are further kinds the plugin observes without producing them.
	Reads []string
	// Finalizes is true when the plugin has cleanup to do in the finalize phase.
	Finalizes bool
}

// Plugin is the reconcile logic for one concern of an operator.
type Plugin interface {
	// Info describes the plugin. It must not depend on any input.
	Info() Info
	// Reconcile computes what should exist for the parent.
	Reconcile(ctx *Context) (*Output, error)
	// Finalize cleans up when the parent is being deleted; call Output.Finalized(true) when
	// done. Embed DefaultFinalize for a plugin with nothing to clean up.
	Finalize(ctx *Context) (*Output, error)
}

// DefaultFinalize, embedded in a plugin type, gives it the default Finalize: nothing to clean
// up, the desired set unchanged, finalized.
type DefaultFinalize struct{}

// Finalize returns the earlier plugins' desired set, finalized.
func (DefaultFinalize) Finalize(ctx *Context) (*Output, error) {
	out := ctx.Output()
	out.Finalized(true)
	return out, nil
}

// ErrorKind says why a plugin refused to produce an output (the WIT plugin-error cases).
type ErrorKind int

const (
	// KindFailed is anything else; the host retries with backoff.
	KindFailed ErrorKind = iota
	// KindInvalidParent means the parent's spec cannot be acted on.
	KindInvalidParent
	// KindInvalidConfig means the plugin's config cannot be used.
	KindInvalidConfig
)

// Error is an error the host reports as a plugin-error. Any other error a plugin returns is
// reported as Failed with its message.
type Error struct {
	Kind    ErrorKind
	Message string
}

func (e *Error) Error() string {
	switch e.Kind {
	case KindInvalidParent:
		return "invalid parent: " + e.Message
	case KindInvalidConfig:
		return "invalid config: " + e.Message
	default:
		return "failed: " + e.Message
	}
}

// InvalidParent is returned when the parent's spec cannot be acted on: name the field and why.
func InvalidParent(msg string) error { return &Error{Kind: KindInvalidParent, Message: msg} }

// InvalidConfig is returned when the plugin's config cannot be used: name the key and why.
func InvalidConfig(msg string) error { return &Error{Kind: KindInvalidConfig, Message: msg} }

// Failed is returned for anything else; the host retries with backoff.
func Failed(msg string) error { return &Error{Kind: KindFailed, Message: msg} }

// Failedf is Failed with a format.
func Failedf(format string, args ...any) error { return Failed(fmt.Sprintf(format, args...)) }

// AsError maps any error to the plugin-error the host receives (nil for nil).
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Kind: KindFailed, Message: err.Error()}
}

// Log levels of the host's log.
const (
	levelDebug uint32 = iota
	levelInfo
	levelWarn
	levelError
)

// LogDebug writes a debug line to the host's log, tagged with the plugin's name. Natively (in
// tests) log lines go to stderr.
func LogDebug(msg string) { hostLog(levelDebug, msg) }

// LogInfo writes an info line to the host's log.
func LogInfo(msg string) { hostLog(levelInfo, msg) }

// LogWarn writes a warning to the host's log.
func LogWarn(msg string) { hostLog(levelWarn, msg) }

// LogError writes an error line to the host's log.
func LogError(msg string) { hostLog(levelError, msg) }

// Logf writes a formatted info line to the host's log.
func Logf(format string, args ...any) { hostLog(levelInfo, fmt.Sprintf(format, args...)) }

var exported Plugin

// Export registers the plugin as the component's windlass:plugin/reconciler. Call it once, from
// an init function of package main: a WebAssembly reactor runs init functions, never main.
func Export(p Plugin) { exported = p }

// runParts runs a phase on the host's JSON texts and encodes the output as the host receives it:
// what the component's export does, and natively Serve.
func runParts(p Plugin, phase Phase, parent string, observed, desired []string, config, now string) (*Parts, error) {
	ctx, err := NewContext(phase, parent, observed, desired, config, now)
	if err != nil {
		return nil, err
	}
	out, err := Run(p, ctx)
	if err != nil {
		return nil, err
	}
	return out.Parts()
}

// Run runs one phase of a plugin on a context, as the host's call does: Reconcile or Finalize,
// with a panic turned into a Failed error.
func Run(p Plugin, ctx *Context) (out *Output, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, Failedf("panic: %v", r)
		}
	}()
	if ctx.Phase == PhaseFinalize {
		out, err = p.Finalize(ctx)
	} else {
		out, err = p.Reconcile(ctx)
	}
	if err == nil && out == nil {
		err = Failed("the plugin returned neither an output nor an error")
	}
	return out, err
}
