//! The front end the two perf binaries (`mpi-allreduce-perf`, `hierarchical-perf`) share, on the
//! conventions of the main perf tool (`ruccl-perf`, which cannot depend on MPI): one argument
//! parser ([`parse_command`]: the sweep's flags checked once — `-b` above `-e`, `-c` other than
//! 0 or 1, `-f` below 2 are usage errors —, `--help` on stdout), exit statuses [`EXIT_OK`] /
//! [`EXIT_FAILED`] / [`EXIT_USAGE`], a memory check before allocating ([`check_memory`]), and
//! output that stops quietly on a closed pipe (the tools then exit 1, as ruccl-perf does) and fails
//! on any other write error ([`write_out`]);
//! then the nccl-tests-style report: one table per engine, and a summary of the engines side by
//! side. Tools only; nothing in the communicator uses it.

/// One engine's figures at one size of an f32 sum all-reduce.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Row {
    /// Bytes per rank.
    pub bytes: usize,
    /// Seconds per all-reduce (the mean over the timed iterations).
    pub seconds: f64,
    /// Elements that differed from the expected sum, over every rank.
    pub wrong: u64,
}

/// A size argument: digits with an optional `K`, `M` or `G` suffix (powers of 1024, either
/// case); `None` if it is not one or overflows.
pub fn parse_size(text: &str) -> Option<usize> {
    let (digits, scale) = match text.chars().last()?.to_ascii_uppercase() {
        'K' => (&text[..text.len() - 1], 1 << 10),
        'M' => (&text[..text.len() - 1], 1 << 20),
        'G' => (&text[..text.len() - 1], 1 << 30),
        _ => (text, 1),
    };
    digits.parse::<usize>().ok()?.checked_mul(scale)
}

/// The sweep settings both perf binaries take, with nccl-tests' flags and defaults: `-b`, `-e`,
/// `-f`, `-n`, `-w`, `-c`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sweep {
    /// The first size, bytes per rank (`-b`; at least one f32 is measured).
    pub min_bytes: usize,
    /// The last size at most (`-e`).
    pub max_bytes: usize,
    /// The factor between sizes (`-f`).
    pub factor: usize,
    /// Timed iterations per size (`-n`).
    pub iterations: usize,
    /// Untimed iterations before them (`-w`).
    pub warmup: usize,
    /// Whether results are checked (`-c`).
    pub check: bool,
}

impl Default for Sweep {
    /// `-b 4 -e 64M -f 2 -n 20 -w 5 -c 1`.
    fn default() -> Self {
        Sweep {
            min_bytes: 4,
            max_bytes: 64 << 20,
            factor: 2,
            iterations: 20,
            warmup: 5,
            check: true,
        }
    }
}

impl Sweep {
    /// Apply `flag` with `value` if it is one of the sweep's flags; `None` for any other flag.
    pub fn set(&mut self, flag: &str, value: &str) -> Option<Result<(), String>> {
        let field = match flag {
            "-c" => {
                return Some(match value {
                    "0" => {
                        self.check = false;
                        Ok(())
                    }
                    "1" => {
                        self.check = true;
                        Ok(())
                    }
                    _ => Err(format!("bad value `{value}` for -c: 0 or 1")),
                });
            }
            "-b" => &mut self.min_bytes,
            "-e" => &mut self.max_bytes,
            "-f" => &mut self.factor,
            "-n" => &mut self.iterations,
            "-w" => &mut self.warmup,
            _ => return None,
        };
        Some(match parse_size(value) {
            Some(size) => {
                *field = size;
                Ok(())
            }
            None => Err(format!("bad size `{value}` for {flag}")),
        })
    }

    /// Whether the settings make a run: `-f` at least 2, `-n` at least 1, `-b` not above `-e`.
    pub fn validate(&self) -> Result<(), String> {
        if self.factor < 2 {
            return Err(format!("-f {} must be at least 2", self.factor));
        }
        if self.iterations == 0 {
            return Err("-n must be at least 1".to_owned());
        }
        if self.min_bytes.max(4) > self.max_bytes {
            return Err(format!(
                "the smallest size ({} B, -b) exceeds the largest ({} B, -e): nothing to measure",
                self.min_bytes.max(4),
                self.max_bytes
            ));
        }
        Ok(())
    }

