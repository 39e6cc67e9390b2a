//! When a broker counts as up: its management API answers `GET /api/overview` and its AMQP
//! listener answers the protocol header with `connection.start` (which also names the broker),
//! within a boot deadline per provider — at start and after a restart. A cluster is up once, on
//! top, every node's AMQP listener and management API answer and every node lists every node
//! running, unpartitioned (`cluster/nodes.rs`). The deadlines and the AMQP probe are `boot.rs`'s.

use std::time::Duration;

use super::boot::amqp_answers;
use super::cluster::nodes::Nodes;
use super::error::BrokerError;
use super::flavour::ServerIdentity;
use super::management::{Management, Overview};
use super::provider::Provider;
use super::spec::BrokerSpec;
use super::url::Endpoint;
use crate::timing::wait_for;

/// Waits until the broker at `endpoint` (node 0 of a cluster: `cluster`) counts as up.
pub(super) async fn wait_ready(
    spec: &BrokerSpec,
    provider: &Provider,
    endpoint: &Endpoint,
    cluster: Option<&Nodes>,
    management: &Management,
    deadline: Duration,
) -> Result<(Overview, Option<ServerIdentity>), BrokerError> {
    let addr = endpoint.amqp_addr();
    let what = match cluster {
        None => format!(
            "management GET {}/api/overview and AMQP on {addr} to answer",
            endpoint.http_base
        ),
        Some(_) => format!(
            "management GET {}/api/overview and AMQP on {addr} to answer, and every node to run, clustered",
            endpoint.http_base
        ),
    };
    let outcome = wait_for(&what, deadline, || {
        let addr = &addr;
        async move {
            if let Some(dead) = provider.failure().await {
                return Ok(Some(Err(dead)));
            }
            let overview = management.overview().await.map_err(|e| e.to_string())?;
            let identity = amqp_answers(addr)
                .await
                .map_err(|e| format!("management answers ({}), AMQP not yet: {e}", overview.label()))?;
            if let Some(nodes) = cluster {
                nodes
                    .clustered()
                    .await
                    .map_err(|e| format!("node 0 answers ({}), the cluster not yet: {e}", overview.label()))?;
            }
            Ok(Some(Ok((overview, identity))))
        }
    })
    .await;
    match outcome {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(reason)) => Err(BrokerError::Died {
            spec: spec.label(),
            reason,
            log: provider.log_tail().await,
        }),
        Err(source) => Err(BrokerError::NotReady {
            spec: spec.label(),
            what: provider.describe(endpoint),
            source: Box::new(source),
            log: provider.log_tail().await,
        }),
    }
}
