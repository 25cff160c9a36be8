module windlass.dev/windlass

go 1.24
