//! The HTTP side of the remote commands: one client, bearer token, JSON in
//! and out, and the server's `{"code", "detail"}` refusals as errors.

use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::Target;

pub struct Remote {
    base: url::Url,
    token: String,
    http: reqwest::Client,
}

/// Tries of a request the server answers 429 or 503, and the wait when
/// it names none.
const RETRIES: u32 = 5;
const RETRY_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("set REPLAYSAFE_TOKEN (or --token) to an API token: `replaysafe tokens create --name N --role R` makes one")]
    NoToken,
    #[error("--url: {0}")]
    BadUrl(String),
    #[error("cannot reach {url}: {reason}")]
    Unreachable { url: String, reason: String },
    /// The server answered with a refusal (`code` and `detail` from its body).
    #[error("{detail} ({status} {code})")]
    Refused {
        status: u16,
        code: String,
        detail: String,
        body: Box<Value>,
        /// Seconds, when the server said to come back.
        retry_after: Option<u64>,
    },
    #[error("unexpected answer from the server: {0}")]
    Decode(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    BadArgument(String),
    /// A bulk job stopped before its end (cancelled or failed).
    #[error("bulk job {id} {state}")]
    Unfinished { id: i64, state: String },
    /// A reconciliation stopped before its end; its findings were shown.
    #[error("the reconciliation stopped early: {0}")]
    Stopped(String),
    /// Some of several actions were refused; each was reported already.
    #[error("{refused} of {of} refused")]
    SomeRefused { refused: usize, of: usize },
}

/// A name as one path segment: `/`, `?`, `#` and `%` in a slug or a
/// destination's name cannot reach another endpoint.
pub fn segment(name: &str) -> String {
    const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
        .add(b' ')
        .add(b'"')
        .add(b'#')
        .add(b'%')
        .add(b'/')
        .add(b'<')
        .add(b'>')
        .add(b'?')
        .add(b'`')
        .add(b'{')
        .add(b'}');
    percent_encoding::utf8_percent_encode(name, SEGMENT).to_string()
}

