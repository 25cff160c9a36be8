//! Tries to open a TCP connection to the address in its config and reports what happened.
// The plugin is only exported (and so only used) when built for wasm32.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
use std::{io::Write, net::TcpStream};

use windlass_sdk::{Context, Error, Info, Output, Plugin, Result};

struct Socket;

windlass_sdk::export!(Socket);

impl Plugin for Socket {
    fn info() -> Info {
        Info::new("guest-socket", "0.0.0").parent("example.com/v1/Thing")
    }

    fn reconcile(ctx: &Context) -> Result<Output> {
        let addr = ctx.config::<windlass_sdk::Value>()?["address"]
            .as_str()
            .unwrap_or("127.0.0.1:80")
            .to_string();
        match TcpStream::connect(&addr) {
            Ok(mut stream) => {
                let _ = stream.write_all(b"escaped the sandbox\n");
                let mut out = ctx.output();
                out.status("connected", addr);
                Ok(out)
            }
            Err(e) => Err(Error::Failed(format!(
                "connecting to {addr}: {:?}",
                e.kind()
            ))),
        }
    }
}
