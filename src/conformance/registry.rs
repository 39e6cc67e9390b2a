//! The requirement registry (`fixtures/requirements.toml`): every requirement id of the spec with
//! its level, section and a one-line text, plus the optional capabilities a gateway may declare.
//!
//! The verdict is computed over this list, not over whatever tags the features happen to carry, so
//! a requirement no scenario exercised shows up as "not tested" instead of vanishing. The unit
//! tests at the bottom keep the registry, `docs/SPEC.md` and `features/` in agreement.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The registry cannot be read or is inconsistent in itself.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("reading {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Toml {
        path: String,
        #[source]
        source: Box<toml::de::Error>,
    },
    #[error("{path}: {reason}")]
    Invalid { path: String, reason: String },
}

/// RFC 2119 level of a requirement or capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Level {
    #[serde(rename = "MUST")]
    Must,
    #[serde(rename = "SHOULD")]
    Should,
    #[serde(rename = "MAY")]
    May,
    /// A statement of the trust model, not a testable requirement (SPEC [C-11] names SEC-3): no
    /// scenario judges it, and its cell always says so.
    #[serde(rename = "STATEMENT")]
    Statement,
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Level::Must => "MUST",
            Level::Should => "SHOULD",
            Level::May => "MAY",
            Level::Statement => "STATEMENT",
        })
    }
}

/// One requirement of the spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Requirement {
    pub id: String,
    pub level: Level,
    pub section: String,
    pub text: String,
    /// The part an implementation may leave out, if any (see [`Capability`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optional: Option<String>,
    /// Why no scenario judges this requirement yet (only an optional one may be pending): the
    /// runner shows it "not tested" with this reason instead of failing the registry's own check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<String>,
}

impl Requirement {
    /// Whether the whole requirement belongs to an optional capability (SPEC §16, §17: a MUST of
    /// a section only a gateway that declares the capability is judged on).
    pub fn wholly_optional(&self) -> bool {
        self.optional
            .as_deref()
            .is_some_and(|o| o.starts_with("the whole requirement"))
    }
}

/// An optional part of the protocol; scenarios needing it carry `@<tag>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capability {
    pub name: String,
    pub tag: String,
    pub level: Level,
    pub requirements: Vec<String>,
    pub text: String,
}

/// The whole registry, in spec order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Registry {
    #[serde(rename = "requirement")]
    pub requirements: Vec<Requirement>,
    #[serde(rename = "capability", default)]
    pub capabilities: Vec<Capability>,
    /// Checks CONTRACT §10 lists as still under review: their failures are reported, never
    /// counted against the gateway (`super::review`).
    #[serde(rename = "under-review", default)]
    pub under_review: Vec<super::review::UnderReview>,
}

/// `fixtures/requirements.toml` of this checkout.
pub fn default_path() -> PathBuf {
    crate::conformance::suite_root()
        .join("fixtures")
        .join("requirements.toml")
}

