//! The matrix charts, drawn with plotters' SVG backend:
//! - `notpm.svg`: NOTPM per measured interval, one line per run; colour = configuration, marker
//!   shape = repeat (circle, triangle, cross, square, ...), legend beside the plot;
//! - `medians.svg`: median NOTPM per configuration with min–max error bars; a memory (no
//!   durability) baseline gets its own panel with its own scale, so it does not flatten the
//!   durable rows;
//! - `latency.svg`: median p99 New-Order latency per configuration with min–max error bars;
//! - `costs.svg`: per transaction, CPU µs, device KiB written and device KiB read (medians with
//!   min–max error bars), one panel each.
//!
//! Invariant: a configuration has the same colour in every chart (its index among all rows,
//! skipped ones included), and a missing figure is drawn as "n/a", never as a zero bar.

use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

use crate::engine::Engine as _;
use crate::error::{TpccError, TpccResult};
use crate::memory::MemoryEngine;
use crate::report::{cost_columns, Column, ConfigResult};
use crate::spread::Spread;

/// Colour `i` of `n`: the ten Tableau colours, or evenly spaced hues when there are more rows.
fn palette(i: usize, n: usize) -> RGBColor {
    const C: [RGBColor; 10] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(188, 189, 34),
        RGBColor(23, 190, 207),
    ];
    if n <= C.len() {
        return C[i % C.len()];
    }
    let (r, g, b) = HSLColor(
        i as f64 / n as f64,
        0.7,
        if i & 1 == 0 { 0.42 } else { 0.58 },
    )
    .rgb();
    RGBColor(r, g, b)
}

fn plot_err(path: &Path, e: impl std::fmt::Display) -> TpccError {
    TpccError::Usage(format!("drawing {}: {e}", path.display()))
}

fn label_px(names: &[String], px_per_char: u32, lo: u32, hi: u32) -> u32 {
    let longest = names.iter().map(|n| n.chars().count()).max().unwrap_or(0) as u32;
    (24 + px_per_char * longest).clamp(lo, hi)
}

/// Draws the marker of repeat `rep` at `p`.
fn marker<DB: DrawingBackend>(
    rep: usize,
    p: (f64, f64),
    color: RGBColor,
) -> DynElement<'static, DB, (f64, f64)> {
    match rep % 4 {
        0 => Circle::new(p, 4, color.filled()).into_dyn(),
        1 => TriangleMarker::new(p, 5, color.filled()).into_dyn(),
        2 => Cross::new(p, 4, color.stroke_width(2)).into_dyn(),
        _ => Rectangle::new([(p.0, p.1), (p.0, p.1)], color.stroke_width(6)).into_dyn(),
    }
}

/// Draws NOTPM per measured interval, one line per run, coloured per configuration, the repeat
/// told by its marker, with the legend beside the plot (it never covers the lines).
///
/// # Errors
///
/// The SVG cannot be drawn or written.
pub fn draw_notpm(path: &Path, title: &str, rows: &[ConfigResult]) -> TpccResult<()> {
    let n = rows.len();
    let mut max_t: f64 = 1.0;
    let mut max_y: f64 = 1.0;
    let mut max_rep = 0;
    for r in rows {
        max_rep = max_rep.max(r.runs.len());
        for run in &r.runs {
            for i in run.intervals.iter().filter(|i| !i.warmup) {
                max_t = max_t.max(i.t_end_s);
                max_y = max_y.max(i.notpm);
            }
        }
    }
    let names: Vec<String> = rows.iter().map(|r| r.name.clone()).collect();
    let legend_w = label_px(&names, 7, 180, 480);
    let height = (600u32).max(120 + 20 * (names.len() + max_rep) as u32);
    let root = SVGBackend::new(path, (1000 + legend_w, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| plot_err(path, e))?;
    let (plot, legend) = root.split_horizontally(1000);
    let mut chart = ChartBuilder::on(&plot)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(75)
        .build_cartesian_2d(0.0..max_t * 1.02, 0.0..max_y * 1.1)
        .map_err(|e| plot_err(path, e))?;
    chart
        .configure_mesh()
        .x_desc("seconds since the end of warm-up")
        .y_desc("NOTPM (New-Orders per minute)")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(|e| plot_err(path, e))?;
    for (ci, r) in rows.iter().enumerate() {
        let color = palette(ci, n);
        for (rep, run) in r.runs.iter().enumerate() {
            let pts: Vec<(f64, f64)> = run
                .intervals
                .iter()
                .filter(|i| !i.warmup)
                .map(|i| (i.t_end_s, i.notpm))
                .collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                .map_err(|e| plot_err(path, e))?;
            chart
                .draw_series(pts.iter().map(|&p| marker(rep, p, color)))
                .map_err(|e| plot_err(path, e))?;
        }
    }
    let font = ("sans-serif", 13).into_font().color(&BLACK);
    for (ci, name) in names.iter().enumerate() {
        let y = 60 + 20 * ci as i32;
        legend
            .draw(&PathElement::new(
                vec![(8, y), (32, y)],
                palette(ci, n).stroke_width(3),
            ))
            .map_err(|e| plot_err(path, e))?;
        let label = if rows[ci].runs.is_empty() {
            format!("{name} (did not run)")
        } else {
            name.clone()
        };
        legend
            .draw(&Text::new(label, (40, y - 7), font.clone()))
            .map_err(|e| plot_err(path, e))?;
    }
    let y0 = 60 + 20 * names.len() as i32 + 20;
    for rep in 0..max_rep {
        let y = y0 + 20 * rep as i32;
        let m: DynElement<'static, SVGBackend, (i32, i32)> = match rep % 4 {
            0 => Circle::new((20, y), 4, BLACK.filled()).into_dyn(),
            1 => TriangleMarker::new((20, y), 5, BLACK.filled()).into_dyn(),
            2 => Cross::new((20, y), 4, BLACK.stroke_width(2)).into_dyn(),
            _ => Rectangle::new([(17, y - 3), (23, y + 3)], BLACK.filled()).into_dyn(),
        };
        legend.draw(&m).map_err(|e| plot_err(path, e))?;
        legend
            .draw(&Text::new(
                format!("repeat {}", rep + 1),
                (40, y - 7),
                font.clone(),
            ))
            .map_err(|e| plot_err(path, e))?;
    }
    root.present().map_err(|e| plot_err(path, e))?;
    Ok(())
}

