//! The generated credentials Secret: made once, when the spec names no Secret, and never
//! rotated (the database was initialised with that password).

use std::collections::BTreeMap;

use sampledb_api::{names, selector_labels};
use windlass_sdk::{
    Context, Error, Result,
    k8s_openapi::{ByteString, api::core::v1::Secret},
};

use crate::objects::meta;

/// The database user of a generated Secret.
pub(crate) const USERNAME: &str = "sampledb";
/// The length of a generated password.
pub(crate) const PASSWORD_LEN: usize = 32;

const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// The generated Secret: the observed one's data when it exists, fresh credentials otherwise.
/// Immutable, so that nobody rotates the password under the database by accident.
pub(crate) fn generated_secret(ctx: &Context, name: &str) -> Result<Secret> {
    let secret_name = names::generated_secret(name);
    let observed = ctx.observed_named::<Secret>(&secret_name);
    let (data, type_) = match observed {
        Some(s) => (s.data.unwrap_or_default(), s.type_),
        None => (
            BTreeMap::from([
                ("username".to_string(), ByteString(USERNAME.into())),
                ("password".to_string(), ByteString(password()?.into_bytes())),
            ]),
            None,
        ),
    };
    Ok(Secret {
        metadata: meta(secret_name, &selector_labels(name)),
        type_: Some(type_.unwrap_or_else(|| "Opaque".into())),
        immutable: Some(true),
        data: Some(data),
        ..Secret::default()
    })
}

/// [`PASSWORD_LEN`] random alphanumeric characters from the host's randomness (wasi:random
/// in the sandbox), without modulo bias.
fn password() -> Result<String> {
    // 248 = 4 × 62: bytes at or above it would favour the first characters.
    const LIMIT: u8 = 248;
    let mut password = String::with_capacity(PASSWORD_LEN);
    let mut buf = [0u8; 64];
    while password.len() < PASSWORD_LEN {
        getrandom::fill(&mut buf)
            .map_err(|e| Error::Failed(format!("no randomness for the password: {e}")))?;
        for b in buf.iter().copied().filter(|b| *b < LIMIT) {
            if password.len() == PASSWORD_LEN {
                break;
            }
            password.push(char::from(ALPHABET[usize::from(b % 62)]));
        }
    }
    Ok(password)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_32_alphanumerics_and_differ() {
        let (a, b) = (password().unwrap(), password().unwrap());
        assert_eq!(a.len(), PASSWORD_LEN);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(a, b);
    }
}
