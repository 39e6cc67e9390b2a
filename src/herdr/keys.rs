//! Key names in `pane.send_input` `keys`, parsed the way real herdr v0.8.2 parses them.
//!
//! Why it exists: a gateway that sends a key herdr does not know gets `invalid_key` and nothing is
//! typed, so the brief never reaches the agent. The fake used to accept a fixed list that was
//! wrong in both directions (it took `ctrl-u` and refused `ctrl+c`); a gateway tuned against it
//! would fail on real herdr. The table below is what real herdr v0.8.2 answered when measured
//! (HERDR.md, "The 'strict' fake against real herdr v0.8.2"):
//! - a name is trimmed and compared ignoring case (`" enter"`, `ENTER`);
//! - combos join modifiers (`ctrl`, `shift`, `alt`) and one key with `+` (`ctrl+c`,
//!   `ctrl+shift+c`, `shift+tab`, `alt+b`);
//! - a key is a single character (`a`, `A`, `1`), a named key ([`NAMED_KEYS`]: `enter`, `return`,
//!   `tab`, `space`, `escape`, `esc`, `bs`, `minus`, the arrows, …) or a function key `f1`–`f12`;
//! - `c-c` is the one tmux-style spelling herdr takes (the interrupt); `c-d`, `c-u`, `c-l` and
//!   every hyphen name (`ctrl-c`, `ctrl-u`) are refused, as are `home`, `end`, `delete`,
//!   `backtab`, `pageup`, `pagedown` and `insert`.
//!
//! Rows not measured (`backspace`, the arrows) follow herdr's documented examples and are accepted.

/// Named keys herdr accepts alone or after modifiers (lower case; input is compared lower-cased).
pub const NAMED_KEYS: &[&str] = &[
    "enter",
    "return",
    "tab",
    "space",
    "escape",
    "esc",
    "bs",
    "backspace",
    "minus",
    "up",
    "down",
    "left",
    "right",
];

/// Modifiers that may precede a key in a `+` combo.
const MODIFIERS: &[&str] = &["ctrl", "shift", "alt"];

/// The highest function key accepted (`f1` … `f12`).
const MAX_FUNCTION_KEY: u8 = 12;

/// A key name herdr refuses (`invalid_key`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsupported key {0:?}")]
pub struct InvalidKey(pub String);

/// A parsed key: the modifiers held and the key itself, lower case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    /// Modifiers in the order given (`ctrl`, `shift`, `alt`).
    pub modifiers: Vec<&'static str>,
    /// The key: a named key, `fN`, or one character.
    pub key: String,
}

impl Key {
    /// Whether this key submits the line (a bare `enter` / `return`).
    pub fn is_enter(&self) -> bool {
        self.modifiers.is_empty() && matches!(self.key.as_str(), "enter" | "return")
    }
}

/// Parses one entry of `keys` as herdr does; see the module doc for the table.
pub fn parse_key(raw: &str) -> Result<Key, InvalidKey> {
    let refuse = || InvalidKey(raw.to_string());
    let trimmed = raw.trim();
    // A single character is itself, case kept (`A` types an upper-case A).
    if trimmed.chars().count() == 1 {
        return Ok(Key {
            modifiers: Vec::new(),
            key: trimmed.to_string(),
        });
    }
    let lower = trimmed.to_ascii_lowercase();
    if lower == "c-c" {
        return Ok(Key {
            modifiers: vec!["ctrl"],
            key: "c".to_string(),
        });
    }
    let mut parts: Vec<&str> = lower.split('+').map(str::trim).collect();
    let key = parts.pop().filter(|k| !k.is_empty()).ok_or_else(refuse)?;
    let modifiers = parts
        .into_iter()
        .map(|m| MODIFIERS.iter().copied().find(|known| *known == m).ok_or_else(refuse))
        .collect::<Result<Vec<_>, _>>()?;
    if is_base_key(key) {
        Ok(Key {
            modifiers,
            key: key.to_string(),
        })
    } else {
        Err(refuse())
    }
}

/// Whether `key` (lower case, trimmed) names a key on its own: one character, a named key or `fN`.
fn is_base_key(key: &str) -> bool {
    key.chars().count() == 1 || NAMED_KEYS.contains(&key) || is_function_key(key)
}

/// `f1` … `f12`.
fn is_function_key(key: &str) -> bool {
    key.strip_prefix('f')
        .and_then(|n| n.parse::<u8>().ok())
        .is_some_and(|n| (1..=MAX_FUNCTION_KEY).contains(&n))
}

/// Parses every key of a request; herdr refuses the whole request (types nothing) on the first
/// bad one.
pub fn parse_keys(keys: &[String]) -> Result<Vec<Key>, InvalidKey> {
    keys.iter().map(|k| parse_key(k)).collect()
}
