//! Who may use the server: memcached's ASCII authentication file (`-Y FILE`: `user:password`
//! lines) and the check of one attempt against it. The check reads every entry over a fixed
//! number of bytes whatever the input, so its time says nothing about the passwords.
//!
//! It must not parse requests (`tierkv_protocol::auth` does) or hold connection state.

/// Longest user or password (memcached's 255-byte entries).
pub const MAX_CREDENTIAL_BYTES: usize = 255;
/// Most entries a file may hold.
pub const MAX_ENTRIES: usize = 10_000;

/// The users allowed in.
#[derive(Debug)]
pub struct AuthTable {
    /// Each user and password padded to `MAX_CREDENTIAL_BYTES`, with their lengths.
    entries: Vec<([u8; MAX_CREDENTIAL_BYTES], usize, [u8; MAX_CREDENTIAL_BYTES], usize)>,
}

impl AuthTable {
    /// Reads a `user:password` file (one entry a line; the password may hold colons); the
    /// error says what is wrong, in memcached's words where it has them.
    pub fn load(path: &std::path::Path) -> Result<AuthTable, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let mut entries = Vec::new();
        for (number, line) in text.lines().enumerate().filter(|(_, line)| !line.is_empty()) {
            let malformed = || {
                format!("{} has a malformed entry on line {}. Should be 'user:password'", path.display(), number + 1)
            };
            let (user, password) = line.split_once(':').ok_or_else(malformed)?;
            if user.is_empty() || user.len() > MAX_CREDENTIAL_BYTES || password.len() > MAX_CREDENTIAL_BYTES {
                return Err(malformed());
            }
            if entries.len() == MAX_ENTRIES {
                return Err(format!("{} has more than {MAX_ENTRIES} entries", path.display()));
            }
            entries.push((pad(user.as_bytes()), user.len(), pad(password.as_bytes()), password.len()));
        }
        if entries.is_empty() {
            return Err(format!("{} has no 'user:password' entry", path.display()));
        }
        Ok(AuthTable { entries })
    }

    /// Whether `user` and `password` match an entry. Every entry is compared over every byte,
    /// without an early exit.
    pub fn check(&self, user: &[u8], password: &[u8]) -> bool {
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
        table
    }

    #[test]
    fn entries_match_exactly() {
        let t = table("alice:secret\nbob:a:b\n\n").unwrap();
        assert!(t.check(b"alice", b"secret") && t.check(b"bob", b"a:b"));
        assert!(!t.check(b"alice", b"secre") && !t.check(b"alice", b"secret\0") && !t.check(b"alic", b"secret"));
        assert!(!t.check(b"bob", b"secret") && !t.check(b"", b"") && !t.check(&[b'a'; 300], b"x"));
    }

    #[test]
    fn bad_files_say_why() {
        assert!(table("nocolon\n").unwrap_err().contains("malformed entry on line 1"));
        assert!(table(":pw\n").unwrap_err().contains("malformed"));
        assert!(table("\n\n").unwrap_err().contains("no 'user:password' entry"));
        assert!(table(&format!("u:{}\n", "p".repeat(256))).unwrap_err().contains("malformed"));
    }
}
