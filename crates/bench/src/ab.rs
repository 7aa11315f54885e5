//! `compare`'s A/B table (ab.md): tierkv builds run interleaved, each against the first, by
//! medians over the rounds and round by round (a build's figure over the first build's in the
//! same round, whose median cancels drift of the machine between rounds).
//!
//! It only reads figures `compare` measured; it must not run anything, and it imports no other
//! module of this crate (they use it).

use std::fmt::Write as _;

fn median(mut values: Vec<f64>) -> Option<f64> {
    values.retain(|v| v.is_finite());
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    Some(if values.len() % 2 == 1 { values[mid] } else { (values[mid - 1] + values[mid]) / 2.0 })
}

/// The value of each round, by round.
type Rounds = Vec<(usize, f64)>;

/// What one build measured against the first build, in one configuration.
#[derive(Debug, PartialEq)]
pub struct Versus {
    /// Rounds the build was measured in.
    pub rounds: usize,
    /// The build's median.
    pub median: f64,
    /// Its median over the first build's.
    pub of_medians: f64,
    /// The median of the per-round ratios (rounds both builds ran).
    pub paired: f64,
}

/// `build` against `first`; None without a figure from both.
pub fn versus(first: &Rounds, build: &Rounds) -> Option<Versus> {
    let base = median(first.iter().map(|r| r.1).collect())?;
    let mine = median(build.iter().map(|r| r.1).collect())?;
    let ratios =
        build.iter().filter_map(|(round, v)| first.iter().find(|r| r.0 == *round).map(|(_, b)| v / b)).collect();
    Some(Versus { rounds: build.len(), median: mine, of_medians: mine / base, paired: median(ratios)? })
}

fn cell(v: Option<Versus>, digits: usize) -> String {
    match v {
        Some(v) => format!(
            "{} | {:.prec$} | {:+.1}% | {:+.1}%",
            v.rounds,
            v.median,
            (v.of_medians - 1.0) * 100.0,
            (v.paired - 1.0) * 100.0,
            prec = digits
        ),
        None => "n/a | n/a | n/a | n/a".to_string(),
    }
}

/// One run's figures, as the A/B table needs them.
#[derive(Clone, Debug)]
pub struct Sample {
    /// The server (build) measured.
    pub server: String,
    /// What was run (workload, keys, depth, rate), as the table names it.
    pub configuration: String,
    /// Which round of `--repeat`.
    pub round: usize,
    /// Server CPU per operation, microseconds.
    pub server_cpu: Option<f64>,
    /// The load generator's CPU per operation, microseconds.
    pub client_cpu: f64,
    /// Operations per second.
    pub ops_per_sec: f64,
}

/// Whether `server` names a tierkv build (`tierkv` or `tierkv@LABEL`).
pub fn is_tierkv(server: &str) -> bool {
    server == "tierkv" || server.starts_with("tierkv@")
}

/// The server name of the tierkv build labelled `label` (empty: the only build).
pub fn server_name(label: &str) -> String {
    if label.is_empty() {
        "tierkv".to_string()
    } else {
        format!("tierkv@{label}")
    }
}

/// The A/B table of `builds` (server names; the first is the baseline) from `samples` and
/// each build's flash-hit GETs/s by round.
pub fn table(samples: &[Sample], flash: &[(String, usize, f64)], builds: &[String]) -> String {
    let mut out = String::from(
        "Each build against the first: the median over rounds, the change of that median, and the median of \
         the per-round changes (both builds measured in the same round). \"Normalised\" divides the server's \
         CPU per op by the load generator's in the same run, which cancels a machine that runs slower as a \
         whole.\n\n\
         | configuration | figure | build | rounds | median | change of median | median change per round |\n\
         | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    let mut configurations: Vec<&str> = Vec::new();
    for sample in samples.iter().filter(|s| builds.contains(&s.server)) {
        if !configurations.contains(&sample.configuration.as_str()) {
            configurations.push(&sample.configuration);
        }
    }
    type Figure = fn(&Sample) -> Option<f64>;
    let figures: [(&str, Figure, usize); 3] = [
        ("server CPU us/op", |s| s.server_cpu, 3),
        ("normalised CPU", |s| s.server_cpu.map(|c| c / s.client_cpu), 3),
        ("ops/s", |s| Some(s.ops_per_sec), 0),
    ];
    for configuration in configurations {
        for (figure, value, digits) in figures {
            let of = |server: &str| -> Rounds {
                samples
                    .iter()
                    .filter(|s| s.server == server && s.configuration == configuration)
                    .filter_map(|s| value(s).map(|v| (s.round, v)))
                    .collect()
            };
            let first = of(&builds[0]);
            for build in builds {
                let versus = cell(versus(&first, &of(build)), digits);
                let _ = writeln!(out, "| {configuration} | {figure} | {build} | {versus} |");
            }
        }
    }
    if flash.iter().any(|f| builds.contains(&f.0)) {
        let of = |server: &str| -> Rounds { flash.iter().filter(|f| f.0 == server).map(|f| (f.1, f.2)).collect() };
        let first = of(&builds[0]);
        for build in builds {
            let _ = writeln!(out, "| flash | flash-hit GETs/s | {build} | {} |", cell(versus(&first, &of(build)), 0));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paired_ratios_cancel_drift_that_medians_keep() {
        // The machine halves its speed after round 1; build b is 10% slower in every round.
        let first: Rounds = vec![(0, 1.0), (1, 2.0), (2, 2.0)];
        let b: Rounds = vec![(0, 1.1), (1, 2.2), (2, 2.2)];
        let v = versus(&first, &b).unwrap();
        assert!((v.paired - 1.1).abs() < 1e-9);
        assert!((v.of_medians - 1.1).abs() < 1e-9);
        // Rounds only one build ran in are left out of the pairing.
        let c: Rounds = vec![(0, 1.0), (5, 9.0)];
        let v = versus(&first, &c).unwrap();
        assert!((v.paired - 1.0).abs() < 1e-9);
        assert_eq!(v.rounds, 2);
        assert_eq!(versus(&first, &Vec::new()), None);
    }

    #[test]
    fn table_shows_each_build_against_the_first() {
        let sample = |server: &str, round, cpu| Sample {
            server: server.into(),
            configuration: "B p16".into(),
            round,
            server_cpu: Some(cpu),
            client_cpu: 1.0,
            ops_per_sec: 100.0,
        };
        let samples = [sample("tierkv@old", 0, 1.0), sample("tierkv@new", 0, 1.1), sample("memcached", 0, 9.0)];
        let flash = [("tierkv@old".to_string(), 0, 100.0), ("tierkv@new".to_string(), 0, 95.0)];
        let builds = [server_name("old"), server_name("new")];
        let text = table(&samples, &flash, &builds);
        assert!(text.contains("| B p16 | server CPU us/op | tierkv@new | 1 | 1.100 | +10.0% | +10.0% |"), "{text}");
        assert!(text.contains("| flash | flash-hit GETs/s | tierkv@new | 1 | 95 | -5.0% | -5.0% |"), "{text}");
        assert!(!text.contains("memcached"));
        assert!(is_tierkv("tierkv@new") && is_tierkv("tierkv") && !is_tierkv("tierkvx"));
    }

    #[test]
    fn median_of_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(vec![f64::NAN]), None);
    }
}
