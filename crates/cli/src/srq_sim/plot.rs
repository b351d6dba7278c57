//! The depth-against-demand plot: a PNG drawn here pixel by pixel (the `png` crate only
//! encodes). Time runs left to right, one column per tick (or per group of ticks); the
//! vertical axis is logarithmic, one grid line per power of ten labelled with its
//! exponent, so a per-QP-peak depth far above the demand still shows beside it.
//!
//! Colours: demand grey, peak (a) green, grow (b) red, stat (c) blue.

use super::{Outcome, Strategy};
use std::path::Path;

const W: usize = 1000;
const H: usize = 500;
const LEFT: usize = 40;
const BOTTOM: usize = 20;
const TOP: usize = 10;

type Rgb = [u8; 3];
const GREY: Rgb = [150, 150, 150];
const GRID: Rgb = [225, 225, 225];
const AXIS: Rgb = [0, 0, 0];

fn colour(s: Strategy) -> Rgb {
    match s {
        Strategy::Peak => [0, 150, 0],
        Strategy::Grow => [210, 30, 30],
        Strategy::Stat => [30, 60, 220],
    }
}

struct Canvas {
    px: Vec<u8>,
}

impl Canvas {
    fn set(&mut self, x: usize, y: usize, c: Rgb) {
        if x < W && y < H {
            let i = (y * W + x) * 3;
            self.px[i..i + 3].copy_from_slice(&c);
        }
    }

    fn line(&mut self, (x0, y0): (i64, i64), (x1, y1): (i64, i64), c: Rgb) {
        // Bresenham.
        let (dx, dy) = ((x1 - x0).abs(), -(y1 - y0).abs());
        let (sx, sy) = (if x0 < x1 { 1 } else { -1 }, if y0 < y1 { 1 } else { -1 });
        let (mut x, mut y, mut err) = (x0, y0, dx + dy);
        loop {
            if x >= 0 && y >= 0 {
                self.set(x as usize, y as usize, c);
                self.set(x as usize, y as usize + 1, c);
            }
            if x == x1 && y == y1 {
                break;
            }
            let e2 = 2 * err;
            if e2 >= dy {
                err += dy;
                x += sx;
            }
            if e2 <= dx {
                err += dx;
                y += sy;
            }
        }
    }

    /// A digit (0-9) in a 3x5 font, scaled 2x, top-left at (x, y).
    fn digit(&mut self, d: u8, x: usize, y: usize, c: Rgb) {
        const FONT: [[u8; 5]; 10] = [
            [7, 5, 5, 5, 7],
            [2, 6, 2, 2, 7],
            [7, 1, 7, 4, 7],
            [7, 1, 7, 1, 7],
            [5, 5, 7, 1, 1],
            [7, 4, 7, 1, 7],
            [7, 4, 7, 5, 7],
            [7, 1, 1, 1, 1],
            [7, 5, 7, 5, 7],
            [7, 5, 7, 1, 7],
        ];
        for (r, bits) in FONT[usize::from(d % 10)].iter().enumerate() {
            for col in 0..3 {
                if bits & (4 >> col) != 0 {
                    for (a, b) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
                        self.set(x + 2 * col + a, y + 2 * r + b, c);
                    }
                }
            }
        }
    }
}

/// Draws demand and each strategy's depth over time into `path`.
pub fn write(path: &Path, outcomes: &[Outcome]) -> std::io::Result<()> {
    let mut c = Canvas {
        px: vec![255; W * H * 3],
    };
    let ticks = outcomes
        .iter()
        .map(|o| o.depth.len())
        .max()
        .unwrap_or(0)
        .max(1);
    let top = outcomes
        .iter()
        .flat_map(|o| o.depth.iter().chain(&o.demand))
        .copied()
        .max()
        .unwrap_or(1)
        .max(10);
    let decades = (f64::from(top).log10().ceil() as u32).max(1);
    let (plot_w, plot_h) = (W - LEFT - 10, H - BOTTOM - TOP);
    let y_of = |v: u32| -> i64 {
        let f = f64::from(v.max(1)).log10() / f64::from(decades);
        (TOP + plot_h) as i64 - (f * plot_h as f64).round() as i64
    };
    let x_of = |t: usize| LEFT as i64 + (t * plot_w / ticks) as i64;
    for d in 0..=decades {
        let y = y_of(10u32.saturating_pow(d)) as usize;
        for x in LEFT..W - 10 {
            c.set(x, y, GRID);
        }
        // The exponent of the grid line's power of ten.
        c.digit(d as u8, LEFT - 12, y.saturating_sub(5), AXIS);
    }
    for y in TOP..=TOP + plot_h {
        c.set(LEFT, y, AXIS);
    }
    for x in LEFT..W - 10 {
        c.set(x, TOP + plot_h, AXIS);
    }
    let series = |c: &mut Canvas, v: &[u32], col: Rgb| {
        for t in 1..v.len() {
            c.line((x_of(t - 1), y_of(v[t - 1])), (x_of(t), y_of(v[t])), col);
        }
    };
    if let Some(o) = outcomes.first() {
        series(&mut c, &o.demand, GREY);
    }
    for o in outcomes {
        series(&mut c, &o.depth, colour(o.strategy));
    }
    let f = std::fs::File::create(path)?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(f), W as u32, H as u32);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut w = enc.write_header().map_err(std::io::Error::other)?;
    w.write_image_data(&c.px).map_err(std::io::Error::other)?;
    Ok(())
}
