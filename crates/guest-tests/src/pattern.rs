//! The byte pattern every stream carries: byte `o` of a stream is byte `o % 8` of `splitmix64(o / 8)`, so a
//! lost, duplicated, reordered or shifted range shows up at its first byte.

/// SplitMix64: a bijective mixer, so no two 8-byte blocks of a stream repeat.
fn splitmix64(index: u64) -> u64 {
    let mut z = index.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Calls `f(chunk_range_in_buf, pattern_bytes)` for consecutive pieces of `len` bytes starting at stream
/// offset `offset`, each piece inside one 8-byte block.
fn for_each_block(len: usize, offset: u64, mut f: impl FnMut(std::ops::Range<usize>, &[u8])) {
    let mut done = 0;
    while done < len {
        let at = offset + done as u64;
        let block = splitmix64(at / 8).to_le_bytes();
        let start = (at % 8) as usize;
        let n = (8 - start).min(len - done);
        f(done..done + n, &block[start..start + n]);
        done += n;
    }
}

/// Fills `buf` with the pattern bytes of stream offsets `offset..offset + buf.len()`.
pub fn fill(buf: &mut [u8], offset: u64) {
    for_each_block(buf.len(), offset, |range, bytes| {
        buf[range].copy_from_slice(bytes)
    });
}

/// Counts the bytes of `buf` that differ from the pattern at stream offsets `offset..`.
pub fn mismatches(buf: &[u8], offset: u64) -> u64 {
    let mut bad = 0;
    for_each_block(buf.len(), offset, |range, bytes| {
        bad += buf[range]
            .iter()
            .zip(bytes)
            .filter(|(got, want)| got != want)
            .count() as u64;
    });
    bad
}

#[cfg(test)]
mod tests {
    use super::{fill, mismatches};

    #[test]
    fn pieces_filled_at_any_offset_match_the_whole() {
        let mut whole = vec![0u8; 1000];
        fill(&mut whole, 3);
        for (start, end) in [(0, 1), (1, 9), (5, 17), (17, 1000)] {
            let mut piece = vec![0u8; end - start];
            fill(&mut piece, 3 + start as u64);
            assert_eq!(piece, whole[start..end]);
            assert_eq!(mismatches(&piece, 3 + start as u64), 0);
        }
    }

    #[test]
    fn shifted_duplicated_or_flipped_bytes_are_counted() {
        let mut buf = vec![0u8; 64];
        fill(&mut buf, 0);
        assert_ne!(
            mismatches(&buf, 1),
            0,
            "a stream shifted by one byte must not verify"
        );
        assert_ne!(mismatches(&buf, 8), 0, "a repeated block must not verify");
        buf[10] ^= 0x40;
        assert_eq!(mismatches(&buf, 0), 1);
    }
}
