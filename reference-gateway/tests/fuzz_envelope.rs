//! A fuzz test of envelope parsing and verification (SPEC §2–3), with proptest: a fixed number
//! of cases (`cargo test`) or a time budget (`scripts/fuzz SECONDS`).
//!
//! Why this exists: the envelope is the gateway's attack surface — every header comes from the
//! network. Two properties are checked, on random header tables and on mutants of the published
//! vectors: (1) parsing and every check never panic, whatever the header types and bytes;
//! (2) no malleability: a mutated message that still parses and verifies must carry exactly the
//! signed header values and body of the original (an absent optional header and an empty one are
//! the same value). A failure shrinks to a minimal case, is saved beside this file
//! (`fuzz_envelope.proptest-regressions`, replayed first on every later run) and names its seed.
//! Knobs: `FLEET_FUZZ_ITERS` (cases per property, default 400), `FLEET_FUZZ_SECS` (a time budget
//! instead), `FLEET_FUZZ_SEED` (the RNG seed, for a replay).

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use fleet_gateway::envelope::{Envelope, SIGNED_HEADERS};
use fleet_gateway::signing::{Keyring, Signer, signing_input};
use fleet_gateway::verify;
use lapin::types::{AMQPValue, ByteArray, FieldArray, FieldTable, LongString, ShortString};
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, RngSeed, TestCaseError, TestRunner};

/// One valid, signed message from the vectors.
#[derive(Clone)]
struct Seed {
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
    host: String,
    signer_seed: [u8; 32],
}

fn seeds() -> Vec<Seed> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/vectors");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("fixtures/vectors")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| {
            let v: serde_json::Value = serde_json::from_slice(&std::fs::read(p).expect("read")).expect("json");
            let s = |f: &str| v[f].as_str().expect("string field").to_string();
            Seed {
                headers: v["headers"]
                    .as_object()
                    .expect("headers")
                    .iter()
                    .map(|(k, x)| (k.clone(), x.as_str().expect("string").to_string()))
                    .collect(),
                body: B64.decode(s("body_base64")).expect("body"),
                host: s("host"),
                signer_seed: B64.decode(s("seed")).expect("seed").try_into().expect("32 bytes"),
            }
        })
        .collect()
}

fn to_table(map: &BTreeMap<String, AMQPValue>) -> FieldTable {
    FieldTable::from(
        map.iter()
            .map(|(k, v)| (ShortString::from(k.clone()), v.clone()))
            .collect::<BTreeMap<_, _>>(),
    )
}

fn long(s: &[u8]) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s.to_vec()))
}

/// Runs parsing and every check of the chain on one input; panics propagate to the caller.
/// Returns the parsed envelope when it parsed and verified.
fn exercise(ring: &Keyring, table: &FieldTable, body: &[u8]) -> Option<Envelope> {
    let env = Envelope::from_headers(Some(table)).ok()?;
    let _ = signing_input(&env, body);
    let _ = verify::check_size(body, 1 << 20);
    let _ = verify::check_to(&env, &env.to);
    let _ = verify::check_owner(&env, &env.to, &["g".to_string()]);
    let _ = verify::check_inbox_kind(&env);
    let _ = verify::check_time(&env, 30_000);
    let _ = env.to_headers();
    ring.verify(&env, body).ok().map(|()| env)
}

/// The signed header values of a table as text, an empty value for an absent header.
fn signed_values(env: &Envelope) -> Vec<String> {
    SIGNED_HEADERS.iter().map(|h| env.signed_value(h)).collect()
}

fn raw_values(table: &FieldTable) -> Vec<Option<Vec<u8>>> {
    SIGNED_HEADERS
        .iter()
        .map(|h| match table.inner().get(*h) {
            Some(AMQPValue::LongString(s)) if !s.as_bytes().is_empty() => Some(s.as_bytes().to_vec()),
            Some(AMQPValue::ByteArray(b)) if !b.as_slice().is_empty() => Some(b.as_slice().to_vec()),
            Some(AMQPValue::ShortString(s)) if !s.as_str().is_empty() => Some(s.as_str().as_bytes().to_vec()),
            Some(AMQPValue::LongString(_) | AMQPValue::ByteArray(_) | AMQPValue::ShortString(_)) | None => None,
            Some(other) => Some(format!("{other:?}").into_bytes()),
        })
        .collect()
}

/// Bytes that matter to parsers (digits, hex, separators, whitespace, NUL, invalid and valid
/// UTF-8) half the time, any byte otherwise.
const ALPHABET: &[u8] = b"0123456789abcdefABCDEF-_.=+/ \n\r\t\x00\xff\xc3\xa9";

fn a_byte() -> impl Strategy<Value = u8> {
    prop_oneof![proptest::sample::select(ALPHABET), any::<u8>()]
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(a_byte(), 0..=max)
}

/// A header name: mostly a signed header, sometimes `sig`, sometimes noise.
fn a_name() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => proptest::sample::select(&SIGNED_HEADERS[..]).prop_map(str::to_string),
        1 => Just("sig".to_string()),
        2 => bytes(12).prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
    ]
}

