//! The service crate's top-level modules (`src/kind/`, `src/gateway/`, `src/worker/`, …)
//! import one another without a circle: each concept lives where its dependents reach it
//! downward, so any module can be read, tested and moved with only what is below it. A
//! module's imports are its `crate::name` paths (also inside `use crate::{…}`), comments
//! aside, tests included.

#[allow(
    dead_code,
    reason = "this test reads files only: `offending` is for the others"
)]
mod sources;

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
};

/// The top-level modules that `text` names through `crate::`.
fn imports(text: &str) -> BTreeSet<String> {
    let code: String = text
        .lines()
        .map(|line| line.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    let mut found = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // `crate::{a::b, c, d::{e, f}}`: the first segment of each item at depth one.
            let mut depth = 1;
            let mut item_start = true;
            for (index, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 1 => break,
                    '}' => depth -= 1,
                    ',' if depth == 1 => item_start = true,
                    c if item_start && (c.is_ascii_lowercase() || c == '_') => {
                        item_start = false;
                        found.insert(leading_name(&group[index..]));
                    }
                    c if c.is_whitespace() => {}
                    _ => item_start = false,
                }
            }
        } else {
            found.insert(leading_name(rest));
        }
    }
    found
}

fn leading_name(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// A circle in `edges`, as the modules along it, if there is one.
fn circle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut found = path[at..].to_vec();
            found.push(node.to_owned());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, edges, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|node| visit(node, edges, &mut Vec::new(), &mut done))
}

#[test]
fn the_top_level_modules_import_one_another_without_a_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules: BTreeSet<String> = std::fs::read_dir(&src)
        .unwrap()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let name = name.strip_suffix(".rs").unwrap_or(&name).to_owned();
            (name != "lib" && name != "main").then_some(name)
        })
        .collect();
    assert!(
        ["kind", "gateway", "worker", "provider", "jobs", "store"]
            .iter()
            .all(|m| modules.contains(*m)),
        "found the crate's modules: {modules:?}"
    );
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut files: BTreeMap<(String, String), String> = BTreeMap::new();
    for file in sources::rust_files(&src) {
        let relative = file.strip_prefix(&src).unwrap();
        let first = relative.components().next().unwrap().as_os_str();
        let module = first.to_string_lossy().trim_end_matches(".rs").to_owned();
        let text = std::fs::read_to_string(&file).unwrap();
        for imported in imports(&text) {
            if imported != module && modules.contains(&imported) {
                edges
                    .entry(module.clone())
                    .or_default()
                    .insert(imported.clone());
                files
                    .entry((module.clone(), imported))
                    .or_insert_with(|| relative.display().to_string());
            }
        }
    }
    if let Some(found) = circle(&edges) {
        let steps: Vec<String> = found
            .windows(2)
            .map(|pair| {
                let file = &files[&(pair[0].clone(), pair[1].clone())];
                format!("  {} -> {} (e.g. in src/{file})", pair[0], pair[1])
            })
            .collect();
        panic!(
            "the modules import one another in a circle; move what the lower one needs \
             down to it (or to onejob-domain):\n{}",
            steps.join("\n")
        );
    }
}

#[test]
fn imports_are_read_from_paths_and_groups_but_not_comments() {
    let text = "use crate::{kind::Kind, gateway, worker::{Hub, Reserved}};\n\
                let x = crate::store::open(); // crate::jobs\n\
                /// [`crate::fault`]\n";
    let found: Vec<String> = imports(text).into_iter().collect();
    assert_eq!(found, ["gateway", "kind", "store", "worker"]);
    let mut edges = BTreeMap::new();
    edges.insert("a".to_owned(), BTreeSet::from(["b".to_owned()]));
    edges.insert("b".to_owned(), BTreeSet::from(["a".to_owned()]));
    assert_eq!(
        circle(&edges),
        Some(vec!["a".into(), "b".into(), "a".into()])
    );
}
