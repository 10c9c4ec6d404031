//! `paio plot`: PNG figures of a run's statistics, and the figure model the
//! experiment drivers write their plots in.
//!
//! A [`Figure`] is a grid of panels, each with series of points drawn as
//! lines, steps, points or bars. It is built here from a recording
//! ([`figure_of_recording`]: bandwidth, waits and latency of each channel
//! over time) or from statistics files ([`figure_of_stats`]: each
//! channel's totals), or read from a JSON file (`paio plot --figure`),
//! and drawn by [`render`].

use std::path::{Path, PathBuf};

use paio_control::record::{ChannelSample, Sample};
use plotters::prelude::*;
use serde::{Deserialize, Serialize};

use crate::summary::StatsFile;

/// A figure: panels laid out in `columns` columns, row by row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Figure {
    /// Title above every panel (none when empty).
    #[serde(default)]
    pub title: String,
    /// Columns of the grid (at least 1).
    #[serde(default = "one")]
    pub columns: usize,
    /// Width of one panel in pixels.
    #[serde(default = "panel_width")]
    pub panel_width: u32,
    /// Height of one panel in pixels.
    #[serde(default = "panel_height")]
    pub panel_height: u32,
    /// The panels.
    pub panels: Vec<Panel>,
}

fn one() -> usize {
    1
}
fn panel_width() -> u32 {
    1000
}
fn panel_height() -> u32 {
    300
}

/// One panel: axes, their labels and ranges, and its series.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Panel {
    /// Title above the panel.
    pub title: String,
    /// Label of the x axis.
    pub x_label: String,
    /// Label of the y axis.
    pub y_label: String,
    /// A logarithmic x axis (values ≤ 0 are left out).
    pub x_log: bool,
    /// A logarithmic y axis (values ≤ 0 are left out).
    pub y_log: bool,
    /// Lower end of the x axis; default: the data's.
    pub x_min: Option<f64>,
    /// Upper end of the x axis; default: the data's.
    pub x_max: Option<f64>,
    /// Lower end of the y axis; default: 0 (linear) or the data's (log).
    pub y_min: Option<f64>,
    /// Upper end of the y axis; default: the data's, plus 10 %.
    pub y_max: Option<f64>,
    /// Category names at x = 0, 1, 2, ...: the x axis is labelled with
    /// them instead of numbers (bar charts).
    pub categories: Vec<String>,
    /// The series, drawn in order.
    pub series: Vec<Series>,
}

/// How a series is drawn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Straight lines between points.
    #[default]
    Line,
    /// Steps: each value holds from the previous point's x to its own
    /// (the value of a period, drawn over the period it measures).
    Steps,
    /// A marker at each point.
    Points,
    /// A bar from the axis to each point, `width` wide.
    Bars,
}

/// The dash pattern of a line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dash {
    /// Solid.
    #[default]
    Solid,
    /// Dashes.
    Dashed,
    /// Dots.
    Dotted,
}

/// One series of a panel.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Series {
    /// Its legend entry; none when empty.
    pub label: String,
    /// How it is drawn.
    pub kind: Kind,
    /// Its dash pattern (lines and steps).
    pub dash: Dash,
    /// A colour of [`PALETTE`] by name; default: the next one.
    pub color: Option<String>,
    /// Line width in pixels (lines and steps), or bar width in x units.
    pub width: Option<f64>,
    /// `[x, y]` pairs; a `null` y breaks the line there.
    pub points: Vec<(f64, Option<f64>)>,
}

/// The colours series take, in order, and their names.
pub const PALETTE: [(&str, RGBColor); 12] = [
    ("blue", RGBColor(31, 119, 180)),
    ("orange", RGBColor(255, 127, 14)),
    ("green", RGBColor(44, 160, 44)),
    ("red", RGBColor(214, 39, 40)),
    ("purple", RGBColor(148, 103, 189)),
    ("brown", RGBColor(140, 86, 75)),
    ("pink", RGBColor(227, 119, 194)),
    ("olive", RGBColor(188, 189, 34)),
    ("cyan", RGBColor(23, 190, 207)),
    ("grey", RGBColor(127, 127, 127)),
    ("lightgrey", RGBColor(210, 210, 210)),
    ("black", RGBColor(0, 0, 0)),
];

/// Why a figure could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// No usable font.
    #[error(
        "no font to write the labels with (looked for {looked}): install Debian's \
         fonts-dejavu-core, or pass --font FILE.ttf"
    )]
    NoFont {
        /// The places looked at.
        looked: String,
    },
    /// The font file could not be read or parsed.
    #[error("--font {}: {why}", .path.display())]
    BadFont {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// A figure that cannot be drawn.
    #[error("{0}")]
    Figure(String),
    /// Drawing or writing the PNG failed.
    #[error("{}: {why}", .path.display())]
    Draw {
        /// The output file.
        path: PathBuf,
        /// Why.
        why: String,
    },
}

/// Fonts looked for when `--font` is not given (Debian's fonts-dejavu-core
/// first).
pub const FONTS: [&str; 4] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

/// Loads `font` (or the first of [`FONTS`] present) as the figures' font.
/// Once per process: the font's bytes stay for its lifetime.
pub fn load_font(font: Option<&Path>) -> Result<(), PlotError> {
    let path = match font {
        Some(p) => p.to_path_buf(),
        None => FONTS
            .iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())
            .ok_or_else(|| PlotError::NoFont {
                looked: FONTS.join(", "),
            })?,
    };
    let bytes = std::fs::read(&path).map_err(|e| PlotError::BadFont {
        path: path.clone(),
        why: e.to_string(),
    })?;
    plotters::style::register_font("sans-serif", FontStyle::Normal, Box::leak(bytes.into()))
        .map_err(|_| PlotError::BadFont {
            path,
            why: "not a TrueType or OpenType font".into(),
        })
}

