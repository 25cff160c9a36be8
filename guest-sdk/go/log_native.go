//go:build !wasip1

package windlass

import (
	"fmt"
	"os"
)

// Natively (in tests) log lines go to stderr.
func hostLog(level uint32, msg string) {
	names := [...]string{"debug", "info", "warn", "error"}
	fmt.Fprintf(os.Stderr, "[%s] %s\n", names[min(level, 3)], msg)
}
