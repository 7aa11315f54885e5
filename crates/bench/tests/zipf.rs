//! The scrambled zipfian generator against YCSB's definition: ranks 0 and 1 have exactly the
//! probabilities 1/zeta(n) and 2^-theta/zeta(n) (n = 10^10), and land on the keys
//! fnvhash64(rank) % keys. The expected shares are computed here independently of the generator.

use tierkv_bench::workload::{key_sequence, ycsb_fnvhash64, Distribution};

/// zeta(10^10, theta) by direct summation to 2 x 10^6 and an integral for the tail, a different
/// method from the generator's.
fn zeta_independent(theta: f64) -> f64 {
    let m = 2_000_000u64;
    let direct: f64 = (1..=m).map(|i| (i as f64).powf(-theta)).sum();
    let n = 1e10f64;
    // Integral of x^-theta from m + 1/2 to n + 1/2 (midpoint rule for the remaining terms).
    let tail = ((n + 0.5).powf(1.0 - theta) - (m as f64 + 0.5).powf(1.0 - theta)) / (1.0 - theta);
    direct + tail
}

#[test]
fn top_keys_get_ycsb_shares() {
    let theta = 0.99;
    let keys = 1_000_000u64;
    let draws = 2_000_000usize;
    let zeta = zeta_independent(theta);
    assert!((zeta - 26.469_028_201_783_02).abs() < 1e-3, "independent zeta {zeta}");
    let sequence = key_sequence(Distribution::Zipf(theta), keys, draws, 7);
    let share = |key: u64| sequence.iter().filter(|&&k| u64::from(k) == key).count() as f64 / draws as f64;
    for (rank, expected) in [(0u64, 1.0 / zeta), (1, 0.5f64.powf(theta) / zeta)] {
        let key = ycsb_fnvhash64(rank) % keys;
        let measured = share(key);
        // Tolerance: 4 standard deviations of a binomial share, plus the 1e-6 the other ranks
        // hashing to the same key contribute on average.
        let sigma = (expected * (1.0 - expected) / draws as f64).sqrt();
        assert!(
            (measured - expected).abs() < 4.0 * sigma + 2e-6,
            "rank {rank}: share {measured:.5}, YCSB definition {expected:.5}"
        );
    }
}