/// Which channels of a recording to plot.
#[derive(Debug, Clone, Default)]
pub struct Select {
    /// Keep channels whose `stage/channel` contains one of these (all when
    /// empty).
    pub matching: Vec<String>,
    /// Keep at most this many, those that moved the most bytes.
    pub top: usize,
}

/// What [`figure_of_recording`] left out, to be said to the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftOut {
    /// Channels that matched.
    pub matched: usize,
    /// Channels plotted.
    pub plotted: usize,
    /// Samples the recorder dropped.
    pub dropped: u64,
}

fn name_of(c: &ChannelSample) -> String {
    format!("{} / {}", c.stage, c.channel)
}

/// Bandwidth, wait p99 and call latency (p50, p99, p99.9) of each selected
/// channel over time, one panel each, a colour per channel.
pub fn figure_of_recording(
    samples: &[Sample],
    select: &Select,
    title: &str,
) -> Result<(Figure, LeftOut), PlotError> {
    // Channels by bytes moved (rate × period), largest first.
    let mut totals: Vec<(String, f64)> = Vec::new();
    let mut prev_t = 0.0;
    for s in samples {
        let dt = (s.t_s - prev_t).max(0.0);
        prev_t = s.t_s;
        for c in &s.channels {
            let name = name_of(c);
            if !select.matching.is_empty() && !select.matching.iter().any(|m| name.contains(m)) {
                continue;
            }
            match totals.iter_mut().find(|(n, _)| *n == name) {
                Some((_, b)) => *b += c.bytes_per_sec * dt,
                None => totals.push((name, c.bytes_per_sec * dt)),
            }
        }
    }
    if totals.is_empty() {
        return Err(PlotError::Figure(if select.matching.is_empty() {
            "the recording has no channel (no stage reported a period)".into()
        } else {
            format!(
                "no channel matches {}; the recording has: {}",
                select.matching.join(", "),
                channel_list(samples)
            )
        }));
    }
    totals.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let matched = totals.len();
    totals.truncate(select.top.max(1));
    let names: Vec<String> = totals.into_iter().map(|(n, _)| n).collect();

    let series = |value: &dyn Fn(&ChannelSample) -> Option<f64>, dash: Dash| {
        names
            .iter()
            .enumerate()
            .map(|(i, name)| Series {
                label: name.clone(),
                kind: Kind::Steps,
                dash,
                color: Some(PALETTE[i % 10].0.to_string()),
                points: samples
                    .iter()
                    .filter_map(|s| {
                        let c = s.channels.iter().find(|c| name_of(c) == *name)?;
                        Some((s.t_s, value(c)))
                    })
                    .collect(),
                ..Series::default()
            })
            .collect::<Vec<_>>()
    };
    let ms = |ns: u64| ns as f64 / 1e6;
    let mib = |c: &ChannelSample| Some(c.bytes_per_sec / (1024.0 * 1024.0));
    let wait = |c: &ChannelSample| Some(ms(c.wait.p99_ns));
    let lat = |pick: fn(&paio::stats::LatencySummary) -> u64| {
        move |c: &ChannelSample| (c.latency.ops > 0).then(|| ms(pick(&c.latency)))
    };
    // One legend entry per channel: its p99; p50 and p99.9 share its colour.
    let unlabelled = |mut v: Vec<Series>| {
        v.iter_mut().for_each(|s| s.label.clear());
        v
    };
    let mut latency = series(&lat(|l| l.p99_ns), Dash::Solid);
    latency.extend(unlabelled(series(&lat(|l| l.p50_ns), Dash::Dotted)));
    latency.extend(unlabelled(series(&lat(|l| l.p999_ns), Dash::Dashed)));
    // Every panel is over the run's seconds, from 0.
    let over_time = |title: &str, y_label: &str, series| Panel {
        title: title.into(),
        x_label: "seconds".into(),
        x_min: Some(0.0),
        y_label: y_label.into(),
        series,
        ..Panel::default()
    };
    let figure = Figure {
        title: title.to_string(),
        columns: 1,
        panel_width: panel_width(),
        panel_height: panel_height(),
        panels: vec![
            over_time("bandwidth per channel", "MiB/s", series(&mib, Dash::Solid)),
            over_time(
                "wait in the channel's objects, p99 of each period",
                "ms",
                series(&wait, Dash::Solid),
            ),
            over_time(
                "call latency of each period (dotted p50, solid p99, dashed p99.9)",
                "ms",
                latency,
            ),
        ],
    };
    let left = LeftOut {
        matched,
        plotted: names.len(),
        dropped: samples.iter().map(|s| s.dropped).sum(),
    };
    Ok((figure, left))
}

fn channel_list(samples: &[Sample]) -> String {
    let mut names: Vec<String> = samples
        .iter()
        .flat_map(|s| s.channels.iter().map(name_of))
        .collect();
    names.sort();
    names.dedup();
    if names.is_empty() {
        "no channel".into()
    } else {
        names.join(", ")
    }
}

