//! How scenarios share one broker: each holds a vhost, and a scenario that restarts the broker
//! must have it to itself — it waits until every other vhost is gone and holds new ones back
//! until its own is deleted (see `super`'s module doc for why this is enforced here).

use std::collections::BTreeSet;
use std::time::Duration;

use crate::timing::scaled;

/// Who uses the broker: the vhosts of running scenarios, and the one (if any) that has the broker
/// to itself (see the module doc).
#[derive(Debug, Default, Clone)]
pub(super) struct Usage {
    pub(super) vhosts: BTreeSet<String>,
    /// The vhost of the scenario that has the broker to itself.
    pub(super) exclusive: Option<String>,
    /// Scenarios waiting to have the broker to themselves: new vhosts wait behind them.
    pub(super) waiting: usize,
}

/// The broker's users, and the rules of sharing it (see the module doc).
pub(super) struct Users {
    pub(super) usage: tokio::sync::watch::Sender<Usage>,
}

impl Default for Users {
    fn default() -> Self {
        Users {
            usage: tokio::sync::watch::Sender::new(Usage::default()),
        }
    }
}

impl Users {
    /// Records `vhost` as in use once no scenario has the broker to itself or waits for that
    /// (`exclusive`: once nothing else is in use, and then as the one that has it to itself).
    /// Fails after the (scaled) `nominal` bound, saying who held the broker.
    pub(super) async fn reserve(&self, vhost: &str, exclusive: bool, nominal: Duration) -> Result<(), String> {
        let mut changes = self.usage.subscribe();
        if exclusive {
            self.usage.send_modify(|u| u.waiting += 1);
        }
        let started = std::time::Instant::now();
        let took = tokio::time::timeout(scaled(nominal), async {
            loop {
                let reserved = self.usage.send_if_modified(|u| {
                    let free = u.exclusive.is_none() && if exclusive { u.vhosts.is_empty() } else { u.waiting == 0 };
                    if free {
                        u.vhosts.insert(vhost.to_string());
                        if exclusive {
                            u.exclusive = Some(vhost.to_string());
                            u.waiting -= 1;
                        }
                    }
                    free
                });
                if reserved {
                    return;
                }
                // The sender lives in `self`: `changed` cannot fail while we wait.
                let _ = changes.changed().await;
            }
        })
        .await;
        if took.is_err() {
            let now = self.usage.borrow().clone();
            if exclusive {
                self.usage.send_modify(|u| u.waiting -= 1);
            }
            return Err(format!(
                "waited {:.0?} for the broker to be {} (in use by {:?}, to itself: {:?}, waiting to have it alone: {})",
                started.elapsed(),
                if exclusive {
                    "this scenario's alone"
                } else {
                    "shared again"
                },
                now.vhosts,
                now.exclusive,
                now.waiting
            ));
        }
        let waited = started.elapsed();
        if waited > Duration::from_millis(100) {
            tracing::info!(%vhost, exclusive, ?waited, "waited for the broker's other users");
        }
        Ok(())
    }

    /// `vhost` is no longer in use (nor has the broker to itself).
    pub(super) fn release(&self, vhost: &str) {
        self.usage.send_modify(|u| {
            u.vhosts.remove(vhost);
            if u.exclusive.as_deref() == Some(vhost) {
                u.exclusive = None;
            }
        });
    }

    pub(super) fn exclusive(&self) -> Option<String> {
        self.usage.borrow().exclusive.clone()
    }

    pub(super) fn others(&self, mine: &str) -> Vec<String> {
        self.usage
            .borrow()
            .vhosts
            .iter()
            .filter(|v| *v != mine)
            .cloned()
            .collect()
    }
}

/// How long a scenario waits for the broker to be shared again, or to be its alone (nominal):
/// a bound for a run that would otherwise hang, far above any scenario's length.
pub(super) const SHARE_WAIT: Duration = Duration::from_secs(30 * 60);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timing::wait_for;

    /// Polls `f` until it is true (a short deadline: these are in-memory state changes).
    async fn soon(what: &str, f: impl Fn() -> bool) {
        wait_for(what, Duration::from_secs(5), || {
            let ok = f();
            async move { Ok(ok.then_some(())) }
        })
        .await
        .expect(what);
    }

    #[tokio::test]
    async fn an_exclusive_user_waits_for_the_others_and_holds_new_ones_back() {
        let users = std::sync::Arc::new(Users::default());
        users
            .reserve("c1", false, Duration::from_secs(5))
            .await
            .expect("shared");
        users
            .reserve("c2", false, Duration::from_secs(5))
            .await
            .expect("shared");
        let u = users.clone();
        let exclusive = tokio::spawn(async move { u.reserve("x", true, Duration::from_secs(10)).await });
        soon("the exclusive user to wait", || users.usage.borrow().waiting == 1).await;
        // A newcomer waits behind the exclusive user, which waits for c1 and c2.
        let u = users.clone();
        let newcomer = tokio::spawn(async move { u.reserve("c3", false, Duration::from_secs(10)).await });
        users.release("c1");
        assert!(!exclusive.is_finished(), "c2 still uses the broker");
        users.release("c2");
        exclusive.await.expect("joined").expect("exclusive");
        assert_eq!(users.exclusive().as_deref(), Some("x"));
        assert_eq!(users.others("x"), Vec::<String>::new());
        assert!(!newcomer.is_finished(), "the newcomer must wait while x has the broker");
        users.release("x");
        newcomer.await.expect("joined").expect("shared again");
        assert_eq!(users.exclusive(), None);
        assert_eq!(users.others("x"), vec!["c3".to_string()]);
    }

    #[tokio::test]
    async fn a_wait_for_the_broker_alone_ends_at_its_deadline_and_says_who_held_it() {
        let users = Users::default();
        users
            .reserve("busy", false, Duration::from_secs(5))
            .await
            .expect("shared");
        let err = users
            .reserve("x", true, Duration::from_millis(50))
            .await
            .expect_err("busy holds the broker");
        assert!(err.contains("busy"), "{err}");
        // Given up: it no longer holds newcomers back.
        users
            .reserve("c", false, Duration::from_millis(50))
            .await
            .expect("shared");
    }
}
