//! The scenario catalogue: every scenario of `features/` with its tags, read without running it.
//!
//! `fleet-conformance list` prints it, the verdict uses it to tell "not selected" from "selected
//! but never reported", and unit tests check it against the requirement registry. "Not selected"
//! is only right if features and tags are read exactly as cucumber reads them, so they are parsed
//! by the parser cucumber uses (the `gherkin` crate), without running anything.

use std::path::Path;

/// A feature file that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum CatalogueError {
    #[error("reading {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}: {reason}")]
    Syntax { file: String, reason: String },
}

/// One scenario, or one `Examples:` block of a scenario outline (its rows share tags).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Scenario {
    /// Path as cucumber reports it, e.g. `features/topology.feature`.
    pub file: String,
    pub feature: String,
    pub name: String,
    /// Line of `Scenario:`, or of `Examples:` for an outline's block.
    pub line: usize,
    /// Feature, rule, scenario and examples tags, without `@`, sorted, no duplicates.
    pub tags: Vec<String>,
    /// Rows of the examples block (0 for a plain scenario).
    pub rows: usize,
}

impl Scenario {
    /// Cucumber runs this many scenarios for the entry.
    pub fn runs(&self) -> usize {
        self.rows.max(1)
    }

    pub fn has_tag(&self, tag: &str) -> bool {
        self.tags.iter().any(|t| t == tag)
    }
}

fn merge(feature: &[String], rule: &[String], own: &[String]) -> Vec<String> {
    let mut t: Vec<String> = feature
        .iter()
        .chain(rule)
        .chain(own)
        .map(|t| t.trim_start_matches('@').to_string())
        .collect();
    t.sort();
    t.dedup();
    t
}

/// The entries of one scenario: itself, or one per `Examples:` block of an outline.
fn entries(file: &str, feature: &gherkin::Feature, rule_tags: &[String], sc: &gherkin::Scenario) -> Vec<Scenario> {
    if sc.examples.is_empty() {
        return vec![Scenario {
            file: file.to_string(),
            feature: feature.name.clone(),
            name: sc.name.clone(),
            line: sc.position.line,
            tags: merge(&feature.tags, rule_tags, &sc.tags),
            rows: 0,
        }];
    }
    sc.examples
        .iter()
        .map(|ex| {
            let own: Vec<String> = sc.tags.iter().chain(&ex.tags).cloned().collect();
            let title = ex.name.as_deref().map(str::trim).unwrap_or_default();
            Scenario {
                file: file.to_string(),
                feature: feature.name.clone(),
                name: if title.is_empty() {
                    sc.name.clone()
                } else {
                    format!("{} — {title}", sc.name)
                },
                line: ex.position.line,
                tags: merge(&feature.tags, rule_tags, &own),
                // The header row names the columns; cucumber runs one scenario per other row.
                rows: ex.table.as_ref().map_or(0, |t| t.rows.len().saturating_sub(1)),
            }
        })
        .collect()
}

/// Parses one feature file; `file` is the path cucumber reports (`features/x.feature`).
pub fn parse(file: &str, text: &str) -> Result<Vec<Scenario>, CatalogueError> {
    let feature =
        gherkin::Feature::parse(text, gherkin::GherkinEnv::default()).map_err(|e| CatalogueError::Syntax {
            file: file.to_string(),
            reason: e.to_string(),
        })?;
    let mut out = Vec::new();
    for sc in &feature.scenarios {
        out.extend(entries(file, &feature, &[], sc));
    }
    for rule in &feature.rules {
        for sc in &rule.scenarios {
            out.extend(entries(file, &feature, &rule.tags, sc));
        }
    }
    out.sort_by_key(|s| s.line);
    Ok(out)
}

/// Every scenario of every `*.feature` file under `dir`, files in name order. Paths are reported
/// as `<dir name>/<file>` (cucumber's form: `features/topology.feature`).
pub fn load_dir(dir: &Path) -> Result<Vec<Scenario>, CatalogueError> {
    let io = |source| CatalogueError::Io {
        path: dir.display().to_string(),
        source,
    };
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(io)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "feature"))
        .collect();
    files.sort();
    let prefix = dir
        .file_name()
        .map(|d| d.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut out = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).map_err(|source| CatalogueError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let name = path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        out.extend(parse(&format!("{prefix}/{name}"), &text)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"@forward
Feature: Forward path

  Background:
    Given a broker

  @FWD-1 @smoke
  Scenario: a brief lands once
    Given a doc string
      """
      @NOT-1 a tag inside a doc string
      Scenario: not a scenario
      """
    Then it lands

  @SIG-5
  Scenario Outline: <m> is rejected
    When the probe publishes "<m>"

    @ENV-2
    Examples: missing headers
      | m        |
      | no v     |
      | no kind  |

    @SIG-3 @FWD-6
    Examples:
      | m        |
      | a replay |
"#;

    #[test]
    fn reads_scenarios_outlines_and_their_tags() {
        let s = parse("features/f.feature", SAMPLE).expect("parses");
        assert_eq!(s.len(), 3, "{s:#?}");
        assert_eq!(s[0].name, "a brief lands once");
        assert_eq!(s[0].line, 8);
        assert_eq!(s[0].tags, ["FWD-1", "forward", "smoke"]);
        assert_eq!(s[0].runs(), 1);
        assert_eq!(s[1].name, "<m> is rejected — missing headers");
        assert_eq!(s[1].tags, ["ENV-2", "SIG-5", "forward"]);
        assert_eq!(s[1].rows, 2);
        assert_eq!(s[1].line, 21);
        assert_eq!(s[2].tags, ["FWD-6", "SIG-3", "SIG-5", "forward"]);
        assert_eq!(s[2].rows, 1);
        assert!(s.iter().all(|x| !x.has_tag("NOT-1")));
    }

    #[test]
    fn a_file_that_is_not_gherkin_is_an_error_naming_it() {
        let err = parse("f.feature", "Scenario: no feature\n  Given x\n").expect_err("must fail");
        assert!(err.to_string().contains("f.feature"), "{err}");
    }
}
