//! PNG plots of a speculative-decoding plan, drawn with plotters' bitmap
//! backend. Text uses a bundled DejaVu Sans Mono (assets/, Bitstream Vera
//! licence), so no system font library is needed.

use crate::error::{PlanError, Result};
use crate::spec::{BreakEven, Planner, Setting, SpecPlan, Which};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
use std::path::{Path, PathBuf};
use std::sync::Once;

const FONT: &[u8] = include_bytes!("../assets/DejaVuSansMono.ttf");
const FAMILY: &str = "sans-serif";

fn ensure_font() {
    static ONCE: Once = Once::new();
    // The font is compiled in and known to parse; a failure would only lose text.
    ONCE.call_once(|| {
        let _ = register_font(FAMILY, FontStyle::Normal, FONT);
    });
}

fn perr(path: &Path, e: impl std::fmt::Display) -> PlanError {
    PlanError::Plot {
        path: path.display().to_string(),
        detail: e.to_string(),
    }
}

/// Draws `chart`'s legend at `at` and writes `root`'s image to `path`.
fn finish<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    root: &DrawingArea<DB, Shift>,
    path: &Path,
    at: SeriesLabelPosition,
) -> Result<()> {
    chart
        .configure_series_labels()
        .position(at)
        .label_font((FAMILY, 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| perr(path, e))?;
    root.present().map_err(|e| perr(path, e))?;
    Ok(())
}

/// Draws `latency.png` and `cycle.png` into `dir`; returns their paths.
pub fn draw(dir: &Path, planner: &Planner, plan: &SpecPlan) -> Result<Vec<PathBuf>> {
    ensure_font();
    std::fs::create_dir_all(dir).map_err(|source| PlanError::Io {
        path: dir.display().to_string(),
        source,
    })?;
    let a = dir.join("latency.png");
    draw_latency(&a, planner, plan)?;
    let b = dir.join("cycle.png");
    draw_cycle(&b, plan)?;
    Ok(vec![a, b])
}

fn draw_latency(path: &Path, planner: &Planner, plan: &SpecPlan) -> Result<()> {
    let best = &plan.settings[plan.best];
    // The x axis and the break-even line follow the setting the text quotes
    // (the plan's most forgiving one), so the two always agree.
    let key = plan
        .most_forgiving
        .and_then(|i| plan.settings.get(i))
        .unwrap_or(best);
    let be_scale = match key.break_even {
        BreakEven::At { scale, .. } => Some(scale),
        _ => None,
    };
    let smax = 2.0f64.max(be_scale.unwrap_or(0.0) * 2.0);
    let n = 200;
    let mut plain = Vec::new();
    let mut spec: Vec<(&Setting, Vec<(f64, f64)>)> = Vec::new();
    for st in &plan.settings {
        spec.push((st, Vec::new()));
    }
    let mut ymax: f64 = 1.0;
    for i in 0..=n {
        let s = smax * i as f64 / n as f64;
        let x = planner.mean_latency_of(key.which, s)?;
        let p = planner.plain(s).tok_s;
        plain.push((x, p));
        ymax = ymax.max(p);
        for (st, pts) in spec.iter_mut() {
            let t = planner.setting_of(st.which, s)?.tok_s;
            ymax = ymax.max(t);
            pts.push((x, t));
        }
    }
    let xmax = plain.last().map(|p| p.0).unwrap_or(1.0).max(1e-9);
    let root = BitMapBackend::new(path, (1000, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| perr(path, e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "tok/s vs all-reduce latency (mean per all-reduce of the cycle)",
            (FAMILY, 20),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..xmax, 0.0..ymax * 1.1)
        .map_err(|e| perr(path, e))?;
    chart
        .configure_mesh()
        .x_desc("all-reduce latency (us)")
        .y_desc("tokens/s")
        .label_style((FAMILY, 14))
        .draw()
        .map_err(|e| perr(path, e))?;
    chart
        .draw_series(LineSeries::new(plain.clone(), BLACK.stroke_width(3)))
        .map_err(|e| perr(path, e))?
        .label("plain decoding")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.stroke_width(3)));
    for (i, (st, pts)) in spec.into_iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let width = if st.which == best.which { 3 } else { 1 };
        chart
            .draw_series(LineSeries::new(pts, color.stroke_width(width)))
            .map_err(|e| perr(path, e))?
            .label(format!("spec, {}", st.label()))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(width))
            });
    }
    if let BreakEven::At { mean_us, .. } = key.break_even {
        chart
            .draw_series(LineSeries::new(
                vec![(mean_us, 0.0), (mean_us, ymax * 1.1)],
                RED.stroke_width(2),
            ))
            .map_err(|e| perr(path, e))?
            .label(format!("break-even {mean_us:.1} us ({})", key.label()))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED.stroke_width(2)));
    }
    let now = planner.mean_latency_of(key.which, 1.0)?;
    chart
        .draw_series(std::iter::once(Circle::new(
            (now, best.tok_s),
            6,
            BLUE.filled(),
        )))
        .map_err(|e| perr(path, e))?
        .label(format!("this box: {now:.1} us, {:.1} tok/s", best.tok_s))
        .legend(|(x, y)| Circle::new((x + 10, y), 5, BLUE.filled()));
    // MiddleRight: plotters' default place.
    finish(&mut chart, &root, path, SeriesLabelPosition::MiddleRight)
}

