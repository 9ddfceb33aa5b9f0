//! The request id (SPEC §2, dropshot's `request_id`): what names one request in its
//! answer's `X-Request-Id`, its error envelope's `requestId`, and every log line of its
//! span. A client's own id is kept when it is 1–128 visible ASCII characters; any other
//! request gets a new one.

use std::future::Future;

use fleet_guest::grammar::is_request_id;
use hyper::HeaderMap;
use hyper::header::{HeaderName, HeaderValue};

/// The header a client may name its request with, and every answer carries.
pub const HEADER: HeaderName = HeaderName::from_static("x-request-id");

tokio::task_local! {
    /// The id of the request the task serves: every error envelope made while serving it
    /// carries it, wherever in the transport it is made.
    static CURRENT: RequestId;
}

/// One request's id: visible ASCII, 1–128 characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(HeaderValue);

impl RequestId {
    /// The client's own id in `headers`, when it sent exactly one that is 1–128 visible
    /// ASCII characters; else a new one.
    pub fn of(headers: &HeaderMap) -> RequestId {
        let mut given = headers.get_all(&HEADER).iter();
        match (given.next(), given.next()) {
            (Some(id), None) if is_request_id(id.as_bytes()) => RequestId(id.clone()),
            _ => RequestId::new(),
        }
    }

    /// A new id: 128 random bits as 32 hex digits.
    pub fn new() -> RequestId {
        let id = format!("{:032x}", rand::random::<u128>());
        RequestId(HeaderValue::from_str(&id).expect("hex digits are a header value"))
    }

    pub fn as_str(&self) -> &str {
        // Invariant: only visible ASCII is ever held (`is_request_id`, or hex digits).
        self.0.to_str().unwrap_or_default()
    }

    pub fn header(&self) -> HeaderValue {
        self.0.clone()
    }

    /// Runs `serving` with this id as the current request's.
    pub async fn scope<F: Future>(self, serving: F) -> F::Output {
        CURRENT.scope(self, serving).await
    }

    /// The id of the request this task serves, if it serves one.
    pub fn current() -> Option<RequestId> {
        CURRENT.try_with(RequestId::clone).ok()
    }
}

impl Default for RequestId {
    fn default() -> RequestId {
        RequestId::new()
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(values: &[&[u8]]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(HEADER, HeaderValue::from_bytes(value).unwrap());
        }
        headers
    }

    #[test]
    fn a_clients_visible_ascii_id_of_at_most_128_characters_is_kept() {
        for kept in ["a", "req-42/retry:1", "~!", &"x".repeat(128)] {
            assert_eq!(RequestId::of(&with(&[kept.as_bytes()])).as_str(), kept);
        }
    }

    #[test]
    fn any_other_id_is_replaced_by_a_new_one() {
        let long = "x".repeat(129);
        let refused: [&[&[u8]]; 6] =
            [&[], &[b""], &[b"two words"], &[b"tab\there"], &[long.as_bytes()], &[b"one", b"two"]];
        for given in refused {
            let id = RequestId::of(&with(given));
            assert_eq!(id.as_str().len(), 32, "{given:?}");
            assert!(id.as_str().bytes().all(|byte| byte.is_ascii_hexdigit()));
        }
        assert_ne!(RequestId::new(), RequestId::new());
        let non_ascii = HeaderValue::from_bytes("é".as_bytes()).unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(HEADER, non_ascii);
        assert_eq!(RequestId::of(&headers).as_str().len(), 32);
    }

    #[tokio::test]
    async fn the_current_id_is_the_scoped_requests() {
        assert_eq!(RequestId::current(), None);
        let id = RequestId::of(&with(&[b"mine"]));
        let seen = id.clone().scope(async { RequestId::current() }).await;
        assert_eq!(seen, Some(id));
    }
}
