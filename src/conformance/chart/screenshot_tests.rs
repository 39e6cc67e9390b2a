//! The sequence chart judged in a real browser: a report with one failed scenario whose timeline
//! is a fixture (`forward_path.timeline.json`: a real run's recording with a failure added by
//! hand) is rendered, headless Chromium (Debian's `chromium`, installed by `scripts/setup`)
//! screenshots it, and the picture must hold the chart's colours: the failing step's red line,
//! the blue SEND, the green inject. An empty chart, or one the browser cannot draw, fails.
//!
//! `FLEET_CHART_SCREENSHOT=path.png` keeps the screenshot (`docs/sequence-chart.png` is one).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::conformance::html::render;
use crate::conformance::registry::Level;
use crate::conformance::reports::RunInfo;
use crate::conformance::verdict::{BrokerRun, Cell, Judgement, Outcome, Row, RunVerdict, ScenarioResult, Verdict};

const FIXTURE: &str = include_str!("forward_path.timeline.json");
const BROKER: &str = "process:rabbitmq";
/// The screenshot's size (CSS pixels at scale 1).
const W: u32 = 1400;
const H: u32 = 1300;

fn judgement() -> (RunInfo, Judgement) {
    let failing = ScenarioResult {
        name: "an idle worker gets the brief once and the sender learns it landed".into(),
        file: "features/forward_path.feature".into(),
        line: 15,
        tags: vec!["FWD-1".into()],
        outcome: Outcome::Failed,
        error: Some(
            "Then the send of \"lead\" returns \"injected\" within 3 seconds\nthe send returned inject_timeout".into(),
        ),
        log: None,
    };
    let j = Judgement {
        brokers: vec![BrokerRun {
            label: BROKER.into(),
            kind: "rabbitmq".into(),
            version: Some("RabbitMQ 3.10.8".into()),
            error: None,
            scenarios: vec![failing.clone()],
            left_out: Vec::new(),
        }],
        requirements: vec![Row {
            id: "FWD-1".into(),
            level: Level::Must,
            section: "5. Forward path".into(),
            text: "An idle worker gets each brief once, and its sender learns it landed.".into(),
            selected: true,
            cells: vec![Cell {
                broker: BROKER.into(),
                verdict: Verdict::Fail,
                passed: 0,
                failed: 1,
                reason: None,
                needs: None,
                known_failure: None,
                counts: true,
                failing: vec![failing],
            }],
        }],
        stale_baseline: Vec::new(),
        unconfirmed_baseline: Vec::new(),
        problems: vec!["FWD-1 (MUST) fails on process:rabbitmq".into()],
        partial: false,
        left_out: Vec::new(),
        unjudged: Vec::new(),
        under_review: Vec::new(),
        verdict: RunVerdict::Fail,
        passed: false,
    };
    let info = RunInfo {
        suite: "fleet-conformance".into(),
        suite_commit: None,
        gateway_command: "fleet-gateway".into(),
        gateway_version: None,
        tags: None,
        cucumber_tags: None,
        capabilities: Vec::new(),
        baseline: None,
        strict: false,
        time_scale: 1.0,
        started_at: "2026-12-04T17:00:00Z".into(),
        finished_at: "2026-12-04T17:01:00Z".into(),
        duration_s: 60.0,
    };
    (info, j)
}

/// The report with its timeline, written into a fresh directory: (directory, page).
fn report(fixture: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("fleet-chart-{}", uuid::Uuid::new_v4().simple()));
    let rel = super::rel_path(BROKER, "features/forward_path.feature", 15);
    let at = dir.join(&rel);
    std::fs::create_dir_all(at.parent().expect("a logs dir")).expect("temp dir");
    std::fs::write(&at, fixture).expect("timeline");
    let (info, j) = judgement();
    let page = dir.join("conformance.html");
    std::fs::write(&page, render(&info, &j, &dir)).expect("page");
    (dir, page)
}

/// Headless Chromium's screenshot of `page` (opened at FWD-1, whose detail row holds the chart).
fn screenshot(page: &Path, png: &Path) {
    let browser = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .expect("no chromium: scripts/setup installs Debian's `chromium` package");
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            &format!("--window-size={W},{H}"),
            &format!("--screenshot={}", png.display()),
            &format!("file://{}#FWD-1", page.display()),
        ])
        .output()
        .expect("chromium runs");
    assert!(
        out.status.success() && png.is_file(),
        "chromium made no screenshot: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Pixels near each colour (RGB), counted over the whole picture: (width, height, counts).
fn colours(png: &Path, wanted: &[[u8; 3]]) -> (u32, u32, Vec<usize>) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(png).expect("png")));
    let mut reader = decoder.read_info().expect("a png");
    let mut buf = vec![0; reader.output_buffer_size().expect("a size")];
    let info = reader.next_frame(&mut buf).expect("a frame");
    let channels = info.color_type.samples();
    let mut counts = vec![0; wanted.len()];
    for px in buf[..info.buffer_size()].chunks(channels) {
        for (i, c) in wanted.iter().enumerate() {
            if px.iter().zip(c).all(|(a, b)| a.abs_diff(*b) <= 10) {
                counts[i] += 1;
            }
        }
    }
    (info.width, info.height, counts)
}

/// The failing step's red, the SEND's blue, the inject's green (`chart::colour`).
const RED: [u8; 3] = [0xc6, 0x28, 0x28];
const BLUE: [u8; 3] = [0x15, 0x65, 0xc0];
const GREEN: [u8; 3] = [0x00, 0x69, 0x5c];

fn shoot(fixture: &str, keep: bool) -> (u32, u32, Vec<usize>) {
    let (dir, page) = report(fixture);
    let png = dir.join("shot.png");
    screenshot(&page, &png);
    if keep && let Some(keep) = std::env::var_os("FLEET_CHART_SCREENSHOT") {
        std::fs::copy(&png, keep).expect("keeping the screenshot");
    }
    let seen = colours(&png, &[RED, BLUE, GREEN]);
    let _ = std::fs::remove_dir_all(&dir);
    seen
}

#[test]
fn a_failed_scenario_shows_its_chart_in_a_real_browser() {
    let (w, h, counts) = shoot(FIXTURE, true);
    eprintln!("red, blue, green pixels: {counts:?}");
    assert_eq!((w, h), (W, H), "the screenshot's size");
    let [red, blue, green] = counts[..] else {
        panic!("three counts");
    };
    // The red line spans every lane (~900 px × 2.5 px); arrows and lane headers hundreds each.
    assert!(red > 1_500, "the failing step's red line: {red} red pixels");
    assert!(blue > 260, "SEND arrows and gateway lanes: {blue} blue pixels");
    assert!(green > 150, "the inject into the pane: {green} green pixels");
}

#[test]
fn a_report_without_its_timeline_draws_no_chart() {
    // The control: the same page with no events, no lanes and no failure shows none of them.
    let mut t: crate::timeline::Timeline = serde_json::from_str(FIXTURE).expect("fixture");
    t.events.clear();
    t.lanes.clear();
    t.failure = None;
    let (_, _, counts) = shoot(&serde_json::to_string(&t).expect("json"), false);
    assert!(counts[0] < 600 && counts[2] < 50, "{counts:?}");
}
