//! The simulated fleet's settings and findings: the forms and trust modes a run measures, what
//! each run measured beside what the model predicted, and whether it kept up.
//!
//! Why a module: the runs ([`crate::fleet::sim_fleet`]), the trust comparison
//! ([`crate::fleet::trust`]), the fleet's lines ([`crate::fleet::table`]) and the goals all read
//! these types; with them here, at the bottom of the fleet, none of those imports another to
//! reach them. The trust modes ([`Trust`]) and a timed revocation ([`Revocation`]) are part of a
//! run's settings and findings, so they are here too, not with the certificate machinery.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::fleet::presence_model::{self, Model};

/// The two real gateways of every run.
pub const REAL: [&str; 2] = ["gw-a", "gw-b"];

/// How the real gateways come to trust the other hosts of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Trust {
    /// Every host's key pinned in the real gateways' peers file (SPEC §3.1).
    #[default]
    Peers,
    /// No host in any peers file: each carries an OpenSSH host certificate from the fleet CA in
    /// its `_gateway` presence (SPEC §18, MEM-2).
    Certs,
}

impl Trust {
    pub fn label(self) -> &'static str {
        match self {
            Trust::Peers => "peers",
            Trust::Certs => "certs",
        }
    }

    /// `peers`, `certs` or `both` (peers first).
    pub fn parse_list(s: &str) -> Result<Vec<Trust>, String> {
        match s {
            "peers" => Ok(vec![Trust::Peers]),
            "certs" => Ok(vec![Trust::Certs]),
            "both" => Ok(vec![Trust::Peers, Trust::Certs]),
            other => Err(format!("--fleet-trust: {other:?} is not peers, certs or both")),
        }
    }

    /// The order of round `round` of `trusts`: every other round reversed (A B B A A B …), so a
    /// load that drifts during the invocation weighs on both modes alike.
    pub fn interleaved(trusts: &[Trust], round: usize) -> Vec<Trust> {
        let mut order = trusts.to_vec();
        if round % 2 == 1 {
            order.reverse();
        }
        order
    }
}

/// A revocation timed after a certificate run's window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Revocation {
    /// The simulated host revoked, and its certificate's serial.
    pub host: String,
    pub serial: u64,
    /// Rename of the revocation list → the first dead letter of that host's messages from real
    /// gateway a's / b's `roster.<host>` queue on `bridge.dlx`, `x-death` reason `rejected`.
    pub rejected_a_ms: Option<f64>,
    pub rejected_b_ms: Option<f64>,
    /// Rename → the host's `_gateway` entry gone from real gateway a's / b's `GET /v1/roster`.
    pub dropped_a_ms: Option<f64>,
    pub dropped_b_ms: Option<f64>,
    /// How long the bench waited, ms.
    pub waited_ms: f64,
    /// Presence messages the revoked host sent from the rename on (one every [`crate::fleet::trust::PROBE_EVERY`]).
    pub sent: u64,
    /// Whether both real gateways listed the host before the rename (else `dropped_*` say nothing).
    pub listed_before: bool,
}

impl Revocation {
    /// The later of both gateways (`None` unless both did).
    fn both(a: Option<f64>, b: Option<f64>) -> Option<f64> {
        Some(a?.max(b?))
    }

    /// Rename → the first of the host's messages rejected on every real gateway.
    pub fn rejected_everywhere_ms(&self) -> Option<f64> {
        Self::both(self.rejected_a_ms, self.rejected_b_ms)
    }

    /// Rename → the host dropped from every real gateway's roster.
    pub fn dropped_everywhere_ms(&self) -> Option<f64> {
        Self::both(self.dropped_a_ms, self.dropped_b_ms)
    }
}

/// How every host of a run heartbeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Form {
    /// PRB-1: one `_gateway` PRESENCE per host per H listing every entity.
    Batched,
    /// PRS-1: one PRESENCE per entity plus the `_gateway` one, per host per H.
    PerEntity,
}

