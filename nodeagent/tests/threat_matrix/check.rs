//! The matrix itself: every `matrix-*.tsv` row is `boundary<TAB>attack<TAB>cell`, where the
//! cell names a `cell_*` test of a module in this directory or says `n/a: <why>`. Each
//! boundary listed has each attack exactly once, every n/a gives its reason, every named test
//! exists. Prints the matrix's size.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The attack columns (THREAT-MATRIX.md): symlink and `..`; FIFO, device or socket in place of
/// a file; hard link; size and alias bombs; a secret split across lines or reads; a path a
/// non-root user controls changed while the agent works; a process killed at each point.
const ATTACKS: [&str; 7] = [
    "link",
    "special",
    "hardlink",
    "bomb",
    "split-secret",
    "race",
    "kill",
];

fn dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/threat_matrix"))
}

/// `(file, line, boundary, attack, cell)` of every row of every `matrix-*.tsv`.
fn rows() -> Vec<(String, usize, String, String, String)> {
    let mut files: Vec<_> = std::fs::read_dir(dir())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("matrix-") && n.ends_with(".tsv"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no matrix-*.tsv in {}", dir().display());
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(dir().join(&f)).unwrap();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            let cols: Vec<&str> = line.split('\t').collect();
            assert_eq!(
                cols.len(),
                3,
                "{f}:{}: not boundary<TAB>attack<TAB>cell: {line:?}",
                i + 1
            );
            out.push((
                f.clone(),
                i + 1,
                cols[0].to_string(),
                cols[1].to_string(),
                cols[2].to_string(),
            ));
        }
    }
    out
}

/// Every `fn NAME(` in the directory's modules.
fn test_fns() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for e in std::fs::read_dir(dir()).unwrap().flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "rs") {
            let text = std::fs::read_to_string(&p).unwrap();
            for part in text.split("fn ").skip(1) {
                let name: String = part
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if part
                    .get(name.len()..)
                    .is_some_and(|rest| rest.starts_with('('))
                {
                    names.insert(name);
                }
            }
        }
    }
    names
}

#[test]
fn every_cell_is_a_test_or_says_why_not() {
    let fns = test_fns();
    let mut seen: BTreeMap<(String, String), String> = BTreeMap::new();
    let mut boundaries: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let (mut tests, mut na) = (BTreeSet::new(), 0);
    for (file, line, boundary, attack, cell) in rows() {
        let at = format!("{file}:{line}");
        assert!(
            !boundary.is_empty()
                && boundary
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "{at}: boundary {boundary:?} is not a kebab-case id"
        );
        assert!(
            ATTACKS.contains(&attack.as_str()),
            "{at}: unknown attack {attack:?} (one of {ATTACKS:?})"
        );
        if let Some(first) = seen.insert((boundary.clone(), attack.clone()), at.clone()) {
            panic!("{at}: ({boundary}, {attack}) again (first at {first})");
        }
        boundaries
            .entry(boundary.clone())
            .or_default()
            .insert(attack);
        if let Some(reason) = cell.strip_prefix("n/a:") {
            assert!(
                reason.trim().len() >= 10,
                "{at}: n/a without a reason: {cell:?}"
            );
            na += 1;
        } else {
            assert!(
                cell.starts_with("cell_"),
                "{at}: {cell:?} is neither `n/a: <why>` nor a cell_* test"
            );
            assert!(
                fns.contains(&cell),
                "{at}: no `fn {cell}(` in {}",
                dir().display()
            );
            tests.insert(cell);
        }
    }
    for (boundary, attacks) in &boundaries {
        let missing: Vec<_> = ATTACKS.iter().filter(|a| !attacks.contains(**a)).collect();
        assert!(missing.is_empty(), "{boundary}: no cell for {missing:?}");
    }
    println!(
        "threat matrix: {} boundaries, {} cells: {} tested ({} distinct tests), {} n/a",
        boundaries.len(),
        seen.len(),
        seen.len() - na,
        tests.len(),
        na
    );
}
