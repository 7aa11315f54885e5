//! The client's one error type. It is `Clone`, so a failure of one server can be reported for
//! each request that was on its way there.

/// What went wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// A key memcached would refuse (empty, over 250 bytes, a space or control character);
    /// nothing was sent.
    BadKey(String),
    /// Every server is ejected (or the fleet is empty).
    NoServer,
    /// Connecting, reading or writing failed, or timed out.
    Io {
        /// The server (`host:port`, or the direct port used).
        server: String,
        /// What kind of failure.
        kind: std::io::ErrorKind,
        /// Its words.
        message: String,
    },
    /// The server sent something that is not a reply to what was asked; the connection was
    /// dropped.
    Protocol {
        /// The server.
        server: String,
        /// What was wrong.
        message: String,
    },
    /// The server refused the credentials, or authentication could not be done.
    Auth {
        /// The server.
        server: String,
        /// Its reply.
        message: String,
    },
    /// The server refused the request: its `ERROR`, `CLIENT_ERROR ...` or `SERVER_ERROR ...`
    /// line.
    Server(String),
    /// A reply that does not answer the request (say, `EXISTS` to a `get`).
    Unexpected(String),
    /// A configuration the client cannot use.
    Config(String),
}

impl Error {
    pub(crate) fn io(server: impl std::fmt::Display, error: &std::io::Error) -> Error {
        Error::Io { server: server.to_string(), kind: error.kind(), message: error.to_string() }
    }

    /// The failure is the server's or the network's (it counts toward ejection), not the
    /// request's.
    pub fn is_server_failure(&self) -> bool {
        matches!(self, Error::Io { .. } | Error::Protocol { .. })
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::BadKey(why) => write!(f, "bad key: {why}"),
            Error::NoServer => write!(f, "no live server"),
            Error::Io { server, message, .. } => write!(f, "{server}: {message}"),
            Error::Protocol { server, message } => write!(f, "{server}: {message}"),
            Error::Auth { server, message } => write!(f, "{server}: authentication failed: {message}"),
            Error::Server(line) => write!(f, "server refused: {line}"),
            Error::Unexpected(reply) => write!(f, "unexpected reply {reply}"),
            Error::Config(why) => write!(f, "configuration: {why}"),
        }
    }
}

impl std::error::Error for Error {}

/// Why a connection failed during a call, and whether anything had been sent on it.
pub(crate) struct Failure {
    pub(crate) error: Error,
    pub(crate) sent: bool,
}
