module {{name}}

go 1.24

require windlass.dev/windlass v0.0.0

// The SDK is vendored in ./windlass (a copy of guest-sdk/go of the Windlass repository).
replace windlass.dev/windlass => ./windlass
