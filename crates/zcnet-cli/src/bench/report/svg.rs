//! Report: `--plot FILE.svg` of a size sweep ([`crate::bench::plan`]): two charts side by side in one SVG, drawn
//! with plotters' SVG backend — Gbit/s against size and CPU µs per MB against size, a line per mode
//! on a log2 size axis labelled as `--sizes` takes sizes (1K, 64K, 1M) — with the crossover marked
//! (a vertical line at the size from which zero-copy is cheaper), or the chart saying it never is.

use std::path::Path;

use anyhow::{Result, anyhow};
use plotters::prelude::*;

use crate::bench::plan::human;
use crate::bench::report::crossover::{Crossover, Point, Swept};

/// The picture's size in pixels: two charts of 640 × 480 under a title.
const SIZE: (u32, u32) = (1280, 540);

/// One line's colour: copy, zerocopy and auto keep theirs in every picture.
fn colour(mode: &str, index: usize) -> RGBColor {
    match mode {
        "copy" => RGBColor(31, 119, 180),
        "zerocopy" => RGBColor(214, 39, 40),
        "auto" => RGBColor(44, 160, 44),
        _ => {
            let (r, g, b) = Palette99::pick(index).to_rgba().rgb();
            RGBColor(r, g, b)
        }
    }
}

/// Draws the sweep's `points` into `file` (see the module's description).
pub fn draw(
    file: &Path,
    swept: &Swept<'_>,
    points: &[Point],
    crossovers: &[Crossover],
) -> Result<()> {
    let failed = |e: &dyn std::fmt::Display| anyhow!("--plot {}: {e}", file.display());
    let root = SVGBackend::new(file, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| failed(&e))?;
    let title = format!(
        "zcnet bench {} over {}: zero-copy against copy by size",
        swept.bench, swept.path
    );
    let root = root
        .titled(&title, ("sans-serif", 24))
        .map_err(|e| failed(&e))?;
    let (left, right) = root.split_horizontally(SIZE.0 / 2);
    let several = crossovers.len() > 1;
    let said: Vec<String> = crossovers.iter().map(|c| c.sentence(several)).collect();
    let charts = [
        (
            &left,
            "Throughput (higher is better)".to_string(),
            "Gbit/s",
            SeriesLabelPosition::UpperLeft,
        ),
        (
            &right,
            match said.is_empty() {
                true => "CPU per MB (lower is cheaper)".to_string(),
                false => format!("CPU per MB: {}", said.join("; ")),
            },
            "CPU µs per MB",
            SeriesLabelPosition::UpperRight,
        ),
    ];
    for (i, (area, caption, unit, legend)) in charts.into_iter().enumerate() {
        let value = |p: &Point| {
            if i == 0 {
                p.gbit_per_s
            } else {
                p.cpu_us_per_mb
            }
        };
        chart(
            area,
            (&caption, unit, legend),
            swept,
            points,
            &value,
            crossovers,
        )
        .map_err(|e| failed(&e))?;
    }
    root.present().map_err(|e| failed(&e))?;
    Ok(())
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;
type DrawError = DrawingAreaErrorKind<std::io::Error>;

/// One chart: `value` of each point against log2 of its size, a line per series, a vertical line at
/// each crossover, and the legend at `legend`.
fn chart(
    area: &Area<'_>,
    (caption, unit, legend): (&str, &str, SeriesLabelPosition),
    swept: &Swept<'_>,
    points: &[Point],
    value: &dyn Fn(&Point) -> f64,
    crossovers: &[Crossover],
) -> Result<(), DrawError> {
    let x = |size: u64| (size.max(1) as f64).log2();
    let mut sizes: Vec<u64> = points.iter().map(|p| p.size).collect();
    sizes.dedup();
    let (lo, hi) = match (sizes.first(), sizes.last()) {
        (Some(&a), Some(&b)) => (x(a) - 0.5, x(b) + 0.5),
        _ => (9.5, 10.5),
    };
    let top = points.iter().map(value).fold(0.0, f64::max).max(1e-3) * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(lo..hi, 0.0..top)?;
    chart
        .configure_mesh()
        // At most one label per power of two, so that each falls on one.
        .x_labels((hi - lo).floor() as usize + 1)
        .x_desc(format!("{} (log2 scale)", swept.size_means))
        .y_desc(unit)
        .x_label_formatter(&|v| human(2f64.powf(*v).round() as u64))
        .max_light_lines(1)
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 15))
        .draw()?;
    let several_apis = {
        let mut apis: Vec<&Option<String>> = points.iter().map(|p| &p.api).collect();
        apis.dedup();
        apis.len() > 1
    };
    let mut series: Vec<(Option<String>, String)> = Vec::new();
    for p in points {
        if !series.contains(&(p.api.clone(), p.mode.clone())) {
            series.push((p.api.clone(), p.mode.clone()));
        }
    }
    for (index, (api, mode)) in series.iter().enumerate() {
        let line: Vec<&Point> = points
            .iter()
            .filter(|p| &p.api == api && &p.mode == mode)
            .collect();
        let style = colour(mode, index).stroke_width(3);
        let xy: Vec<(f64, f64)> = line.iter().map(|p| (x(p.size), value(p))).collect();
        chart
            .draw_series(LineSeries::new(xy.clone(), style))?
            .label(line[0].series(several_apis))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], style));
        chart.draw_series(
            xy.into_iter()
                .map(|c| Circle::new(c, 4, colour(mode, index).filled())),
        )?;
    }
    let several = crossovers.len() > 1;
    for c in crossovers {
        let Some(size) = c.from else { continue };
        let style = BLACK.mix(0.7).stroke_width(2);
        chart
            .draw_series(DashedLineSeries::new(
                [(x(size), 0.0), (x(size), top)],
                8,
                6,
                style,
            ))?
            .label(c.sentence(several))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], style));
    }
    chart
        .configure_series_labels()
        .position(legend)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()?;
    Ok(())
}