impl Form {
    pub fn label(self) -> &'static str {
        match self {
            Form::Batched => "batched",
            Form::PerEntity => "per-entity",
        }
    }

    /// `batched`, `per-entity` or `both`.
    pub fn parse_list(s: &str) -> Result<Vec<Form>, String> {
        match s {
            "batched" => Ok(vec![Form::Batched]),
            "per-entity" => Ok(vec![Form::PerEntity]),
            "both" => Ok(vec![Form::Batched, Form::PerEntity]),
            other => Err(format!("--fleet-form: {other:?} is not batched, per-entity or both")),
        }
    }
}

/// What `--fleet` runs.
#[derive(Debug, Clone)]
pub struct FleetSettings {
    /// N, hosts in all (the two real gateways included), one run per level.
    pub hosts: Vec<usize>,
    /// E, entities per host (real and simulated).
    pub entities: usize,
    /// H values, one table each.
    pub heartbeats_ms: Vec<u64>,
    pub forms: Vec<Form>,
    /// The measuring window per run.
    pub window: Duration,
    /// AMQP connections the simulated hosts share.
    pub connections: usize,
    /// Simulated hosts that verify what they receive (the others count and ack it); `None`: all.
    /// On one machine every simulated host's verifications share the cores with the broker and
    /// the real gateways, which a real fleet spreads over N machines.
    pub verifying_hosts: Option<usize>,
    /// How the real gateways trust the other hosts: one run of each per (form, H, N) and round.
    pub trusts: Vec<Trust>,
    /// Rounds of `trusts` per (form, H, N), their order alternating ([`Trust::interleaved`]).
    pub repeats: usize,
}

/// Everything `--fleet` measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FleetResult {
    pub entities: usize,
    /// Simulated hosts that verified what they received (`None`: all of them).
    #[serde(default)]
    pub verifying_hosts: Option<usize>,
    pub window_s: f64,
    /// How the broker deliveries were counted.
    pub deliveries_counted_as: String,
    pub runs: Vec<FleetRun>,
}

/// One (form, H, N).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FleetRun {
    pub form: Form,
    /// Peers file or certificates (SPEC §18).
    #[serde(default)]
    pub trust: Trust,
    pub heartbeat_ms: u64,
    /// N, the two real gateways included.
    pub hosts: usize,
    pub entities: usize,
    pub measured: Measured,
    pub model: Predicted,
    /// Received ≥ 75 % of the model's rate, no roster backlog of a round or more at the end, a
    /// new host listed by both real gateways within 2H.
    pub keeps_up: bool,
    /// Why a figure is off the model by more than 25 %, or why the run did not keep up.
    pub reasons: Vec<String>,
}

