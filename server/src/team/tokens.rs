//! Tokens: made from 32 random bytes, handed out once, and kept only as their SHA-256. A
//! token carries 256 bits of entropy, so a fast hash is enough (a slow password hash guards
//! guessable secrets; nothing here is guessable), and a lookup by hash is one index probe.

use sha2::{Digest, Sha256};

/// Every token podq makes starts so, which lets a secret scanner find a leaked one.
pub const PREFIX: &str = "podq_";

/// A fresh token: `podq_` and 64 hex digits.
pub fn generate() -> String {
    // rand's thread generator is a CSPRNG (ChaCha, seeded from the OS).
    let bytes: [u8; 32] = rand::random();
    format!("{PREFIX}{}", hex::encode(bytes))
}

/// What the store keeps of a token: its SHA-256, in hex.
pub fn hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Whether `text` is a token hash as `hash` writes it (for `--users FILE`).
pub fn is_hash(text: &str) -> bool {
    text.len() == 64
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_new_each_time_and_its_hash_is_not_it() {
        let (a, b) = (generate(), generate());
        assert_ne!(a, b);
        assert!(a.starts_with(PREFIX) && a.len() == PREFIX.len() + 64, "{a}");
        assert!(is_hash(&hash(&a)));
        assert!(!hash(&a).contains(&a[PREFIX.len()..]));
        // The known SHA-256 of "abc".
        assert_eq!(
            hash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
