//! Sizes and durations as people write them (issue 39 item 5): every key
//! ending `_bytes`, `_ms`, `_secs`, `_minutes`, `_hours` or `_days` (and the
//! alert rules' `minutes`) takes a plain number in its own unit, as before,
//! or a string with units: `"1MiB"`, `"512KiB"`, `"1MB"` (SI: 1,000,000),
//! `"30s"`, `"1h30m"`, `"250ms"`, `"30d"`. A value that is not a whole
//! number of the key's unit (`timeout_secs = "1500ms"`), negative, or too
//! large for the key is refused; `serde_path_to_error` names the key.
//!
//! One `deserialize_with` helper per kind: [`bytes`] for sizes, and one per
//! unit for durations ([`ms`], [`secs`], [`minutes`], [`hours`], [`days`]),
//! all the same code ([`Unit`]).
//!
//! Durations are read by `humantime` (`ms`, `s`, `m`, `h`, `d`, `w`, with
//! fractions: `"1.5h"`; its month and year are 30.44 and 365.25 days, never
//! a whole number of days, so refused). Sizes are read here: the size crates
//! (`bytesize`, `byte-unit`) round a fraction of a byte or saturate on
//! overflow instead of refusing, and take `"1Mb"` as bits or `"1M"` as
//! 1,000,000 where nginx and systemd mean 1 MiB; this is exact integer
//! arithmetic and refuses both.

use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};

/// A key's unit: what a plain number counts, and how a string converts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unit {
    /// As an error message says it: "seconds".
    pub name: &'static str,
    kind: Kind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A duration, this many nanoseconds each.
    Time(u128),
    Bytes,
}

pub const BYTES: Unit = Unit {
    name: "bytes",
    kind: Kind::Bytes,
};
pub const MILLISECONDS: Unit = Unit {
    name: "milliseconds",
    kind: Kind::Time(1_000_000),
};
pub const SECONDS: Unit = Unit {
    name: "seconds",
    kind: Kind::Time(1_000_000_000),
};
pub const MINUTES: Unit = Unit {
    name: "minutes",
    kind: Kind::Time(60 * 1_000_000_000),
};
pub const HOURS: Unit = Unit {
    name: "hours",
    kind: Kind::Time(3600 * 1_000_000_000),
};
pub const DAYS: Unit = Unit {
    name: "days",
    kind: Kind::Time(86_400 * 1_000_000_000),
};

impl Unit {
    /// `text` (a size or duration with units) as a whole number of this
    /// unit; the error says why not, without the key (the caller names it).
    pub fn parse(self, text: &str) -> Result<u64, String> {
        let (amount, each) = match self.kind {
            Kind::Bytes => (parse_size(text)?, 1),
            Kind::Time(each) => {
                let d = humantime::parse_duration(text.trim()).map_err(|e| {
                    format!("{text:?} is not a duration ({e}); e.g. \"30s\", \"1h30m\"")
                })?;
                (d.as_nanos(), each)
            }
        };
        if !amount.is_multiple_of(each) {
            let exact = format!("{:.3}", amount as f64 / each as f64);
            return Err(format!(
                "{text:?} is {} {}: give a whole number of {}",
                exact.trim_end_matches('0').trim_end_matches('.'),
                self.name,
                self.name
            ));
        }
        u64::try_from(amount / each).map_err(|_| format!("{text:?} is too large"))
    }

    /// A number of this unit in words, for `config check`: `1048576` bytes
    /// is "1 MiB", `5400` seconds "1h 30m".
    pub fn human(self, amount: u64) -> String {
        match self.kind {
            Kind::Bytes => human_bytes(amount),
            Kind::Time(nanos) if nanos.is_multiple_of(1_000_000_000) => human_duration(
                Duration::from_secs(amount.saturating_mul((nanos / 1_000_000_000) as u64)),
            ),
            Kind::Time(nanos) => {
                human_duration(Duration::from_nanos(amount.saturating_mul(nanos as u64)))
            }
        }
    }

    fn expecting(self) -> String {
        match self.kind {
            Kind::Bytes => {
                "a whole number of bytes, or a size such as \"1MiB\" or \"512KiB\"".into()
            }
            Kind::Time(_) => format!(
                "a whole number of {}, or a duration such as \"30s\" or \"1h30m\"",
                self.name
            ),
        }
    }
}