impl Remote {
    pub fn new(target: &Target) -> Result<Self, RemoteError> {
        let token = target
            .token
            .clone()
            .filter(|t| !t.trim().is_empty())
            .ok_or(RemoteError::NoToken)?;
        let text = target
            .url
            .clone()
            .unwrap_or_else(|| "http://127.0.0.1:3000".into());
        let mut base =
            url::Url::parse(&text).map_err(|e| RemoteError::BadUrl(format!("{text:?}: {e}")))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(RemoteError::BadUrl(format!(
                "{text:?} is not an http(s) URL"
            )));
        }
        let loopback = match base.host() {
            Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            None => false,
        };
        if base.scheme() == "http" && !loopback && !target.insecure {
            return Err(RemoteError::BadUrl(format!(
                "{text:?} is plain http to another machine: the token would travel readable; \
                 use https, or --insecure to send it anyway"
            )));
        }
        // So that joining "api/v1/..." keeps a path prefix (behind a proxy).
        if !base.path().ends_with('/') {
            base.set_path(&format!("{}/", base.path()));
        }
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(60))
            .user_agent(concat!("replaysafe-cli/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| RemoteError::BadUrl(e.to_string()))?;
        Ok(Self {
            base,
            token: token.trim().to_owned(),
            http,
        })
    }

    /// The server's address, as given.
    pub fn base(&self) -> &url::Url {
        &self.base
    }

    fn url(&self, path: &str) -> Result<url::Url, RemoteError> {
        self.base
            .join(&format!("api/v1/{}", path.trim_start_matches('/')))
            .map_err(|e| RemoteError::BadUrl(e.to_string()))
    }

    pub async fn get<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<T, RemoteError> {
        let mut url = self.url(path)?;
        {
            let mut pairs = url.query_pairs_mut();
            for (k, v) in query.iter().filter(|(_, v)| !v.is_empty()) {
                pairs.append_pair(k, v);
            }
        }
        self.send(Method::GET, url, None, None).await
    }

    /// Up to `limit` rows of a list, following its `older` cursor as
    /// `before`; `split` takes a page apart into its rows and cursor.
    pub async fn collect<P: DeserializeOwned, R>(
        &self,
        path: &str,
        mut query: Vec<(&str, String)>,
        limit: usize,
        split: impl Fn(P) -> (Vec<R>, Option<i64>),
    ) -> Result<Vec<R>, RemoteError> {
        let mut rows = Vec::new();
        loop {
            let (page, older) = split(self.get(path, &query).await?);
            rows.extend(page);
            match older {
                Some(before) if rows.len() < limit => {
                    query.retain(|(k, _)| *k != "before");
                    query.push(("before", before.to_string()));
                }
                _ => break,
            }
        }
        rows.truncate(limit);
        Ok(rows)
    }

    pub async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: Value,
    ) -> Result<T, RemoteError> {
        let url = self.url(path)?;
        self.send(Method::POST, url, Some(body), None).await
    }

    /// `post`, waiting up to `wait` for the answer (a reconciliation runs
    /// for minutes).
    pub async fn post_waiting<T: DeserializeOwned>(
        &self,
        path: &str,
        body: Value,
        wait: std::time::Duration,
    ) -> Result<T, RemoteError> {
        let url = self.url(path)?;
        self.send(Method::POST, url, Some(body), Some(wait)).await
    }

    pub async fn delete<T: DeserializeOwned>(&self, path: &str) -> Result<T, RemoteError> {
        let url = self.url(path)?;
        self.send(Method::DELETE, url, None, None).await
    }

    /// Opens a server-sent-events stream (`GET`, no overall timeout: it
    /// lasts as long as the server sends; a silence longer than `quiet`
    /// counts as a cut connection). `last_event_id` resumes it.
    pub async fn stream(
        &self,
        path: &str,
        query: &[(&str, String)],
        last_event_id: Option<&str>,
        quiet: std::time::Duration,
    ) -> Result<reqwest::Response, RemoteError> {
        let mut url = self.url(path)?;
        {
            let mut pairs = url.query_pairs_mut();
            for (k, v) in query.iter().filter(|(_, v)| !v.is_empty()) {
                pairs.append_pair(k, v);
            }
        }
        let shown = url.to_string();
        let http = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(10))
            .read_timeout(quiet)
            .user_agent(concat!("replaysafe-cli/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| RemoteError::BadUrl(e.to_string()))?;
        let mut request = http
            .get(url)
            .bearer_auth(&self.token)
            .header(reqwest::header::ACCEPT, "text/event-stream");
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        let response = request.send().await.map_err(|e| RemoteError::Unreachable {
            url: shown.clone(),
            reason: e.to_string(),
        })?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let text = response.text().await.unwrap_or_default();
        Err(refusal(status, retry_after, text))
    }

    /// Sends, waiting out a 429 or 503 as its `Retry-After` says (a long
    /// list or `tail` must not die of the token's rate).
    async fn send<T: DeserializeOwned>(
        &self,
        method: Method,
        url: url::Url,
        body: Option<Value>,
        wait: Option<std::time::Duration>,
    ) -> Result<T, RemoteError> {
        let mut tries = 0;
        loop {
            tries += 1;
            match self
                .send_once(method.clone(), url.clone(), body.clone(), wait)
                .await
            {
                Err(RemoteError::Refused {
                    status: 429 | 503,
                    retry_after,
                    ..
                }) if tries < RETRIES => {
                    let wait = retry_after.map_or(RETRY_WAIT, |secs| {
                        std::time::Duration::from_secs(secs.clamp(1, 30))
                    });
                    tokio::time::sleep(wait).await;
                }
                answer => return answer,
            }
        }
    }

    async fn send_once<T: DeserializeOwned>(
        &self,
        method: Method,
        url: url::Url,
        body: Option<Value>,
        wait: Option<std::time::Duration>,
    ) -> Result<T, RemoteError> {
        let shown = url.to_string();
        let mut request = self.http.request(method, url).bearer_auth(&self.token);
        if let Some(wait) = wait {
            request = request.timeout(wait);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.map_err(|e| RemoteError::Unreachable {
            url: shown.clone(),
            reason: e.to_string(),
        })?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let text = response
            .text()
            .await
            .map_err(|e| RemoteError::Unreachable {
                url: shown,
                reason: e.to_string(),
            })?;
        if status.is_success() {
            return serde_json::from_str(&text).map_err(|e| RemoteError::Decode(e.to_string()));
        }
        Err(refusal(status, retry_after, text))
    }
}

/// A non-2xx answer as the error it is: the server's `{"code", "detail"}`,
/// or the status's reason when the body is not the API's.
fn refusal(status: StatusCode, retry_after: Option<u64>, text: String) -> RemoteError {
    let body: Value = serde_json::from_str(&text).unwrap_or(Value::String(text.clone()));
    let code = body["code"].as_str().unwrap_or("error").to_owned();
    let detail = body["detail"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| {
            let reason = status.canonical_reason().unwrap_or("error");
            if status == StatusCode::NOT_FOUND {
                "not found: is this a replaysafe server of this version?".into()
            } else {
                reason.to_owned()
            }
        });
    RemoteError::Refused {
        status: status.as_u16(),
        code,
        detail,
        body: Box::new(body),
        retry_after,
    }
}
