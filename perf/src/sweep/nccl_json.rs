//! nccl-tests' JSON document (`-J FILE`), in its schema (version 3 of nccl-tests 2.19's
//! `src/util.cu`): `version`, `start_time`, `args`, `env`, `nccl_version`, `config` (with
//! `devices`), `results` (one object per row: `size`, `count`, `type`, `redop`, `root` — a
//! string, `%6i` as nccl-tests writes it — `out_of_place` and `in_place` with `time`, `alg_bw`,
//! `bus_bw`, `nwrong`, then `actual_iterations` and `experiment_name`), `out_of_bounds`,
//! `average_bus_bandwidth`, `errors` and `end_time`. Numbers are C's `%lf`; booleans are the
//! strings `"true"`/`"false"`, as nccl-tests writes them. Times are UTC.
//!
//! The document is kept in memory as rows come and written when the run ends — to a file
//! beside the target, then renamed — so the target never holds half a document, whether the
//! run passed, failed or was interrupted.

use super::config::{Step, SweepConfig};
use super::row::{Measured, PerfRow};
use super::table::{Totals, bandwidth_passes};
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The schema version nccl-tests 2.19 writes.
pub const JSON_FILE_VERSION: u32 = 3;

/// Why the document cannot be written.
#[derive(Debug, thiserror::Error)]
#[error("-J {}: {message}", path.display())]
pub struct NcclJsonError {
    /// The file asked for.
    pub path: PathBuf,
    /// What went wrong.
    pub message: String,
}

/// An nccl-tests JSON document being gathered.
#[derive(Debug)]
pub struct NcclJson {
    target: PathBuf,
    aside: PathBuf,
    file: Option<File>,
    start_time: String,
    head: String,
    results: Vec<String>,
}

impl NcclJson {
    /// Choose the file for `path` as nccl-tests does (`path`, else `path.0`, `path.1`, … the
    /// first that does not exist) and create the file it is written aside in, so a path that
    /// cannot be written is refused before anything runs.
    pub fn create(path: &Path) -> Result<NcclJson, NcclJsonError> {
        let refuse = |message: String| NcclJsonError {
            path: path.to_owned(),
            message,
        };
        let is_json = path
            .extension()
            .is_some_and(|extension| extension.eq_ignore_ascii_case("json"));
        if !is_json {
            return Err(refuse(
                "nccl-tests writes JSON only, to a name ending in .json".to_owned(),
            ));
        }
        let mut target = path.to_owned();
        let mut tries = 0u32;
        while target.symlink_metadata().is_ok() {
            if tries == 1000 {
                return Err(refuse("no free name among FILE.0 to FILE.999".to_owned()));
            }
            let mut name = path.as_os_str().to_owned();
            name.push(format!(".{tries}"));
            target = PathBuf::from(name);
            tries += 1;
        }
        let mut aside = target.as_os_str().to_owned();
        aside.push(format!(".partial-{}", std::process::id()));
        let aside = PathBuf::from(aside);
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&aside)
            .map_err(|error| refuse(format!("cannot create {}: {error}", aside.display())))?;
        Ok(NcclJson {
            target,
            aside,
            file: Some(file),
            start_time: now_utc(),
            head: String::new(),
            results: Vec::new(),
        })
    }

    /// The file the document will be renamed to.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// Record the run's settings (`configs`' first), the NCCL version code and the devices
    /// (`# Using devices` lines without their `#`).
    pub fn begin(&mut self, configs: &[SweepConfig], nccl_version: u32, devices: &[String]) {
        let Some(config) = configs.first() else {
            return;
        };
        let mut head = String::new();
        let args: Vec<String> = std::env::args_os()
            .map(|arg| string(&arg.to_string_lossy()))
            .collect();
        let env: Vec<String> = std::env::vars_os()
            .map(|(key, value)| {
                string(&format!(
                    "{}={}",
                    key.to_string_lossy(),
                    value.to_string_lossy()
                ))
            })
            .collect();
        let step = match config.sizes.step {
            Step::Factor(factor) => format!("\"step_factor\":{factor}"),
            Step::Bytes(bytes) => format!("\"step_bytes\":{bytes}"),
        };
        let devices: Vec<String> = devices.iter().map(|line| device(line)).collect();
        // Writing to a `String` cannot fail.
        let _ = write!(
            head,
            "{{\"version\":{JSON_FILE_VERSION},\"start_time\":{},\"args\":[{}],\"env\":[{}],\"nccl_version\":{nccl_version},\
             \"config\":{{\"nthreads\":1,\"ngpus\":{},\"minimum_bytes\":{},\"maximum_bytes\":{},{step},\
             \"warmup_iters\":{},\"iterations\":{},\"aggregated_iterations\":1,\"validation\":{},\"graph\":0,\
             \"blocking_collectives\":\"false\",\"per_iter_timing\":\"false\",\"per_iter_skip\":0,\
             \"parallel_init\":\"false\",\"devices\":[{}]}}",
            string(&self.start_time),
            args.join(","),
            env.join(","),
            config.world,
            config.sizes.min,
            config.sizes.max,
            config.warmup,
            config.iterations,
            config.checks,
            devices.join(","),
        );
        self.head = head;
    }

    /// Record one row.
    pub fn row(&mut self, row: &PerfRow, iterations: usize) {
        let operation = row
            .collective
            .operation()
            .map_or("none", |operation| operation.nccl_name());
        self.results.push(format!(
            "{{\"size\":{},\"count\":{},\"type\":{},\"redop\":{},\"root\":{},\"out_of_place\":{},\"in_place\":{},\"actual_iterations\":{iterations},\"experiment_name\":\"\"}}",
            row.bytes,
            row.count,
            string(row.element_type.nccl_name()),
            string(operation),
            string(&format!("{:6}", row.root)),
            placement(row, &row.out_of_place),
            placement(row, &row.in_place),
        ));
    }

    /// Close the document with the footer's figures (`min_bw`: `NCCL_TESTS_MIN_BW`) and
    /// `errors` (what failed, if anything), write it and rename it into place.
    pub fn finish(
        mut self,
        totals: &Totals,
        min_bw: Option<f64>,
        errors: &[String],
    ) -> Result<PathBuf, NcclJsonError> {
        let okay = |ok: bool| if ok { "\"true\"" } else { "\"false\"" };
        let bandwidth_okay = match min_bw {
            None => "\"unchecked\"",
            Some(min) => okay(bandwidth_passes(totals, min)),
        };
        let errors: Vec<String> = errors.iter().map(|error| string(error)).collect();
        let head = if self.head.is_empty() {
            format!(
                "{{\"version\":{JSON_FILE_VERSION},\"start_time\":{}",
                string(&self.start_time)
            )
        } else {
            std::mem::take(&mut self.head)
        };
        let text = format!(
            "{head},\"results\":[{}],\"out_of_bounds\":{{\"count\":{},\"okay\":{}}},\"average_bus_bandwidth\":{{\"bandwidth\":{},\"okay\":{bandwidth_okay}}},\"errors\":[{}],\"end_time\":{}}}",
            self.results.join(","),
            totals.failed,
            okay(totals.failed == 0),
            double(totals.average_busbw()),
            errors.join(","),
            string(&now_utc()),
        );
        let fail = |message: String| NcclJsonError {
            path: self.target.clone(),
            message,
        };
        let mut file = self
            .file
            .take()
            .ok_or_else(|| fail("written already".to_owned()))?;
        file.write_all(text.as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(|error| fail(format!("cannot write {}: {error}", self.aside.display())))?;
        drop(file);
        std::fs::rename(&self.aside, &self.target).map_err(|error| {
            fail(format!(
                "cannot rename {} into place: {error}",
                self.aside.display()
            ))
        })?;
        Ok(self.target.clone())
    }
}

