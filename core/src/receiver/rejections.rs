//! What a rejected request may leave behind. Anyone can post to `/hooks`, so
//! a rejection is recorded as an excerpt (body, headers, query cut to a few
//! KiB, the whole body's length and SHA-256 kept), and from one address only
//! up to a rate: beyond it rejections are counted per minute, in memory
//! until `jobs::unrecorded` writes the counts (at most 101 rows per source
//! and minute). A flood of unsigned megabytes grows the database by a
//! bounded amount.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Mutex;

use crate::config::RejectionRecording;

/// Rejections recorded per minute by one process from all addresses
/// together, as a multiple of the per-address rate: many addresses at once
/// are bounded too.
const ALL_ADDRESSES_FACTOR: u32 = 10;

/// Addresses tracked in a minute; beyond, new ones are counted unrecorded
/// (an IPv6 flood brings endless addresses).
const MAX_TRACKED: usize = 65_536;

/// Addresses whose unrecorded rejections are counted under their own name
/// each minute; the others' go under `MANY_ADDRESSES`.
const ADDRESSES_COUNTED_APART: usize = 100;
pub const MANY_ADDRESSES: &str = "(more addresses)";

/// Headers kept of a rejected request, and bytes of each value.
const MAX_HEADERS_BYTES: usize = 8 * 1024;
const MAX_HEADER_VALUE: usize = 1024;
/// Bytes kept of a rejected request's query string.
const MAX_QUERY: usize = 2048;

pub struct Rejections {
    pub recording: RejectionRecording,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The unix minute `recorded` counts in.
    minute: i64,
    recorded: HashMap<IpAddr, u32>,
    recorded_in_all: u32,
    /// Not yet written: (minute, source, address) -> count.
    unrecorded: HashMap<(i64, String, String), i64>,
    /// The addresses counted under their own name in `minute`.
    unrecorded_addresses: HashSet<String>,
}

/// One row of `unrecorded_rejections` to add.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unrecorded {
    pub minute: i64,
    pub source: String,
    pub remote_addr: String,
    pub count: i64,
}

impl Rejections {
    pub fn new(recording: RejectionRecording) -> Self {
        Self {
            recording,
            state: Mutex::default(),
        }
    }

    /// Whether this rejection may be recorded; if not, it is counted.
    pub fn admit(&self, source: &str, remote_addr: Option<&str>, now: i64) -> bool {
        let minute = now.div_euclid(60);
        let per_address = self.recording.per_address_per_minute;
        let address = remote_addr
            .and_then(|a| a.parse::<IpAddr>().ok())
            .map(crate::config::address::bucket);
        let mut state = self.state.lock().expect("never poisoned");
        if state.minute != minute {
            state.minute = minute;
            state.recorded.clear();
            state.recorded_in_all = 0;
            state.unrecorded_addresses.clear();
        }
        let all_full = state.recorded_in_all >= per_address.saturating_mul(ALL_ADDRESSES_FACTOR);
        let tracked = state.recorded.len();
        let admitted = match address {
            _ if all_full => false,
            Some(address) => {
                let full = tracked >= MAX_TRACKED && !state.recorded.contains_key(&address);
                let count = state.recorded.entry(address).or_insert(0);
                if full || *count >= per_address {
                    false
                } else {
                    *count += 1;
                    true
                }
            }
            // No address to count by: the rate of all addresses bounds it.
            None => true,
        };
        if admitted {
            state.recorded_in_all += 1;
        } else {
            let mut key = (
                minute,
                source.to_owned(),
                remote_addr.unwrap_or("unknown").to_owned(),
            );
            // An address has its own row only among the first few of its
            // minute: a flood from endless addresses shares one.
            let known = state.unrecorded_addresses.contains(&key.2);
            if !known && state.unrecorded_addresses.len() >= ADDRESSES_COUNTED_APART {
                key.2 = MANY_ADDRESSES.to_owned();
            } else if !known {
                state.unrecorded_addresses.insert(key.2.clone());
            }
            *state.unrecorded.entry(key).or_insert(0) += 1;
            metrics::counter!("replaysafe_rejections_unrecorded_total", "source" => source.to_owned())
                .increment(1);
        }
        admitted
    }

    /// The counts not yet written, taken out.
    pub fn take_unrecorded(&self) -> Vec<Unrecorded> {
        let mut state = self.state.lock().expect("never poisoned");
        state
            .unrecorded
            .drain()
            .map(|((minute, source, remote_addr), count)| Unrecorded {
                minute,
                source,
                remote_addr,
                count,
            })
            .collect()
    }

    /// Counts a write failed to store, put back for the next one.
    pub fn restore(&self, rows: Vec<Unrecorded>) {
        let mut state = self.state.lock().expect("never poisoned");
        for row in rows {
            *state
                .unrecorded
                .entry((row.minute, row.source, row.remote_addr))
                .or_insert(0) += row.count;
        }
    }
}

