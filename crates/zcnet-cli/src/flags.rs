//! One parser per kind of numeric flag, shared by every subcommand, so that a bad value is always a
//! usage error (exit status 2) whose message names the flag — clap prefixes each message below with
//! `invalid value 'V' for '--flag <V>'`.
//!
//! Durations are finite seconds in (0, 86400]; sizes and counts are whole numbers of at least one
//! (sizes accept K, M and G suffixes of powers of 1024). Limits that depend on other flags (the
//! largest UDP datagram, for instance) are checked once the flags are known and reported as a
//! [`UsageError`].

use std::fmt;

/// Longest duration any flag accepts: one day.
const MAX_SECONDS: f64 = 86_400.0;

/// A usage error found after parsing (a limit that depends on several flags): exit status 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Fails with a [`UsageError`] naming `flag` when `value` is above `limit`.
pub fn at_most(flag: &str, value: u64, limit: u64, why: &str) -> anyhow::Result<()> {
    if value > limit {
        return Err(UsageError(format!(
            "{flag} {value} is above the limit of {limit} ({why})"
        ))
        .into());
    }
    Ok(())
}

fn seconds(s: &str, zero_ok: bool) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| "expected a number of seconds".to_string())?;
    if !v.is_finite() || v < 0.0 || (v == 0.0 && !zero_ok) {
        return Err(if zero_ok {
            "must be 0 or more seconds".into()
        } else {
            "must be more than 0 seconds".into()
        });
    }
    if v > MAX_SECONDS {
        return Err(format!("must be at most {MAX_SECONDS} seconds"));
    }
    Ok(v)
}

/// A duration in seconds, more than zero.
pub fn duration(s: &str) -> Result<f64, String> {
    seconds(s, false)
}

/// An interval in seconds; 0 turns the feature off.
pub fn interval(s: &str) -> Result<f64, String> {
    seconds(s, true)
}

fn whole(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (digits, scale) = match s.char_indices().last() {
        Some((i, 'k' | 'K')) => (&s[..i], 1u64 << 10),
        Some((i, 'm' | 'M')) => (&s[..i], 1 << 20),
        Some((i, 'g' | 'G')) => (&s[..i], 1 << 30),
        _ => (s, 1),
    };
    if digits.starts_with('-') {
        return Err("must be at least 1".into());
    }
    let n: u64 = digits
        .parse()
        .map_err(|_| "expected a whole number (K, M, G suffixes allowed)".to_string())?;
    let n = n
        .checked_mul(scale)
        .ok_or_else(|| "is too large".to_string())?;
    if n == 0 {
        return Err("must be at least 1".into());
    }
    Ok(n)
}

/// A byte size of at least one byte (`4096`, `64K`, `1M`); at most 1 GiB.
pub fn size(s: &str) -> Result<usize, String> {
    let n = whole(s)?;
    if n > 1 << 30 {
        return Err("must be at most 1G".into());
    }
    Ok(n as usize)
}

/// A byte size as [`size`] takes, or 0.
pub fn size_or_zero(s: &str) -> Result<usize, String> {
    if s.trim() == "0" {
        return Ok(0);
    }
    size(s)
}

/// Descriptors per AF_XDP ring operation or packets per `recvmmsg`/`sendmmsg` batch: 1 to 2048 (the
/// rings the benches set up hold 2048).
pub fn batch(s: &str) -> Result<u32, String> {
    let n = whole(s)?;
    if n > 2048 {
        return Err("must be at most 2048 (the size of the rings)".into());
    }
    Ok(n as u32)
}

/// Datagrams per `sendmmsg(2)` call: 1 to 1024 (`UIO_MAXIOV`: the kernel takes no more in one call).
pub fn mmsg_batch(s: &str) -> Result<usize, String> {
    match whole(s)? {
        0 => Err("must be at least 1".into()),
        n if n > 1024 => {
            Err("must be at most 1024 (UIO_MAXIOV, the most one sendmmsg takes)".into())
        }
        n => Ok(n as usize),
    }
}

/// An interface queue: 0 to 65535 (the kernel's AF_XDP bind keeps a queue id in 16 bits, so a larger
/// one would name another queue).
pub fn queue(s: &str) -> Result<u32, String> {
    let n: u32 = s
        .trim()
        .parse()
        .map_err(|_| "expected a queue number from 0 to 65535".to_string())?;
    if n > u32::from(u16::MAX) {
        return Err("must be at most 65535".into());
    }
    Ok(n)
}

/// Microseconds of the AF_XDP receivers' coalescing sleep: 0 to 1000000 (one second: a run checks
/// Ctrl-C and its end between sleeps).
pub fn coalesce_us(s: &str) -> Result<u64, String> {
    let n: u64 = s
        .trim()
        .parse()
        .map_err(|_| "expected whole microseconds".to_string())?;
    if n > 1_000_000 {
        return Err("must be at most 1000000 (one second)".into());
    }
    Ok(n)
}

/// A count (batch, rounds, connections, MiB) of at least one, fitting in `u32`.
pub fn count(s: &str) -> Result<u32, String> {
    let n = whole(s)?;
    u32::try_from(n).map_err(|_| format!("must be at most {}", u32::MAX))
}

/// A 64-bit count of at least one (bytes to send, MiB per connection).
pub fn count64(s: &str) -> Result<u64, String> {
    whole(s)
}

/// A UDP GSO segment size: 1 to 65507 bytes.
pub fn segment(s: &str) -> Result<u16, String> {
    let n = whole(s)?;
    if n > 65_507 {
        return Err("must be at most 65507 (the largest UDP payload)".into());
    }
    Ok(n as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_must_be_positive_and_finite() {
        assert_eq!(duration("1.5"), Ok(1.5));
        for bad in ["0", "-1", "nan", "inf", "abc", "1e9", ""] {
            assert!(duration(bad).is_err(), "{bad}");
        }
        assert_eq!(interval("0"), Ok(0.0));
        assert!(interval("-0.5").is_err());
    }

    #[test]
    fn sizes_and_counts() {
        assert_eq!(size("64K"), Ok(65536));
        assert_eq!(size("4096"), Ok(4096));
        assert_eq!(count("3"), Ok(3));
        for bad in ["0", "-3", "1.5", "2G0", "x", "5G"] {
            assert!(size(bad).is_err(), "{bad}");
        }
        assert!(count("0").is_err());
        assert!(count("5000000000").is_err());
        assert!(segment("65508").is_err());
        assert_eq!(count64("16m"), Ok(16 << 20));
        assert_eq!(count64("1G"), Ok(1 << 30));
        for bad in ["", "K", "12Q", "99999999999G"] {
            assert!(count64(bad).is_err(), "{bad:?}");
        }
        assert_eq!(segment("1400"), Ok(1400));
        assert_eq!(size_or_zero("0"), Ok(0));
        assert!(size_or_zero("-1").is_err());
        assert_eq!(batch("2048"), Ok(2048));
        assert!(batch("1G").is_err());
        assert_eq!(queue("65535"), Ok(65535));
        assert!(queue("65536").is_err());
        assert_eq!(coalesce_us("0"), Ok(0));
        assert!(coalesce_us("4294967295").is_err());
    }
}