/// Each channel's totals over the whole run from the statistics files of
/// a `paio run --stats` (which hold totals, not a time series): bytes
/// moved, and call latency p50/p99/p99.9, as bars, one per channel.
pub fn figure_of_stats(files: &[StatsFile], title: &str) -> Result<Figure, PlotError> {
    let mut names = Vec::new();
    let mut mib = Vec::new();
    let mut lat: [Vec<(f64, Option<f64>)>; 3] = Default::default();
    for f in files {
        for c in f.stats.channels.iter().filter(|c| c.counts.ops > 0) {
            let x = names.len() as f64;
            names.push(format!("{} / {}", f.stage_label(), c.name));
            mib.push((x, Some(c.counts.bytes as f64 / (1024.0 * 1024.0))));
            let l = &c.counts.latency_total;
            for (i, ns) in [l.p50_ns, l.p99_ns, l.p999_ns].into_iter().enumerate() {
                let y = (l.ops > 0).then_some(ns as f64 / 1e6);
                lat[i].push((x + (i as f64 - 1.0) * 0.27, y));
            }
        }
    }
    if names.is_empty() {
        return Err(PlotError::Figure(
            "the statistics files have no channel that moved a request".into(),
        ));
    }
    let bars = |label: &str, color: &str, width: f64, points| Series {
        label: label.into(),
        kind: Kind::Bars,
        color: Some(color.into()),
        width: Some(width),
        points,
        ..Series::default()
    };
    let [p50, p99, p999] = lat;
    let panel = |title: &str, y_label: &str, y_log: bool, series| Panel {
        title: title.into(),
        y_label: y_label.into(),
        y_log,
        x_min: Some(-0.5),
        x_max: Some(names.len() as f64 - 0.5),
        categories: names.clone(),
        series,
        ..Panel::default()
    };
    Ok(Figure {
        title: title.to_string(),
        columns: 1,
        panel_width: (160 * names.len() as u32).clamp(700, 2400),
        panel_height: 340,
        panels: vec![
            panel(
                "bytes moved per channel",
                "MiB",
                false,
                vec![bars("", "blue", 0.6, mib)],
            ),
            panel(
                "call latency over the whole run",
                "ms (log)",
                true,
                vec![
                    bars("p50", "green", 0.25, p50),
                    bars("p99", "orange", 0.25, p99),
                    bars("p99.9", "red", 0.25, p999),
                ],
            ),
        ],
    })
}

/// The colour of `s`, the `i`-th series of its panel.
fn color_of(s: &Series, i: usize) -> Result<RGBColor, PlotError> {
    match &s.color {
        None => Ok(PALETTE[i % 10].1),
        Some(name) => PALETTE
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, c)| *c)
            .ok_or_else(|| {
                PlotError::Figure(format!(
                    "series {:?}: unknown colour {name:?}; one of {}",
                    s.label,
                    PALETTE.map(|(n, _)| n).join(", ")
                ))
            }),
    }
}

/// A value on a log axis is drawn at its log10; others as they are.
fn axis(v: f64, log: bool) -> Option<f64> {
    match (log, v.is_finite()) {
        (_, false) => None,
        (true, _) if v <= 0.0 => None,
        (true, _) => Some(v.log10()),
        (false, _) => Some(v),
    }
}

/// The drawn ranges of `p`'s axes, in axis units (log10 on log axes).
fn ranges(p: &Panel) -> (std::ops::Range<f64>, std::ops::Range<f64>) {
    let pts = || {
        p.series.iter().flat_map(|s| {
            s.points.iter().filter_map(|&(x, y)| {
                Some((axis(x, p.x_log)?, axis(y?, p.y_log)?, s.kind, s.width))
            })
        })
    };
    let fold = |f: &dyn Fn((f64, f64, Kind, Option<f64>)) -> f64, min: bool| {
        pts().map(f).reduce(if min { f64::min } else { f64::max })
    };
    let half = |(_, _, k, w): (f64, f64, Kind, Option<f64>)| {
        if k == Kind::Bars {
            w.unwrap_or(0.8) / 2.0
        } else {
            0.0
        }
    };
    let x_lo = p
        .x_min
        .and_then(|v| axis(v, p.x_log))
        .or_else(|| fold(&|t| t.0 - half(t), true))
        .unwrap_or(0.0);
    let mut x_hi = p
        .x_max
        .and_then(|v| axis(v, p.x_log))
        .or_else(|| fold(&|t| t.0 + half(t), false))
        .unwrap_or(1.0);
    let y_lo = p
        .y_min
        .and_then(|v| axis(v, p.y_log))
        .or_else(|| {
            if p.y_log {
                fold(&|t| t.1, true).map(|v| v.floor())
            } else {
                Some(0.0_f64.min(fold(&|t| t.1, true).unwrap_or(0.0)))
            }
        })
        .unwrap_or(0.0);
    let mut y_hi = p
        .y_max
        .and_then(|v| axis(v, p.y_log))
        .or_else(|| {
            fold(&|t| t.1, false).map(|v| {
                if p.y_log {
                    v.ceil().max(v + 0.1)
                } else {
                    v + (v - y_lo).abs() * 0.1
                }
            })
        })
        .unwrap_or(1.0);
    if x_hi <= x_lo {
        x_hi = x_lo + 1.0;
    }
    if y_hi <= y_lo {
        y_hi = y_lo + 1.0;
    }
    (x_lo..x_hi, y_lo..y_hi)
}

/// `v` rounded to three significant digits (15848.9 → 15800).
fn significant(v: f64) -> f64 {
    if v == 0.0 || !v.is_finite() {
        return v;
    }
    let scale = 10f64.powi(2 - v.abs().log10().floor() as i32);
    (v * scale).round() / scale
}

