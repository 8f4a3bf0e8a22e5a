//! Performance report (advisory): one-way bandwidth and latency sweep per device, in-process.

use std::time::Instant;

use serde_json::json;

use crate::cx::{Cx, size_str};
use crate::outcome::Res;
use crate::registry::Registry;

pub(crate) fn register(r: &mut Registry) {
    r.add(
        "perf.sweep",
        "checklist",
        "bandwidth and latency sweep, 8 B .. 4 MiB (64 MiB with --full); reported, never fatal",
        sweep,
    )
    .advisory()
    .timeout(300);
}

fn sweep(cx: &mut Cx, _: u64) -> Res {
    let max = if cx.full { 64 << 20 } else { 4 << 20 };
    let mut rows = Vec::new();
    let mut table = Vec::new();
    for dev in cx.devices.clone() {
        cx.dev = dev;
        let p = cx.pair()?;
        let mut size = 8usize;
        while size <= max {
            // Latency: one message at a time.
            let lat_iters: usize = if size <= 64 << 10 { 200 } else { 10 };
            let t = Instant::now();
            cx.stream(&p, size, lat_iters, 1)?;
            let lat_us = t.elapsed().as_secs_f64() * 1e6 / lat_iters as f64;
            // Bandwidth: 8 messages in flight.
            let bw_iters = ((256usize << 20) / size).clamp(16, 2000);
            let t = Instant::now();
            cx.stream(&p, size, bw_iters, 8)?;
            let secs = t.elapsed().as_secs_f64();
            let gbps = (size * bw_iters) as f64 / secs / 1e9;
            table.push(format!(
                "dev {dev}  {:>10}  {:>10.1} us  {:>8.3} GB/s",
                size_str(size),
                lat_us,
                gbps
            ));
            rows.push(
                json!({"device": dev, "size": size, "latency_us": lat_us, "busbw_gbps": gbps, "iters": bw_iters}),
            );
            size *= 8;
        }
        cx.close_pair(p)?;
    }
    cx.notes.push(format!(
        "device  size  latency  bandwidth (one-way, in-process)\n{}",
        table.join("\n")
    ));
    cx.metrics = Some(json!({"sweep": rows}));
    Ok(())
}