impl Registry {
    /// Reads and checks a registry file.
    pub fn load(path: &Path) -> Result<Registry, RegistryError> {
        let text = std::fs::read_to_string(path).map_err(|source| RegistryError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Registry::parse(&path.display().to_string(), &text)
    }

    /// Parses and checks registry text; `origin` names it in errors.
    pub fn parse(origin: &str, text: &str) -> Result<Registry, RegistryError> {
        let reg: Registry = toml::from_str(text).map_err(|e| RegistryError::Toml {
            path: origin.to_string(),
            source: Box::new(e),
        })?;
        let invalid = |reason: String| RegistryError::Invalid {
            path: origin.to_string(),
            reason,
        };
        let mut seen = std::collections::BTreeSet::new();
        for r in &reg.requirements {
            if !crate::report::is_requirement(&r.id) {
                return Err(invalid(format!("{:?} is not a requirement id (like FWD-1)", r.id)));
            }
            if !seen.insert(r.id.as_str()) {
                return Err(invalid(format!("{} is listed twice", r.id)));
            }
        }
        for c in &reg.capabilities {
            if !c.tag.starts_with("cap-") {
                return Err(invalid(format!("capability {}: its tag must start with cap-", c.name)));
            }
            if let Some(unknown) = c.requirements.iter().find(|id| reg.get(id).is_none()) {
                return Err(invalid(format!(
                    "capability {} names unknown requirement {unknown}",
                    c.name
                )));
            }
        }
        if let Some(e) = reg.under_review.iter().find(|e| e.tag.is_none() && e.step.is_none()) {
            return Err(invalid(format!(
                "an [[under-review]] entry names neither a tag nor a step: {:?}",
                e.reason
            )));
        }
        Ok(reg)
    }

    /// The entry under review that covers the failed scenario `s`, if any.
    pub fn under_review_of(&self, s: &super::results::ScenarioResult) -> Option<&super::review::UnderReview> {
        self.under_review.iter().find(|e| e.covers(s))
    }

    pub fn get(&self, id: &str) -> Option<&Requirement> {
        self.requirements.iter().find(|r| r.id == id)
    }

    pub fn capability(&self, name: &str) -> Option<&Capability> {
        self.capabilities.iter().find(|c| c.name == name)
    }

    /// The capability whose scenario tag this is (`cap-stop`).
    pub fn capability_by_tag(&self, tag: &str) -> Option<&Capability> {
        self.capabilities.iter().find(|c| c.tag == tag)
    }
}

/// A requirement as `docs/SPEC.md` states it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecRequirement {
    pub id: String,
    /// The `## ` heading it sits under, without the hashes.
    pub section: String,
    /// The whole list item, joined into one line.
    pub text: String,
}

/// Every `- **XXX-n** …` list item of the spec, in order.
pub fn spec_requirements(spec: &str) -> Vec<SpecRequirement> {
    let mut out: Vec<SpecRequirement> = Vec::new();
    let mut section = String::new();
    let mut open = false;
    for line in spec.lines() {
        if let Some(h) = line.strip_prefix("## ") {
            section = h.trim().to_string();
            open = false;
            continue;
        }
        let item = line.strip_prefix("- **").and_then(|r| r.split_once("**"));
        match item {
            Some((id, rest)) if crate::report::is_requirement(id) => {
                out.push(SpecRequirement {
                    id: id.to_string(),
                    section: section.clone(),
                    text: rest.trim().to_string(),
                });
                open = true;
            }
            _ if open && line.starts_with("  ") && !line.trim().is_empty() => {
                if let Some(last) = out.last_mut() {
                    last.text.push(' ');
                    last.text.push_str(line.trim());
                }
            }
            _ => open = false,
        }
    }
    out
}

/// The RFC 2119 keywords a text uses (as whole upper-case words).
pub fn keywords(text: &str) -> Vec<Level> {
    let words: Vec<&str> = text.split(|c: char| !c.is_ascii_alphabetic()).collect();
    [("MUST", Level::Must), ("SHOULD", Level::Should), ("MAY", Level::May)]
        .into_iter()
        .filter(|(w, _)| words.contains(w))
        .map(|(_, l)| l)
        .collect()
}

/// Why a registry level does not fit the spec's words, if it does not. A text without keywords is
/// normative (MUST); a SHOULD or MAY level needs that word; a text whose only keyword is SHOULD
/// cannot be a MUST.
pub fn level_mismatch(level: Level, spec_text: &str) -> Option<String> {
    let kw = keywords(spec_text);
    match level {
        Level::Should | Level::May if !kw.contains(&level) => Some(format!("the spec text has no {level}")),
        Level::Must if kw == [Level::Should] => Some("the spec text only says SHOULD".into()),
        Level::Statement if !kw.is_empty() => Some("a statement has no RFC 2119 keyword".into()),
        _ => None,
    }
}