fn draw_cycle(path: &Path, plan: &SpecPlan) -> Result<()> {
    // One bar for plain decoding (one token) and one per setting (one cycle).
    let mut bars: Vec<(String, [f64; 4])> = vec![(
        "plain".into(),
        [0.0, 0.0, plan.plain.compute_us, plan.plain.comm_us],
    )];
    for s in &plan.settings {
        bars.push((
            match s.which {
                Which::Chain { .. } => {
                    format!("{} step{}", s.steps, if s.steps == 1 { "" } else { "s" })
                }
                Which::Tree { .. } => format!("{}x{}/{}", s.steps, s.topk, s.verify_tokens),
            },
            [
                s.draft_compute_us,
                s.draft_comm_us,
                s.verify_compute_us,
                s.verify_comm_us,
            ],
        ));
    }
    let ymax = bars
        .iter()
        .map(|b| b.1.iter().sum::<f64>())
        .fold(1.0, f64::max)
        / 1000.0;
    let root = BitMapBackend::new(path, (1000, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| perr(path, e))?;
    let n = bars.len();
    let mut chart = ChartBuilder::on(&root)
        .caption("time per cycle: compute and communication", (FAMILY, 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..n as f64, 0.0..ymax * 1.15)
        .map_err(|e| perr(path, e))?;
    let labels: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - i as f64 - 0.5).abs() < 0.26 && i < labels.len() {
                labels[i].clone()
            } else {
                String::new()
            }
        })
        .y_desc("ms")
        .label_style((FAMILY, 14))
        .draw()
        .map_err(|e| perr(path, e))?;
    let parts = [
        ("draft compute", RGBColor(120, 170, 230)),
        ("draft all-reduce", RGBColor(240, 160, 90)),
        ("verify compute", RGBColor(40, 90, 180)),
        ("verify all-reduce", RGBColor(200, 70, 40)),
    ];
    for (k, (name, color)) in parts.iter().enumerate() {
        let rects: Vec<_> = bars
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let base: f64 = b.1[..k].iter().sum::<f64>() / 1000.0;
                let top = base + b.1[k] / 1000.0;
                Rectangle::new(
                    [(i as f64 + 0.15, base), (i as f64 + 0.85, top)],
                    color.filled(),
                )
            })
            .collect();
        let c = *color;
        chart
            .draw_series(rects)
            .map_err(|e| perr(path, e))?
            .label(if k >= 2 {
                format!("{name} (plain: forward)")
            } else {
                name.to_string()
            })
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], c.filled()));
    }
    finish(&mut chart, &root, path, SeriesLabelPosition::UpperLeft)
}
