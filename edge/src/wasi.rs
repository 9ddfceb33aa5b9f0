//! The wasi:http glue: the incoming handler reads the request, [`crate::serve`] answers,
//! and the origin is reached through `wasi:http/outgoing-handler` with bounded waits.
//! Nothing here panics: every failure is an answer (jco ends its process when a
//! handler answers with an error instead of a response).

use std::io::Write as _;
use std::time::{Duration, Instant};

use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    Fields, IncomingBody, IncomingRequest, Method, OutgoingBody, OutgoingRequest, OutgoingResponse, RequestOptions,
    ResponseOutparam, Scheme,
};
use wasip2::io::streams::StreamError;

use crate::{Answer, BODY_LIMIT, Origin, Reply, STATE_LIMIT, STATE_MEDIA_TYPE};

struct Edge;

wasip2::http::proxy::export!(Edge);

impl wasip2::exports::http::incoming_handler::Guest for Edge {
    fn handle(request: IncomingRequest, response: ResponseOutparam) {
        let method = match request.method() {
            Method::Get => "GET".to_owned(),
            Method::Post => "POST".to_owned(),
            Method::Head => "HEAD".to_owned(),
            Method::Put => "PUT".to_owned(),
            Method::Delete => "DELETE".to_owned(),
            Method::Patch => "PATCH".to_owned(),
            Method::Options => "OPTIONS".to_owned(),
            Method::Connect => "CONNECT".to_owned(),
            Method::Trace => "TRACE".to_owned(),
            Method::Other(other) => other,
        };
        let target = request.path_with_query().unwrap_or_default();
        let path = target.split('?').next().unwrap_or_default().to_owned();
        let (authorization, request_id) = {
            let headers = request.headers();
            let authorization = headers.get("authorization").into_iter().next();
            let given = headers.get("x-request-id");
            // Exactly one id, or none kept.
            let given = if given.len() == 1 { given.first().map(Vec::as_slice) } else { None };
            let request_id = crate::request_id(given, new_request_id);
            (authorization.and_then(|value| String::from_utf8(value).ok()), request_id)
        };
        let body = match request.consume() {
            Ok(body) => read_all(body, BODY_LIMIT, None).ok().flatten(),
            Err(()) => Some(Vec::new()),
        };
        drop(request);
        let origin = OverHttp { base: std::env::var("FLEET_ORIGIN").ok(), request_id: request_id.clone() };
        let answer = crate::serve(&method, &path, &request_id, authorization.as_deref(), body.as_deref(), &origin);
        respond(response, &answer, &request_id);
    }
}

/// A new request id: 128 random bits as 32 hex digits, as the origin makes them.
fn new_request_id() -> String {
    use wasip2::random::random::get_random_u64;
    format!("{:016x}{:016x}", get_random_u64(), get_random_u64())
}

/// How long the whole state read may take, whatever the origin does.
const STATE_DEADLINE: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const BYTE_TIMEOUT: Duration = Duration::from_secs(10);

/// The origin at `FLEET_ORIGIN` (`http://host:port`, or `https://`), asked on behalf of
/// the request `request_id` names: the origin's log names it alike.
struct OverHttp {
    base: Option<String>,
    request_id: String,
}

impl Origin for OverHttp {
    fn state(&self, path: &str, authorization: &str) -> Result<Reply, String> {
        self.post(path, authorization, Some(STATE_MEDIA_TYPE), b"{}")
    }

    fn check(&self, authorization: &str, body: &[u8]) -> Result<Reply, String> {
        self.post(crate::CHECK_PATH, authorization, None, body)
    }
}

/// How a request to the origin failed.
struct Failed {
    why: String,
    /// Whether the origin's connection broke before any answer came: nothing was read,
    /// so the request (a read of the state, or a check) can be made again.
    unanswered: bool,
}

impl Failed {
    fn new(why: impl Into<String>) -> Failed {
        Failed { why: why.into(), unanswered: false }
    }
}

impl OverHttp {
    /// POSTs `body` to the origin's `path`, with `Accept: accept` when given; once
    /// more when the connection broke before any answer (every request the edge makes
    /// reads, and changes nothing).
    fn post(&self, path: &str, authorization: &str, accept: Option<&str>, body: &[u8]) -> Result<Reply, String> {
        let started = Instant::now();
        match self.post_once(started, path, authorization, accept, body) {
            Err(failed) if failed.unanswered && started.elapsed() < STATE_DEADLINE => self
                .post_once(started, path, authorization, accept, body)
                .map_err(|again| format!("{} (and before that, {})", again.why, failed.why)),
            result => result.map_err(|failed| failed.why),
        }
    }