/// One bar of a panel: the row's index (its colour), its name and its figure.
struct Bar {
    color: usize,
    name: String,
    value: Option<Spread>,
    note: Option<String>,
}

/// Draws bars with min–max error bars and the names under them, rotated.
fn bar_panel(
    path: &Path,
    area: &DrawingArea<SVGBackend, Shift>,
    title: &str,
    y_desc: &str,
    bars: &[Bar],
    n_colors: usize,
    decimals: usize,
) -> TpccResult<()> {
    let n = bars.len().max(1);
    let max_y = bars
        .iter()
        .filter_map(|b| b.value.map(|s| s.max))
        .fold(0.0f64, f64::max)
        .max(1e-9);
    let names: Vec<String> = bars.iter().map(|b| b.name.clone()).collect();
    let label_area = label_px(&names, 7, 60, 360);
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(15)
        .x_label_area_size(label_area)
        .y_label_area_size(75)
        .build_cartesian_2d(0.0..n as f64, 0.0..max_y * 1.18)
        .map_err(|e| plot_err(path, e))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc(y_desc)
        .y_label_formatter(&|v| format!("{v:.decimals$}"))
        .draw()
        .map_err(|e| plot_err(path, e))?;
    for (i, b) in bars.iter().enumerate() {
        let x0 = i as f64 + 0.15;
        let x1 = i as f64 + 0.85;
        let xm = i as f64 + 0.5;
        match b.value {
            Some(v) => {
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(x0, 0.0), (x1, v.median)],
                        palette(b.color, n_colors).filled(),
                    )))
                    .map_err(|e| plot_err(path, e))?;
                if v.n > 1 {
                    chart
                        .draw_series(std::iter::once(ErrorBar::new_vertical(
                            xm,
                            v.min,
                            v.median,
                            v.max,
                            BLACK.stroke_width(2),
                            12,
                        )))
                        .map_err(|e| plot_err(path, e))?;
                }
                chart
                    .draw_series(std::iter::once(Text::new(
                        format!("{:.decimals$}", v.median),
                        (i as f64 + 0.2, v.max + max_y * 0.04),
                        ("sans-serif", 13),
                    )))
                    .map_err(|e| plot_err(path, e))?;
            }
            None => {
                chart
                    .draw_series(std::iter::once(Text::new(
                        b.note.clone().unwrap_or_else(|| "n/a".into()),
                        (i as f64 + 0.2, max_y * 0.05),
                        ("sans-serif", 13),
                    )))
                    .map_err(|e| plot_err(path, e))?;
            }
        }
    }
    let plot = chart.plotting_area();
    let (px, py) = plot.get_pixel_range();
    let (ox, oy) = area.get_base_pixel();
    let bar_w = (px.end - px.start) as f64 / n as f64;
    for (i, name) in names.iter().enumerate() {
        let x = px.start - ox + (bar_w * (i as f64 + 0.5)) as i32;
        let style = TextStyle::from(("sans-serif", 13).into_font())
            .transform(FontTransform::Rotate90)
            .color(&BLACK);
        area.draw(&Text::new(name.clone(), (x - 6, py.end - oy + 8), style))
            .map_err(|e| plot_err(path, e))?;
    }
    Ok(())
}