/// Any AMQP field value, tables and arrays nested up to two levels.
fn a_value() -> impl Strategy<Value = AMQPValue> {
    let leaf = prop_oneof![
        any::<bool>().prop_map(AMQPValue::Boolean),
        any::<i64>().prop_map(AMQPValue::LongLongInt),
        any::<i32>().prop_map(AMQPValue::LongInt),
        any::<u8>().prop_map(AMQPValue::ShortShortUInt),
        any::<u64>().prop_map(|b| AMQPValue::Double(f64::from_bits(b))),
        bytes(40).prop_map(|b| AMQPValue::ByteArray(ByteArray::from(b))),
        bytes(20).prop_map(|b| AMQPValue::ShortString(ShortString::from(String::from_utf8_lossy(&b).into_owned()))),
        Just(AMQPValue::Void),
        bytes(60).prop_map(|b| AMQPValue::LongString(LongString::from(b))),
    ];
    leaf.prop_recursive(2, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec((a_name(), inner.clone()), 0..4).prop_map(|kv| {
                let mut t = FieldTable::default();
                for (k, v) in kv {
                    t.insert(k.as_str().into(), v);
                }
                AMQPValue::FieldTable(t)
            }),
            proptest::collection::vec(inner, 0..4).prop_map(|v| AMQPValue::FieldArray(FieldArray::from(v))),
        ]
    })
}

/// One mutation of a valid message: header bytes, header presence, header type, body.
#[derive(Debug, Clone)]
enum Mutation {
    /// Change (0), insert (1) or delete (2) one byte of one header value, at a fraction of its length.
    HeaderByte {
        name: String,
        at: f64,
        op: u8,
        byte: u8,
    },
    Remove {
        name: String,
    },
    Set {
        name: String,
        value: AMQPValue,
    },
    /// Same text, another string type.
    Retype {
        name: String,
    },
    /// A numeric-looking rewrite of `ts` or `expiresAt`: leading zero, sign, spaces.
    Timestamp {
        expires: bool,
        variant: u8,
    },
    /// Flip a bit of, or insert a byte into, the body at a fraction of its length.
    Body {
        at: f64,
        flip: Option<u8>,
        byte: u8,
    },
    /// Cut the body to a fraction of its length (an empty cut appends a byte instead).
    Truncate {
        keep: f64,
    },
}

fn a_mutation() -> impl Strategy<Value = Mutation> {
    let frac = 0.0..=1.0f64;
    prop_oneof![
        3 => (a_name(), frac.clone(), 0..3u8, a_byte()).prop_map(|(name, at, op, byte)| Mutation::HeaderByte { name, at, op, byte }),
        1 => a_name().prop_map(|name| Mutation::Remove { name }),
        1 => (a_name(), a_value()).prop_map(|(name, value)| Mutation::Set { name, value }),
        1 => a_name().prop_map(|name| Mutation::Retype { name }),
        1 => (any::<bool>(), 0..4u8).prop_map(|(expires, variant)| Mutation::Timestamp { expires, variant }),
        1 => (frac.clone(), proptest::option::of(0..8u8), any::<u8>()).prop_map(|(at, flip, byte)| Mutation::Body { at, flip, byte }),
        1 => frac.prop_map(|keep| Mutation::Truncate { keep }),
    ]
}

fn index(len: usize, at: f64) -> usize {
    ((len as f64) * at).floor().min(len as f64) as usize
}

fn apply(m: &Mutation, table: &mut BTreeMap<String, AMQPValue>, body: &mut Vec<u8>) {
    match m {
        Mutation::HeaderByte { name, at, op, byte } => {
            let mut bytes = match table.get(name) {
                Some(AMQPValue::LongString(s)) => s.as_bytes().to_vec(),
                _ => Vec::new(),
            };
            let i = index(bytes.len(), *at);
            match op {
                0 if i < bytes.len() => bytes[i] = *byte,
                1 => bytes.insert(i, *byte),
                _ if i < bytes.len() => {
                    bytes.remove(i);
                }
                _ => bytes.push(*byte),
            }
            table.insert(name.clone(), long(&bytes));
        }
        Mutation::Remove { name } => {
            table.remove(name);
        }
        Mutation::Set { name, value } => {
            table.insert(name.clone(), value.clone());
        }
        Mutation::Retype { name } => {
            if let Some(AMQPValue::LongString(s)) = table.get(name).cloned() {
                table.insert(
                    name.clone(),
                    AMQPValue::ByteArray(ByteArray::from(s.as_bytes().to_vec())),
                );
            }
        }
        Mutation::Timestamp { expires, variant } => {
            let name = if *expires { "expiresAt" } else { "ts" };
            if let Some(AMQPValue::LongString(s)) = table.get(name).cloned() {
                let text = String::from_utf8_lossy(s.as_bytes()).into_owned();
                let v = match variant {
                    0 => format!("0{text}"),
                    1 => format!("+{text}"),
                    2 => format!(" {text}"),
                    _ => format!("{text} "),
                };
                table.insert(name.into(), long(v.as_bytes()));
            }
        }
        Mutation::Body { at, flip, byte } => {
            let i = index(body.len(), *at);
            match flip {
                Some(bit) if i < body.len() => body[i] ^= 1 << bit,
                _ => body.insert(i, *byte),
            }
        }
        Mutation::Truncate { keep } => {
            let k = index(body.len(), *keep);
            let was = body.len();
            body.truncate(k);
            if k == was {
                body.push(b'x');
            }
        }
    }
}

