//! Key spaces and key-choice distributions shared by the benchmarks: uniform, and YCSB's
//! ScrambledZipfianGenerator reproduced exactly so figures compare with YCSB's.

/// A small, fast pseudo-random generator (splitmix64); deterministic per seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix64(self.0)
    }

    /// A uniform double in [0, 1).
    #[inline]
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A uniform integer in [0, n) (n > 0), by Lemire's multiply-shift.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// splitmix64's finalizer: a bijection on u64 that scatters consecutive inputs.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// YCSB's `Utils.fnvhash64`: FNV-1a over the 8 little-endian bytes, then Java's `Math.abs`.
pub fn ycsb_fnvhash64(mut value: u64) -> u64 {
    let mut hash: u64 = 0xCBF2_9CE4_8422_2325;
    for _ in 0..8 {
        hash ^= value & 0xFF;
        value >>= 8;
        hash = hash.wrapping_mul(1_099_511_628_211);
    }
    (hash as i64).wrapping_abs() as u64
}

/// How keys are chosen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Distribution {
    /// Every key equally likely.
    Uniform,
    /// YCSB's scrambled zipfian with this theta (YCSB's default is 0.99): ranks over YCSB's
    /// 10^10 items folded onto the keys, so about a third of the draws land anywhere.
    Zipf(f64),
    /// Zipf over exactly the keys (`zipfn:THETA`): rank r drawn with weight r^-theta among the
    /// key count, then scrambled onto a key. Below 1, YCSB's generator over the keys; from 1 up
    /// (hot keys; YCSB's formula needs theta < 1), drawn exactly from the cumulative weights.
    ZipfKeys(f64),
}

impl std::str::FromStr for Distribution {
    type Err = String;

    fn from_str(text: &str) -> Result<Distribution, String> {
        if text == "uniform" {
            return Ok(Distribution::Uniform);
        }
        if let Some(theta) = text.strip_prefix("zipfn:") {
            let theta: f64 = theta.parse().map_err(|_| format!("bad zipf theta {theta:?}"))?;
            if !(theta > 0.0 && theta <= MAX_EXACT_THETA) {
                return Err(format!("zipfn theta {theta} must be above 0 and at most {MAX_EXACT_THETA}"));
            }
            return Ok(Distribution::ZipfKeys(theta));
        }
        let theta = text
            .strip_prefix("zipf:")
            .or_else(|| (text == "zipf").then_some("0.99"))
            .ok_or_else(|| format!("unknown distribution {text:?}: use uniform or zipf:THETA"))?;
        let theta: f64 = theta.parse().map_err(|_| format!("bad zipf theta {theta:?}"))?;
        if !(theta > 0.0 && theta < 1.0) {
            return Err(format!("zipf theta {theta} must be between 0 and 1 (exclusive)"));
        }
        Ok(Distribution::Zipf(theta))
    }
}

impl std::fmt::Display for Distribution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Distribution::Uniform => write!(f, "uniform"),
            Distribution::Zipf(theta) => write!(f, "zipf:{theta}"),
            Distribution::ZipfKeys(theta) => write!(f, "zipfn:{theta}"),
        }
    }
}

/// YCSB's ScrambledZipfianGenerator: a zipfian rank over YCSB's item space of 10^10, hashed
/// with FNV-1a 64 and reduced modulo the key count, so hot keys are spread over the key space.
#[derive(Clone, Debug)]
pub struct ScrambledZipfian {
    keys: u64,
    /// The rank space: YCSB's 10^10, or the key count.
    space: u64,
    theta: f64,
    zetan: f64,
    alpha: f64,
    eta: f64,
}

/// YCSB's `ScrambledZipfianGenerator.ITEM_COUNT`.
const YCSB_ITEM_COUNT: u64 = 10_000_000_000;
/// YCSB's precomputed zeta(10^10, 0.99).
const YCSB_ZETAN_099: f64 = 26.469_028_201_783_02;

/// zeta(n, theta) = sum of i^-theta for i in 1..=n, by direct summation up to 10^6 terms and
/// the Euler-Maclaurin tail beyond.
pub fn zeta(n: u64, theta: f64) -> f64 {
    let direct = n.min(1_000_000);
    let mut sum: f64 = (1..=direct).map(|i| (i as f64).powf(-theta)).sum();
    if n > direct {
        let (a, b) = (direct as f64, n as f64);
        sum += (b.powf(1.0 - theta) - a.powf(1.0 - theta)) / (1.0 - theta);
        sum += (b.powf(-theta) - a.powf(-theta)) / 2.0;
    }
    sum
}

