//! Who may use the server: a file of `user:password` lines (memcached's ASCII authentication
//! file for `-Y`, and for `-S` the file memcached's sasl-pwdb build reads from
//! `MEMCACHED_SASL_PWDB`) and the check of one attempt against it, plain or SASL PLAIN. The check reads every entry over a fixed
//! number of bytes whatever the input, so its time says nothing about the passwords.
//!
//! It must not parse requests (`tierkv_protocol::auth` does) or hold connection state.

/// Longest user or password (memcached's 255-byte entries).
pub(crate) const MAX_CREDENTIAL_BYTES: usize = 255;
/// Most entries a file may hold.
pub(crate) const MAX_ENTRIES: usize = 10_000;

/// The users allowed in.
#[derive(Debug)]
pub(crate) struct AuthTable {
    /// Each user and password padded to `MAX_CREDENTIAL_BYTES`, with their lengths.
    entries: Vec<([u8; MAX_CREDENTIAL_BYTES], usize, [u8; MAX_CREDENTIAL_BYTES], usize)>,
}

/// What is wrong with a users file (`-Y`, `--sasl-pwdb`).
#[derive(Debug)]
pub(crate) enum AuthFileError {
    /// It cannot be read.
    Read { path: std::path::PathBuf, error: std::io::Error },
    /// A line is not `user:password` (or a part is too long).
    Malformed { path: std::path::PathBuf, line: usize },
    /// More entries than tierkv keeps.
    TooMany { path: std::path::PathBuf },
    /// No entry at all.
    Empty { path: std::path::PathBuf },
}

impl std::fmt::Display for AuthFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AuthFileError::Read { path, error } => write!(f, "cannot read {}: {error}", path.display()),
            AuthFileError::Malformed { path, line } => {
                write!(f, "{} has a malformed entry on line {line}. Should be 'user:password'", path.display())
            }
            AuthFileError::TooMany { path } => write!(f, "{} has more than {MAX_ENTRIES} entries", path.display()),
            AuthFileError::Empty { path } => write!(f, "{} has no 'user:password' entry", path.display()),
        }
    }
}

impl AuthTable {
    /// Reads a `user:password` file (one entry a line; the password may hold colons); the
    /// error says what is wrong, in memcached's words where it has them.
    pub(crate) fn load(path: &std::path::Path) -> Result<AuthTable, AuthFileError> {
        let path_buf = || path.to_path_buf();
        let text = std::fs::read_to_string(path).map_err(|error| AuthFileError::Read { path: path_buf(), error })?;
        let mut entries = Vec::new();
        for (number, line) in text.lines().enumerate().filter(|(_, line)| !line.is_empty()) {
            let malformed = || AuthFileError::Malformed { path: path_buf(), line: number + 1 };
            let (user, password) = line.split_once(':').ok_or_else(malformed)?;
            if user.is_empty() || user.len() > MAX_CREDENTIAL_BYTES || password.len() > MAX_CREDENTIAL_BYTES {
                return Err(malformed());
            }
            if entries.len() == MAX_ENTRIES {
                return Err(AuthFileError::TooMany { path: path_buf() });
            }
            entries.push((pad(user.as_bytes()), user.len(), pad(password.as_bytes()), password.len()));
        }
        if entries.is_empty() {
            return Err(AuthFileError::Empty { path: path_buf() });
        }
        Ok(AuthTable { entries })
    }

    /// Whether `user` and `password` match an entry. Every entry is compared over every byte,
    /// without an early exit.
    pub(crate) fn check(&self, user: &[u8], password: &[u8]) -> bool {
        if user.len() > MAX_CREDENTIAL_BYTES || password.len() > MAX_CREDENTIAL_BYTES {
            return false;
        }
        let (user_padded, password_padded) = (pad(user), pad(password));
        let mut found = 0u8;
        for (u, ulen, p, plen) in &self.entries {
            let mut diff = u8::from(*ulen != user.len()) | u8::from(*plen != password.len());
            for i in 0..MAX_CREDENTIAL_BYTES {
                diff |= (u[i] ^ user_padded[i]) | (p[i] ^ password_padded[i]);
            }
            found |= u8::from(std::hint::black_box(diff) == 0);
        }
        found == 1
    }
}

