//! The scenario catalogue: every scenario of `features/` with its tags, read without running it.
//!
//! `fleet-conformance list` prints it, the verdict uses it to tell "not selected" from "selected
//! but never reported", and unit tests check it against the requirement registry. A small reader
//! of the Gherkin subset the suite uses (tags, Feature, Rule, Background, Scenario, Scenario
//! Outline with tagged Examples, tables, doc strings) keeps the non-e2e build free of cucumber.

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
    #[error("{file}:{line}: {reason}")]
    Syntax { file: String, line: usize, reason: String },
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

fn tags_of(line: &str) -> Vec<String> {
    let line = line.split(" #").next().unwrap_or_default();
    line.split_whitespace()
        .filter_map(|t| t.strip_prefix('@'))
        .map(str::to_string)
        .collect()
}

fn merge(feature: &[String], rule: &[String], own: Vec<String>) -> Vec<String> {
    let mut t: Vec<String> = feature.iter().chain(rule).cloned().chain(own).collect();
    t.sort();
    t.dedup();
    t
}

fn keyword<'a>(line: &'a str, words: &[&str]) -> Option<&'a str> {
    words
        .iter()
        .find_map(|w| line.strip_prefix(w).and_then(|r| r.strip_prefix(':')))
        .map(str::trim)
}

/// Parses one feature file; `file` is the path cucumber reports (`features/x.feature`).
pub fn parse(file: &str, text: &str) -> Result<Vec<Scenario>, CatalogueError> {
    let mut out: Vec<Scenario> = Vec::new();
    let mut feature = String::new();
    let mut feature_tags: Vec<String> = Vec::new();
    let mut rule_tags: Vec<String> = Vec::new();
    let mut pending: Vec<String> = Vec::new();
    // The outline being read: (name, line, scenario tags).
    let mut outline: Option<(String, usize, Vec<String>)> = None;
    // Index into `out` of the examples block whose table is being read, and whether its header
    // row was seen.
    let mut examples: Option<(usize, bool)> = None;
    let mut docstring: Option<&str> = None;
    let syntax = |line: usize, reason: &str| CatalogueError::Syntax {
        file: file.to_string(),
        line,
        reason: reason.to_string(),
    };
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let line = raw.trim();
        if let Some(fence) = docstring {
            if line.starts_with(fence) {
                docstring = None;
            }
            continue;
        }
        if line.starts_with("\"\"\"") || line.starts_with("```") {
            docstring = Some(if line.starts_with("```") { "```" } else { "\"\"\"" });
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line.starts_with('@') {
            pending.extend(tags_of(line));
            continue;
        }
        if line.starts_with('|') {
            if let Some((idx, header_seen)) = examples.as_mut() {
                if *header_seen {
                    out[*idx].rows += 1;
                } else {
                    *header_seen = true;
                }
            }
            continue;
        }
        if let Some(name) = keyword(line, &["Feature", "Ability", "Business Need"]) {
            feature = name.to_string();
            feature_tags = std::mem::take(&mut pending);
            (rule_tags, outline, examples) = (Vec::new(), None, None);
        } else if keyword(line, &["Rule"]).is_some() {
            rule_tags = std::mem::take(&mut pending);
            (outline, examples) = (None, None);
        } else if keyword(line, &["Background"]).is_some() {
            pending.clear();
            (outline, examples) = (None, None);
        } else if let Some(name) = keyword(line, &["Scenario Outline", "Scenario Template"]) {
            outline = Some((name.to_string(), n, std::mem::take(&mut pending)));
            examples = None;
        } else if let Some(name) = keyword(line, &["Scenario", "Example"]) {
            let own = std::mem::take(&mut pending);
            out.push(Scenario {
                file: file.to_string(),
                feature: feature.clone(),
                name: name.to_string(),
                line: n,
                tags: merge(&feature_tags, &rule_tags, own),
                rows: 0,
            });
            (outline, examples) = (None, None);
        } else if let Some(title) = keyword(line, &["Examples", "Scenarios"]) {
            let (name, _, tags) = outline
                .as_ref()
                .ok_or_else(|| syntax(n, "Examples outside a Scenario Outline"))?;
            let mut own = tags.clone();
            own.extend(std::mem::take(&mut pending));
            out.push(Scenario {
                file: file.to_string(),
                feature: feature.clone(),
                name: if title.is_empty() {
                    name.clone()
                } else {
                    format!("{name} — {title}")
                },
                line: n,
                tags: merge(&feature_tags, &rule_tags, own),
                rows: 0,
            });
            examples = Some((out.len() - 1, false));
        } else if !pending.is_empty() {
            return Err(syntax(n, "tags must precede a Feature, Rule, Scenario or Examples"));
        }
    }
    if docstring.is_some() {
        return Err(syntax(text.lines().count(), "a doc string is not closed"));
    }
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
    fn reports_misplaced_examples() {
        let err = parse("f.feature", "Feature: x\n  Examples:\n").expect_err("must fail");
        assert!(err.to_string().contains("f.feature:2"), "{err}");
    }
}
