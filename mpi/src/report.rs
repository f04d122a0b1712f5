//! The nccl-tests-style report the two perf binaries (`mpi-allreduce-perf`,
//! `hierarchical-perf`) print: their size arguments, one table per engine, and a summary of the
//! engines side by side. Tools only; nothing in the communicator uses it.

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
                self.check = value != "0";
                return Some(Ok(()));
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

/// Prints one engine's table: `heading` (each line after `# `), the column heads, a row per
/// size with the all-reduce bus bandwidth of `world` ranks, and nccl-tests' two closing lines.
pub fn print_table(heading: &[String], world: usize, rows: &[Row]) {
    let world = world as f64;
    let bus = 2.0 * (world - 1.0) / world;
    for line in heading {
        println!("# {line}");
    }
    println!("#");
    println!(
        "# {:>10} {:>12} {:>8} {:>6} {:>10} {:>8} {:>8} {:>7}",
        "size", "count", "type", "redop", "time", "algbw", "busbw", "#wrong"
    );
    println!(
        "# {:>10} {:>12} {:>8} {:>6} {:>10} {:>8} {:>8} {:>7}",
        "(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)", ""
    );
    let mut busbw_sum = 0.0;
    for row in rows {
        let algbw = row.bytes as f64 / row.seconds / 1e9;
        busbw_sum += algbw * bus;
        println!(
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
    println!(
        "# Out of bounds values : {wrong} {}",
        if wrong == 0 { "OK" } else { "FAILED" }
    );
    println!(
        "# Avg bus bandwidth    : {:.6}",
        busbw_sum / rows.len().max(1) as f64
    );
    println!("#");
}

/// With more than one engine, prints one line per size: every engine's time, then each later
/// engine's ratio to the first. `names[i]` names `tables[i]`; every table has the same sizes.
pub fn print_summary(names: &[&str], tables: &[Vec<Row>]) {
    let (Some(first), Some(baseline)) = (names.first(), tables.first()) else {
        return;
    };
    if tables.len() < 2 {
        return;
    }
    print!(
        "# summary: time (us), and ratio to {first}\n# {:>10}",
        "size (B)"
    );
    for name in names {
        print!(" {name:>10}");
    }
    for name in &names[1..] {
        print!(" {:>10}", format!("÷{name}"));
    }
    println!();
    for (index, row) in baseline.iter().enumerate() {
        print!("  {:>10}", row.bytes);
        for table in tables {
            print!(" {:>10.2}", table[index].seconds * 1e6);
        }
        for table in &tables[1..] {
            print!(" {:>10.2}", table[index].seconds / row.seconds);
        }
        println!();
    }
}

#[cfg(test)]
mod tests {
    use super::{Row, Sweep, parse_size, sweep};

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
}
