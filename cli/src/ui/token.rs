//! The token that lets the page write: 16 bytes from the OS's random
//! source, as 32 hex digits, made once per `actum ui` and compared in
//! constant time.
//!
//! **Invariant:** a token is never empty, so an empty form field never
//! matches.

use std::io::Read;

/// Random bytes in a token.
const TOKEN_BYTES: usize = 16;

/// A new token from `/dev/urandom`.
pub fn new_token() -> std::io::Result<String> {
    let mut bytes = [0u8; TOKEN_BYTES];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(token.len(), 2 * TOKEN_BYTES);
    Ok(token)
}

/// True if `given` is `token`, compared without an early exit.
pub fn matches(token: &str, given: &str) -> bool {
    assert!(!token.is_empty(), "a token is never empty");
    token.len() == given.len()
        && token
            .bytes()
            .zip(given.bytes())
            .fold(0u8, |differ, (a, b)| differ | (a ^ b))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_hex_and_match_only_themselves() {
        let (a, b) = (
            new_token().unwrap_or_default(),
            new_token().unwrap_or_default(),
        );
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
        assert!(matches(&a, &a));
        assert!(!matches(&a, &b));
        assert!(!matches(&a, ""));
        assert!(!matches(&a, &a[..31]));
    }
}
