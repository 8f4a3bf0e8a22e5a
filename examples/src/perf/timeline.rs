//! `ferroccl-perf --render-trace OUT.png TRACE.json…`: a PNG timeline of the
//! Chrome trace files `libnccl-profiler-trace.so` writes (the same JSON that
//! Perfetto and `chrome://tracing` open), for documents and machines without a
//! browser.
//!
//! One band per rank: a row with its collectives (Coll/P2p spans, stretched
//! over their proxy work by the plugin), then one row per (channel, peer,
//! direction) track with the ProxyOp span as a thin bar and its ProxyStep
//! state intervals as coloured boxes (the plugin's per-slot and net tracks are
//! folded into their channel's row). The window is the span of the last collective (by seqNumber) of the
//! largest count in the files (the benchmark's, not the tool's own small ones)
//! across every rank.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ab_glyph::{Font, FontRef, PxScale, ScaleFont, point};
use plotters::prelude::*;
use serde_json::Value;

/// Picture width in pixels.
const W: u32 = 1600;
/// Label column width in pixels.
const LABEL_W: i32 = 190;
/// How many collectives the picture shows (the last ones).
const LAST: usize = 1;
/// Row height in pixels.
const ROW_H: i32 = 20;
/// Fonts tried for the labels (DejaVu Sans, as Debian/Ubuntu ship it).
const FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

/// ProxyStep states and their colours (legend order).
const STATES: &[(&str, RGBColor)] = &[
    ("SendGPUWait", RGBColor(158, 202, 225)),
    ("SendPeerWait", RGBColor(253, 174, 107)),
    ("SendWait", RGBColor(230, 85, 13)),
    ("RecvWait", RGBColor(49, 163, 84)),
    ("RecvFlushWait", RGBColor(161, 217, 155)),
    ("RecvGPUWait", RGBColor(117, 107, 177)),
];

/// One complete (`"ph": "X"`) event.
struct Span {
    pid: i64,
    track: String,
    name: String,
    cat: String,
    ts: f64,
    end: f64,
    count: u64,
    seq: Option<u64>,
}

/// Reads the complete events of one trace file with their track names.
fn read(path: &Path) -> Result<Vec<Span>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", path.display()))?;
    let events = v["traceEvents"]
        .as_array()
        .ok_or_else(|| format!("{}: no \"traceEvents\" list (not a Chrome trace)", path.display()))?;
    let mut names: BTreeMap<(i64, i64), String> = BTreeMap::new();
    for e in events.iter().filter(|e| e["ph"] == "M" && e["name"] == "thread_name") {
        if let (Some(p), Some(t), Some(n)) = (e["pid"].as_i64(), e["tid"].as_i64(), e["args"]["name"].as_str()) {
            names.insert((p, t), n.to_string());
        }
    }
    let mut out = Vec::new();
    for e in events.iter().filter(|e| e["ph"] == "X") {
        let (Some(pid), Some(tid), Some(ts)) = (e["pid"].as_i64(), e["tid"].as_i64(), e["ts"].as_f64()) else {
            continue;
        };
        out.push(Span {
            pid,
            track: names.get(&(pid, tid)).cloned().unwrap_or_default(),
            name: e["name"].as_str().unwrap_or("").to_string(),
            cat: e["cat"].as_str().unwrap_or("").to_string(),
            ts,
            end: ts + e["dur"].as_f64().unwrap_or(0.0),
            count: e["args"]["count"].as_u64().unwrap_or(0),
            seq: e["args"]["seqNumber"].as_u64(),
        });
    }
    Ok(out)
}

/// The channel row a track belongs to (`ch 0 send→1 slot 3 net` → `ch 0 send→1`).
fn channel_row(track: &str) -> Option<&str> {
    if !track.starts_with("ch ") {
        return None;
    }
    let t = track.strip_suffix(" net").unwrap_or(track);
    Some(t.find(" slot ").map_or(t, |i| &t[..i]))
}

fn load_font() -> Result<FontRef<'static>, String> {
    for f in FONTS {
        if let Ok(bytes) = std::fs::read(f) {
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            return FontRef::try_from_slice(bytes).map_err(|e| format!("{f}: not a TrueType font: {e}"));
        }
    }
    Err(format!("no font for the labels: none of {FONTS:?} exists"))
}

/// A label to draw once the shapes are done: text, top-left corner, pixel size, colour.
struct Label(String, (i32, i32), f32, RGBColor);

