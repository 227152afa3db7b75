//! Percentiles of individually timed calls, printed the way every bench of the workspace
//! prints them (`<name>: p50 <x> µs, p99 <y> µs`), and paired runs.

use std::time::Instant;

/// The p50, p99 and mean of a set of samples, in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Percentiles {
    pub p50: f64,
    pub p99: f64,
    pub mean: f64,
    pub samples: usize,
}

impl Percentiles {
    /// The percentiles of `samples` (nanoseconds; sorted here).
    pub fn of(samples: &mut [u128]) -> Percentiles {
        samples.sort_unstable();
        let n = samples.len().max(1);
        let at = |q: f64| {
            samples
                .get(((n as f64 * q) as usize).min(n - 1))
                .copied()
                .unwrap_or(0) as f64
        };
        Percentiles {
            p50: at(0.50),
            p99: at(0.99),
            mean: samples.iter().sum::<u128>() as f64 / n as f64,
            samples: samples.len(),
        }
    }

    /// Prints `<name>: p50 <x> µs, p99 <y> µs` and returns itself.
    pub fn print(self, name: &str) -> Percentiles {
        println!(
            "{name}: p50 {:.2} µs, p99 {:.2} µs",
            self.p50 / 1000.0,
            self.p99 / 1000.0
        );
        self
    }
}

/// Times `f` `runs` times (after `warmup` untimed calls): its percentiles, not printed.
pub fn timed(warmup: usize, runs: usize, mut f: impl FnMut()) -> Percentiles {
    for _ in 0..warmup {
        f();
    }
    let mut samples: Vec<u128> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_nanos()
        })
        .collect();
    Percentiles::of(&mut samples)
}

/// Times `f` `runs` times (after `warmup` untimed calls) and prints its percentiles.
pub fn measure(name: &str, warmup: usize, runs: usize, f: impl FnMut()) -> Percentiles {
    timed(warmup, runs, f).print(name)
}

/// [`measure`] with the workspace's usual counts: 1,000 warm-up calls, 10,000 timed.
pub fn percentiles(name: &str, f: impl FnMut()) -> Percentiles {
    measure(name, 1_000, 10_000, f)
}

/// Times `a` and `b` alternately, `runs` times each (after `warmup` of each), so that both
/// see the same machine; prints both and the ratio of their p50s.
pub fn paired(
    names: (&str, &str),
    warmup: usize,
    runs: usize,
    mut a: impl FnMut(),
    mut b: impl FnMut(),
) -> (Percentiles, Percentiles) {
    for _ in 0..warmup {
        a();
        b();
    }
    let mut sa = Vec::with_capacity(runs);
    let mut sb = Vec::with_capacity(runs);
    for i in 0..runs {
        // Alternate which goes first, so neither always runs on a warmer cache.
        let time = |f: &mut dyn FnMut(), into: &mut Vec<u128>| {
            let t = Instant::now();
            f();
            into.push(t.elapsed().as_nanos());
        };
        if i % 2 == 0 {
            time(&mut a, &mut sa);
            time(&mut b, &mut sb);
        } else {
            time(&mut b, &mut sb);
            time(&mut a, &mut sa);
        }
    }
    let pa = Percentiles::of(&mut sa).print(names.0);
    let pb = Percentiles::of(&mut sb).print(names.1);
    println!(
        "{} / {}: {:.2}x at p50, {:.2}x at p99",
        names.1,
        names.0,
        pb.p50 / pa.p50.max(1.0),
        pb.p99 / pa.p99.max(1.0)
    );
    (pa, pb)
}
