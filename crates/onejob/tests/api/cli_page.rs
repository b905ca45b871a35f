//! The sessions of `docs/cli.md`, run as written.
//!
//! * The `submit --wait` and `watch` transcript, against `onejob serve` with no
//!   configuration: each command must succeed and print every line the page shows that
//!   carries no sample id.
//! * The `keys list` / `keys revoke` transcript, on a config file's SQLite database, the
//!   sample key id replaced by a real one.
//! * The `config check` transcript, from the repository's root: each command prints every
//!   line the page shows.
//! * The completions block, with `HOME` in a temporary directory: each script is written,
//!   and bash completes `onejob ser` to `serve` with it.
//! * The synopsis: every command it lists answers `--help`.
//!
//! The only changes are the ones a reader makes: the server's address (a free port instead
//! of 8080), `ONEJOB_API_KEY` set to the key the server printed (the line that sets it to the
//! sample value is skipped), and the sample job id replaced by the real one.

use crate::{
    cli::serve_demo,
    docs::{blocks, commands, repository, section},
    readme::{SAMPLE_JOB, Shell},
};

const PAGE: &str = "docs/cli.md";

/// Every line `shown` (a transcript's output lines, up to the next command) must be a line
/// of `printed`, but those carrying a sample id or an ellipsis.
fn prints_every_line(shown: &[&str], printed: &str, command: &str) {
    for line in shown {
        if line.contains(SAMPLE_JOB) || line.contains('…') {
            continue;
        }
        assert!(
            printed.lines().any(|p| p.trim_end() == line.trim_end()),
            "{PAGE} shows {line:?} after\n{command}\nbut it printed\n{printed}"
        );
    }
}

/// A transcript's commands, each with the lines shown after it.
fn steps(block: &str) -> Vec<(String, Vec<&str>)> {
    let mut steps: Vec<(String, Vec<&str>)> = Vec::new();
    for line in block.lines() {
        match line.strip_prefix("$ ") {
            Some(command) => steps.push((command.to_owned(), Vec::new())),
            None => steps.last_mut().expect("a command first").1.push(line),
        }
    }
    steps
}

#[tokio::test]
async fn the_submit_and_watch_session_prints_as_shown() {
    let section = section(PAGE, "## Talking to a running onejob");
    let block = blocks(&section, "text")
        .into_iter()
        .find(|block| block.contains("| onejob submit"))
        .expect("the page shows a submit session");
    let dir = tempfile::tempdir().unwrap();
    let (mut server, url, key) = serve_demo(dir.path()).await;
    let mut job = String::new();
    let mut ran = 0;
    for (index, line) in block.lines().enumerate() {
        let Some(command) = line.strip_prefix("$ ") else {
            continue;
        };
        if command.starts_with("export ONEJOB_API_KEY=") {
            continue;
        }
        let command = command.replace(SAMPLE_JOB, &job);
        let mut shell = Shell::new(dir.path());
        shell.vars.insert("ONEJOB_URL".into(), url.clone());
        shell.vars.insert("ONEJOB_API_KEY".into(), key.clone());
        let out = shell.run(&command).await;
        let printed = format!("{}{}", out.stderr, out.stdout);
        assert!(out.ok, "{command}\n{printed}");
        if job.is_empty() {
            job = printed
                .split_whitespace()
                .map(|word| word.trim_end_matches(';'))
                .find(|word| word.len() == 36 && word.matches('-').count() == 4)
                .map(str::to_owned)
                .unwrap_or_default();
        }
        // The lines shown after this command, up to the next one.
        let shown: Vec<&str> = block
            .lines()
            .skip(index + 1)
            .take_while(|line| !line.starts_with("$ "))
            .collect();
        prints_every_line(&shown, &printed, &command);
        ran += 1;
    }
    assert!(!job.is_empty() && ran >= 2, "ran {ran} commands");
    let _ = server.kill().await;
}

/// The key id the README's `keys` sample shows.
const SAMPLE_KEY_ID: &str = "3f9c1e0a7b2d4c58";

