//! `cargo xtask plot [CSV [SVG]]`: draws what `bench host` recorded (`--record CSV`) against
//! the number of parents, one panel per figure — converge time, peak RSS, CPU time and
//! instructions per reconcile — and one line per variant, as an SVG (by default
//! `docs/scaling.csv` into `docs/scaling.svg`).
//!
//! # Assumptions
//! The file begins with the header the benchmark writes. Every row is of one pipeline on one
//! kind of cluster: rows of several are refused, since one line through them would say nothing.
//! Several runs at one N are each drawn as a point, and the line goes through their mean.

use std::{collections::BTreeMap, fmt::Write as _, path::Path};

use anyhow::{Context, Result, bail};

/// The columns `bench host` writes (its `RECORD_HEADER`).
const HEADER: [&str; 10] = [
    "pipeline",
    "cluster",
    "parents",
    "variant",
    "converge_s",
    "peak_rss_mib",
    "cpu_s",
    "reconciles",
    "writes",
    "instructions_per_reconcile",
];

/// The variants and how they are drawn.
const VARIANTS: [(&str, &str, &str); 3] = [
    ("a", "(a) windlass run (wasm)", "#1f77b4"),
    ("b", "(b) native kube-runtime controller", "#d62728"),
    ("c", "(c) the host, native Engine", "#2ca02c"),
];

/// One row of the file: a variant's figures at `parents`, None where the run did not measure.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    pipeline: String,
    cluster: String,
    parents: f64,
    variant: String,
    converge_s: Option<f64>,
    peak_rss_mib: Option<f64>,
    cpu_s: Option<f64>,
    reconciles: Option<f64>,
    instructions: Option<f64>,
}

/// A panel: its title and the figure it takes from a row.
struct Panel {
    title: &'static str,
    figure: fn(&Row) -> Option<f64>,
}

const PANELS: [Panel; 4] = [
    Panel {
        title: "converge, s",
        figure: |r| r.converge_s,
    },
    Panel {
        title: "peak RSS, MiB",
        figure: |r| r.peak_rss_mib,
    },
    Panel {
        title: "CPU per reconcile until converged, ms",
        figure: |r| match (r.cpu_s, r.reconciles) {
            (Some(cpu), Some(n)) if n > 0.0 => Some(cpu * 1_000.0 / n),
            _ => None,
        },
    },
    Panel {
        title: "instructions per reconcile (callgrind), M",
        figure: |r| r.instructions.map(|i| i / 1e6),
    },
];

/// Reads `csv` and writes the plot to `svg`.
pub fn plot(csv: &Path, svg: &Path) -> Result<()> {
    let text =
        std::fs::read_to_string(csv).with_context(|| format!("reading {}", csv.display()))?;
    let rows = parse(&text).with_context(|| format!("in {}", csv.display()))?;
    let out = render(&rows)?;
    std::fs::write(svg, out).with_context(|| format!("writing {}", svg.display()))?;
    println!("{} rows drawn into {}", rows.len(), svg.display());
    Ok(())
}

