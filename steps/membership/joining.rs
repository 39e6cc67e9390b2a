//! MEM-5: a host started with a CA-signed certificate and listed in no peers file joins the
//! running fleet — no file changed and no gateway restarted elsewhere — and MEM-2's `cert` field:
//! the certificate line carried in every `_gateway` presence, as the file holds it.

use std::time::Duration;

use anyhow::{anyhow, ensure};
use cucumber::{then, when};
use fleet_conformance::envelope::Envelope;
use fleet_conformance::probe::Captured;
use serde_json::Value;

use crate::world::FleetWorld;

use super::{CertPlan, an_hour};

#[when(
    regex = r#"^host "([^"]+)", in no peers file and holding a certificate from "([^"]+)", joins with a main "([^"]+)"$"#
)]
async fn joins(w: &mut FleetWorld, host: String, ca: String, main: String) -> anyhow::Result<()> {
    w.membership.ca(&ca)?;
    ensure!(!w.hosts.contains_key(&host), "host {host:?} already runs");
    w.membership.unlisted.insert(host.clone());
    w.membership.cert_plans.insert(
        host.clone(),
        CertPlan {
            ca,
            validity: an_hour(),
        },
    );
    let others: Vec<(String, Option<u32>)> = w.hosts.iter().map(|(h, x)| (h.clone(), x.gateway.pid())).collect();
    w.start_host(&host).await?;
    w.membership.joined = Some(tokio::time::Instant::now());
    w.add_entity(&host, &main, "main", None, vec![]).await?;
    // "No gateway restarted elsewhere": the others are the processes they were.
    for (h, pid) in others {
        let now = w.host(&h)?.gateway.pid();
        ensure!(
            now == pid,
            "the gateway on {h} is not the process it was ({pid:?} → {now:?})"
        );
    }
    Ok(())
}

fn body(m: &Captured) -> Value {
    serde_json::from_slice(&m.body).unwrap_or(Value::Null)
}

/// MEM-2 / CONTRACT §12: the `_gateway` PRESENCE carries `cert`, the certificate line as the file
/// holds it (whitespace at either end aside), signed with the certified key.
#[then(expr = "the probe saw host {string} carry its certificate in its _gateway presence")]
async fn carries_cert(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    let line = w.membership.cert(&host)?.line.clone();
    let key = super::current_key(w, &host)?.public_base64();
    let roster = w.wire.roster_tap()?;
    let routing = format!("roster.{host}._gateway");
    let (line, routing) = (&line, &routing);
    let m = roster
        .wait_for(
            &format!("a _gateway presence of {host} carrying its certificate"),
            w.heartbeat() * 2 + Duration::from_millis(500),
            |c: &Captured| c.routing_key == *routing && body(c)["cert"].as_str().map(str::trim) == Some(line.as_str()),
        )
        .await
        .map_err(|e| anyhow!("{e}; its certificate: {line}"))?;
    let env = Envelope::from_field_table(&m.headers())?;
    env.verify(&key, &m.body)
        .map_err(|e| anyhow!("the _gateway presence of {host} carrying its certificate: {e}"))?;
    Ok(())
}
