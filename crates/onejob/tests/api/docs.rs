//! Reading the user docs the tests run: a page of the repository (`README.md`,
//! `docs/cli.md`, …), one section of it, its fenced blocks, and the substitutions a reader on
//! another machine makes (each must find its text, so a page that drifts fails its test).

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

/// The repository's root.
pub(crate) fn repository() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// The text of the page at `path`, relative to the repository's root.
pub(crate) fn page(path: &str) -> String {
    std::fs::read_to_string(repository().join(path)).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

/// The section of the page at `path` whose heading line starts with `heading` (`## Keys`),
/// up to the next heading of the same level or above.
pub(crate) fn section(path: &str, heading: &str) -> String {
    let text = page(path);
    let start = text
        .find(&format!("\n{heading}"))
        .unwrap_or_else(|| panic!("{path} has a section {heading:?}"));
    let rest = &text[start + 1..];
    let level = heading.chars().take_while(|c| *c == '#').count();
    let end = rest
        .match_indices('\n')
        .map(|(at, _)| at + 1)
        .find(|&at| {
            let hashes = rest[at..].chars().take_while(|c| *c == '#').count();
            (1..=level).contains(&hashes) && rest[at + hashes..].starts_with(' ')
        })
        .unwrap_or(rest.len());
    rest[..end].to_owned()
}

/// Every fenced block of `text`, in order: its info string and its lines.
pub(crate) fn fenced(text: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in text.lines() {
        match &mut current {
            None => {
                if let Some(lang) = line.trim_end().strip_prefix("```") {
                    current = Some((lang.to_owned(), String::new()));
                }
            }
            Some(_) if line.trim_end() == "```" => found.push(current.take().unwrap()),
            Some((_, block)) => {
                block.push_str(line);
                block.push('\n');
            }
        }
    }
    found
}

/// The fenced blocks of `text` whose info string is `lang`, in order.
pub(crate) fn blocks(text: &str, lang: &str) -> Vec<String> {
    fenced(text)
        .into_iter()
        .filter(|(info, _)| info == lang)
        .map(|(_, block)| block)
        .collect()
}

/// `text` with `from` replaced by `to`; `from` must be there.
pub(crate) fn substitute(text: &str, from: &str, to: &str) -> String {
    assert!(
        text.contains(from),
        "the page's text no longer contains {from:?}"
    );
    text.replace(from, to)
}

/// The commands of a shell block, one per entry: continuation lines (ending `\`) joined,
/// blank lines and whole-line comments left out.
pub(crate) fn commands(block: &str) -> Vec<String> {
    let mut commands: Vec<String> = Vec::new();
    let mut continuing = false;
    for line in block.lines() {
        if continuing {
            let last = commands
                .last_mut()
                .expect("a command before its continuation");
            last.push('\n');
            last.push_str(line);
        } else if !line.trim().is_empty() && !line.trim_start().starts_with('#') {
            commands.push(line.to_owned());
        }
        continuing = line.ends_with('\\');
    }
    commands
}

/// A free loopback port (bound and released: a reader's "another port").
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A page's shell walk-through run as one script, as a reader runs it in one shell: with
/// `onejob` and `onejob-fake` of this build first on its `PATH`, in its own process group
/// (so that [`Walkthrough::stop`] ends the nodes it started in the background), its output
/// in files rather than pipes (those nodes outlive the script).
pub(crate) struct Walkthrough {
    group: u32,
    /// How the script ended: `None` if it still ran after two minutes.
    pub(crate) status: Option<std::process::ExitStatus>,
    out: tempfile::TempDir,
}

impl Walkthrough {
    /// Runs `script` in `cwd` with `env` set (and `ONEJOB_CONFIG` unset), until it ends or
    /// two minutes pass; what it started in the background keeps running.
    pub(crate) async fn run(script: &str, cwd: &Path, env: &[(&str, String)]) -> Walkthrough {
        let out = tempfile::tempdir().unwrap();
        let path = std::env::join_paths(std::iter::once(crate::deployment::binaries()).chain(
            std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
        ))
        .unwrap();
        let mut command = tokio::process::Command::new("bash");
        command
            .args(["-euo", "pipefail", "-c", script])
            .current_dir(cwd)
            .env("PATH", path)
            .env_remove("ONEJOB_CONFIG")
            .env("RUST_LOG", "warn")
            .stdin(std::process::Stdio::null())
            .stdout(std::fs::File::create(out.path().join("stdout")).unwrap())
            .stderr(std::fs::File::create(out.path().join("stderr")).unwrap())
            .process_group(0)
            .kill_on_drop(true);
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("run bash");
        let group = child.id().expect("script pid");
        let status = tokio::time::timeout(Duration::from_secs(120), child.wait())
            .await
            .ok()
            .map(|status| status.expect("wait for bash"));
        Walkthrough { group, status, out }
    }

    /// Ends every process the script started (SIGTERM to its group).
    pub(crate) fn stop(&self) {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", "--", &format!("-{}", self.group)])
            .status();
    }

    /// What it printed on stdout.
    pub(crate) fn stdout(&self) -> String {
        std::fs::read_to_string(self.out.path().join("stdout")).unwrap()
    }

    /// Both outputs, for a failure's message.
    pub(crate) fn context(&self) -> String {
        let stderr = std::fs::read_to_string(self.out.path().join("stderr")).unwrap();
        format!("stdout:\n{}\nstderr:\n{stderr}", self.stdout())
    }

    /// Asserts that the script ended, successfully.
    pub(crate) fn assert_succeeded(&self, what: &str) {
        let status = self
            .status
            .unwrap_or_else(|| panic!("{what} finished within 2 minutes\n{}", self.context()));
        assert!(status.success(), "{what} failed\n{}", self.context());
    }
}

/// The user docs whose links are checked.
const LINKED: [&str; 6] = [
    "README.md",
    "CONTRIBUTING.md",
    "CHANGELOG.md",
    "RELIABILITY.md",
    "BENCHMARKS.md",
    "bench/journal.md",
];

/// The text of a page outside its fenced blocks.
fn prose(text: &str) -> String {
    let mut fenced = false;
    let mut kept = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    kept
}

/// The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces to
/// hyphens.
fn anchors(text: &str) -> Vec<String> {
    prose(text)
        .lines()
        .filter_map(|line| {
            line.trim_start_matches('#')
                .strip_prefix(' ')
                .filter(|_| line.starts_with('#'))
        })
        .map(|heading| {
            heading
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
                .map(|c| if c == ' ' { '-' } else { c })
                .collect()
        })
        .collect()
}

/// Every relative link of the user docs names a file of the repository, and every `#anchor`
/// a heading of its page: pages moved between README.md and docs/ leave no dead end.
#[test]
fn every_link_between_the_docs_resolves() {
    let mut pages: Vec<String> = LINKED.iter().map(|page| (*page).to_owned()).collect();
    for entry in std::fs::read_dir(repository().join("docs")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") {
            pages.push(format!("docs/{name}"));
        }
    }
    let mut checked = 0;
    for page_path in &pages {
        let text = prose(&page(page_path));
        let dir = Path::new(page_path).parent().unwrap();
        for (at, _) in text.match_indices("](") {
            let link: String = text[at + 2..].chars().take_while(|c| *c != ')').collect();
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = link.split_once('#').unwrap_or((&link, ""));
            let target = if path.is_empty() {
                PathBuf::from(page_path)
            } else {
                dir.join(path)
            };
            let file = repository().join(&target);
            assert!(
                file.exists(),
                "{page_path} links {link}: no {}",
                target.display()
            );
            if !anchor.is_empty() && path.ends_with(".md") || path.is_empty() && !anchor.is_empty()
            {
                let headings = anchors(&std::fs::read_to_string(&file).unwrap());
                assert!(
                    headings.iter().any(|heading| heading == anchor),
                    "{page_path} links {link}: no heading #{anchor} in {}",
                    target.display()
                );
            }
            checked += 1;
        }
    }
    assert!(checked > 50, "checked {checked} links");
}
