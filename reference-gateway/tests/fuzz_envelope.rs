//! A bounded fuzz test of envelope parsing and verification (SPEC §2–3), runnable for a fixed
//! number of executions (`cargo test`) or for a given time (`scripts/fuzz SECONDS`).
//!
//! Why this exists: the envelope is the gateway's attack surface — every header comes from the
//! network. Two properties are checked on inputs derived from the published vectors and on random
//! header tables: (1) parsing and every check never panic, whatever the header types and bytes;
//! (2) no malleability: a mutated message that still parses and verifies must carry exactly the
//! signed header values and body of the original (an absent optional header and an empty one are
//! the same value). A deterministic PRNG (seed `FLEET_FUZZ_SEED`) makes every failure replayable.
//! Knobs: `FLEET_FUZZ_ITERS` (default 400) or `FLEET_FUZZ_SECS` (a time budget instead).

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use fleet_gateway::envelope::{Envelope, SIGNED_HEADERS};
use fleet_gateway::signing::{Keyring, Signer, signing_input};
use fleet_gateway::verify;
use lapin::types::{AMQPValue, ByteArray, FieldArray, FieldTable, LongString, ShortString};

/// splitmix64: tiny, deterministic, good enough to drive mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}

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

const ALPHABET: &[u8] = b"0123456789abcdefABCDEF-_.=+/ \n\r\t\x00\xff\xc3\xa9";

fn random_bytes(r: &mut Rng, max: usize) -> Vec<u8> {
    let n = r.below(max + 1);
    (0..n)
        .map(|_| {
            if r.chance(2) {
                ALPHABET[r.below(ALPHABET.len())]
            } else {
                r.next() as u8
            }
        })
        .collect()
}

fn random_value(r: &mut Rng, depth: usize) -> AMQPValue {
    match r.below(if depth > 1 { 9 } else { 11 }) {
        0 => AMQPValue::Boolean(r.chance(2)),
        1 => AMQPValue::LongLongInt(r.next() as i64),
        2 => AMQPValue::LongInt(r.next() as i32),
        3 => AMQPValue::ShortShortUInt(r.next() as u8),
        4 => AMQPValue::Double(f64::from_bits(r.next())),
        5 => AMQPValue::ByteArray(ByteArray::from(random_bytes(r, 40))),
        6 => AMQPValue::ShortString(ShortString::from(
            String::from_utf8_lossy(&random_bytes(r, 20)).into_owned(),
        )),
        7 => AMQPValue::Void,
        8 => AMQPValue::LongString(LongString::from(random_bytes(r, 60))),
        9 => {
            let mut t = FieldTable::default();
            for _ in 0..r.below(4) {
                t.insert(random_name(r).as_str().into(), random_value(r, depth + 1));
            }
            AMQPValue::FieldTable(t)
        }
        _ => AMQPValue::FieldArray(FieldArray::from(
            (0..r.below(4)).map(|_| random_value(r, depth + 1)).collect::<Vec<_>>(),
        )),
    }
}

