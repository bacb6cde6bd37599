//! Times: `DateTime<Utc>` from the database to the edge. On the wire
//! (`/api/v1`, every `--json`, server functions) RFC 3339 with milliseconds
//! and `Z` (`2026-12-03T09:05:16.123Z`); on the pages and the CLI's tables
//! as `2026-12-03 09:05:16`.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Deserializer, Serializer};

pub type Time = DateTime<Utc>;

/// How the API writes a time.
pub fn rfc3339(t: &Time) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A time on a page or in a table: UTC to the second.
pub fn shown(t: &Time) -> String {
    t.format("%Y-%m-%d %H:%M:%S").to_string()
}

/// A time on a page where milliseconds tell events apart.
pub fn shown_ms(t: &Time) -> String {
    t.format("%Y-%m-%d %H:%M:%S%.3f").to_string()
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
        assert_eq!(shown_ms(&at), "2026-12-03 09:05:16.123");
        assert!(serde_json::from_str::<Row>(r#"{"at":"2026-12-03 09:05:16"}"#).is_err());
    }
}
