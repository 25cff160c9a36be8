//! List responses: selectors, `limit`/`continue`, plain lists written without re-serializing
//! through an intermediate value, and Tables.

use super::{AppState, ok, table};
use crate::error::{ApiError, Result};
use crate::resources::ResourceType;
use crate::selector::{FieldSelector, LabelSelector};
use axum::body::Body;
use axum::response::Response;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;

/// A list, with selectors and `limit`/`continue` (the token carries the first page's
/// resourceVersion and the last key returned).
pub(super) fn list(
    st: &AppState,
    rt: &ResourceType,
    version: &str,
    ns: Option<&str>,
    query: &HashMap<String, String>,
    as_table: bool,
    include: &str,
) -> Result<Response> {
    let labels =
        LabelSelector::parse(query.get("labelSelector").map(String::as_str).unwrap_or(""))?;
    let fields = FieldSelector::for_kind(
        query.get("fieldSelector").map(String::as_str).unwrap_or(""),
        rt,
    )?;
    let limit: usize = query
        .get("limit")
        .and_then(|l| l.parse().ok())
        .filter(|l| *l > 0)
        .unwrap_or(usize::MAX);
    let (items, now_rv) = st.cluster.store.list(&rt.key(), ns);
    let (rv, after) = match query.get("continue").filter(|c| !c.is_empty()) {
        Some(token) => {
            let mut parts = token.splitn(3, '|');
            let rv = parts
                .next()
                .and_then(|r| r.parse::<u64>().ok())
                .ok_or_else(|| ApiError::bad_request("invalid continue token"))?;
            let after = (
                parts.next().unwrap_or_default().to_string(),
                parts.next().unwrap_or_default().to_string(),
            );
            (rv, Some(after))
        }
        None => (now_rv, None),
    };
    let key = |o: &Value| {
        (
            o["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            o["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        )
    };
    let matching: Vec<&Arc<Value>> = items
        .iter()
        .filter(|o| after.as_ref().is_none_or(|a| key(o) > *a))
        .filter(|o| labels.matches(o) && fields.matches(o))
        .collect();
    let page: Vec<Arc<Value>> = matching.iter().take(limit).map(|o| (*o).clone()).collect();
    let remaining = matching.len().saturating_sub(page.len());
    let cont = (remaining > 0).then(|| {
        let (n, m) = page.last().map(|o| key(o)).unwrap_or_default();
        format!("{rv}|{n}|{m}")
    });
    if as_table {
        let shown: Vec<Arc<Value>> = page
            .iter()
            .map(|o| Arc::new(rt.present(o, version)))
            .collect();
        return Ok(ok(&table::table(rt, &shown, rv, cont.as_deref(), include)));
    }
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = &cont {
        meta["continue"] = json!(c);
        meta["remainingItemCount"] = json!(remaining);
    }
    let api_version = rt.api_version(version);
    let mut out = Vec::with_capacity(page.len() * 512 + 256);
    out.extend_from_slice(format!("{{\"kind\":\"{}List\",\"apiVersion\":\"{api_version}\",\"metadata\":{meta},\"items\":[", rt.kind).as_bytes());
    for (i, o) in page.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let shown = if rt.shown_as_stored(o, version) {
            None
        } else {
            Some(rt.present(o, version))
        };
        let _ = serde_json::to_writer(&mut out, shown.as_ref().unwrap_or(o));
    }
    out.extend_from_slice(b"]}");
    Ok(Response::builder()
        .header("content-type", "application/json")
        .body(Body::from(out))
        .unwrap_or_default())
}
