//! The command line, the TOML file (flat and in sections) and the checks, as a user meets
//! them.

use super::*;
fn parse(args: &[&str]) -> Result<Config, ConfigError> {
    load(std::iter::once("tierkv").chain(args.iter().copied()))
}

/// The settings, or the error as the user sees it.
fn settings_of(args: &[&str]) -> Result<Settings, String> {
    parse(args).and_then(Config::settings).map_err(|error| error.to_string())
}

#[test]
fn sizes_in_memcached_forms() {
    assert_eq!(parse_size("1m"), Some(1 << 20));
    assert_eq!(parse_size("512k"), Some(512 << 10));
    assert_eq!(parse_size("2048"), Some(2048));
    assert_eq!(parse_size("1M"), Some(1 << 20));
    assert_eq!(parse_size("x"), None);
}

#[test]
fn defaults_are_embedded() {
    let settings = parse(&[]).unwrap().settings().unwrap();
    assert_eq!(settings.addresses[0], "127.0.0.1:11211".parse().unwrap());
    assert_eq!((settings.memory_bytes, settings.conn_limit, settings.max_item_bytes), (1 << 30, 1024, 1 << 20));
}

#[test]
fn long_names_work_like_short_ones() {
    let settings = parse(&["--port", "1234", "--memory-limit", "64", "--conn-limit", "10", "--max-item-size", "512k"])
        .unwrap()
        .settings()
        .unwrap();
    assert_eq!(settings.addresses[0].port(), 1234);
    assert_eq!((settings.memory_bytes, settings.conn_limit, settings.max_item_bytes), (64 << 20, 10, 512 << 10));
}

#[test]
fn bad_flags_are_named() {
    assert!(parse(&["-p", "x"]).is_err());
    assert!(parse(&["--bogus"]).is_err());
    let named = |args: &[&str], flag: &str| {
        let error = settings_of(args).unwrap_err();
        assert!(error.contains(flag), "{error}");
    };
    named(&["-I", "5g"], "-I/--max-item-size");
    named(&["-l", "nowhere"], "-l/--listen");
    named(&["-m", "0"], "-m/--memory-limit");
    named(&["-m", "64", "--memory-max", "32"], "--memory-max");
    named(&["--conn-memory", "0"], "--conn-memory");
    named(&["-o", "idle_timeout=x"], "-o idle_timeout");
    named(&["-o", "proxy_config=x.lua"], "-o \"proxy_config=x.lua\"");
    named(&["-o", "bogus"], "-o \"bogus\"");
    named(&["-c", "0"], "-c/--conn-limit");
    named(&["-t", "0"], "-t/--threads");
    named(&["-t", "100000"], "-t/--threads");
    named(&["-t", "2", "--direct-ports", "65535"], "--direct-ports");
    named(&["-t", "2", "-p", "7001", "--direct-ports", "7000"], "--direct-ports");
    named(&["-t", "4", "-m", "2", "-I", "1m"], "-I/--max-item-size");
    named(&["--config", "/nonexistent/tierkv.toml"], "--config");
    named(&["--mode", "lru"], "--mode");
    named(&["--mode", "cache", "-M"], "-M/--disable-evictions");
    named(&["-D", "ab"], "-D/--prefix-delimiter");
    named(&["--concurrency", "lock"], "--concurrency");
    named(&["--idle-yields", "65"], "--idle-yields");
    named(&["--test-guest-lock", "always"], "--test-guest-lock");
    let settings = parse(&["-t", "2"]).unwrap().settings().unwrap();
    assert_eq!((settings.concurrency, settings.idle_yields), (super::Concurrency::Crcw, DEFAULT_IDLE_YIELDS));
    assert_eq!(parse(&["-t", "1"]).unwrap().settings().unwrap().idle_yields, 0, "one worker does not yield");
    let settings = parse(&["--concurrency", "erew", "--idle-yields", "0"]).unwrap().settings().unwrap();
    assert_eq!((settings.concurrency, settings.idle_yields), (super::Concurrency::Erew, 0));
    assert!(!settings.pin_workers, "workers are not pinned unless asked");
    assert!(parse(&["--pin-workers"]).unwrap().settings().unwrap().pin_workers);
    assert_eq!(settings.spread, super::Spread::Cpu, "connections follow their packets' CPU by default");
    assert_eq!(parse(&["--spread", "round-robin"]).unwrap().settings().unwrap().spread, super::Spread::RoundRobin);
    let refused = parse(&["--spread", "random"]).unwrap().settings().map(|_| ()).unwrap_err().to_string();
    assert!(refused.contains("--spread"), "{refused}");
    assert_eq!(settings.guest_lock, crate::sys::partition_lock::GuestLock::Try, "guests try the lock by default");
    let wait = parse(&["--test-guest-lock", "wait"]).unwrap().settings().unwrap().guest_lock;
    assert_eq!(wait, crate::sys::partition_lock::GuestLock::Wait);
    let admin = parse(&["-A", "-X", "-W", "-F", "-D", "/"]).unwrap().settings().unwrap().admin;
    assert_eq!(
        admin,
        AdminSettings { shutdown: true, dump: false, watch: false, flush: false, prefix_delimiter: b'/' }
    );
    assert_eq!(parse(&[]).unwrap().settings().unwrap().admin, AdminSettings::default());
    assert!(parse(&["-m", "64", "-I", "2m", "-U", "0"]).unwrap().settings().unwrap().udp_port.is_none());
    assert_eq!(parse(&["-U", "11311"]).unwrap().settings().unwrap().udp_port, Some(11311));
    let mode = |args: &[&str]| parse(args).unwrap().settings().unwrap().mode;
    assert_eq!(mode(&[]), tierkv_engine::Mode::Cache);
    assert_eq!(mode(&["--mode", "store"]), tierkv_engine::Mode::Store);
    assert_eq!(mode(&["-M"]), tierkv_engine::Mode::Store);
}

