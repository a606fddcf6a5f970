//! A histogram kept in atomics, for the figures `/metrics` reports.

use std::sync::atomic::{AtomicU64, Ordering};

/// A histogram kept in atomics (no lock on the path that observes it).
#[derive(Debug)]
pub struct Histo {
    bounds: &'static [f64],
    /// Per bucket (not cumulative); the last is `+Inf`.
    counts: Box<[AtomicU64]>,
    /// Sum of observations, in millionths.
    sum_micros: AtomicU64,
}

/// Bucket bounds for latencies (seconds): 100 µs to about 6.5 s.
pub const LATENCY_BOUNDS: &[f64] = &[
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    6.5,
];
/// Bucket bounds for counts (a batch's operations).
pub const COUNT_BOUNDS: &[f64] =
    &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0];

impl Histo {
    /// A histogram with these (ascending) upper bounds.
    #[must_use]
    pub fn new(bounds: &'static [f64]) -> Histo {
        Histo {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_micros: AtomicU64::new(0),
        }
    }

    /// Observe `v`.
    pub fn observe(&self, v: f64) {
        let i = self.bounds.iter().position(|b| v <= *b).unwrap_or(self.bounds.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add((v.max(0.0) * 1e6) as u64, Ordering::Relaxed);
    }

    /// `(sum, count, buckets)` as prometheus-client's `encode_histogram` wants them: each
    /// bucket's own count, not cumulative (the encoder cumulates them as it writes; given
    /// cumulative counts it cumulated them twice, and `+Inf` read many times `_count`).
    #[must_use]
    pub fn snapshot(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let mut total = 0;
        let mut buckets = Vec::with_capacity(self.counts.len());
        for (i, c) in self.counts.iter().enumerate() {
            let n = c.load(Ordering::Relaxed);
            total += n;
            buckets.push((self.bounds.get(i).copied().unwrap_or(f64::INFINITY), n));
        }
        (self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6, total, buckets)
    }

    /// Observations so far.
    #[must_use]
    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }
}
