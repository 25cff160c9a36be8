//! `windlass probe URL`: GET a URL over plain HTTP and succeed only on 200 OK. The image has no
//! shell and no curl; the chart's `helm test` Pod runs this against the host's `/readyz`.

use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use http_body_util::{BodyExt as _, Empty};
use hyper_util::{client::legacy::Client, rt::TokioExecutor};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The URL to GET, plain HTTP (`http://windlass-metrics:8080/readyz`).
    url: String,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 10)]
    timeout_seconds: u64,
}

pub async fn run(args: Args) -> Result<()> {
    let url = &args.url;
    let (status, body) = get(url, Duration::from_secs(args.timeout_seconds)).await?;
    let body = body.trim();
    if status != hyper::StatusCode::OK {
        bail!("{url} answered {status}, not 200 OK: {body}");
    }
    println!("{url}: {status} {body}");
    Ok(())
}

/// GETs `url` over plain HTTP: the status and the body, within `limit`.
pub async fn get(url: &str, limit: Duration) -> Result<(hyper::StatusCode, String)> {
    let uri: hyper::Uri = url
        .parse()
        .with_context(|| format!("{url:?} is not a URL"))?;
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<bytes::Bytes>>();
    let (status, body) = tokio::time::timeout(limit, async {
        let response = client.get(uri).await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        Ok::<_, anyhow::Error>((status, body))
    })
    .await
    .with_context(|| format!("{url}: no answer within {} s", limit.as_secs()))?
    .with_context(|| format!("{url}: the request failed"))?;
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}
