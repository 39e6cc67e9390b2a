//! Which URLs a host's gateway is given on a cluster (CLU-1): every node's, under one login,
//! rotated per host so that the hosts start on different nodes.
//!
//! Exists as a leaf below the world, which gives every gateway of a cluster profile these URLs
//! when it starts ([`crate::world::FleetWorld::host_spec`]): kept with the cluster steps, the
//! world would import the steps that import the world.

use fleet_conformance::broker::Broker;
use fleet_conformance::broker::url::percent_encode;

/// `amqp://user:pass@node/vhost` for every node of `broker`, rotated by `offset`, comma-joined;
/// under `login` (user, password), else the broker's admin login.
pub fn url_list(broker: &Broker, vhost: &str, login: Option<&(String, String)>, offset: usize) -> String {
    let n = broker.node_count();
    let urls: Vec<String> = (0..n)
        .map(|i| {
            let ep = broker.node_endpoint((i + offset) % n);
            let (user, password) = match login {
                Some((u, p)) => (u.as_str(), p.as_str()),
                None => (ep.user.as_str(), ep.password.as_str()),
            };
            format!(
                "amqp://{}:{}@{}/{}",
                percent_encode(user),
                percent_encode(password),
                ep.amqp_addr(),
                percent_encode(vhost)
            )
        })
        .collect();
    urls.join(",")
}

/// Which node a host's URL list starts with: hosts `a`, `b`, `c` … on nodes 2, 3, 1 …
pub fn host_offset(host: &str) -> usize {
    host.bytes().next().map_or(0, |b| usize::from(b.wrapping_sub(b'a')) + 1)
}
