//! Peers files whose entries may list several keys (SPEC MEM-1), and broken ones on purpose.
//!
//! Why: [`crate::keys::write_peers_file`] writes the one-key form of SPEC §15 at a gateway's start;
//! membership scenarios rewrite the file while the gateway runs — a host added or removed, an
//! entry listing an old and a new key (`<host> = ["<key>", "<key>"]`) — and replace it with
//! [`super::write_replace`].

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// host → its keys (base64 of the 32 raw bytes), in the order written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeersFile {
    pub entries: BTreeMap<String, Vec<String>>,
}

impl PeersFile {
    /// `[peers]` then one line per host: a string for one key, an array for several.
    pub fn render(&self) -> String {
        let mut s = String::from("[peers]\n");
        for (host, keys) in &self.entries {
            match keys.as_slice() {
                [] => {}
                [one] => {
                    let _ = writeln!(s, "{host:?} = {one:?}");
                }
                many => {
                    let list: Vec<String> = many.iter().map(|k| format!("{k:?}")).collect();
                    let _ = writeln!(s, "{host:?} = [{}]", list.join(", "));
                }
            }
        }
        s
    }

    /// The file with a line that does not parse as TOML inserted so that it is line `line`
    /// (1-based, at least 2: line 1 stays `[peers]`), the entries around it unchanged.
    pub fn render_broken_at(&self, line: usize) -> String {
        let mut lines: Vec<String> = self.render().lines().map(str::to_string).collect();
        let at = line.clamp(2, lines.len() + 1) - 1;
        lines.insert(at, "this line is not TOML = = at all".to_string());
        let mut s = lines.join("\n");
        s.push('\n');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file() -> PeersFile {
        let mut p = PeersFile::default();
        p.entries.insert("a".into(), vec!["QUFB".into()]);
        p.entries.insert("b".into(), vec!["QkJC".into(), "Q0ND".into()]);
        p.entries.insert("probe".into(), vec!["UFBQ".into()]);
        p
    }

    #[test]
    fn one_key_is_a_string_several_are_an_array() {
        let text = file().render();
        assert_eq!(
            text,
            "[peers]\n\"a\" = \"QUFB\"\n\"b\" = [\"QkJC\", \"Q0ND\"]\n\"probe\" = \"UFBQ\"\n"
        );
        let v: toml::Value = toml::from_str(&text).expect("valid TOML");
        assert_eq!(v["peers"]["b"].as_array().map(Vec::len), Some(2));
        assert_eq!(v["peers"]["a"].as_str(), Some("QUFB"));
        let empty = PeersFile::default().render();
        assert_eq!(empty, "[peers]\n");
        toml::from_str::<toml::Value>(&empty).expect("`[peers]` alone is valid");
    }

    #[test]
    fn a_broken_file_fails_to_parse_at_the_line_asked_for() {
        for line in [2, 3, 4] {
            let text = file().render_broken_at(line);
            assert!(text.starts_with("[peers]\n"));
            let e = toml::from_str::<toml::Value>(&text).expect_err("broken");
            assert!(
                e.to_string().contains(&format!("line {line}")),
                "line {line}: {e}\n{text}"
            );
        }
    }
}
