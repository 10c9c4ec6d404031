//! Pure helpers: summary statistics, CSV output, human tables, UTC dates.

use std::fmt::Write as _;
use std::io;
use std::path::Path;

/// The median of `values` (mean of the two middle values for an even count);
/// `NaN` for an empty slice. NaNs in the input sort last.
pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The `q`-quantile (0 ≤ q ≤ 1) of `values` by the nearest-rank method;
/// `NaN` for an empty slice.
pub fn percentile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = (q.clamp(0.0, 1.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// Median, minimum and maximum of a set of runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// The median.
    pub median: f64,
    /// The smallest value.
    pub min: f64,
    /// The largest value.
    pub max: f64,
}

impl Summary {
    /// Summarizes `values` (all `NaN` when empty).
    pub fn of(values: &[f64]) -> Self {
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if values.is_empty() {
            return Self {
                median: f64::NAN,
                min: f64::NAN,
                max: f64::NAN,
            };
        }
        Self {
            median: median(values),
            min,
            max,
        }
    }
}

/// A civil date and time in UTC, from seconds since the Unix epoch, as
/// `YYYY-MM-DDTHH:MM:SSZ` (proleptic Gregorian calendar).
pub fn utc_timestamp(unix_secs: u64) -> String {
    let days = (unix_secs / 86_400) as i64;
    let rem = unix_secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Year, month, day of the day `z` days after 1970-01-01 (H. Hinnant's
/// `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Quotes a CSV field when it contains a comma, quote or line break.
pub fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Formats `# key: value` comment lines; line breaks inside values are
/// replaced by spaces so every line stays a comment.
pub fn comment_lines(pairs: &[(String, String)]) -> String {
    let mut out = String::new();
    for (k, v) in pairs {
        let v = v.replace(['\n', '\r'], " ");
        let _ = writeln!(out, "# {k}: {}", v.trim());
    }
    out
}

/// A CSV table: comment header, column names, rows.
#[derive(Debug, Clone)]
pub struct Csv {
    /// `# ` comment lines written first.
    pub header: String,
    /// Column names.
    pub columns: Vec<String>,
    /// Rows, each as long as `columns`.
    pub rows: Vec<Vec<String>>,
}

impl Csv {
    /// An empty table with `header` comments and `columns`.
    pub fn new(header: String, columns: &[&str]) -> Self {
        Self {
            header,
            columns: columns.iter().map(|c| c.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row; panics if its length differs from the column count
    /// (a programming error in this crate).
    pub fn push(&mut self, row: Vec<String>) {
        assert_eq!(row.len(), self.columns.len(), "row length");
        self.rows.push(row);
    }

    /// The whole file's text.
    pub fn render(&self) -> String {
        let mut out = self.header.clone();
        let line = |cells: &[String]| {
            cells
                .iter()
                .map(|c| csv_field(c))
                .collect::<Vec<_>>()
                .join(",")
        };
        out.push_str(&line(&self.columns));
        out.push('\n');
        for r in &self.rows {
            out.push_str(&line(r));
            out.push('\n');
        }
        out
    }

    /// Writes the file, creating its directory.
    pub fn write(&self, path: &Path) -> io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, self.render())
    }
}

/// A plain-text table with right-aligned columns, for the terminal.
pub fn text_table(columns: &[&str], rows: &[Vec<String>]) -> String {
    let mut width: Vec<usize> = columns.iter().map(|c| c.chars().count()).collect();
    for r in rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let s: Vec<String> = cells
            .iter()
            .zip(&width)
            .map(|(c, w)| format!("{c:>w$}"))
            .collect();
        let _ = writeln!(out, "  {}", s.join("  "));
    };
    line(columns.to_vec());
    line(
        width
            .iter()
            .map(|w| "-".repeat(*w))
            .collect::<Vec<_>>()
            .iter()
            .map(String::as_str)
            .collect(),
    );
    for r in rows {
        line(r.iter().map(String::as_str).collect());
    }
    out
}

/// `v` with `digits` decimals; `NaN` as `-`.
pub fn fmt(v: f64, digits: usize) -> String {
    if v.is_nan() {
        "-".to_string()
    } else {
        format!("{v:.digits$}")
    }
}

/// A human size: `0 B`, `4 KiB`, `1 MiB`.
pub fn human_size(bytes: u64) -> String {
    const KIB: u64 = 1024;
    match bytes {
        0 => "0 B".into(),
        b if b % (KIB * KIB) == 0 => format!("{} MiB", b / (KIB * KIB)),
        b if b % KIB == 0 => format!("{} KiB", b / KIB),
        b => format!("{b} B"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[7.0]), 7.0);
        assert!(median(&[]).is_nan());
        let s = Summary::of(&[5.0, 1.0, 9.0, 3.0, 7.0]);
        assert_eq!(
            s,
            Summary {
                median: 5.0,
                min: 1.0,
                max: 9.0
            }
        );
        assert!(Summary::of(&[]).median.is_nan());
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 50.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&v, 1.0), 100.0);
        assert_eq!(percentile(&v, 0.0), 1.0);
        assert!(percentile(&[], 0.5).is_nan());
    }

    #[test]
    fn utc_dates() {
        assert_eq!(utc_timestamp(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_timestamp(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc_timestamp(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(utc_timestamp(4_107_542_399), "2100-02-28T23:59:59Z");
    }

    #[test]
    fn csv_header_and_quoting() {
        let header = comment_lines(&[
            ("command".into(), "paio-bench micro --runs 5".into()),
            ("cpu".into(), "AMD EPYC\nline two".into()),
        ]);
        assert_eq!(
            header,
            "# command: paio-bench micro --runs 5\n# cpu: AMD EPYC line two\n"
        );
        let mut csv = Csv::new(header, &["a", "b"]);
        csv.push(vec!["1".into(), "x,y".into()]);
        csv.push(vec!["say \"hi\"".into(), "2".into()]);
        let text = csv.render();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("# command: "));
        assert!(lines[1].starts_with("# cpu: "));
        assert_eq!(lines[2], "a,b");
        assert_eq!(lines[3], "1,\"x,y\"");
        assert_eq!(lines[4], "\"say \"\"hi\"\"\",2");
    }

    #[test]
    fn formatting_helpers() {
        assert_eq!(human_size(0), "0 B");
        assert_eq!(human_size(4096), "4 KiB");
        assert_eq!(human_size(1 << 20), "1 MiB");
        assert_eq!(human_size(1000), "1000 B");
        assert_eq!(fmt(f64::NAN, 2), "-");
        assert_eq!(fmt(1.23456, 2), "1.23");
        let t = text_table(&["x", "long"], &[vec!["1".into(), "2".into()]]);
        assert_eq!(t, "  x  long\n  -  ----\n  1     2\n");
    }
}
