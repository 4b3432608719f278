//! The timing loop the examples in benches/ share. Each example is its own binary, so each
//! includes this file with `#[path = "timing.rs"] mod timing;`.

use std::time::Instant;

/// Milliseconds per call: after one warm-up call, the median of 7 runs of `reps` calls each.
pub fn median_ms(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut t: Vec<f64> = (0..7)
        .map(|_| {
            let s = Instant::now();
            for _ in 0..reps {
                f();
            }
            s.elapsed().as_secs_f64() * 1e3 / reps as f64
        })
        .collect();
    t.sort_by(|a, b| a.total_cmp(b));
    t[3]
}
