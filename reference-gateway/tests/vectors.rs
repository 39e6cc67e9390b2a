//! The published envelope test vectors (`fixtures/vectors/`, made by `scripts/gen-vectors` in
//! Python) checked against the reference gateway's own envelope parser and signing code.
//!
//! The vectors come from an implementation that shares no code with this crate, so agreement here
//! means the gateway signs and verifies exactly what SPEC §3.2 says — not just what it agrees with
//! itself on.

use std::path::PathBuf;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use fleet_gateway::envelope::{Envelope, SIGNED_HEADERS};
use fleet_gateway::signing::{Keyring, SigError, Signer, signing_input};
use lapin::types::{AMQPValue, FieldTable, LongString};
use serde_json::Value;

struct Vector {
    file: String,
    v: Value,
}

impl Vector {
    fn str(&self, field: &str) -> &str {
        self.v[field]
            .as_str()
            .unwrap_or_else(|| panic!("{}: field {field} missing", self.file))
    }

    fn bytes(&self, field: &str) -> Vec<u8> {
        B64.decode(self.str(field))
            .unwrap_or_else(|e| panic!("{}: {field} is not base64: {e}", self.file))
    }

    fn headers(&self) -> FieldTable {
        let mut t = FieldTable::default();
        for (k, v) in self.v["headers"].as_object().expect("headers object") {
            let s = v.as_str().expect("header values are strings");
            t.insert(
                k.as_str().into(),
                AMQPValue::LongString(LongString::from(s.to_string())),
            );
        }
        t
    }

    fn seed(&self) -> [u8; 32] {
        self.bytes("seed").try_into().expect("32-byte seed")
    }
}

fn vectors() -> Vec<Vector> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/vectors");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let out: Vec<Vector> = files
        .iter()
        .map(|p| Vector {
            file: p.display().to_string(),
            v: serde_json::from_slice(&std::fs::read(p).expect("read vector"))
                .unwrap_or_else(|e| panic!("{}: {e}", p.display())),
        })
        .collect();
    assert!(out.len() >= 12, "expected at least 12 vectors, found {}", out.len());
    out
}

#[test]
fn every_vector_parses_and_its_signing_input_matches() {
    for vec in vectors() {
        let env = Envelope::from_headers(Some(&vec.headers()))
            .unwrap_or_else(|e| panic!("{}: the gateway refuses the envelope: {e}", vec.file));
        let body = vec.bytes("body_base64");
        let input = signing_input(&env, &body);
        assert_eq!(
            input,
            vec.bytes("signing_input_base64"),
            "{}: signing input differs",
            vec.file
        );
        assert_eq!(env.to, vec.str("routing_key"), "{}", vec.file);
        // Headers written back are the headers read, absent optionals still absent.
        let round = env.to_headers();
        for name in SIGNED_HEADERS {
            assert_eq!(
                round.inner().contains_key(name),
                vec.v["headers"].get(name).is_some(),
                "{}: header {name} presence differs after a round trip",
                vec.file
            );
        }
    }
}

#[test]
fn the_gateway_signs_every_vector_to_the_expected_sig() {
    for vec in vectors() {
        let signer = Signer::from_seed(vec.seed());
        assert_eq!(signer.public_base64(), vec.str("public_key"), "{}", vec.file);
        let mut env = Envelope::from_headers(Some(&vec.headers())).expect("parses");
        env.sig.clear();
        signer.sign(&mut env, &vec.bytes("body_base64"));
        assert_eq!(env.sig, vec.str("sig"), "{}: signature differs", vec.file);
    }
}

#[test]
fn the_gateway_verifies_every_vector_and_refuses_any_changed_byte() {
    for vec in vectors() {
        let mut ring = Keyring::default();
        ring.insert(vec.str("host"), Signer::from_seed(vec.seed()).verifying_key());
        let env = Envelope::from_headers(Some(&vec.headers())).expect("parses");
        let body = vec.bytes("body_base64");
        assert_eq!(ring.verify(&env, &body), Ok(()), "{}", vec.file);

        let mut tampered = body.clone();
        match tampered.first_mut() {
            Some(b) => *b ^= 1,
            None => tampered.push(b'x'),
        }
        assert!(
            matches!(ring.verify(&env, &tampered), Err(SigError::BadSignature(_))),
            "{}: a changed body still verifies",
            vec.file
        );
        let mut other = env.clone();
        other.ts += 1;
        assert!(
            ring.verify(&other, &body).is_err(),
            "{}: a changed ts still verifies",
            vec.file
        );
        let mut other = env.clone();
        other.trace_id = other.msg_id.clone();
        assert!(
            ring.verify(&other, &body).is_err(),
            "{}: a changed traceId still verifies",
            vec.file
        );
        let mut foreign = env.clone();
        foreign.host = "not-a-peer".into();
        assert!(
            matches!(ring.verify(&foreign, &body), Err(SigError::UnknownHost(_))),
            "{}",
            vec.file
        );
    }
}
