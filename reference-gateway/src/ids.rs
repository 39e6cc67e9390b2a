//! Identifier checks shared across the stack: host ids (SPEC §0) and v1.0.0 pane ids.
//!
//! Why it exists: both the configuration (at the bottom of the stack) and the modules that use
//! these ids (migration, conversion, the MCP tools) need the same check. Kept here, low and free
//! of dependencies, so `config` needs no higher module to validate a variable.

/// Host ids as SPEC §0 defines them: `[a-z0-9][a-z0-9-]{0,62}`.
pub fn valid_host_id(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

/// A v1 pane id usable in a queue name: printable ASCII without spaces, at most 200 bytes (AMQP
/// queue names end at 255). herdr's ids look like `w1:p2`; the `:` is fine in a queue name.
pub fn valid_legacy_pane(pane: &str) -> bool {
    !pane.is_empty() && pane.len() <= 200 && pane.bytes().all(|b| b.is_ascii_graphic())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pane_ids_are_checked() {
        assert!(valid_legacy_pane("w1:p2"));
        assert!(!valid_legacy_pane(""));
        assert!(!valid_legacy_pane("w1 p2"));
        assert!(!valid_legacy_pane("w1:p2\n"));
        assert!(!valid_legacy_pane(&"x".repeat(201)));
    }
}
