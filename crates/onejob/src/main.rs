//! The `onejob` binary: everything happens in [`onejob::cli`]; errors are printed as one
//! readable chain (`onejob: what failed: why`) with exit code 1.

use std::process::ExitCode;

fn main() -> ExitCode {
    match onejob::cli::run() {
        Ok(code) => code,
        Err(error) => {
            eprintln!("onejob: {}", onejob::store::Chain(error.as_ref()));
            ExitCode::FAILURE
        }
    }
}