#[tokio::test]
async fn the_keys_session_prints_as_shown() {
    let section = section(PAGE, "## Keys");
    let block = blocks(&section, "text")
        .into_iter()
        .find(|block| block.contains("$ onejob keys list"))
        .expect("the page shows a keys session");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("onejob.toml"),
        "database = \"sqlite://keys.db\"\n",
    )
    .unwrap();
    let shell = Shell::new(dir.path());
    // The keys commands refuse a database that does not exist yet: it is made first.
    let migrated = shell.run("onejob migrate --config onejob.toml").await;
    assert!(migrated.ok, "{}", migrated.stderr);
    let created = shell
        .run("onejob keys create --config onejob.toml --tenant acme --user alice")
        .await;
    assert!(created.ok, "{}", created.stderr);
    let id = created
        .stdout
        .trim()
        .split('_')
        .nth(1)
        .expect("oj_ID_SECRET")
        .to_owned();
    let mut ran = 0;
    for (index, line) in block.lines().enumerate() {
        let Some(command) = line.strip_prefix("$ ") else {
            continue;
        };
        let command = command.replace(SAMPLE_KEY_ID, &id);
        let out = shell.run(&command).await;
        let stdout = out.stdout;
        assert!(out.ok, "{command}\n{stdout}{}", out.stderr);
        for shown in block.lines().skip(index + 1) {
            if shown.starts_with("$ ") {
                break;
            }
            // The creation time is the run's own.
            if shown.contains("T10:00:00Z") {
                assert!(stdout.lines().any(|line| line.starts_with(&id)
                    && line.contains("acme")
                    && line.contains("alice")));
                continue;
            }
            let shown = shown.replace(SAMPLE_KEY_ID, &id);
            assert!(
                stdout
                    .lines()
                    .any(|line| line.trim_end() == shown.trim_end()),
                "{PAGE} shows {shown:?} after\n{command}\nbut it printed\n{stdout}"
            );
        }
        ran += 1;
    }
    assert_eq!(ran, 2, "keys list and keys revoke");
}

#[tokio::test]
async fn the_config_check_session_prints_as_shown() {
    let section = section(PAGE, "## Checking a config file");
    let [block] = &blocks(&section, "text")[..] else {
        panic!("one transcript in the config check section");
    };
    let shell = Shell::new(&repository());
    let mut ran = 0;
    for (command, shown) in steps(block) {
        let out = shell.run(&command).await;
        let printed = format!("{}{}", out.stdout, out.stderr);
        assert!(out.ok, "{command}\n{printed}");
        prints_every_line(&shown, &printed, &command);
        ran += 1;
    }
    assert!(ran >= 3, "ran {ran} commands");
}

#[tokio::test]
async fn the_completions_block_installs_scripts_that_complete() {
    let section = section(PAGE, "## Shell completions");
    let [block] = &blocks(&section, "sh")[..] else {
        panic!("one sh block in the completions section");
    };
    let home = tempfile::tempdir().unwrap();
    let mut shell = Shell::new(home.path());
    shell
        .vars
        .insert("HOME".into(), home.path().display().to_string());
    for command in commands(block) {
        let out = shell.run(&command).await;
        assert!(out.ok, "{command}\n{}{}", out.stdout, out.stderr);
    }
    for file in [
        ".local/share/bash-completion/completions/onejob",
        ".zfunc/_onejob",
        ".config/fish/completions/onejob.fish",
    ] {
        let script = std::fs::read_to_string(home.path().join(file)).unwrap();
        assert!(
            script.contains("serve") && script.contains("no-worker"),
            "{file}"
        );
    }
    // Bash completes a subcommand with the script, as a new shell would.
    let completed = shell
        .run(
            "source ~/.local/share/bash-completion/completions/onejob; \
             COMP_WORDS=(onejob ser); COMP_CWORD=1; COMP_LINE='onejob ser'; COMP_POINT=10; \
             _onejob onejob ser onejob; echo \"${COMPREPLY[@]}\"",
        )
        .await;
    assert!(completed.ok, "{}", completed.stderr);
    assert_eq!(completed.stdout.trim(), "serve", "{}", completed.stdout);
}

#[tokio::test]
async fn every_command_of_the_synopsis_answers_help() {
    let synopsis = blocks(&crate::docs::page(PAGE), "text").remove(0);
    let shell = Shell::new(&repository());
    let mut checked = 0;
    for line in synopsis.lines() {
        // The command's words up to its first argument or option.
        let words: Vec<&str> = line
            .split_whitespace()
            .take_while(|word| word.chars().all(|c| c.is_ascii_lowercase()))
            .collect();
        assert_eq!(words.first(), Some(&"onejob"), "{line}");
        let help = format!("{} --help", words.join(" "));
        let out = shell.run(&help).await;
        assert!(
            out.ok && out.stdout.contains("Usage:"),
            "{help}\n{}",
            out.stderr
        );
        checked += 1;
    }
    assert!(checked >= 16, "checked {checked} commands");
}
