//! Publisher signatures of driver components: ed25519 over the component's sha256 digest.
//!
//! Owns: the signature file format (`DRIVER.wasm.sig`, JSON: `algorithm`, `public_key`,
//! `signed` — the digest signed, `sha256:HEX` — and `signature`), the trusted-key format
//! (`ed25519:HEX`, 32 bytes), the secret-key file format (`ed25519-secret:HEX`, the 32-byte
//! seed), signing, and verification with an error for each way it fails. Must not: read
//! package sources or touch the lock file (see the parent module).
//!
//! Why ed25519 over the digest rather than over the file: the lock file pins the digest, so
//! the signature binds exactly what every later load checks, and a signature file stays a
//! few hundred bytes for any component size. The implementation is `ed25519-dalek` (pure
//! Rust, RustCrypto), with strict verification (no malleable signatures, no weak keys).

use std::fmt;
use std::path::Path;

use ed25519_dalek::Signer;
use serde::{Deserialize, Serialize};

use crate::error::SignatureError;

/// The one signature algorithm this host verifies.
pub const SIGNATURE_ALGORITHM: &str = "ed25519";

/// A publisher key whose signatures this host accepts.
#[derive(Clone, PartialEq, Eq)]
pub struct TrustedKey {
    name: String,
    key: ed25519_dalek::VerifyingKey,
}

impl fmt::Debug for TrustedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TrustedKey({} = {})", self.name, self.public_key())
    }
}

impl TrustedKey {
    /// Parse `ed25519:HEX` (a 32-byte public key), named `name` in messages and the lock
    /// file.
    pub fn parse(name: &str, text: &str) -> Result<TrustedKey, SignatureError> {
        let invalid = |reason: String| SignatureError::InvalidKey {
            name: name.to_owned(),
            reason,
        };
        let hex_key = text
            .trim()
            .strip_prefix("ed25519:")
            .ok_or_else(|| invalid("expected `ed25519:` followed by 64 hex digits".to_owned()))?;
        let bytes: [u8; 32] = decode_fixed(hex_key).map_err(invalid)?;
        let key = ed25519_dalek::VerifyingKey::from_bytes(&bytes)
            .map_err(|e| invalid(format!("not an ed25519 public key: {e}")))?;
        if key.is_weak() {
            return Err(invalid("a weak (small-order) key".to_owned()));
        }
        Ok(TrustedKey {
            name: name.to_owned(),
            key,
        })
    }

    /// The key's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `ed25519:HEX`.
    pub fn public_key(&self) -> String {
        format!("ed25519:{}", hex::encode(self.key.as_bytes()))
    }
}

/// A publisher's secret key, for signing drivers (`adaptor drivers sign`).
pub struct SigningKey(ed25519_dalek::SigningKey);

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SigningKey({})", self.public_key())
    }
}

impl SigningKey {
    /// A new random key (from the operating system's generator).
    pub fn generate() -> SigningKey {
        let seed: [u8; 32] = rand::random();
        SigningKey(ed25519_dalek::SigningKey::from_bytes(&seed))
    }

    /// Parse the secret-key file format, `ed25519-secret:HEX` (the 32-byte seed).
    pub fn parse(name: &str, text: &str) -> Result<SigningKey, SignatureError> {
        let invalid = |reason: String| SignatureError::InvalidKey {
            name: name.to_owned(),
            reason,
        };
        let hex_seed = text.trim().strip_prefix("ed25519-secret:").ok_or_else(|| {
            invalid("expected `ed25519-secret:` followed by 64 hex digits".to_owned())
        })?;
        let seed: [u8; 32] = decode_fixed(hex_seed).map_err(invalid)?;
        Ok(SigningKey(ed25519_dalek::SigningKey::from_bytes(&seed)))
    }

    /// The secret-key file text (`ed25519-secret:HEX`). Keep it private.
    pub fn to_secret_text(&self) -> String {
        format!("ed25519-secret:{}", hex::encode(self.0.to_bytes()))
    }

    /// The public half, `ed25519:HEX`: what installers put among their trusted keys.
    pub fn public_key(&self) -> String {
        format!("ed25519:{}", hex::encode(self.0.verifying_key().as_bytes()))
    }

    /// Sign the component `bytes`: its sha256 (hex) and the signature file's text (JSON),
    /// to be saved as `DRIVER.wasm.sig`.
    pub fn sign_component(&self, bytes: &[u8]) -> (String, String) {
        let digest = crate::wasm::engine::sha256_hex(bytes);
        let file = self
            .sign_digest(&digest)
            .expect("a sha256 hex digest decodes");
        (digest, file)
    }

