//! Times: `DateTime<Utc>` from the database to the edge. On the wire
//! (`/api/v1`, every `--json`, server functions) RFC 3339 with milliseconds
//! and `Z` (`2026-12-03T09:05:16.123Z`); in the CLI's tables as UTC
//! `2026-12-03 09:05:16`; on the pages the same in the viewer's `Zone`.

use chrono::{DateTime, NaiveDateTime, Offset, SecondsFormat, TimeZone, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub type Time = DateTime<Utc>;

/// Which clock a person reads the pages by: their own zone's, or UTC's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Clock {
    #[default]
    Local,
    Utc,
}

impl Clock {
    pub fn as_str(self) -> &'static str {
        match self {
            Clock::Local => "local",
            Clock::Utc => "utc",
        }
    }

    pub fn parse(text: &str) -> Option<Clock> {
        match text {
            "local" => Some(Clock::Local),
            "utc" => Some(Clock::Utc),
            _ => None,
        }
    }
}

/// The zone a page shows times in: an IANA zone with its daylight-saving
/// rules (the tz database is compiled in, so the server and the browser
/// write the same text for the same instant).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Zone(chrono_tz::Tz);

impl Zone {
    pub const UTC: Zone = Zone(chrono_tz::Tz::UTC);

    /// An IANA name (`Europe/Berlin`); None for anything else. UTC's
    /// aliases (`Etc/UTC`, which many systems report) are UTC.
    pub fn named(name: &str) -> Option<Zone> {
        const UTC_ALIASES: [&str; 7] = [
            "Etc/UTC",
            "Etc/UCT",
            "UCT",
            "Etc/Universal",
            "Universal",
            "Etc/Zulu",
            "Zulu",
        ];
        if UTC_ALIASES.contains(&name) {
            return Some(Zone::UTC);
        }
        name.parse().ok().map(Zone)
    }

    pub fn name(self) -> &'static str {
        self.0.name()
    }

    pub fn is_utc(self) -> bool {
        self.0 == chrono_tz::Tz::UTC
    }

    /// The zone's abbreviation at `t` (`CET`, `CEST`, `EST`; some zones
    /// have none and give their offset, `+0530`).
    pub fn abbreviation(self, t: &Time) -> String {
        t.with_timezone(&self.0).format("%Z").to_string()
    }

    /// A time on a page, to the second.
    pub fn shown(self, t: &Time) -> String {
        t.with_timezone(&self.0)
            .format("%Y-%m-%d %H:%M:%S")
            .to_string()
    }

    /// A time on a page where milliseconds tell events apart.
    pub fn shown_ms(self, t: &Time) -> String {
        t.with_timezone(&self.0)
            .format("%Y-%m-%d %H:%M:%S%.3f")
            .to_string()
    }

    /// A chart's time: `14:05`, or `11-30 14:05` over days.
    pub fn minute(self, t: &Time, with_date: bool) -> String {
        let pattern = if with_date { "%m-%d %H:%M" } else { "%H:%M" };
        t.with_timezone(&self.0).format(pattern).to_string()
    }

    /// A `datetime-local` input's value for `t`, read in this zone.
    pub fn input_value(self, t: &Time) -> String {
        t.with_timezone(&self.0)
            .format("%Y-%m-%dT%H:%M")
            .to_string()
    }

    /// A filter's time as a person typed it: a `datetime-local` value
    /// (`2026-11-30T14:05`, seconds optional) read in this zone, or an
    /// RFC 3339 time with its own offset. A wall time that happens twice
    /// (the hour clocks go back) is the first; one that never happens (the
    /// hour they skip) is read an hour later, as clocks show it.
    pub fn read(self, field: &str, text: &str) -> Result<Time, String> {
        let text = text.trim();
        if let Ok(t) = DateTime::parse_from_rfc3339(text) {
            return Ok(t.with_timezone(&Utc));
        }
        let naive = text.replacen(' ', "T", 1);
        let wall = ["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M"]
            .iter()
            .find_map(|format| NaiveDateTime::parse_from_str(&naive, format).ok())
            .ok_or_else(|| {
                format!(
                    "{field}: expected a time like 2026-11-30T14:05 ({}) or \
                     2026-11-30T14:05:00+01:00, got {text:?}",
                    self.name()
                )
            })?;
        if let Some(t) = self.0.from_local_datetime(&wall).earliest() {
            return Ok(t.with_timezone(&Utc));
        }
        // In the gap clocks skip: read with the offset in force before it
        // (a day earlier is before any transition), as a clock that did not
        // jump would show it.
        let before = self
            .0
            .offset_from_utc_datetime(&(wall - chrono::Duration::days(1)))
            .fix();
        Ok((wall - before).and_utc())
    }
}

/// How long ago `t` was at `now`, as a list says it beside the time
/// (`just now`, `42 s ago`, `3 min ago`, `5 h ago`, `2 d ago`; `in 4 min`).
/// Up to a minute ahead is `just now`: a page's clock moves in steps, and
/// a row can arrive between them.
pub fn ago(now: &Time, t: &Time) -> String {
    let secs = (*now - *t).num_seconds();
    if (-60..0).contains(&secs) {
        return "just now".into();
    }
    let (n, unit) = match secs.unsigned_abs() {
        s if s < 5 => return "just now".into(),
        s if s < 60 => (s, "s"),
        s if s < 3_600 => (s / 60, "min"),
        s if s < 172_800 => (s / 3_600, "h"),
        s => (s / 86_400, "d"),
    };
    if secs < 0 {
        format!("in {n} {unit}")
    } else {
        format!("{n} {unit} ago")
    }
}

/// How the API writes a time.
pub fn rfc3339(t: &Time) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A time in a table of the CLI: UTC to the second.
pub fn shown(t: &Time) -> String {
    Zone::UTC.shown(t)
}

