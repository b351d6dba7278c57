//! Bursty on/off traffic, seeded: each connection alternates between an *on* period,
//! in which a Poisson number of messages (mean `rate`) arrives per tick, and an *off*
//! period with none. Period lengths are geometric (memoryless) or Pareto (heavy
//! tailed: rare very long bursts), with the given means. The same seed gives the same
//! trace, in the model and through the RNIC.

/// SplitMix64: a small, fast, well-mixed generator; enough for a seeded simulation.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    pub fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    /// Poisson with mean `lambda` (Knuth's product of uniforms; fine for small means).
    pub fn poisson(&mut self, lambda: f64) -> u32 {
        if lambda <= 0.0 {
            return 0;
        }
        let limit = (-lambda).exp();
        let (mut k, mut p) = (0u32, 1.0);
        loop {
            p *= self.unit();
            if p <= limit {
                return k;
            }
            k += 1;
        }
    }
}

/// How period lengths are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Dist {
    /// Geometric with the given mean.
    Geometric,
    /// Pareto with shape 1.5 scaled to the given mean (heavy tailed).
    Pareto,
}

/// The traffic's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrafficSpec {
    /// Connections.
    pub connections: usize,
    /// Mean on-period length in ticks.
    pub on_mean: f64,
    /// Mean off-period length in ticks.
    pub off_mean: f64,
    /// Mean messages per tick while on.
    pub rate: f64,
    /// Period length distribution.
    pub dist: Dist,
    /// The seed.
    pub seed: u64,
}

#[derive(Debug, Clone, Copy)]
struct Conn {
    on: bool,
    left: u32,
}

/// The traffic generator: one tick at a time.
#[derive(Debug, Clone)]
pub struct Traffic {
    spec: TrafficSpec,
    rng: Rng,
    conns: Vec<Conn>,
}

impl Traffic {
    /// Starts every connection in its stationary state (on with the duty cycle's
    /// probability), so there is no synchronised start.
    pub fn new(spec: TrafficSpec) -> Traffic {
        let mut rng = Rng::new(spec.seed);
        let duty = spec.on_mean / (spec.on_mean + spec.off_mean);
        let mut t = Traffic {
            spec,
            rng: rng.clone(),
            conns: Vec::with_capacity(spec.connections),
        };
        for _ in 0..spec.connections {
            let on = rng.unit() < duty;
            let mean = if on { spec.on_mean } else { spec.off_mean };
            let left = period(&mut rng, spec.dist, mean);
            t.conns.push(Conn { on, left });
        }
        t.rng = rng;
        t
    }

    /// Messages per connection in the next tick.
    pub fn tick(&mut self, out: &mut Vec<u32>) {
        out.clear();
        let s = self.spec;
        for c in &mut self.conns {
            out.push(if c.on { self.rng.poisson(s.rate) } else { 0 });
            c.left = c.left.saturating_sub(1);
            if c.left == 0 {
                c.on = !c.on;
                let mean = if c.on { s.on_mean } else { s.off_mean };
                c.left = period(&mut self.rng, s.dist, mean);
            }
        }
    }
}

/// A period length of at least one tick with mean `mean`.
fn period(rng: &mut Rng, dist: Dist, mean: f64) -> u32 {
    let mean = mean.max(1.0);
    let x = match dist {
        // Geometric on {1, 2, ...} with success probability 1/mean.
        Dist::Geometric => {
            let p = 1.0 / mean;
            if p >= 1.0 {
                1.0
            } else {
                (rng.unit().ln() / (1.0 - p).ln()).ceil()
            }
        }
        // Pareto with shape a = 1.5 has mean a * xm / (a - 1) = 3 xm.
        Dist::Pareto => {
            let xm = mean / 3.0;
            (xm / rng.unit().powf(1.0 / 1.5)).round()
        }
    };
    x.clamp(1.0, 1e7) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_trace_and_the_means_hold() {
        let spec = TrafficSpec {
            connections: 200,
            on_mean: 10.0,
            off_mean: 90.0,
            rate: 4.0,
            dist: Dist::Geometric,
            seed: 7,
        };
        let (mut a, mut b) = (Traffic::new(spec), Traffic::new(spec));
        let (mut x, mut y) = (Vec::new(), Vec::new());
        let mut total = 0u64;
        for _ in 0..2000 {
            a.tick(&mut x);
            b.tick(&mut y);
            assert_eq!(x, y);
            total += x.iter().map(|&n| u64::from(n)).sum::<u64>();
        }
        // Expected 200 * 0.1 * 4 = 80 per tick: 160,000 in all, within 5%.
        let mean = total as f64 / 2000.0;
        assert!((mean - 80.0).abs() < 4.0, "{mean}");
        let mut r = Rng::new(1);
        let n = 100_000;
        let s: u64 = (0..n).map(|_| u64::from(r.poisson(3.0))).sum();
        assert!((s as f64 / n as f64 - 3.0).abs() < 0.03);
    }
}
