//! What a run leaves out whatever `--tags` selects: the soak run, and the scenarios of
//! capabilities the gateway under test did not declare.
//!
//! Exists because cucumber's `--tags` *replaces* the runner's own scenario filter, so a guard
//! written as a filter was lost the moment anyone selected anything (`--tags @FWD-1` started the
//! 25-minute soak, whose scenario carries `@FWD-1` too). The e2e runner (steps/main.rs) evaluates
//! the user's selection itself and then asks [`RunPolicy::admits`]; `fleet-conformance` judges
//! with the same rules.
//!
//! - `@soak` runs only with `FLEET_E2E_SOAK=1` (`scripts/soak`).
//! - `@cap-…` runs only when the gateway under test declares that capability, as
//!   `fleet-conformance run --capabilities` does: `FLEET_E2E_CAPABILITIES` is a comma list of
//!   capability names or the path of a capabilities file (`*.toml`). Unset, the reference gateway
//!   (no `FLEET_GATEWAY_CMD`) declares what `fixtures/reference-capabilities.toml` says, and any
//!   other gateway declares nothing.
//! - `@reference` runs only against the reference gateway (no `FLEET_GATEWAY_CMD`, or
//!   `FLEET_E2E_REFERENCE=1` for a build of it such as a seeded fault's): those
//!   scenarios read the reference's own surface (its metrics, its log text), which neither SPEC
//!   nor CONTRACT asks of another gateway ([C-11]), so they never fail another gateway's run.

use std::path::PathBuf;

use super::registry::Registry;
use super::verdict::{Capabilities, InputError};

/// `1` lets `@soak` scenarios run.
pub const SOAK_VAR: &str = "FLEET_E2E_SOAK";
/// The capabilities of the gateway under test (see the module doc).
pub const CAPABILITIES_VAR: &str = "FLEET_E2E_CAPABILITIES";
/// The tag of the soak run.
pub const SOAK_TAG: &str = "soak";
/// The tag of scenarios that read the reference gateway's own surface (see the module doc).
pub const REFERENCE_TAG: &str = "reference";

/// Says that `FLEET_GATEWAY_CMD` is a build of the reference gateway (`1`), e.g. one with a
/// seeded fault (`scripts/mutants`), so `@reference` scenarios run against it.
pub const REFERENCE_VAR: &str = "FLEET_E2E_REFERENCE";

/// Whether the gateway under test is the reference gateway: no `FLEET_GATEWAY_CMD`, or
/// [`REFERENCE_VAR`]`=1`.
pub fn reference_under_test() -> bool {
    std::env::var(REFERENCE_VAR).is_ok_and(|v| v.trim() == "1")
        || !std::env::var("FLEET_GATEWAY_CMD").is_ok_and(|c| !c.trim().is_empty())
}

/// Whether the soak run was asked for (`FLEET_E2E_SOAK=1`).
pub fn soak_requested() -> bool {
    std::env::var(SOAK_VAR).is_ok_and(|v| v.trim() == "1")
}

/// The reference gateway's declaration.
pub fn reference_capabilities_path() -> PathBuf {
    super::suite_root().join("fixtures").join("reference-capabilities.toml")
}

/// Reads a [`CAPABILITIES_VAR`] value: a capabilities file when it ends in `.toml`, else a comma
/// list of capability names (blank: none).
pub fn parse_capabilities(value: &str, registry: &Registry) -> Result<Capabilities, InputError> {
    let value = value.trim();
    if value.ends_with(".toml") {
        return Capabilities::load(std::path::Path::new(value), registry);
    }
    let names: Vec<String> = value
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|n| format!("{n:?}"))
        .collect();
    Capabilities::parse(
        CAPABILITIES_VAR,
        &format!("capabilities = [{}]", names.join(", ")),
        registry,
    )
}

/// The rules a run applies on top of the user's selection.
#[derive(Debug, Clone)]
pub struct RunPolicy {
    pub soak: bool,
    pub capabilities: Capabilities,
    /// Where the capabilities came from, for the run's log.
    pub origin: String,
    /// The gateway under test is the reference: `@reference` scenarios may run.
    pub reference: bool,
    excluded: Vec<String>,
}

impl RunPolicy {
    pub fn new(soak: bool, capabilities: Capabilities, origin: String, registry: &Registry) -> RunPolicy {
        let excluded = capabilities.excluded_tags(registry);
        RunPolicy {
            soak,
            capabilities,
            origin,
            reference: true,
            excluded,
        }
    }

