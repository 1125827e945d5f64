//! Run: the words a run's row carries on why `--mode auto` sent the way it did, from the sender's [`AutoChoice`] and counters: a few words
//! for the table's "why" column, a sentence for the line under the table, and an object for JSON; and
//! the same words and object for the receiver's auto mode (`bench rx`, [`RxStats::auto`]).

use serde_json::{Value, json};
use zcnet::rx::{self, RxStats};
use zcnet::tx::{AutoChoice, AutoReason, Mode, TxStats};

/// The "why" column of a measured choice.
fn measured_short(mode: &str, zc_ns_per_kb: u64, copy_ns_per_kb: u64) -> String {
    format!("{mode}: zc {zc_ns_per_kb} copy {copy_ns_per_kb} us/MB")
}

/// The JSON object of a measured choice.
fn measured_json(mode: &str, zc_ns_per_kb: u64, copy_ns_per_kb: u64) -> Value {
    json!({
        "mode": mode,
        "reason": "cheaper_per_byte",
        "zc_ns_per_kb": zc_ns_per_kb,
        "copy_ns_per_kb": copy_ns_per_kb,
    })
}

/// The "why" column of `bench rx`: the way the receiver's auto mode chose and the deciding fact.
pub fn rx_short(s: &RxStats) -> Option<String> {
    let choice = s.auto?;
    let mode = choice.mode.name();
    Some(match choice.reason {
        rx::AutoReason::Refused => format!("{mode}: mapping refused"),
        rx::AutoReason::NothingMapped => format!("{mode}: nothing mapped"),
        rx::AutoReason::Unmeasured => format!("{mode}: unmeasured"),
        rx::AutoReason::CheaperPerByte {
            zc_ns_per_kb,
            copy_ns_per_kb,
        } => measured_short(mode, zc_ns_per_kb, copy_ns_per_kb),
        rx::AutoReason::Zcrx {
            copied_bytes,
            bytes,
        } => format!("{mode}: zcrx, kernel copied {copied_bytes} of {bytes} bytes"),
        other => format!("{mode}: {other:?}"),
    })
}

/// The receiver's choice as a JSON object: `{"mode", "reason"}` and, when measured, the two costs.
pub fn rx_choice_json(choice: &rx::AutoChoice) -> Value {
    let mode = choice.mode.name();
    let reason = match choice.reason {
        rx::AutoReason::CheaperPerByte {
            zc_ns_per_kb,
            copy_ns_per_kb,
        } => return measured_json(mode, zc_ns_per_kb, copy_ns_per_kb),
        rx::AutoReason::Refused => "refused",
        rx::AutoReason::NothingMapped => "nothing_mapped",
        rx::AutoReason::Unmeasured => "unmeasured",
        rx::AutoReason::Zcrx {
            copied_bytes,
            bytes,
        } => {
            return json!({"mode": mode, "reason": "zcrx", "copied_bytes": copied_bytes, "bytes": bytes});
        }
        other => return json!({"mode": mode, "reason": format!("{other:?}")}),
    };
    json!({"mode": mode, "reason": reason})
}

/// The "why" column: the mode auto chose and the deciding fact.
pub fn short(s: &TxStats) -> Option<String> {
    let choice = s.auto?;
    let mode = choice.mode.name();
    Some(match choice.reason {
        AutoReason::BelowThreshold => format!("{mode}: below --threshold"),
        AutoReason::Refused => format!("{mode}: zero-copy refused"),
        AutoReason::CopiedCompletions => format!("{mode}: kernel copied"),
        AutoReason::Unmeasured => format!("{mode}: kernel did not copy, cost not compared"),
        AutoReason::CheaperPerByte {
            zc_ns_per_kb,
            copy_ns_per_kb,
        } => measured_short(mode, zc_ns_per_kb, copy_ns_per_kb),
        other => format!("{mode}: {other:?}"),
    })
}

/// The line under the table (and the JSON `auto_reason`).
pub fn sentence(s: &TxStats) -> Option<String> {
    let choice = s.auto?;
    let share = |n: u64| 100.0 * n as f64 / s.calls.max(1) as f64;
    let mut text = match choice.reason {
        AutoReason::BelowThreshold => "copied: every send is below --threshold".to_string(),
        AutoReason::Refused => format!(
            "copied: zero-copy was refused (the socket has no SO_ZEROCOPY, or a send is larger \
             than one zero-copy send may be); {:.1}% of sends copied for it",
            share(s.copy_unsupported)
        ),
        AutoReason::CopiedCompletions => format!(
            "copied {:.1}% of sends: completions said the kernel copies on this path ({} copied \
             ids, {} switches to copy, re-probing at growing intervals)",
            share(s.copy_copied),
            s.copied_ids,
            s.policy_switches
        ),
        AutoReason::Unmeasured => format!(
            "zero-copy: completions were not copied ({} zero-copied ids) and no comparison of \
             the CPU cost per byte finished",
            s.zc_ids
        ),
        AutoReason::CheaperPerByte {
            zc_ns_per_kb,
            copy_ns_per_kb,
        } => {
            let (chosen, other, name) = match choice.mode {
                Mode::Copy => (copy_ns_per_kb, zc_ns_per_kb, "copy"),
                _ => (zc_ns_per_kb, copy_ns_per_kb, "zero-copy"),
            };
            let verdict = if chosen <= other {
                format!("{name}: it cost the sending thread less CPU per byte")
            } else {
                format!(
                    "{name}, kept: the other mode was not ~3% cheaper in two comparisons in a row"
                )
            };
            format!(
                "{verdict} (zero-copy {zc_ns_per_kb}, copy {copy_ns_per_kb} us/MB in the last of \
                 {} comparisons); {:.1}% of sends zero-copy, {:.1}% copied as cheaper",
                s.cost_comparisons,
                share(s.zc_calls),
                share(s.copy_cheaper)
            )
        }
        other => format!("{}: {other:?}", choice.mode.name()),
    };
    if s.copy_memlock > 0 {
        text.push_str(&format!(
            "; {:.1}% copied for want of locked memory (RLIMIT_MEMLOCK)",
            share(s.copy_memlock)
        ));
    }
    if s.copy_enobufs > 0 {
        text.push_str(&format!(
            "; {:.1}% copied while backing off after ENOBUFS",
            share(s.copy_enobufs)
        ));
    }
    Some(text)
}

