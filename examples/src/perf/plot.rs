//! `ferroccl-perf --plot OUT.svg A.json [B.json …]`: bus bandwidth and time per
//! operation against message size, one line per series ([`super::report::read_series`]:
//! every (datatype, reduction) of every file), drawn with `plotters` into one SVG
//! (busbw on top, time below; sizes and times on log axes).

use std::path::Path;

use plotters::prelude::*;

use super::report::{Series, read_series};

/// Reads `inputs` and draws them into `svg`; returns the number of series drawn.
/// Errors name the file that could not be read or written.
pub fn plot_files(svg: &Path, inputs: &[impl AsRef<Path>]) -> Result<usize, String> {
    let mut series = Vec::new();
    for p in inputs {
        series.extend(read_series(p.as_ref())?);
    }
    series.retain(|s| !s.points.is_empty());
    if series.is_empty() {
        return Err("no result rows in the given files".into());
    }
    draw(svg, &series).map_err(|e| format!("{}: {e}", svg.display()))?;
    Ok(series.len())
}

fn bounds(series: &[Series], f: impl Fn(&super::report::Point) -> f64) -> (f64, f64) {
    let vals = series.iter().flat_map(|s| s.points.iter().map(&f));
    let (lo, hi) = vals.fold((f64::INFINITY, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let lo = if lo.is_finite() && lo > 0.0 { lo } else { 1e-3 };
    (lo, hi.max(lo * 2.0))
}

fn draw(svg: &Path, series: &[Series]) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(svg, (1000, 900)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(450);
    let (xlo, xhi) = bounds(series, |p| p.size.max(1) as f64);
    let (_, bw_hi) = bounds(series, |p| p.busbw);
    let (tlo, thi) = bounds(series, |p| p.time_us);
    let color = |i: usize| Palette99::pick(i).to_rgba();

    let mut bw = ChartBuilder::on(&top)
        .caption("bus bandwidth", ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((xlo..xhi).log_scale(), 0.0..bw_hi * 1.05)?;
    bw.configure_mesh()
        .x_desc("size (B)")
        .y_desc("busbw (GB/s)")
        .x_label_formatter(&|x| human_bytes(*x))
        .draw()?;
    for (i, s) in series.iter().enumerate() {
        let c = color(i);
        bw.draw_series(LineSeries::new(
            s.points.iter().map(|p| (p.size.max(1) as f64, p.busbw)),
            c.stroke_width(2),
        ))?
        .label(s.label.clone())
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        bw.draw_series(
            s.points
                .iter()
                .map(|p| Circle::new((p.size.max(1) as f64, p.busbw), 3, c.filled())),
        )?;
    }
    bw.configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;

    let mut time = ChartBuilder::on(&bottom)
        .caption("time per operation", ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((xlo..xhi).log_scale(), (tlo * 0.9..thi * 1.1).log_scale())?;
    time.configure_mesh()
        .x_desc("size (B)")
        .y_desc("time (us)")
        .x_label_formatter(&|x| human_bytes(*x))
        .draw()?;
    for (i, s) in series.iter().enumerate() {
        let c = color(i);
        time.draw_series(LineSeries::new(
            s.points.iter().map(|p| (p.size.max(1) as f64, p.time_us.max(tlo))),
            c.stroke_width(2),
        ))?
        .label(s.label.clone())
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    time.configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    root.present()?;
    Ok(())
}

/// `1024` -> `1K`, `1048576` -> `1M` (powers of 1024, as `-b/-e` take them).
pub fn human_bytes(b: f64) -> String {
    let units = [(1u64 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")];
    for (u, s) in units {
        if b >= u as f64 {
            let v = b / u as f64;
            return if (v - v.round()).abs() < 1e-6 {
                format!("{}{s}", v.round())
            } else {
                format!("{v:.1}{s}")
            };
        }
    }
    format!("{}", b.round())
}
