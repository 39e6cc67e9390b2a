//! A channel close the gateway asked for is not an error in its log.
//!
//! AMQP has one way to ask whether a queue exists: a *passive* declare, which the broker answers
//! for a missing queue by closing the channel with 404 NOT_FOUND. The migration looks for v1.0.0
//! queues that are usually gone (already migrated, or never there), and lapin logs every channel
//! close with an error code at ERROR ("Channel closed … NOT_FOUND"). A healthy start, and every
//! registration of a pane without a legacy queue, would log an ERROR for an answer the gateway
//! expected (CONTRACT §5: a healthy start logs none; seen on LavinMQ 2.5 and RabbitMQ 3.10 alike).
//!
//! A look registers its channel here for the length of its passive declare ([`LookingFor`]); the
//! log filter drops lapin's ERROR event for *that* channel when the close is a 404
//! ([`is_expected_close`]). Any other close — another channel, another code, the same channel
//! outside the look — is still logged.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// Channel ids with a passive declare in flight, counted (two looks may share an id on two
/// connections).
static LOOKING: Mutex<BTreeMap<u16, usize>> = Mutex::new(BTreeMap::new());

/// Held while a passive declare on `channel` is in flight.
pub struct LookingFor {
    channel: u16,
}

impl LookingFor {
    pub fn start(channel: u16) -> LookingFor {
        if let Ok(mut m) = LOOKING.lock() {
            *m.entry(channel).or_insert(0) += 1;
        }
        LookingFor { channel }
    }
}

impl Drop for LookingFor {
    fn drop(&mut self) {
        if let Ok(mut m) = LOOKING.lock()
            && let Some(n) = m.get_mut(&self.channel)
        {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.channel);
            }
        }
    }
}

fn looking(channel: u16) -> bool {
    LOOKING.lock().map(|m| m.contains_key(&channel)).unwrap_or(false)
}

/// Whether `event` is lapin's "Channel closed" ERROR for a 404 on a channel that is looking for a
/// queue. Only lapin's ERROR events are inspected; everything else is `false` at once.
pub fn is_expected_close(event: &tracing::Event<'_>) -> bool {
    let meta = event.metadata();
    if *meta.level() != tracing::Level::ERROR || !meta.target().starts_with("lapin") {
        return false;
    }
    let mut f = Fields::default();
    event.record(&mut f);
    f.message == "Channel closed" && f.not_found && f.channel.and_then(|c| c.parse::<u16>().ok()).is_some_and(looking)
}

/// The fields of lapin's close event that decide.
#[derive(Default)]
struct Fields {
    message: String,
    channel: Option<String>,
    not_found: bool,
}

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        let text = format!("{value:?}");
        match field.name() {
            "message" => self.message = text,
            "channel" => self.channel = Some(text),
            "method" => self.not_found |= text.contains("reply_code: 404"),
            _ => {}
        }
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_string();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_look_is_counted_per_channel() {
        assert!(!looking(65_000));
        let a = LookingFor::start(65_000);
        let b = LookingFor::start(65_000);
        assert!(looking(65_000));
        drop(a);
        assert!(looking(65_000), "the second look on the same id still runs");
        drop(b);
        assert!(!looking(65_000));
    }
}
