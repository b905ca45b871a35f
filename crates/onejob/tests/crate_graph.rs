//! The crate graph CONTRIBUTING.md draws ("Architecture") is the workspace's: every
//! workspace crate's normal dependencies on other workspace crates, read from `cargo
//! metadata`, are exactly the edges the picture shows. A new edge (or one gone) fails here
//! until the picture says so.

use std::{
    collections::{BTreeMap, BTreeSet},
    process::Command,
};

/// The edges the picture draws: `crate -> dependency, …` lines in its ```text block.
fn drawn() -> BTreeMap<String, BTreeSet<String>> {
    let contributing = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../CONTRIBUTING.md"
    ))
    .unwrap();
    let section = contributing
        .split("## Architecture")
        .nth(1)
        .expect("CONTRIBUTING.md has an Architecture section");
    let picture = section
        .split("```text\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the Architecture section draws the crates in a ```text block");
    picture
        .lines()
        .filter_map(|line| {
            let name = line.split_whitespace().next()?;
            let deps = line
                .split_once("->")
                .map(|(_, deps)| {
                    deps.split(',')
                        .map(|dep| dep.trim().to_owned())
                        .filter(|dep| !dep.is_empty())
                        .collect()
                })
                .unwrap_or_default();
            Some((name.to_owned(), deps))
        })
        .collect()
}

/// The workspace's edges, by `cargo metadata`.
fn actual() -> BTreeMap<String, BTreeSet<String>> {
    let output = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(output.status.success(), "{output:?}");
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let packages = metadata["packages"].as_array().unwrap();
    let members: BTreeSet<&str> = packages
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    packages
        .iter()
        .map(|package| {
            let deps = package["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|dep| dep["kind"].is_null())
                .map(|dep| dep["name"].as_str().unwrap())
                .filter(|name| members.contains(name))
                .map(str::to_owned)
                .collect();
            (package["name"].as_str().unwrap().to_owned(), deps)
        })
        .collect()
}

#[test]
fn the_crate_graph_in_contributing_is_the_workspaces() {
    assert_eq!(
        drawn(),
        actual(),
        "CONTRIBUTING.md's Architecture picture and `cargo metadata` disagree"
    );
}
