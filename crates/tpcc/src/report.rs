//! Matrix reports: `report.md` (configuration → median NOTPM, ratio to the first row, p99
//! New-Order latency, data writes, doublewrite writes, pages skipped, log bytes, syncs per commit),
//! `notpm.svg` (NOTPM per interval, one line per run, coloured per configuration) and
//! `medians.svg` (bar chart of the median NOTPM), drawn with plotters' SVG backend.
//!
//! Invariant: every figure in a row is the median over that configuration's repeats (never a mean
//! that one noisy repeat can drag), and the first row that ran is the ratio's base.

use plotters::prelude::*;
use std::path::Path;

use crate::driver::{bytes, RunResult};
use crate::error::{TpccError, TpccResult};
use crate::load::LoadReport;

/// One configuration's results across repeats.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ConfigResult {
    /// Row name (configuration, with the file system when a `--fs` axis is used).
    pub name: String,
    /// The set knobs and workload overrides.
    pub description: String,
    /// Engine label.
    pub engine: String,
    /// Why the configuration did not run, if it did not.
    pub skipped: Option<String>,
    /// One result per repeat, in run order.
    pub runs: Vec<RunResult>,
    /// Whether every post-run consistency check passed (None: not checked).
    pub checks_passed: Option<bool>,
    /// The load of this configuration's data (when the matrix loads per configuration).
    pub load: Option<LoadReport>,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

impl ConfigResult {
    /// Median NOTPM over repeats.
    pub fn median_notpm(&self) -> f64 {
        median(self.runs.iter().map(|r| r.notpm).collect())
    }
    /// Median p99 New-Order latency, ms.
    pub fn p99_new_order_ms(&self) -> f64 {
        median(self.runs.iter().map(|r| r.latency[0].p99_ms).collect())
    }
    fn median_of(&self, f: impl Fn(&RunResult) -> f64) -> f64 {
        median(self.runs.iter().map(f).collect())
    }
}

/// The header information of a report.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ReportMeta {
    /// Spec name.
    pub name: String,
    /// Spec description.
    pub description: String,
    /// What the published (seed) experiment found, quoted from the spec.
    pub published: String,
    /// Workload line (warehouses, terminals, durations, repeats).
    pub workload: String,
    /// Notes (engine caveats, skipped file systems, ...).
    pub notes: Vec<String>,
}

/// Renders `report.md`.
pub fn render_markdown(meta: &ReportMeta, rows: &[ConfigResult]) -> String {
    let mut s = format!("# keel-tpcc matrix: {}\n\n", meta.name);
    if !meta.description.is_empty() {
        s.push_str(&format!("{}\n\n", meta.description.trim()));
    }
    s.push_str(&format!("{}\n\n", meta.workload));
    for n in &meta.notes {
        s.push_str(&format!("- {n}\n"));
    }
    if !meta.notes.is_empty() {
        s.push('\n');
    }
    let base = rows
        .iter()
        .find(|r| r.skipped.is_none() && !r.runs.is_empty())
        .map(|r| r.median_notpm())
        .unwrap_or(0.0);
    s.push_str("| configuration | median NOTPM | ratio | p99 New-Order ms | data writes | doublewrite writes | pages skipped | log bytes | syncs/commit | check |\n");
    s.push_str("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n");
    for r in rows {
        if let Some(why) = &r.skipped {
            s.push_str(&format!("| {} | skipped | | | | | | | | {why} |\n", r.name));
            continue;
        }
        let m = r.median_notpm();
        let ratio = if base > 0.0 { m / base } else { 0.0 };
        s.push_str(&format!(
            "| {} | {:.0} | {:.2} | {:.2} | {:.0} | {:.0} | {:.0} | {} | {:.3} | {} |\n",
            r.name,
            m,
            ratio,
            r.p99_new_order_ms(),
            r.median_of(|x| x.stats.data_writes as f64),
            r.median_of(|x| x.stats.doublewrite_writes as f64),
            r.median_of(|x| x.stats.pages_skipped_protection as f64),
            bytes(r.median_of(|x| x.stats.log_bytes as f64) as u64),
            r.median_of(|x| x.stats.syncs_per_commit()),
            match r.checks_passed {
                Some(true) => "1–12 pass",
                Some(false) => "**FAILED**",
                None => "not run",
            }
        ));
    }
    s.push_str(
        "\nCounters are medians over the repeats of the measured period (warm-up excluded). ",
    );
    s.push_str("Ratio = median NOTPM / the first row's.\n\n");

    s.push_str("## Configurations\n\n| configuration | engine | settings |\n| --- | --- | --- |\n");
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {} |\n",
            r.name, r.engine, r.description
        ));
    }

    s.push_str("\n## NOTPM of every run (in run order: repeats interleaved A B C A B C …)\n\n");
    s.push_str("| configuration | runs |\n| --- | --- |\n");
    for r in rows.iter().filter(|r| r.skipped.is_none()) {
        let v: Vec<String> = r.runs.iter().map(|x| format!("{:.0}", x.notpm)).collect();
        s.push_str(&format!("| {} | {} |\n", r.name, v.join(", ")));
    }

    if rows.iter().any(|r| r.load.is_some()) {
        s.push_str("\n## Loads (one per configuration)\n\n");
        s.push_str("| configuration | rows | seconds | data writes | doublewrite writes | pages skipped | log bytes | syncs |\n");
        s.push_str("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
        for r in rows {
            if let Some(l) = &r.load {
                s.push_str(&format!(
                    "| {} | {} | {:.1} | {} | {} | {} | {} | {} |\n",
                    r.name,
                    l.rows,
                    l.seconds,
                    l.stats.data_writes,
                    l.stats.doublewrite_writes,
                    l.stats.pages_skipped_protection,
                    bytes(l.stats.log_bytes),
                    l.stats.log_syncs + l.stats.data_syncs
                ));
            }
        }
    }
    if !meta.published.is_empty() {
        s.push_str(&format!(
            "\n## The published experiment (for comparison)\n\n{}\n",
            meta.published.trim()
        ));
    }
    s.push_str("\nCharts: `notpm.svg` (NOTPM per interval), `medians.svg` (median NOTPM). Raw data: `matrix.json`, `runs/*/intervals.csv`.\n");
    s
}

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