impl Drop for NcclJson {
    /// A document never finished (a run that could not start) leaves no file behind.
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = std::fs::remove_file(&self.aside);
        }
    }
}

/// One placement as nccl-tests writes it.
fn placement(row: &PerfRow, measured: &Measured) -> String {
    let wrong = measured
        .wrong
        .map_or_else(|| "null".to_owned(), |wrong| double(wrong as f64));
    format!(
        "{{\"time\":{},\"alg_bw\":{},\"bus_bw\":{},\"nwrong\":{wrong}}}",
        double(measured.time_us),
        double(row.algbw(measured)),
        double(row.busbw(measured)),
    )
}

/// A `# Using devices` line (`Rank  0 Group  0 Pid  123 on host device  0 [0000:00:00] name`)
/// as nccl-tests' device object.
fn device(line: &str) -> String {
    let words: Vec<&str> = line.split_whitespace().collect();
    let number = |key: &str| -> i64 {
        words
            .iter()
            .position(|word| *word == key)
            .and_then(|at| words.get(at + 1))
            .and_then(|word| word.parse().ok())
            .unwrap_or(0)
    };
    let after = |key: &str| -> &str {
        words
            .iter()
            .position(|word| *word == key)
            .and_then(|at| words.get(at + 1))
            .copied()
            .unwrap_or("")
    };
    let (hex, info) = match (line.find('['), line.find(']')) {
        (Some(open), Some(close)) if open < close => {
            (&line[open + 1..close], line[close + 1..].trim())
        }
        _ => ("", ""),
    };
    format!(
        "{{\"rank\":{},\"group\":{},\"pid\":{},\"hostname\":{},\"device\":{},\"device_hex\":{},\"device_info\":{}}}",
        number("Rank"),
        number("Group"),
        number("Pid"),
        string(after("on")),
        number("device"),
        string(hex),
        string(info),
    )
}

/// A JSON string.
fn string(text: &str) -> String {
    serde_json::Value::from(text).to_string()
}

/// A number as C's `%lf` writes it; not-a-number and infinities as strings, as nccl-tests
/// writes NaN (the file stays valid JSON).
fn double(value: f64) -> String {
    if value.is_nan() {
        "\"nan\"".to_owned()
    } else if value.is_infinite() {
        format!("\"{}\"", if value > 0.0 { "inf" } else { "-inf" })
    } else {
        format!("{value:.6}")
    }
}

/// Now, UTC, as `%Y-%m-%d %H:%M:%S`.
fn now_utc() -> String {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    let days = (seconds / 86_400) as i64;
    let of_day = seconds % 86_400;
    // Howard Hinnant's civil-from-days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

#[cfg(test)]
mod tests {
    use super::{device, double, now_utc};

    #[test]
    fn numbers_are_percent_lf() {
        assert_eq!(double(1.5), "1.500000");
        assert_eq!(double(f64::NAN), "\"nan\"");
    }

    #[test]
    fn a_device_line_becomes_nccl_tests_device_object() {
        let json =
            device("Rank  1 Group  0 Pid   4242 on       host device  1 [0000:00:00] ruCCL sim");
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(value["rank"], 1);
        assert_eq!(value["pid"], 4242);
        assert_eq!(value["hostname"], "host");
        assert_eq!(value["device_hex"], "0000:00:00");
        assert_eq!(value["device_info"], "ruCCL sim");
    }

    #[test]
    fn times_read_as_dates() {
        let now = now_utc();
        assert_eq!(now.len(), 19, "{now}");
        assert!(now.starts_with("20"), "{now}");
    }
}