/// The vectors, their keys, and each original parsed and verified once.
struct Fixture {
    seeds: Vec<Seed>,
    ring: Keyring,
    originals: Vec<(BTreeMap<String, AMQPValue>, FieldTable, Envelope)>,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let seeds = seeds();
        let mut ring = Keyring::default();
        for s in &seeds {
            ring.insert(&s.host, Signer::from_seed(s.signer_seed).verifying_key());
        }
        let originals = seeds
            .iter()
            .map(|s| {
                let map: BTreeMap<String, AMQPValue> =
                    s.headers.iter().map(|(k, v)| (k.clone(), long(v.as_bytes()))).collect();
                let table = to_table(&map);
                let env = exercise(&ring, &table, &s.body).expect("every vector verifies");
                (map, table, env)
            })
            .collect();
        Fixture { seeds, ring, originals }
    })
}

/// Property 1: a random table and body never make parsing or a check panic.
fn random_table_survives((entries, body): (Vec<(String, AMQPValue)>, Vec<u8>)) -> Result<(), TestCaseError> {
    let f = fixture();
    let mut t = FieldTable::default();
    for (k, v) in entries {
        t.insert(k.as_str().into(), v);
    }
    let out = std::panic::catch_unwind(AssertUnwindSafe(|| exercise(&f.ring, &t, &body)));
    prop_assert!(out.is_ok(), "panic on a random table: {t:?}");
    Ok(())
}

/// Property 2: a mutant of a valid message that verifies is identical to its original.
fn mutant_is_rejected_or_identical((i, mutations): (usize, Vec<Mutation>)) -> Result<(), TestCaseError> {
    let f = fixture();
    let i = i % f.seeds.len();
    let s = &f.seeds[i];
    let (original, orig_table, orig_env) = &f.originals[i];
    let mut table = original.clone();
    let mut body = s.body.clone();
    for m in &mutations {
        apply(m, &mut table, &mut body);
    }
    let t = to_table(&table);
    let out = std::panic::catch_unwind(AssertUnwindSafe(|| exercise(&f.ring, &t, &body)));
    let Ok(accepted) = out else {
        return Err(TestCaseError::fail(format!("panic on a mutant: {t:?} body {body:?}")));
    };
    if let Some(env) = accepted {
        prop_assert_eq!(&body, &s.body, "a changed body verified");
        prop_assert_eq!(signed_values(&env), signed_values(orig_env));
        prop_assert_eq!(
            raw_values(&t),
            raw_values(orig_table),
            "malleable: a message whose signed header bytes differ from what was signed still verifies: {:?}",
            t
        );
    }
    Ok(())
}

fn env_num<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn config(cases: u32, seed: u64) -> Config {
    Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        source_file: Some(file!()),
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))),
        ..Config::default()
    }
}

#[test]
fn envelope_parsing_and_verification_survive_fuzzing() {
    let seed: u64 = env_num("FLEET_FUZZ_SEED").unwrap_or(0x5eed_f1ee7);
    let budget = env_num::<u64>("FLEET_FUZZ_SECS").map(Duration::from_secs);
    let cases: u32 = env_num("FLEET_FUZZ_ITERS").unwrap_or(400);
    let tables = (proptest::collection::vec((a_name(), a_value()), 0..16), bytes(64));
    let mutants = (any::<usize>(), proptest::collection::vec(a_mutation(), 1..=3));
    let started = Instant::now();
    let mut rounds = 0u64;
    // A time budget runs rounds of `cases` cases per property, each round with the next seed, until
    // the budget is spent; without one, one round.
    loop {
        let round_seed = seed.wrapping_add(rounds);
        if let Err(e) = TestRunner::new(config(cases, round_seed)).run(&tables, random_table_survives) {
            panic!("random tables (FLEET_FUZZ_SEED={round_seed}): {e}");
        }
        if let Err(e) = TestRunner::new(config(cases, round_seed)).run(&mutants, mutant_is_rejected_or_identical) {
            panic!("mutants of the vectors (FLEET_FUZZ_SEED={round_seed}): {e}");
        }
        rounds += 1;
        if budget.is_none_or(|b| started.elapsed() >= b) {
            break;
        }
    }
    println!(
        "fuzz: seed {seed}: {} round(s) of {cases} random tables + {cases} mutants in {:.1?}, 0 failures",
        rounds,
        started.elapsed()
    );
}
