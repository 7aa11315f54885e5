//! The flags that keep slow senders from holding connection memory (issue "Hostile clients
//! 2"): how fast a large request must arrive, after how long a grace, and what part of the
//! connection memory incomplete requests may take while memory is short. memcached has no such
//! rule (it never closes a connection waiting for a value's data); the README lists this as a
//! deliberate difference.
//!
//! It must not know how connections are served: `worker/budget.rs` applies these.

use super::ConfigError;

/// `--request-min-rate` unless set: KiB per second.
pub(super) const DEFAULT_REQUEST_MIN_RATE_KIB: u64 = 16;
/// `--request-grace` unless set: seconds.
pub(super) const DEFAULT_REQUEST_GRACE_SECONDS: u32 = 10;
/// `--conn-memory-share` unless set: percent.
pub(super) const DEFAULT_CONN_MEMORY_SHARE: u32 = 50;

/// The flags, flattened into the command line (`Config`), in its Connections heading.
#[derive(clap::Args, Debug, Default)]
pub(crate) struct RequestFlags {
    /// A connection sending a request larger than 4 KiB (a value) must deliver it at this many
    /// KiB per second at least, counted after --request-grace; one that is slower, or stops
    /// midway, is closed and its memory freed (memcached waits forever); 0 = never
    /// [default: 16].
    #[arg(long = "request-min-rate", value_name = "KIB/S", help_heading = "Connections")]
    pub request_min_rate: Option<u64>,
    /// Seconds a large request may take before --request-min-rate applies [default: 10].
    #[arg(long = "request-grace", value_name = "SECONDS", help_heading = "Connections")]
    pub request_grace: Option<u32>,
    /// While connection memory is short (--conn-memory), incomplete requests may hold at most
    /// this percent of it, in equal parts per connection; a request larger than its part waits
    /// (one at a time per worker is let through to completion) [default: 50].
    #[arg(long = "conn-memory-share", value_name = "PERCENT", help_heading = "Connections")]
    pub conn_memory_share: Option<u32>,
}

/// The checked values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RequestSettings {
    /// Bytes per second a large request must arrive at (0: no minimum).
    pub min_rate_bytes: u64,
    /// Seconds before the minimum rate applies.
    pub grace_seconds: u32,
    /// Percent of the connection memory incomplete requests may hold under pressure.
    pub share_percent: u32,
}

impl Default for RequestSettings {
    fn default() -> RequestSettings {
        RequestSettings {
            min_rate_bytes: DEFAULT_REQUEST_MIN_RATE_KIB << 10,
            grace_seconds: DEFAULT_REQUEST_GRACE_SECONDS,
            share_percent: DEFAULT_CONN_MEMORY_SHARE,
        }
    }
}

impl RequestFlags {
    /// Checks the flags; the error names the bad one.
    pub(crate) fn settings(&self) -> Result<RequestSettings, ConfigError> {
        let rate = self.request_min_rate.unwrap_or(DEFAULT_REQUEST_MIN_RATE_KIB);
        if rate > 1 << 30 {
            return Err(ConfigError::flag("--request-min-rate", format!("{rate} must be 0 to 1073741824 KiB/s")));
        }
        let grace = self.request_grace.unwrap_or(DEFAULT_REQUEST_GRACE_SECONDS);
        if grace == 0 || grace > 86_400 {
            return Err(ConfigError::flag("--request-grace", format!("{grace} must be 1 to 86400 seconds")));
        }
        let share = self.conn_memory_share.unwrap_or(DEFAULT_CONN_MEMORY_SHARE);
        if !(1..=100).contains(&share) {
            return Err(ConfigError::flag("--conn-memory-share", format!("{share} must be 1 to 100 percent")));
        }
        Ok(RequestSettings { min_rate_bytes: rate << 10, grace_seconds: grace, share_percent: share })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_bounds() {
        let flags = RequestFlags::default();
        assert_eq!(flags.settings().unwrap(), RequestSettings::default());
        let zero_rate = RequestFlags { request_min_rate: Some(0), ..RequestFlags::default() };
        assert_eq!(zero_rate.settings().unwrap().min_rate_bytes, 0);
        for (flags, named) in [
            (RequestFlags { request_grace: Some(0), ..RequestFlags::default() }, "--request-grace"),
            (RequestFlags { conn_memory_share: Some(0), ..RequestFlags::default() }, "--conn-memory-share"),
            (RequestFlags { conn_memory_share: Some(101), ..RequestFlags::default() }, "--conn-memory-share"),
            (RequestFlags { request_min_rate: Some(u64::MAX), ..RequestFlags::default() }, "--request-min-rate"),
        ] {
            let error = flags.settings().unwrap_err().to_string();
            assert!(error.contains(named), "{error}");
        }
    }
}