/// The rows of a recorded file.
///
/// # Errors
/// A header other than the benchmark's, a row of the wrong width or with a field that is not a
/// number, named by line and column; rows of more than one pipeline or cluster.
fn parse(text: &str) -> Result<Vec<Row>> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let header: Vec<&str> = lines
        .next()
        .context("an empty file: no header")?
        .1
        .split(',')
        .collect();
    if header != HEADER {
        bail!(
            "line 1: the header is {:?}, not the one `bench host --record` writes ({:?})",
            header.join(","),
            HEADER.join(",")
        );
    }
    let mut rows = Vec::new();
    for (index, line) in lines {
        let at = index + 1;
        let fields: Vec<&str> = line.split(',').collect();
        if fields.len() != HEADER.len() {
            bail!("line {at}: {} fields, not {}", fields.len(), HEADER.len());
        }
        let number = |column: usize| -> Result<Option<f64>> {
            let field = fields[column].trim();
            if field.is_empty() {
                return Ok(None);
            }
            match field.parse::<f64>() {
                Ok(v) if v.is_finite() && v >= 0.0 => Ok(Some(v)),
                _ => bail!(
                    "line {at}, column {}: {field:?} is not a number of at least 0",
                    HEADER[column]
                ),
            }
        };
        let variant = fields[3].trim();
        if !VARIANTS.iter().any(|(v, _, _)| *v == variant) {
            bail!("line {at}, column variant: {variant:?} is not a, b or c");
        }
        rows.push(Row {
            pipeline: fields[0].trim().to_string(),
            cluster: fields[1].trim().to_string(),
            parents: number(2)?
                .filter(|n| *n >= 1.0)
                .with_context(|| format!("line {at}, column parents: empty or below 1"))?,
            variant: variant.to_string(),
            converge_s: number(4)?,
            peak_rss_mib: number(5)?,
            cpu_s: number(6)?,
            reconciles: number(7)?,
            instructions: number(9)?,
        });
    }
    let Some(first) = rows.first() else {
        bail!("no rows after the header");
    };
    if let Some(other) = rows
        .iter()
        .find(|r| r.pipeline != first.pipeline || r.cluster != first.cluster)
    {
        bail!(
            "rows of {} on {} and of {} on {}: plot one pipeline on one cluster at a time",
            first.pipeline,
            first.cluster,
            other.pipeline,
            other.cluster
        );
    }
    Ok(rows)
}

const PANEL_W: f64 = 420.0;
const PANEL_H: f64 = 280.0;
const MARGIN_L: f64 = 64.0;
const MARGIN_R: f64 = 16.0;
const MARGIN_T: f64 = 34.0;
const MARGIN_B: f64 = 44.0;
const LEGEND_H: f64 = 56.0;

/// The SVG: a legend, then the panels that have data, two a row, each with logarithmic axes.
fn render(rows: &[Row]) -> Result<String> {
    let panels: Vec<&Panel> = PANELS
        .iter()
        .filter(|p| rows.iter().any(|r| (p.figure)(r).is_some_and(|v| v > 0.0)))
        .collect();
    if panels.is_empty() {
        bail!("no row has a figure to draw");
    }
    let columns = 2.min(panels.len());
    let width = PANEL_W * columns as f64;
    let height = LEGEND_H + PANEL_H * panels.len().div_ceil(2) as f64;
    let first = &rows[0];
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(
        svg,
        r#"<rect width="{width}" height="{height}" fill="white"/>"#
    );
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="18" font-size="13" text-anchor="middle">bench host, {} pipeline on the {}: figures against the number of parents</text>"#,
        width / 2.0,
        escape(&first.pipeline),
        escape(&first.cluster)
    );
    for (i, (variant, label, colour)) in VARIANTS.iter().enumerate() {
        if !rows.iter().any(|r| r.variant == *variant) {
            continue;
        }
        let x = 16.0 + 270.0 * i as f64;
        let _ = writeln!(
            svg,
            r#"<line x1="{x}" y1="38" x2="{}" y2="38" stroke="{colour}" stroke-width="2"/><text x="{}" y="42">{}</text>"#,
            x + 20.0,
            x + 26.0,
            escape(label)
        );
    }
    for (index, panel) in panels.iter().enumerate() {
        let left = PANEL_W * (index % 2) as f64;
        let top = LEGEND_H + PANEL_H * (index / 2) as f64;
        draw_panel(&mut svg, panel, rows, left, top);
    }
    svg.push_str("</svg>\n");
    Ok(svg)
}

