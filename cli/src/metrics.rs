//! `--metrics-file`: what the library recorded during this run (and `redmutex_run_total`), written
//! as a Prometheus text snapshot on exit, for the node exporter's textfile collector.

use std::io::Write;
use std::path::{Path, PathBuf};

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Buckets for the `_seconds` histograms: a fast local acquisition to a long wait.
const BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0,
];

/// Installs a Prometheus recorder for the whole process; its handle renders what it recorded.
pub fn install() -> Result<PrometheusHandle, String> {
    let recorder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &BUCKETS)
        .map_err(|error| format!("cannot set up metrics: {error}"))?
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)
        .map_err(|error| format!("cannot set up metrics: {error}"))?;
    Ok(handle)
}

/// Writes the snapshot to `path` through a temporary file beside it, renamed over it, so that a
/// collector reading meanwhile sees the old file or the new one, never half of one.
pub fn write(handle: &PrometheusHandle, path: &Path) -> Result<(), String> {
    let mut temporary = PathBuf::from(path);
    let mut file_name = path.file_name().unwrap_or_default().to_os_string();
    file_name.push(format!(".{}.tmp", std::process::id()));
    temporary.set_file_name(file_name);
    let written = std::fs::File::create(&temporary)
        .and_then(|mut file| {
            file.write_all(handle.render().as_bytes())?;
            file.sync_all()
        })
        .and_then(|()| std::fs::rename(&temporary, path));
    written.map_err(|error| {
        let _ = std::fs::remove_file(&temporary);
        format!("cannot write --metrics-file {}: {error}", path.display())
    })
}
