//! Statistical provisioning: what each QP consumed per interval, and from it how many
//! buffers the shared receive queue should hold.
//!
//! Every QP's demand is a series: the buffers it took in each interval. The manager
//! keeps two views of it ([`Demand`]):
//! - *empirical*, over a window of the last `window` intervals: mean, sample variance
//!   and a high quantile (nearest rank), which describe what the QP has done;
//! - *dynamic*, an exponentially weighted mean and variance (weight `alpha` on the
//!   newest interval), which follow a change of behaviour within a few intervals.
//!
//! The SRQ must cover the demand of all QPs between two replenishments. With the QPs
//! independent, the aggregate demand has mean `sum(mean_i)` and variance
//! `sum(var_i)`; by the normal approximation the depth that runs short with
//! probability `p` is
//!
//! ```text
//! target = ceil( sum(mean_i) + z * sqrt(sum(var_i)) ),  z = Phi^-1(1 - p)
//! ```
//!
//! ([`target_depth`], [`z_for`]), far below `sum(peak_i)` when the QPs are bursty and
//! not in step. A QP's own soft limit per interval can be derived the same way
//! ([`soft_limit`]): its mean plus `z` of its own standard deviations.

use std::collections::VecDeque;

/// Which view of the demand drives the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Estimator {
    /// Mean and sample variance over the window.
    Empirical,
    /// Exponentially weighted mean and variance (follows change). The default.
    #[default]
    Ewma,
}

/// The provisioning parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProvisionConfig {
    /// Standard deviations of aggregate demand above its mean that the target covers
    /// (3.72 for one interval in 10,000 short; see [`z_for`]).
    pub z: f64,
    /// Weight of the newest interval in the dynamic view, in (0, 1].
    pub alpha: f64,
    /// Intervals the empirical view keeps.
    pub window: usize,
    /// Which view drives the target.
    pub estimator: Estimator,
    /// The target never goes below this.
    pub min_depth: usize,
    /// When set, each QP's soft per-interval limit follows its demand: its mean plus
    /// this many of its standard deviations ([`soft_limit`]), at least `soft_floor`.
    pub auto_soft_z: Option<f64>,
    /// Lowest automatic soft limit.
    pub soft_floor: u32,
}

impl Default for ProvisionConfig {
    fn default() -> Self {
        ProvisionConfig {
            z: z_for(1e-4),
            alpha: 0.125,
            window: 64,
            estimator: Estimator::Ewma,
            min_depth: 1,
            auto_soft_z: None,
            soft_floor: 4,
        }
    }
}

/// One QP's demand: buffers taken per interval, in two views.
#[derive(Debug, Clone)]
pub struct Demand {
    window: VecDeque<u32>,
    cap: usize,
    alpha: f64,
    ewma_mean: f64,
    ewma_var: f64,
    samples: u64,
}

impl Demand {
    /// No samples yet; the empirical view keeps `window` intervals (at least 1), the
    /// dynamic one weighs the newest by `alpha` (clamped to (0, 1]).
    pub fn new(window: usize, alpha: f64) -> Demand {
        Demand {
            window: VecDeque::new(),
            cap: window.max(1),
            alpha: if alpha > 0.0 && alpha <= 1.0 {
                alpha
            } else {
                1.0
            },
            ewma_mean: 0.0,
            ewma_var: 0.0,
            samples: 0,
        }
    }

    /// One interval's count. The first sample starts the dynamic view at its value
    /// with no variance; later ones move it: `d = x - m; m += a*d; v = (1-a)*(v + a*d^2)`.
    pub fn push(&mut self, x: u32) {
        if self.window.len() == self.cap {
            self.window.pop_front();
        }
        self.window.push_back(x);
        let x = f64::from(x);
        if self.samples == 0 {
            self.ewma_mean = x;
            self.ewma_var = 0.0;
        } else {
            let a = self.alpha;
            let d = x - self.ewma_mean;
            self.ewma_mean += a * d;
            self.ewma_var = (1.0 - a) * (self.ewma_var + a * d * d);
        }
        self.samples += 1;
    }

    /// Intervals seen in all.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Empirical mean over the window (0 without samples).
    pub fn mean(&self) -> f64 {
        if self.window.is_empty() {
            return 0.0;
        }
        self.window.iter().map(|&x| f64::from(x)).sum::<f64>() / self.window.len() as f64
    }

    /// Empirical sample variance over the window (divided by n - 1; 0 below two
    /// samples).
    pub fn variance(&self) -> f64 {
        let n = self.window.len();
        if n < 2 {
            return 0.0;
        }
        let m = self.mean();
        let ss: f64 = self
            .window
            .iter()
            .map(|&x| (f64::from(x) - m).powi(2))
            .sum();
        ss / (n - 1) as f64
    }

    /// Empirical `q`-quantile over the window by nearest rank: the smallest sample
    /// with at least a fraction `q` of the samples at or below it (0 without samples).
    pub fn quantile(&self, q: f64) -> u32 {
        if self.window.is_empty() {
            return 0;
        }
        let mut v: Vec<u32> = self.window.iter().copied().collect();
        v.sort_unstable();
        let rank = (q.clamp(0.0, 1.0) * v.len() as f64).ceil() as usize;
        v[rank.clamp(1, v.len()) - 1]
    }

    /// The largest sample in the window.
    pub fn peak(&self) -> u32 {
        self.window.iter().copied().max().unwrap_or(0)
    }

    /// Dynamic (exponentially weighted) mean.
    pub fn ewma_mean(&self) -> f64 {
        self.ewma_mean
    }

    /// Dynamic (exponentially weighted) variance.
    pub fn ewma_variance(&self) -> f64 {
        self.ewma_var
    }