/// A time in the CLI where milliseconds tell events apart.
pub fn shown_ms(t: &Time) -> String {
    Zone::UTC.shown_ms(t)
}

/// A time as the API takes it: RFC 3339, any offset.
fn parse<E: serde::de::Error>(text: &str) -> Result<Time, E> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(E::custom)
}

/// `#[serde(with = "crate::time::wire")]` on a `Time`.
pub mod wire {
    use super::*;

    pub fn serialize<S: Serializer>(t: &Time, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&rfc3339(t))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Time, D::Error> {
        parse(&String::deserialize(d)?)
    }
}

/// `#[serde(default, with = "crate::time::wire_opt")]` on an `Option<Time>`.
pub mod wire_opt {
    use super::*;

    pub fn serialize<S: Serializer>(t: &Option<Time>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => s.serialize_some(&rfc3339(t)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Time>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|text| parse(&text))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    struct Row {
        #[serde(with = "wire")]
        at: Time,
        #[serde(default, with = "wire_opt")]
        done: Option<Time>,
    }

    #[test]
    fn times_go_out_as_rfc3339_with_milliseconds_and_come_back() {
        let at = DateTime::parse_from_rfc3339("2026-12-03T09:05:16.123456Z")
            .unwrap()
            .with_timezone(&Utc);
        let row = Row { at, done: None };
        let json = serde_json::to_string(&row).unwrap();
        assert_eq!(json, r#"{"at":"2026-12-03T09:05:16.123Z","done":null}"#);
        let back: Row = serde_json::from_str(r#"{"at":"2026-12-03T10:05:16.123+01:00"}"#).unwrap();
        assert_eq!(rfc3339(&back.at), "2026-12-03T09:05:16.123Z");
        assert_eq!(back.done, None);
        assert_eq!(shown(&at), "2026-12-03 09:05:16");
        assert_eq!(Zone::UTC.shown_ms(&at), "2026-12-03 09:05:16.123");
        assert!(serde_json::from_str::<Row>(r#"{"at":"2026-12-03 09:05:16"}"#).is_err());
    }

    fn utc(text: &str) -> Time {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn a_zone_shows_and_reads_wall_times_across_daylight_saving() {
        let berlin = Zone::named("Europe/Berlin").unwrap();
        let winter = utc("2026-12-03T09:05:16.123Z");
        let summer = utc("2026-07-01T09:05:16Z");
        assert_eq!(berlin.shown(&winter), "2026-12-03 10:05:16");
        assert_eq!(berlin.shown_ms(&winter), "2026-12-03 10:05:16.123");
        assert_eq!(berlin.shown(&summer), "2026-07-01 11:05:16");
        assert_eq!(
            (berlin.abbreviation(&winter), berlin.abbreviation(&summer)),
            ("CET".to_owned(), "CEST".to_owned())
        );
        assert_eq!(berlin.input_value(&winter), "2026-12-03T10:05");
        assert_eq!(berlin.minute(&winter, false), "10:05");
        assert_eq!(berlin.minute(&winter, true), "12-03 10:05");
        // What the input shows is what the filter means.
        assert_eq!(
            berlin.read("from", "2026-12-03T10:05").unwrap(),
            utc("2026-12-03T09:05:00Z")
        );
        assert_eq!(berlin.read("from", "2026-07-01 11:05:16").unwrap(), summer);
        assert_eq!(
            Zone::UTC.read("from", "2026-12-03T10:05").unwrap(),
            utc("2026-12-03T10:05:00Z")
        );
        // An offset given wins over the zone.
        assert_eq!(
            berlin.read("to", "2026-12-03T10:05:16.123-01:00").unwrap(),
            utc("2026-12-03T11:05:16.123Z")
        );
        // 02:30 happens twice on 25 October (the first is CEST), never on 29 March.
        assert_eq!(
            berlin.read("from", "2026-10-25T02:30").unwrap(),
            utc("2026-10-25T00:30:00Z")
        );
        assert_eq!(
            berlin.read("from", "2026-03-29T02:30").unwrap(),
            utc("2026-03-29T01:30:00Z")
        );
        // Lord Howe skips half an hour (02:00 to 02:30 on 4 October 2026).
        let lord_howe = Zone::named("Australia/Lord_Howe").unwrap();
        assert_eq!(
            lord_howe.read("from", "2026-10-04T02:15").unwrap(),
            utc("2026-10-03T15:45:00Z")
        );
        let refused = berlin.read("from", "yesterday").unwrap_err();
        assert!(refused.contains("Europe/Berlin"), "{refused}");
        assert_eq!(Zone::named("Mars/Olympus"), None);
        assert!(Zone::named("UTC").unwrap().is_utc());
        assert_eq!(Zone::named("Etc/UTC").map(Zone::name), Some("UTC"));
    }

    #[test]
    fn relative_times_round_down_to_their_unit() {
        let now = utc("2026-12-03T09:00:00Z");
        let at = |secs: i64| now - chrono::Duration::seconds(secs);
        assert_eq!(ago(&now, &at(2)), "just now");
        assert_eq!(ago(&now, &at(-2)), "just now");
        assert_eq!(ago(&now, &at(42)), "42 s ago");
        assert_eq!(ago(&now, &at(3 * 60 + 59)), "3 min ago");
        assert_eq!(ago(&now, &at(5 * 3600)), "5 h ago");
        assert_eq!(ago(&now, &at(47 * 3600)), "47 h ago");
        assert_eq!(ago(&now, &at(3 * 86400)), "3 d ago");
        assert_eq!(ago(&now, &at(-45)), "just now");
        assert_eq!(ago(&now, &at(-240)), "in 4 min");
    }
}