    /// The signature file for a component of sha256 `sha256_hex`.
    fn sign_digest(&self, sha256_hex: &str) -> Result<String, SignatureError> {
        let digest: [u8; 32] =
            decode_fixed(sha256_hex).map_err(|reason| SignatureError::InvalidKey {
                name: "digest".to_owned(),
                reason,
            })?;
        let file = SignatureFile {
            algorithm: SIGNATURE_ALGORITHM.to_owned(),
            public_key: hex::encode(self.0.verifying_key().as_bytes()),
            signed: format!("sha256:{sha256_hex}"),
            signature: hex::encode(self.0.sign(&digest).to_bytes()),
        };
        Ok(serde_json::to_string_pretty(&file).expect("signature file serializes") + "\n")
    }
}

/// The signature file's JSON.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SignatureFile {
    algorithm: String,
    public_key: String,
    signed: String,
    signature: String,
}

/// Check the signature file `text` (read from `path`) for the component `sha256_hex`
/// against `trusted`; the trusted key's name when it verifies.
pub(crate) fn verify(
    path: &Path,
    text: &str,
    sha256_hex: &str,
    trusted: &[TrustedKey],
) -> Result<String, SignatureError> {
    let malformed = |reason: String| SignatureError::Malformed {
        path: path.display().to_string(),
        reason,
    };
    let file: SignatureFile = serde_json::from_str(text).map_err(|e| malformed(e.to_string()))?;
    if file.algorithm != SIGNATURE_ALGORITHM {
        return Err(malformed(format!(
            "algorithm `{}`; this host verifies `{SIGNATURE_ALGORITHM}`",
            file.algorithm
        )));
    }
    let public: [u8; 32] = decode_fixed(&file.public_key).map_err(&malformed)?;
    let signature: [u8; 64] = decode_fixed(&file.signature).map_err(&malformed)?;
    let signed = file
        .signed
        .strip_prefix("sha256:")
        .ok_or_else(|| malformed("`signed` must be `sha256:HEX`".to_owned()))?;
    if !signed.eq_ignore_ascii_case(sha256_hex) {
        return Err(SignatureError::OtherComponent {
            signed: signed.to_owned(),
            actual: sha256_hex.to_owned(),
        });
    }
    let Some(key) = trusted.iter().find(|k| k.key.as_bytes() == &public) else {
        return Err(SignatureError::UnknownKey {
            public_key: file.public_key,
            trusted: if trusted.is_empty() {
                "none".to_owned()
            } else {
                trusted
                    .iter()
                    .map(|k| k.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        });
    };
    let digest: [u8; 32] = decode_fixed(sha256_hex).map_err(&malformed)?;
    let signature = ed25519_dalek::Signature::from_bytes(&signature);
    key.key
        .verify_strict(&digest, &signature)
        .map_err(|_| SignatureError::BadSignature {
            key: key.name.clone(),
        })?;
    Ok(key.name.clone())
}

/// Exactly `N` bytes from hex.
fn decode_fixed<const N: usize>(text: &str) -> Result<[u8; N], String> {
    let bytes = hex::decode(text.trim()).map_err(|e| format!("not hex: {e}"))?;
    bytes
        .try_into()
        .map_err(|b: Vec<u8>| format!("{} bytes where {N} were expected", b.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    #[test]
    fn a_signature_verifies_with_its_trusted_key_only() {
        let key = SigningKey::generate();
        let sig = key.sign_digest(DIGEST).unwrap();
        let trusted = TrustedKey::parse("acme", &key.public_key()).unwrap();
        let path = Path::new("d.wasm.sig");
        assert_eq!(
            verify(path, &sig, DIGEST, std::slice::from_ref(&trusted)).unwrap(),
            "acme"
        );
        // No trusted key: unknown.
        assert!(matches!(
            verify(path, &sig, DIGEST, &[]),
            Err(SignatureError::UnknownKey { trusted, .. }) if trusted == "none"
        ));
        // Another component.
        let other = "0".repeat(64);
        assert!(matches!(
            verify(path, &sig, &other, std::slice::from_ref(&trusted)),
            Err(SignatureError::OtherComponent { .. })
        ));
        // A flipped signature bit.
        let mut file: serde_json::Value = serde_json::from_str(&sig).unwrap();
        let s = file["signature"].as_str().unwrap().to_owned();
        let flipped = format!("{}{}", if s.starts_with('0') { "1" } else { "0" }, &s[1..]);
        file["signature"] = flipped.into();
        assert!(matches!(
            verify(path, &file.to_string(), DIGEST, &[trusted]),
            Err(SignatureError::BadSignature { key }) if key == "acme"
        ));
    }

    #[test]
    fn keys_round_trip_and_bad_keys_name_themselves() {
        let key = SigningKey::generate();
        let again = SigningKey::parse("k", &key.to_secret_text()).unwrap();
        assert_eq!(key.public_key(), again.public_key());
        assert!(matches!(
            TrustedKey::parse("acme", "rsa:abcd"),
            Err(SignatureError::InvalidKey { name, .. }) if name == "acme"
        ));
        assert!(TrustedKey::parse("acme", "ed25519:abcd").is_err());
        assert!(matches!(
            verify(Path::new("x.sig"), "{}", DIGEST, &[]),
            Err(SignatureError::Malformed { .. })
        ));
    }
}