/// The registry of the verdict and input tests: two capabilities, four requirements.
#[cfg(test)]
pub(crate) fn test_registry() -> Registry {
    Registry::parse(
        "test",
        r#"
[[capability]]
name = "stop"
tag = "cap-stop"
level = "MAY"
requirements = ["SPN-5"]
text = "STOP"

[[capability]]
name = "submit-confirm"
tag = "cap-submit-confirm"
level = "SHOULD"
requirements = ["FWD-7"]
text = "submitted"

[[requirement]]
id = "FWD-1"
level = "MUST"
section = "5"
text = "ack before inject"

[[requirement]]
id = "FWD-7"
level = "SHOULD"
section = "5"
text = "submitted"

[[requirement]]
id = "SPN-5"
level = "MUST"
section = "9"
text = "stop"

[[requirement]]
id = "TOP-1"
level = "MUST"
section = "1"
text = "topology"
"#,
    )
    .expect("test registry")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::conformance::{catalogue, suite_root};

    fn registry() -> Registry {
        Registry::load(&default_path()).expect("fixtures/requirements.toml loads")
    }

    fn spec() -> String {
        std::fs::read_to_string(suite_root().join("docs").join("SPEC.md")).expect("docs/SPEC.md")
    }

    fn scenarios() -> Vec<catalogue::Scenario> {
        catalogue::load_dir(&suite_root().join("features")).expect("features/ parse")
    }

    #[test]
    fn every_requirement_has_a_scenario() {
        let s = scenarios();
        let reg = registry();
        let missing: Vec<&str> = reg
            .requirements
            .iter()
            .filter(|r| r.level != Level::Statement && r.pending.is_none() && !s.iter().any(|x| x.has_tag(&r.id)))
            .map(|r| r.id.as_str())
            .collect();
        let stale: Vec<&str> = reg
            .requirements
            .iter()
            .filter(|r| r.pending.is_some() && s.iter().any(|x| x.has_tag(&r.id)))
            .map(|r| r.id.as_str())
            .collect();
        assert!(
            stale.is_empty(),
            "requirements marked pending although a scenario now carries their tag: {stale:?}"
        );
        let mandatory: Vec<&str> = reg
            .requirements
            .iter()
            .filter(|r| r.pending.is_some() && r.optional.is_none())
            .map(|r| r.id.as_str())
            .collect();
        assert!(
            mandatory.is_empty(),
            "only optional requirements may be pending: {mandatory:?}"
        );
        let judged: Vec<&str> = reg
            .requirements
            .iter()
            .filter(|r| r.level == Level::Statement && s.iter().any(|x| x.has_tag(&r.id)))
            .map(|r| r.id.as_str())
            .collect();
        assert!(
            judged.is_empty(),
            "statements (not testable) tagged on a scenario: {judged:?}"
        );
        assert!(
            missing.is_empty(),
            "requirements with no scenario tagged for them: {missing:?}"
        );
    }

    #[test]
    fn every_scenario_tag_names_a_known_requirement_or_capability() {
        let reg = registry();
        let mut unknown = BTreeSet::new();
        for s in scenarios() {
            for t in &s.tags {
                let known = if crate::report::is_requirement(t) {
                    reg.get(t).is_some()
                } else if t.starts_with("cap-") {
                    reg.capability_by_tag(t).is_some()
                } else {
                    true
                };
                if !known {
                    unknown.insert(format!("@{t} ({}:{})", s.file, s.line));
                }
            }
        }
        assert!(unknown.is_empty(), "tags naming nothing in the registry: {unknown:?}");
    }

    #[test]
    fn every_capability_gates_a_scenario_of_its_requirements() {
        let s = scenarios();
        for c in &registry().capabilities {
            let gated: Vec<_> = s.iter().filter(|x| x.has_tag(&c.tag)).collect();
            assert!(!gated.is_empty(), "no scenario carries @{}", c.tag);
            for x in gated {
                assert!(
                    c.requirements.iter().any(|r| x.has_tag(r)),
                    "{}:{} carries @{} but none of {:?}",
                    x.file,
                    x.line,
                    c.tag,
                    c.requirements
                );
            }
        }
    }

    #[test]
    fn no_must_hides_behind_a_capability() {
        // Leaving a capability undeclared skips its scenarios; a MUST must still be checked.
        let s = scenarios();
        let reg = registry();
        let hidden: Vec<&str> = reg
            .requirements
            .iter()
            .filter(|r| r.level == Level::Must && !r.wholly_optional())
            .filter(|r| {
                !s.iter()
                    .any(|x| x.has_tag(&r.id) && !x.tags.iter().any(|t| t.starts_with("cap-")))
            })
            .map(|r| r.id.as_str())
            .collect();
        assert!(
            hidden.is_empty(),
            "MUSTs checked only by capability-gated scenarios: {hidden:?}"
        );
    }

    #[test]
    fn registry_and_spec_list_the_same_requirements_in_order() {
        let spec: Vec<String> = spec_requirements(&spec()).into_iter().map(|r| r.id).collect();
        let reg: Vec<String> = registry().requirements.into_iter().map(|r| r.id).collect();
        assert_eq!(reg, spec, "fixtures/requirements.toml and docs/SPEC.md disagree");
    }

    #[test]
    fn registry_sections_and_levels_agree_with_the_spec() {
        let reg = registry();
        for s in spec_requirements(&spec()) {
            let r = reg.get(&s.id).expect("same ids");
            assert_eq!(r.section, s.section, "{}: section", s.id);
            assert_eq!(
                level_mismatch(r.level, &s.text),
                None,
                "{} is {} in the registry: {}",
                s.id,
                r.level,
                s.text
            );
            assert!(
                !r.text.is_empty() && !r.text.contains('\n'),
                "{}: one line of text",
                s.id
            );
        }
        // The levels the spec's wording forces.
        assert_eq!(reg.get("FWD-7").map(|r| r.level), Some(Level::Should));
        let delay = reg.capability("delay").expect("bridge.delay is a capability");
        assert_eq!(
            (delay.level, delay.requirements.as_slice()),
            (Level::May, &["TOP-1".to_string()][..])
        );
    }

    #[test]
    fn docs_spec_is_the_shared_spec() {
        // The spec lives beside the repository (../shared/SPEC.md); docs/SPEC.md is the copy the
        // suite checks. When the shared one moves on, copy it and update the registry.
        let shared = suite_root().join("..").join("shared").join("SPEC.md");
        if let Ok(text) = std::fs::read_to_string(&shared) {
            assert!(
                text == spec(),
                "docs/SPEC.md differs from {}: copy it over",
                shared.display()
            );
        }
    }

    #[test]
    fn levels_follow_the_words() {
        assert_eq!(level_mismatch(Level::Must, "A gateway MUST do it; it MAY also"), None);
        assert_eq!(level_mismatch(Level::Must, "acks before injecting"), None);
        assert!(level_mismatch(Level::Must, "INJECTED SHOULD mean submitted").is_some());
        assert!(level_mismatch(Level::May, "it MUST").is_some());
        assert_eq!(level_mismatch(Level::Should, "it SHOULD"), None);
        assert_eq!(keywords("MUSTARD may"), Vec::<Level>::new());
    }

    #[test]
    fn rejects_duplicates_and_bad_capabilities() {
        let req = "[[requirement]]\nid = \"FWD-1\"\nlevel = \"MUST\"\nsection = \"s\"\ntext = \"t\"\n";
        assert!(Registry::parse("x", req).is_ok());
        assert!(Registry::parse("x", &format!("{req}{req}")).is_err());
        let cap = "[[capability]]\nname = \"stop\"\ntag = \"cap-stop\"\nlevel = \"MAY\"\nrequirements = [\"SPN-5\"]\ntext = \"t\"\n";
        let err = Registry::parse("x", &format!("{req}{cap}")).expect_err("SPN-5 is unknown");
        assert!(err.to_string().contains("SPN-5"), "{err}");
        assert!(
            Registry::parse(
                "x",
                "[[requirement]]\nid = \"FWD-1\"\nlevel = \"OUGHT\"\nsection = \"s\"\ntext = \"t\"\n"
            )
            .is_err()
        );
    }
}