/// Rasterises `l` onto the RGB buffer `buf` (`w` × `h`), blending by coverage.
fn draw_label(buf: &mut [u8], (w, h): (u32, u32), font: &FontRef<'_>, l: &Label) {
    let Label(text, (x, y), size, RGBColor(r, g, b)) = l;
    let scaled = font.as_scaled(PxScale::from(*size));
    let mut caret = *x as f32;
    let baseline = *y as f32 + scaled.ascent();
    for ch in text.chars() {
        let id = scaled.glyph_id(ch);
        let glyph = id.with_scale_and_position(*size, point(caret, baseline));
        caret += scaled.h_advance(id);
        let Some(outline) = font.outline_glyph(glyph) else {
            continue;
        };
        let bounds = outline.px_bounds();
        outline.draw(|gx, gy, c| {
            let (px, py) = (bounds.min.x as i64 + i64::from(gx), bounds.min.y as i64 + i64::from(gy));
            if px < 0 || py < 0 || px >= i64::from(w) || py >= i64::from(h) {
                return;
            }
            let i = (py as usize * w as usize + px as usize) * 3;
            for (k, v) in [*r, *g, *b].into_iter().enumerate() {
                buf[i + k] = (f32::from(buf[i + k]) * (1.0 - c) + f32::from(v) * c) as u8;
            }
        });
    }
}