/// A number on an axis: 1234 → `1234`, 0.25 → `0.25`, 1.5e-5 → `1.5e-5`.
fn tick(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if !(1e-3..1e6).contains(&a) {
        format!("{v:.1e}")
    } else {
        // Three significant digits: three decimals made the ticks of an
        // axis between 0.001 and 0.01 repeat (0.0012 and 0.0014 both 0.001).
        let decimals = (2 - a.log10().floor() as i32).max(0) as usize;
        let s = format!("{v:.decimals$}");
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    }
}

/// Draws `figure` into the PNG file `out`. [`load_font`] must have
/// succeeded first.
pub fn render(figure: &Figure, out: &Path) -> Result<(), PlotError> {
    let draw = |why: String| PlotError::Draw {
        path: out.to_path_buf(),
        why,
    };
    let size = check(figure)?;
    // The file is written at the end of drawing, where a failure reads as
    // the image library's debug output: made first, as the user's own
    // (create_output), so that a directory, an unwritable path or another
    // user's link or file there is said plainly.
    paio_control::record::create_output(out)
        .map_err(|e| draw(format!("cannot write the PNG: {e}")))?;
    let root = BitMapBackend::new(out, size).into_drawing_area();
    draw_figure(figure, &root).map_err(|e| draw(e.to_string()))?;
    root.present().map_err(|e| draw(e.to_string()))
}

/// Draws `figure` into memory: its width, height and RGB pixels, row by
/// row. [`load_font`] must have succeeded first.
pub fn render_rgb(figure: &Figure) -> Result<(u32, u32, Vec<u8>), PlotError> {
    let (w, h) = check(figure)?;
    let mut buf = vec![0u8; w as usize * h as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
        draw_figure(figure, &root).map_err(|e| PlotError::Figure(e.to_string()))?;
        root.present()
            .map_err(|e| PlotError::Figure(e.to_string()))?;
    }
    Ok((w, h, buf))
}

/// Checks what can be checked before drawing; the image's size.
fn check(figure: &Figure) -> Result<(u32, u32), PlotError> {
    if figure.panels.is_empty() {
        return Err(PlotError::Figure("the figure has no panel".into()));
    }
    if figure.columns == 0 {
        return Err(PlotError::Figure("columns: at least 1".into()));
    }
    if !(100..=4000).contains(&figure.panel_width) || !(80..=4000).contains(&figure.panel_height) {
        return Err(PlotError::Figure(format!(
            "panel size {}x{}: each side from 100 (80 high) to 4000 pixels",
            figure.panel_width, figure.panel_height
        )));
    }
    for (n, p) in figure.panels.iter().enumerate() {
        for (i, s) in p.series.iter().enumerate() {
            color_of(s, i)?;
        }
        // Values near f64::MAX make the axes' span (with its headroom)
        // infinite, and drawing ticks over it never ends.
        let (x, y) = ranges(p);
        if !(x.end - x.start).is_finite() || !(y.end - y.start).is_finite() {
            return Err(PlotError::Figure(format!(
                "panel {} \"{}\": its values (or limits) span more than an axis can draw \
                 (x {:e} to {:e}, y {:e} to {:e}); scale them, or use a log axis",
                n + 1,
                p.title,
                x.start,
                x.end,
                y.start,
                y.end
            )));
        }
    }
    let (cols, rows) = grid(figure);
    let (w, h) = (
        figure.panel_width as u64 * cols as u64,
        figure.panel_height as u64 * rows as u64 + title_height(figure) as u64,
    );
    if w > MAX_SIDE || h > MAX_SIDE || w * h > MAX_PIXELS {
        return Err(PlotError::Figure(format!(
            "{} panels in {cols} column(s) make a {w}x{h} image: at most {MAX_SIDE} pixels a \
             side and {MAX_PIXELS} in all; use fewer panels or smaller ones",
            figure.panels.len()
        )));
    }
    Ok((w as u32, h as u32))
}

/// The longest side of a figure, in pixels.
pub const MAX_SIDE: u64 = 16_384;
/// The most pixels of a figure (192 MB of RGB while it is drawn).
pub const MAX_PIXELS: u64 = 64 << 20;

fn grid(figure: &Figure) -> (usize, usize) {
    let cols = figure.columns.min(figure.panels.len());
    (cols, figure.panels.len().div_ceil(cols))
}

fn title_height(figure: &Figure) -> u32 {
    if figure.title.is_empty() {
        0
    } else {
        36
    }
}

