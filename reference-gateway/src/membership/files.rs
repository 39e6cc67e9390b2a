//! The files of SPEC §18 as the gateway names them: which variable each comes from, and the error
//! that says which file and which line is bad.
//!
//! MEM-1 asks a gateway that meets a file it cannot parse to keep its last good content and log an
//! ERROR naming the file and the line (CONTRACT §12: `line <N>` or `<path>:<N>`), and a gateway
//! started with such a file to refuse to start with the same words. Every parser of this module
//! reports a [`LineError`] (1-based line); [`FileError`] adds the variable and the path.
//!
//! The bytes of every trust file become text in one place, [`text`] (used by [`read`], [`load`]
//! and the reload): a UTF-8 byte order mark is dropped (editors on Windows write one), a byte that
//! is not UTF-8 is named by its line, and a binary KRL (`ssh-keygen -k` output, which begins with
//! `SSHKRL\n\0`) is refused saying that the gateway reads the KRL's text specification.

use std::path::Path;

/// One of the files the gateway reads and, while it runs, re-reads (MEM-1, MEM-3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TrustFile {
    /// `FLEET_PEERS_FILE`: host → pinned key(s) (SPEC §3.1, MEM-1).
    Peers,
    /// `FLEET_TRUST_CA_FILE`: the fleet's CA keys (MEM-2).
    TrustCa,
    /// `FLEET_REVOKED_FILE`: the KRL specification (MEM-4).
    Revoked,
    /// `FLEET_SIGNING_KEY_FILE`: this gateway's key (MEM-3).
    SigningKey,
    /// `FLEET_HOST_CERT_FILE`: this gateway's host certificate (MEM-2, MEM-3).
    HostCert,
}

impl TrustFile {
    /// The environment variable that names the file (also the metric's `file` label).
    pub fn var(self) -> &'static str {
        match self {
            TrustFile::Peers => "FLEET_PEERS_FILE",
            TrustFile::TrustCa => "FLEET_TRUST_CA_FILE",
            TrustFile::Revoked => "FLEET_REVOKED_FILE",
            TrustFile::SigningKey => "FLEET_SIGNING_KEY_FILE",
            TrustFile::HostCert => "FLEET_HOST_CERT_FILE",
        }
    }
}

/// A parse failure at a 1-based line of a file's text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct LineError {
    pub line: usize,
    pub reason: String,
}

impl LineError {
    pub fn new(line: usize, reason: impl Into<String>) -> LineError {
        LineError {
            line,
            reason: reason.into(),
        }
    }
}

/// A file that cannot be applied, in words that name it (variable and path) and its first bad line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    #[error("{var} {path}: cannot read it: {reason}")]
    Read {
        var: &'static str,
        path: String,
        reason: String,
    },
    #[error("{var} {path}: line {line}: {reason}")]
    Invalid {
        var: &'static str,
        path: String,
        line: usize,
        reason: String,
    },
}

impl FileError {
    pub fn at(file: TrustFile, path: &Path, e: LineError) -> FileError {
        FileError::Invalid {
            var: file.var(),
            path: path.display().to_string(),
            line: e.line,
            reason: e.reason,
        }
    }
}

/// The magic bytes a binary KRL begins with (OpenSSH's PROTOCOL.krl).
pub const BINARY_KRL_MAGIC: &[u8] = b"SSHKRL\n\0";

/// The UTF-8 byte order mark.
const BOM: &str = "\u{feff}";