/// What one run measured.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Measured {
    pub window_s: f64,
    /// Broker deliveries/s on `bridge.roster`: the simulated hosts' count × N/(N−2).
    pub deliveries_per_s: f64,
    /// PRESENCE messages each verifying simulated host received and verified per second (mean).
    pub verified_per_host_per_s: f64,
    /// PRESENCE messages each simulated host received per second (mean, verifying or not).
    #[serde(default)]
    pub received_per_host_per_s: f64,
    /// Deliveries that failed verification (any: a bug of the bench or the gateway).
    pub verify_failures: u64,
    /// PRESENCE messages the simulated hosts published per second.
    pub sim_published_per_s: f64,
    /// % of one core over the window (`None` without a pid).
    pub broker_cpu_pct: Option<f64>,
    pub gateway_a_cpu_pct: Option<f64>,
    pub gateway_b_cpu_pct: Option<f64>,
    /// This process (every simulated host: signing, verifying, AMQP).
    pub bench_cpu_pct: Option<f64>,
    /// The machine's busy share of all cores (0..1), other users' work included.
    pub machine_busy: f64,
    pub gateway_a_rss_mib: Option<f64>,
    pub gateway_b_rss_mib: Option<f64>,
    /// Messages ready in the real gateways' `roster.<host>` queues at the end of the window.
    pub real_backlog: Option<u64>,
    /// The most messages ready in any simulated host's queue at the end of the window.
    pub sim_backlog_max: Option<u64>,
    /// Presence messages the real gateways rejected during the window (dead letters from their
    /// roster queues, SIG-5): any is a bug of the bench's credentials or of the gateway.
    #[serde(default)]
    pub real_rejected: Option<u64>,
    /// Start of one more simulated host → its `_gateway` listed by gateway a, b; and both.
    pub new_host_listed_a_ms: Option<f64>,
    pub new_host_listed_b_ms: Option<f64>,
    pub new_host_listed_ms: Option<f64>,
    /// [C-7] under this load: the new host's first entity SENDs to a worker on gateway a right
    /// after its first heartbeat; what came back to it (`injected`, `failed:<reason>`, `none`)…
    pub new_entity_send_outcome: Option<String>,
    /// … and when, ms from the new host's start (`None` when nothing came back).
    pub new_entity_send_ms: Option<f64>,
    /// A certificate run's revocation, timed after the window and the new host.
    #[serde(default)]
    pub revocation: Option<Revocation>,
}

/// [`presence_model`]'s prediction for the same N, E, H.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Predicted {
    pub deliveries_per_s: f64,
    pub per_gateway_msgs_per_s: f64,
    /// From the scale run's per-message constants, when this run measured them.
    pub gateway_cpu_pct: Option<f64>,
    pub broker_cpu_pct: Option<f64>,
}

impl Predicted {
    pub fn of(form: Form, hosts: usize, entities: usize, heartbeat_ms: u64, model: Option<&Model>) -> Predicted {
        let h = heartbeat_ms as f64 / 1e3;
        let batched = form == Form::Batched;
        let (_, deliveries, per_gateway) = presence_model::counts(hosts as u64, entities as u64, h, batched);
        let cost = model.map(|m| presence_model::cost(&m.constants, h, hosts as u64, entities as u64, batched));
        Predicted {
            deliveries_per_s: deliveries,
            per_gateway_msgs_per_s: per_gateway,
            gateway_cpu_pct: cost.as_ref().map(|c| 100.0 * c.per_gateway_cores),
            broker_cpu_pct: cost.and_then(|c| c.broker_cores).map(|c| 100.0 * c),
        }
    }
}

/// Off by more than 25 %.
pub fn off(measured: f64, predicted: f64) -> bool {
    predicted > 0.0 && ((measured - predicted) / predicted).abs() > 0.25
}

