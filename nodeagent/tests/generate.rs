//! `nodeagent generate`: the man pages and completions the Debian package ships come from
//! the real clap definitions.

use std::process::Command;

fn nodeagent(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_nodeagent"))
        .args(args)
        .output()
        .expect("run nodeagent")
}

fn stdout_ok(args: &[&str]) -> String {
    let out = nodeagent(args);
    assert!(
        out.status.success(),
        "nodeagent {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// Visible subcommands as `--help` lists them (clap's own list), so the checks follow the CLI
/// when it grows.
fn visible_subcommands() -> Vec<String> {
    let help = stdout_ok(&["--help"]);
    let list = help
        .split_once("Commands:\n")
        .expect("--help lists the subcommands")
        .1;
    list.lines()
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

#[test]
fn man_page_is_roff_and_lists_every_visible_subcommand_but_not_generate() {
    let page = stdout_ok(&["generate", "man"]);
    assert!(
        page.contains(".TH nodeagent 1"),
        "not a roff page with a title header:\n{page}"
    );
    assert!(
        page.contains(".SH SYNOPSIS") && page.contains(".SH SUBCOMMANDS"),
        "sections missing:\n{page}"
    );
    let subs = visible_subcommands();
    assert!(subs.iter().any(|s| s == "run") && subs.iter().any(|s| s == "mint"));
    for sub in &subs {
        assert!(
            page.contains(&format!("nodeagent\\-{}", sub.replace('-', "\\-"))),
            "man page lacks subcommand {sub}"
        );
    }
    assert!(
        !page.contains("nodeagent\\-generate"),
        "hidden generate leaked into the man page"
    );
}

#[test]
fn man_dir_writes_one_page_per_visible_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    stdout_ok(&["generate", "man", "--dir", d]);
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    let mut want: Vec<String> = visible_subcommands()
        .iter()
        .map(|s| format!("nodeagent-{s}.1"))
        .collect();
    want.push("nodeagent.1".into());
    want.sort();
    // Nested subcommands (e.g. of mint) may add pages; every expected one must be there.
    for w in &want {
        assert!(names.contains(w), "missing {w} in {names:?}");
    }
    assert!(
        !names.iter().any(|n| n.starts_with("nodeagent-generate")),
        "hidden command got a page: {names:?}"
    );
    let run = std::fs::read_to_string(dir.path().join("nodeagent-run.1")).unwrap();
    assert!(run.contains(".TH nodeagent-run 1"), "{run}");
}

#[test]
fn man_dir_that_does_not_exist_fails_with_the_path() {
    let out = nodeagent(&["generate", "man", "--dir", "/nonexistent/pack-test"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/pack-test"), "{err}");
}

#[test]
fn bash_completion_defines_the_function_and_offers_subcommands() {
    let script = stdout_ok(&["generate", "completions", "bash"]);
    assert!(script.contains("_nodeagent()"), "no completion function");
    assert!(
        script.contains("complete -F _nodeagent"),
        "not registered with complete"
    );
    for sub in visible_subcommands() {
        assert!(script.contains(&sub), "bash completion lacks {sub}");
    }
}

#[test]
fn bash_completion_is_valid_bash() {
    let script = stdout_ok(&["generate", "completions", "bash"]);
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("nodeagent");
    std::fs::write(&f, script).unwrap();
    let st = Command::new("bash")
        .arg("-n")
        .arg(&f)
        .status()
        .expect("bash");
    assert!(st.success(), "bash -n rejected the completion script");
}

#[test]
fn zsh_completion_has_compdef_header_and_subcommands() {
    let script = stdout_ok(&["generate", "completions", "zsh"]);
    assert!(
        script.starts_with("#compdef nodeagent"),
        "zsh needs the #compdef line first"
    );
    for sub in visible_subcommands() {
        assert!(
            script.contains(&format!("'{sub}:")),
            "zsh completion lacks {sub}"
        );
    }
}

#[test]
fn unknown_shell_is_a_usage_error() {
    let out = nodeagent(&["generate", "completions", "tcsh"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("tcsh"));
}

#[test]
fn generate_is_hidden_from_help() {
    let help = stdout_ok(&["--help"]);
    let listed = |name: &str| {
        help.lines()
            .any(|l| l.trim_start().starts_with(&format!("{name} ")))
    };
    assert!(listed("mint"), "{help}");
    assert!(!listed("generate"), "{help}");
}

#[test]
fn man_page_documents_the_real_exit_codes_and_files() {
    use libnodeagent::base::error::exit;
    let page = stdout_ok(&["generate", "man"]);
    for (code, word) in [
        (exit::OK, "Success"),
        (exit::FAILED, "Failure"),
        (exit::DEGRADED, "Degraded"),
        (exit::STILL_RUNNING, "Still running"),
    ] {
        assert!(
            page.contains(&format!("\\fB{code}\\fR\n{word}")),
            "exit code {code} ({word}) not documented"
        );
    }
    assert!(
        page.contains("/etc/nodeagent/config.yaml") && page.contains("/etc/nodeagent/disabled")
    );
    // --dir writes the same top-level page as stdout.
    let dir = tempfile::tempdir().unwrap();
    stdout_ok(&["generate", "man", "--dir", dir.path().to_str().unwrap()]);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("nodeagent.1")).unwrap(),
        page
    );
}
