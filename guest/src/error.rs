//! The planner's error: the SPEC §2 codes, one to one with the WIT `error-code`.

use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    InvalidArgument,
    Unauthenticated,
    PermissionDenied,
    NotFound,
    MethodNotAllowed,
    AlreadyExists,
    FailedPrecondition,
    InvalidState,
    ConfigDrift,
    PolicyDenied,
    ApprovalRequired,
    PayloadTooLarge,
    ResourceExhausted,
    Unsupported,
    Unavailable,
    Internal,
}

impl ErrorCode {
    /// Every code, in the order of SPEC §2's table.
    pub const ALL: [ErrorCode; 16] = [
        ErrorCode::InvalidArgument,
        ErrorCode::Unauthenticated,
        ErrorCode::PermissionDenied,
        ErrorCode::NotFound,
        ErrorCode::MethodNotAllowed,
        ErrorCode::AlreadyExists,
        ErrorCode::FailedPrecondition,
        ErrorCode::InvalidState,
        ErrorCode::ConfigDrift,
        ErrorCode::PolicyDenied,
        ErrorCode::ApprovalRequired,
        ErrorCode::PayloadTooLarge,
        ErrorCode::ResourceExhausted,
        ErrorCode::Unsupported,
        ErrorCode::Unavailable,
        ErrorCode::Internal,
    ];

    /// The wire name, e.g. `INVALID_ARGUMENT`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidArgument => "INVALID_ARGUMENT",
            ErrorCode::Unauthenticated => "UNAUTHENTICATED",
            ErrorCode::PermissionDenied => "PERMISSION_DENIED",
            ErrorCode::NotFound => "NOT_FOUND",
            ErrorCode::MethodNotAllowed => "METHOD_NOT_ALLOWED",
            ErrorCode::AlreadyExists => "ALREADY_EXISTS",
            ErrorCode::FailedPrecondition => "FAILED_PRECONDITION",
            ErrorCode::InvalidState => "INVALID_STATE",
            ErrorCode::ConfigDrift => "CONFIG_DRIFT",
            ErrorCode::PolicyDenied => "POLICY_DENIED",
            ErrorCode::ApprovalRequired => "APPROVAL_REQUIRED",
            ErrorCode::PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            ErrorCode::ResourceExhausted => "RESOURCE_EXHAUSTED",
            ErrorCode::Unsupported => "UNSUPPORTED",
            ErrorCode::Unavailable => "UNAVAILABLE",
            ErrorCode::Internal => "INTERNAL",
        }
    }

    /// The HTTP status of the code (SPEC §2).
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::InvalidArgument => 400,
            ErrorCode::Unauthenticated => 401,
            ErrorCode::PermissionDenied => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::MethodNotAllowed => 405,
            ErrorCode::AlreadyExists
            | ErrorCode::FailedPrecondition
            | ErrorCode::InvalidState
            | ErrorCode::ConfigDrift
            | ErrorCode::PolicyDenied
            | ErrorCode::ApprovalRequired => 409,
            ErrorCode::PayloadTooLarge => 413,
            ErrorCode::ResourceExhausted => 429,
            ErrorCode::Unsupported => 501,
            ErrorCode::Unavailable => 503,
            ErrorCode::Internal => 500,
        }
    }
}

/// One problem of an invalid request: the JSON pointer of the offending value and a
/// sentence about it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    pub path: String,
    pub message: String,
}

/// The most problems an error lists (SPEC §2); `details.more` counts the rest.
pub const MAX_PROBLEMS: usize = 100;

/// The problems of an invalid request as an error lists them: the first
/// [`MAX_PROBLEMS`] found, and how many more there were. Keeping no more than that, a
/// request with a million problems costs what one with a hundred does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problems {
    listed: Vec<Problem>,
    more: usize,
    /// How many are listed: [`MAX_PROBLEMS`], or all for a reader inside the planner's
    /// sandbox, whose list is cut when it is reported.
    most: usize,
}

impl Default for Problems {
    fn default() -> Problems {
        Problems { listed: Vec::new(), more: 0, most: MAX_PROBLEMS }
    }
}

impl Problems {
    /// A list that keeps every problem.
    pub fn all() -> Problems {
        Problems { most: usize::MAX, ..Problems::default() }
    }

    /// The listed problems (every one, for [`Problems::all`]).
    pub fn into_listed(self) -> Vec<Problem> {
        self.listed
    }

    pub fn push(&mut self, problem: Problem) {
        if self.listed.len() < self.most {
            self.listed.push(problem);
        } else {
            self.more += 1;
        }
    }

    /// One more problem, made only if it is listed.
    pub fn push_with(&mut self, problem: impl FnOnce() -> Problem) {
        if self.listed.len() < self.most {
            self.listed.push(problem());
        } else {
            self.more += 1;
        }
    }

    /// `count` more problems that are not listed (a caller that knows they would not be).
    pub fn count_more(&mut self, count: usize) {
        self.more += count;
    }

    pub fn is_empty(&self) -> bool {
        self.listed.is_empty()
    }

    /// Every problem found, listed or not.
    pub fn total(&self) -> usize {
        self.listed.len() + self.more
    }

    pub fn listed(&self) -> &[Problem] {
        &self.listed
    }

    /// The error's one-line message: the problem itself when there is one.
    pub fn message(&self) -> String {
        match self.listed.as_slice() {
            [only] if self.more == 0 && only.path.is_empty() => only.message.clone(),
            [only] if self.more == 0 => format!("{}: {}", only.path, only.message),
            _ => format!("the request has {} problems", self.total()),
        }
    }

    /// `{"problems": [...], "more"?: N}`.
    pub fn details(&self) -> Value {
        let mut details = serde_json::json!({ "problems": self.listed });
        if self.more > 0 {
            details["more"] = self.more.into();
        }
        details
    }
}

impl From<Vec<Problem>> for Problems {
    fn from(mut listed: Vec<Problem>) -> Problems {
        let more = listed.len().saturating_sub(MAX_PROBLEMS);
        listed.truncate(MAX_PROBLEMS);
        Problems { listed, more, most: MAX_PROBLEMS }
    }
}

/// An API error as the planner reports it. `details` is a JSON object or absent.
#[derive(Debug, Clone, PartialEq)]
pub struct Error {
    pub code: ErrorCode,
    pub message: String,
    pub details: Option<Value>,
}

impl Error {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Error {
        Error { code, message: message.into(), details: None }
    }

    pub fn with_details(mut self, details: Value) -> Error {
        self.details = Some(details);
        self
    }
}

/// The error body of SPEC §2, `{"error": {"code", "message", "details"?}}`: what every
/// host of the API answers, byte for byte.
pub fn envelope(code: ErrorCode, message: &str, details: Option<&Value>) -> Value {
    let mut error = serde_json::json!({ "code": code.as_str(), "message": message });
    if let Some(details) = details {
        error["details"] = details.clone();
    }
    serde_json::json!({ "error": error })
}

impl Error {
    /// The error body of SPEC §2.
    pub fn envelope(&self) -> Value {
        envelope(self.code, &self.message, self.details.as_ref())
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl std::error::Error for Error {}