    /// The sizes, nccl-tests' way: `min_bytes` (at least one f32), then times `factor` while
    /// within `max_bytes` (and while the product fits).
    pub fn sizes(&self) -> Vec<usize> {
        let mut sizes = Vec::new();
        let mut bytes = self.min_bytes.max(4);
        while bytes <= self.max_bytes {
            sizes.push(bytes);
            bytes = match bytes.checked_mul(self.factor) {
                Some(next) => next,
                None => break,
            };
        }
        sizes
    }

    /// The settings as nccl-tests' heading states them.
    pub fn describe(&self) -> String {
        format!(
            "minBytes {} maxBytes {} step: {}(factor) warmup iters: {} iters: {} validation: {}",
            self.min_bytes,
            self.max_bytes,
            self.factor,
            self.warmup,
            self.iterations,
            u8::from(self.check)
        )
    }
}

/// Exit status of a run whose results are all right (and of `--help`, and of a run whose output
/// was closed by its reader: `tool | head`).
pub const EXIT_OK: u8 = 0;
/// Exit status of a run that failed: a generation that returned an error on any process, a
/// wrong result, an output that could not be written.
pub const EXIT_FAILED: u8 = 1;
/// Exit status of options that make no run: a bad flag or value, or sizes this machine's memory
/// cannot hold.
pub const EXIT_USAGE: u8 = 2;

/// What a perf tool's command line asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// `-h` / `--help`: print the usage on stdout, exit [`EXIT_OK`].
    Help,
    /// A run: the sweep (validated), and the tool's own flags with their values, in order.
    Run {
        /// The sweep settings.
        sweep: Sweep,
        /// `(flag, value)` for each of the tool's own flags given.
        flags: Vec<(String, String)>,
    },
}

/// The one argument parser of both tools: every flag takes a value; the sweep's flags (`-b -e -f
/// -n -w -c`) are applied and checked ([`Sweep::set`], [`Sweep::validate`]), the flags in
/// `tool_flags` are handed back for the tool to read, anything else is an error (exit
/// [`EXIT_USAGE`]).
pub fn parse_command(arguments: &[String], tool_flags: &[&str]) -> Result<Command, String> {
    let mut sweep = Sweep::default();
    let mut flags = Vec::new();
    let mut rest = arguments.iter();
    while let Some(flag) = rest.next() {
        if flag == "-h" || flag == "--help" {
            return Ok(Command::Help);
        }
        let value = rest.next().ok_or_else(|| format!("{flag} needs a value"))?;
        if let Some(set) = sweep.set(flag, value) {
            set?;
        } else if tool_flags.contains(&flag.as_str()) {
            flags.push((flag.clone(), value.clone()));
        } else {
            return Err(format!("unknown flag `{flag}`"));
        }
    }
    sweep.validate()?;
    Ok(Command::Run { sweep, flags })
}

/// Refuses a run whose estimated peak, `needed` bytes on this machine, exceeds `available`
/// (`None`: unknown, nothing refused). `what` says what needs it, for the message.
pub fn check_memory(needed: u64, available: Option<u64>, what: &str) -> Result<(), String> {
    match available {
        Some(available) if needed > available => Err(format!(
            "{what} needs about {} of memory, this machine has {} available \
             (MemAvailable in /proc/meminfo): lower -e",
            human(needed),
            human(available)
        )),
        _ => Ok(()),
    }
}

/// Bytes as people read them: `512 B`, `1.5 KiB`, `16.0 GiB`.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// How writing the results ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// Everything was written and flushed.
    Done,
    /// The reader closed the pipe (`tool | head`): the rest is dropped, quietly.
    Closed,
}

/// Writes `text` to `out` and flushes: a closed pipe is [`Written::Closed`], any other failure
/// (a full disk: `tool > /dev/full`) an error for the tool to report (exit [`EXIT_FAILED`]).
pub fn write_to(out: &mut dyn std::io::Write, text: &str) -> std::io::Result<Written> {
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(Written::Done),
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(Written::Closed),
        Err(error) => Err(error),
    }
}

/// [`write_to`] standard output.
pub fn write_out(text: &str) -> std::io::Result<Written> {
    write_to(&mut std::io::stdout().lock(), text)
}

/// Measure every size of `sizes` with `measure`, which returns one [`Row`] per engine (in
/// `engines` order), and gather one table per engine. Stops at the first size that fails, with
/// the error `measure` gave.
pub fn sweep<E>(
    sizes: &[usize],
    engines: usize,
    mut measure: impl FnMut(usize) -> Result<Vec<Row>, E>,
) -> Result<Vec<Vec<Row>>, E> {
    let mut tables: Vec<Vec<Row>> = vec![Vec::new(); engines];
    for &bytes in sizes {
        for (table, row) in tables.iter_mut().zip(measure(bytes)?) {
            table.push(row);
        }
    }
    Ok(tables)
}