impl AuthTable {
    /// A SASL PLAIN message, `[authzid] NUL user NUL password` (RFC 4616), checked.
    pub(crate) fn check_plain(&self, message: &[u8]) -> bool {
        let mut parts = message.splitn(3, |&b| b == 0);
        match (parts.next(), parts.next(), parts.next()) {
            (Some(_authzid), Some(user), Some(password)) => self.check(user, password),
            _ => false,
        }
    }
}

/// SASL mechanisms `-S` offers.
const MECHANISMS: &[u8] = b"PLAIN";

/// What one SASL request did (for `auth_cmds` and `auth_errors`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SaslOutcome {
    /// LIST_MECHS: no attempt.
    Listed,
    Authenticated,
    Refused,
}

/// memcached's binary SASL (`-S`): answers a SASL opcode (LIST_MECHS, AUTH with PLAIN, STEP).
pub(crate) fn sasl(
    table: &AuthTable,
    opcode: u8,
    mechanism: &[u8],
    message: &[u8],
    info: &tierkv_protocol::BinaryRequestInfo,
    out: &mut Vec<u8>,
) -> SaslOutcome {
    use tierkv_protocol::binary::{self, opcode as op, status};
    match opcode {
        op::SASL_LIST_MECHS => {
            binary::write_response(out, info, status::SUCCESS, 0, &[], &[], MECHANISMS);
            SaslOutcome::Listed
        }
        op::SASL_AUTH if mechanism == MECHANISMS && table.check_plain(message) => {
            binary::write_response(out, info, status::SUCCESS, 0, &[], &[], b"Authenticated");
            SaslOutcome::Authenticated
        }
        // A wrong password, another mechanism, or a STEP (PLAIN has one step only).
        _ => {
            binary::write_error(out, info, status::AUTH_ERROR);
            SaslOutcome::Refused
        }
    }
}

fn pad(bytes: &[u8]) -> [u8; MAX_CREDENTIAL_BYTES] {
    let mut padded = [0u8; MAX_CREDENTIAL_BYTES];
    padded[..bytes.len()].copy_from_slice(bytes);
    padded
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> Result<AuthTable, String> {
        let path = std::env::temp_dir().join(format!("tierkv-auth-{}-{}", std::process::id(), text.len()));
        std::fs::write(&path, text).unwrap();
        let table = AuthTable::load(&path);
        std::fs::remove_file(&path).unwrap();
        table.map_err(|error| error.to_string())
    }

    #[test]
    fn entries_match_exactly() {
        let t = table("alice:secret\nbob:a:b\n\n").unwrap();
        assert!(t.check(b"alice", b"secret") && t.check(b"bob", b"a:b"));
        assert!(!t.check(b"alice", b"secre") && !t.check(b"alice", b"secret\0") && !t.check(b"alic", b"secret"));
        assert!(!t.check(b"bob", b"secret") && !t.check(b"", b"") && !t.check(&[b'a'; 300], b"x"));
        assert!(t.check_plain(b"\0alice\0secret") && t.check_plain(b"admin\0bob\0a:b"));
        assert!(!t.check_plain(b"alice\0secret") && !t.check_plain(b"\0alice\0nope") && !t.check_plain(b""));
    }

    #[test]
    fn bad_files_say_why() {
        assert!(table("nocolon\n").unwrap_err().contains("malformed entry on line 1"));
        assert!(table(":pw\n").unwrap_err().contains("malformed"));
        assert!(table("\n\n").unwrap_err().contains("no 'user:password' entry"));
        assert!(table(&format!("u:{}\n", "p".repeat(256))).unwrap_err().contains("malformed"));
    }
}
