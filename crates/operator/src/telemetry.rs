//! Trace context that comes in on a parent: the `tracing.k8s.io/traceparent` annotation
//! proposed by KEP-5915, a W3C `traceparent` (`00-<trace id>-<span id>-<flags>`). A reconcile of
//! a parent carrying one joins that trace as a child of that span, so a trace begun by whoever
//! changed the parent (a CI job, a client that propagates context) shows the reconcile it led
//! to. The spans themselves go out over OTLP when the binary configures an exporter (see the
//! host's `cmd`); without one, nothing here has an effect.

use kube::api::DynamicObject;
use opentelemetry::{Context, propagation::TextMapPropagator as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;

/// The annotation a parent's trace context comes in on.
pub const TRACEPARENT_ANNOTATION: &str = "tracing.k8s.io/traceparent";

/// The remote span context of the parent's `tracing.k8s.io/traceparent`, if it carries a valid
/// one (an invalid one is ignored, as W3C trace context asks).
pub fn remote_parent(obj: &DynamicObject) -> Option<Context> {
    let traceparent = obj
        .metadata
        .annotations
        .as_ref()?
        .get(TRACEPARENT_ANNOTATION)?;
    remote_context(traceparent)
}

/// The context of a W3C `traceparent` value, if it is a valid one.
pub fn remote_context(traceparent: &str) -> Option<Context> {
    use opentelemetry::trace::TraceContextExt as _;
    // The propagator takes a shorter id as one with leading zeros; W3C asks for exactly
    // version-traceid-parentid-flags of 2, 32, 16 and 2 lowercase hex digits.
    let traceparent = traceparent.trim();
    let lengths: Vec<usize> = traceparent.split('-').map(str::len).collect();
    let lowercase_hex = traceparent
        .chars()
        .all(|c| c == '-' || c.is_ascii_digit() || ('a'..='f').contains(&c));
    if lengths.get(..4) != Some(&[2, 32, 16, 2]) || !lowercase_hex {
        return None;
    }
    let carrier =
        std::collections::HashMap::from([("traceparent".to_string(), traceparent.to_string())]);
    let cx = TraceContextPropagator::new().extract(&carrier);
    cx.span().span_context().is_valid().then_some(cx)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a panic is the failure report.
mod tests {
    use super::*;
    use opentelemetry::trace::TraceContextExt as _;

    #[test]
    fn a_valid_traceparent_gives_its_trace_and_span_and_an_invalid_one_nothing() {
        let cx = remote_context("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        let span = cx.span();
        let sc = span.span_context();
        assert_eq!(
            sc.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");
        assert!(sc.is_remote() && sc.is_sampled());
        for bad in [
            "",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "not a traceparent",
        ] {
            assert!(remote_context(bad).is_none(), "{bad:?} accepted");
        }
    }
}
