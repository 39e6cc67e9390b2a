//! Key names in `pane.send_input` `keys`, parsed the way real herdr v0.8.2 parses them.
//!
//! Why it exists: a gateway that sends a key herdr does not know gets `invalid_key` and nothing is
//! typed, so the brief never reaches the agent. The table below is what real herdr v0.8.2 answered
//! for 100 key names (`fixtures/herdr-0.8.2/keys.jsonl`, replayed by the herdr replay test):
//! - a single character is itself (`a`, `A`, `1`, `é`, `+`, `-`), case kept;
//! - otherwise the name is trimmed and split on `+`; each part is trimmed and compared ignoring
//!   case; exactly one part is a key and the others modifiers, in any order (`ctrl+c`,
//!   `ctrl + c`, `c+ctrl`, `enter+shift`, `ctrl+shift+c`);
//! - modifiers: `ctrl`/`control`, `shift`, `alt`/`meta`/`option`, `super`/`cmd`/`command`/`hyper`;
//! - a key is a single character, a named key ([`NAMED_KEYS`]: `enter`, `return`, `tab`,
//!   `space`, `escape`, `esc`, `bs`, `backspace`, the arrows, punctuation names such as `minus`,
//!   `comma`, `double-quote`) or a function key `f0`–`f255` (`f01` too);
//! - `C-c` and `c-c` (exactly: `C-C`, `c-C` are refused) are the one tmux-style spelling herdr
//!   takes (the interrupt); `c-d`, `M-b` and every hyphen name (`ctrl-c`, `ctrl-u`) are refused,
//!   as are `home`, `end`, `delete`, `del`, `backtab`, `pageup`, `pagedown`, `insert`,
//!   `kp_enter`, an empty or blank name, a lone modifier (`ctrl`, `ctrl+shift`) and an empty part
//!   (`ctrl+`, `+ctrl`, `ctrl++`).
//!
//! The refusal's message is `unsupported key NAME`, the name as sent.

/// Named keys herdr accepts alone or with modifiers (lower case; input is compared lower-cased).
pub const NAMED_KEYS: &[&str] = &[
    "enter",
    "return",
    "tab",
    "space",
    "escape",
    "esc",
    "bs",
    "backspace",
    "up",
    "down",
    "left",
    "right",
    "minus",
    "plus",
    "comma",
    "period",
    "slash",
    "backslash",
    "quote",
    "double_quote",
    "double-quote",
    "semicolon",
    "colon",
    "percent",
    "ampersand",
    "backtick",
];

/// Modifier spellings and the modifier each means.
const MODIFIERS: &[(&str, &str)] = &[
    ("ctrl", "ctrl"),
    ("control", "ctrl"),
    ("shift", "shift"),
    ("alt", "alt"),
    ("meta", "alt"),
    ("option", "alt"),
    ("super", "super"),
    ("cmd", "super"),
    ("command", "super"),
    ("hyper", "super"),
];

/// A key name herdr refuses (`invalid_key`); displays as herdr words it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsupported key {0}")]
pub struct InvalidKey(pub String);

/// A parsed key: the modifiers held and the key itself, lower case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    /// Modifiers in the order given, by their canonical names (`ctrl`, `shift`, `alt`, `super`).
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
    if trimmed == "c-c" || trimmed == "C-c" {
        return Ok(Key {
            modifiers: vec!["ctrl"],
            key: "c".to_string(),
        });
    }
    let lower = trimmed.to_lowercase();
    let mut modifiers = Vec::new();
    let mut key = None;
    for part in lower.split('+').map(str::trim) {
        if let Some((_, modifier)) = MODIFIERS.iter().find(|(name, _)| *name == part) {
            modifiers.push(*modifier);
        } else if key.is_none() && is_base_key(part) {
            key = Some(part.to_string());
        } else {
            return Err(refuse());
        }
    }
    let key = key.ok_or_else(refuse)?;
    Ok(Key { modifiers, key })
}

/// Whether `key` (lower case, trimmed) names a key on its own: one character, a named key or `fN`.
fn is_base_key(key: &str) -> bool {
    key.chars().count() == 1 || NAMED_KEYS.contains(&key) || is_function_key(key)
}

/// `f0` … `f255` (leading zeros allowed, as herdr parses the number as a byte).
fn is_function_key(key: &str) -> bool {
    key.strip_prefix('f')
        .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
        .is_some_and(|n| n.parse::<u8>().is_ok())
}

/// Parses every key of a request; herdr refuses the whole request (types nothing) on the first
/// bad one.
pub fn parse_keys(keys: &[String]) -> Result<Vec<Key>, InvalidKey> {
    keys.iter().map(|k| parse_key(k)).collect()
}
