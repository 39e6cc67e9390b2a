//! `--fleet` as text: the runs beside the model, the trust modes side by side.
//!
//! Why a module: [`crate::fleet::sim_fleet`] measures and [`crate::report::table`] prints the whole report; the
//! fleet's lines grew with every form and trust mode, so they live here, apart from both. Its rows
//! of the goals block are in [`crate::report::goals_table`], beside the goals they print, so that
//! nothing in the fleet imports the report.

use crate::fleet::sim_result::{FleetResult, FleetRun, Trust, off};
use crate::fleet::trust as fleet_trust;

/// A run's form, with `+cert` for a certificate run.
fn label(x: &FleetRun) -> String {
    match x.trust {
        Trust::Peers => x.form.label().to_string(),
        Trust::Certs => format!("{}+cert", x.form.label()),
    }
}

/// The runs of one H as text lines: measured beside the model.
pub fn lines(r: &FleetResult) -> Vec<String> {
    let mut hs: Vec<u64> = r.runs.iter().map(|x| x.heartbeat_ms).collect();
    hs.sort_unstable();
    hs.dedup();
    let opt = |v: Option<f64>| v.map(|x| format!("{x:.0}")).unwrap_or_else(|| "-".into());
    let delta = |m: f64, p: f64| {
        if p > 0.0 {
            format!("{:+.0}%", 100.0 * (m - p) / p)
        } else {
            "-".into()
        }
    };
    let mut out = vec![format!(
        "fleet of simulated hosts + 2 real gateways, {} entities per host, {:.0} s windows, {} simulated hosts \
         verifying; deliveries: {}",
        r.entities,
        r.window_s,
        r.verifying_hosts.map_or("all".to_string(), |k| k.to_string()),
        r.deliveries_counted_as
    )];
    for h in hs {
        out.push(format!("  H = {h} ms"));
        out.push(format!(
            "  {:<15} {:>5} {:>10} {:>10} {:>6} {:>9} {:>9} {:>6} {:>7} {:>11} {:>8} {:>9} {:>12} {:>8} {:>5}  reason",
            "form",
            "N",
            "deliv/s",
            "model",
            "Δ",
            "verif/s",
            "model",
            "Δ",
            "brk %",
            "gw a/b %",
            "gw MiB",
            "listed ms",
            "C-7 ms",
            "backlog",
            "ok"
        ));
        for x in r.runs.iter().filter(|x| x.heartbeat_ms == h) {
            let m = &x.measured;
            let mark = |a: f64, b: f64| if off(a, b) { "!" } else { "" };
            out.push(format!(
                "  {:<15} {:>5} {:>10.0} {:>10.0} {:>6} {:>9.0} {:>9.0} {:>6} {:>7} {:>11} {:>8} {:>9} {:>12} {:>8} {:>5}  {}",
                label(x),
                x.hosts,
                m.deliveries_per_s,
                x.model.deliveries_per_s,
                format!(
                    "{}{}",
                    delta(m.deliveries_per_s, x.model.deliveries_per_s),
                    mark(m.deliveries_per_s, x.model.deliveries_per_s)
                ),
                m.verified_per_host_per_s,
                x.model.per_gateway_msgs_per_s,
                format!(
                    "{}{}",
                    delta(m.verified_per_host_per_s, x.model.per_gateway_msgs_per_s),
                    mark(m.verified_per_host_per_s, x.model.per_gateway_msgs_per_s)
                ),
                opt(m.broker_cpu_pct),
                format!(
                    "{:.1}/{:.1}",
                    m.gateway_a_cpu_pct.unwrap_or(f64::NAN),
                    m.gateway_b_cpu_pct.unwrap_or(f64::NAN)
                ),
                format!(
                    "{:.0}/{:.0}",
                    m.gateway_a_rss_mib.unwrap_or(f64::NAN),
                    m.gateway_b_rss_mib.unwrap_or(f64::NAN)
                ),
                opt(m.new_host_listed_ms),
                match (&m.new_entity_send_outcome, m.new_entity_send_ms) {
                    (Some(o), Some(ms)) if o == "injected" => format!("{ms:.0}"),
                    (Some(o), Some(ms)) => format!("{ms:.0} {o}"),
                    (Some(o), None) => o.clone(),
                    _ => "-".into(),
                },
                format!(
                    "{}/{}",
                    m.real_backlog.map_or("-".into(), |b| b.to_string()),
                    m.sim_backlog_max.map_or("-".into(), |b| b.to_string())
                ),
                if x.keeps_up { "yes" } else { "NO" },
                if x.reasons.is_empty() {
                    "-".to_string()
                } else {
                    x.reasons.join("; ")
                },
            ));
            let (gw, brk) = (x.model.gateway_cpu_pct, x.model.broker_cpu_pct);
            if gw.is_some() || brk.is_some() || m.verify_failures > 0 {
                out.push(format!(
                    "  {:<21} model CPU: gateway {} %, broker {} % (scale-run constants) · bench {} % · machine {:.0} % busy · {} verification failures",
                    "",
                    gw.map_or("-".into(), |v| format!("{v:.1}")),
                    brk.map_or("-".into(), |v| format!("{v:.0}")),
                    opt(m.bench_cpu_pct),
                    100.0 * m.machine_busy,
                    m.verify_failures
                ));
            } else {
                out.push(format!(
                    "  {:<21} bench {} % CPU · machine {:.0} % busy · 0 verification failures",
                    "",
                    opt(m.bench_cpu_pct),
                    100.0 * m.machine_busy
                ));
            }
        }
    }
    out.extend(fleet_trust::lines(r));
    out
}
