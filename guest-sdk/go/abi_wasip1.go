//go:build wasip1

// The canonical-ABI bindings of the WIT world windlass:plugin/plugin@0.1.0, written by hand.
//
// Exports: windlass:plugin/reconciler@0.1.0#info and #reconcile with their cabi_post_ functions,
// cabi_realloc (the host's allocations for the arguments), and cabi_realloc_adapter (the WASI
// adapter's allocations). Import: windlass:plugin/log@0.1.0 log.
//
// Calls the host makes for the canonical ABI (cabi_realloc while it writes the arguments, the
// post-return functions) must not call any import: the component model traps ("cannot leave
// component instance"). The Go runtime calls WASI (the clock) when a garbage collection starts,
// so the collector is off between export calls and on only while an export runs.
//
// Memory: Go's garbage collector does not see pointers held by the host or the adapter, so
// everything handed out is pinned from a Go variable until the host is done with it: argument
// buffers until the export has copied them, results until the post-return call. Go's heap does
// not move objects. The WASI adapter allocates its state and stack while the Go runtime is
// still initializing (its first WASI calls come from the runtime's own start-up), when no Go
// code that allocates may run: those allocations come from a static arena by a nosplit
// function that touches neither the heap nor the goroutine.

package windlass

import (
	"runtime"
	"runtime/debug"
	"unsafe"
)

func init() {
	runtime.MemProfileRate = 0
	gcOff()
}

// gcOn enables the garbage collector for the duration of an export call.
func gcOn() { debug.SetGCPercent(gcPercent) }

// gcOff disables it again before the export returns.
func gcOff() { debug.SetGCPercent(-1) }

// gcPercent is the GOGC the collector runs with during export calls.
const gcPercent = 100

//go:wasmimport windlass:plugin/log@0.1.0 log
func wasmLog(level uint32, ptr unsafe.Pointer, n uint32)

func hostLog(level uint32, msg string) {
	wasmLog(level, unsafe.Pointer(unsafe.StringData(msg)), uint32(len(msg)))
	runtime.KeepAlive(msg)
}

// Arguments: buffers the host allocated, kept until the export has copied them.
var argBuffers [][]uint64

//go:wasmexport cabi_realloc
func cabiRealloc(old unsafe.Pointer, oldSize, align, newSize uint32) unsafe.Pointer {
	if newSize == 0 {
		return unsafe.Add(nil, align)
	}
	// []uint64 is 8-byte aligned, enough for every type of this world.
	buf := make([]uint64, (newSize+7)/8)
	argBuffers = append(argBuffers, buf)
	p := unsafe.Pointer(&buf[0])
	if old != nil && oldSize > 0 {
		copy(unsafe.Slice((*byte)(p), newSize), unsafe.Slice((*byte)(old), min(oldSize, newSize)))
	}
	return p
}

var adapterArena [256 << 10]byte
var adapterUsed uintptr

// cabiReallocAdapter serves the WASI adapter, which allocates once (its state and stack),
// possibly before the Go runtime has initialized: no heap, no goroutine, no stack growth.
//
//go:wasmexport cabi_realloc_adapter
//go:nosplit
func cabiReallocAdapter(old unsafe.Pointer, oldSize, align, newSize uint32) unsafe.Pointer {
	if newSize == 0 {
		return unsafe.Add(nil, align)
	}
	base := uintptr(unsafe.Pointer(&adapterArena[0]))
	off := (base+adapterUsed+uintptr(align)-1)&^(uintptr(align)-1) - base
	if off+uintptr(newSize) > uintptr(len(adapterArena)) {
		return nil // the adapter traps
	}
	adapterUsed = off + uintptr(newSize)
	return unsafe.Pointer(&adapterArena[off])
}

// Results: memory handed to the host, kept until the post-return call.
var pinned []any

func pin(v any) { pinned = append(pinned, v) }

// area allocates n zeroed bytes, 8-aligned, pinned until post-return.
func area(n int) []byte {
	if n == 0 {
		return nil
	}
	words := make([]uint64, (n+7)/8)
	pin(words)
	return unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), n)
}

func addr(b []byte) uint32 {
	if len(b) == 0 {
		return 0
	}
	return uint32(uintptr(unsafe.Pointer(&b[0])))
}

func put32(b []byte, off int, v uint32) { *(*uint32)(unsafe.Pointer(&b[off])) = v }

func putBool(b []byte, off int, v bool) {
	if v {
		b[off] = 1
	} else {
		b[off] = 0
	}
}

// putString stores a string (pointer, length) at off; the string is pinned.
func putString(b []byte, off int, s string) {
	if len(s) == 0 {
		put32(b, off, 1)
		put32(b, off+4, 0)
		return
	}
	pin(s)
	put32(b, off, uint32(uintptr(unsafe.Pointer(unsafe.StringData(s)))))
	put32(b, off+4, uint32(len(s)))
}