/// Renders `inputs` (Chrome trace files of the trace profiler) into the PNG
/// `out`; returns the number of rows drawn. Errors name the file and what was
/// expected (unreadable, not JSON, no `traceEvents`, no collective, no font).
pub fn render_files(out: &Path, inputs: &[PathBuf]) -> Result<usize, String> {
    let mut spans = Vec::new();
    for p in inputs {
        spans.extend(read(p)?);
    }
    // The window: the last [`LAST`] collectives (by seqNumber, which all ranks
    // share) of the most frequent name among those of the largest count.
    let colls: Vec<&Span> = spans.iter().filter(|s| s.cat == "coll" && s.seq.is_some()).collect();
    let max = colls.iter().map(|s| s.count).max().ok_or_else(|| {
        format!("no collective (\"cat\": \"coll\") in {inputs:?}: was the trace written with Coll events on?")
    })?;
    let mut by_name: BTreeMap<&str, usize> = BTreeMap::new();
    for s in colls.iter().filter(|s| s.count == max) {
        *by_name.entry(s.name.as_str()).or_default() += 1;
    }
    let name = by_name
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(k, _)| *k)
        .unwrap_or_default();
    let mut seqs: Vec<u64> = colls
        .iter()
        .filter(|s| s.count == max && s.name == name)
        .filter_map(|s| s.seq)
        .collect();
    seqs.sort();
    seqs.dedup();
    let first = seqs[seqs.len().saturating_sub(LAST)];
    // A process may hold several communicators (the perf tool's own, the
    // benchmark's): per rank, the latest instance of each chosen seqNumber.
    let mut latest: BTreeMap<(i64, u64), &Span> = BTreeMap::new();
    for s in colls
        .iter()
        .filter(|s| s.name == name && s.count == max && s.seq.is_some_and(|q| q >= first))
    {
        let e = latest.entry((s.pid, s.seq.unwrap_or(0))).or_insert(s);
        if s.ts > e.ts {
            *e = s;
        }
    }
    let chosen: Vec<&Span> = latest.into_values().collect();
    let t0 = chosen.iter().map(|s| s.ts).fold(f64::INFINITY, f64::min);
    // Its end, but no further than the rank's next collective starts (a span
    // stretched over late children would otherwise widen the picture).
    let t1 = chosen
        .iter()
        .map(|c| {
            let next = colls
                .iter()
                .filter(|s| s.pid == c.pid && s.ts > c.ts)
                .map(|s| s.ts)
                .fold(f64::INFINITY, f64::min);
            c.end.min(next)
        })
        .fold(f64::NEG_INFINITY, f64::max);
    let span_us = (t1 - t0).max(1.0);
    let visible = |s: &Span| s.end >= t0 && s.ts <= t1;
    // Rows: per rank its collectives, then its channel tracks (sorted by name).
    let mut rows: Vec<(i64, String)> = Vec::new();
    let mut ranks: Vec<i64> = spans.iter().filter(|s| visible(s)).map(|s| s.pid).collect();
    ranks.sort();
    ranks.dedup();
    for &r in &ranks {
        rows.push((r, String::new()));
        let mut ch: Vec<&str> = spans
            .iter()
            .filter(|s| s.pid == r && visible(s))
            .filter_map(|s| channel_row(&s.track))
            .collect();
        ch.sort();
        ch.dedup();
        rows.extend(ch.into_iter().map(|c| (r, c.to_string())));
    }
    let row_of: BTreeMap<(i64, &str), usize> = rows
        .iter()
        .enumerate()
        .map(|(i, (r, t))| ((*r, t.as_str()), i))
        .collect();

    let font = load_font()?;
    let mut labels: Vec<Label> = Vec::new();
    let top = 40;
    let plot_h = rows.len() as i32 * ROW_H;
    let h = (top + plot_h + 70) as u32;
    let mut buf = vec![255u8; (W * h * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (W, h)).into_drawing_area();
        let e = |e: DrawingAreaErrorKind<_>| format!("drawing: {e:?}");
        root.fill(&WHITE).map_err(e)?;
        let x_of =
            |t: f64| LABEL_W + (((t - t0) / span_us).clamp(0.0, 1.0) * f64::from(W as i32 - LABEL_W - 20)) as i32;
        labels.push(Label(
            format!(
                "{name} of count {max} (seqNumber {first}..={}) on {} rank(s): {span_us:.0} µs",
                seqs.last().copied().unwrap_or(first),
                ranks.len(),
            ),
            (LABEL_W, 10),
            18.0,
            BLACK,
        ));
        // Row backgrounds and labels.
        for (i, (r, t)) in rows.iter().enumerate() {
            let y = top + i as i32 * ROW_H;
            let bg = if t.is_empty() {
                RGBColor(225, 232, 245)
            } else if i % 2 == 0 {
                RGBColor(248, 248, 248)
            } else {
                WHITE
            };
            root.draw(&Rectangle::new([(0, y), (W as i32, y + ROW_H)], bg.filled()))
                .map_err(e)?;
            let label = if t.is_empty() {
                format!("rank {r}")
            } else {
                format!("  {t}")
            };
            labels.push(Label(label, (6, y + 3), 14.0, BLACK));
        }
        // Time axis: 10 ticks.
        let ay = top + plot_h;
        for k in 0..=10 {
            let t = t0 + span_us * f64::from(k) / 10.0;
            let x = x_of(t);
            root.draw(&PathElement::new(vec![(x, top), (x, ay + 4)], RGBColor(210, 210, 210)))
                .map_err(e)?;
            labels.push(Label(format!("{:.0}", t - t0), (x - 10, ay + 8), 13.0, BLACK));
        }
        labels.push(Label("time (µs)".into(), (LABEL_W - 80, ay + 8), 13.0, BLACK));
        // Spans.
        for s in spans.iter().filter(|s| visible(s)) {
            let row = match s.cat.as_str() {
                "coll" | "p2p" => row_of.get(&(s.pid, "")),
                _ => channel_row(&s.track).and_then(|c| row_of.get(&(s.pid, c))),
            };
            let Some(&row) = row else { continue };
            let y = top + row as i32 * ROW_H;
            let (x0, x1) = (x_of(s.ts), x_of(s.end).max(x_of(s.ts) + 1));
            match s.cat.as_str() {
                "coll" | "p2p" => {
                    root.draw(&Rectangle::new(
                        [(x0, y + 2), (x1, y + ROW_H - 2)],
                        RGBColor(49, 130, 189).filled(),
                    ))
                    .map_err(e)?;
                    if x1 - x0 > 8 * s.name.len() as i32 {
                        labels.push(Label(s.name.clone(), (x0 + 4, y + 3), 13.0, WHITE));
                    }
                }
                "proxyOp" => {
                    root.draw(&Rectangle::new(
                        [(x0, y + 1), (x1, y + 4)],
                        RGBColor(90, 90, 90).filled(),
                    ))
                    .map_err(e)?;
                }
                "state" => {
                    if let Some((_, c)) = STATES.iter().find(|(n, _)| *n == s.name) {
                        root.draw(&Rectangle::new([(x0, y + 6), (x1, y + ROW_H - 2)], c.filled()))
                            .map_err(e)?;
                    }
                }
                "net" => {
                    root.draw(&Rectangle::new(
                        [(x0, y + ROW_H - 3), (x1, y + ROW_H - 1)],
                        BLACK.filled(),
                    ))
                    .map_err(e)?;
                }
                _ => {}
            }
        }
        // Legend.
        let ly = ay + 30;
        let mut x = LABEL_W;
        let mut key = |name: &str, c: RGBColor, x: &mut i32| -> Result<(), String> {
            root.draw(&Rectangle::new([(*x, ly), (*x + 14, ly + 14)], c.filled()))
                .map_err(e)?;
            labels.push(Label(name.to_string(), (*x + 18, ly), 14.0, BLACK));
            *x += 30 + 8 * name.len() as i32;
            Ok(())
        };
        key("collective", RGBColor(49, 130, 189), &mut x)?;
        key("ProxyOp", RGBColor(90, 90, 90), &mut x)?;
        for (n, c) in STATES {
            key(n, *c, &mut x)?;
        }
        key("net plugin", BLACK, &mut x)?;
        root.present().map_err(e)?;
    }
    for l in &labels {
        draw_label(&mut buf, (W, h), &font, l);
    }
    let f = std::fs::File::create(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(f), W, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    enc.write_header()
        .and_then(|mut w| w.write_image_data(&buf))
        .map_err(|e| format!("{}: {e}", out.display()))?;
    Ok(rows.len())
}
