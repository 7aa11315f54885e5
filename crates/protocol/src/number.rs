//! Numbers in command tokens, read exactly as memcached 1.6 reads them (its `safe_strto*`
//! helpers over `strtoul`/`strtol` on a 64-bit machine), including their truncation quirks:
//! a 32-bit field given a larger number keeps the low 32 bits, as memcached's does.

/// `safe_strtoull`: optional sign, decimal digits, nothing after; a minus sign is accepted only
/// when the negated value still reads as non-negative (so "-0" is 0); overflow fails.
pub fn strtoull(token: &[u8]) -> Option<u64> {
    let (negative, digits) = split_sign(token);
    let magnitude = digits_u64(digits)?;
    if negative {
        let value = magnitude.wrapping_neg();
        return ((value as i64) >= 0).then_some(value);
    }
    Some(magnitude)
}

/// `safe_strtoul` into a 32-bit field: `strtoull`, then the low 32 bits.
pub fn strtoul32(token: &[u8]) -> Option<u32> {
    strtoull(token).map(|value| value as u32)
}

/// `safe_strtol` into a 32-bit field: a signed 64-bit decimal (overflow fails), then the low
/// 32 bits as a signed number.
pub fn strtol32(token: &[u8]) -> Option<i32> {
    let (negative, digits) = split_sign(token);
    let magnitude = digits_u64(digits)?;
    let value: i64 = if negative {
        if magnitude > 1 << 63 {
            return None;
        }
        (magnitude as i64).wrapping_neg()
    } else {
        i64::try_from(magnitude).ok()?
    };
    Some(value as i32)
}

fn split_sign(token: &[u8]) -> (bool, &[u8]) {
    match token.first() {
        Some(b'-') => (true, &token[1..]),
        Some(b'+') => (false, &token[1..]),
        _ => (false, token),
    }
}

fn digits_u64(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    let mut value: u64 = 0;
    for &digit in digits {
        if !digit.is_ascii_digit() {
            return None;
        }
        value = value.checked_mul(10)?.checked_add(u64::from(digit - b'0'))?;
    }
    Some(value)
}

/// Appends `value` in decimal to `out`.
pub fn write_u64(out: &mut Vec<u8>, value: u64) {
    let mut buffer = [0u8; 20];
    let mut at = buffer.len();
    let mut rest = value;
    loop {
        at -= 1;
        buffer[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    out.extend_from_slice(&buffer[at..]);
}

/// Writes a signed `value` in decimal at the end of `out`.
pub fn write_i64(out: &mut Vec<u8>, value: i64) {
    if value < 0 {
        out.push(b'-');
    }
    write_u64(out, value.unsigned_abs());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memcached_number_rules() {
        assert_eq!(strtoull(b"0"), Some(0));
        assert_eq!(strtoull(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(strtoull(b"18446744073709551616"), None);
        assert_eq!(strtoull(b"-0"), Some(0));
        assert_eq!(strtoull(b"-1"), None);
        assert_eq!(strtoull(b"+7"), Some(7));
        assert_eq!(strtoull(b"7a"), None);
        assert_eq!(strtoull(b""), None);
        assert_eq!(strtoull(b"-"), None);
        assert_eq!(strtoul32(b"4294967296"), Some(0), "memcached keeps the low 32 bits");
        assert_eq!(strtoul32(b"4294967295"), Some(u32::MAX));
        assert_eq!(strtol32(b"-1"), Some(-1));
        assert_eq!(strtol32(b"2147483648"), Some(i32::MIN), "memcached keeps the low 32 bits");
        assert_eq!(strtol32(b"-9223372036854775808"), Some(0));
        assert_eq!(strtol32(b"9223372036854775808"), None, "strtol overflow");
        assert_eq!(strtol32(b"x"), None);
    }

    #[test]
    fn decimal_writers() {
        let mut out = Vec::new();
        write_u64(&mut out, 0);
        out.push(b' ');
        write_u64(&mut out, u64::MAX);
        out.push(b' ');
        write_i64(&mut out, -42);
        assert_eq!(out, b"0 18446744073709551615 -42");
    }
}
