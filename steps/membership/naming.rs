//! [C-27] 4: the log lines an operator reads to find a credential problem name what it is about —
//! the rejection of another host's credential names that host, and the start names each trust
//! file, the revocation list and the own certificate it loaded, with counts (CONTRACT §5).
//!
//! Judged on the words, not a format: a host id appears as a word of the line (delimited by
//! anything but letters, digits, `-` and `_`: SPEC §1's host id alphabet), a path delimited by
//! anything a file name cannot end or go on with, whatever the line's layout (`host=b`,
//! `"host":"b"`, `host b.`).

use anyhow::{anyhow, ensure};
use cucumber::then;
use fleet_conformance::contract::{LogLevel, log_line_at};
use fleet_conformance::timing::wait_for;

use crate::world::FleetWorld;

use super::OBSERVE;
use super::files::{Kind, cert_path};

/// Whether `word` appears in `line` delimited by characters other than letters, digits, `-`, `_`
/// and `also`.
fn has_word(line: &str, word: &str, also: &[char]) -> bool {
    let inner = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_') || also.contains(&c);
    line.match_indices(word).any(|(i, _)| {
        let before = line[..i].chars().next_back();
        let after = line[i + word.len()..].chars().next();
        !before.is_some_and(inner) && !after.is_some_and(inner)
    })
}

/// [C-27] 4 on SIG-5's line (CONTRACT §5): each running gateway's WARN/ERROR line about the last
/// hostile message (by its id) names `host`, the host whose credential it rejected.
#[then(expr = "every gateway's line rejecting it names host {string}")]
async fn rejection_names_host(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    let marker = w
        .wire
        .last_hostile_marker()
        .ok_or_else(|| anyhow!("the probe has published no hostile message"))?
        .to_string();
    let mut running: Vec<String> = w.hosts.keys().cloned().collect();
    running.sort();
    for h in &running {
        let gw = &w.host(h)?.gateway;
        let (marker, host) = (marker.as_str(), host.as_str());
        wait_for(
            &format!("gateway {h}'s line rejecting {marker} to name host {host}"),
            OBSERVE,
            || async move {
                let log = gw.log();
                let lines: Vec<&str> = log
                    .lines()
                    .filter(|l| l.contains(marker) && log_line_at(l, LogLevel::Warn))
                    .collect();
                if lines.iter().any(|l| has_word(l, host, &[])) {
                    Ok(Some(()))
                } else {
                    Err(format!("its WARN/ERROR lines naming {marker}: {lines:?}"))
                }
            },
        )
        .await?;
    }
    Ok(())
}

/// [C-27] 4 at the start (CONTRACT §5): the gateway's log so far holds, for each file it was
/// given — the peers file, the trust file, the revocation list, the host certificate — a line
/// naming its path that holds a count (a digit outside the path).
#[then(
    expr = "the start log of {string} names its peers file, trust file, revocation list and host certificate, each on a line with a count"
)]
async fn start_names_files(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    let files = [
        ("peers file", Kind::Peers.path(w, &host)),
        ("trust file", Kind::Trust.path(w, &host)),
        ("revocation list", Kind::Revoked.path(w, &host)),
        ("host certificate", cert_path(w, &host)),
    ];
    let log = w.host(&host)?.gateway.log();
    let mut missing = Vec::new();
    for (what, path) in &files {
        ensure!(
            path.exists(),
            "the gateway on {host} was given no {what} ({})",
            path.display()
        );
        let path = path.display().to_string();
        let named = log.lines().any(|l| {
            has_word(l, &path, &['.', '/']) && l.replace(path.as_str(), "").chars().any(|c| c.is_ascii_digit())
        });
        if !named {
            missing.push(format!("{what} {path}"));
        }
    }
    ensure!(
        missing.is_empty(),
        "the start log of {host} names, with a count, none of: {}; its log:\n{log}",
        missing.join(", ")
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::has_word;

    #[test]
    fn a_word_is_delimited_by_what_cannot_be_part_of_a_host_id() {
        assert!(has_word("WARN host=x check=certificate", "x", &[]));
        assert!(has_word(r#"{"host":"x","check":"certificate"}"#, "x", &[]));
        assert!(has_word("rejected a presence of host x.", "x", &[]));
        assert!(!has_word("WARN host=x2 check=certificate", "x", &[]));
        assert!(!has_word("WARN host=ax", "x", &[]));
        let path = ['.', '/'];
        assert!(has_word("loaded /t/peers.toml: 2 peers", "/t/peers.toml", &path));
        assert!(!has_word("loaded /t/peers.toml.new: 2 peers", "/t/peers.toml", &path));
    }
}
