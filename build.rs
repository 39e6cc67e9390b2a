//! Packs what the suite reads at run time — `features/`, `fixtures/`, the published documents and
//! the official-SDK client script — into the `fleet-conformance` binary, so an installed binary or
//! the runner image judges a gateway from any directory, with no checkout beside it
//! (`src/conformance/embedded.rs` unpacks them to a cache on first use).
//!
//! Writes `$OUT_DIR/embedded_files.rs`: a table of `(relative path, include_bytes!)` and a digest of
//! every path and byte, which names the cache directory (a changed feature file is a new directory,
//! never a stale one).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Directories packed whole, relative to the package root.
const DIRS: &[&str] = &["features", "fixtures"];
/// Single files packed.
const FILES: &[&str] = &[
    "docs/SPEC.md",
    "docs/CONTRACT.md",
    "docs/HERDR.md",
    "docs/RUNNER.md",
    "scripts/mcp-python-client.py",
    // Operator tools some scenarios run as an operator would (security, cluster conversion).
    "scripts/provision-broker",
    "scripts/convert-inboxes",
];

fn walk(root: &Path, rel: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(root.join(rel))?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = rel.join(e.file_name());
        if e.file_type()?.is_dir() {
            walk(root, &name, out)?;
        } else {
            out.push(name);
        }
    }
    Ok(())
}

/// FNV-1a, 64 bits: stable across toolchains (std's hasher is not), enough to name a cache entry.
fn fnv(hash: &mut u64, bytes: &[u8]) {
    for b in bytes {
        *hash ^= u64::from(*b);
        *hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
}

fn main() -> std::io::Result<()> {
    let root = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").ok_or_else(|| std::io::Error::other("CARGO_MANIFEST_DIR is not set"))?,
    );
    let mut files = Vec::new();
    for d in DIRS {
        println!("cargo:rerun-if-changed={d}");
        walk(&root, Path::new(d), &mut files)?;
    }
    for f in FILES {
        println!("cargo:rerun-if-changed={f}");
        files.push(PathBuf::from(f));
    }
    let mut hash = 0xcbf2_9ce4_8422_2325_u64;
    let mut table = String::from("/// Every packed file: its path under the suite root, and its bytes.\n");
    table.push_str("pub static FILES: &[(&str, &[u8])] = &[\n");
    for rel in &files {
        let abs = root.join(rel);
        let rel_text = rel.to_string_lossy().replace('\\', "/");
        fnv(&mut hash, rel_text.as_bytes());
        fnv(&mut hash, &std::fs::read(&abs)?);
        let _ = writeln!(
            table,
            "    ({rel_text:?}, include_bytes!({:?})),",
            abs.display().to_string()
        );
    }
    table.push_str("];\n");
    let _ = writeln!(
        table,
        "/// Names the cache directory the files are unpacked to.\npub const DIGEST: &str = \"{hash:016x}\";"
    );
    let out = PathBuf::from(std::env::var_os("OUT_DIR").ok_or_else(|| std::io::Error::other("OUT_DIR is not set"))?);
    std::fs::write(out.join("embedded_files.rs"), table)
}