    fn post_once(
        &self,
        started: Instant,
        path: &str,
        authorization: &str,
        accept: Option<&str>,
        body: &[u8],
    ) -> Result<Reply, Failed> {
        let base = self.base.as_deref().ok_or_else(|| Failed::new("FLEET_ORIGIN is not set"))?;
        let (scheme, rest) = match (base.strip_prefix("http://"), base.strip_prefix("https://")) {
            (Some(rest), _) => (Scheme::Http, rest),
            (_, Some(rest)) => (Scheme::Https, rest),
            _ => return Err(Failed::new(format!("FLEET_ORIGIN {base:?} is not an http:// or https:// URL"))),
        };
        let (authority, prefix) = match rest.find('/') {
            Some(slash) => (&rest[..slash], rest[slash..].trim_end_matches('/')),
            None => (rest, ""),
        };
        let mut headers = vec![
            ("authorization".to_owned(), authorization.as_bytes().to_vec()),
            ("content-type".to_owned(), b"application/json".to_vec()),
            ("content-length".to_owned(), body.len().to_string().into_bytes()),
            ("x-request-id".to_owned(), self.request_id.as_bytes().to_vec()),
        ];
        if let Some(accept) = accept {
            headers.push(("accept".to_owned(), accept.as_bytes().to_vec()));
        }
        let headers = Fields::from_list(&headers)
            .map_err(|error| Failed::new(format!("the request cannot carry these headers: {error:?}")))?;
        let request = OutgoingRequest::new(headers);
        let path = format!("{prefix}{path}");
        let set = request.set_method(&Method::Post).is_ok()
            && request.set_scheme(Some(&scheme)).is_ok()
            && request.set_authority(Some(authority)).is_ok()
            && request.set_path_with_query(Some(&path)).is_ok();
        if !set {
            return Err(Failed::new(format!("FLEET_ORIGIN {base:?} does not make a request")));
        }
        let outgoing = request.body().map_err(|()| Failed::new("the request body was taken"))?;
        let options = RequestOptions::new();
        let nanos = |duration: Duration| Some(duration.as_nanos() as u64);
        // A host may not support a timeout; the overall deadline below still holds.
        let _ = options.set_connect_timeout(nanos(CONNECT_TIMEOUT));
        let _ = options.set_first_byte_timeout(nanos(BYTE_TIMEOUT));
        let _ = options.set_between_bytes_timeout(nanos(BYTE_TIMEOUT));
        let future =
            outgoing_handler::handle(request, Some(options)).map_err(|error| Failed::new(format!("{error:?}")))?;
        // A body the connection no longer takes says only that it broke: why, or the
        // answer the origin gave anyway, is the response's to tell.
        let unsent = send(outgoing, body).err();
        let response = loop {
            match future.get() {
                Some(Ok(Ok(response))) => break response,
                Some(Ok(Err(error))) => {
                    let why = match &unsent {
                        Some(unsent) => format!("{error:?} (the request's body: {unsent})"),
                        None => format!("{error:?}"),
                    };
                    return Err(Failed { why, unanswered: true });
                }
                Some(Err(())) => return Err(Failed::new("the response was taken")),
                None => {
                    let left = STATE_DEADLINE.saturating_sub(started.elapsed());
                    if left.is_zero() {
                        return Err(Failed::new(format!("no answer within {}s", STATE_DEADLINE.as_secs())));
                    }
                    let ready = future.subscribe();
                    let timer = wasip2::clocks::monotonic_clock::subscribe_duration(left.as_nanos() as u64);
                    wasip2::io::poll::poll(&[&ready, &timer]);
                }
            }
        };
        drop(future);
        let status = response.status();
        let content_type = {
            let headers = response.headers();
            let values = headers.get("content-type");
            values.into_iter().next().and_then(|value| String::from_utf8(value).ok())
        };
        let body = response.consume().map_err(|()| Failed::new("the response body was taken"))?;
        let body = read_all(body, STATE_LIMIT, Some(started + STATE_DEADLINE))
            .map_err(Failed::new)?
            .ok_or_else(|| Failed::new(format!("the answer is larger than {} MiB", STATE_LIMIT >> 20)))?;
        Ok(Reply { status, content_type: content_type.unwrap_or_else(|| "application/json".into()), body })
    }
}

/// Writes a request's body and ends it.
fn send(outgoing: OutgoingBody, body: &[u8]) -> Result<(), String> {
    {
        let mut stream = outgoing.write().map_err(|()| "the request stream was taken")?;
        stream.write_all(body).map_err(|error| error.to_string())?;
        stream.flush().map_err(|error| error.to_string())?;
    }
    OutgoingBody::finish(outgoing, None).map_err(|error| format!("{error:?}"))
}

/// Reads a body whole: `None` when it is larger than `limit`; an error when it breaks
/// off or outlasts `deadline`.
fn read_all(body: IncomingBody, limit: usize, deadline: Option<Instant>) -> Result<Option<Vec<u8>>, String> {
    let mut bytes = Vec::new();
    {
        let stream = body.stream().map_err(|()| "the body stream was taken")?;
        loop {
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                return Err("the answer did not arrive in time".into());
            }
            let chunk = match stream.blocking_read(64 << 10) {
                Ok(chunk) => chunk,
                Err(StreamError::Closed) => break,
                Err(StreamError::LastOperationFailed(error)) => return Err(error.to_debug_string()),
            };
            if bytes.len() + chunk.len() > limit {
                return Ok(None);
            }
            bytes.extend_from_slice(&chunk);
        }
    }
    let _trailers = IncomingBody::finish(body);
    Ok(Some(bytes))
}

fn respond(out: ResponseOutparam, answer: &Answer, request_id: &str) {
    let mut headers = vec![
        ("content-type".to_owned(), answer.content_type.as_bytes().to_vec()),
        ("content-length".to_owned(), answer.body.len().to_string().into_bytes()),
        ("x-request-id".to_owned(), request_id.as_bytes().to_vec()),
    ];
    if let Some(allow) = answer.allow {
        headers.push(("allow".to_owned(), allow.as_bytes().to_vec()));
    }
    if answer.retry_later() {
        headers.push(("retry-after".to_owned(), b"1".to_vec()));
    }
    let headers = Fields::from_list(&headers).unwrap_or_else(|_| Fields::new());
    let response = OutgoingResponse::new(headers);
    let _ = response.set_status_code(answer.status);
    let Ok(body) = response.body() else {
        ResponseOutparam::set(out, Ok(response));
        return;
    };
    ResponseOutparam::set(out, Ok(response));
    if let Ok(mut stream) = body.write() {
        let _ = stream.write_all(&answer.body);
        let _ = stream.flush();
    }
    let _ = OutgoingBody::finish(body, None);
}
