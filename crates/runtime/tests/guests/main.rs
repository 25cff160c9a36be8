//! Misbehaving and hostile guests against the runtime, and through the pipeline against the
//! policy, with no API server: one test binary, the helpers in `support`.

mod hostile;
mod sandbox;
mod support;
