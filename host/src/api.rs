//! The one API error type and the wire error envelope of SPEC §2.

use hyper::StatusCode;
use serde_json::Value;

/// The SPEC §2 error codes: the planner's own type, so that guest, WIT and host share
/// one list.
pub use fleet_guest::ErrorCode as Code;

/// The HTTP status of an error code (SPEC §2).
pub fn status(code: Code) -> StatusCode {
    StatusCode::from_u16(code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// An error as the client sees it, and for an internal error its cause, which is
/// logged once with the request (never put into `message` or the response).
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: Code,
    pub message: String,
    pub details: Option<Value>,
    pub cause: Option<String>,
    /// When the client may try again, in seconds (`Retry-After`): for a refusal that
    /// passes, such as a server too busy to admit the call now.
    pub retry_after: Option<u32>,
}

/// One problem of an invalid request, with the JSON pointer of the offending value.
pub use fleet_guest::Problem;
pub use fleet_guest::error::Problems;

impl ApiError {
    pub fn new(code: Code, message: impl Into<String>) -> ApiError {
        ApiError { code, message: message.into(), details: None, cause: None, retry_after: None }
    }

    /// The error, saying the client may try again in `seconds`.
    pub fn retry_after(self, seconds: u32) -> ApiError {
        ApiError { retry_after: Some(seconds), ..self }
    }

    pub fn with_details(mut self, details: Value) -> ApiError {
        self.details = Some(details);
        self
    }

    /// `INVALID_ARGUMENT` listing the first of `problems` and counting the rest (SPEC §2).
    pub fn invalid(problems: impl Into<Problems>) -> ApiError {
        let problems: Problems = problems.into();
        ApiError::new(Code::InvalidArgument, problems.message()).with_details(problems.details())
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(Code::NotFound, message)
    }

    pub fn failed_precondition(message: impl Into<String>) -> ApiError {
        ApiError::new(Code::FailedPrecondition, message)
    }

    /// A bug or an unexpected fault. The client sees a generic sentence; the cause goes
    /// to the log with the request that met it (or with the background task's report).
    pub fn internal(cause: impl std::fmt::Display) -> ApiError {
        ApiError {
            cause: Some(cause.to_string()),
            ..ApiError::new(Code::Internal, "internal error; the server log has the cause")
        }
    }

    /// The response body `{"error": {...}}`.
    pub fn body(&self) -> Value {
        fleet_guest::error::envelope(self.code, &self.message, self.details.as_ref())
    }
}

/// A planner error as the API answers it: the same code, message and details.
impl From<fleet_guest::Error> for ApiError {
    fn from(error: fleet_guest::Error) -> ApiError {
        let api = ApiError::new(error.code, error.message);
        match error.details {
            Some(details) => api.with_details(details),
            None => api,
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)?;
        match &self.cause {
            Some(cause) => write!(f, " ({cause})"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for ApiError {}

impl From<r2d2::Error> for ApiError {
    /// No pooled connection could be had in time (all in use, or the database cannot be
    /// opened): the database is unavailable for now.
    fn from(error: r2d2::Error) -> ApiError {
        tracing::warn!(%error, "no database connection");
        ApiError::new(Code::Unavailable, "the database is unavailable; try again shortly")
    }
}