/// `deserialize_with` for a key counted in bytes.
pub fn bytes<'de, D: Deserializer<'de>, T: TryFrom<u64>>(d: D) -> Result<Option<T>, D::Error> {
    amount(d, BYTES)
}

/// `deserialize_with` for a key counted in milliseconds.
pub fn ms<'de, D: Deserializer<'de>, T: TryFrom<u64>>(d: D) -> Result<Option<T>, D::Error> {
    amount(d, MILLISECONDS)
}

/// `deserialize_with` for a key counted in seconds.
pub fn secs<'de, D: Deserializer<'de>, T: TryFrom<u64>>(d: D) -> Result<Option<T>, D::Error> {
    amount(d, SECONDS)
}

/// `deserialize_with` for a key counted in minutes.
pub fn minutes<'de, D: Deserializer<'de>, T: TryFrom<u64>>(d: D) -> Result<Option<T>, D::Error> {
    amount(d, MINUTES)
}

/// `deserialize_with` for a key counted in hours.
pub fn hours<'de, D: Deserializer<'de>, T: TryFrom<u64>>(d: D) -> Result<Option<T>, D::Error> {
    amount(d, HOURS)
}

/// `deserialize_with` for a key counted in days.
pub fn days<'de, D: Deserializer<'de>, T: TryFrom<u64>>(d: D) -> Result<Option<T>, D::Error> {
    amount(d, DAYS)
}

/// A present key's value (its field is `#[serde(default)]`): a plain
/// number, or a string with units, as a whole number of `unit` that fits `T`.
fn amount<'de, D: Deserializer<'de>, T: TryFrom<u64>>(
    d: D,
    unit: Unit,
) -> Result<Option<T>, D::Error> {
    struct Amount<T>(Unit, PhantomData<T>);

    impl<T: TryFrom<u64>> Amount<T> {
        fn fit<E: de::Error>(&self, n: u64, shown: &dyn fmt::Display) -> Result<Option<T>, E> {
            T::try_from(n).map(Some).map_err(|_| {
                E::custom(format!(
                    "{shown} is too large (at most {} {})",
                    max::<T>(),
                    self.0.name
                ))
            })
        }
    }

    impl<T: TryFrom<u64>> Visitor<'_> for Amount<T> {
        type Value = Option<T>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str(&self.0.expecting())
        }

        fn visit_u64<E: de::Error>(self, n: u64) -> Result<Self::Value, E> {
            self.fit(n, &n)
        }

        fn visit_i64<E: de::Error>(self, n: i64) -> Result<Self::Value, E> {
            match u64::try_from(n) {
                Ok(n) => self.fit(n, &n),
                Err(_) => Err(E::custom(format!("{n} is negative"))),
            }
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
            if text.trim_start().starts_with('-') {
                return Err(E::custom(format!("{text:?} is negative")));
            }
            let n = self.0.parse(text).map_err(E::custom)?;
            self.fit(n, &format_args!("{text:?}"))
        }
    }

    d.deserialize_any(Amount(unit, PhantomData))
}

/// The largest `T` as a u64 (u64 itself, usize on a 64-bit machine: all
/// of it).
fn max<T: TryFrom<u64>>() -> u64 {
    let (mut low, mut high) = (0u64, u64::MAX);
    while low < high {
        let mid = low + (high - low).div_ceil(2);
        if T::try_from(mid).is_ok() {
            low = mid;
        } else {
            high = mid - 1;
        }
    }
    low
}

/// Units of a size, case-insensitive: SI prefixes count in thousands, IEC
/// ones (`Ki`, `Mi`, ...) in 1024s. A bare `K` or `M` is refused: nginx and
/// systemd read it as 1024s, most size crates as 1000s.
const SIZE_UNITS: [(&str, u128); 11] = [
    ("b", 1),
    ("kb", 1_000),
    ("mb", 1_000_000),
    ("gb", 1_000_000_000),
    ("tb", 1_000_000_000_000),
    ("kib", 1 << 10),
    ("mib", 1 << 20),
    ("gib", 1 << 30),
    ("tib", 1 << 40),
    ("byte", 1),
    ("bytes", 1),
];