/// The first line of the MPI library's version string, without padding or NULs.
pub fn library_version() -> String {
    let version = mpi::environment::library_version().unwrap_or_default();
    version
        .lines()
        .next()
        .unwrap_or("")
        .trim_matches(|c: char| c.is_whitespace() || c == char::from(0))
        .to_owned()
}

/// One engine's table: `heading` (each line after `# `), the column heads, a row per size with
/// the all-reduce bus bandwidth of `world` ranks, and nccl-tests' two closing lines.
pub fn format_table(heading: &[String], world: usize, rows: &[Row]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let world = world as f64;
    let bus = 2.0 * (world - 1.0) / world;
    for line in heading {
        let _ = writeln!(out, "# {line}");
    }
    let _ = writeln!(out, "#");
    let _ = writeln!(
        out,
        "# {:>10} {:>12} {:>8} {:>6} {:>10} {:>8} {:>8} {:>7}",
        "size", "count", "type", "redop", "time", "algbw", "busbw", "#wrong"
    );
    let _ = writeln!(
        out,
        "# {:>10} {:>12} {:>8} {:>6} {:>10} {:>8} {:>8} {:>7}",
        "(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)", ""
    );
    let mut busbw_sum = 0.0;
    for row in rows {
        let algbw = row.bytes as f64 / row.seconds / 1e9;
        busbw_sum += algbw * bus;
        let _ = writeln!(
            out,
            "  {:>10} {:>12} {:>8} {:>6} {:>10.2} {:>8.2} {:>8.2} {:>7}",
            row.bytes,
            row.bytes / 4,
            "float",
            "sum",
            row.seconds * 1e6,
            algbw,
            algbw * bus,
            row.wrong
        );
    }
    let wrong: u64 = rows.iter().map(|row| row.wrong).sum();
    let _ = writeln!(
        out,
        "# Out of bounds values : {wrong} {}",
        if wrong == 0 { "OK" } else { "FAILED" }
    );
    let _ = writeln!(
        out,
        "# Avg bus bandwidth    : {:.6}",
        busbw_sum / rows.len().max(1) as f64
    );
    let _ = writeln!(out, "#");
    out
}

