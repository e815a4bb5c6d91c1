//! A small benchmark harness: our call against the raw call, interleaved in the same process.
//!
//! Each benchmark binary (`tests/benches/*.rs`, `harness = false`) measures pairs with
//! [`compare`] and prints them with [`print_table`]. Rounds of the two sides alternate so that
//! clock changes and other load hit both alike; the reported time is the median round, and the
//! paired ratio is the median, over rounds, of the ratio of one round's two adjacent blocks
//! (drift that moves both sides of a round alike cancels in it).

use std::hint::black_box;
use std::time::Instant;

/// One measured pair.
#[derive(Clone, Debug)]
pub struct Row {
    /// What was measured.
    pub name: String,
    /// The unit per operation: `ns` for time, `GB/s` for bandwidth.
    pub unit: &'static str,
    /// Ours, per operation (or throughput).
    pub ours: f64,
    /// The raw `-sys` (or C) call, per operation (or throughput).
    pub raw: f64,
    /// The median over rounds of each round's ours/raw, in the direction of [`Row::ratio`]
    /// (throughput rows invert it); NaN where the two sides were not timed in pairs.
    pub paired: f64,
}

impl Row {
    /// A row of times from per-round nanoseconds of each side, `ours[i]` and `raw[i]` timed
    /// next to each other: the median of each side and the median of the per-round ratios.
    pub fn from_rounds(name: impl Into<String>, ours: Vec<f64>, raw: Vec<f64>) -> Row {
        let ratios = ours.iter().zip(&raw).map(|(a, b)| a / b).collect();
        Row { name: name.into(), unit: "ns", ours: median(ours), raw: median(raw), paired: median(ratios) }
    }

    /// A row that `CUDA_BENCH_ONLY` left out: every figure reads NaN.
    pub fn skipped(name: impl Into<String>) -> Row {
        Row { name: name.into(), unit: "ns", ours: f64::NAN, raw: f64::NAN, paired: f64::NAN }
    }

    /// ours / raw: above 1 means ours is slower for times, faster for throughput.
    pub fn ratio(&self) -> f64 {
        if self.raw == 0.0 { f64::NAN } else { self.ours / self.raw }
    }
}

/// The median of `v` (the upper one of an even count); NaN for none.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Whether a row is measured: all are, unless `CUDA_BENCH_ONLY` is set, which keeps the rows
/// whose name contains it (to profile one row alone, under `perf record` say).
pub fn selected(name: &str) -> bool {
    std::env::var("CUDA_BENCH_ONLY").map_or(true, |only| name.contains(&only))
}

/// Times `ours` and `raw`, each called `iters` times per round, over `rounds` alternating
/// rounds; returns the median nanoseconds per call of each. A row that `CUDA_BENCH_ONLY`
/// leaves out is not run and reads NaN.
pub fn compare(name: &str, rounds: usize, iters: u64, ours: impl FnMut(), raw: impl FnMut()) -> Row {
    compare_settled(name, rounds, iters, ours, raw, || {})
}

/// Like [`compare`], with `settle` run (untimed) after every timed block of either side: for
/// calls that queue work, so that each block starts from an empty queue rather than from the
/// back-pressure the other side left (`settle` synchronizes the stream).
pub fn compare_settled(
    name: &str,
    rounds: usize,
    iters: u64,
    mut ours: impl FnMut(),
    mut raw: impl FnMut(),
    mut settle: impl FnMut(),
) -> Row {
    if !selected(name) {
        return Row::skipped(name);
    }
    let mut a = Vec::with_capacity(rounds);
    let mut b = Vec::with_capacity(rounds);
    // One warm-up round each, not recorded.
    for _ in 0..iters.min(1000) {
        ours();
        raw();
    }
    settle();
    for r in 0..rounds {
        let time = |f: &mut dyn FnMut()| {
            let t = Instant::now();
            for _ in 0..iters {
                f();
            }
            black_box(());
            t.elapsed().as_nanos() as f64 / iters as f64
        };
        let mut timed = |f: &mut dyn FnMut()| {
            let t = time(f);
            settle();
            t
        };
        if r % 2 == 0 {
            a.push(timed(&mut ours));
            b.push(timed(&mut raw));
        } else {
            b.push(timed(&mut raw));
            a.push(timed(&mut ours));
        }
    }
    Row::from_rounds(name, a, b)
}

/// Like [`compare`], for bandwidth: each call moves `bytes`; the result is in GB/s.
pub fn compare_bandwidth(
    name: &str,
    rounds: usize,
    iters: u64,
    bytes: usize,
    ours: impl FnMut(),
    raw: impl FnMut(),
) -> Row {
    let t = compare(name, rounds, iters, ours, raw);
    let gbps = |ns: f64| bytes as f64 / ns;
    Row { unit: "GB/s", ours: gbps(t.ours), raw: gbps(t.raw), paired: 1.0 / t.paired, ..t }
}

/// Prints rows as a table: name, ours, raw, ratio, paired ratio.
pub fn print_table(title: &str, rows: &[Row]) {
    println!("\n{title}");
    println!("{:<48} {:>12} {:>12} {:>8} {:>8}", "benchmark", "ours", "raw", "ours/raw", "paired");
    for r in rows {
        println!(
            "{:<48} {:>9.3} {:<2} {:>9.3} {:<2} {:>8.4} {:>8.4}",
            r.name,
            r.ours,
            r.unit,
            r.raw,
            r.unit,
            r.ratio(),
            r.paired
        );
    }
}