/// `"1MiB"`, `"1.5 KiB"`, `"1MB"`: the number of bytes, exactly; a
/// fraction of a byte (`"0.5B"`, `"1.0001KiB"`) is refused.
fn parse_size(text: &str) -> Result<u128, String> {
    let t = text.trim();
    let digits_end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = (&t[..digits_end], t[digits_end..].trim_start());
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() || (number.contains('.') && fraction.is_empty()) || fraction.contains('.') {
        return Err(format!(
            "{text:?} is not a size; e.g. \"1MiB\", \"512KiB\", \"1MB\""
        ));
    }
    let factor = match SIZE_UNITS
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(unit))
    {
        Some((_, factor)) => *factor,
        None if unit.is_empty() => {
            return Err(format!(
                "{text:?} has no unit: write \"{number}B\", a unit such as \"KiB\" or \"MB\", or the number without quotes"
            ))
        }
        None if ["k", "m", "g", "t"].iter().any(|p| p.eq_ignore_ascii_case(unit)) => {
            return Err(format!(
                "{text:?}: write {number}{u}iB (1024s) or {number}{u}B (1000s)",
                u = unit.to_ascii_uppercase()
            ))
        }
        None => {
            return Err(format!(
                "{text:?}: {unit:?} is not a unit of size (B, kB, MB, GB, TB, KiB, MiB, GiB, TiB)"
            ))
        }
    };
    let too_large = || format!("{text:?} is too large");
    // Exact: (whole.fraction) x factor = (whole x 10^k + fraction) x factor / 10^k.
    let scale = 10u128
        .checked_pow(u32::try_from(fraction.len()).map_err(|_| too_large())?)
        .ok_or_else(too_large)?;
    let digits: u128 = format!("{whole}{fraction}")
        .parse()
        .map_err(|_| too_large())?;
    let scaled = digits.checked_mul(factor).ok_or_else(too_large)?;
    if !scaled.is_multiple_of(scale) {
        return Err(format!("{text:?} is not a whole number of bytes"));
    }
    Ok(scaled / scale)
}

/// `1048576` is "1 MiB", `1000000` "1 MB", `100` "100 B": exact where a
/// unit divides it, else to one decimal (`1500` is "~1.5 KiB").
pub fn human_bytes(n: u64) -> String {
    const IEC: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    const SI: [(&str, u64); 4] = [
        ("TB", 1_000_000_000_000),
        ("GB", 1_000_000_000),
        ("MB", 1_000_000),
        ("kB", 1_000),
    ];
    for table in [IEC, SI] {
        if let Some((name, size)) = table
            .iter()
            .find(|(_, size)| n >= *size && n.is_multiple_of(*size))
        {
            return format!("{} {name}", n / size);
        }
    }
    match IEC.iter().find(|(_, size)| n >= *size) {
        Some((name, size)) => format!("~{:.1} {name}", n as f64 / *size as f64),
        None => format!("{n} B"),
    }
}