// putList stores list<T> at off: elements of size elem, each written by write.
func putList(b []byte, off int, n, elem int, write func(e []byte, i int)) {
	if n == 0 {
		put32(b, off, 4) // any aligned pointer for an empty list
		put32(b, off+4, 0)
		return
	}
	arr := area(n * elem)
	for i := 0; i < n; i++ {
		write(arr[i*elem:(i+1)*elem], i)
	}
	put32(b, off, addr(arr))
	put32(b, off+4, uint32(n))
}

func putStrings(b []byte, off int, ss []string) {
	putList(b, off, len(ss), 8, func(e []byte, i int) { putString(e, 0, ss[i]) })
}

// liftString copies a string the host wrote into our memory.
func liftString(ptr, n uint32) string {
	if n == 0 {
		return ""
	}
	return string(unsafe.Slice((*byte)(unsafe.Add(nil, ptr)), n))
}

func liftStrings(ptr, n uint32) []string {
	out := make([]string, n)
	for i := uint32(0); i < n; i++ {
		e := unsafe.Add(nil, ptr+8*i)
		out[i] = liftString(*(*uint32)(e), *(*uint32)(unsafe.Add(e, 4)))
	}
	return out
}

func plugin() Plugin {
	if exported == nil {
		panic("windlass: no plugin exported: call windlass.Export(yourPlugin) from an init function")
	}
	return exported
}

// info: func() -> plugin-info
//
// plugin-info (size 44): name 0, version 8, parent-kinds 16, child-kinds 24, reads-kinds 32,
// finalizes 40.
//
//go:wasmexport windlass:plugin/reconciler@0.1.0#info
func exportInfo() unsafe.Pointer {
	gcOn()
	defer gcOff()
	pinned = nil
	info := plugin().Info()
	b := area(44)
	putString(b, 0, info.Name)
	putString(b, 8, info.Version)
	putStrings(b, 16, info.Parents)
	putStrings(b, 24, info.Children)
	putStrings(b, 32, info.Reads)
	putBool(b, 40, info.Finalizes)
	return unsafe.Pointer(&b[0])
}

//go:wasmexport cabi_post_windlass:plugin/reconciler@0.1.0#info
func postInfo(unsafe.Pointer) { pinned = nil }

// reconcile: func(req: request) -> result<response, plugin-error>
//
// request flattens to 11 values: phase, parent, observed, desired, config, now (a string or list
// is a pointer and a length). The result is returned through memory (size 52): discriminant at
// 0, payload at 4. response (size 48): desired 0, status option<string> 8 (discriminant 8,
// string 12), conditions 20, events 28, requeue-after-secs option<u32> 36 (discriminant 36,
// value 40), finalized 44. plugin-error: discriminant 0, string 4. condition (size 28): kind 0,
// status 8, reason 12, message 20. event (size 20): warning 0, reason 4, message 12.
//
//go:wasmexport windlass:plugin/reconciler@0.1.0#reconcile
func exportReconcile(phase uint32, parentPtr, parentLen, observedPtr, observedLen, desiredPtr, desiredLen, configPtr, configLen, nowPtr, nowLen uint32) unsafe.Pointer {
	gcOn()
	defer gcOff()
	pinned = nil
	parent := liftString(parentPtr, parentLen)
	observed := liftStrings(observedPtr, observedLen)
	desired := liftStrings(desiredPtr, desiredLen)
	config := liftString(configPtr, configLen)
	now := liftString(nowPtr, nowLen)
	argBuffers = nil // copied: the host's buffers may go

	parts, err := runParts(plugin(), Phase(phase), parent, observed, desired, config, now)
	b := area(52)
	if err != nil {
		e := AsError(err)
		b[0] = 1
		switch e.Kind {
		case KindInvalidParent:
			b[4] = 0
		case KindInvalidConfig:
			b[4] = 1
		default:
			b[4] = 2
		}
		putString(b, 8, e.Message)
		return unsafe.Pointer(&b[0])
	}
	r := b[4:]
	putStrings(r, 0, parts.Desired)
	if parts.Status != nil {
		r[8] = 1
		putString(r, 12, *parts.Status)
	}
	putList(r, 20, len(parts.Conditions), 28, func(e []byte, i int) {
		c := parts.Conditions[i]
		putString(e, 0, c.Kind)
		putBool(e, 8, c.Status)
		putString(e, 12, c.Reason)
		putString(e, 20, c.Message)
	})
	putList(r, 28, len(parts.Events), 20, func(e []byte, i int) {
		ev := parts.Events[i]
		putBool(e, 0, ev.Warning)
		putString(e, 4, ev.Reason)
		putString(e, 12, ev.Message)
	})
	if parts.RequeueAfterSecs != nil {
		r[36] = 1
		put32(r, 40, *parts.RequeueAfterSecs)
	}
	putBool(r, 44, parts.Finalized)
	return unsafe.Pointer(&b[0])
}

//go:wasmexport cabi_post_windlass:plugin/reconciler@0.1.0#reconcile
func postReconcile(unsafe.Pointer) { pinned = nil }

// Serve does nothing in the component: a reactor never runs main, which calls it (natively it
// serves requests on stdin, serve_native.go).
func Serve() {}