/// A trust file's bytes as text: a leading UTF-8 byte order mark dropped; not UTF-8, or a binary
/// KRL, is an error at the line where it shows.
pub fn text(file: TrustFile, bytes: &[u8]) -> Result<&str, LineError> {
    if bytes.starts_with(BINARY_KRL_MAGIC) {
        let what = "this is a binary KRL (the output of ssh-keygen -k, beginning with SSHKRL)";
        return Err(LineError::new(
            1,
            match file {
                TrustFile::Revoked => format!(
                    "{what}; the gateway reads the KRL's text specification, the file ssh-keygen -k \
                     compiles from (serial:, id:, key:, hash: lines)"
                ),
                other => format!("{what}, not a {} file", other.var()),
            },
        ));
    }
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let good = &bytes[..e.valid_up_to()];
        let line = good.iter().filter(|b| **b == b'\n').count() + 1;
        LineError::new(
            line,
            format!(
                "not UTF-8 text (byte {:#04x} at offset {})",
                bytes[e.valid_up_to()],
                e.valid_up_to()
            ),
        )
    })?;
    Ok(text.strip_prefix(BOM).unwrap_or(text))
}

/// Reads `path` (named by `file`'s variable) as text ([`text`]: BOM dropped, UTF-8 or the line
/// that is not).
pub fn read(file: TrustFile, path: &Path) -> Result<String, FileError> {
    let bytes = std::fs::read(path).map_err(|e| FileError::Read {
        var: file.var(),
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    text(file, &bytes)
        .map(str::to_string)
        .map_err(|e| FileError::at(file, path, e))
}

/// Reads and parses `path` with `parse`, naming the file in any error.
pub fn load<T>(file: TrustFile, path: &Path, parse: impl FnOnce(&str) -> Result<T, LineError>) -> Result<T, FileError> {
    let text = read(file, path)?;
    parse(&text).map_err(|e| FileError::at(file, path, e))
}

/// The 1-based line of byte `offset` in `text`.
pub fn line_at(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end].iter().filter(|b| **b == b'\n').count() + 1
}

/// The lines of a line-based file (CA keys, KRL specification): 1-based number and the text
/// without surrounding whitespace, blank lines and `#` comment lines left out.
pub fn meaningful_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_counted_from_one() {
        let t = "a\nb\nc";
        assert_eq!(line_at(t, 0), 1);
        assert_eq!(line_at(t, 2), 2);
        assert_eq!(line_at(t, 4), 3);
        assert_eq!(line_at(t, 99), 3);
        let got: Vec<_> = meaningful_lines("# c\n\n  x  \n#y\nz").collect();
        assert_eq!(got, vec![(3, "x"), (5, "z")]);
    }

    #[test]
    fn a_byte_order_mark_is_dropped_in_every_file() {
        for file in [TrustFile::Peers, TrustFile::TrustCa, TrustFile::Revoked] {
            assert_eq!(text(file, "\u{feff}serial: 1\n".as_bytes()), Ok("serial: 1\n"));
            assert_eq!(text(file, b"serial: 1\n"), Ok("serial: 1\n"));
        }
    }

    #[test]
    fn a_byte_that_is_not_utf8_is_named_by_its_line() {
        let e = text(TrustFile::TrustCa, b"# ok\nssh-ed25519 AAAA\n# caf\xe9\n").expect_err("latin-1");
        assert_eq!(e.line, 3, "{e}");
        assert!(e.reason.contains("not UTF-8") && e.reason.contains("0xe9"), "{e}");
        let e = text(TrustFile::Peers, b"\xff").expect_err("binary");
        assert_eq!(e.line, 1);
    }

    #[test]
    fn a_binary_krl_is_refused_saying_so() {
        let path = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/membership/revoked.krl"
        ));
        let e = read(TrustFile::Revoked, path).expect_err("binary");
        let words = e.to_string();
        assert!(
            words.starts_with("FLEET_REVOKED_FILE ")
                && words.contains("revoked.krl")
                && words.contains("binary KRL")
                && words.contains("text specification"),
            "{words}"
        );
    }

    #[test]
    fn a_file_error_names_variable_path_and_line() {
        let e = FileError::at(TrustFile::Peers, Path::new("/etc/p.toml"), LineError::new(4, "bad"));
        assert_eq!(e.to_string(), "FLEET_PEERS_FILE /etc/p.toml: line 4: bad");
    }
}