    /// The same policy for a gateway that is (`true`) or is not the reference.
    pub fn with_reference(mut self, reference: bool) -> RunPolicy {
        self.reference = reference;
        self
    }

    /// The policy of this process's environment (see the module doc).
    pub fn from_env(registry: &Registry) -> Result<RunPolicy, InputError> {
        let (capabilities, origin) = match std::env::var(CAPABILITIES_VAR) {
            Ok(v) => (parse_capabilities(&v, registry)?, format!("{CAPABILITIES_VAR}={v:?}")),
            Err(_) if std::env::var("FLEET_GATEWAY_CMD").is_ok_and(|c| !c.trim().is_empty()) => (
                Capabilities::default(),
                format!("FLEET_GATEWAY_CMD is set and {CAPABILITIES_VAR} is not: none declared"),
            ),
            Err(_) => {
                let path = reference_capabilities_path();
                (
                    Capabilities::load(&path, registry)?,
                    format!("the reference gateway's {}", path.display()),
                )
            }
        };
        Ok(RunPolicy::new(soak_requested(), capabilities, origin, registry).with_reference(reference_under_test()))
    }

    /// Whether a scenario carrying `tags` (its feature's, rule's and own, without `@`) may run.
    pub fn admits<'a>(&self, tags: impl IntoIterator<Item = &'a str>) -> bool {
        tags.into_iter().all(|t| {
            (self.soak || t != SOAK_TAG)
                && (self.reference || t != REFERENCE_TAG)
                && !self.excluded.iter().any(|x| x == t)
        })
    }

    /// Tags whose scenarios this policy leaves out.
    pub fn excluded_tags(&self) -> Vec<String> {
        let mut out = self.excluded.clone();
        if !self.soak {
            out.push(SOAK_TAG.into());
        }
        if !self.reference {
            out.push(REFERENCE_TAG.into());
        }
        out
    }

    /// One line for the run's log.
    pub fn describe(&self) -> String {
        let declared: Vec<&str> = self.capabilities.declared.iter().map(String::as_str).collect();
        let left_out: Vec<String> = self.excluded_tags().iter().map(|t| format!("@{t}")).collect();
        format!(
            "capabilities declared: [{}] ({}); never run{}: {}",
            declared.join(", "),
            self.origin,
            if self.soak {
                ""
            } else {
                " (FLEET_E2E_SOAK=1 runs @soak)"
            },
            if left_out.is_empty() {
                "nothing".into()
            } else {
                left_out.join(" ")
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry() -> Registry {
        Registry::load(&super::super::registry::default_path()).expect("the registry loads")
    }

    #[test]
    fn soak_is_left_out_unless_asked_whatever_else_the_scenario_carries() {
        let reg = registry();
        let off = RunPolicy::new(false, Capabilities::all(&reg), "test".into(), &reg);
        assert!(!off.admits(["soak", "FWD-1"]));
        assert!(off.admits(["FWD-1", "smoke"]));
        let on = RunPolicy::new(true, Capabilities::all(&reg), "test".into(), &reg);
        assert!(on.admits(["soak", "FWD-1"]));
    }

    #[test]
    fn reference_scenarios_run_only_against_the_reference() {
        let reg = registry();
        let other = RunPolicy::new(false, Capabilities::all(&reg), "test".into(), &reg).with_reference(false);
        assert!(!other.admits(["reference", "operations"]));
        assert!(other.admits(["FWD-4", "operations"]));
        assert!(other.excluded_tags().contains(&REFERENCE_TAG.to_string()));
        let reference = other.with_reference(true);
        assert!(reference.admits(["reference", "operations"]));
    }

    #[test]
    fn undeclared_capabilities_are_left_out() {
        let reg = registry();
        let caps = parse_capabilities(" stop ,", &reg).expect("valid");
        let p = RunPolicy::new(false, caps, "test".into(), &reg);
        assert!(p.admits(["SPN-5", "cap-stop"]));
        assert!(!p.admits(["TOP-1", "cap-delay"]));
        assert!(p.excluded_tags().contains(&"cap-submit-confirm".to_string()));
        let none = parse_capabilities("", &reg).expect("blank is none");
        assert!(none.declared.is_empty());
        assert!(parse_capabilities("teleport", &reg).is_err());
    }

    #[test]
    fn the_reference_declaration_is_a_file_of_known_capabilities() {
        let reg = registry();
        let path = reference_capabilities_path();
        let caps = parse_capabilities(&path.display().to_string(), &reg).expect("loads");
        assert_eq!(caps, Capabilities::load(&path, &reg).expect("loads"));
        assert!(!caps.declared.is_empty());
    }
}
