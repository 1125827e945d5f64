//! What `/proc/self/smaps` says of the mapping that holds an address: its flags (`VmFlags`) and how
//! much of it transparent huge pages back (`AnonHugePages`).

/// The value of `field` (`VmFlags`, `AnonHugePages`, …) of the mapping holding `addr` in
/// `/proc/self/smaps`, trimmed. Panics when no mapping holds `addr` or it has no such field.
pub fn smaps_field(addr: usize, field: &str) -> String {
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("read /proc/self/smaps");
    let prefix = format!("{field}:");
    let mut inside = false;
    for line in smaps.lines() {
        if let Some((range, _)) = line.split_once(' ')
            && let Some((lo, hi)) = range.split_once('-')
            && let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
        {
            inside = (lo..hi).contains(&addr);
        } else if inside && let Some(value) = line.strip_prefix(&prefix) {
            return value.trim().to_string();
        }
    }
    panic!("no mapping holding {addr:#x} with {field} in /proc/self/smaps");
}

/// `AnonHugePages` of the mapping holding `addr`, in KiB.
pub fn anon_huge_kib(addr: usize) -> u64 {
    smaps_field(addr, "AnonHugePages")
        .trim_end_matches("kB")
        .trim()
        .parse()
        .expect("a size in kB")
}