fn draw_figure(figure: &Figure, root: &Area<'_>) -> Result<(), Box<dyn std::error::Error>> {
    root.fill(&WHITE)?;
    let area = if figure.title.is_empty() {
        root.clone()
    } else {
        root.titled(&figure.title, ("sans-serif", 20))?
    };
    let (cols, rows) = grid(figure);
    // One legend width for the whole figure, from its longest label: the
    // panels' plots then line up in every column.
    let longest = figure
        .panels
        .iter()
        .flat_map(|p| &p.series)
        .map(|s| s.label.chars().count())
        .max()
        .unwrap_or(0);
    for (panel, cell) in figure.panels.iter().zip(area.split_evenly((rows, cols))) {
        draw_panel(panel, &cell, longest)?;
    }
    Ok(())
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;

/// Draws the legend of `p` (each labelled series once) in `area`, a
/// column right of the plot, and says how many did not fit.
fn draw_legend(p: &Panel, area: &Area<'_>) -> Result<(), Box<dyn std::error::Error>> {
    let (_, h) = area.dim_in_pixel();
    let rows = ((h as i32 - 40) / 16).max(1) as usize;
    let mut entries: Vec<(&str, RGBColor, Dash)> = Vec::new();
    for (i, s) in p.series.iter().enumerate() {
        if !s.label.is_empty() && !entries.iter().any(|e| e.0 == s.label) {
            entries.push((&s.label, color_of(s, i)?, s.dash));
        }
    }
    let font = ("sans-serif", 11).into_font().color(&BLACK);
    for (row, (label, color, dash)) in entries.iter().take(rows).enumerate() {
        let y = 34 + 16 * row as i32;
        if row + 1 == rows && entries.len() > rows {
            area.draw(&Text::new(
                format!("and {} more", entries.len() - rows + 1),
                (4, y - 5),
                font.clone(),
            ))?;
            break;
        }
        let line = [(4, y), (26, y)];
        match dash {
            Dash::Solid => area.draw(&PathElement::new(line, color.stroke_width(2)))?,
            Dash::Dashed => area.draw(&plotters::element::DashedPathElement::new(
                line,
                6,
                3,
                color.stroke_width(2),
            ))?,
            Dash::Dotted => area.draw(&plotters::element::DashedPathElement::new(
                line,
                2,
                3,
                color.stroke_width(2),
            ))?,
        }
        area.draw(&Text::new(label.to_string(), (32, y - 6), font.clone()))?;
    }
    Ok(())
}

/// Draws panel `p` in `cell`, with a legend column wide enough for labels
/// of `longest` characters (none when 0).
fn draw_panel(
    p: &Panel,
    cell: &Area<'_>,
    longest: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let (xr, yr) = ranges(p);
    let area = if longest == 0 {
        cell.clone()
    } else {
        let w = cell.dim_in_pixel().0;
        let legend_w = (longest as u32 * 7 + 40).min(w * 2 / 5);
        let (plot, legend) = cell.split_horizontally(w - legend_w);
        draw_legend(p, &legend)?;
        plot
    };
    let mut chart = ChartBuilder::on(&area)
        .caption(&p.title, ("sans-serif", 15))
        .margin(8)
        .x_label_area_size(if p.categories.is_empty() { 34 } else { 60 })
        .y_label_area_size(64)
        .build_cartesian_2d(xr.clone(), yr.clone())?;
    let (x_log, y_log) = (p.x_log, p.y_log);
    let categories = &p.categories;
    // A log axis gets about one label a decade, so they fall on powers of
    // ten, written with three significant digits at most.
    let decades = |r: &std::ops::Range<f64>| ((r.end - r.start).ceil() as usize + 1).clamp(2, 12);
    let x_fmt = move |v: &f64| {
        if !categories.is_empty() {
            let i = v.round();
            return if (v - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < categories.len() {
                categories[i as usize].clone()
            } else {
                String::new()
            };
        }
        if x_log {
            tick(significant(10f64.powf(*v)))
        } else {
            tick(*v)
        }
    };
    let y_fmt = move |v: &f64| {
        if y_log {
            tick(significant(10f64.powf(*v)))
        } else {
            tick(*v)
        }
    };
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(p.x_label.as_str())
        .y_desc(p.y_label.as_str())
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .light_line_style(RGBColor(235, 235, 235))
        .label_style(("sans-serif", 12));
    if !p.categories.is_empty() {
        mesh.x_labels(p.categories.len() + 1);
    } else if x_log {
        mesh.x_labels(decades(&xr));
    }
    if y_log {
        mesh.y_labels(decades(&yr));
    }
    mesh.draw()?;
    for (i, s) in p.series.iter().enumerate() {
        let color = color_of(s, i)?;
        let style = ShapeStyle::from(color).stroke_width(s.width.unwrap_or(1.5).round() as u32);
        // Runs of drawable points, broken at null or off-axis values.
        let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
        for &(x, y) in &s.points {
            match (axis(x, x_log), y.and_then(|y| axis(y, y_log))) {
                (Some(x), Some(y)) => runs.last_mut().expect("one run").push((x, y)),
                _ if !runs.last().expect("one run").is_empty() => runs.push(Vec::new()),
                _ => {}
            }
        }
        for run in runs.into_iter().filter(|r| !r.is_empty()) {
            let run = if s.kind == Kind::Steps {
                steps(&run)
            } else {
                run
            };
            match (s.kind, s.dash) {
                // A line through one point draws nothing: a recording of
                // one period, or a value between two gaps. A dot instead.
                (Kind::Line | Kind::Steps, _) if run.len() == 1 => {
                    let r = style.stroke_width + 2;
                    chart
                        .draw_series(run.into_iter().map(|p| Circle::new(p, r, color.filled())))?;
                }
                (Kind::Line | Kind::Steps, Dash::Solid) => {
                    chart.draw_series(LineSeries::new(run, style))?;
                }
                (Kind::Line | Kind::Steps, dash) => {
                    let (on, off) = if dash == Dash::Dashed { (8, 5) } else { (2, 3) };
                    chart.draw_series(DashedLineSeries::new(run, on, off, style))?;
                }
                (Kind::Points, _) => {
                    chart.draw_series(
                        run.into_iter()
                            .map(|(x, y)| Circle::new((x, y), 3, color.filled())),
                    )?;
                }
                (Kind::Bars, _) => {
                    let w = s.width.unwrap_or(0.8) / 2.0;
                    let base = yr.start;
                    chart.draw_series(run.into_iter().map(|(x, y)| {
                        Rectangle::new([(x - w, base), (x + w, y)], color.filled())
                    }))?;
                }
            }
        }
    }
    Ok(())
}

/// The corners of a step line: each value held from the previous x.
fn steps(run: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(run.len() * 2);
    for (i, &(x, y)) in run.iter().enumerate() {
        if i > 0 {
            out.push((run[i - 1].0, y));
        }
        out.push((x, y));
    }
    out
}

/// Largest figure read (`paio plot --figure`).
pub const MAX_FIGURE_BYTES: usize = 64 << 20;

/// Reads a figure from JSON (`paio plot --figure`, at most
/// [`MAX_FIGURE_BYTES`]), naming the field at fault.
pub fn read_figure(path: &Path) -> Result<Figure, PlotError> {
    let text = paio::textfile::read_bounded(path, MAX_FIGURE_BYTES)
        .map_err(|e| PlotError::Figure(format!("{}: {e}", path.display())))?;
    parse_figure(&text, path)
}

/// Parses a figure's JSON text, as [`read_figure`]; `path` is named in
/// errors.
pub fn parse_figure(text: &str, path: &Path) -> Result<Figure, PlotError> {
    let de = &mut serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        PlotError::Figure(format!(
            "{}: at {}: {} (the format is `paio plot --figure`'s, docs/cli.md)",
            path.display(),
            e.path(),
            e.inner()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use paio::stats::{LatencySummary, WaitSummary};

    fn chan(stage: &str, name: &str, bps: f64, p99_ms: u64) -> ChannelSample {
        ChannelSample {
            stage: stage.into(),
            channel: name.into(),
            bytes_per_sec: bps,
            ops_per_sec: 1.0,
            wait: WaitSummary::default(),
            latency: LatencySummary {
                ops: 1,
                p99_ns: p99_ms * 1_000_000,
                ..LatencySummary::default()
            },
        }
    }

    fn recording() -> Vec<Sample> {
        (1..=5)
            .map(|t| Sample {
                v: 1,
                t_s: t as f64,
                unix_ms: 0,
                dropped: 0,
                channels: vec![
                    chan("a[1] 10", "read", 1024.0 * 1024.0 * t as f64, 2),
                    chan("b[2] 11", "write", 1024.0, 1),
                ],
            })
            .collect()
    }

    /// An output path that cannot be written is said plainly.
    #[test]
    fn an_output_that_cannot_be_written_is_said_plainly() {
        let f = parse_figure(
            r#"{"panels":[{"series":[{"points":[[0,1],[1,2]]}]}]}"#,
            Path::new("f.json"),
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let e = render(&f, dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("cannot write the PNG") && e.contains("directory"),
            "{e}"
        );
    }

    /// Values near f64::MAX made an axis infinite and drawing never ended:
    /// refused, naming the panel.
    #[test]
    fn values_an_axis_cannot_span_are_refused() {
        for text in [
            r#"{"panels":[{"title":"big","series":[{"points":[[0,1],[1,1.7e308]]}]}]}"#,
            r#"{"panels":[{"title":"wide","y_min":-1e308,"y_max":1e308,"series":[{"points":[[0,1],[1,2]]}]}]}"#,
        ] {
            let f = parse_figure(text, Path::new("f.json")).unwrap();
            let e = render_rgb(&f).unwrap_err().to_string();
            assert!(e.contains("span more than an axis can draw"), "{e}");
            assert!(e.contains("panel 1"), "{e}");
        }
    }

    #[test]
    fn a_recording_becomes_three_panels_with_the_right_points() {
        let sel = Select {
            matching: vec![],
            top: 8,
        };
        let (f, left) = figure_of_recording(&recording(), &sel, "t").unwrap();
        assert_eq!(
            left,
            LeftOut {
                matched: 2,
                plotted: 2,
                dropped: 0
            }
        );
        assert_eq!(f.panels.len(), 3);
        let bw = &f.panels[0].series[0];
        assert_eq!(bw.label, "a[1] 10 / read");
        assert_eq!(bw.points[2], (3.0, Some(3.0)));
        // p50, p99, p99.9 for each of the two channels.
        assert_eq!(f.panels[2].series.len(), 6);
        assert_eq!(f.panels[2].series[0].label, "a[1] 10 / read");
        assert_eq!(f.panels[2].series[0].points[0], (1.0, Some(2.0)));
        assert!(f.panels[2].series[2..].iter().all(|s| s.label.is_empty()));
    }

    #[test]
    fn selection_keeps_the_busiest_and_names_what_exists() {
        let sel = Select {
            matching: vec![],
            top: 1,
        };
        let (f, left) = figure_of_recording(&recording(), &sel, "").unwrap();
        assert_eq!((left.matched, left.plotted), (2, 1));
        assert_eq!(f.panels[0].series.len(), 1);
        let sel = Select {
            matching: vec!["write".into()],
            top: 8,
        };
        let (f, _) = figure_of_recording(&recording(), &sel, "").unwrap();
        assert_eq!(f.panels[0].series[0].label, "b[2] 11 / write");
        let sel = Select {
            matching: vec!["nope".into()],
            top: 8,
        };
        let e = figure_of_recording(&recording(), &sel, "")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(
                "no channel matches nope; the recording has: a[1] 10 / read, b[2] 11 / write"
            ),
            "{e}"
        );
    }

    #[test]
    fn log_axes_leave_out_non_positive_values() {
        assert_eq!(axis(100.0, true), Some(2.0));
        assert_eq!(axis(0.0, true), None);
        assert_eq!(axis(-1.0, false), Some(-1.0));
        assert_eq!(axis(f64::NAN, false), None);
        let p = Panel {
            y_log: true,
            series: vec![Series {
                points: vec![(0.0, Some(10.0)), (1.0, Some(1000.0)), (2.0, Some(0.0))],
                ..Series::default()
            }],
            ..Panel::default()
        };
        // The point at y = 0 is left out of the x range too.
        let (x, y) = ranges(&p);
        assert_eq!((x.start, x.end), (0.0, 1.0));
        assert_eq!((y.start, y.end), (1.0, 3.1));
    }

    #[test]
    fn steps_hold_each_value_over_its_period() {
        assert_eq!(
            steps(&[(1.0, 5.0), (2.0, 7.0), (3.0, 6.0)]),
            vec![(1.0, 5.0), (1.0, 7.0), (2.0, 7.0), (2.0, 6.0), (3.0, 6.0)]
        );
    }

    #[test]
    fn ticks_are_short() {
        assert_eq!(tick(1234.0), "1234");
        assert_eq!(tick(0.25), "0.25");
        assert_eq!(tick(2.0e-5), "2.0e-5");
        assert_eq!(tick(0.0), "0");
        assert_eq!(tick(significant(10f64.powf(4.2))), "15800");
        assert_eq!(tick(significant(10f64.powf(2.0))), "100");
        // Ticks of an axis from 0.001 to 0.01 stay apart.
        let small: Vec<String> = [0.001, 0.0012, 0.0014, 0.0016, 0.0095]
            .iter()
            .map(|&v| tick(v))
            .collect();
        assert_eq!(small, ["0.001", "0.0012", "0.0014", "0.0016", "0.0095"]);
        assert_eq!(tick(-0.0375), "-0.0375");
        assert_eq!(tick(999_999.0), "999999");
    }

    /// The colour of pixel (`x`, `y`) of an RGB image `w` pixels wide.
    fn rgb_at(px: &[u8], w: u32, x: u32, y: u32) -> (u8, u8, u8) {
        let i = (y * w + x) as usize * 3;
        (px[i], px[i + 1], px[i + 2])
    }

    /// Draws for real (with the system font, as `paio plot` does) and
    /// looks at pixels: a bar is filled with its colour where its data
    /// says, a line crosses the panel at its value, and nothing is drawn
    /// left of a log axis' positive values.
    #[test]
    fn drawn_pixels_are_where_the_data_says() {
        load_font(None).expect("fonts-dejavu-core (make setup installs it)");
        let bar = |x: f64, y: f64, color: &str| Series {
            kind: Kind::Bars,
            color: Some(color.into()),
            width: Some(0.5),
            points: vec![(x, Some(y))],
            ..Series::default()
        };
        let f = Figure {
            title: String::new(),
            columns: 2,
            panel_width: 400,
            panel_height: 300,
            panels: vec![
                Panel {
                    y_min: Some(0.0),
                    y_max: Some(10.0),
                    categories: vec!["a".into(), "b".into()],
                    x_min: Some(-0.5),
                    x_max: Some(1.5),
                    series: vec![bar(0.0, 10.0, "red"), bar(1.0, 1.0, "green")],
                    ..Panel::default()
                },
                Panel {
                    y_min: Some(0.0),
                    y_max: Some(4.0),
                    series: vec![Series {
                        color: Some("blue".into()),
                        width: Some(3.0),
                        points: vec![(0.0, Some(2.0)), (10.0, Some(2.0))],
                        ..Series::default()
                    }],
                    ..Panel::default()
                },
            ],
        };
        let (w, h, px) = render_rgb(&f).unwrap();
        assert_eq!((w, h), (800, 300));
        let at = |x: u32, y: u32| rgb_at(&px, w, x, y);
        let column = |x: u32, c: (u8, u8, u8)| (0..h).filter(|&y| at(x, y) == c).count();
        let find_x = |c: (u8, u8, u8), from: u32, to: u32| {
            (from..to)
                .find(|&x| column(x, c) > 0)
                .expect("colour drawn")
        };
        let red = (214, 39, 40);
        let green = (44, 160, 44);
        let blue = (31, 119, 180);
        // The full-height red bar is about ten times the green one, and
        // left of it.
        let (xr, xg) = (find_x(red, 0, 400), find_x(green, 0, 400));
        assert!(xr < xg, "{xr} {xg}");
        let (hr, hg) = (column(xr + 5, red), column(xg + 5, green));
        assert!((hr as f64 / hg as f64 - 10.0).abs() < 1.5, "{hr} {hg}");
        // The blue line is horizontal at half the height of its axis, in
        // the right panel only.
        assert!((0..400).all(|x| column(x, blue) == 0));
        let rows: Vec<u32> = (0..h).filter(|&y| at(600, y) == blue).collect();
        assert!(!rows.is_empty() && rows.len() <= 4, "{rows:?}");
        let mid = rows[rows.len() / 2];
        assert!((120..=170).contains(&mid), "{mid}");
    }

    /// A line series with a single drawable point (a recording of one
    /// period, or a value between two gaps) is drawn as a dot where the
    /// point is, not left out.
    #[test]
    fn a_line_through_one_point_is_a_dot() {
        load_font(None).expect("fonts-dejavu-core (make setup installs it)");
        let f = Figure {
            title: String::new(),
            columns: 1,
            panel_width: 400,
            panel_height: 300,
            panels: vec![Panel {
                x_min: Some(0.0),
                x_max: Some(10.0),
                y_min: Some(0.0),
                y_max: Some(4.0),
                series: vec![Series {
                    color: Some("blue".into()),
                    dash: Dash::Dashed,
                    points: vec![(2.0, Some(1.0)), (5.0, None), (8.0, Some(3.0))],
                    ..Series::default()
                }],
                ..Panel::default()
            }],
        };
        let (w, h, px) = render_rgb(&f).unwrap();
        let blue = (31, 119, 180);
        let drawn: Vec<(u32, u32)> = (0..w)
            .flat_map(|x| (0..h).map(move |y| (x, y)))
            .filter(|&(x, y)| rgb_at(&px, w, x, y) == blue)
            .collect();
        // Two dots, a few pixels across each, the one at x = 2 lower (larger
        // y in pixels) and left of the one at x = 8; no line between them.
        let (left, right): (Vec<_>, Vec<_>) = drawn.iter().partition(|&&(x, _)| x < w / 2);
        assert!(!left.is_empty() && !right.is_empty(), "{drawn:?}");
        assert!(
            drawn.len() < 200,
            "a line was drawn: {} pixels",
            drawn.len()
        );
        let mean_y = |v: &[(u32, u32)]| v.iter().map(|p| p.1).sum::<u32>() / v.len() as u32;
        assert!(mean_y(&left) > mean_y(&right) + 50, "{left:?} {right:?}");
    }

    /// Panels stacked in one column share one legend width, so their plots
    /// line up: a line across each panel's whole x range ends at the same
    /// pixel column, whatever the length of the panel's own label.
    #[test]
    fn panels_in_a_column_line_up_whatever_their_labels() {
        load_font(None).expect("fonts-dejavu-core (make setup installs it)");
        let panel = |label: &str, color: &str| Panel {
            x_min: Some(0.0),
            x_max: Some(10.0),
            y_min: Some(0.0),
            y_max: Some(4.0),
            series: vec![Series {
                label: label.into(),
                color: Some(color.into()),
                width: Some(3.0),
                points: vec![(0.0, Some(2.0)), (10.0, Some(2.0))],
                ..Series::default()
            }],
            ..Panel::default()
        };
        let f = Figure {
            title: String::new(),
            columns: 1,
            panel_width: 600,
            panel_height: 200,
            panels: vec![
                panel("a", "blue"),
                panel("a much longer label of a channel", "red"),
            ],
        };
        let (w, h, px) = render_rgb(&f).unwrap();
        assert_eq!((w, h), (600, 400));
        // The rightmost pixel column of `c` within rows `rows`, left of the
        // legend's sample line (which starts in the legend column).
        let last_x = |c: (u8, u8, u8), rows: std::ops::Range<u32>| {
            (0..w)
                .filter(|&x| rows.clone().any(|y| rgb_at(&px, w, x, y) == c))
                .take_while({
                    let mut prev = None;
                    move |&x| {
                        let run = prev.is_none_or(|p| x == p + 1);
                        prev = Some(x);
                        run
                    }
                })
                .last()
                .expect("colour drawn")
        };
        // The data line's row band: the middle of each panel's plot.
        let (blue, red) = ((31, 119, 180), (214, 39, 40));
        let top = last_x(blue, 60..160);
        let bottom = last_x(red, 260..360);
        assert!(top.abs_diff(bottom) <= 1, "{top} {bottom}");
    }

    /// The JSON blocks of docs/cli.md's `paio plot` section: the
    /// recording line reads back, the figure draws.
    #[test]
    fn the_documented_examples_work() {
        let doc =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/cli.md"))
                .unwrap();
        let section = &doc[doc.find("## `paio plot`").unwrap()..];
        let blocks: Vec<&str> = section
            .split("```json\n")
            .skip(1)
            .map(|b| &b[..b.find("```").unwrap()])
            .collect();
        assert_eq!(blocks.len(), 2, "a recording line and a figure");
        let dir = tempfile::tempdir().unwrap();
        let rec = dir.path().join("r.jsonl");
        std::fs::write(&rec, blocks[0]).unwrap();
        let s = paio_control::record::read(&rec).unwrap();
        assert_eq!(s[0].channels[0].latency.p99_ns, 5127);
        let fig = dir.path().join("f.json");
        std::fs::write(&fig, blocks[1]).unwrap();
        let f = read_figure(&fig).unwrap();
        assert_eq!((f.columns, f.panels.len()), (2, 2));
        load_font(None).unwrap();
        let (w, h, _) = render_rgb(&f).unwrap();
        assert_eq!((w, h), (1200, 336));
    }

    #[test]
    fn figures_are_checked_before_drawing() {
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("f.json");
        std::fs::write(
            &bad,
            r#"{"panels":[{"series":[{"points":[[0,1]],"kind":"pie"}]}]}"#,
        )
        .unwrap();
        let e = read_figure(&bad).unwrap_err().to_string();
        assert!(
            e.contains("at panels[0].series[0].kind: unknown variant `pie`"),
            "{e}"
        );
        let f = Figure {
            title: String::new(),
            columns: 1,
            panel_width: 400,
            panel_height: 200,
            panels: vec![Panel {
                series: vec![Series {
                    color: Some("mauve".into()),
                    ..Series::default()
                }],
                ..Panel::default()
            }],
        };
        let e = render(&f, &dir.path().join("x.png"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown colour \"mauve\"; one of blue"), "{e}");
    }
}
