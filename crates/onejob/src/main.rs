//! The `onejob` binary: everything happens in [`onejob::cli`].

fn main() -> anyhow::Result<()> {
    onejob::cli::run()
}