fn random_name(r: &mut Rng) -> String {
    if r.chance(4) {
        String::from_utf8_lossy(&random_bytes(r, 12)).into_owned()
    } else if r.chance(8) {
        "sig".into()
    } else {
        SIGNED_HEADERS[r.below(SIGNED_HEADERS.len())].to_string()
    }
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

/// One mutation of a valid message: header bytes, header presence, header type, body.
fn mutate(r: &mut Rng, table: &mut BTreeMap<String, AMQPValue>, body: &mut Vec<u8>) {
    match r.below(9) {
        0..=2 => {
            // Change, insert or delete one byte of one header value.
            let name = random_name(r);
            let mut bytes = match table.get(&name) {
                Some(AMQPValue::LongString(s)) => s.as_bytes().to_vec(),
                _ => Vec::new(),
            };
            let at = r.below(bytes.len() + 1);
            match r.below(3) {
                0 if at < bytes.len() => bytes[at] = ALPHABET[r.below(ALPHABET.len())],
                1 => bytes.insert(at, ALPHABET[r.below(ALPHABET.len())]),
                _ if at < bytes.len() => {
                    bytes.remove(at);
                }
                _ => bytes.push(r.next() as u8),
            }
            table.insert(name, long(&bytes));
        }
        3 => {
            table.remove(&random_name(r));
        }
        4 => {
            let name = random_name(r);
            let v = random_value(r, 0);
            table.insert(name, v);
        }
        5 => {
            // Same text, another string type.
            let name = random_name(r);
            if let Some(AMQPValue::LongString(s)) = table.get(&name).cloned() {
                table.insert(name, AMQPValue::ByteArray(ByteArray::from(s.as_bytes().to_vec())));
            }
        }
        6 => {
            // Numeric-looking rewrites of the timestamps: leading zeros, sign, spaces.
            let name = if r.chance(2) { "ts" } else { "expiresAt" };
            if let Some(AMQPValue::LongString(s)) = table.get(name).cloned() {
                let text = String::from_utf8_lossy(s.as_bytes()).into_owned();
                let variants = [
                    format!("0{text}"),
                    format!("+{text}"),
                    format!(" {text}"),
                    format!("{text} "),
                ];
                table.insert(name.into(), long(variants[r.below(variants.len())].as_bytes()));
            }
        }
        7 => {
            let at = r.below(body.len() + 1);
            if at < body.len() && r.chance(2) {
                body[at] ^= 1 << r.below(8);
            } else {
                body.insert(at, r.next() as u8);
            }
        }
        _ => {
            let keep = r.below(body.len() + 1);
            body.truncate(keep);
            if keep == body.len() {
                body.push(b'x');
            }
        }
    }
}

struct Stats {
    execs: u64,
    parsed: u64,
    verified: u64,
}

fn run(budget_iters: u64, budget_time: Option<Duration>, seed: u64) -> Stats {
    let seeds = seeds();
    let mut ring = Keyring::default();
    for s in &seeds {
        ring.insert(&s.host, Signer::from_seed(s.signer_seed).verifying_key());
    }
    // The originals, parsed and verified once.
    let originals: Vec<(BTreeMap<String, AMQPValue>, FieldTable, Envelope)> = seeds
        .iter()
        .map(|s| {
            let map: BTreeMap<String, AMQPValue> =
                s.headers.iter().map(|(k, v)| (k.clone(), long(v.as_bytes()))).collect();
            let table = to_table(&map);
            let env = exercise(&ring, &table, &s.body).expect("every vector verifies");
            (map, table, env)
        })
        .collect();
    let mut r = Rng(seed);
    let started = Instant::now();
    let mut st = Stats {
        execs: 0,
        parsed: 0,
        verified: 0,
    };
    loop {
        let done = match budget_time {
            Some(t) => started.elapsed() >= t,
            None => st.execs >= budget_iters,
        };
        if done {
            break;
        }
        let case = st.execs;
        st.execs += 1;
        if r.chance(4) {
            // Property 1 on a random table.
            let mut t = FieldTable::default();
            for _ in 0..r.below(16) {
                t.insert(random_name(&mut r).as_str().into(), random_value(&mut r, 0));
            }
            let body = random_bytes(&mut r, 64);
            let out = std::panic::catch_unwind(AssertUnwindSafe(|| exercise(&ring, &t, &body)));
            assert!(out.is_ok(), "panic on random table (seed {seed}, case {case}): {t:?}");
            continue;
        }
        // Property 2 on a mutant of a valid message.
        let i = r.below(seeds.len());
        let s = &seeds[i];
        let (original, orig_table, orig_env) = &originals[i];
        let mut table = original.clone();
        let mut body = s.body.clone();
        for _ in 0..1 + r.below(3) {
            mutate(&mut r, &mut table, &mut body);
        }
        let t = to_table(&table);
        let out = std::panic::catch_unwind(AssertUnwindSafe(|| exercise(&ring, &t, &body)));
        let Ok(accepted) = out else {
            panic!("panic on a mutant (seed {seed}, case {case}): {t:?} body {body:?}");
        };
        if Envelope::from_headers(Some(&t)).is_ok() {
            st.parsed += 1;
        }
        if let Some(env) = accepted {
            st.verified += 1;
            assert_eq!(body, s.body, "a changed body verified (seed {seed}, case {case})");
            assert_eq!(signed_values(&env), signed_values(orig_env), "case {case}");
            assert_eq!(
                raw_values(&t),
                raw_values(orig_table),
                "malleable: a message whose signed header bytes differ from what was signed still verifies \
                 (seed {seed}, case {case}): {t:?}"
            );
        }
    }
    st
}

#[test]
fn envelope_parsing_and_verification_survive_fuzzing() {
    let seed = std::env::var("FLEET_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5eed_f1ee7);
    let secs = std::env::var("FLEET_FUZZ_SECS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok());
    let iters = std::env::var("FLEET_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let started = Instant::now();
    let st = run(iters, secs.map(Duration::from_secs), seed);
    println!(
        "fuzz: seed {seed}: {} executions in {:.1?}, {} mutants parsed, {} verified (each identical to its original), 0 crashes",
        st.execs,
        started.elapsed(),
        st.parsed,
        st.verified
    );
    assert!(st.execs > 0);
}
