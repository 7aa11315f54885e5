//! The `--config` TOML file, read through the command line's own definition: each key names a
//! flag (its long name at the top level, or in the section of the flag's help heading its name
//! without the section's prefix: `[udp] port` is `--udp-port`, `[memory] limit` is
//! `--memory-limit`), and its value becomes that flag's default before the command line is
//! parsed. So the file needs no second list of settings, its values go through the same
//! parsers, and the command line wins.

use super::{Config, ConfigError};
use clap::{Arg, CommandFactory, FromArgMatches};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The settings from `args` (the program name first) and the `--config` file they name.
pub(crate) fn load<I, T>(args: I) -> Result<Config, ConfigError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let mut command = Config::command();
    // A first look for --config only; errors are reported by the real parse below.
    let first = command.clone().ignore_errors(true).try_get_matches_from(&args).ok();
    if let Some(path) = first.and_then(|matches| matches.get_one::<PathBuf>("config").cloned()) {
        for (id, value) in file_defaults(&command, &path)? {
            command = command.mut_arg(id, |arg| arg.default_value(value));
        }
    }
    let matches = command.try_get_matches_from(&args).map_err(|error| super::memcached_only(error, &args))?;
    Config::from_arg_matches(&matches).map_err(ConfigError::Usage)
}

/// The section a flag's help heading stands for: its first word, in lower case (`Admin
/// commands` is `[admin]`).
fn section_of(arg: &Arg) -> Option<String> {
    let heading = arg.get_help_heading()?;
    heading.split_whitespace().next().map(str::to_ascii_lowercase)
}

/// Whether `name` in section `section` is the flag `long`: its whole name, or the name after
/// a prefix that begins the section's (`[udp] port` is `udp-port`, `[connections] limit` is
/// `conn-limit`).
fn names_flag(section: &str, name: &str, long: Option<&str>) -> bool {
    let Some(long) = long else { return false };
    long == name || long.split_once('-').is_some_and(|(prefix, rest)| rest == name && section.starts_with(prefix))
}

/// Each key of the file at `path` as (flag id, value as the command line would write it).
fn file_defaults(command: &clap::Command, path: &Path) -> Result<Vec<(String, String)>, ConfigError> {
    let refuse = |message: String| ConfigError::File { path: path.to_path_buf(), message };
    let text = std::fs::read_to_string(path).map_err(|e| refuse(e.to_string()))?;
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| refuse(e.to_string()))?;
    let mut defaults: Vec<(String, String)> = Vec::new();
    let mut add = |key: &str, arg: Option<&Arg>, value: &toml::Value| -> Result<(), ConfigError> {
        let arg = arg.ok_or_else(|| refuse(format!("unknown key {key:?} (keys are the long flag names)")))?;
        let id = arg.get_id().to_string();
        if id == "config" {
            return Err(refuse("a file cannot name another with \"config\"".to_string()));
        }
        if defaults.iter().any(|(seen, _)| *seen == id) {
            return Err(refuse(format!("{key:?} sets --{} a second time", arg.get_long().unwrap_or(&id))));
        }
        let text = match value {
            toml::Value::String(text) => text.clone(),
            toml::Value::Integer(number) => number.to_string(),
            toml::Value::Boolean(flag) => flag.to_string(),
            _ => return Err(refuse(format!("{key:?} must be a string, a number or true/false"))),
        };
        defaults.push((id, text));
        Ok(())
    };
    for (key, value) in &table {
        let top = command.get_arguments().find(|arg| arg.get_long() == Some(key));
        match value {
            toml::Value::Table(section) if top.is_none() => {
                for (name, value) in section {
                    let arg = command.get_arguments().find(|arg| {
                        section_of(arg).as_deref() == Some(key.as_str()) && names_flag(key, name, arg.get_long())
                    });
                    add(&format!("{key}.{name}"), arg, value)?;
                }
            }
            _ => add(key, top, value)?,
        }
    }
    Ok(defaults)
}

#[cfg(test)]
mod tests {
    use super::{file_defaults, names_flag, section_of, Config};
    use clap::CommandFactory;

    /// The packaged example, installed as /etc/tierkv/tierkv.toml.
    const PACKAGED: &str = include_str!("../../../../packaging/tierkv.toml");

    /// Every `key = value` line of the packaged file, commented out or not, as (section, key).
    fn packaged_keys() -> Vec<(String, String)> {
        let mut section = String::new();
        let mut keys = Vec::new();
        for line in PACKAGED.lines() {
            let line = line.trim_start_matches('#').trim();
            if let Some(name) = line.strip_prefix('[').and_then(|rest| rest.strip_suffix(']')) {
                section = name.to_string();
            } else if let Some((key, _)) = line.split_once('=') {
                let key = key.trim();
                if !key.is_empty() && key.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') {
                    keys.push((section.clone(), key.to_string()));
                }
            }
        }
        keys
    }

    #[test]
    fn the_packaged_file_lists_every_flag() {
        let keys = packaged_keys();
        let command = Config::command();
        let skipped = ["config", "help", "version"];
        let mut missing = Vec::new();
        for arg in command.get_arguments().filter(|arg| !arg.is_hide_set()) {
            let Some(long) = arg.get_long() else { continue };
            if skipped.contains(&long) {
                continue;
            }
            let section = section_of(arg).unwrap_or_default();
            let listed = keys.iter().any(|(in_section, key)| {
                (in_section.is_empty() && key == long)
                    || (*in_section == section && names_flag(&section, key, Some(long)))
            });
            if !listed {
                missing.push(format!("--{long} (section [{section}])"));
            }
        }
        assert!(missing.is_empty(), "packaging/tierkv.toml does not list {}", missing.join(", "));
    }

    #[test]
    fn every_key_of_the_packaged_file_names_a_flag() {
        // Every line uncommented: each key must name a flag, none twice, every value parse.
        let uncommented: String = PACKAGED
            .lines()
            .map(|line| {
                let bare = line.trim_start_matches('#').trim_start();
                if bare.starts_with('[') || bare.contains(" = ") {
                    bare
                } else {
                    ""
                }
            })
            .map(|line| format!("{line}\n"))
            .collect();
        let path = std::env::temp_dir().join(format!("tierkv-packaged-{}.toml", std::process::id()));
        std::fs::write(&path, uncommented).unwrap();
        let defaults = file_defaults(&Config::command(), &path);
        let _ = std::fs::remove_file(&path);
        let defaults = defaults.unwrap_or_else(|error| panic!("{error}"));
        assert!(defaults.len() >= packaged_keys().len(), "{defaults:?}");
    }
}
