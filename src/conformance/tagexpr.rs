//! Cucumber tag expressions (`@smoke and not (@crash or @cap-stop)`), evaluated by the runner.
//!
//! The runner has to know which scenarios a `--tags` expression selects *before* cucumber runs, to
//! tell a requirement that was left out on purpose ("not selected") from one whose scenarios were
//! selected and never reported. Same grammar and precedence as cucumber's: `not` binds tighter
//! than `and`, `and` tighter than `or`; parentheses group; tags may be written with or without `@`.

use std::fmt;

/// A tag expression that does not parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("tag expression {expr:?}: {reason}")]
pub struct TagExprError {
    pub expr: String,
    pub reason: String,
}

/// A parsed tag expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TagExpr {
    Tag(String),
    Not(Box<TagExpr>),
    And(Box<TagExpr>, Box<TagExpr>),
    Or(Box<TagExpr>, Box<TagExpr>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Open,
    Close,
    And,
    Or,
    Not,
    Tag(String),
}

fn tokenize(s: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut Vec<Token>| {
        if word.is_empty() {
            return;
        }
        out.push(match word.as_str() {
            "and" => Token::And,
            "or" => Token::Or,
            "not" => Token::Not,
            w => Token::Tag(w.trim_start_matches('@').to_string()),
        });
        word.clear();
    };
    for c in s.chars() {
        match c {
            '(' | ')' => {
                flush(&mut word, &mut out);
                out.push(if c == '(' { Token::Open } else { Token::Close });
            }
            c if c.is_whitespace() => flush(&mut word, &mut out),
            c => word.push(c),
        }
    }
    flush(&mut word, &mut out);
    out
}

struct Parser<'a> {
    tokens: &'a [Token],
    pos: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    fn or(&mut self) -> Result<TagExpr, String> {
        let mut left = self.and()?;
        while self.peek() == Some(&Token::Or) {
            self.pos += 1;
            left = TagExpr::Or(Box::new(left), Box::new(self.and()?));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<TagExpr, String> {
        let mut left = self.not()?;
        while self.peek() == Some(&Token::And) {
            self.pos += 1;
            left = TagExpr::And(Box::new(left), Box::new(self.not()?));
        }
        Ok(left)
    }

    fn not(&mut self) -> Result<TagExpr, String> {
        match self.next() {
            Some(Token::Not) => Ok(TagExpr::Not(Box::new(self.not()?))),
            Some(Token::Open) => {
                let inner = self.or()?;
                match self.next() {
                    Some(Token::Close) => Ok(inner),
                    _ => Err("a '(' is not closed".into()),
                }
            }
            Some(Token::Tag(t)) if !t.is_empty() => Ok(TagExpr::Tag(t)),
            Some(t) => Err(format!("expected a tag, 'not' or '(', found {t:?}")),
            None => Err("the expression ends where a tag was expected".into()),
        }
    }
}

impl TagExpr {
    /// Parses an expression such as `@smoke and not @crash`.
    pub fn parse(s: &str) -> Result<TagExpr, TagExprError> {
        let tokens = tokenize(s);
        let err = |reason: String| TagExprError {
            expr: s.to_string(),
            reason,
        };
        let mut p = Parser {
            tokens: &tokens,
            pos: 0,
        };
        let e = p.or().map_err(err)?;
        if p.pos != tokens.len() {
            return Err(err(format!("unexpected {:?}", tokens[p.pos])));
        }
        Ok(e)
    }

    /// True when a scenario with these tags (without `@`) is selected.
    pub fn matches<S: AsRef<str>>(&self, tags: &[S]) -> bool {
        match self {
            TagExpr::Tag(t) => tags.iter().any(|x| x.as_ref() == t),
            TagExpr::Not(e) => !e.matches(tags),
            TagExpr::And(a, b) => a.matches(tags) && b.matches(tags),
            TagExpr::Or(a, b) => a.matches(tags) || b.matches(tags),
        }
    }
}

impl fmt::Display for TagExpr {
    /// Fully parenthesised, in cucumber's syntax.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TagExpr::Tag(t) => write!(f, "@{t}"),
            TagExpr::Not(e) => write!(f, "not {e}"),
            TagExpr::And(a, b) => write!(f, "({a} and {b})"),
            TagExpr::Or(a, b) => write!(f, "({a} or {b})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("@smoke", &["smoke"], true)]
    #[case("smoke", &["smoke"], true)]
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
    fn rejects_broken_expressions(#[case] expr: &str) {
        assert!(TagExpr::parse(expr).is_err(), "{expr:?} should not parse");
    }
}
