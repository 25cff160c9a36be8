//! Capture of a guest's stdout and stderr.
//!
//! A guest may print; its output must neither reach the host's own stdout (which `windlass
//! render` uses for YAML) nor grow without bound. Each stream keeps at most `capacity` bytes per
//! call and silently drops the rest (counting what it dropped), so a chatty guest never fails
//! because of its prints. The host drains the buffer after each call into its log.

use std::{
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll},
};

use bytes::Bytes;
use wasmtime_wasi::{
    cli::{IsTerminal, StdoutStream},
    p2::{OutputStream, Pollable, StreamResult},
};

/// Largest write a guest is told it may make at once.
const WRITE_BUDGET: usize = 64 * 1024;

/// A bounded in-memory sink for one guest stream; clones share the buffer.
#[derive(Clone, Debug)]
pub(crate) struct GuestOutput {
    inner: Arc<Mutex<Buffer>>,
}

#[derive(Debug)]
struct Buffer {
    bytes: Vec<u8>,
    capacity: usize,
    dropped: usize,
}

impl GuestOutput {
    pub(crate) fn new(capacity: usize) -> Self {
        GuestOutput {
            inner: Arc::new(Mutex::new(Buffer {
                bytes: Vec::new(),
                capacity,
                dropped: 0,
            })),
        }
    }

    fn append(&self, data: &[u8]) {
        let mut buf = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let room = buf.capacity.saturating_sub(buf.bytes.len());
        let take = room.min(data.len());
        buf.bytes.extend_from_slice(&data[..take]);
        buf.dropped += data.len() - take;
    }

    /// Takes what was written since the last drain, as text, and the number of bytes dropped.
    pub(crate) fn drain(&self) -> (String, usize) {
        let mut buf = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let text = String::from_utf8_lossy(&buf.bytes).into_owned();
        buf.bytes.clear();
        let dropped = std::mem::take(&mut buf.dropped);
        (text, dropped)
    }
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl OutputStream for GuestOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.append(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(WRITE_BUDGET)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestOutput {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for GuestOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.append(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_beyond_capacity_is_dropped_and_counted() {
        let out = GuestOutput::new(4);
        out.append(b"abc");
        out.append(b"def");
        assert_eq!(out.drain(), ("abcd".to_string(), 2));
        assert_eq!(out.drain(), (String::new(), 0));
    }
}