/// `5400 s` is "1h 30m", `30 d` "30d": days, hours, minutes, seconds and
/// milliseconds, largest first, as humantime reads them back.
pub fn human_duration(d: Duration) -> String {
    let secs = d.as_secs();
    let parts = [
        (secs / 86_400, "d"),
        (secs % 86_400 / 3600, "h"),
        (secs % 3600 / 60, "m"),
        (secs % 60, "s"),
        (u64::from(d.subsec_millis()), "ms"),
    ];
    let shown: Vec<String> = parts
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, unit)| format!("{n}{unit}"))
        .collect();
    if shown.is_empty() {
        "0s".into()
    } else {
        shown.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_count_si_in_thousands_and_iec_in_1024s_exactly() {
        for (text, bytes) in [
            ("1MiB", 1 << 20),
            ("512KiB", 512 << 10),
            ("1MB", 1_000_000),
            ("1 MB", 1_000_000),
            ("8kB", 8_000),
            ("8KB", 8_000),
            ("1mib", 1 << 20),
            ("1.5KiB", 1536),
            ("0.5MiB", 512 << 10),
            ("1.1MB", 1_100_000),
            ("256 MiB", 256 << 20),
            ("2GiB", 2 << 30),
            ("1TiB", 1 << 40),
            ("100B", 100),
            ("100 bytes", 100),
            ("0B", 0),
        ] {
            assert_eq!(BYTES.parse(text), Ok(bytes), "{text}");
        }
    }

    #[test]
    fn sizes_that_are_not_whole_bytes_ambiguous_or_too_large_are_refused() {
        for (text, why) in [
            ("0.5B", "whole number of bytes"),
            ("1.0001KiB", "whole number of bytes"),
            ("1M", "1MiB (1024s) or 1MB (1000s)"),
            ("1k", "1KiB (1024s) or 1KB (1000s)"),
            ("1Mb2", "not a unit of size"),
            ("1 parsec", "not a unit of size"),
            ("1024", "has no unit"),
            ("MiB", "not a size"),
            ("1.MiB", "not a size"),
            ("1.2.3MiB", "not a size"),
            ("", "not a size"),
            ("99999999999999999999TiB", "too large"),
            ("999999999999999999999999999999999999999999B", "too large"),
        ] {
            let e = BYTES.parse(text).unwrap_err();
            assert!(e.contains(why), "{text}: {e}");
        }
        // Fits u128 but not u64.
        assert!(BYTES
            .parse("99999999TiB")
            .unwrap_err()
            .contains("too large"));
    }

    #[test]
    fn durations_convert_to_each_unit_when_whole() {
        for (unit, text, n) in [
            (MILLISECONDS, "250ms", 250),
            (MILLISECONDS, "1s", 1000),
            (MILLISECONDS, "1.5s", 1500),
            (SECONDS, "30s", 30),
            (SECONDS, "2m", 120),
            (SECONDS, "1h30m", 5400),
            (SECONDS, "1h 30m", 5400),
            (SECONDS, "2000ms", 2),
            (MINUTES, "8h", 480),
            (MINUTES, "90m", 90),
            (MINUTES, "1.5h", 90),
            (HOURS, "3d", 72),
            (HOURS, "1w", 168),
            (DAYS, "30d", 30),
            (DAYS, "2w", 14),
            (DAYS, "48h", 2),
            (SECONDS, "0s", 0),
        ] {
            assert_eq!(unit.parse(text), Ok(n), "{text} in {}", unit.name);
        }
    }

    #[test]
    fn durations_that_are_not_a_whole_number_of_the_unit_are_refused() {
        for (unit, text, why) in [
            (
                SECONDS,
                "1500ms",
                "is 1.5 seconds: give a whole number of seconds",
            ),
            (MILLISECONDS, "1500us", "is 1.5 milliseconds"),
            (MINUTES, "90s", "is 1.5 minutes"),
            (HOURS, "30m", "is 0.5 hours"),
            (DAYS, "36h", "is 1.5 days"),
            // humantime's month is 30.44 days, its year 365.25.
            (DAYS, "1M", "whole number of days"),
            (DAYS, "1y", "whole number of days"),
            (SECONDS, "30", "time unit needed"),
            (SECONDS, "soon", "not a duration"),
            (DAYS, "99999999999999999999d", "not a duration"),
        ] {
            let e = unit.parse(text).unwrap_err();
            assert!(e.contains(why), "{text} in {}: {e}", unit.name);
        }
    }

    #[test]
    fn amounts_read_in_words() {
        assert_eq!(human_bytes(1 << 20), "1 MiB");
        assert_eq!(human_bytes(256 << 20), "256 MiB");
        assert_eq!(human_bytes(8192), "8 KiB");
        assert_eq!(human_bytes(1_000_000), "1 MB");
        assert_eq!(human_bytes(1_500_000), "1500 kB");
        assert_eq!(human_bytes(1_048_577), "~1.0 MiB");
        assert_eq!(human_bytes(100), "100 B");
        assert_eq!(human_bytes(1500), "~1.5 KiB");
        assert_eq!(SECONDS.human(5400), "1h 30m");
        assert_eq!(SECONDS.human(300), "5m");
        assert_eq!(SECONDS.human(0), "0s");
        assert_eq!(MINUTES.human(480), "8h");
        assert_eq!(HOURS.human(72), "3d");
        assert_eq!(DAYS.human(365), "365d");
        assert_eq!(MILLISECONDS.human(1250), "1s 250ms");
        // What it says reads back to the same amount.
        for (unit, n) in [
            (SECONDS, 5400),
            (MINUTES, 480),
            (DAYS, 30),
            (MILLISECONDS, 1250),
        ] {
            assert_eq!(unit.parse(&unit.human(n)), Ok(n));
        }
    }

    #[test]
    fn integers_are_bounded_by_the_keys_type() {
        assert_eq!(max::<u32>(), u64::from(u32::MAX));
        assert_eq!(max::<u64>(), u64::MAX);
        assert_eq!(max::<u8>(), 255);
    }
}
