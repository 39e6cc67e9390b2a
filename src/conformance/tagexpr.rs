//! Cucumber tag expressions (`@smoke and not (@crash or @cap-stop)`), evaluated by the runner.
//!
//! The runner has to know which scenarios a `--tags` expression selects *before* cucumber runs, to
//! tell a requirement that was left out on purpose ("not selected") from one whose scenarios were
//! selected and never reported. That is only right if the expression is read exactly as cucumber
//! reads it, so it is parsed by the same parser cucumber uses (the `gherkin` crate's
//! `TagOperation`: `not` binds tighter than `and`, `and` tighter than `or`, parentheses group,
//! every tag starts with `@`, `\` escapes) and evaluated as cucumber's `tag::Ext::eval` does.

use std::fmt;

use gherkin::tagexpr::TagOperation;

/// A tag expression that does not parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("tag expression {expr:?}: {reason}")]
pub struct TagExprError {
    pub expr: String,
    pub reason: String,
}

/// A parsed tag expression.
#[derive(Debug, Clone)]
pub struct TagExpr(TagOperation);

impl PartialEq for TagExpr {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

impl TagExpr {
    /// Parses an expression such as `@smoke and not @crash`.
    pub fn parse(s: &str) -> Result<TagExpr, TagExprError> {
        s.parse::<TagOperation>().map(TagExpr).map_err(|e| TagExprError {
            expr: s.to_string(),
            reason: e.to_string(),
        })
    }

    /// True when a scenario with these tags (without `@`) is selected.
    pub fn matches<S: AsRef<str>>(&self, tags: &[S]) -> bool {
        fn eval<S: AsRef<str>>(op: &TagOperation, tags: &[S]) -> bool {
            match op {
                TagOperation::Tag(t) => tags.iter().any(|x| x.as_ref() == t),
                TagOperation::Not(e) => !eval(e, tags),
                TagOperation::And(a, b) => eval(a, tags) && eval(b, tags),
                TagOperation::Or(a, b) => eval(a, tags) || eval(b, tags),
            }
        }
        eval(&self.0, tags)
    }
}

impl fmt::Display for TagExpr {
    /// Fully parenthesised, in cucumber's syntax.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn show(op: &TagOperation, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            match op {
                TagOperation::Tag(t) => write!(f, "@{t}"),
                TagOperation::Not(e) => {
                    write!(f, "not ")?;
                    show(e, f)
                }
                TagOperation::And(a, b) => both(a, "and", b, f),
                TagOperation::Or(a, b) => both(a, "or", b, f),
            }
        }
        fn both(a: &TagOperation, op: &str, b: &TagOperation, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "(")?;
            show(a, f)?;
            write!(f, " {op} ")?;
            show(b, f)?;
            write!(f, ")")
        }
        show(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("@smoke", &["smoke"], true)]
    #[case("@smoke", &["crash"], false)]
    #[case("not @crash", &["smoke"], true)]
    #[case("@a and not @b", &["a", "b"], false)]
    #[case("not @a and not @b or @c", &["a", "c"], true)]
    #[case("not (@a or @b) and (@c or not @d)", &["c"], true)]
    #[case("not (@a or @b) and (@c or not @d)", &["b", "c"], false)]
    #[case("@FWD-1 or @cap-stop", &["cap-stop"], true)]
    fn evaluates_like_cucumber(#[case] expr: &str, #[case] tags: &[&str], #[case] want: bool) {
        let e = TagExpr::parse(expr).expect("parses");
        assert_eq!(e.matches(tags), want, "{expr} on {tags:?}");
        // The display form parses back to the same tree.
        assert_eq!(TagExpr::parse(&e.to_string()).expect("reparses"), e);
    }

    #[rstest]
    #[case("")]
    #[case("@a and")]
    #[case("(@a or @b")]
    #[case("@a @b")]
    #[case("@a or )")]
    // cucumber's parser wants every tag written with its `@`.
    #[case("smoke")]
    fn rejects_broken_expressions(#[case] expr: &str) {
        assert!(TagExpr::parse(expr).is_err(), "{expr:?} should not parse");
    }
}
