//! The text of a bootcmd/runcmd list's program: cloud-init's script, item for item, with
//! nodeagent's records between the items (pure: no I/O; `shell.rs` writes and runs it).
//!
//! cloud-init (22.4 and 25.1 alike) makes one script of a list with `util.shellify`:
//! `#!/bin/sh`, then each item on its own line, a string item as it is, a list item as its
//! words in single quotes (`'` written `'\''`). bootcmd runs it as `/bin/sh FILE`, runcmd
//! as the executable `scripts/runcmd` (its `#!/bin/sh`). nodeagent writes the same lines to a
//! root-only file and runs `sh FILE`: the list's text is never in an argv or an environment.
//!
//! Between two items that leave the shell between complete commands (no open quote,
//! here-document, `if`…`fi`, `&&` at a line's end…: [`Lexer`]) a line records what the
//! items before it left (`__na_done`): their status, variables, environment, directory and
//! umask, and a marker in the program's output file that tells the agent where one item's
//! output ends. The line is invisible to the items: it runs in `{ …; } 2>&-` (no `set -x`
//! trace, no error message), as the first command of an AND-list (`set -e` does not end the
//! shell there), writes only to files it names (`>|`, so `set -C` does not stop it) and
//! returns the status it recorded, so the next item's `$?` is the previous item's, and a
//! redirection an item made (`exec >>/root/bootstrap.log 2>&1`) stays for the items after
//! it. Items that only together make complete commands (an `if` opened in one and closed
//! in a later one) form one unit, recorded once after its last item. At the kubeadm step
//! the program waits (`__na_wait`) until the agent has run it and answers with its status.

use crate::plan::Run;

/// One part of a list's program, in plan order: an item, or a step the agent runs while
/// the program waits (the kubeadm step of runcmd).
#[derive(Debug, Clone, Copy)]
pub enum Part<'a> {
    Item(&'a Run),
    Pause,
}

/// Consecutive items that end at a complete-command boundary: `first..=last`, indices into
/// the parts. Its record (status, state) is written under `last`'s prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unit {
    pub first: usize,
    pub last: usize,
}

/// Where the program starts from: the state the recorded items before it left.
#[derive(Debug, Clone)]
pub struct Resume {
    /// The last `.vars` record (inside the target), sourced first.
    pub vars: Option<String>,
    /// `$?` for the first item: the status of the item before it.
    pub status: i32,
}

/// A built program: its text, its units and how many parts it holds (a pause that does not
/// come at a complete-command boundary ends the program before it).
#[derive(Debug)]
pub struct Program {
    pub text: String,
    pub units: Vec<Unit>,
    pub parts: usize,
}

/// `s` in single quotes for the shell, as `util.shellify` quotes list items.
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// An item as a line of cloud-init's script (`util.shellify`).
pub fn shellify(run: &Run) -> String {
    match run {
        Run::Shell(s) => s.clone(),
        Run::Argv(a) => a.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" "),
    }
}

/// The helpers every program starts with. `__na_p` is the program's file prefix, `__na_cur`
/// the record prefix of the unit running (empty between units and while waiting), whose
/// status the EXIT trap records as `N exit` when the shell ends inside it.
const HELPERS: &str = r#"__na_done() {
	__na_rc=$2; __na_cur=; __na_pwd=$PWD; __na_umask=$(command umask)
	command printf '\036nodeagent-item:%s\036' "${1##*/}" >>"$__na_p.out" || :
	{ set; export -p; } >|"$1.vars" || :
	command -p env -0 __na_pwd="$PWD" __na_umask="$__na_umask" >|"$1.env" || :
	command printf '%s\n' "$__na_rc" >|"$1.rc" || :
	command -p sync "$1.vars" "$1.env" "$1.rc" "${1%/*}" || :
	__na_cur=$3
	return "$__na_rc"
}
__na_end() {
	__na_rc=$?
	if [ -n "${__na_cur:-}" ]; then
		command printf '\036nodeagent-item:%s\036' "${__na_cur##*/}" >>"$__na_p.out"
		command printf '%s exit\n' "$__na_rc" >|"$__na_cur.rc"
		command -p sync "$__na_cur.rc" "${__na_cur%/*}"
	fi
} 2>&-
__na_wait() {
	__na_cur=
	command printf '%s\n' "${1##*/}" >|"$__na_p.at" || :
	__na_rc=
	read -r __na_rc <"$__na_p.ack" || :
	case $__na_rc in ''|*[!0-9]*) __na_rc=1 ;; esac
	__na_cur=$2
	return "$__na_rc"
}
__na_ret() { return "$1"; }
trap __na_end EXIT
"#;