/// A rejected request's record, cut to size.
pub struct Excerpt<'a> {
    pub body: &'a [u8],
    pub headers: serde_json::Value,
    pub query: Option<&'a str>,
    /// Something was cut: the record cannot be re-delivered.
    pub truncated: bool,
}

/// The excerpt of a rejected request: at most `body_bytes` of the body,
/// headers up to 8 KiB (values up to 1 KiB), the query up to 2 KiB.
pub fn excerpt<'a>(
    body: &'a [u8],
    headers: &[(String, String)],
    query: Option<&'a str>,
    body_bytes: usize,
) -> Excerpt<'a> {
    let mut truncated = body.len() > body_bytes;
    let body = &body[..body.len().min(body_bytes)];
    let query = query.map(|q| {
        let cut = q.floor_char_boundary(MAX_QUERY);
        truncated |= cut < q.len();
        &q[..cut]
    });
    let mut kept = Vec::new();
    let mut used = 0;
    for (i, (name, value)) in headers.iter().enumerate() {
        let cut = value.floor_char_boundary(MAX_HEADER_VALUE);
        if used + name.len() + cut > MAX_HEADERS_BYTES {
            kept.push((
                "x-replaysafe-not-kept".to_owned(),
                format!("{} more headers", headers.len() - i),
            ));
            truncated = true;
            break;
        }
        used += name.len() + cut;
        truncated |= cut < value.len();
        kept.push((name.clone(), value[..cut].to_owned()));
    }
    Excerpt {
        body,
        headers: super::stored_headers(&kept),
        query,
        truncated,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rejections(per_address: u32) -> Rejections {
        Rejections::new(RejectionRecording {
            body_bytes: 8,
            per_address_per_minute: per_address,
        })
    }

    #[test]
    fn an_address_is_recorded_up_to_its_rate_then_counted() {
        let r = rejections(3);
        let now = 1_800_000_000;
        let admitted = (0..10)
            .filter(|_| r.admit("gh", Some("192.0.2.1"), now))
            .count();
        assert_eq!(admitted, 3);
        assert!(
            r.admit("gh", Some("192.0.2.2"), now),
            "another address has its own rate"
        );
        assert!(
            r.admit("gh", Some("192.0.2.1"), now + 60),
            "the next minute starts afresh"
        );
        let unrecorded = r.take_unrecorded();
        assert_eq!(
            unrecorded,
            vec![Unrecorded {
                minute: now / 60,
                source: "gh".into(),
                remote_addr: "192.0.2.1".into(),
                count: 7
            }]
        );
        assert!(r.take_unrecorded().is_empty());
        r.restore(unrecorded);
        assert_eq!(r.take_unrecorded()[0].count, 7);
    }

    #[test]
    fn many_addresses_together_are_bounded_too() {
        let r = rejections(2);
        let now = 1_800_000_000;
        let admitted = (0..300)
            .filter(|i| r.admit("gh", Some(&format!("2001:db8:{i}::1")), now))
            .count();
        assert_eq!(admitted, 2 * ALL_ADDRESSES_FACTOR as usize);
        let same_64 = (0..5)
            .filter(|i| {
                let r = rejections(2);
                r.admit("gh", Some(&format!("2001:db8:0:1::{i}")), now)
                    && r.admit("gh", Some("2001:db8:0:1::99"), now)
                    && !r.admit("gh", Some("2001:db8:0:1:ffff::1"), now)
            })
            .count();
        assert_eq!(same_64, 5, "one /64 is one address");
        let rows = r.take_unrecorded();
        assert_eq!(rows.len(), ADDRESSES_COUNTED_APART + 1);
        let many = rows
            .iter()
            .find(|row| row.remote_addr == MANY_ADDRESSES)
            .unwrap();
        assert_eq!(
            many.count,
            300 - 2 * ALL_ADDRESSES_FACTOR as i64 - ADDRESSES_COUNTED_APART as i64
        );
    }

    #[test]
    fn an_excerpt_cuts_body_query_and_headers_and_says_so() {
        let headers: Vec<(String, String)> = (0..100)
            .map(|i| (format!("x-h{i}"), "v".repeat(200)))
            .collect();
        let query = "é".repeat(2000);
        let e = excerpt(b"0123456789", &headers, Some(&query), 8);
        assert_eq!(e.body, b"01234567");
        assert!(e.truncated);
        assert_eq!(e.query.unwrap().len(), 2048);
        let kept = e.headers.as_array().unwrap();
        assert!(kept.len() < 50, "{} headers kept", kept.len());
        assert_eq!(kept.last().unwrap()[0], "x-replaysafe-not-kept");
        let whole = excerpt(b"short", &headers[..2], Some("a=1"), 8);
        assert!(!whole.truncated);
        assert_eq!(whole.body, b"short");
        let long_value = vec![("x-long".to_owned(), "ü".repeat(600))];
        let cut = excerpt(b"", &long_value, None, 8);
        assert!(cut.truncated);
        assert_eq!(cut.headers[0][1].as_str().unwrap().len(), 1024);
    }
}
