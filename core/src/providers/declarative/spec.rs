//! `[source.signature]` (spec section 10): the declarative verifier's
//! description, its names checked and typed once at start; what it cannot
//! express is refused with the key named.

use serde::Deserialize;

use super::{
    Algorithm, Encoding, Format, Location, SecretEncoding, Spec, TimestampAt, TimestampFormat,
};
use crate::providers::template::{Field, Template};
use crate::providers::SettingError;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSignature {
    header: Option<String>,
    field: Option<String>,
    algorithm: String,
    encoding: Option<String>,
    prefix: Option<String>,
    format: Option<String>,
    kv_separator: Option<String>,
    signature_name: Option<String>,
    timestamp_name: Option<String>,
    secret_encoding: Option<String>,
    public_key: Option<String>,
    payload: Option<String>,
    timestamp_header: Option<String>,
    timestamp_field: Option<String>,
    timestamp_format: Option<String>,
    id_header: Option<String>,
}

/// The description typed; a refusal names its key (below `signature.`).
pub fn parse(raw: RawSignature) -> Result<Spec, SettingError> {
    let refuse = |k: &str, why: String| Err(SettingError::new(k, why));
    let pointer = |k: &str, p: String| -> Result<String, SettingError> {
        if p.starts_with('/') {
            Ok(p)
        } else {
            Err(SettingError::new(
                k,
                format!("{p:?}: a JSON pointer, like \"/signature\""),
            ))
        }
    };
    let location = match (raw.header, raw.field) {
        (Some(h), None) if !h.trim().is_empty() => Location::Header(h.trim().to_ascii_lowercase()),
        (None, Some(f)) => Location::Field(pointer("field", f)?),
        _ => {
            return refuse(
                "header",
                "give the signature's header, or its field in the body (one of them)".into(),
            )
        }
    };
    let algorithm = match raw.algorithm.as_str() {
        "hmac-sha1" => Algorithm::HmacSha1,
        "hmac-sha256" => Algorithm::HmacSha256,
        "hmac-sha512" => Algorithm::HmacSha512,
        "ed25519" => Algorithm::Ed25519,
        "ecdsa-p256" => Algorithm::EcdsaP256,
        other => {
            return refuse(
                "algorithm",
                format!("{other:?}: hmac-sha1, hmac-sha256, hmac-sha512, ed25519 or ecdsa-p256"),
            )
        }
    };
    let public = matches!(algorithm, Algorithm::Ed25519 | Algorithm::EcdsaP256);
    if raw.public_key.is_some() && !public {
        return refuse(
            "public_key",
            "only the public-key algorithms take one".into(),
        );
    }
    if public && raw.secret_encoding.is_some() {
        return refuse(
            "secret_encoding",
            "a public-key algorithm has no shared secret".into(),
        );
    }
    let encoding = match raw.encoding.as_deref().unwrap_or("hex") {
        "hex" => Encoding::Hex,
        "base64" => Encoding::Base64,
        other => return refuse("encoding", format!("{other:?}: hex or base64")),
    };
    let format = match raw.format.as_deref().unwrap_or("plain") {
        "plain" => {
            for (k, given) in [
                ("kv_separator", raw.kv_separator.is_some()),
                ("signature_name", raw.signature_name.is_some()),
                ("timestamp_name", raw.timestamp_name.is_some()),
            ] {
                if given {
                    return refuse(k, "only format = \"kv\" takes it".into());
                }
            }
            Format::Plain
        }
        "kv" => kv(Format::Kv {
            separator: match raw.kv_separator {
                Some(s) if !s.is_empty() && !s.contains('=') => s,
                Some(s) => {
                    return refuse(
                        "kv_separator",
                        format!("{s:?}: one or more characters, not '='"),
                    )
                }
                None => ",".into(),
            },
            signature_name: match raw.signature_name {
                Some(n) if !n.trim().is_empty() => n.trim().to_owned(),
                _ => {
                    return refuse(
                        "signature_name",
                        "format = \"kv\" needs the signature's name (\"v1\")".into(),
                    )
                }
            },
            timestamp_name: raw
                .timestamp_name
                .map(|t| t.trim().to_owned())
                .filter(|t| !t.is_empty()),
        })
        .map_err(|(k, why)| SettingError::new(k, why))?,
        other => return refuse("format", format!("{other:?}: plain or kv")),
    };
    let secret_encoding = match raw.secret_encoding.as_deref().unwrap_or("raw") {
        "raw" => SecretEncoding::Raw,
        "base64" => SecretEncoding::Base64,
        "whsec" => SecretEncoding::Whsec,
        other => {
            return refuse(
                "secret_encoding",
                format!("{other:?}: raw, base64 or whsec"),
            )
        }
    };
    if let (Format::Plain, Some(p)) = (&format, &raw.prefix) {
        if p.contains(char::is_whitespace) {
            return refuse(
                "prefix",
                format!("{p:?}: signatures are separated by spaces, so a prefix holds none"),
            );
        }
    }
    let payload = Template::parse(raw.payload.as_deref().unwrap_or("{body}"), |_| true)
        .map_err(|e| SettingError::new("payload", e))?;
    // Where two values touch, a captured request could move bytes from one
    // to the other and keep its signature; only a value replaysafe fixes or
    // checks strictly (the timestamp's digits) may touch another.
    let fixed = |f: &Field| matches!(f, Field::Timestamp | Field::Method | Field::Url);
    if let Some((a, b)) = payload.adjacent().find(|(a, b)| !fixed(a) && !fixed(b)) {
        return refuse(
            "payload",
            format!(
                "{:?}: {a} and {b} touch, so where one ends cannot be told; put the provider's separator between them",
                payload.as_str()
            ),
        );
    }
    if matches!(location, Location::Field(_)) && payload.fields().any(|f| *f == Field::Body) {
        return refuse(
            "payload",
            "a signature inside the body cannot sign the body: name the fields it signs".into(),
        );
    }
    let kv_timestamp = matches!(
        &format,
        Format::Kv {
            timestamp_name: Some(_),
            ..
        }
    );
    let timestamp = match (raw.timestamp_header, raw.timestamp_field, kv_timestamp) {
        (None, None, false) => None,
        (Some(h), None, false) if !h.trim().is_empty() => {
            Some(TimestampAt::Header(h.trim().to_ascii_lowercase()))
        }
        (None, Some(f), false) => Some(TimestampAt::Field(pointer("timestamp_field", f)?)),
        (None, None, true) => Some(TimestampAt::Kv),
        _ => {
            return refuse(
                "timestamp_header",
                "the timestamp comes from one place: timestamp_header, timestamp_field or the kv timestamp_name".into(),
            )
        }
    };
    let signs = |f: &Field| payload.fields().any(|g| g == f);
    let timestamp_signed = signs(&Field::Timestamp)
        || match &timestamp {
            Some(TimestampAt::Field(p)) => signs(&Field::Body) || signs(&Field::Pointer(p.clone())),
            Some(TimestampAt::Header(h)) => signs(&Field::Header(h.clone())),
            Some(TimestampAt::Kv) | None => false,
        };
    if timestamp.is_some() && !timestamp_signed {
        return refuse(
            "payload",
            "a timestamp is read but not signed (anyone could change it): put {timestamp} in the payload".into(),
        );
    }
    let timestamp_format = match raw.timestamp_format.as_deref() {
        Some(_) if timestamp.is_none() => {
            return refuse("timestamp_format", "there is no timestamp to read".into())
        }
        None | Some("unix") => TimestampFormat::Unix,
        Some("unix_ms") => TimestampFormat::UnixMs,
        Some("rfc3339") => TimestampFormat::Rfc3339,
        Some(other) => {
            return refuse(
                "timestamp_format",
                format!("{other:?}: unix, unix_ms or rfc3339"),
            )
        }
    };
    Ok(Spec {
        location,
        algorithm,
        encoding,
        prefix: raw.prefix.filter(|p| !p.is_empty()),
        format,
        secret_encoding,
        payload,
        timestamp,
        timestamp_format,
        id_header: raw
            .id_header
            .map(|h| h.trim().to_ascii_lowercase())
            .filter(|h| !h.is_empty()),
        public_key: raw.public_key,
        key: None,
        handshake: None,
    })
}

/// A kv format whose names can be told apart in what it reads.
fn kv(format: Format) -> Result<Format, (&'static str, String)> {
    let Format::Kv {
        separator,
        signature_name,
        timestamp_name,
    } = &format
    else {
        return Ok(format);
    };
    for (k, name) in [
        ("signature_name", Some(signature_name)),
        ("timestamp_name", timestamp_name.as_ref()),
    ] {
        if let Some(n) = name.filter(|n| n.contains('=') || n.contains(separator.as_str())) {
            return Err((k, format!("{n:?} holds '=' or the separator {separator:?}")));
        }
    }
    if timestamp_name.as_ref() == Some(signature_name) {
        return Err((
            "timestamp_name",
            "the timestamp and the signature have one name".into(),
        ));
    }
    Ok(format)
}
