//! The cluster over `amqps://` (CLU-1: "the TLS variables apply to each" node of the list).
//!
//! Exists because every other cluster scenario dials plain `amqp://`, so a gateway that applies
//! `FLEET_TLS_CA_FILE` to the first node of its list only (or verifies the first node only) would
//! pass them all. Here every node is reached over TLS, and one host's list starts with a node that
//! does not answer followed by an endpoint whose certificate another CA signed
//! ([`RogueEndpoint`]): the gateway must get past both to a real node, verified against the CA it
//! was given, and must never complete a TLS session with the endpoint the CA did not sign.

use anyhow::{anyhow, ensure};
use cucumber::{given, then};
use fleet_conformance::broker::url::percent_encode;
use fleet_conformance::tls::RogueEndpoint;

use super::host_offset;
use crate::world::FleetWorld;

/// `amqps://login@addr/vhost`.
fn amqps(login: &(String, String), addr: &str, vhost: &str) -> String {
    format!(
        "amqps://{}:{}@{addr}/{}",
        percent_encode(&login.0),
        percent_encode(&login.1),
        percent_encode(vhost)
    )
}

/// Every node's `amqps://` URL under `host`'s own login, rotated for `host` (as the plain lists
/// are), and the CA that signed the nodes' certificate.
async fn node_urls(
    w: &mut FleetWorld,
    host: &str,
) -> anyhow::Result<(Vec<String>, std::path::PathBuf, (String, String))> {
    let vhost = w.vhost().await?;
    let login = crate::security::provision_login(w, host).await?;
    let suite = w.suite()?;
    let broker = &suite.broker;
    let n = broker.node_count();
    let offset = host_offset(host);
    let mut urls = Vec::with_capacity(n);
    for k in 0..n {
        let i = (k + offset) % n;
        let t = broker.node_tls(i).ok_or_else(|| {
            anyhow!(
                "node {} of {} has no amqps:// listener (the suite's process and container clusters give every node one; a url: cluster does not)",
                i + 1,
                broker.spec()
            )
        })?;
        urls.push(amqps(&login, &format!("{}:{}", t.host, t.port), &vhost));
    }
    let ca = broker
        .tls()
        .map(|t| t.ca_cert.clone())
        .ok_or_else(|| anyhow!("broker {} has no amqps:// listener", broker.spec()))?;
    Ok((urls, ca, login))
}

fn set_env(w: &mut FleetWorld, host: &str, urls: &[String], ca: &std::path::Path) {
    let env = w.host_env.entry(host.to_string()).or_default();
    env.insert("FLEET_AMQP_URL".into(), urls.join(","));
    env.insert("FLEET_TLS_CA_FILE".into(), ca.display().to_string());
}

#[given(regex = r#"^host "([^"]+)" connects over amqps to every node of the cluster, trusting the broker's CA$"#)]
async fn every_node_tls(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    let (urls, ca, _) = node_urls(w, &host).await?;
    set_env(w, &host, &urls, &ca);
    Ok(())
}

#[given(
    regex = r#"^host "([^"]+)" connects over amqps to a node that does not answer, then to a node whose certificate another CA signed, then to every node of the cluster, trusting the broker's CA$"#
)]
async fn rogue_second(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    let (urls, ca, login) = node_urls(w, &host).await?;
    let vhost = w.vhost().await?;
    // Nothing listens there: a node that is down.
    let silent = fleet_conformance::ports::free_port()?;
    let rogue = RogueEndpoint::start(&w.dir.join(format!("{host}-rogue-node"))).await?;
    let mut list = vec![
        amqps(&login, &format!("127.0.0.1:{silent}"), &vhost),
        amqps(&login, &format!("127.0.0.1:{}", rogue.port), &vhost),
    ];
    list.extend(urls);
    set_env(w, &host, &list, &ca);
    w.cluster.rogue = Some(rogue);
    w.notes.unhealthy_starts.insert(
        host,
        "its list starts with a node that does not answer and one whose certificate another CA signed".into(),
    );
    Ok(())
}

/// SEC-1 per node (CLU-1): the endpoint whose certificate the CA did not sign saw no completed
/// TLS session (a client that completes it accepted the certificate; one that refuses it ends
/// the handshake with an alert). Only one host was given the endpoint, so whatever it saw is
/// that host's gateway's.
#[then(
    regex = r#"^the node whose certificate another CA signed completed no TLS session with the gateway on "([^"]+)"$"#
)]
async fn rogue_refused(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    let rogue = w
        .cluster
        .rogue
        .as_mut()
        .ok_or_else(|| anyhow!("no host was given a node with another CA's certificate"))?;
    ensure!(rogue.alive(), "the endpoint with another CA's certificate stopped");
    ensure!(
        rogue.sessions() == 0 && !rogue.amqp_seen(),
        "CLU-1/SEC-1: the gateway on {host} completed {} TLS session(s) with a node whose certificate the CA it was given did not sign{}",
        rogue.sessions(),
        if rogue.amqp_seen() {
            ", and spoke AMQP over it"
        } else {
            ""
        }
    );
    let (refusals, port, last) = (rogue.refusals(), rogue.port, rogue.last_error());
    let log = w.host(&host)?.gateway.log();
    let named = log.lines().filter(|l| l.contains(&format!(":{port}"))).count();
    println!(
        "reference behaviour (not judged): that node saw {refusals} handshake(s) fail (last: {last:?}); the gateway on {host} logged {named} line(s) naming it{}",
        log.lines()
            .find(|l| l.contains(&format!(":{port}")))
            .map(|l| format!(", e.g. {l}"))
            .unwrap_or_default()
    );
    Ok(())
}