    /// (mean, variance) in the chosen view.
    pub fn moments(&self, e: Estimator) -> (f64, f64) {
        match e {
            Estimator::Empirical => (self.mean(), self.variance()),
            Estimator::Ewma => (self.ewma_mean(), self.ewma_variance()),
        }
    }
}

/// The depth that covers aggregate demand of mean `sum_mean` and variance `sum_var`
/// with `z` standard deviations to spare, rounded up, at least `min`.
pub fn target_depth(sum_mean: f64, sum_var: f64, z: f64, min: usize) -> usize {
    let t = sum_mean + z * sum_var.max(0.0).sqrt();
    if !t.is_finite() || t <= 0.0 {
        return min;
    }
    (t.ceil() as usize).max(min)
}

/// A QP's soft per-interval limit from its demand: mean plus `z` standard deviations,
/// rounded up, at least `floor`.
pub fn soft_limit(mean: f64, var: f64, z: f64, floor: u32) -> u32 {
    let t = (mean + z * var.max(0.0).sqrt()).ceil();
    if !t.is_finite() || t <= 0.0 {
        return floor;
    }
    (t.min(f64::from(u32::MAX)) as u32).max(floor)
}

/// The `z` for which a normal variable exceeds its mean by more than `z` standard
/// deviations with probability `p` (the inverse normal CDF at `1 - p`), for
/// `0 < p < 1`; e.g. 1.645 for 5%, 3.719 for 1e-4. Acklam's rational approximation
/// (relative error below 1.2e-9), computed here.
pub fn z_for(p: f64) -> f64 {
    -inverse_normal_cdf(p)
}

/// Phi^-1(p): the standard normal quantile, for 0 < p < 1 (infinite at 0 and 1).
fn inverse_normal_cdf(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    const LOW: f64 = 0.02425;
    if p <= 0.0 {
        return f64::NEG_INFINITY;
    }
    if p >= 1.0 {
        return f64::INFINITY;
    }
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < LOW {
        tail((-2.0 * p.ln()).sqrt())
    } else if p <= 1.0 - LOW {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    } else {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn empirical_view_on_known_samples() {
        let mut d = Demand::new(8, 0.5);
        for x in [2, 4, 4, 4, 5, 5, 7, 9] {
            d.push(x);
        }
        // Sum 40, mean 5; squared deviations 9+1+1+1+0+0+4+16 = 32; 32/7.
        assert!(close(d.mean(), 5.0), "{}", d.mean());
        assert!(close(d.variance(), 32.0 / 7.0), "{}", d.variance());
        assert_eq!(d.quantile(0.5), 4); // rank ceil(4) = 4th of 2,4,4,4,5,5,7,9
        assert_eq!(d.quantile(0.9), 9); // rank ceil(7.2) = 8th
        assert_eq!(d.quantile(0.75), 5); // rank 6
        assert_eq!(d.quantile(0.0), 2);
        assert_eq!(d.peak(), 9);
        // The window keeps the last 8: pushing 13 drops the first 2.
        d.push(13);
        assert!(close(d.mean(), 51.0 / 8.0), "{}", d.mean());
        assert_eq!(d.samples(), 9);
    }

    #[test]
    fn dynamic_view_on_known_samples() {
        let mut d = Demand::new(4, 0.5);
        d.push(4);
        assert!(close(d.ewma_mean(), 4.0) && close(d.ewma_variance(), 0.0));
        // d = 8 - 4 = 4: m = 4 + 2 = 6; v = 0.5 * (0 + 0.5 * 16) = 4.
        d.push(8);
        assert!(close(d.ewma_mean(), 6.0), "{}", d.ewma_mean());
        assert!(close(d.ewma_variance(), 4.0), "{}", d.ewma_variance());
        // d = 0 - 6 = -6: m = 3; v = 0.5 * (4 + 0.5 * 36) = 11.
        d.push(0);
        assert!(close(d.ewma_mean(), 3.0), "{}", d.ewma_mean());
        assert!(close(d.ewma_variance(), 11.0), "{}", d.ewma_variance());
        assert_eq!(d.moments(Estimator::Ewma), (3.0, 11.0));
        assert_eq!(d.moments(Estimator::Empirical), (4.0, 16.0));
    }

    #[test]
    fn target_is_sum_of_means_plus_z_root_of_summed_variances() {
        // Means 3 and 5, variances 7 and 9: 8 + 2 * sqrt(16) = 16.
        assert_eq!(target_depth(3.0 + 5.0, 7.0 + 9.0, 2.0, 1), 16);
        // Rounded up: 8 + 1.5 * 4 = 14, 8 + 1.6 * 4 = 14.4 -> 15.
        assert_eq!(target_depth(8.0, 16.0, 1.5, 1), 14);
        assert_eq!(target_depth(8.0, 16.0, 1.6, 1), 15);
        assert_eq!(target_depth(0.0, 0.0, 3.0, 4), 4);
        assert_eq!(target_depth(f64::NAN, 1.0, 3.0, 2), 2);
        assert_eq!(soft_limit(3.0, 4.0, 2.0, 1), 7);
        assert_eq!(soft_limit(0.0, 0.0, 2.0, 4), 4);
    }

    #[test]
    fn z_for_known_probabilities() {
        for (p, z) in [
            (0.5, 0.0),
            (0.05, 1.644_853_627),
            (0.025, 1.959_963_985),
            (0.001, 3.090_232_306),
            (1e-4, 3.719_016_485),
            (0.99, -2.326_347_874),
        ] {
            assert!((z_for(p) - z).abs() < 1e-6, "p {p}: {} vs {z}", z_for(p));
        }
        assert!(z_for(0.0).is_infinite());
    }
}