/// One panel at (`left`, `top`): axes with ticks at powers of ten (and 2 and 5 where the range
/// is short), a point per row and a line per variant through the mean at each N.
fn draw_panel(svg: &mut String, panel: &Panel, rows: &[Row], left: f64, top: f64) {
    let points: Vec<(&str, f64, f64)> = rows
        .iter()
        .filter_map(|r| {
            (panel.figure)(r)
                .filter(|v| *v > 0.0)
                .map(|v| (r.variant.as_str(), r.parents, v))
        })
        .collect();
    let (x_lo, x_hi) = log_range(points.iter().map(|p| p.1));
    let (y_lo, y_hi) = log_range(points.iter().map(|p| p.2));
    let (x0, x1) = (left + MARGIN_L, left + PANEL_W - MARGIN_R);
    let (y0, y1) = (top + PANEL_H - MARGIN_B, top + MARGIN_T);
    let sx = |v: f64| x0 + (v.log10() - x_lo) / (x_hi - x_lo) * (x1 - x0);
    let sy = |v: f64| y0 - (v.log10() - y_lo) / (y_hi - y_lo) * (y0 - y1);
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" font-size="12" text-anchor="middle">{}</text>"#,
        (x0 + x1) / 2.0,
        top + MARGIN_T - 10.0,
        escape(panel.title)
    );
    let _ = writeln!(
        svg,
        r##"<rect x="{x0}" y="{y1}" width="{}" height="{}" fill="none" stroke="#888"/>"##,
        x1 - x0,
        y0 - y1
    );
    for tick in ticks(x_lo, x_hi) {
        let x = sx(tick);
        let _ = writeln!(
            svg,
            r##"<line x1="{x:.1}" y1="{y0}" x2="{x:.1}" y2="{y1}" stroke="#eee"/><text x="{x:.1}" y="{}" text-anchor="middle">{}</text>"##,
            y0 + 14.0,
            label(tick)
        );
    }
    for tick in ticks(y_lo, y_hi) {
        let y = sy(tick);
        let _ = writeln!(
            svg,
            r##"<line x1="{x0}" y1="{y:.1}" x2="{x1}" y2="{y:.1}" stroke="#eee"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            x0 - 4.0,
            y + 4.0,
            label(tick)
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle">parents (N)</text>"#,
        (x0 + x1) / 2.0,
        y0 + 32.0
    );
    for (variant, _, colour) in VARIANTS {
        let mut at: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
        for (_, n, value) in points.iter().filter(|p| p.0 == variant) {
            at.entry(*n as u64).or_default().push(*value);
            let _ = writeln!(
                svg,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{colour}"/>"#,
                sx(*n),
                sy(*value)
            );
        }
        if at.len() > 1 {
            let line: Vec<String> = at
                .iter()
                .map(|(n, values)| {
                    let mean = values.iter().sum::<f64>() / values.len() as f64;
                    format!("{:.1},{:.1}", sx(*n as f64), sy(mean))
                })
                .collect();
            let _ = writeln!(
                svg,
                r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"/>"#,
                line.join(" ")
            );
        }
    }
}

/// The range of `values` in log10, widened to whole decades (at least one).
fn log_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v.log10()), hi.max(v.log10()))
    });
    let (lo, hi) = (lo.floor(), hi.ceil());
    if hi > lo { (lo, hi) } else { (lo, lo + 1.0) }
}

/// Tick values between 10^lo and 10^hi: each power of ten, and 2 and 5 times it when the axis
/// spans two decades or fewer.
fn ticks(lo: f64, hi: f64) -> Vec<f64> {
    let steps: &[f64] = if hi - lo <= 2.0 {
        &[1.0, 2.0, 5.0]
    } else {
        &[1.0]
    };
    let mut out = Vec::new();
    let mut decade = lo as i32;
    while f64::from(decade) <= hi {
        for step in steps {
            let v = step * 10f64.powi(decade);
            if v.log10() <= hi + 1e-9 {
                out.push(v);
            }
        }
        decade += 1;
    }
    out
}