/// Draws NOTPM per measured interval, one line per run, coloured per configuration, with the
/// legend beside the plot (it never covers the lines).
pub fn draw_notpm(path: &Path, title: &str, rows: &[ConfigResult]) -> TpccResult<()> {
    let ran: Vec<&ConfigResult> = rows.iter().filter(|r| !r.runs.is_empty()).collect();
    let mut max_t: f64 = 1.0;
    let mut max_y: f64 = 1.0;
    for r in &ran {
        for run in &r.runs {
            for i in run.intervals.iter().filter(|i| !i.warmup) {
                max_t = max_t.max(i.t_end_s);
                max_y = max_y.max(i.notpm);
            }
        }
    }
    let names: Vec<String> = ran.iter().map(|r| r.name.clone()).collect();
    let legend_w = label_px(&names, 7, 160, 480);
    let height = (600u32).max(80 + 20 * names.len() as u32);
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
    for (ci, r) in ran.iter().enumerate() {
        let color = palette(ci, names.len());
        for run in &r.runs {
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
                .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(|e| plot_err(path, e))?;
        }
    }
    for (ci, name) in names.iter().enumerate() {
        let y = 60 + 20 * ci as i32;
        let color = palette(ci, names.len());
        legend
            .draw(&PathElement::new(
                vec![(8, y), (32, y)],
                color.stroke_width(3),
            ))
            .map_err(|e| plot_err(path, e))?;
        legend
            .draw(&Text::new(
                name.clone(),
                (40, y - 7),
                ("sans-serif", 13).into_font().color(&BLACK),
            ))
            .map_err(|e| plot_err(path, e))?;
    }
    root.present().map_err(|e| plot_err(path, e))?;
    Ok(())
}

/// Draws the median NOTPM of each configuration as bars (skipped ones left empty and labelled).
pub fn draw_medians(path: &Path, title: &str, rows: &[ConfigResult]) -> TpccResult<()> {
    let n = rows.len().max(1);
    let max_y = rows.iter().map(|r| r.median_notpm()).fold(1.0f64, f64::max);
    let width = (160 + 70 * n as u32).clamp(600, 2400);
    let names: Vec<String> = rows.iter().map(|r| r.name.clone()).collect();
    let label_area = label_px(&names, 7, 60, 360);
    let root = SVGBackend::new(path, (width, 480 + label_area)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| plot_err(path, e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(label_area)
        .y_label_area_size(75)
        .build_cartesian_2d(0.0..n as f64, 0.0..max_y * 1.15)
        .map_err(|e| plot_err(path, e))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc("median NOTPM")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(|e| plot_err(path, e))?;
    for (i, r) in rows.iter().enumerate() {
        let x0 = i as f64 + 0.15;
        let x1 = i as f64 + 0.85;
        let m = r.median_notpm();
        if r.skipped.is_none() {
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(x0, 0.0), (x1, m)],
                    palette(i, n).filled(),
                )))
                .map_err(|e| plot_err(path, e))?;
            chart
                .draw_series(std::iter::once(Text::new(
                    format!("{m:.0}"),
                    (i as f64 + 0.3, m + max_y * 0.03),
                    ("sans-serif", 14),
                )))
                .map_err(|e| plot_err(path, e))?;
        } else {
            chart
                .draw_series(std::iter::once(Text::new(
                    "skipped".to_string(),
                    (i as f64 + 0.25, max_y * 0.05),
                    ("sans-serif", 14),
                )))
                .map_err(|e| plot_err(path, e))?;
        }
    }
    // Names under the bars, rotated so long configuration names fit.
    let area = chart.plotting_area();
    let (px, _) = area.get_pixel_range();
    let (_, py) = area.get_pixel_range();
    let bar_w = (px.end - px.start) as f64 / n as f64;
    for (i, name) in names.iter().enumerate() {
        let x = px.start + (bar_w * (i as f64 + 0.5)) as i32;
        let style = TextStyle::from(("sans-serif", 13).into_font())
            .transform(FontTransform::Rotate90)
            .color(&BLACK);
        root.draw(&Text::new(name.clone(), (x - 6, py.end + 8), style))
            .map_err(|e| plot_err(path, e))?;
    }
    root.present().map_err(|e| plot_err(path, e))?;
    Ok(())
}
