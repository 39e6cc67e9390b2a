//! The live trust state of SPEC §18: which keys are host h's right now.
//!
//! A key is h's if the peers file lists it for h (MEM-1), if it is this gateway's own key of this
//! run (h is this host), or if a certificate seen in h's `_gateway` presence is valid for h
//! (MEM-2). Certified keys are kept — every valid, unrevoked one of a host — until their
//! certificate expires, so a message signed with the old key before a rotation still verifies
//! (MEM-3). Per key only the latest certificate seen for it is kept ([C-21] 8): a renewed
//! certificate over the same key replaces the previous one.
//!
//! The hot path (verifying a message) takes two read locks, each for a lookup and an `Arc` clone,
//! and never reads a certificate: the files are an immutable snapshot swapped whole on reload, a
//! learned key carries its certificate already read and its clock-free standing (CA trusted, host
//! certificate, principal, not revoked) computed against the files of the moment, recomputed at
//! each reload. Only the validity window is compared at verify time (two integers). Certificates
//! are read once per text ([`Trust::cert`], a bounded cache): a heartbeat carrying a certificate
//! the host already holds costs a string compare.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, RwLock};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::{Signature, VerifyingKey};

use super::ca::CaSet;
use super::cert::{CertInfo, CertProblem, Window};
use super::krl::Krl;
use super::peers::Peers;
use crate::envelope::{Envelope, now_ms};
use crate::signing::{SigError, signing_input};
use crate::verify::Rejection;

/// Certified keys kept per host (newest first): a rotation adds one; the bound keeps a host that
/// renews its certificate often, or a forger with a genuine but revoked certificate, from growing
/// the state.
const KEYS_PER_HOST: usize = 8;

/// Certificates read and kept by text, at most (a flood of distinct bad certificates empties it).
const CERT_CACHE: usize = 4096;

/// A certified key that stopped being valid is kept this long after its expiry, so a late message
/// signed with it is named `cert_expired` rather than `signature`.
const EXPIRED_KEPT_MS: u64 = 3_600_000;

/// What the trust files say, swapped whole on a reload.
#[derive(Debug, Clone, Default)]
pub struct TrustFiles {
    pub peers: Peers,
    pub cas: CaSet,
    pub krl: Krl,
}

impl TrustFiles {
    /// What the peers file holds, in the words of the start's and the reload's INFO lines.
    pub fn peers_summary(peers: &Peers) -> String {
        format!("{} host(s)", peers.hosts().count())
    }

    /// What the CA file holds (CA keys, and lines skipped for a type not taken).
    pub fn cas_summary(cas: &CaSet) -> String {
        match cas.skipped().len() {
            0 => format!("{} CA key(s)", cas.len()),
            n => format!("{} CA key(s), {n} line(s) skipped", cas.len()),
        }
    }

    /// What the revocation list holds.
    pub fn krl_summary(krl: &Krl) -> String {
        format!("{} line(s) in force", krl.len())
    }
}

/// A key learned from a certificate in a host's `_gateway` presence.
#[derive(Debug, Clone)]
pub struct Learned {
    pub cert: Arc<CertInfo>,
    /// The clock-free checks against the files of the moment (recomputed on every reload).
    pub standing: Result<(), CertProblem>,
}

impl Learned {
    /// Valid now: standing, and `now_ms` in its window (± skew).
    fn status(&self, now_ms: u64, skew_ms: u64) -> Result<(), CertProblem> {
        self.standing.clone()?;
        self.cert.check_time(now_ms, skew_ms)
    }
}

/// What a `_gateway` presence carrying a certificate did to the trust state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PresenceTrust {
    /// Verified under a key already held; the certificate changed nothing.
    Held,
    /// Verified under the certificate's key, which is now the host's (MEM-2).
    Learned,
    /// Verified under a key already held, but the certificate it carries is no good: applied,
    /// with a WARN naming the certificate's problem.
    HeldBadCert(CertProblem),
}