/// The program for `parts` (each with its record prefix inside the target, `prefixes`
/// parallel to `parts`), whose own files start with `program` (inside the target), started
/// from `resume`, with `env` exported first.
pub fn build(
    parts: &[Part<'_>],
    prefixes: &[String],
    program: &str,
    resume: &Resume,
    env: &[(&str, &str)],
) -> Program {
    // Units and how many parts fit (a pause only at a complete-command boundary).
    let mut units = Vec::new();
    let mut lexer = Lexer::default();
    let mut first = None;
    let mut parts_in = 0;
    for (i, part) in parts.iter().enumerate() {
        match part {
            Part::Item(run) => {
                first.get_or_insert(i);
                lexer.feed(&shellify(run));
                lexer.feed("\n");
                if lexer.complete() {
                    units.push(Unit {
                        first: first.take().unwrap_or(i),
                        last: i,
                    });
                }
            }
            Part::Pause if first.is_some() => break,
            Part::Pause => {}
        }
        parts_in = i + 1;
    }
    // Items the lexer never saw complete: one unit to the end (the shell decides).
    if let Some(f) = first {
        let last = parts_in - 1;
        units.push(Unit { first: f, last });
    }
    let mut s = String::from("#!/bin/sh\n");
    s.push_str(HELPERS);
    for (k, v) in env {
        s.push_str(&format!("{k}={}; export {k}\n", quote(v)));
    }
    if let Some(vars) = &resume.vars {
        // The old shell's PPID is not ours.
        s.push_str(&format!(
            "__na_ppid=$PPID; . {}; PPID=$__na_ppid\ncd -- \"$__na_pwd\" 2>&-; umask \"$__na_umask\"\n",
            quote(vars)
        ));
    }
    let record =
        |u: Option<&Unit>| u.map_or_else(|| "''".to_string(), |u| quote(&prefixes[u.last]));
    s.push_str(&format!(
        "__na_p={}; __na_cur={}\n{{ __na_ret {} && :; }} 2>&-\n",
        quote(program),
        record(units.first()),
        resume.status.clamp(0, 255)
    ));
    let mut next_unit = 0;
    for (i, part) in parts.iter().take(parts_in).enumerate() {
        match part {
            Part::Item(run) => {
                s.push_str(&shellify(run));
                s.push('\n');
                if let Some(u) = units.get(next_unit).filter(|u| u.last == i) {
                    next_unit += 1;
                    s.push_str(&format!(
                        "{{ __na_done {} $? {} && :; }} 2>&-\n",
                        quote(&prefixes[u.last]),
                        record(units.get(next_unit))
                    ));
                }
            }
            Part::Pause => s.push_str(&format!(
                "{{ __na_wait {} {} && :; }} 2>&-\n",
                quote(&prefixes[i]),
                record(units.get(next_unit))
            )),
        }
    }
    Program {
        text: s,
        units,
        parts: parts_in,
    }
}

/// What the lexer is inside of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Frame {
    Single,
    Double,
    Back,
    /// `$(`…`)`: shell syntax again.
    CmdSub,
    /// `$((`…`))`, `${`…`}`: skipped to the matching close (nesting depth).
    Arith(u32),
    Param(u32),
    /// `(`…`)`, `{`…`}`, `if`…`fi`, `for|while|until`…`done`, `case`…`esac`.
    Paren,
    Brace,
    If,
    Loop,
    Case(CaseAt),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CaseAt {
    /// The word after `case`, then `in`.
    Word,
    In,
    /// A pattern (up to `)`), or a list (up to `;;` or `esac`).
    Pattern,
    Body,
}

/// A conservative reader of POSIX shell text that tells whether what it was fed ends
/// between complete commands. It knows quoting, here-documents, comments, line
/// continuations, trailing `&&`/`||`/`|`, the compound commands and function definitions;
/// anything it does not follow (`$'…'`, a stray `)`, bash's `function`) makes it unsure for
/// good, and an unsure lexer never says "complete": the items after it are one unit, which
/// is always correct, only coarser.
#[derive(Debug, Default)]
pub struct Lexer {
    stack: Vec<Frame>,
    word: String,
    in_word: bool,
    word_plain: bool,
    /// The next word is a command's first (reserved words count there).
    cmd_pos: bool,
    /// After `for`: 1 the name, 2 `in`/`do`, 3 the words up to `;` or a newline.
    for_words: u8,
    /// A command must follow (`&&`, `||`, `|`, `!` were last).
    open_op: bool,
    /// After `name()`: a compound command must follow.
    func_body: bool,
    /// `<<` (true: `<<-`) seen: the next word is a here-document's delimiter.
    heredoc_word: Option<bool>,
    /// Delimiters whose bodies start after the current line.
    heredocs: Vec<(String, bool)>,
    /// Inside a here-document body: its delimiter, tab stripping, the line so far.
    body: Option<(String, bool, String)>,
    escaped: bool,
    comment: bool,
    unsure: bool,
    started: bool,
}

impl Lexer {
    /// Whether the text so far ends between complete commands.
    pub fn complete(&self) -> bool {
        !self.unsure
            && self.stack.is_empty()
            && self.heredocs.is_empty()
            && self.body.is_none()
            && self.heredoc_word.is_none()
            && !self.escaped
            && !self.open_op
            && !self.func_body
            && !self.in_word
    }

    pub fn feed(&mut self, text: &str) {
        if !self.started {
            self.started = true;
            self.cmd_pos = true;
        }
        let chars: Vec<char> = text.chars().collect();
        let mut i = 0;
        while i < chars.len() && !self.unsure {
            i += self.step(&chars, i);
        }
    }

    /// Consume what starts at `i`; returns how many characters.
    fn step(&mut self, c: &[char], i: usize) -> usize {
        let ch = c[i];
        let next = c.get(i + 1).copied();
        if self.body.is_some() {
            self.body_char(ch);
            return 1;
        }
        if self.comment {
            if ch == '\n' {
                self.comment = false;
                return self.newline();
            }
            return 1;
        }
        if let Some(n) = self.quoted(ch, next, c.get(i + 2).copied()) {
            return n;
        }
        self.shell(ch, next, c.get(i + 2).copied())
    }

    /// A character of a here-document body: the line that is its delimiter ends it.
    fn body_char(&mut self, ch: char) {
        if let Some((delim, strip, line)) = &mut self.body {
            if ch == '\n' {
                let l = if *strip {
                    line.trim_start_matches('\t')
                } else {
                    line.as_str()
                };
                if l == delim.as_str() {
                    self.body = None;
                    self.next_heredoc();
                } else {
                    line.clear();
                }
            } else {
                line.push(ch);
            }
        }
    }
    /// Inside quotes, `${…}`, `$((…))` or backquotes: the characters consumed, or `None`
    /// when the lexer is in shell syntax.
    fn quoted(&mut self, ch: char, next: Option<char>, after: Option<char>) -> Option<usize> {
        match self.stack.last().copied() {
            Some(Frame::Single) => {
                if ch == '\'' {
                    self.stack.pop();
                } else if self.in_word {
                    self.word.push(ch);
                }
                Some(1)
            }
            Some(Frame::Double) => {
                if self.escaped {
                    self.escaped = false;
                    if self.in_word {
                        self.word.push(ch);
                    }
                    return Some(1);
                }
                if self.in_word && !matches!(ch, '\\' | '"' | '`' | '$') {
                    self.word.push(ch);
                }
                Some(match ch {
                    '\\' => {
                        self.escaped = true;
                        1
                    }
                    '"' => {
                        self.stack.pop();
                        1
                    }
                    '`' => {
                        self.stack.push(Frame::Back);
                        1
                    }
                    '$' => self.dollar(next, after),
                    _ => 1,
                })
            }
            Some(Frame::Back) => {
                if self.escaped {
                    self.escaped = false;
                } else if ch == '\\' {
                    self.escaped = true;
                } else if ch == '`' {
                    self.stack.pop();
                }
                Some(1)
            }
            Some(Frame::Arith(depth)) | Some(Frame::Param(depth)) => {
                let arith = matches!(self.stack.last(), Some(Frame::Arith(_)));
                let (open, close) = if arith { ('(', ')') } else { ('{', '}') };
                let top = self.stack.len() - 1;
                match ch {
                    '\'' | '"' | '`' if !arith => {
                        // Quotes inside `${…}`: followed, then back here.
                        self.stack.push(match ch {
                            '\'' => Frame::Single,
                            '"' => Frame::Double,
                            _ => Frame::Back,
                        });
                    }
                    _ if ch == open => {
                        self.stack[top] = if arith {
                            Frame::Arith(depth + 1)
                        } else {
                            Frame::Param(depth + 1)
                        };
                    }
                    _ if ch == close && depth > 1 => {
                        self.stack[top] = if arith {
                            Frame::Arith(depth - 1)
                        } else {
                            Frame::Param(depth - 1)
                        };
                    }
                    _ if ch == close => {
                        self.stack.pop();
                        if arith {
                            // `))`: the second `)` closes `$((`.
                            return Some(if next == Some(')') { 2 } else { self.give_up() });
                        }
                    }
                    _ => {}
                }
                Some(1)
            }
            _ => None,
        }
    }

    /// Shell syntax: the top level, `$(…)` and the compound commands.
    fn shell(&mut self, ch: char, next: Option<char>, after: Option<char>) -> usize {
        if self.escaped {
            // An escaped character is part of the word; an escaped newline continues the
            // line (the word, and so the command, goes on in the next item).
            self.escaped = false;
            if ch != '\n' {
                self.word.push(ch);
            }
            return 1;
        }
        match ch {
            '\\' => {
                self.word_char(false);
                self.escaped = true;
                1
            }
            '\'' => {
                self.word_char(false);
                self.stack.push(Frame::Single);
                1
            }
            '"' => {
                self.word_char(false);
                self.stack.push(Frame::Double);
                1
            }
            '`' => {
                self.word_char(false);
                self.stack.push(Frame::Back);
                1
            }
            '$' => {
                self.word_char(false);
                self.dollar(next, after)
            }
            '#' if !self.in_word => {
                self.comment = true;
                1
            }
            ' ' | '\t' => {
                self.end_word();
                1
            }
            '\n' => {
                self.end_word();
                self.newline()
            }
            ';' => {
                self.end_word();
                if next == Some(';') {
                    self.double_semicolon();
                    return 2;
                }
                if next == Some('&') {
                    return self.give_up(); // `;&`: bash's case fall-through
                }
                self.separator();
                1
            }
            '&' => {
                self.end_word();
                if next == Some('&') {
                    self.open_op = true;
                    self.cmd_pos = true;
                    return 2;
                }
                if next == Some('>') {
                    return 2; // bash's `&>` redirection
                }
                self.separator();
                1
            }
            '|' => {
                self.end_word();
                if matches!(self.stack.last(), Some(Frame::Case(CaseAt::Pattern))) {
                    return 1; // `a|b)`: alternatives of a pattern
                }
                self.open_op = true;
                self.cmd_pos = true;
                if next == Some('|') { 2 } else { 1 }
            }
            '(' => self.open_paren(next),
            ')' => self.close_paren(),
            '<' | '>' => {
                self.end_word();
                self.redirection(ch, next, after)
            }
            _ => {
                self.word_char(true);
                self.word.push(ch);
                1
            }
        }
    }

    fn give_up(&mut self) -> usize {
        self.unsure = true;
        1
    }

    /// A character of a word; `plain`: not a quote, escape or expansion.
    fn word_char(&mut self, plain: bool) {
        if !self.in_word {
            self.in_word = true;
            self.word_plain = true;
            self.word.clear();
        }
        self.word_plain &= plain;
        self.open_op = false;
    }

    /// `$` at the start of `$(`, `$((`, `${`, `$'`; returns the characters consumed.
    fn dollar(&mut self, next: Option<char>, after: Option<char>) -> usize {
        match (next, after) {
            (Some('('), Some('(')) => {
                self.stack.push(Frame::Arith(1));
                3
            }
            (Some('('), _) => {
                // Its commands are words of their own; the word around it goes on after `)`.
                self.stack.push(Frame::CmdSub);
                self.in_word = false;
                self.word.clear();
                self.cmd_pos = true;
                2
            }
            (Some('{'), _) => {
                self.stack.push(Frame::Param(1));
                2
            }
            (Some('\''), _) => self.give_up(),
            _ => 1,
        }
    }

    /// The end of a line in shell syntax: here-document bodies start; a command may start.
    fn newline(&mut self) -> usize {
        if self.for_words == 3 || self.for_words == 2 {
            self.for_words = 0;
        }
        self.next_heredoc();
        if !matches!(
            self.stack.last(),
            Some(Frame::Case(CaseAt::Word | CaseAt::In))
        ) {
            self.cmd_pos = true;
        }
        1
    }

    fn next_heredoc(&mut self) {
        if !self.heredocs.is_empty() {
            let (delim, strip) = self.heredocs.remove(0);
            self.body = Some((delim, strip, String::new()));
        }
    }

    /// `;` or `&`: the command ends.
    fn separator(&mut self) {
        if self.open_op || self.func_body {
            self.unsure = true;
        }
        if self.for_words >= 2 {
            self.for_words = 0;
        }
        self.cmd_pos = true;
    }

    fn double_semicolon(&mut self) {
        match self.stack.last_mut() {
            Some(Frame::Case(at @ CaseAt::Body)) => {
                *at = CaseAt::Pattern;
                self.cmd_pos = false;
            }
            _ => self.unsure = true,
        }
    }

    fn open_paren(&mut self, next: Option<char>) -> usize {
        if self.in_word && self.word_plain && next == Some(')') && self.cmd_pos_word() {
            // `name()`: a function definition.
            self.end_word();
            self.func_body = true;
            self.cmd_pos = true;
            return 2;
        }
        self.end_word();
        if let Some(Frame::Case(CaseAt::Pattern)) = self.stack.last() {
            return 1; // `(pattern)`
        }
        if !self.cmd_pos {
            return self.give_up();
        }
        self.func_body = false;
        self.open_op = false;
        self.stack.push(Frame::Paren);
        self.cmd_pos = true;
        1
    }

    fn close_paren(&mut self) -> usize {
        self.end_word();
        match self.stack.last_mut() {
            Some(Frame::Paren) => {
                self.stack.pop();
                self.cmd_pos = false;
            }
            Some(Frame::CmdSub) => {
                self.stack.pop();
                self.cmd_pos = false;
                // Back in the word the substitution is part of.
                if !matches!(self.stack.last(), Some(Frame::Double)) {
                    self.word_char(false);
                }
            }
            Some(Frame::Case(at @ CaseAt::Pattern)) => {
                *at = CaseAt::Body;
                self.cmd_pos = true;
            }
            _ => self.unsure = true,
        }
        1
    }

    fn redirection(&mut self, ch: char, next: Option<char>, after: Option<char>) -> usize {
        self.open_op = false;
        if ch == '<' && next == Some('<') {
            if after == Some('<') {
                return 3; // bash's here-string `<<<`
            }
            let strip = after == Some('-');
            self.heredoc_word = Some(strip);
            return if strip { 3 } else { 2 };
        }
        match next {
            Some('>' | '&' | '|') => 2,
            Some('<') if ch == '>' => 2,
            _ => 1,
        }
    }

    /// Whether the word being read stands where a command's name does.
    fn cmd_pos_word(&self) -> bool {
        self.cmd_pos && self.for_words == 0
    }

    /// A word ends: reserved words in command position open and close compound commands.
    fn end_word(&mut self) {
        if !self.in_word {
            return;
        }
        self.in_word = false;
        let word = std::mem::take(&mut self.word);
        if let Some(strip) = self.heredoc_word.take() {
            let delim: String = word
                .chars()
                .filter(|c| !matches!(c, '\'' | '"' | '\\'))
                .collect();
            // A delimiter made of quotes alone (`<<''`) is read back as the raw word.
            self.heredocs.push((delim, strip));
            return;
        }
        let plain = self.word_plain;
        match self.for_words {
            1 => {
                self.for_words = 2;
                return;
            }
            2 if plain && word == "in" => {
                self.for_words = 3;
                return;
            }
            2 if plain && word == "do" => {
                self.for_words = 0;
                self.cmd_pos = true;
                return;
            }
            3 => return,
            _ => {}
        }
        if let Some(Frame::Case(at)) = self.stack.last().copied() {
            match at {
                CaseAt::Word => {
                    self.set_case(CaseAt::In);
                    return;
                }
                CaseAt::In if plain && word == "in" => {
                    self.set_case(CaseAt::Pattern);
                    return;
                }
                CaseAt::In => {
                    self.unsure = true;
                    return;
                }
                CaseAt::Pattern if plain && word == "esac" => {
                    self.stack.pop();
                    self.cmd_pos = false;
                    return;
                }
                CaseAt::Pattern => return,
                CaseAt::Body => {}
            }
        }
        if !(self.cmd_pos && plain) {
            self.cmd_pos = false;
            self.func_body = false;
            return;
        }
        let compound = ["if", "while", "until", "for", "case", "{", "("];
        if self.func_body && !compound.contains(&word.as_str()) {
            self.unsure = true;
        }
        self.func_body = false;
        match word.as_str() {
            "if" => self.stack.push(Frame::If),
            "then" | "else" | "elif" if self.stack.last() == Some(&Frame::If) => {}
            "while" | "until" => self.stack.push(Frame::Loop),
            "for" => {
                self.stack.push(Frame::Loop);
                self.for_words = 1;
            }
            "do" if self.stack.last() == Some(&Frame::Loop) => {}
            "case" => self.stack.push(Frame::Case(CaseAt::Word)),
            "{" => self.stack.push(Frame::Brace),
            "!" => self.open_op = true,
            "fi" => self.close(Frame::If),
            "done" => self.close(Frame::Loop),
            "}" => self.close(Frame::Brace),
            "esac" if matches!(self.stack.last(), Some(Frame::Case(CaseAt::Body))) => {
                self.stack.pop();
                self.cmd_pos = false;
            }
            "then" | "else" | "elif" | "do" | "esac" | "in" | "function" | "select" | "[[" => {
                self.unsure = true;
            }
            _ => self.cmd_pos = false,
        }
    }

    fn set_case(&mut self, to: CaseAt) {
        if let Some(Frame::Case(at)) = self.stack.last_mut() {
            *at = to;
        }
    }

    fn close(&mut self, frame: Frame) {
        if self.stack.last() == Some(&frame) {
            self.stack.pop();
            self.cmd_pos = false;
        } else {
            self.unsure = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The boundaries after each item that the lexer calls complete.
    fn boundaries(items: &[&str]) -> Vec<bool> {
        let mut l = Lexer::default();
        items
            .iter()
            .map(|i| {
                l.feed(i);
                l.feed("\n");
                l.complete()
            })
            .collect()
    }

    #[test]
    fn simple_items_are_each_complete() {
        let items = [
            "echo 'it''s' \"a $HOME b\" `date` $(uname -r) ${X:-}",
            "test -e /x && echo yes || echo no",
            "sed -i 's/a/b/' /etc/x # a comment ( with { stray",
            "if [ -f /x ]; then echo y; elif true; then :; else echo n; fi",
            "for i in do done if; do echo $i; done",
            "case $x in a|b) echo ab ;; (c) echo c;; *) ;; esac",
            "f() { echo f; }",
            "(cd /tmp && ls) | wc -l &",
            "cat <<EOF > /f\nbody ( if\nEOF",
            "x=$((1 + (2 * 3)))",
            "exec >>/root/bootstrap.log 2>&1",
            "set -e",
            "while read -r l; do echo \"$l\"; done < /etc/hosts",
            "echo $(case a in a) echo x;; esac)",
            "a=\"$(echo \"nested \\\" $(echo deep)\")\"",
        ];
        assert_eq!(boundaries(&items), vec![true; items.len()], "{items:#?}");
    }

    #[test]
    fn constructs_spanning_items_end_where_they_close() {
        let b = boundaries(&["if true; then", "echo in", "fi", "echo after"]);
        assert_eq!(b, [false, false, true, true]);
        let b = boundaries(&["for i in 1 2", "do", "echo $i", "done"]);
        assert_eq!(b, [false, false, false, true]);
        let b = boundaries(&["cat <<-'EOF' >/f", "\tbody", "\tEOF", "echo x"]);
        assert_eq!(b, [false, false, true, true]);
        let b = boundaries(&["echo 'open", "still open'", "echo x"]);
        assert_eq!(b, [false, true, true]);
        let b = boundaries(&["test -e /x &&", "echo y", "echo \\", "continued"]);
        assert_eq!(b, [false, true, false, true]);
        let b = boundaries(&["f()", "{ echo body; }", "f"]);
        assert_eq!(b, [false, true, true]);
        let b = boundaries(&["case $x in", "a) echo a;;", "esac"]);
        assert_eq!(b, [false, false, true]);
    }

    #[test]
    fn what_it_cannot_follow_makes_every_later_boundary_unsure() {
        let b = boundaries(&["echo $'a\\'b'", "echo x", "echo y"]);
        assert_eq!(b, [false, false, false]);
        let b = boundaries(&["echo )", "echo x"]);
        assert_eq!(b, [false, false]);
        let b = boundaries(&["function f { :; }", "f"]);
        assert_eq!(b, [false, false]);
    }

    fn program(items: &[&str], pause_at: Option<usize>) -> Program {
        let runs: Vec<Run> = items.iter().map(|s| Run::Shell(s.to_string())).collect();
        let mut parts: Vec<Part> = runs.iter().map(Part::Item).collect();
        if let Some(p) = pause_at {
            parts.insert(p, Part::Pause);
        }
        let prefixes: Vec<String> = (0..parts.len()).map(|i| format!("/s/cmd/h{i}")).collect();
        let resume = Resume {
            vars: None,
            status: 0,
        };
        build(&parts, &prefixes, "/s/cmd/p", &resume, &[])
    }

    #[test]
    fn the_script_is_cloud_init_s_lines_with_records_between_units() {
        let p = program(&["echo 1", "if true; then", "echo 2", "fi", "echo 3"], None);
        assert_eq!(
            p.units,
            [
                Unit { first: 0, last: 0 },
                Unit { first: 1, last: 3 },
                Unit { first: 4, last: 4 }
            ]
        );
        assert!(p.text.starts_with("#!/bin/sh\n"));
        let body = p.text.split_once("__na_ret 0 && :; } 2>&-\n").unwrap().1;
        assert_eq!(
            body,
            "echo 1\n{ __na_done '/s/cmd/h0' $? '/s/cmd/h3' && :; } 2>&-\n\
             if true; then\necho 2\nfi\n{ __na_done '/s/cmd/h3' $? '/s/cmd/h4' && :; } 2>&-\n\
             echo 3\n{ __na_done '/s/cmd/h4' $? '' && :; } 2>&-\n"
        );
        // A pause inside an open construct ends the program before it.
        let p = program(&["if true; then", "fi"], Some(1));
        assert_eq!(p.parts, 1);
        let p = program(&["echo a", "echo b"], Some(1));
        assert_eq!(p.parts, 3);
        assert!(
            p.text
                .contains("{ __na_wait '/s/cmd/h1' '/s/cmd/h2' && :; } 2>&-\n")
        );
    }

    #[test]
    fn list_items_are_quoted_as_shellify_does() {
        let argv = Run::Argv(vec!["echo".into(), "it's".into(), "$HOME".into()]);
        assert_eq!(shellify(&argv), r#"'echo' 'it'\''s' '$HOME'"#);
        assert_eq!(shellify(&Run::Shell("cd /tmp".into())), "cd /tmp");
    }
}
