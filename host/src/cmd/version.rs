//! `windlass version`: what was built — the host's version, the commit, the wasmtime version
//! it links and the WIT packages it serves plugins (the build script finds them out).

mod info {
    include!(concat!(env!("OUT_DIR"), "/build_info.rs"));
}

/// The lines `windlass version` prints.
pub fn lines() -> Vec<String> {
    let mut lines = vec![
        format!("windlass {}", env!("CARGO_PKG_VERSION")),
        format!("commit:   {}", info::COMMIT),
        format!("wasmtime: {}", info::WASMTIME),
    ];
    lines.extend(info::WIT_PACKAGES.iter().map(|p| format!("wit:      {p}")));
    lines
}

pub fn run() -> anyhow::Result<()> {
    for line in lines() {
        println!("{line}");
    }
    Ok(())
}
