//go:build !wasip1

package windlass

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// Serve runs the exported plugin natively, outside WebAssembly, when the binary is built for
// the host's OS: it reads one request per line on stdin and writes one answer per line on
// stdout until stdin ends; before the first, it writes the plugin's info. A plugin's main calls it (`func main() { windlass.Serve() }`); in
// the component, a reactor, main never runs.
//
// It is how the host benchmark's native variants (host/examples/common/sampledb_native.rs) run
// a Go plugin beside its component, to measure what the sandbox costs; nothing in a deployed host
// uses it. The info line is the WIT plugin-info as a JSON object (name, version, parentKinds,
// childKinds, readsKinds, finalizes). A request is the WIT request as a JSON object (phase, parent, observed, desired,
// config, now; the objects as JSON texts); the answer is {"ok": RESPONSE} with the WIT
// response (desired, status, conditions, events, requeueAfterSecs, finalized) or
// {"err": {"tag", "val"}} with the plugin-error. Log lines go to stderr.
func Serve() {
	if err := ServeLines(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "windlass.Serve: %v\n", err)
		os.Exit(1)
	}
}

type serveRequest struct {
	Phase    string   `json:"phase"`
	Parent   string   `json:"parent"`
	Observed []string `json:"observed"`
	Desired  []string `json:"desired"`
	Config   string   `json:"config"`
	Now      string   `json:"now"`
}

type serveCondition struct {
	Kind    string `json:"kind"`
	Status  bool   `json:"status"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

type serveEvent struct {
	Warning bool   `json:"warning"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

type serveResponse struct {
	Desired          []string         `json:"desired"`
	Status           *string          `json:"status"`
	Conditions       []serveCondition `json:"conditions"`
	Events           []serveEvent     `json:"events"`
	RequeueAfterSecs *uint32          `json:"requeueAfterSecs"`
	Finalized        bool             `json:"finalized"`
}

type serveError struct {
	Tag string `json:"tag"`
	Val string `json:"val"`
}

type serveInfo struct {
	Name        string   `json:"name"`
	Version     string   `json:"version"`
	ParentKinds []string `json:"parentKinds"`
	ChildKinds  []string `json:"childKinds"`
	ReadsKinds  []string `json:"readsKinds"`
	Finalizes   bool     `json:"finalizes"`
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

type serveAnswer struct {
	Ok  *serveResponse `json:"ok,omitempty"`
	Err *serveError    `json:"err,omitempty"`
}

// ServeLines writes the plugin's info and answers each request line of in on out (Serve with
// other streams).
func ServeLines(in io.Reader, out io.Writer) error {
	if exported == nil {
		return fmt.Errorf("no plugin exported: call windlass.Export in an init function")
	}
	scanner := bufio.NewScanner(in)
	scanner.Buffer(make([]byte, 0, 1<<20), 1<<30)
	w := bufio.NewWriter(out)
	i := exported.Info()
	if err := writeLine(w, serveInfo{i.Name, i.Version, orEmpty(i.Parents), orEmpty(i.Children),
		orEmpty(i.Reads), i.Finalizes}); err != nil {
		return err
	}
	for scanner.Scan() {
		if len(scanner.Bytes()) == 0 {
			continue
		}
		if err := writeLine(w, answer(scanner.Bytes())); err != nil {
			return err
		}
	}
	return scanner.Err()
}

// writeLine writes v as one line of JSON and flushes it: the other side waits for it.
func writeLine(w *bufio.Writer, v any) error {
	line, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := w.Write(append(line, '\n')); err != nil {
		return err
	}
	return w.Flush()
}

func answer(line []byte) serveAnswer {
	var req serveRequest
	if err := json.Unmarshal(line, &req); err != nil {
		return serveAnswer{Err: &serveError{Tag: "failed", Val: "request is not JSON: " + err.Error()}}
	}
	phase := PhaseReconcile
	if req.Phase == "finalize" {
		phase = PhaseFinalize
	}
	parts, err := runParts(exported, phase, req.Parent, req.Observed, req.Desired, req.Config, req.Now)
	if err != nil {
		e := AsError(err)
		tag := "failed"
		switch e.Kind {
		case KindInvalidParent:
			tag = "invalid-parent"
		case KindInvalidConfig:
			tag = "invalid-config"
		}
		return serveAnswer{Err: &serveError{Tag: tag, Val: e.Message}}
	}
	res := &serveResponse{
		Desired:          parts.Desired,
		Status:           parts.Status,
		Conditions:       []serveCondition{},
		Events:           []serveEvent{},
		RequeueAfterSecs: parts.RequeueAfterSecs,
		Finalized:        parts.Finalized,
	}
	if res.Desired == nil {
		res.Desired = []string{}
	}
	for _, c := range parts.Conditions {
		res.Conditions = append(res.Conditions, serveCondition{c.Kind, c.Status, c.Reason, c.Message})
	}
	for _, e := range parts.Events {
		res.Events = append(res.Events, serveEvent{e.Warning, e.Reason, e.Message})
	}
	return serveAnswer{Ok: res}
}
