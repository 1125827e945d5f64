//! `zcnet probe`: what this host supports, each feature measured, as a table or JSON; with
//! `--measure`, also whether zero-copy pays on each path ([`crate::probe::measure`]).

pub(crate) mod measure;
pub(crate) mod verdict;

use serde_json::json;
use zcnet::probe::{Finding, ProbeOptions, probe};

use crate::report::{Row, object, print_rows};

/// Options of `zcnet probe`.
#[derive(Debug, clap::Args)]
pub struct ProbeArgs {
    /// Print one JSON object (kernel, features) instead of a table.
    #[arg(long)]
    json: bool,
    /// Describe only this interface (repeatable); default: every interface of this namespace.
    #[arg(long = "iface", value_name = "NAME")]
    ifaces: Vec<String>,
    /// Also try an AF_XDP XDP_ZEROCOPY bind on queue 0 of each --iface (briefly reconfigures that
    /// queue: only for interfaces you own).
    #[arg(long, requires = "ifaces")]
    try_xsk_bind: bool,
    /// Also measure, path by path, whether zero-copy costs less CPU than copying on this host: a
    /// short side-by-side bench of each (about 15 s in all).
    #[arg(long)]
    measure: bool,
}

fn row(f: &Finding) -> Row {
    let v = json!({
        "feature": f.feature,
        "iface": f.iface,
        "support": f.support.to_string(),
        "reason": f.reason,
    });
    object(v)
}

/// Runs the probe and prints it. Missing features are findings, not failures: exit status 0.
pub fn run(args: ProbeArgs) -> anyhow::Result<()> {
    let mut opts = ProbeOptions::default();
    opts.ifaces = (!args.ifaces.is_empty()).then_some(args.ifaces);
    opts.try_xsk_bind = args.try_xsk_bind;
    let findings = probe(&opts);
    let rows: Vec<Row> = findings.iter().map(row).collect();
    let measured = args.measure.then(crate::probe::measure::run).transpose()?;
    if args.json {
        let kernel = findings
            .iter()
            .find(|f| f.feature == "kernel")
            .map(|f| f.reason.clone());
        let mut report = json!({ "kernel": kernel, "features": rows });
        if let Some(measured) = measured {
            report["measure"] = measured;
        }
        crate::report::emit(&format!("{report}\n"));
    } else {
        print_rows(
            &rows,
            &[
                ("feature", "FEATURE"),
                ("iface", "IFACE"),
                ("support", "SUPPORT"),
                ("reason", "REASON"),
            ],
            false,
        );
        if let Some(measured) = &measured {
            crate::probe::measure::print(measured);
        }
    }
    Ok(())
}
