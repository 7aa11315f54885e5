//! Why the server could not start, or stopped: typed, each naming what the user can change
//! (the flag, the address, the limit). `main` prints it and exits 1.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use tierkv_engine::flash::OpenError;

#[derive(Debug)]
pub(crate) enum ServeError {
    /// A socket the settings ask for cannot be opened (`flag` asked for it).
    Socket { flag: &'static str, address: SocketAddr, error: io::Error },
    /// The TLS certificates (`-Z`) cannot be loaded.
    Tls(String),
    /// The authentication file (`-Y`) cannot be read.
    Auth(crate::auth::AuthFileError),
    /// The Unix socket (`-s`) cannot be made.
    Unix { path: std::path::PathBuf, error: io::Error },
    /// The open-files limit cannot be read.
    OpenFilesUnknown(io::Error),
    /// `-c` needs more descriptors than the hard limit (or the raise) allows.
    OpenFiles { conn_limit: usize, needed: u64, limit: u64 },
    /// A partition cannot be created with the memory asked for.
    Partition(tierkv_engine::ConfigError),
    /// The operating system refused something the server needs (`what`).
    System { what: &'static str, error: io::Error },
    /// A worker thread panicked (the others stopped).
    WorkerPanicked,
    /// The flash file (`--flash-path`) cannot be used.
    Flash { path: std::path::PathBuf, size: u64, error: FlashStartError },
}

impl ServeError {
    pub(crate) fn system(what: &'static str) -> impl Fn(io::Error) -> ServeError + Copy {
        move |error| ServeError::System { what, error }
    }

    pub(crate) fn socket(flag: &'static str, address: SocketAddr) -> impl Fn(io::Error) -> ServeError + Copy {
        move |error| ServeError::Socket { flag, address, error }
    }
}

impl fmt::Display for ServeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServeError::Socket { flag, address, error } => write!(f, "{flag}: cannot listen on {address}: {error}"),
            ServeError::Tls(message) => write!(f, "-Z/--enable-ssl: {message}"),
            ServeError::Auth(message) => write!(f, "-Y/--auth-file: {message}"),
            ServeError::Unix { path, error } => {
                write!(f, "-s/--unix-socket: cannot listen on {}: {error}", path.display())
            }
            ServeError::OpenFilesUnknown(error) => write!(f, "cannot read the open files limit: {error}"),
            ServeError::OpenFiles { conn_limit, needed, limit } => write!(
                f,
                "-c/--conn-limit {conn_limit}: needs {needed} open files but the limit is {limit} (ulimit -n); \
                 raise it or ask for fewer connections"
            ),
            ServeError::Partition(error) => write!(f, "-m/--memory-limit: {error}"),
            ServeError::System { what, error } => write!(f, "cannot {what}: {error}"),
            ServeError::WorkerPanicked => write!(f, "a worker thread panicked"),
            ServeError::Flash { path, size, error } => {
                write!(f, "--flash-path {}: ", path.display())?;
                match error {
                    FlashStartError::Open(OpenError::Layout(why)) => {
                        write!(f, "--flash-size {size} cannot be laid out: {}", why.0)
                    }
                    FlashStartError::Open(OpenError::File(why)) => {
                        write!(f, "cannot open or size it to {size} bytes: {why}")
                    }
                    FlashStartError::Open(other) => write!(f, "{other}"),
                    FlashStartError::Attach(why) => write!(f, "{why}"),
                }
            }
        }
    }
}

impl std::error::Error for ServeError {}

/// Why the flash tier of `--flash-path` could not start.
#[derive(Debug)]
pub(crate) enum FlashStartError {
    /// The file or a partition's region could not be opened.
    Open(OpenError),
    /// A region could not be put behind its partition.
    Attach(tierkv_engine::AttachError),
}