/// The choice as a JSON object: `{"mode", "reason"}` and, when measured, the two costs.
pub fn choice_json(choice: &AutoChoice) -> Value {
    let mode = choice.mode.name();
    match choice.reason {
        AutoReason::CheaperPerByte {
            zc_ns_per_kb,
            copy_ns_per_kb,
        } => measured_json(mode, zc_ns_per_kb, copy_ns_per_kb),
        other => json!({
            "mode": mode,
            "reason": match other {
                AutoReason::BelowThreshold => "below_threshold",
                AutoReason::Refused => "refused",
                AutoReason::CopiedCompletions => "copied_completions",
                _ => "unmeasured",
            },
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(mode: Mode, reason: AutoReason) -> TxStats {
        let mut s = TxStats::default();
        s.calls = 100;
        s.zc_calls = 10;
        s.copy_cheaper = 90;
        s.cost_comparisons = 3;
        s.auto = Some(AutoChoice { mode, reason });
        s
    }

    #[test]
    fn measured_choice_names_both_costs() {
        let s = stats(
            Mode::Copy,
            AutoReason::CheaperPerByte {
                zc_ns_per_kb: 680,
                copy_ns_per_kb: 620,
            },
        );
        assert_eq!(short(&s).unwrap(), "copy: zc 680 copy 620 us/MB");
        assert_eq!(
            sentence(&s).unwrap(),
            "copy: it cost the sending thread less CPU per byte (zero-copy 680, copy 620 us/MB in \
             the last of 3 comparisons); 10.0% of sends zero-copy, 90.0% copied as cheaper"
        );
        let kept = stats(
            Mode::ZeroCopy,
            AutoReason::CheaperPerByte {
                zc_ns_per_kb: 630,
                copy_ns_per_kb: 620,
            },
        );
        assert!(sentence(&kept).unwrap().starts_with("zero-copy, kept:"));
        assert_eq!(
            choice_json(&kept.auto.unwrap()),
            json!({"mode": "zerocopy", "reason": "cheaper_per_byte", "zc_ns_per_kb": 630,
                   "copy_ns_per_kb": 620})
        );
    }

    #[test]
    fn an_unmeasured_choice_says_what_was_not_done() {
        let s = stats(Mode::ZeroCopy, AutoReason::Unmeasured);
        assert_eq!(
            short(&s).unwrap(),
            "zerocopy: kernel did not copy, cost not compared"
        );
    }

    #[test]
    fn every_reason_has_words() {
        for reason in [
            AutoReason::BelowThreshold,
            AutoReason::Refused,
            AutoReason::CopiedCompletions,
            AutoReason::Unmeasured,
        ] {
            let s = stats(Mode::Copy, reason);
            assert!(short(&s).unwrap().starts_with("copy: "));
            assert!(!sentence(&s).unwrap().is_empty());
            assert_eq!(choice_json(&s.auto.unwrap())["mode"], "copy");
        }
        assert_eq!(short(&TxStats::default()), None);
    }

    #[test]
    fn the_receivers_choice_has_words_and_an_object() {
        let mut s = RxStats::default();
        assert_eq!(rx_short(&s), None);
        s.auto = Some(rx::AutoChoice {
            mode: zcnet::rx::RxMode::Copy,
            reason: rx::AutoReason::CheaperPerByte {
                zc_ns_per_kb: 140,
                copy_ns_per_kb: 80,
            },
        });
        assert_eq!(rx_short(&s).unwrap(), "copy: zc 140 copy 80 us/MB");
        assert_eq!(
            rx_choice_json(&s.auto.unwrap()),
            json!({"mode": "copy", "reason": "cheaper_per_byte", "zc_ns_per_kb": 140,
                   "copy_ns_per_kb": 80})
        );
        for (reason, words, name) in [
            (rx::AutoReason::Refused, "copy: mapping refused", "refused"),
            (
                rx::AutoReason::NothingMapped,
                "copy: nothing mapped",
                "nothing_mapped",
            ),
        ] {
            let choice = rx::AutoChoice {
                mode: zcnet::rx::RxMode::Copy,
                reason,
            };
            s.auto = Some(choice);
            assert_eq!(rx_short(&s).unwrap(), words);
            assert_eq!(rx_choice_json(&choice)["reason"], name);
        }
    }
}
