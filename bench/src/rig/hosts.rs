//! The benchmark's hosts: real gateway processes with fake herdrs on one broker vhost.
//!
//! The same pieces a scenario wires (`steps/world.rs`), without cucumber: one key per host, every
//! host's key pinned in every peers file (so hosts started later — the presence probe's — are
//! trusted from the start; [`Fleet::pin_only`] narrows that for certificates), a fake herdr per host, and entities registered through the local API
//! on agent panes of that herdr.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context as _, anyhow};

use fleet_conformance::gateway::{GatewayProcess, GatewaySpec};
use fleet_conformance::herdr::{AgentStatus, FakeHerdr, InputReaction};
use fleet_conformance::keys::HostKey;
use fleet_conformance::mcp::McpClient;

/// One host: its gateway process and its fake herdr.
pub struct BenchHost {
    pub gateway: GatewayProcess,
    pub herdr: FakeHerdr,
}

/// A registered entity.
#[derive(Debug, Clone)]
pub struct Member {
    pub host: String,
    pub gid: String,
    pub token: String,
    pub pane: String,
}

/// Every host of a benchmark run.
pub struct Fleet {
    dir: PathBuf,
    amqp_url: String,
    gateway_cmd: String,
    /// Variables every host's gateway gets (the run's tunables, e.g. `FLEET_HEARTBEAT_MS`).
    env: BTreeMap<String, String>,
    keys: BTreeMap<String, HostKey>,
    /// The hosts whose keys the peers files list (`None`: every host's).
    pinned: Option<Vec<String>>,
    pub hosts: BTreeMap<String, BenchHost>,
}

impl Fleet {
    /// A fleet in `dir` whose gateways connect to `amqp_url`; `hosts` names every host that may
    /// ever be started (their keys are pinned everywhere); every gateway gets `env`.
    pub fn new(
        dir: PathBuf,
        amqp_url: String,
        gateway_cmd: String,
        env: BTreeMap<String, String>,
        hosts: &[String],
    ) -> Fleet {
        let keys = hosts.iter().map(|h| (h.clone(), HostKey::generate(h))).collect();
        Fleet {
            dir,
            amqp_url,
            gateway_cmd,
            env,
            keys,
            pinned: None,
            hosts: BTreeMap::new(),
        }
    }

    /// From now on the peers files list only these hosts' keys (none: `[peers]` alone) — a fleet
    /// whose hosts are trusted through certificates (SPEC §18).
    pub fn pin_only(&mut self, hosts: &[&str]) {
        self.pinned = Some(hosts.iter().map(|h| h.to_string()).collect());
    }

    async fn prepare(&self, host: &str, env: &BTreeMap<String, String>) -> anyhow::Result<(GatewaySpec, FakeHerdr)> {
        let key = self
            .keys
            .get(host)
            .cloned()
            .ok_or_else(|| anyhow!("host {host} was not named when the fleet was made"))?;
        let hdir = self.dir.join(host);
        let herdr = FakeHerdr::start(&hdir.join("herdr"))
            .await
            .with_context(|| format!("starting the fake herdr of {host}"))?;
        // The bench reads inputs, never the call log, which would grow with every status read.
        herdr.forget_calls();
        let spec = GatewaySpec {
            host: host.to_string(),
            command: self.gateway_cmd.clone(),
            amqp_url: self.amqp_url.clone(),
            herdr_socket: herdr.socket_path().to_path_buf(),
            dir: hdir,
            key,
            peers: self
                .keys
                .iter()
                .filter(|(h, _)| self.pinned.as_ref().is_none_or(|p| p.contains(h)))
                .map(|(h, k)| (h.clone(), k.clone()))
                .collect(),
            extra_env: self
                .env
                .iter()
                .chain(env)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        };
        Ok((spec, herdr))
    }

    /// Starts `host` (with `env` over the fleet's variables) and waits for its `/readyz`.
    pub async fn start_host(&mut self, host: &str, env: &BTreeMap<String, String>) -> anyhow::Result<()> {
        let (spec, herdr) = self.prepare(host, env).await?;
        let gateway = GatewayProcess::start(spec).await?;
        self.hosts.insert(host.to_string(), BenchHost { gateway, herdr });
        Ok(())
    }

    /// Spawns `host`'s gateway without waiting for anything (the caller times its boot).
    pub async fn spawn_host(&mut self, host: &str, env: &BTreeMap<String, String>) -> anyhow::Result<()> {
        let (spec, herdr) = self.prepare(host, env).await?;
        let gateway = GatewayProcess::start_unready(spec)?;
        self.hosts.insert(host.to_string(), BenchHost { gateway, herdr });
        Ok(())
    }

    /// The key of `host` (every host named when the fleet was made has one, running or not).
    pub fn key(&self, host: &str) -> Option<&HostKey> {
        self.keys.get(host)
    }

    pub fn host(&self, host: &str) -> anyhow::Result<&BenchHost> {
        self.hosts
            .get(host)
            .ok_or_else(|| anyhow!("host {host} is not running"))
    }

    /// Kills `host`'s gateway and stops its herdr.
    pub async fn stop_host(&mut self, host: &str) {
        if let Some(mut h) = self.hosts.remove(host) {
            h.gateway.kill().await;
            h.herdr.stop().await;
        }
    }

    /// Adds an agent pane on `host` (reacting to input with `reaction`) and registers it.
    pub async fn add(
        &self,
        host: &str,
        role: &str,
        parent: Option<&str>,
        reaction: InputReaction,
    ) -> anyhow::Result<Member> {
        let h = self.host(host)?;
        let agent = if role == "worker" { "claude" } else { "claude-main" };
        let pane = h.herdr.add_agent_pane(agent, AgentStatus::Idle);
        h.herdr.set_on_input(&pane, reaction);
        let (gid, token) = h.gateway.register(role, &pane, &[], parent, None).await?;
        Ok(Member {
            host: host.to_string(),
            gid,
            token,
            pane,
        })
    }

    /// An MCP session acting as `m`.
    pub async fn mcp(&self, m: &Member) -> anyhow::Result<McpClient> {
        let url = self.host(&m.host)?.gateway.mcp_url();
        Ok(McpClient::connect(&url, &m.token).await?)
    }

    /// Stops every host.
    pub async fn shutdown(&mut self) {
        let names: Vec<String> = self.hosts.keys().cloned().collect();
        for h in names {
            self.stop_host(&h).await;
        }
    }
}
