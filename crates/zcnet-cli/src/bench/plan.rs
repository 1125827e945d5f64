//! Plan: The plan of a bench's runs: which sizes (`--sizes`, or the one size), and the order the runs go
//! in over rounds, sizes, modes and (for the benches of sends) APIs. What the rows of a sweep say is [`crate::bench::report::crossover`]'s.
//!
//! Each bench runs its modes at every size as it runs them at one; this file only decides the order
//! (the modes reversed from one size, and one round, to the next, so that no mode always runs first
//! and a host getting busier or quieter during the sweep hits every mode alike).

use std::path::Path;

use anyhow::Result;
use zcnet::tx::Mode;

use crate::bench::args::api::Api;
use crate::flags::UsageError;

/// The most sizes one sweep takes: a sweep runs every mode at each, so it stays minutes long.
pub const MAX_SIZES: usize = 64;

/// The sizes a bench runs: every size of `--sizes`, each checked by `check` under that flag's name
/// (as the bench checks its single-size flag), none twice; or, without `--sizes`, the one `single`
/// size, checked under `single_flag`.
pub fn sizes(
    listed: &[usize],
    (single, single_flag): (usize, &str),
    check: impl Fn(&str, usize) -> Result<()>,
) -> Result<Vec<usize>> {
    if listed.is_empty() {
        check(single_flag, single)?;
        return Ok(vec![single]);
    }
    if listed.len() > MAX_SIZES {
        return Err(UsageError(format!(
            "--sizes lists {} sizes; at most {MAX_SIZES}",
            listed.len()
        ))
        .into());
    }
    for (i, &size) in listed.iter().enumerate() {
        if listed[..i].contains(&size) {
            return Err(UsageError(format!("--sizes lists {} twice", human(size as u64))).into());
        }
        check("--sizes", size)?;
    }
    Ok(listed.to_vec())
}

/// Refuses a `--plot` file that cannot be written, before the sweep runs rather than after it (a
/// file created to find out is removed again), and anything but a regular file: opening a FIFO
/// waits for a reader, and a device such as `/dev/full` takes the open and fails the write.
pub fn check_plot(plot: Option<&Path>) -> Result<()> {
    let Some(path) = plot else {
        return Ok(());
    };
    if let Ok(meta) = std::fs::metadata(path)
        && !meta.is_file()
    {
        return Err(UsageError(format!(
            "--plot {}: not a regular file (a directory, FIFO or device): the picture is written \
             as a file",
            path.display()
        ))
        .into());
    }
    let existed = path.exists();
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .map_err(|e| UsageError(format!("--plot {}: cannot write it: {e}", path.display())))?;
    if !existed {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// One step of a sweep: its round (from 1), its size, and its modes in the order they run.
pub type Step<M> = (u32, usize, Vec<M>);

/// Every size of every round, in order, each with `modes` in the order they run: `modes` as given
/// on the first step, reversed on the next, and so on across sizes and rounds. With one size this
/// is the benches' order of rounds: reversed on even rounds. Each step is made when it is due, so
/// that `--rounds 4294967295` costs no memory before its first run.
pub fn schedule<'a, M: Clone>(
    rounds: u32,
    sizes: &'a [usize],
    modes: &'a [M],
) -> impl Iterator<Item = Step<M>> + 'a {
    let steps = (1..=rounds).flat_map(|round| sizes.iter().map(move |&size| (round, size)));
    steps.enumerate().map(|(k, (round, size))| {
        let mut order = modes.to_vec();
        if k % 2 == 1 {
            order.reverse();
        }
        (round, size, order)
    })
}

/// Every (round, size, mode, api) of a bench of sends, in the order they run: the [`schedule`] of
/// `sizes` (one size: `modes` in order, reversed on even rounds), so that a noisy neighbour hits
/// every mode alike; the APIs of each mode side by side. `sendmmsg` always copies: it runs in copy
/// mode only.
pub fn sends<'a>(
    rounds: u32,
    sizes: &'a [usize],
    modes: &'a [Mode],
    apis: &'a [Api],
) -> impl Iterator<Item = (u32, usize, Mode, Api)> + 'a {
    schedule(rounds, sizes, modes).flat_map(move |(round, size, modes)| {
        modes.into_iter().flat_map(move |mode| {
            apis.iter()
                .filter(move |&&api| api != Api::Sendmmsg || mode == Mode::Copy)
                .map(move |&api| (round, size, mode, api))
        })
    })
}

/// A size as its flag would take it: `16K`, `1M`, or bytes when not a whole number of KiB.
pub fn human(size: u64) -> String {
    match size {
        0 => "0".into(),
        s if s % (1 << 20) == 0 => format!("{}M", s >> 20),
        s if s % (1 << 10) == 0 => format!("{}K", s >> 10),
        s => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_alternate_from_one_size_and_round_to_the_next() {
        let steps: Vec<_> = schedule(2, &[1024, 4096], &["copy", "zerocopy", "auto"]).collect();
        let orders: Vec<(u32, usize, &str)> =
            steps.iter().map(|(r, s, m)| (*r, *s, m[0])).collect();
        assert_eq!(
            orders,
            vec![
                (1, 1024, "copy"),
                (1, 4096, "auto"),
                (2, 1024, "copy"),
                (2, 4096, "auto")
            ]
        );
        // One size: reversed on even rounds.
        let one: Vec<_> = schedule(3, &[64], &[1, 2]).collect();
        assert_eq!(
            one.iter().map(|s| s.2.clone()).collect::<Vec<_>>(),
            vec![vec![1, 2], vec![2, 1], vec![1, 2]]
        );
    }

    #[test]
    fn the_largest_round_count_is_scheduled_step_by_step() {
        let first: Vec<_> = schedule(u32::MAX, &[1024, 4096], &[1, 2]).take(3).collect();
        assert_eq!(
            first,
            vec![
                (1, 1024, vec![1, 2]),
                (1, 4096, vec![2, 1]),
                (2, 1024, vec![1, 2])
            ]
        );
    }

    #[test]
    fn sizes_are_checked_under_the_flag_given() {
        let limit = |flag: &str, s: usize| crate::flags::at_most(flag, s as u64, 8192, "test");
        assert_eq!(sizes(&[], (4096, "--size"), limit).unwrap(), vec![4096]);
        assert!(
            sizes(&[], (9000, "--size"), limit)
                .unwrap_err()
                .to_string()
                .starts_with("--size 9000")
        );
        assert!(
            sizes(&[1024, 9000], (0, "--size"), limit)
                .unwrap_err()
                .to_string()
                .starts_with("--sizes 9000")
        );
        assert_eq!(
            sizes(&[1024, 2048, 1024], (0, "--size"), limit)
                .unwrap_err()
                .to_string(),
            "--sizes lists 1K twice"
        );
    }

    #[test]
    fn sizes_read_as_flags_take_them() {
        assert_eq!(human(1 << 20), "1M");
        assert_eq!(human(256 << 10), "256K");
        assert_eq!(human(1400), "1400");
    }
}
