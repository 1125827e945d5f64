//! PASS/FAIL/SKIP lines, the only output vm/run-suite judges: one line per check, `PASS <suite> <check>: …`.

/// The checks of one suite, printed as they are made.
#[derive(Debug)]
pub struct Outcome {
    suite: &'static str,
    failures: usize,
}

impl Outcome {
    /// A suite named `suite` with nothing checked yet.
    pub fn new(suite: &'static str) -> Outcome {
        Outcome { suite, failures: 0 }
    }

    /// Prints a PASS line for `check` when `ok`, a FAIL line otherwise.
    pub fn check(&mut self, check: &str, ok: bool, what: &str) {
        if ok {
            println!("PASS {} {check}: {what}", self.suite);
        } else {
            self.fail(check, what);
        }
    }

    /// Prints a FAIL line for `check`.
    pub fn fail(&mut self, check: &str, what: &str) {
        self.failures += 1;
        println!("FAIL {} {check}: {what}", self.suite);
    }

    /// Prints a SKIP line: the kernel or driver lacks what `check` needs. Goes through
    /// [`testnet::skip`], which fails it under `ZCNET_PRIV_TESTS=1` unless it is on the allow-list.
    pub fn skip(&self, check: &str, why: &str) {
        testnet::skip(&format!("{} {check}", self.suite), why);
    }

    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.failures == 0
    }
}