fn bars_of(rows: &[ConfigResult], keep: impl Fn(&ConfigResult) -> bool, f: &Column) -> Vec<Bar> {
    rows.iter()
        .enumerate()
        .filter(|(_, r)| keep(r))
        .map(|(i, r)| Bar {
            color: i,
            name: r.name.clone(),
            value: r.spread(f.1),
            note: r.skipped.as_ref().map(|_| "skipped".to_string()),
        })
        .collect()
}

fn is_memory(r: &ConfigResult) -> bool {
    r.engine == MemoryEngine::LABEL
}

/// Draws the median NOTPM of each configuration with min–max error bars; a memory baseline row
/// goes into a panel of its own on the right.
///
/// # Errors
///
/// The SVG cannot be drawn or written.
pub fn draw_medians(path: &Path, title: &str, rows: &[ConfigResult]) -> TpccResult<()> {
    let col: Column = ("NOTPM", |r| Some(r.notpm), 0);
    let durable = bars_of(rows, |r| !is_memory(r), &col);
    let memory = bars_of(rows, is_memory, &col);
    let names: Vec<String> = rows.iter().map(|r| r.name.clone()).collect();
    let main_w = (160 + 80 * durable.len().max(1) as u32).clamp(600, 2400);
    let side_w = if memory.is_empty() { 0 } else { 320 };
    let label_area = label_px(&names, 7, 60, 360);
    let root = SVGBackend::new(path, (main_w + side_w, 520 + label_area)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| plot_err(path, e))?;
    let (main, side) = root.split_horizontally(main_w);
    bar_panel(
        path,
        &main,
        title,
        "median NOTPM (bars: min–max of repeats)",
        &durable,
        rows.len(),
        0,
    )?;
    if !memory.is_empty() {
        bar_panel(
            path,
            &side,
            "baseline (own scale)",
            "median NOTPM",
            &memory,
            rows.len(),
            0,
        )?;
    }
    root.present().map_err(|e| plot_err(path, e))?;
    Ok(())
}

/// Draws the median p99 New-Order latency of each configuration, with min–max error bars.
///
/// # Errors
///
/// The SVG cannot be drawn or written.
pub fn draw_latency(path: &Path, title: &str, rows: &[ConfigResult]) -> TpccResult<()> {
    let col: Column = ("p99", |r| Some(r.latency[0].p99_ms), 2);
    let bars = bars_of(rows, |_| true, &col);
    let names: Vec<String> = rows.iter().map(|r| r.name.clone()).collect();
    let w = (160 + 80 * bars.len().max(1) as u32).clamp(600, 2400);
    let label_area = label_px(&names, 7, 60, 360);
    let root = SVGBackend::new(path, (w, 520 + label_area)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| plot_err(path, e))?;
    bar_panel(
        path,
        &root,
        title,
        "p99 New-Order latency, ms (bars: min–max of repeats)",
        &bars,
        rows.len(),
        1,
    )?;
    root.present().map_err(|e| plot_err(path, e))?;
    Ok(())
}

/// Draws the cost per transaction: CPU µs, device KiB written, device KiB read (one panel each,
/// medians with min–max error bars).
///
/// # Errors
///
/// The SVG cannot be drawn or written.
pub fn draw_costs(path: &Path, title: &str, rows: &[ConfigResult]) -> TpccResult<()> {
    // The first three cost columns of report.md: CPU µs, device KiB written, device KiB read.
    let cols: Vec<Column> = cost_columns().into_iter().take(3).collect();
    let names: Vec<String> = rows.iter().map(|r| r.name.clone()).collect();
    let panel_w = (160 + 60 * rows.len().max(1) as u32).clamp(420, 1400);
    let label_area = label_px(&names, 7, 60, 360);
    let root = SVGBackend::new(path, (panel_w * 3, 560 + label_area)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| plot_err(path, e))?;
    let root = root
        .titled(title, ("sans-serif", 22))
        .map_err(|e| plot_err(path, e))?;
    let panels = root.split_evenly((1, 3));
    for (area, col) in panels.iter().zip(cols.iter()) {
        let bars = bars_of(rows, |_| true, col);
        bar_panel(path, area, col.0, col.0, &bars, rows.len(), col.2)?;
    }
    root.present().map_err(|e| plot_err(path, e))?;
    Ok(())
}
