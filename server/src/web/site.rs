//! The UI bundle (the wasm, its JS glue, the stylesheet): from a directory,
//! or from the binary itself. A release is built with the `embedded-site`
//! feature (`scripts/release`), so it is one file that serves a working
//! dashboard from any directory; a directory given with `--site-root` or
//! `LEPTOS_SITE_ROOT` still wins, for development.

use std::path::PathBuf;
use std::sync::OnceLock;

use axum::extract::Path;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// Where the bundle comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Site {
    /// `{root}/pkg/`, served by leptos_axum's file handler.
    Dir(PathBuf),
    /// Compiled in: `file` serves it.
    Embedded,
}

/// A `--site-root` given on the command line (before the server starts).
static ROOT: OnceLock<PathBuf> = OnceLock::new();

pub fn set_root(root: PathBuf) {
    let _ = ROOT.set(root);
}

impl Site {
    /// `--site-root`, then `$LEPTOS_SITE_ROOT`, then the bundle compiled in,
    /// then `target/site` (where `scripts/run` builds it).
    pub fn chosen() -> Site {
        if let Some(root) = ROOT.get() {
            return Site::Dir(root.clone());
        }
        if let Some(root) = std::env::var_os("LEPTOS_SITE_ROOT") {
            return Site::Dir(root.into());
        }
        if cfg!(feature = "embedded-site") {
            return Site::Embedded;
        }
        Site::Dir("target/site".into())
    }

    /// What a `LeptosOptions` needs: a site root (unused when embedded).
    pub fn root(&self) -> PathBuf {
        match self {
            Site::Dir(root) => root.clone(),
            Site::Embedded => "target/site".into(),
        }
    }
}

/// One file of the bundle: its name under `/pkg/`, type and bytes, and
/// the same bytes gzipped (by `scripts/release`, at the highest level, once)
/// for the browsers that take them: the wasm is a fifth of its size so.
struct Bundled {
    name: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
    gzipped: &'static [u8],
}

#[cfg(feature = "embedded-site")]
macro_rules! site_pkg {
    () => {
        env!(
            "REPLAYSAFE_SITE_PKG",
            "build the embedded site with scripts/release: it builds the UI bundle and sets REPLAYSAFE_SITE_PKG to its directory"
        )
    };
}

#[cfg(feature = "embedded-site")]
macro_rules! bundled {
    ($name:literal, $type:literal) => {
        Bundled {
            name: $name,
            content_type: $type,
            bytes: include_bytes!(concat!(site_pkg!(), "/", $name)),
            gzipped: include_bytes!(concat!(site_pkg!(), "/", $name, ".gz")),
        }
    };
}

#[cfg(feature = "embedded-site")]
static BUNDLE: &[Bundled] = &[
    bundled!("replaysafe.js", "text/javascript; charset=utf-8"),
    bundled!("replaysafe.wasm", "application/wasm"),
    bundled!("replaysafe.css", "text/css; charset=utf-8"),
];

#[cfg(not(feature = "embedded-site"))]
static BUNDLE: &[Bundled] = &[];

/// Each file's entity tags, plain and gzipped (each representation its
/// own): a digest of its bytes, worked out once.
fn etag(file: &Bundled, gzipped: bool) -> &'static str {
    static TAGS: OnceLock<Vec<[String; 2]>> = OnceLock::new();
    let tags = TAGS.get_or_init(|| {
        use sha2::Digest;
        BUNDLE
            .iter()
            .map(|f| {
                let digest = sha2::Sha256::digest(f.bytes);
                let hex: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
                [format!("\"{hex}\""), format!("\"{hex}-gz\"")]
            })
            .collect()
    });
    let at = BUNDLE
        .iter()
        .position(|f| f.name == file.name)
        .unwrap_or_default();
    &tags[at][usize::from(gzipped)]
}

/// The client takes gzip: `Accept-Encoding` names it (or `*`) without `q=0`.
fn takes_gzip(request: &HeaderMap) -> bool {
    request
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|coding| {
            let mut parts = coding.split(';').map(str::trim);
            let name = parts.next().unwrap_or_default();
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f32>().ok())
                    .is_some_and(|q| q == 0.0)
            });
            (name.eq_ignore_ascii_case("gzip") || name == "*") && !refused
        })
}

/// `GET /pkg/{file}` from the bundle compiled in. The names do not change
/// between releases, so browsers revalidate (`no-cache`) and get a 304
/// while the entity tag matches: a new release is picked up at once.
pub async fn file(Path(name): Path<String>, request: HeaderMap) -> Response {
    let Some(file) = BUNDLE.iter().find(|f| f.name == name) else {
        return (StatusCode::NOT_FOUND, "no such file in the UI bundle").into_response();
    };
    let gzipped = takes_gzip(&request);
    let tag = etag(file, gzipped);
    let cache = [
        (header::ETAG, HeaderValue::from_static(tag)),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        (header::VARY, HeaderValue::from_static("accept-encoding")),
    ];
    let matches = request
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|v| v.trim() == tag || v.trim() == "*");
    if matches {
        return (StatusCode::NOT_MODIFIED, cache).into_response();
    }
    let content_type = (
        header::CONTENT_TYPE,
        HeaderValue::from_static(file.content_type),
    );
    if gzipped {
        let encoding = (header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        return (cache, [content_type, encoding], file.gzipped).into_response();
    }
    (cache, [content_type], file.bytes).into_response()
}

#[cfg(test)]
mod tests {
    use super::takes_gzip;
    use axum::http::{header, HeaderMap, HeaderValue};

    fn accepting(values: &[&'static str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for v in values {
            headers.append(header::ACCEPT_ENCODING, HeaderValue::from_static(v));
        }
        headers
    }

    #[test]
    fn gzip_goes_to_those_who_take_it() {
        assert!(takes_gzip(&accepting(&["gzip, deflate, br, zstd"])));
        assert!(takes_gzip(&accepting(&["br", "GZip;q=0.5"])));
        assert!(takes_gzip(&accepting(&["*"])));
        assert!(!takes_gzip(&accepting(&[])));
        assert!(!takes_gzip(&accepting(&["br, identity"])));
        assert!(!takes_gzip(&accepting(&["gzip;q=0, br"])));
        assert!(!takes_gzip(&accepting(&["gzipped"])));
    }
}
