//! A small benchmark harness: our call against the raw call, interleaved in the same process.
//!
//! Each benchmark binary (`tests/benches/*.rs`, `harness = false`) measures pairs with
//! [`compare`] and prints them with [`print_table`]. Rounds of the two sides alternate so that
//! clock changes and other load hit both alike; the reported time is the median round.

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
}

impl Row {
    /// ours / raw: above 1 means ours is slower for times, faster for throughput.
    pub fn ratio(&self) -> f64 {
        if self.raw == 0.0 { f64::NAN } else { self.ours / self.raw }
    }
}

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
        return Row { name: name.to_string(), unit: "ns", ours: f64::NAN, raw: f64::NAN };
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
    Row { name: name.to_string(), unit: "ns", ours: median(a), raw: median(b) }
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
    Row { name: t.name, unit: "GB/s", ours: gbps(t.ours), raw: gbps(t.raw) }
}

/// Prints rows as a table: name, ours, raw, ratio.
pub fn print_table(title: &str, rows: &[Row]) {
    println!("\n{title}");
    println!("{:<48} {:>12} {:>12} {:>8}", "benchmark", "ours", "raw", "ours/raw");
    for r in rows {
        println!(
            "{:<48} {:>9.3} {:<2} {:>9.3} {:<2} {:>8.4}",
            r.name,
            r.ours,
            r.unit,
            r.raw,
            r.unit,
            r.ratio()
        );
    }
}
