//! A row's per-send latency (`--latency`): the sender's [`zcnet::tx::TxLatency`] as the row's
//! `latency` object, each step's p50, p99 and max in microseconds from the send call.

use serde_json::{Value, json};
use zcnet::tx::{Histogram, TxLatency};

/// Microseconds of a quantile, `None` when nothing was recorded.
fn us(d: Option<std::time::Duration>) -> Option<f64> {
    d.map(|d| d.as_secs_f64() * 1e6)
}

fn step(h: &Histogram) -> Value {
    json!({
        "count": h.count(),
        "p50_us": us(h.p50()),
        "p99_us": us(h.p99()),
        "max_us": us(h.max()),
    })
}

/// A row's `latency` object: the sends joined, timestamps matched to none, and each step measured
/// from the send call.
pub(crate) fn json(l: &TxLatency) -> Value {
    let mut v = json!({"sends": l.sends, "unmatched": l.unmatched});
    for (name, h) in l.steps() {
        v[name] = step(h);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_latency_has_every_step_at_zero() {
        let v = json(&TxLatency::default());
        assert_eq!(v["sends"], 0);
        assert_eq!(v["acked"]["count"], 0);
        assert_eq!(v["freed"]["p50_us"], Value::Null);
    }
}
