//! MEM-5: a host started with a CA-signed certificate and listed in no peers file joins the
//! running fleet — no file changed and no gateway restarted elsewhere — and MEM-2's `cert` field:
//! the certificate line carried in every `_gateway` presence, as the file holds it.

use std::time::Duration;

use anyhow::{anyhow, ensure};
use cucumber::{then, when};
use fleet_conformance::envelope::Envelope;
use fleet_conformance::probe::Captured;
use fleet_conformance::timing::wait_for;
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

/// MEM-2 / CONTRACT §12: every `_gateway` PRESENCE carries `cert`, the certificate line as the file
/// holds it (whitespace at either end aside), signed with the certified key — the first one at
/// its connect and each heartbeat after it (judged on the first three seen).
#[then(expr = "the probe saw host {string} carry its certificate in its _gateway presence")]
async fn carries_cert(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    let line = w.membership.cert(&host)?.line.clone();
    let key = super::current_key(w, &host)?.public_base64();
    let roster = w.wire.roster_tap()?;
    let routing = format!("roster.{host}._gateway");
    let (line, routing, key, host) = (&line, &routing, &key, &host);
    wait_for(
        &format!("three _gateway presences of {host}"),
        w.heartbeat() * 3 + Duration::from_millis(500),
        || {
            let roster = roster.clone();
            async move {
                let all = roster.fetch().await.map_err(|e| e.to_string())?;
                let mine: Vec<&Captured> = all
                    .iter()
                    .filter(|c| c.routing_key == *routing && body(c)["state"] == "up")
                    .take(3)
                    .collect();
                for c in &mine {
                    let b = body(c);
                    if b["cert"].as_str().map(str::trim) != Some(line.as_str()) {
                        return Ok(Some(Err(anyhow!(
                            "a _gateway presence of {host} carries cert {:?}, not its certificate {line:?}",
                            b["cert"]
                        ))));
                    }
                    let env = Envelope::from_field_table(&c.headers()).map_err(|e| e.to_string())?;
                    if let Err(e) = env.verify(key, &c.body) {
                        return Ok(Some(Err(anyhow!(
                            "a _gateway presence of {host} carrying its certificate: {e}"
                        ))));
                    }
                }
                if mine.len() == 3 {
                    Ok(Some(Ok(())))
                } else {
                    Err(format!("{} _gateway presence(s) of {host} so far", mine.len()))
                }
            }
        },
    )
    .await?
}
