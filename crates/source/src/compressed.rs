//! Components stored gzip-compressed. A ConfigMap holds 1 MiB, and a plugin can be larger
//! than that (one built for speed rather than size, a Python or Go one); gzip brings it well
//! under. A component is recognised as
//! compressed by gzip's magic bytes (a component itself starts with `\0asm`), inflated up to a
//! limit, and from then on is the inflated component: its digest, and the `sha256` pin it is
//! checked against, are those of the inflated bytes, so a plugin has one digest however it is
//! stored.

use std::io::Read;

use crate::Error;

/// The first two bytes of every gzip member (RFC 1952).
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Whether `bytes` are gzip-compressed.
pub fn is_gzip(bytes: &[u8]) -> bool {
    bytes.starts_with(&GZIP_MAGIC)
}

/// The component in `bytes`, read from `source_name`: inflated when they are gzip-compressed,
/// as they are otherwise.
///
/// # Errors
/// [`Error::Inflate`] naming the source when the gzip stream is corrupt or inflates to more
/// than `limit` bytes (reading stops there: a small ConfigMap cannot make the host allocate
/// gigabytes; the buffer may reach twice the limit while it grows).
pub fn inflate(bytes: Vec<u8>, limit: u64, source_name: &str) -> Result<Vec<u8>, Error> {
    if !is_gzip(&bytes) {
        return Ok(bytes);
    }
    let refused = |why: String| Error::Inflate {
        source_name: source_name.to_string(),
        why,
    };
    // Room for a typical component up front, never more than the limit allows.
    let room = bytes
        .len()
        .saturating_mul(4)
        .min(usize::try_from(limit).unwrap_or(usize::MAX));
    let mut out = Vec::with_capacity(room.saturating_add(1));
    // Every member, as gunzip reads a file: bytes after the first member that are not another
    // member are an error, not silently ignored.
    flate2::read::MultiGzDecoder::new(bytes.as_slice())
        .take(limit.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| refused(format!("cannot be inflated: {e}")))?;
    if out.len() as u64 > limit {
        return Err(refused(format!(
            "inflates to more than the limit of {limit} bytes"
        )));
    }
    Ok(out)
}

/// `bytes` gzip-compressed at the best level, without a file name or a time in the header, so
/// that one component always compresses to the same bytes.
pub fn deflate(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), flate2::Compression::best());
    std::io::Write::write_all(&mut encoder, bytes).expect("writing to memory");
    encoder.finish().expect("writing to memory")
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMPONENT: &[u8] =
        b"\0asm\x0d\0\x01\0 and the rest of a component, repeated repeated repeated";

    #[test]
    fn a_component_passes_as_it_is() {
        assert_eq!(
            inflate(COMPONENT.to_vec(), 1 << 20, "file c.wasm").unwrap(),
            COMPONENT
        );
    }

    #[test]
    fn a_compressed_component_inflates_to_the_same_bytes() {
        let packed = deflate(COMPONENT);
        assert!(is_gzip(&packed));
        assert_ne!(packed, COMPONENT);
        assert_eq!(
            inflate(packed.clone(), 1 << 20, "file c.wasm").unwrap(),
            COMPONENT
        );
        assert_eq!(deflate(COMPONENT), packed, "compression is reproducible");
    }

    #[test]
    fn inflating_stops_at_the_limit() {
        let bomb = deflate(&vec![0u8; 10 << 20]);
        assert!(bomb.len() < 64 << 10, "{} bytes", bomb.len());
        let err = inflate(bomb, 1 << 20, "configMap ns/p[plugin.wasm]").unwrap_err();
        assert_eq!(
            err.to_string(),
            "configMap ns/p[plugin.wasm]: refusing the plugin: the gzip-compressed component inflates to more than the limit of 1048576 bytes"
        );
        assert_eq!(err.reason(), "InflateFailed");
        // Exactly at the limit is fine.
        let exact = deflate(&vec![7u8; 1 << 20]);
        assert_eq!(
            inflate(exact, 1 << 20, "file c.wasm").unwrap().len(),
            1 << 20
        );
    }

    #[test]
    fn inflating_stops_at_the_limit_without_reading_the_rest() {
        // The trailer's CRC is wrong: only a decoder that reads to the end notices, so the
        // error says which one ran.
        let mut packed = deflate(&vec![0u8; (1 << 20) + 1000]);
        let crc = packed.len() - 8;
        packed[crc] ^= 0xff;
        let err = inflate(packed.clone(), 1 << 20, "file c.wasm").unwrap_err();
        assert!(
            err.to_string()
                .ends_with("inflates to more than the limit of 1048576 bytes"),
            "{err}"
        );
        let err = inflate(packed, 2 << 20, "file c.wasm").unwrap_err();
        assert!(err.to_string().contains("cannot be inflated"), "{err}");
    }

    #[test]
    fn every_member_is_read_and_a_tail_that_is_not_one_is_refused() {
        let mut two = deflate(b"\0asm first half, ");
        two.extend(deflate(b"second half"));
        assert_eq!(
            inflate(two.clone(), 1 << 20, "file c.wasm").unwrap(),
            b"\0asm first half, second half"
        );
        two.extend_from_slice(b"not gzip at all");
        let err = inflate(two, 1 << 20, "file c.wasm").unwrap_err();
        assert!(err.to_string().contains("cannot be inflated"), "{err}");
    }

    #[test]
    fn a_corrupt_stream_is_named() {
        let mut packed = deflate(COMPONENT);
        packed.truncate(packed.len() - 6);
        let err = inflate(packed, 1 << 20, "file c.wasm")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(
                "file c.wasm: refusing the plugin: the gzip-compressed component cannot be inflated: "
            ),
            "{err}"
        );
    }
}
