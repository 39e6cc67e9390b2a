//! Which requirement a failed scenario's failing step judged.
//!
//! Why it exists: a scenario is tagged with every requirement it touches (`@FWD-2 @FWD-4`) and
//! its failure is counted against each of them. Where the failing step's message names some of
//! those ids, the report says so: the step judged *that* id, and the scenario's other ids were
//! judged only by the steps before it (issue 64: a wrong `busy` where `stopped` was due failed FWD-2
//! and FWD-4 alike, and only FWD-4's step broke). The verdict is unchanged — the failure still
//! counts for every tag, since no later step of the scenario ran — the report shows the cause.

/// The scenario's requirement ids its failing step's message names (as a whole word: `FWD-2`
/// does not name `FWD-20`; SPEC's `[C-20]` names `C-20`).
pub fn named<'a>(tags: &'a [String], error: &str) -> Vec<&'a str> {
    tags.iter()
        .map(String::as_str)
        .filter(|t| t.contains('-') && names(error, t))
        .collect()
}

fn names(text: &str, id: &str) -> bool {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    text.match_indices(id).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + id.len()..].chars().next();
        !before.is_some_and(word) && !after.is_some_and(word)
    })
}

/// One sentence for the report: what the failing step judged, seen from requirement `id`.
pub fn sentence(id: &str, tags: &[String], error: &str) -> String {
    let named = named(tags, error);
    if named.is_empty() {
        return "The failing step names no requirement id: the failure counts for every id the \
                scenario is tagged with."
            .to_string();
    }
    let list = named.join(", ");
    if named.contains(&id) {
        format!("The failing step judges {list}.")
    } else {
        format!(
            "The failing step judges {list}, not {id}: {id} was judged only by the steps before \
             it (the failure still counts for every tag, no later step ran)."
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(t: &[&str]) -> Vec<String> {
        t.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_failing_steps_ids_are_told_from_the_scenarios_others() {
        let t = tags(&["FWD-2", "FWD-4", "C-20", "agent-gone"]);
        let e = "Then the send returns \"failed\" with reason \"stopped\"\nSPEC [C-20]: FWD-4 answered busy";
        assert_eq!(named(&t, e), vec!["FWD-4", "C-20"]);
        assert!(sentence("FWD-4", &t, e).starts_with("The failing step judges FWD-4, C-20."));
        assert!(sentence("FWD-2", &t, e).contains("not FWD-2"));
        assert_eq!(named(&tags(&["FWD-2"]), "FWD-20 broke"), Vec::<&str>::new());
        assert!(sentence("FWD-2", &t, "assertion failed").contains("names no requirement id"));
    }
}
