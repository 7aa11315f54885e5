//! incr/decr on values that hold decimal numbers, exactly as memcached 1.6 reads and writes them.

/// Reads a value the way memcached's `safe_strtoull` does: optional leading whitespace, an
/// optional sign, decimal digits, then the end or whitespace. A minus sign is accepted only when
/// the negated result still reads as a non-negative signed number (so "-0" is 0 and "-5" is an
/// error), and overflow is an error. None means "not a number".
pub fn parse_counter(value: &[u8]) -> Option<u64> {
    let mut at = value.iter().take_while(|b| is_c_space(**b)).count();
    let negative = match value.get(at) {
        Some(b'-') => {
            at += 1;
            true
        }
        Some(b'+') => {
            at += 1;
            false
        }
        _ => false,
    };
    let digits = value[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 {
        return None;
    }
    let mut number: u64 = 0;
    for &digit in &value[at..at + digits] {
        number = number.checked_mul(10)?.checked_add(u64::from(digit - b'0'))?;
    }
    match value.get(at + digits) {
        None => {}
        Some(b) if is_c_space(*b) => {}
        Some(_) => return None,
    }
    if negative {
        number = number.wrapping_neg();
        if (number as i64) < 0 {
            return None;
        }
    }
    Some(number)
}

fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
}

/// Applies memcached's arithmetic: incr wraps at 2^64, decr stops at 0.
pub fn apply_delta(current: u64, delta: u64, decrement: bool) -> u64 {
    if decrement {
        current.saturating_sub(delta)
    } else {
        current.wrapping_add(delta)
    }
}

/// A counter's new value as memcached writes it: when the digits fit in the old value's length
/// they are padded with trailing spaces to that length (memcached rewrites the item in place),
/// otherwise the value is exactly the digits.
pub struct CounterValue {
    digits: [u8; 21],
    start: usize,
    /// Length of the new value.
    pub value_len: usize,
}

impl CounterValue {
    /// Lays out `number` as the successor of a value `old_len` bytes long.
    pub fn new(number: u64, old_len: usize) -> CounterValue {
        let mut digits = [0u8; 21];
        let mut start = digits.len();
        let mut rest = number;
        loop {
            start -= 1;
            digits[start] = b'0' + (rest % 10) as u8;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        let digit_count = digits.len() - start;
        CounterValue { digits, start, value_len: digit_count.max(old_len) }
    }

    /// A signed counter's exact digits, '-' first when negative (no padding).
    pub fn signed(number: i64) -> CounterValue {
        let mut counter = CounterValue::new(number.unsigned_abs(), 0);
        if number < 0 {
            counter.start -= 1;
            counter.digits[counter.start] = b'-';
            counter.value_len += 1;
        }
        counter
    }

    /// The decimal digits alone.
    pub fn digits(&self) -> &[u8] {
        &self.digits[self.start..]
    }

    /// Writes the value (digits, then padding) into `out`, which is `value_len` bytes long.
    pub fn write(&self, out: &mut [u8]) {
        assert_eq!(out.len(), self.value_len);
        let digits = self.digits();
        out[..digits.len()].copy_from_slice(digits);
        out[digits.len()..].fill(b' ');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_like_strtoull() {
        assert_eq!(parse_counter(b"0"), Some(0));
        assert_eq!(parse_counter(b"42"), Some(42));
        assert_eq!(parse_counter(b"  7"), Some(7));
        assert_eq!(parse_counter(b"+7"), Some(7));
        assert_eq!(parse_counter(b"9  "), Some(9), "memcached pads shrunk counters with spaces");
        assert_eq!(parse_counter(b"12 34"), Some(12));
        assert_eq!(parse_counter(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_counter(b"18446744073709551616"), None, "overflow");
        assert_eq!(parse_counter(b"-0"), Some(0));
        assert_eq!(parse_counter(b"-5"), None);
        assert_eq!(parse_counter(b""), None);
        assert_eq!(parse_counter(b"abc"), None);
        assert_eq!(parse_counter(b"12abc"), None);
        assert_eq!(parse_counter(b" "), None);
        assert_eq!(parse_counter(b"-"), None);
    }

    #[test]
    fn arithmetic_wraps_up_and_stops_at_zero_down() {
        assert_eq!(apply_delta(u64::MAX, 2, false), 1);
        assert_eq!(apply_delta(5, 10, true), 0);
        assert_eq!(apply_delta(5, 3, true), 2);
    }

    #[test]
    fn formats_with_memcached_padding() {
        let check = |number: u64, old_len: usize, expected: &[u8]| {
            let counter = CounterValue::new(number, old_len);
            let mut out = vec![0u8; counter.value_len];
            counter.write(&mut out);
            assert_eq!(out, expected);
        };
        check(9, 3, b"9  ");
        check(1000, 3, b"1000");
        check(u64::MAX, 0, b"18446744073709551615");
        check(0, 1, b"0");
        assert_eq!(CounterValue::new(12, 5).digits(), b"12");
        assert_eq!(CounterValue::signed(i64::MIN).digits(), b"-9223372036854775808");
        assert_eq!(CounterValue::signed(-3).value_len, 2);
        assert_eq!(CounterValue::signed(17).digits(), b"17");
    }
}
