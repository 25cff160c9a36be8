module sampledb-chaos

go 1.24

require windlass.dev/windlass v0.0.0

// The SDK of this repository, in place (a generated project vendors a copy in ./windlass).
replace windlass.dev/windlass => ../../guest-sdk/go