/// The live trust state.
pub struct Trust {
    host_id: String,
    skew_ms: u64,
    files: RwLock<Arc<TrustFiles>>,
    learned: RwLock<HashMap<String, Arc<Vec<Learned>>>>,
    /// This gateway's keys of this run (the first and every rotated-to key).
    own: RwLock<Arc<Vec<VerifyingKey>>>,
    certs: Mutex<HashMap<String, Result<Arc<CertInfo>, CertProblem>>>,
    /// Serialises the writers (reload, learn, prune): each reads, rebuilds, swaps.
    writer: Mutex<()>,
}

/// A std lock's guard even after a panic elsewhere: every writer leaves the data consistent (a
/// swap of a whole value).
fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn lock<T>(l: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    l.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Trust {
    pub fn new(host_id: &str, skew_ms: u64, files: TrustFiles, own_key: VerifyingKey) -> Trust {
        Trust {
            host_id: host_id.to_string(),
            skew_ms,
            files: RwLock::new(Arc::new(files)),
            learned: RwLock::new(HashMap::new()),
            own: RwLock::new(Arc::new(vec![own_key])),
            certs: Mutex::new(HashMap::new()),
            writer: Mutex::new(()),
        }
    }

    pub fn skew_ms(&self) -> u64 {
        self.skew_ms
    }

    /// The files in force.
    pub fn files(&self) -> Arc<TrustFiles> {
        Arc::clone(&read(&self.files))
    }

    /// Applies new file content (MEM-1): swaps the files and re-judges every learned key's
    /// standing against them (a CA removed, a KRL entry added).
    pub fn set_files(&self, files: TrustFiles) {
        let _w = lock(&self.writer);
        let files = Arc::new(files);
        *write(&self.files) = Arc::clone(&files);
        let mut learned = write(&self.learned);
        for (host, keys) in learned.iter_mut() {
            let rejudged = keys
                .iter()
                .map(|l| Learned {
                    cert: Arc::clone(&l.cert),
                    standing: l.cert.check_standing(host, &files.cas, &files.krl),
                })
                .collect();
            *keys = Arc::new(rejudged);
        }
    }

    /// Replaces one part of the files.
    pub fn set_peers(&self, peers: Peers) {
        let mut f = (*self.files()).clone();
        f.peers = peers;
        self.set_files(f);
    }

    pub fn set_cas(&self, cas: CaSet) {
        let mut f = (*self.files()).clone();
        f.cas = cas;
        self.set_files(f);
    }

    pub fn set_krl(&self, krl: Krl) {
        let mut f = (*self.files()).clone();
        f.krl = krl;
        self.set_files(f);
    }

    /// Trusts another own key (MEM-3: before the first message signed with it goes out, since
    /// the gateway's own messages come back to it).
    pub fn add_own_key(&self, key: VerifyingKey) {
        let _w = lock(&self.writer);
        let mut own = write(&self.own);
        if !own.contains(&key) {
            let mut keys = (**own).clone();
            keys.push(key);
            *own = Arc::new(keys);
        }
    }

    /// `text` read and signature-checked, from the cache when it was read before.
    pub fn cert(&self, text: &str) -> Result<Arc<CertInfo>, CertProblem> {
        let text = text.trim();
        if let Some(hit) = lock(&self.certs).get(text) {
            return hit.clone();
        }
        let read = CertInfo::parse(text).map(Arc::new);
        let mut cache = lock(&self.certs);
        if cache.len() >= CERT_CACHE {
            cache.clear();
        }
        cache.insert(text.to_string(), read.clone());
        read
    }

    fn learned_of(&self, host: &str) -> Option<Arc<Vec<Learned>>> {
        read(&self.learned).get(host).cloned()
    }

    /// SIG-2 (1) under SPEC §18: `env.host`'s valid keys are tried; if none verifies, a message
    /// that only a revoked, expired or otherwise invalid certified key of the host verifies is
    /// named after that key's problem (`revoked`, `cert_expired`, `certificate`); a host without
    /// a valid key is unknown (`signature`).
    pub fn verify(&self, env: &Envelope, body: &[u8]) -> Result<VerifyingKey, Rejection> {
        let sig = decode_sig(env)?;
        let input = signing_input(env, body);
        self.verify_input(&env.host, &input, &sig, now_ms())
    }

    fn verify_input(&self, host: &str, input: &[u8], sig: &Signature, now: u64) -> Result<VerifyingKey, Rejection> {
        let (held, known) = self.verify_valid(host, input, sig, now);
        if let Some(k) = held {
            return Ok(k);
        }
        let files = self.files();
        for k in files.peers.keys(host) {
            if let Some(fp) = files.krl.revokes_ed25519(k)
                && k.verify_strict(input, sig).is_ok()
            {
                return Err(CertProblem::KeyRevoked(fp.to_string()).into());
            }
        }
        if let Some(keys) = self.learned_of(host) {
            for l in keys.iter() {
                if let Err(problem) = l.status(now, self.skew_ms)
                    && l.cert.key.verify_strict(input, sig).is_ok()
                {
                    return Err(problem.into());
                }
            }
        }
        Err(Rejection::Signature(if known {
            SigError::BadSignature(host.to_string())
        } else {
            SigError::UnknownHost(host.to_string())
        }))
    }

    /// Tries `host`'s valid keys; returns the one that verifies, and whether the host has any.
    fn verify_valid(&self, host: &str, input: &[u8], sig: &Signature, now: u64) -> (Option<VerifyingKey>, bool) {
        let mut known = false;
        let files = self.files();
        for k in files.peers.keys(host) {
            if files.krl.revokes_ed25519(k).is_some() {
                continue;
            }
            known = true;
            if k.verify_strict(input, sig).is_ok() {
                return (Some(*k), true);
            }
        }
        if host == self.host_id {
            for k in read(&self.own).iter() {
                known = true;
                if k.verify_strict(input, sig).is_ok() {
                    return (Some(*k), true);
                }
            }
        }
        if let Some(keys) = self.learned_of(host) {
            for l in keys.iter().filter(|l| l.status(now, self.skew_ms).is_ok()) {
                known = true;
                if l.cert.key.verify_strict(input, sig).is_ok() {
                    return (Some(l.cert.key), true);
                }
            }
        }
        (None, known)
    }

    /// Whether `host` holds a valid key now (peers file, own key, or a valid certificate).
    pub fn has_valid_key(&self, host: &str, now: u64) -> bool {
        let files = self.files();
        host == self.host_id
            || files
                .peers
                .keys(host)
                .iter()
                .any(|k| files.krl.revokes_ed25519(k).is_none())
            || self
                .learned_of(host)
                .is_some_and(|keys| keys.iter().any(|l| l.status(now, self.skew_ms).is_ok()))
    }

    /// Every host that holds a valid key now.
    pub fn valid_hosts(&self, now: u64) -> BTreeSet<String> {
        let files = self.files();
        let mut hosts: BTreeSet<String> = files
            .peers
            .hosts()
            .filter(|h| {
                files
                    .peers
                    .keys(h)
                    .iter()
                    .any(|k| files.krl.revokes_ed25519(k).is_none())
            })
            .map(str::to_string)
            .collect();
        hosts.insert(self.host_id.clone());
        for (host, keys) in read(&self.learned).iter() {
            if keys.iter().any(|l| l.status(now, self.skew_ms).is_ok()) {
                hosts.insert(host.clone());
            }
        }
        hosts
    }

    /// The earliest instant (Unix ms) a currently valid certified key stops being valid.
    pub fn next_expiry(&self, now: u64) -> Option<u64> {
        read(&self.learned)
            .values()
            .flat_map(|keys| keys.iter())
            .filter(|l| l.status(now, self.skew_ms).is_ok())
            .filter_map(|l| l.cert.expires_at_ms(self.skew_ms))
            .min()
    }

    /// SIG-2 (1) for a `_gateway` PRESENCE that carries `cert` (MEM-2). The presence applies if
    /// it verifies under a key already held (a bad certificate then only earns a WARN), or under
    /// the certificate's key when the certificate is valid for the host — whose key it then is.
    /// A presence that only the certificate's key could make valid is rejected with the
    /// certificate's problem.
    pub fn check_presence(&self, env: &Envelope, body: &[u8], cert: Option<&str>) -> Result<PresenceTrust, Rejection> {
        let Some(text) = cert.map(str::trim).filter(|t| !t.is_empty()) else {
            return self.verify(env, body).map(|_| PresenceTrust::Held);
        };
        let sig = decode_sig(env)?;
        let input = signing_input(env, body);
        let now = now_ms();
        let host = env.host.as_str();
        let (held, _) = self.verify_valid(host, &input, &sig, now);
        if host == self.host_id {
            // Our own heartbeat: our keys are trusted without certificates.
            return match held {
                Some(_) => Ok(PresenceTrust::Held),
                None => self.verify_input(host, &input, &sig, now).map(|_| PresenceTrust::Held),
            };
        }
        if held.is_some() && self.holds_cert(host, text, now) {
            return Ok(PresenceTrust::Held);
        }
        let files = self.files();
        let read = self.cert(text);
        match (held, read) {
            (Some(_), Err(problem)) => Ok(PresenceTrust::HeldBadCert(problem)),
            (Some(k), Ok(info)) => match info.check(host, &files.cas, &files.krl, now, self.skew_ms) {
                Ok(()) if info.key == k => {
                    self.learn(host, info);
                    Ok(PresenceTrust::Learned)
                }
                Ok(()) => Ok(PresenceTrust::HeldBadCert(CertProblem::NotSignedByKey)),
                Err(problem) => Ok(PresenceTrust::HeldBadCert(problem)),
            },
            (None, Err(problem)) => Err(problem.into()),
            (None, Ok(info)) => {
                if info.key.verify_strict(&input, &sig).is_err() {
                    return Err(CertProblem::NotSignedByKey.into());
                }
                match info.check(host, &files.cas, &files.krl, now, self.skew_ms) {
                    Ok(()) => {
                        self.learn(host, info);
                        Ok(PresenceTrust::Learned)
                    }
                    Err(problem) => {
                        // A genuine certificate of the host, revoked or out of its window: kept
                        // (invalid), so the host's later messages are named after it.
                        if matches!(
                            problem,
                            CertProblem::Revoked(_) | CertProblem::Expired(_) | CertProblem::NotYetValid(_)
                        ) {
                            self.learn(host, info);
                        }
                        Err(problem.into())
                    }
                }
            }
        }
    }

    /// Whether `host` already holds this very certificate, valid.
    fn holds_cert(&self, host: &str, text: &str, now: u64) -> bool {
        self.learned_of(host).is_some_and(|keys| {
            keys.iter()
                .any(|l| l.cert.text == text && l.status(now, self.skew_ms).is_ok())
        })
    }

    /// Records `cert`'s key as `host`'s (newest first, bounded).
    fn learn(&self, host: &str, cert: Arc<CertInfo>) {
        let _w = lock(&self.writer);
        let files = self.files();
        let standing = cert.check_standing(host, &files.cas, &files.krl);
        let mut learned = write(&self.learned);
        let keys = learned.entry(host.to_string()).or_default();
        if keys.iter().any(|l| l.cert.text == cert.text) {
            return;
        }
        // [C-21] 8: per key, the latest certificate seen for it — a renewal replaces what was
        // held for the same key, so revoking the serial an operator reads now revokes the key's
        // standing (an older certificate of the same key no longer keeps it valid).
        let key = cert.key;
        let mut next = Vec::with_capacity(keys.len() + 1);
        next.push(Learned { cert, standing });
        next.extend(
            keys.iter()
                .filter(|l| l.cert.key != key)
                .take(KEYS_PER_HOST - 1)
                .cloned(),
        );
        *keys = Arc::new(next);
    }

    /// Forgets certified keys that expired more than an hour ago, and hosts left with none.
    pub fn prune(&self, now: u64) {
        let _w = lock(&self.writer);
        let horizon = now.saturating_sub(EXPIRED_KEPT_MS);
        let mut learned = write(&self.learned);
        learned.retain(|_, keys| {
            if keys
                .iter()
                .any(|l| l.cert.window(horizon, self.skew_ms) == Window::Expired)
            {
                let kept: Vec<Learned> = keys
                    .iter()
                    .filter(|l| l.cert.window(horizon, self.skew_ms) != Window::Expired)
                    .cloned()
                    .collect();
                *keys = Arc::new(kept);
            }
            !keys.is_empty()
        });
    }

    /// Every host's certified keys as held now (for the trust report, [`super::report`]).
    pub fn learned(&self) -> HashMap<String, Arc<Vec<Learned>>> {
        read(&self.learned).clone()
    }

    /// This gateway's own keys of this run.
    pub fn own_keys(&self) -> Arc<Vec<VerifyingKey>> {
        Arc::clone(&read(&self.own))
    }

    /// A certified key's state now: valid, or the check it fails ([`CertProblem`]).
    pub fn status_of(&self, l: &Learned, now: u64) -> Result<(), CertProblem> {
        l.status(now, self.skew_ms)
    }

    /// How many hosts hold certified keys, and how many such keys are valid now (for logs).
    pub fn certified_counts(&self, now: u64) -> (usize, usize) {
        let learned = read(&self.learned);
        let valid = learned
            .values()
            .flat_map(|keys| keys.iter())
            .filter(|l| l.status(now, self.skew_ms).is_ok())
            .count();
        (learned.len(), valid)
    }
}

fn decode_sig(env: &Envelope) -> Result<Signature, Rejection> {
    let raw = B64
        .decode(env.sig.as_bytes())
        .map_err(|_| Rejection::Signature(SigError::Malformed))?;
    let bytes: [u8; 64] = raw.try_into().map_err(|_| Rejection::Signature(SigError::Malformed))?;
    Ok(Signature::from_bytes(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::Kind;
    use crate::membership::cert::tests::{fixture, seed_signer};
    use crate::signing::Signer;

    fn files(krl: &str) -> TrustFiles {
        TrustFiles {
            peers: Peers::default(),
            cas: CaSet::parse(&fixture("trust-ca.txt")).expect("CA"),
            krl: Krl::parse(krl).expect("KRL"),
        }
    }

    fn signed(signer: &Signer, host: &str, body: &[u8]) -> Envelope {
        let now = now_ms();
        let mut env = Envelope {
            v: "1".into(),
            kind: Kind::Presence,
            msg_id: crate::envelope::new_uuid(),
            trace_id: crate::envelope::new_uuid(),
            from: "_gateway".into(),
            to: format!("roster.{host}._gateway"),
            host: host.into(),
            turn_id: None,
            spawn_id: None,
            corr_id: None,
            ts: now,
            expires_at: now + 15_000,
            sig: String::new(),
        };
        signer.sign(&mut env, body);
        env
    }

    fn reason(r: Result<impl std::fmt::Debug, Rejection>) -> &'static str {
        match r {
            Ok(_) => "ok",
            Err(e) => e.reason(),
        }
    }

    /// A receiver "r" (own key seed 9) that knows no one.
    fn receiver(krl: &str) -> Trust {
        Trust::new("r", 30_000, files(krl), Signer::from_seed([9; 32]).verifying_key())
    }

    #[test]
    fn a_host_joins_with_its_certificate_and_is_then_known() {
        let t = receiver("");
        let a = seed_signer("a");
        let msg = signed(&a, "a", b"{}");
        assert_eq!(reason(t.verify(&msg, b"{}")), "signature", "no key for a yet");
        assert!(!t.has_valid_key("a", now_ms()));
        let cert = fixture("a-cert.pub");
        let p = signed(&a, "a", b"{}");
        assert_eq!(t.check_presence(&p, b"{}", Some(&cert)), Ok(PresenceTrust::Learned));
        assert_eq!(t.check_presence(&p, b"{}", Some(&cert)), Ok(PresenceTrust::Held));
        assert_eq!(reason(t.verify(&msg, b"{}")), "ok");
        assert!(t.has_valid_key("a", now_ms()));
        assert!(t.valid_hosts(now_ms()).contains("a"));
        assert_eq!(reason(t.verify(&msg, b"{ }")), "signature", "tampered");
    }

    #[test]
    fn hostile_presences_are_named() {
        let t = receiver("");
        let a = seed_signer("a");
        let named = |cert: &str, signer: &Signer| {
            let p = signed(signer, "a", b"{}");
            reason(t.check_presence(&p, b"{}", Some(cert)))
        };
        assert_eq!(named(&fixture("a-other-ca-cert.pub"), &a), "certificate");
        assert_eq!(named(&fixture("a-user-cert.pub"), &a), "certificate");
        assert_eq!(named(&fixture("a-wrong-principal-cert.pub"), &a), "certificate");
        assert_eq!(named(&fixture("a-future-cert.pub"), &a), "certificate");
        assert_eq!(named(&fixture("a-expired-cert.pub"), &a), "cert_expired");
        assert_eq!(named("garbage", &a), "certificate");
        let text = fixture("a-cert.pub");
        assert_eq!(named(&text[..text.len() / 2], &a), "certificate");
        // A valid certificate of a, carried by a presence signed with another key.
        assert_eq!(named(&text, &seed_signer("c")), "certificate");
        assert!(!t.has_valid_key("a", now_ms()), "nothing was learned");
    }

    #[test]
    fn revocation_by_reload_names_later_messages_revoked() {
        let t = receiver("");
        let a = seed_signer("a");
        let p = signed(&a, "a", b"{}");
        t.check_presence(&p, b"{}", Some(&fixture("a-cert.pub")))
            .expect("learned");
        t.set_krl(Krl::parse("serial: 11\n").expect("krl"));
        let msg = signed(&a, "a", b"x");
        assert_eq!(reason(t.verify(&msg, b"x")), "revoked");
        assert!(!t.has_valid_key("a", now_ms()));
        t.set_krl(Krl::default());
        assert_eq!(reason(t.verify(&msg, b"x")), "ok", "un-revoked by the next reload");
        t.set_cas(CaSet::default());
        assert_eq!(
            reason(t.verify(&msg, b"x")),
            "certificate",
            "its CA is no longer trusted"
        );
    }

    #[test]
    fn a_revoked_certificate_never_joins_and_names_its_host_messages() {
        let t = receiver("id: a-key-1\n");
        let a = seed_signer("a");
        let p = signed(&a, "a", b"{}");
        assert_eq!(
            reason(t.check_presence(&p, b"{}", Some(&fixture("a-cert.pub")))),
            "revoked"
        );
        assert_eq!(reason(t.verify(&signed(&a, "a", b"m"), b"m")), "revoked");
    }

    #[test]
    fn a_rotation_keeps_the_old_key_valid() {
        let t = receiver("");
        let (old, new) = (seed_signer("a"), seed_signer("b"));
        let p = signed(&old, "a", b"{}");
        t.check_presence(&p, b"{}", Some(&fixture("a-cert.pub"))).expect("old");
        let p = signed(&new, "a", b"{}");
        assert_eq!(
            t.check_presence(&p, b"{}", Some(&fixture("a-rotated-cert.pub"))),
            Ok(PresenceTrust::Learned)
        );
        assert_eq!(reason(t.verify(&signed(&old, "a", b"m"), b"m")), "ok", "in flight");
        assert_eq!(reason(t.verify(&signed(&new, "a", b"m"), b"m")), "ok");
        assert_eq!(t.certified_counts(now_ms()), (1, 2));
    }

    #[test]
    fn a_held_key_applies_a_presence_whatever_its_certificate() {
        let t = receiver("");
        let a = seed_signer("a");
        let mut peers = Peers::default();
        peers.insert("a", a.verifying_key());
        t.set_peers(peers);
        let p = signed(&a, "a", b"{}");
        assert!(matches!(
            t.check_presence(&p, b"{}", Some("garbage")),
            Ok(PresenceTrust::HeldBadCert(_))
        ));
        assert_eq!(
            t.check_presence(&p, b"{}", Some(&fixture("a-cert.pub"))),
            Ok(PresenceTrust::Learned)
        );
        t.set_peers(Peers::default());
        assert!(t.has_valid_key("a", now_ms()), "still certified");
    }

    #[test]
    fn a_revoked_peers_key_stops_verifying() {
        let t = receiver("");
        let a = seed_signer("a");
        let mut peers = Peers::default();
        peers.insert("a", a.verifying_key());
        t.set_peers(peers);
        let msg = signed(&a, "a", b"m");
        assert_eq!(reason(t.verify(&msg, b"m")), "ok");
        t.set_krl(Krl::parse(&format!("key: {}", fixture("a.pub"))).expect("krl"));
        assert_eq!(reason(t.verify(&msg, b"m")), "revoked");
        assert!(!t.has_valid_key("a", now_ms()));
        assert!(!t.valid_hosts(now_ms()).contains("a"));
    }

    #[test]
    fn expiry_is_live_and_old_keys_are_pruned() {
        let t = receiver("");
        let a = seed_signer("a");
        let p = signed(&a, "a", b"{}");
        t.check_presence(&p, b"{}", Some(&fixture("a-cert.pub")))
            .expect("learned");
        assert_eq!(t.next_expiry(now_ms()), None, "a forever certificate");
        // An expired certificate is learned as invalid (its host's messages then name it).
        let t2 = receiver("");
        assert_eq!(
            reason(t2.check_presence(&p, b"{}", Some(&fixture("a-expired-cert.pub")))),
            "cert_expired"
        );
        assert_eq!(reason(t2.verify(&signed(&a, "a", b"m"), b"m")), "cert_expired");
        t2.prune(now_ms());
        assert_eq!(t2.certified_counts(now_ms()), (0, 0), "expired long ago: forgotten");
        assert_eq!(reason(t2.verify(&signed(&a, "a", b"m"), b"m")), "signature");
    }

    #[test]
    fn a_renewal_over_the_same_key_replaces_its_certificate() {
        // a-cert (serial 11) and a-serial-cert (serial 205) certify the same key of host a.
        let t = receiver("");
        let a = seed_signer("a");
        let p = signed(&a, "a", b"{}");
        t.check_presence(&p, b"{}", Some(&fixture("a-cert.pub")))
            .expect("first");
        let p = signed(&a, "a", b"{}");
        assert_eq!(
            t.check_presence(&p, b"{}", Some(&fixture("a-serial-cert.pub"))),
            Ok(PresenceTrust::Learned)
        );
        assert_eq!(t.certified_counts(now_ms()), (1, 1), "one certificate per key");
        t.set_krl(Krl::parse("serial: 205\n").expect("krl"));
        assert!(!t.has_valid_key("a", now_ms()), "the current serial revoked: out");
        assert_eq!(reason(t.verify(&signed(&a, "a", b"m"), b"m")), "revoked");
    }

    #[test]
    fn own_keys_are_always_trusted() {
        let own = Signer::from_seed([9; 32]);
        let t = receiver("");
        let next = Signer::from_seed([10; 32]);
        assert_eq!(reason(t.verify(&signed(&own, "r", b"m"), b"m")), "ok");
        assert_eq!(reason(t.verify(&signed(&next, "r", b"m"), b"m")), "signature");
        t.add_own_key(next.verifying_key());
        assert_eq!(reason(t.verify(&signed(&next, "r", b"m"), b"m")), "ok");
        assert_eq!(reason(t.verify(&signed(&own, "r", b"m"), b"m")), "ok");
        let p = signed(&next, "r", b"{}");
        assert_eq!(t.check_presence(&p, b"{}", Some("garbage")), Ok(PresenceTrust::Held));
    }

    #[test]
    fn certificates_are_read_once() {
        let t = receiver("");
        let text = fixture("a-cert.pub");
        let first = t.cert(&text).expect("reads");
        let again = t.cert(&format!("  {text}  ")).expect("reads");
        assert!(Arc::ptr_eq(&first, &again), "the second read is the cached one");
    }
}