/// A tick's label: 10,000 as `10k`, 0.5 as `0.5`.
fn label(v: f64) -> String {
    if v >= 1_000_000.0 {
        format!("{}M", v / 1_000_000.0)
    } else if v >= 1_000.0 {
        format!("{}k", v / 1_000.0)
    } else {
        format!("{v}")
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "pipeline,cluster,parents,variant,converge_s,peak_rss_mib,cpu_s,reconciles,writes,instructions_per_reconcile";

    fn file(rows: &[&str]) -> String {
        let mut text = format!("{HEAD}\n");
        for row in rows {
            text.push_str(row);
            text.push('\n');
        }
        text
    }

    #[test]
    fn rows_are_read_with_what_was_not_measured_left_empty() {
        let rows = parse(&file(&[
            "full,devcluster,100,a,1.50,120.5,2.0,130,3300,",
            "full,devcluster,100,a,,,,,,5100000",
        ]))
        .unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].converge_s, Some(1.5));
        assert_eq!(rows[0].reconciles, Some(130.0));
        assert_eq!(rows[0].instructions, None);
        assert_eq!(rows[1].converge_s, None);
        assert_eq!(rows[1].instructions, Some(5_100_000.0));
    }

    #[test]
    fn a_bad_field_is_named_by_line_and_column() {
        let e = parse(&file(&["full,devcluster,100,a,fast,1,1,1,1,"])).unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"line 2, column converge_s: "fast" is not a number of at least 0"#
        );
        let e = parse(&file(&["full,devcluster,100,d,1,1,1,1,1,"])).unwrap_err();
        assert!(e.to_string().contains("line 2, column variant"), "{e}");
        let e = parse(&file(&["full,devcluster,100,a,1"])).unwrap_err();
        assert_eq!(e.to_string(), "line 2: 5 fields, not 10");
    }

    #[test]
    fn another_header_or_mixed_pipelines_are_refused() {
        let e = parse("n,converge\n100,1\n").unwrap_err();
        assert!(e.to_string().starts_with("line 1: the header"), "{e}");
        let e = parse(&file(&[
            "full,devcluster,100,a,1,1,1,1,1,",
            "storage,devcluster,100,a,1,1,1,1,1,",
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("plot one pipeline"), "{e}");
    }

    #[test]
    fn each_variant_gets_a_line_through_its_mean_and_panels_without_data_are_left_out() {
        let rows = parse(&file(&[
            "full,devcluster,100,a,1,100,1,100,1,",
            "full,devcluster,100,a,3,100,1,100,1,",
            "full,devcluster,1000,a,10,400,10,1000,1,",
            "full,devcluster,100,b,2,90,1,500,1,",
            "full,devcluster,1000,b,20,300,10,5000,1,",
            "full,devcluster,100,c,1,80,1,,1,",
        ]))
        .unwrap();
        let svg = render(&rows).unwrap();
        // Converge and peak RSS for a and b (c has one N: points, no line), CPU per reconcile
        // for a and b; no instruction panel.
        assert_eq!(svg.matches("<polyline").count(), 6, "{svg}");
        assert!(svg.contains("converge, s"));
        assert!(svg.contains("CPU per reconcile"));
        assert!(!svg.contains("instructions per reconcile"));
        assert_eq!(svg.matches("<circle").count(), 6 + 6 + 5);
        // (a) at 100 is drawn at the mean of 1 and 3: x of 100 on a 100..1000 axis is the
        // left edge, 2 s on a 1..100 s axis is log10(2)/2 of the way up.
        let y = MARGIN_T + LEGEND_H + (PANEL_H - MARGIN_T - MARGIN_B) * (1.0 - 2f64.log10() / 2.0);
        assert!(
            svg.contains(&format!("points=\"{:.1},{y:.1} ", MARGIN_L)),
            "{svg}"
        );
    }

    #[test]
    fn ticks_fall_on_decades_and_their_halves_and_fifths_on_short_axes() {
        assert_eq!(ticks(2.0, 3.0), vec![100.0, 200.0, 500.0, 1_000.0]);
        assert_eq!(ticks(0.0, 4.0), vec![1.0, 10.0, 100.0, 1_000.0, 10_000.0]);
        assert_eq!(log_range([150.0, 9_000.0].into_iter()), (2.0, 4.0));
        assert_eq!(log_range([100.0].into_iter()), (2.0, 3.0));
        assert_eq!(label(10_000.0), "10k");
        assert_eq!(label(0.5), "0.5");
    }
}