#[test]
fn memcached_tuning_options_are_accepted_and_explained() {
    let settings = settings_of(&["-o", "modern", "-o", "slab_reassign,slab_automove=1,hashpower=20,idle_timeout=5"]);
    let settings = settings.unwrap();
    assert_eq!(settings.idle_timeout, 5);
    assert_eq!(settings.notes.len(), 4, "{:?}", settings.notes);
    assert!(settings.notes.iter().all(|note| note.contains("ignored")), "{:?}", settings.notes);
    assert!(settings.notes[2].starts_with("-o slab_automove=1"), "{:?}", settings.notes);
}

#[test]
fn memcached_conf_flags_are_accepted_and_explained() {
    let settings = parse(&["-d", "-u", "memcache", "-P", "/tmp/x.pid", "-m", "64"]).unwrap().settings().unwrap();
    assert_eq!(settings.notes.len(), 2);
    assert!(settings.notes[0].contains("-u/--user") && settings.notes[1].contains("-d/--daemon"));
    assert_eq!(settings.pidfile.as_deref(), Some(std::path::Path::new("/tmp/x.pid")));
}

#[test]
fn the_file_fills_what_the_command_line_leaves_out() {
    let dir = std::env::temp_dir().join(format!("tierkv-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("tierkv.toml");
    std::fs::write(&file, "port = 2000\nmemory-limit = 64\nmax-item-size = \"512k\"\nconn-limit = 7\n").unwrap();
    let path = file.to_str().unwrap();
    let settings = parse(&["--config", path, "-p", "3000"]).unwrap().settings().unwrap();
    assert_eq!(settings.addresses[0].port(), 3000, "the command line wins");
    assert_eq!((settings.memory_bytes, settings.conn_limit, settings.max_item_bytes), (64 << 20, 7, 512 << 10));
    std::fs::write(&file, "max-item-size = 2048\n").unwrap();
    assert_eq!(parse(&["--config", path]).unwrap().settings().unwrap().max_item_bytes, 2048);
    std::fs::write(&file, "prot = 1\n").unwrap();
    let error = settings_of(&["--config", path]).unwrap_err();
    assert!(error.contains("--config") && error.contains("prot"), "{error}");
    std::fs::write(&file, "memory-limit = 0\n").unwrap();
    assert!(settings_of(&["--config", path]).unwrap_err().contains("-m/--memory-limit"));
    std::fs::write(&file, "idle-timeout = 30\nconn-memory = 9\nmemory-max = 2048\n").unwrap();
    let settings = parse(&["--config", path]).unwrap().settings().unwrap();
    assert_eq!((settings.idle_timeout, settings.conn_memory_bytes, settings.memory_max_bytes), (30, 9 << 20, 2 << 30));
    let settings = parse(&["--config", path, "-o", "idle_timeout=5"]).unwrap().settings().unwrap();
    assert_eq!(settings.idle_timeout, 5, "the command line wins");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn budgets_and_extended_options_have_defaults() {
    let settings = parse(&["-m", "640"]).unwrap().settings().unwrap();
    assert_eq!((settings.conn_memory_bytes, settings.idle_timeout), (14 << 20, 0));
    // cache_memlimit may grow the cache to the machine's memory (or -m, if more).
    let machine = crate::sys::physical_memory_bytes() >> 20 << 20;
    assert_eq!(settings.memory_max_bytes, machine.max(640 << 20));
    let settings = parse(&["-m", "1048576"]).unwrap().settings().unwrap();
    assert_eq!(settings.memory_max_bytes, 1 << 40);
    let settings = parse(&["-o", "idle_timeout=7,", "--conn-memory", "3"]).unwrap().settings().unwrap();
    assert_eq!((settings.idle_timeout, settings.conn_memory_bytes), (7, 3 << 20));
}

#[test]
fn the_file_may_group_flags_in_the_sections_of_their_headings() {
    let dir = std::env::temp_dir().join(format!("tierkv-sections-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("tierkv.toml");
    let path = file.to_str().unwrap();
    let sections = "port = 2000\n[udp]\nport = 11311\n[memory]\nlimit = 64\nmax-item-size = \"512k\"\nmode = \"store\"\n\
                    [connections]\nlimit = 7\nidle-timeout = 9\nmemory-share = 25\nrequest-min-rate = 0\n[admin]\nenable-shutdown = true\nprefix-delimiter = \"/\"\n";
    std::fs::write(&file, sections).unwrap();
    let settings = settings_of(&["--config", path]).unwrap();
    assert_eq!((settings.addresses[0].port(), settings.udp_port), (2000, Some(11311)));
    assert_eq!((settings.memory_bytes, settings.max_item_bytes), (64 << 20, 512 << 10));
    assert_eq!((settings.conn_limit, settings.idle_timeout, settings.mode), (7, 9, tierkv_engine::Mode::Store));
    assert!(settings.admin.shutdown && settings.admin.prefix_delimiter == b'/');
    let requests = crate::config::RequestSettings { min_rate_bytes: 0, share_percent: 25, ..Default::default() };
    assert_eq!(settings.requests, requests);
    // The command line still wins over a section, flags still reject bad values, and a key
    // names one flag once.
    assert_eq!(
        settings_of(&["--config", path, "-U", "0", "-c", "9"]).map(|s| (s.udp_port, s.conn_limit)),
        Ok((None, 9))
    );
    for (text, complaint) in [
        ("[udp]\nport = \"x\"\n", "--udp-port"),
        ("[udp]\nprot = 1\n", "udp.prot"),
        ("[memory]\nport = 1\n", "memory.port"),
        ("udp-port = 1\n[udp]\nport = 2\n", "a second time"),
        ("[admin]\nenable-shutdown = [1]\n", "admin.enable-shutdown"),
        ("config = \"other.toml\"\n", "another"),
    ] {
        std::fs::write(&file, text).unwrap();
        let error = settings_of(&["--config", path]).unwrap_err();
        assert!(error.contains(complaint), "{text:?}: {error}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn memcached_flags_tierkv_does_not_take_say_why() {
    for (args, flag) in [
        (&["-f", "1.25"][..], "-f/--slab-growth-factor is memcached's, not tierkv's: "),
        (&["--slab-min-size=48"], "-n/--slab-min-size is memcached's"),
        (&["-C"], "-C/--disable-cas is memcached's"),
        (&["-vv", "-L"], "-L/--enable-largepages is memcached's"),
        (&["-B", "binary"], "-B/--protocol is memcached's"),
        (&["-e", "/tmp/m"], "-e/--memory-file is memcached's"),
        (&["-k"], "-k/--lock-memory is memcached's"),
    ] {
        let error = settings_of(args).unwrap_err();
        assert!(error.starts_with(flag), "{args:?}: {error}");
    }
    // A flag nobody knows keeps clap's own message.
    assert!(settings_of(&["-z"]).unwrap_err().contains("unexpected argument '-z'"));
}

#[test]
fn backlog_and_requests_per_event() {
    assert_eq!(settings_of(&[]).unwrap().backlog, 1024);
    assert_eq!(settings_of(&["-b", "64"]).unwrap().backlog, 64);
    assert!(settings_of(&["-b", "0"]).unwrap_err().starts_with("-b/--listen-backlog 0 must be"));
    let noted = settings_of(&["-R", "20"]).unwrap();
    assert!(noted.notes.iter().any(|note| note.starts_with("-R/--max-reqs-per-event 20: ignored")));
    assert!(settings_of(&["-R", "0"]).unwrap_err().starts_with("-R/--max-reqs-per-event"));
}

#[test]
fn the_flash_tier_from_flags_from_ext_path_and_from_its_section() {
    use tierkv_engine::flash::{AdmissionPolicy, FlashIo};
    let flash = |args: &[&str]| settings_of(args).map(|s| s.flash);
    let from_flags = flash(&["--flash-path", "/f", "--flash-size", "2g", "--flash-io", "threads"]).unwrap().unwrap();
    assert_eq!((from_flags.size, from_flags.io, from_flags.segment_bytes), (2 << 30, FlashIo::Threads, 1 << 20));
    assert_eq!(from_flags.admission, AdmissionPolicy::All);
    assert_eq!(from_flags.poll, std::time::Duration::from_micros(100), "--flash-poll-us's default");
    let polled = flash(&["--flash-path", "/f", "--flash-size", "1g", "--flash-poll-us", "0"]).unwrap().unwrap();
    assert!(polled.poll.is_zero());
    let from_o = flash(&["-o", "ext_item_size=64,ext_path=/x/y:512m", "--flash-write-mbps", "40"]).unwrap().unwrap();
    assert_eq!((from_o.path.to_str(), from_o.size), (Some("/x/y"), 512 << 20));
    assert_eq!(from_o.admission, AdmissionPolicy::RateMbps(40.0));
    let notes = settings_of(&["-o", "ext_path=/x/y:1g,ext_threads=8"]).unwrap().notes;
    assert!(notes.iter().any(|note| note.contains("-o ext_threads=8: ignored")), "{notes:?}");
    assert_eq!(flash(&[]).unwrap(), None);
    let dir = std::env::temp_dir().join(format!("tierkv-flash-toml-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("tierkv.toml");
    let text = "[flash]\npath = \"/data/tierkv.flash\"\nsize = \"8g\"\nadmission = \"p:0.5\"\nsegment-size = \"4m\"\n\
                force = true\nsync = true\nmemory-mib = 600\npoll-us = 250\n";
    std::fs::write(&file, text).unwrap();
    let from_file = flash(&["--config", file.to_str().unwrap()]).unwrap().unwrap();
    assert_eq!((from_file.size, from_file.segment_bytes), (8 << 30, 4 << 20));
    assert!(from_file.force && from_file.sync && from_file.memory_bytes == 600 << 20);
    assert_eq!(from_file.admission, AdmissionPolicy::Probability(0.5));
    assert_eq!(from_file.poll, std::time::Duration::from_micros(250));
    std::fs::remove_dir_all(&dir).unwrap();
    for (args, complaint) in [
        (&["--flash-path", "/f", "--flash-size", "1g", "--flash-segment-size", "3m"][..], "--flash-segment-size"),
        (&["--flash-path", "/f", "--flash-size", "1g", "--flash-io", "aio"][..], "--flash-io"),
        (&["--flash-path", "/f", "--flash-size", "1g", "--flash-poll-us", "1001"][..], "--flash-poll-us"),
        (&["--flash-poll-us", "50"][..], "--flash-poll-us needs --flash-path"),
        (&["--flash-path", "/f", "--flash-size", "1g", "--flash-admission", "some"][..], "--flash-admission"),
        (
            &["--flash-path", "/f", "--flash-size", "1g", "--flash-admission", "all", "--flash-write-mbps", "5"][..],
            "contradicts",
        ),
    ] {
        let error = settings_of(args).unwrap_err();
        assert!(error.contains(complaint), "{args:?}: {error}");
    }
}

#[test]
fn the_flash_index_is_full_while_it_fits_in_memory_and_cascade_beyond() {
    let index = |args: &[&str]| settings_of(args).map(|s| s.flash.expect("a flash tier").cascade_t1_bytes);
    let with = |size: &str, more: &[&str]| {
        let mut args = vec!["--flash-path", "/f", "--flash-size", size, "-m", "64"];
        args.extend_from_slice(more);
        index(&args)
    };
    // 1 GiB at 128 bytes per item needs 64 MiB of full index: it fits -m 64.
    assert_eq!(with("1g", &[]).unwrap(), None);
    assert_eq!(with("8g", &[]).unwrap(), Some(16 << 20), "8 GiB would need 512 MiB: cascade, size / 512");
    assert_eq!(with("8g", &["--flash-index", "full"]).unwrap(), None);
    // Items of 1,000 bytes: 8 GiB needs 63 MiB of full index, which fits -m 64.
    assert_eq!(with("8g", &["--flash-item-bytes", "1000"]).unwrap(), None);
    assert_eq!(with("1g", &["--flash-index", "cascade"]).unwrap(), Some(2 << 20));
    assert_eq!(with("1g", &["--flash-index-mib", "32"]).unwrap(), Some(32 << 20));
    let sets = |more: &[&str]| {
        let mut args = vec!["--flash-path", "/f", "--flash-size", "1g", "--flash-index", "sets"];
        args.extend_from_slice(more);
        settings_of(&args)
            .map(|s| s.flash.expect("a flash tier"))
            .map(|f| (f.sets, f.sets_log_percent, f.cascade_t1_bytes))
    };
    assert_eq!(sets(&[]).unwrap(), (true, 5, None));
    assert_eq!(sets(&["--flash-sets-log-percent", "20"]).unwrap(), (true, 20, None));
    // The item size the DRAM is sized for: larger items, fewer index entries and filter bits.
    let dram = |more: &[&str]| {
        let mut args = vec!["--flash-path", "/f", "--flash-size", "1g", "--flash-index", "sets"];
        args.extend_from_slice(more);
        settings_of(&args).map(|s| s.flash.expect("a flash tier")).map(|f| (f.item_bytes, f.dram_bytes(1).unwrap()))
    };
    let (default, small) = dram(&[]).unwrap();
    let (given, large) = dram(&["--flash-item-bytes", "116"]).unwrap();
    assert_eq!((default, given), (88, 116));
    assert!(large < small * 9 / 10, "items of 116 bytes need less DRAM than of 88: {large} vs {small}");
    assert!(dram(&["--flash-item-bytes", "0"]).unwrap_err().starts_with("--flash-item-bytes"));
    assert!(dram(&["--flash-item-bytes", "2000000"]).unwrap_err().starts_with("--flash-item-bytes"));
    assert!(settings_of(&["--flash-item-bytes", "100"]).unwrap_err().starts_with("--flash-item-bytes"));
    for (more, complaint) in [
        (&["--flash-index", "full", "--flash-index-mib", "4"][..], "--flash-index-mib"),
        (&["--flash-index", "slick"][..], "--flash-index"),
        (&["--flash-index-mib", "0"][..], "--flash-index-mib"),
        (&["--flash-index", "sets", "--flash-index-mib", "4"][..], "--flash-index-mib"),
        (&["--flash-sets-log-percent", "10"][..], "--flash-sets-log-percent"),
        (&["--flash-index", "sets", "--flash-sets-log-percent", "0"][..], "--flash-sets-log-percent"),
        (&["--flash-index", "sets", "--flash-sets-log-percent", "51"][..], "--flash-sets-log-percent"),
    ] {
        let error = with("1g", more).unwrap_err();
        assert!(error.starts_with(complaint), "{more:?}: {error}");
    }
    let dir = std::env::temp_dir().join(format!("tierkv-flash-index-toml-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("tierkv.toml");
    std::fs::write(&file, "[flash]\npath = \"/f\"\nsize = \"1g\"\nindex = \"cascade\"\nindex-mib = 8\n").unwrap();
    assert_eq!(index(&["--config", file.to_str().unwrap()]).unwrap(), Some(8 << 20));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_flag_given_twice_takes_its_last_value_as_memcached_does() {
    let settings = settings_of(&["-m", "64", "-m", "256", "-p", "1", "-p", "2", "-t", "1", "-t", "2"]).unwrap();
    assert_eq!((settings.memory_bytes, settings.addresses[0].port(), settings.threads), (256 << 20, 2, 2));
    let settings = settings_of(&["-c", "10", "--conn-limit", "20", "-I", "2m", "-I", "512k"]).unwrap();
    assert_eq!((settings.conn_limit, settings.max_item_bytes), (20, 512 << 10));
    // -v counts, -o accumulates, -l accumulates (an address named twice is one).
    assert_eq!(settings_of(&["-v", "-vv"]).unwrap().verbose, 3);
    let settings = settings_of(&["-o", "idle_timeout=5,idle_timeout=7", "-o", "idle_timeout=9"]).unwrap();
    assert_eq!(settings.idle_timeout, 9);
    let settings = settings_of(&["-l", "127.0.0.1", "-l", "127.0.0.1,127.0.0.1"]).unwrap();
    assert_eq!(settings.addresses, ["127.0.0.1:11211".parse().unwrap()]);
    let two = settings_of(&["-p", "2000", "-l", "127.0.0.1", "-l", "::1"]).unwrap().addresses;
    assert_eq!(two, ["127.0.0.1:2000".parse().unwrap(), "[::1]:2000".parse().unwrap()]);
    // A direct port may not be any address's port.
    let clash = settings_of(&["-l", "127.0.0.1,127.0.0.2:4001", "--direct-ports", "4000", "-t", "2"]).unwrap_err();
    assert!(clash.starts_with("--direct-ports") && clash.contains("4001"), "{clash}");
}
