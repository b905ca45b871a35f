//! The `onejob` binary: everything happens in [`onejob::cli`].

fn main() -> anyhow::Result<std::process::ExitCode> {
    onejob::cli::run()
}