impl ScrambledZipfian {
    /// A generator over `keys` keys with skew `theta`.
    pub fn new(keys: u64, theta: f64) -> ScrambledZipfian {
        ScrambledZipfian::over(keys, theta, YCSB_ITEM_COUNT)
    }

    /// Ranks over `space` items (`new` uses YCSB's 10^10), hashed onto `keys` keys.
    pub fn over(keys: u64, theta: f64, space: u64) -> ScrambledZipfian {
        assert!(keys > 0 && space > 1 && theta > 0.0 && theta < 1.0);
        let zetan = if theta == 0.99 && space == YCSB_ITEM_COUNT { YCSB_ZETAN_099 } else { zeta(space, theta) };
        let zeta2 = zeta(2, theta);
        let n = space as f64;
        let eta = (1.0 - (2.0 / n).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
        ScrambledZipfian { keys, space, theta, zetan, alpha: 1.0 / (1.0 - theta), eta }
    }

    /// The zipfian rank for a uniform draw `u` in [0, 1) (YCSB's `ZipfianGenerator.nextLong`).
    pub fn rank(&self, u: f64) -> u64 {
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1;
        }
        (self.space as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64
    }

    /// The next key number in [0, keys).
    pub fn next(&self, rng: &mut Rng) -> u64 {
        ycsb_fnvhash64(self.rank(rng.next_f64())) % self.keys
    }
}

/// Key numbers drawn from `distribution`, pre-generated so the timed loops only read them.
pub fn key_sequence(distribution: Distribution, keys: u64, count: usize, seed: u64) -> Vec<u32> {
    assert!(keys <= u64::from(u32::MAX) + 1);
    let mut rng = Rng::new(seed);
    match distribution {
        Distribution::Uniform => (0..count).map(|_| rng.below(keys) as u32).collect(),
        Distribution::Zipf(theta) => {
            let zipf = ScrambledZipfian::new(keys, theta);
            (0..count).map(|_| zipf.next(&mut rng) as u32).collect()
        }
        Distribution::ZipfKeys(theta) if theta < 1.0 => {
            let zipf = ScrambledZipfian::over(keys, theta, keys);
            (0..count).map(|_| zipf.next(&mut rng) as u32).collect()
        }
        Distribution::ZipfKeys(theta) => {
            let cumulative = zipf_cumulative(keys, theta);
            let total = cumulative[cumulative.len() - 1];
            (0..count)
                .map(|_| {
                    let draw = rng.next_f64() * total;
                    let rank = cumulative.partition_point(|&weight| weight <= draw) as u64;
                    (ycsb_fnvhash64(rank.min(keys - 1)) % keys) as u32
                })
                .collect()
        }
    }
}

/// The largest skew `zipfn` takes (all but a handful of draws hit the first keys beyond it).
pub const MAX_EXACT_THETA: f64 = 4.0;

/// Cumulative weights of ranks 1..=keys under zipf with skew `theta` (weight r^-theta).
fn zipf_cumulative(keys: u64, theta: f64) -> Vec<f64> {
    let mut sum = 0.0;
    (1..=keys)
        .map(|rank| {
            sum += (rank as f64).powf(-theta);
            sum
        })
        .collect()
}

/// Writes key number `i` as `out.len()` bytes: the first up-to-8 bytes are a bijective
/// scramble of `i` (so keys are unique while `i` fits), the rest a fixed filler.
pub fn write_key(i: u64, out: &mut [u8]) {
    let width = out.len().min(8);
    let scrambled = if width == 8 { mix64(i) } else { i };
    out[..width].copy_from_slice(&scrambled.to_le_bytes()[..width]);
    for (j, byte) in out[width..].iter_mut().enumerate() {
        *byte = b'a' + (j % 26) as u8;
    }
}

/// Writes key number `i` as `out.len()` printable bytes that a text protocol accepts: 16 hex
/// digits of a bijective scramble of `i` (or, for keys shorter than 16 bytes, `i` itself in hex),
/// then a fixed filler. Unique while `i` fits in the hex digits.
pub fn write_text_key(i: u64, out: &mut [u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let width = out.len().min(16);
    let value = if width == 16 { mix64(i) } else { i };
    for (position, byte) in out[..width].iter_mut().enumerate() {
        let shift = 4 * (width - 1 - position);
        *byte = HEX[((value >> shift) & 0xF) as usize];
    }
    for (j, byte) in out[width..].iter_mut().enumerate() {
        *byte = b'a' + (j % 26) as u8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_matches_ycsb() {
        // FNV-1a 64 of eight zero bytes, then Math.abs.
        let mut h: u64 = 0xCBF2_9CE4_8422_2325;
        for _ in 0..8 {
            h = h.wrapping_mul(1_099_511_628_211);
        }
        assert_eq!(ycsb_fnvhash64(0), (h as i64).wrapping_abs() as u64);
        assert!(ycsb_fnvhash64(12345) <= i64::MAX as u64);
    }

    #[test]
    fn zeta_approximation_matches_ycsb_constant() {
        let approx = zeta(YCSB_ITEM_COUNT, 0.99);
        assert!((approx - YCSB_ZETAN_099).abs() < 1e-6, "{approx}");
        assert!((zeta(10, 0.5) - (1..=10).map(|i| 1.0 / (i as f64).sqrt()).sum::<f64>()).abs() < 1e-12);
    }

    #[test]
    fn zipf_is_skewed_and_in_range() {
        let keys = 1000;
        let seq = key_sequence(Distribution::Zipf(0.99), keys, 100_000, 1);
        let mut counts = vec![0u32; keys as usize];
        for &k in &seq {
            counts[k as usize] += 1;
        }
        counts.sort_unstable_by(|a, b| b.cmp(a));
        let top10: u32 = counts[..10].iter().sum();
        assert!(top10 > 100_000 / 10, "the ten hottest keys take over a tenth: {top10}");
        let uniform = key_sequence(Distribution::Uniform, keys, 100_000, 1);
        assert!(uniform.iter().all(|&k| u64::from(k) < keys));
    }

    /// From theta 1 up the draw is exact: the hottest key's share is its weight, 1 / zeta(n).
    #[test]
    fn hot_key_zipf_gives_the_hottest_key_its_weight() {
        let (keys, draws) = (1000u64, 200_000usize);
        let seq = key_sequence(Distribution::ZipfKeys(1.2), keys, draws, 3);
        let mut counts = vec![0u32; keys as usize];
        for &k in &seq {
            counts[k as usize] += 1;
        }
        let hottest = f64::from(*counts.iter().max().unwrap()) / draws as f64;
        let expected = 1.0 / zeta(keys, 1.2);
        assert!((hottest - expected).abs() < 0.01, "hottest key {hottest:.4}, expected {expected:.4}");
        assert_eq!("zipfn:1.2".parse::<Distribution>(), Ok(Distribution::ZipfKeys(1.2)));
        assert!("zipfn:9".parse::<Distribution>().is_err());
    }

    #[test]
    fn distributions_parse() {
        assert_eq!("uniform".parse::<Distribution>(), Ok(Distribution::Uniform));
        assert_eq!("zipf:0.99".parse::<Distribution>(), Ok(Distribution::Zipf(0.99)));
        assert!("zipf:1.5".parse::<Distribution>().is_err());
        assert!("pareto".parse::<Distribution>().is_err());
    }

    #[test]
    fn text_keys_are_unique_and_printable() {
        let mut seen = std::collections::HashSet::new();
        for width in [4usize, 16, 24] {
            let mut key = vec![0u8; width];
            for i in 0..5000 {
                write_text_key(i, &mut key);
                assert!(key.iter().all(|b| b.is_ascii_graphic()));
                assert!(seen.insert(key.clone()));
            }
        }
    }

    #[test]
    fn keys_are_unique() {
        let mut seen = std::collections::HashSet::new();
        let mut key = [0u8; 8];
        for i in 0..10_000 {
            write_key(i, &mut key);
            assert!(seen.insert(key));
        }
        let mut long = [0u8; 12];
        write_key(7, &mut long);
        assert_eq!(&long[8..], b"abcd");
    }
}
