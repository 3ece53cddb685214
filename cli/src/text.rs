//! Text for people: durations parsed and printed (`90s`, `1h 5m`), times
//! as UTC dates or in the machine's time zone, byte sizes, and aligned
//! tables.
//!
//! **Invariant:** formatting never fails and never panics on any `u64`;
//! parsing refuses what it cannot read with a message saying what it takes.

use std::io::{self, Write};

const SECOND_MS: u64 = 1_000;
const MINUTE_MS: u64 = 60 * SECOND_MS;
const HOUR_MS: u64 = 60 * MINUTE_MS;
const DAY_MS: u64 = 24 * HOUR_MS;

/// Parses `500ms`, `90s`, `15m`, `1h` or `2d` into milliseconds.
pub fn parse_duration_ms(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let unit_ms = match unit {
        "ms" => 1,
        "s" => SECOND_MS,
        "m" => MINUTE_MS,
        "h" => HOUR_MS,
        "d" => DAY_MS,
        _ => {
            return Err(format!(
                "{text:?} is not a duration: write a whole number and a unit, ms, s, m, h or d \
                 (90s, 15m, 1h, 2d)"
            ));
        }
    };
    let count: u64 = number.parse().map_err(|_| {
        format!("{text:?} is not a duration: the number before {unit:?} is missing")
    })?;
    count
        .checked_mul(unit_ms)
        .ok_or_else(|| format!("{text:?} is too long a duration"))
}

/// `ms` as its two largest units, a zero second one left out: `2d 3h`,
/// `1h 5m`, `1h`, `42s`, `250ms`.
pub fn fmt_duration(ms: u64) -> String {
    let units = [
        (DAY_MS, "d"),
        (HOUR_MS, "h"),
        (MINUTE_MS, "m"),
        (SECOND_MS, "s"),
    ];
    let Some(first) = units.iter().position(|&(unit_ms, _)| ms >= unit_ms) else {
        return format!("{ms}ms");
    };
    let (big_ms, big) = units[first];
    let mut text = format!("{}{big}", ms / big_ms);
    if let Some(&(small_ms, small)) = units.get(first + 1) {
        let count = ms % big_ms / small_ms;
        if count > 0 {
            text.push_str(&format!(" {count}{small}"));
        }
    }
    text
}

/// `ms` since the Unix epoch as a UTC time, `2026-05-14 09:30:12Z`.
pub fn fmt_time(ms: u64) -> String {
    let secs = ms / SECOND_MS;
    let days = secs / 86_400;
    let of_day = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

/// `ms` since the Unix epoch in `zone`, `2026-05-14 11:30:12.250 +02:00`
/// (jiff reads the time zone database: not code to write here). A time
/// outside what jiff represents prints as [`fmt_time`] does.
pub fn fmt_in(ms: u64, zone: &jiff::tz::TimeZone) -> String {
    let zoned = i64::try_from(ms)
        .ok()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map(|t| t.to_zoned(zone.clone()));
    match zoned {
        Some(z) => z.strftime("%Y-%m-%d %H:%M:%S%.3f %:z").to_string(),
        None => fmt_time(ms),
    }
}

/// `ms` since the Unix epoch in the machine's time zone (`TZ`, else
/// `/etc/localtime`, else UTC), as [`fmt_in`].
pub fn fmt_local(ms: u64) -> String {
    fmt_in(ms, &jiff::tz::TimeZone::system())
}

/// The (year, month, day) of `days` since 1970-01-01 (H. Hinnant's
/// algorithm, for the proleptic Gregorian calendar).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

/// `bytes` in the largest binary unit that keeps a number ≥ 1: `16.0 MiB`.
pub fn fmt_bytes(bytes: u64) -> String {
    let units = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = units[0];
    for next in &units[1..] {
        if value < 1024.0 {
            break;
        }
        value /= 1024.0;
        unit = next;
    }
    format!("{value:.1} {unit}")
}

/// A table printed with its columns aligned.
#[derive(Debug)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers.
    pub fn new(headers: &[&str]) -> Table {
        Table {
            headers: headers.iter().map(|h| (*h).to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (as many cells as headers).
    pub fn row(&mut self, cells: Vec<String>) {
        assert_eq!(cells.len(), self.headers.len(), "one cell per column");
        self.rows.push(cells);
    }

    /// Writes the table, two spaces between columns, the last unpadded.
    pub fn write(&self, out: &mut dyn Write) -> io::Result<()> {
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        for row in std::iter::once(&self.headers).chain(&self.rows) {
            let last = row.len() - 1;
            let mut line = String::new();
            for (i, (cell, width)) in row.iter().zip(&widths).enumerate() {
                if i == last {
                    line.push_str(cell);
                } else {
                    let pad = width - cell.chars().count();
                    line.push_str(cell);
                    line.push_str(&" ".repeat(pad + 2));
                }
            }
            writeln!(out, "{}", line.trim_end())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_in_every_unit_and_refuse_what_they_cannot_read() {
        assert_eq!(parse_duration_ms("90s"), Ok(90_000));
        assert_eq!(parse_duration_ms("15m"), Ok(900_000));
        assert_eq!(parse_duration_ms("1h"), Ok(3_600_000));
        assert_eq!(parse_duration_ms("2d"), Ok(172_800_000));
        assert_eq!(parse_duration_ms("250ms"), Ok(250));
        for bad in ["", "h", "1", "1w", "-1h", "1.5h", "99999999999999999999d"] {
            assert!(parse_duration_ms(bad).is_err(), "{bad:?} is refused");
        }
    }

    #[test]
    fn times_and_durations_print_as_people_read_them() {
        assert_eq!(fmt_time(0), "1970-01-01 00:00:00Z");
        assert_eq!(fmt_time(1_709_251_199_000), "2024-02-29 23:59:59Z");
        assert_eq!(fmt_duration(3_900_000), "1h 5m");
        assert_eq!(fmt_duration(42_000), "42s");
        assert_eq!(fmt_duration(HOUR_MS), "1h");
        assert_eq!(fmt_duration(2 * DAY_MS + 3 * HOUR_MS + 7), "2d 3h");
        assert_eq!(fmt_duration(250), "250ms");
        assert_eq!(fmt_bytes(512), "512 B");
        assert_eq!(fmt_bytes(16 << 20), "16.0 MiB");
        let _ = fmt_time(u64::MAX);
        let paris = jiff::tz::TimeZone::get("Europe/Paris").unwrap_or(jiff::tz::TimeZone::UTC);
        let at = 1_709_251_199_250;
        let text = fmt_in(at, &paris);
        assert!(
            text == "2024-03-01 00:59:59.250 +01:00" || text == "2024-02-29 23:59:59.250 +00:00",
            "{text}"
        );
        assert_eq!(
            fmt_in(at, &jiff::tz::TimeZone::UTC),
            "2024-02-29 23:59:59.250 +00:00"
        );
        assert_eq!(fmt_in(u64::MAX, &paris), fmt_time(u64::MAX));
    }

    #[test]
    fn a_table_aligns_its_columns() {
        let mut table = Table::new(&["RUN", "STATE"]);
        table.row(vec!["a-long-run".into(), "running".into()]);
        table.row(vec!["b".into(), "paused".into()]);
        let mut out = Vec::new();
        assert!(table.write(&mut out).is_ok());
        let text = String::from_utf8_lossy(&out);
        assert_eq!(
            text,
            "RUN         STATE\na-long-run  running\nb           paused\n"
        );
    }
}
