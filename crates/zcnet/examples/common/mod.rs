//! Pieces shared by the examples: the process's CPU time and a streaming hash.
#![allow(dead_code)]

use std::time::Duration;

/// CPU time (user + system) this process used so far, from `/proc/self/stat` (clock ticks of 10 ms).
pub fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
    let after_name = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

/// µs of CPU per MB moved.
pub fn cpu_us_per_mb(cpu: Duration, bytes: u64) -> f64 {
    cpu.as_secs_f64() * 1e6 / (bytes as f64 / 1e6).max(1e-9)
}

/// A 64-bit hash of a stream fed in pieces, eight bytes at a time: equal only for the same bytes in
/// the same order, however the stream was cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StreamHash {
    state: u64,
    len: u64,
    partial: [u8; 8],
}

impl StreamHash {
    pub fn update(&mut self, mut bytes: &[u8]) {
        let fill = (self.len % 8) as usize;
        if fill > 0 {
            let take = bytes.len().min(8 - fill);
            self.partial[fill..fill + take].copy_from_slice(&bytes[..take]);
            self.len += take as u64;
            bytes = &bytes[take..];
            if self.len.is_multiple_of(8) {
                self.mix(u64::from_le_bytes(self.partial));
            }
        }
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            self.mix(u64::from_le_bytes(word.try_into().expect("8 bytes")));
        }
        let rest = words.remainder();
        self.partial[..rest.len()].copy_from_slice(rest);
        self.len += bytes.len() as u64;
    }

    fn mix(&mut self, word: u64) {
        self.state = Self::mixed(self.state, word);
    }

    fn mixed(state: u64, word: u64) -> u64 {
        (state.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95)
    }

    /// The hash of everything fed so far (the unfinished last word and the length included).
    pub fn finish(&self) -> u64 {
        let fill = (self.len % 8) as usize;
        let mut last = [0u8; 8];
        last[..fill].copy_from_slice(&self.partial[..fill]);
        Self::mixed(self.state, u64::from_le_bytes(last)) ^ self.len
    }
}

/// `len` pseudo-random bytes from `seed` (xorshift64, eight bytes per step).
pub fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}
