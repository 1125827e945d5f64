//! Where kernel functions lie: the address ranges of named functions, from `/proc/kallsyms`, so that
//! a program can tell which function called the one it probes (by the return address).
//!
//! # Kernel behaviour relied on
//! - `/proc/kallsyms` lists `ADDRESS TYPE NAME [MODULE]` per symbol, text symbols with type `t` or
//!   `T`; it shows the addresses as zero to a reader the kernel does not trust with them
//!   (`kernel.kptr_restrict`, CAP_SYSLOG).
//! - The compiler may emit a specialised copy of a function under its name with a suffix
//!   (`__netif_receive_skb_core.constprop.0`, `.isra.0`): each copy is a function of its own.
//! - A function ends where the next text symbol begins.

use std::fs;
use std::io;
use std::ops::RangeInclusive;

/// The text symbols of the running kernel, sorted by address.
#[derive(Debug)]
pub(super) struct Kallsyms {
    text: Vec<(u64, String)>,
}

impl Kallsyms {
    /// Reads `/proc/kallsyms`.
    pub fn read() -> io::Result<Kallsyms> {
        Ok(Kallsyms::parse(&fs::read_to_string("/proc/kallsyms")?))
    }

    /// The text symbols of a `/proc/kallsyms` text.
    pub fn parse(text: &str) -> Kallsyms {
        let mut symbols: Vec<(u64, String)> = text
            .lines()
            .filter_map(|line| {
                let mut parts = line.split_ascii_whitespace();
                let address = u64::from_str_radix(parts.next()?, 16).ok()?;
                let kind = parts.next()?;
                let name = parts.next()?;
                matches!(kind, "t" | "T").then(|| (address, name.to_string()))
            })
            .collect();
        symbols.sort();
        Kallsyms { text: symbols }
    }

    /// Whether the addresses are hidden from this reader (all zero).
    pub fn hidden(&self) -> bool {
        self.text.iter().all(|&(address, _)| address == 0)
    }

    /// The address range of each copy of the function `name` (itself and its `name.suffix`
    /// specialisations), up to the next symbol's address.
    pub fn ranges(&self, name: &str) -> Vec<RangeInclusive<u64>> {
        let is_copy = |symbol: &str| {
            symbol == name
                || symbol
                    .strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with('.'))
        };
        self.text
            .iter()
            .enumerate()
            .filter(|(_, (address, symbol))| *address != 0 && is_copy(symbol))
            .filter_map(|(i, &(start, _))| {
                let end = self.text[i + 1..]
                    .iter()
                    .map(|&(address, _)| address)
                    .find(|&address| address > start)?;
                Some(start..=end - 1)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_run_to_the_next_symbol_and_take_specialised_copies() {
        let text = "ffffffff81000000 T _stext\n\
            ffffffff81000100 t dev_queue_xmit_nit\n\
            ffffffff81000100 t alias_of_it\n\
            ffffffff81000180 T next_fn\n\
            ffffffff81000200 t __netif_receive_skb_core.constprop.0\n\
            ffffffff81000300 d some_data\n\
            ffffffff81000400 t __netif_receive_skb_core_other\n\
            ffffffff81000500 t __netif_receive_skb_core\n\
            ffffffffc0000000 t helper\t[veth]\n";
        let k = Kallsyms::parse(text);
        assert!(!k.hidden());
        assert_eq!(
            k.ranges("dev_queue_xmit_nit"),
            vec![0xffffffff81000100..=0xffffffff8100017f]
        );
        assert_eq!(
            k.ranges("__netif_receive_skb_core"),
            vec![
                0xffffffff81000200..=0xffffffff810003ff,
                0xffffffff81000500..=0xffffffffbfffffff
            ]
        );
        assert!(k.ranges("missing").is_empty());
    }

    #[test]
    fn zero_addresses_are_hidden() {
        let k =
            Kallsyms::parse("0000000000000000 T _stext\n0000000000000000 t dev_queue_xmit_nit\n");
        assert!(k.hidden());
        assert!(k.ranges("dev_queue_xmit_nit").is_empty());
    }
}
