//! The release artifacts (`scripts/release.sh`), built around this test build's binary: the
//! tarball holds what it says, its SHA-256 checks, `cargo binstall`'s metadata finds the
//! binary in it, and the Debian package installs on this machine (`dpkg -i`: as root, as
//! CI runs), runs (`onejob demo --exit`, `onejob config check` on the packaged config,
//! units pointing at `/usr/bin/onejob`, a `onejob` system user), and is removed again.

use std::{path::Path, process::Command};

use crate::{cli::output, docs::repository};

/// Runs `program args` to its end: exit code and what it printed (both streams).
fn run(program: &str, args: &[&str], dir: &Path) -> (i32, String) {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), said)
}

/// `{ name }`-style placeholders of `template` filled in from `values`.
fn fill(template: &str, values: &[(&str, &str)]) -> String {
    values
        .iter()
        .fold(template.to_owned(), |text, (key, value)| {
            text.replace(&format!("{{ {key} }}"), value)
        })
}

#[tokio::test]
async fn the_release_tarball_and_deb_install_run_and_go_away() {
    let dist = tempfile::tempdir().unwrap();
    let binary = env!("CARGO_BIN_EXE_onejob");
    let (code, said) = run(
        "scripts/release.sh",
        &["--binary", binary, "--out", dist.path().to_str().unwrap()],
        &repository(),
    );
    assert_eq!(code, 0, "{said}");
    let version = env!("CARGO_PKG_VERSION");
    let tarball = said
        .lines()
        .find(|line| line.ends_with(".tar.gz"))
        .unwrap_or_else(|| panic!("the tarball's path: {said}"))
        .to_owned();
    let deb = format!("{}/onejob_{version}-1_amd64.deb", dist.path().display());
    assert!(said.contains(&deb), "{said}");

    // Both checksums hold.
    let (code, checked) = run(
        "sha256sum",
        &[
            "-c",
            &format!("{tarball}.sha256"),
            "-c",
            &format!("{deb}.sha256"),
        ],
        dist.path(),
    );
    assert_eq!(code, 0, "{checked}");

    // The tarball: binary, units, config, completions, licences, where binstall looks.
    let (code, listing) = run("tar", &["tzf", &tarball], dist.path());
    assert_eq!(code, 0, "{listing}");
    let name = Path::new(&tarball)
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .trim_end_matches(".tar.gz")
        .to_owned();
    let target = name
        .strip_prefix(&format!("onejob-{version}-"))
        .unwrap()
        .to_owned();
    for entry in [
        "onejob",
        "onejob.toml",
        "systemd/onejob-api.service",
        "systemd/onejob-worker.service",
        "completions/onejob.bash",
        "completions/_onejob",
        "completions/onejob.fish",
        "LICENSE-APACHE",
        "LICENSE-MIT",
        "README.md",
    ] {
        assert!(
            listing
                .lines()
                .any(|line| line == format!("{name}/{entry}")),
            "{entry} in {listing}"
        );
    }
    let manifest: toml::Table =
        std::fs::read_to_string(repository().join("crates/onejob/Cargo.toml"))
            .unwrap()
            .parse()
            .unwrap();
    let binstall = &manifest["package"]["metadata"]["binstall"];
    let values = [
        ("name", "onejob"),
        ("version", version),
        ("target", target.as_str()),
        ("bin", "onejob"),
        ("binary-ext", ""),
        ("repo", "https://github.com/onejob/onejob"),
    ];
    let url = fill(binstall["pkg-url"].as_str().unwrap(), &values);
    assert!(
        url.ends_with(&format!("/v{version}/{name}.tar.gz")),
        "{url}"
    );
    let bin_dir = fill(binstall["bin-dir"].as_str().unwrap(), &values);
    assert!(
        listing.lines().any(|line| line == bin_dir),
        "{bin_dir} in {listing}"
    );

    // The Debian package, on this machine.
    let root = run("id", &["-u"], dist.path()).1.trim() == "0";
    assert!(
        root,
        "installing the .deb needs root (dpkg -i), as CI runs the tests; run this test as root"
    );
    let (installed, _) = run("dpkg", &["-s", "onejob"], dist.path());
    assert_ne!(
        installed, 0,
        "a onejob package is installed here already; this test installs and purges its own \
         (dpkg --purge onejob first)"
    );
    let (code, said) = run("dpkg", &["-i", &deb], dist.path());
    assert_eq!(code, 0, "{said}");
    let outcome = std::panic::AssertUnwindSafe(async {
        assert_eq!(
            run("getent", &["passwd", "onejob"], dist.path()).0,
            0,
            "the user"
        );
        let unit = std::fs::read_to_string("/lib/systemd/system/onejob-worker.service").unwrap();
        assert!(unit.contains("ExecStart=/usr/bin/onejob worker"), "{unit}");
        let (code, said) = run(
            "/usr/bin/onejob",
            &["config", "check", "--config", "/etc/onejob/onejob.toml"],
            dist.path(),
        );
        assert_eq!(code, 0, "{said}");
        assert!(said.contains("ok: the configuration is valid"), "{said}");
        let demo = tempfile::tempdir().unwrap();
        let (code, stdout, stderr) = output(
            tokio::process::Command::new("/usr/bin/onejob")
                .args(["demo", "--exit", "--listen", "127.0.0.1:0", "--dir"])
                .arg(demo.path()),
        )
        .await;
        assert_eq!(code, 0, "{stdout}{stderr}");
        assert!(stdout.contains("done (--exit)"), "{stdout}");
    });
    let result = futures::FutureExt::catch_unwind(outcome).await;
    let (code, said) = run("dpkg", &["--purge", "onejob"], dist.path());
    assert_eq!(code, 0, "{said}");
    assert!(!Path::new("/usr/bin/onejob").exists(), "removed");
    assert!(!Path::new("/etc/onejob/onejob.toml").exists(), "purged");
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