/// With more than one engine, one line per size: every engine's time, then each later engine's
/// ratio to the first (empty otherwise). `names[i]` names `tables[i]`; every table has the same
/// sizes.
pub fn format_summary(names: &[&str], tables: &[Vec<Row>]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let (Some(first), Some(baseline)) = (names.first(), tables.first()) else {
        return out;
    };
    if tables.len() < 2 {
        return out;
    }
    let _ = write!(
        out,
        "# summary: time (us), and ratio to {first}\n# {:>10}",
        "size (B)"
    );
    for name in names {
        let _ = write!(out, " {name:>10}");
    }
    for name in &names[1..] {
        let _ = write!(out, " {:>10}", format!("÷{name}"));
    }
    let _ = writeln!(out);
    for (index, row) in baseline.iter().enumerate() {
        let _ = write!(out, "  {:>10}", row.bytes);
        for table in tables {
            let seconds = table.get(index).map_or(f64::NAN, |row| row.seconds);
            let _ = write!(out, " {:>10.2}", seconds * 1e6);
        }
        for table in &tables[1..] {
            let seconds = table.get(index).map_or(f64::NAN, |row| row.seconds);
            let _ = write!(out, " {:>10.2}", seconds / row.seconds);
        }
        let _ = writeln!(out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_suffixes_in_either_case() {
        assert_eq!(parse_size("4"), Some(4));
        assert_eq!(parse_size("64k"), Some(64 << 10));
        assert_eq!(parse_size("2M"), Some(2 << 20));
        assert_eq!(parse_size("1G"), Some(1 << 30));
    }

    #[test]
    fn bad_or_overflowing_sizes_are_none() {
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("K"), None);
        assert_eq!(parse_size("12x"), None);
        assert_eq!(parse_size("99999999999999999999G"), None);
    }

    #[test]
    fn a_sweep_starts_at_one_float_and_stops_before_overflowing() {
        let sizes = |min_bytes, max_bytes, factor| {
            let settings = Sweep {
                min_bytes,
                max_bytes,
                factor,
                ..Sweep::default()
            };
            settings.sizes()
        };
        assert_eq!(sizes(0, 64, 2), vec![4, 8, 16, 32, 64]);
        assert_eq!(sizes(4, 100, 4), vec![4, 16, 64]);
        assert_eq!(
            sizes(usize::MAX / 2 + 1, usize::MAX, 2),
            vec![usize::MAX / 2 + 1]
        );
        assert!(sizes(128, 64, 2).is_empty());
    }

    #[test]
    fn sweep_flags_are_taken_and_other_flags_left_alone() {
        let mut settings = Sweep::default();
        assert_eq!(settings.set("-b", "1K"), Some(Ok(())));
        assert_eq!(settings.set("-e", "2M"), Some(Ok(())));
        assert_eq!(settings.set("-n", "7"), Some(Ok(())));
        assert_eq!(settings.set("-c", "0"), Some(Ok(())));
        assert_eq!(
            settings.set("-c", "abc"),
            Some(Err("bad value `abc` for -c: 0 or 1".to_owned()))
        );
        assert_eq!(settings.set("-l", "2"), None);
        assert_eq!(
            settings.set("-f", "x"),
            Some(Err("bad size `x` for -f".to_owned()))
        );
        assert_eq!(
            (
                settings.min_bytes,
                settings.max_bytes,
                settings.iterations,
                settings.check
            ),
            (1 << 10, 2 << 20, 7, false)
        );
        assert_eq!(
            Sweep::default().describe(),
            "minBytes 4 maxBytes 67108864 step: 2(factor) warmup iters: 5 iters: 20 validation: 1"
        );
    }

    #[test]
    fn a_sweep_gathers_one_table_per_engine_and_stops_at_the_first_error() {
        let row = |bytes, wrong| Row {
            bytes,
            seconds: 1.0,
            wrong,
        };
        let tables = sweep(&[4, 8], 2, |bytes| {
            Ok::<_, ()>(vec![row(bytes, 0), row(bytes, 1)])
        });
        assert_eq!(
            tables,
            Ok(vec![vec![row(4, 0), row(8, 0)], vec![row(4, 1), row(8, 1)]])
        );
        let mut measured = Vec::new();
        let failed = sweep(&[4, 8, 16], 1, |bytes| {
            measured.push(bytes);
            if bytes == 8 {
                Err(bytes)
            } else {
                Ok(vec![row(bytes, 0)])
            }
        });
        assert_eq!((failed, measured), (Err(8), vec![4, 8]));
    }

    fn arguments(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn one_parser_takes_the_sweep_hands_back_the_tool_flags_and_refuses_the_rest() {
        let parsed = parse_command(&arguments("-b 1K -E mpi,hier -e 2M -l 2"), &["-E", "-l"]);
        let Ok(Command::Run { sweep, flags }) = parsed else {
            panic!("{parsed:?}");
        };
        assert_eq!((sweep.min_bytes, sweep.max_bytes), (1 << 10, 2 << 20));
        assert_eq!(
            flags,
            vec![
                ("-E".to_owned(), "mpi,hier".to_owned()),
                ("-l".to_owned(), "2".to_owned())
            ]
        );
        assert_eq!(
            parse_command(&arguments("-e 1M --help"), &[]),
            Ok(Command::Help)
        );
        for refused in [
            "-b 1M -e 8",
            "-c abc",
            "-f 1",
            "-n 0",
            "-x 3",
            "-b",
            "-b 12q",
        ] {
            assert!(
                parse_command(&arguments(refused), &["-E"]).is_err(),
                "{refused}"
            );
        }
    }

    #[test]
    fn memory_beyond_what_is_available_is_refused() {
        assert!(check_memory(4 << 20, Some(2 << 20), "-e 1M").is_err());
        assert!(check_memory(1 << 20, Some(2 << 20), "-e 1M").is_ok());
        assert!(check_memory(u64::MAX, None, "-e 1M").is_ok());
    }

    #[test]
    fn a_closed_pipe_is_quiet_and_a_full_disk_an_error() {
        struct Failing(std::io::ErrorKind);
        impl std::io::Write for Failing {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(self.0.into())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let closed = write_to(&mut Failing(std::io::ErrorKind::BrokenPipe), "x");
        assert_eq!(closed.ok(), Some(Written::Closed));
        let full = write_to(&mut Failing(std::io::ErrorKind::StorageFull), "x");
        assert!(full.is_err());
        let mut sink = Vec::new();
        assert_eq!(write_to(&mut sink, "x").ok(), Some(Written::Done));
    }
}