impl FleetRun {
    /// Judges the measured figures against the model: keeps up, and why not / why off.
    pub fn judge(form: Form, heartbeat_ms: u64, hosts: usize, entities: usize, m: Measured, p: Predicted) -> FleetRun {
        let mut reasons = Vec::new();
        let round = match form {
            Form::Batched => hosts as u64,
            Form::PerEntity => hosts as u64 * (entities as u64 + 1),
        };
        let behind_real = m.real_backlog.is_some_and(|b| b >= round);
        let behind_sim = m.sim_backlog_max.is_some_and(|b| b >= round);
        let slow = m.verified_per_host_per_s < 0.75 * p.per_gateway_msgs_per_s;
        let listed = m.new_host_listed_ms.is_some_and(|ms| ms <= 2.0 * heartbeat_ms as f64);
        if behind_real {
            reasons.push(format!(
                "real gateways {} msgs behind at the end (a round is {round})",
                m.real_backlog.unwrap_or_default()
            ));
        }
        if let Some(n) = m.real_rejected.filter(|n| *n > 0) {
            reasons.push(format!(
                "the real gateways rejected {n} presence messages in the window"
            ));
        }
        if behind_sim {
            reasons.push(format!(
                "a simulated host {} msgs behind (this process cannot verify the rate)",
                m.sim_backlog_max.unwrap_or_default()
            ));
        }
        if off(m.deliveries_per_s, p.deliveries_per_s) || off(m.verified_per_host_per_s, p.per_gateway_msgs_per_s) {
            let why = if behind_sim || behind_real || m.machine_busy > 0.9 {
                format!(
                    "the machine is saturated ({:.0} % of its cores busy): the broker or the verifiers fall behind",
                    100.0 * m.machine_busy
                )
            } else if m.verified_per_host_per_s > p.per_gateway_msgs_per_s {
                "more than the model: deltas or the registration's up presences fell in the window".into()
            } else {
                "fewer rounds fell in the window than H divides into it (phase)".into()
            };
            reasons.push(why);
        }
        if let Some(o) = m.new_entity_send_outcome.as_deref().filter(|o| *o != "injected") {
            reasons.push(format!("[C-7]: a new entity's first SEND came back {o}"));
        }
        if !listed {
            reasons.push(match m.new_host_listed_ms {
                Some(ms) => format!("a new host took {ms:.0} ms to be listed everywhere (> 2H)"),
                None => "a new host was not listed everywhere within the wait".into(),
            });
        }
        FleetRun {
            form,
            trust: Trust::Peers,
            heartbeat_ms,
            hosts,
            entities,
            keeps_up: !slow && !behind_real && !behind_sim && listed,
            measured: m,
            model: p,
            reasons,
        }
    }
}

impl FleetResult {
    /// The first peers-file run at exactly this size, if there was one.
    pub fn at(&self, form: Form, hosts: usize, entities: usize, heartbeat_ms: u64) -> Option<&FleetRun> {
        self.runs.iter().find(|r| {
            (r.form, r.trust, r.hosts, r.entities, r.heartbeat_ms)
                == (form, Trust::Peers, hosts, entities, heartbeat_ms)
        })
    }

    /// The largest N of `form` with E `entities` at H that kept up, if any did.
    pub fn largest_keeping_up_at(&self, form: Form, entities: usize, heartbeat_ms: u64) -> Option<usize> {
        self.runs
            .iter()
            .filter(|r| r.form == form && r.trust == Trust::Peers && r.entities == entities)
            .filter(|r| r.heartbeat_ms == heartbeat_ms && r.keeps_up)
            .map(|r| r.hosts)
            .max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_that_falls_behind_does_not_keep_up_and_says_why() {
        let p = Predicted::of(Form::PerEntity, 200, 50, 5_000, None);
        assert_eq!(p.deliveries_per_s, 200.0 * 200.0 * 51.0 / 5.0);
        let m = Measured {
            deliveries_per_s: p.deliveries_per_s / 3.0,
            verified_per_host_per_s: p.per_gateway_msgs_per_s / 3.0,
            machine_busy: 0.99,
            real_backlog: Some(50_000),
            sim_backlog_max: Some(20),
            new_host_listed_ms: Some(30_000.0),
            ..Measured::default()
        };
        let r = FleetRun::judge(Form::PerEntity, 5_000, 200, 50, m, p);
        assert!(!r.keeps_up);
        let why = r.reasons.join("; ");
        assert!(
            why.contains("behind") && why.contains("saturated") && why.contains("> 2H"),
            "{why}"
        );
        let p = Predicted::of(Form::Batched, 50, 50, 5_000, None);
        assert_eq!((p.deliveries_per_s, p.per_gateway_msgs_per_s), (500.0, 10.0));
        let m = Measured {
            deliveries_per_s: 480.0,
            verified_per_host_per_s: 9.6,
            real_backlog: Some(0),
            sim_backlog_max: Some(0),
            new_host_listed_ms: Some(40.0),
            ..Measured::default()
        };
        let r = FleetRun::judge(Form::Batched, 5_000, 50, 50, m, p);
        assert!(r.keeps_up && r.reasons.is_empty(), "{r:?}");
    }
}
