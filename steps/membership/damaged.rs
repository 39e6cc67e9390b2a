//! Credential files as they go wrong (SPEC [C-27]): a CA line damaged in a way that still looks
//! like a line of a taken type.
//!
//! [C-27] 1: a trust-file line of a key type the gateway takes whose key does not parse makes the
//! file broken (MEM-1: not applied, the last good content kept, an ERROR naming file and line);
//! only a well-formed line of a type the gateway does not take is skipped ([C-21] 10). The damage
//! played here is a paste cut at a multiple of 4 base64 characters: what is left still decodes,
//! and its blob still begins with the type's name, so only parsing the key shows it is cut — a
//! gateway that took such a line for "a type it does not take" would drop that CA's hosts.

use anyhow::{anyhow, ensure};
use cucumber::when;

use crate::world::FleetWorld;

use super::files::{Kind, rewrite_all};
use super::trust_file;

/// The CA's public key line with its base64 shortened by `cut` characters (comment kept).
fn cut_line(line: &str, cut: usize) -> anyhow::Result<String> {
    let mut words = line.split_whitespace();
    let (alg, b64) = (words.next().unwrap_or_default(), words.next().unwrap_or_default());
    ensure!(b64.len() > cut + 16, "the CA line {line:?} is too short to cut by {cut}");
    let comment: Vec<&str> = words.collect();
    Ok(format!("{alg} {} {}", &b64[..b64.len() - cut], comment.join(" ")).trim_end().to_string())
}

/// [C-27] 1: every running gateway's trust file is rewritten as it is, except the line of `ca`,
/// whose base64 loses its last 4 characters.
#[when(regex = r#"^in every trust file the line of the CA "([^"]+)" loses its last 4 base64 characters$"#)]
async fn cut_ca_line(w: &mut FleetWorld, ca: String) -> anyhow::Result<()> {
    let whole = w.membership.ca(&ca)?.public_line().trim().to_string();
    let cut = cut_line(&whole, 4)?;
    rewrite_all(w, Kind::Trust, |w, _| {
        let good = trust_file(w, None)?.ok_or_else(|| anyhow!("the gateways read no trust file"))?;
        ensure!(good.lines().any(|l| l.trim() == whole), "no trust file lists the CA {ca:?}: {good}");
        let lines: Vec<&str> = good
            .lines()
            .map(|l| if l.trim() == whole { cut.as_str() } else { l })
            .collect();
        Ok(lines.join("\n") + "\n")
    })
}

#[cfg(test)]
mod tests {
    use super::cut_line;

    #[test]
    fn a_cut_line_keeps_its_type_and_comment() {
        let line = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBx3nuQm4h1HyvUh4xvwQhG8N1o0hS8gWj5rGZ0T7V4e fleet CA";
        let cut = cut_line(line, 4).expect("cut");
        assert_eq!(cut, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBx3nuQm4h1HyvUh4xvwQhG8N1o0hS8gWj5rGZ0T fleet CA");
        assert!(cut_line("ssh-ed25519 AAAA", 4).is_err());
    }
}
