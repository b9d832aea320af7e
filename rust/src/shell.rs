//! The files a shell command line reads and modifies: a best-effort static reading of a
//! shell tool call's command for the compaction's `## Files` (`_read_shell_files`).
//!
//! The reference is the Python reading (`ctxengine/compaction/facts.py`: `_read_shell_files`,
//! `_shell_segments`, `_shell_words`, `_file_operands`, `_clean_path`), whose patterns are
//! Python's `re` on `str`. A command is read here only when it is ASCII, where Python's `\s`
//! and `\w` are ASCII classes (its whitespace holds `\x1c`-`\x1f` too); [`files`] returns
//! `None` for any other command, and the caller reads it the Python way. Each pattern is
//! written out as the scan it amounts to: its alternatives tried in their order at each
//! position, as Python's leftmost-first matching does. The parity suite
//! (`tests/compaction/test_reading_parity.py`) compares both readings on every shell command
//! of the shared transcripts and on generated ones.

/// Python's `str.isspace` of one ASCII byte (`\s`, and the splitting of `str.split()`).
fn is_space(b: u8) -> bool {
    matches!(b, b'\t' | b'\n' | 0x0B | 0x0C | b'\r' | 0x1C..=0x1F | b' ')
}

/// Python's `\w` of one ASCII byte.
fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Commands that read the files they name (`_SHELL_READ`).
const READS: [&str; 18] = [
    "cat", "head", "tail", "less", "more", "nl", "bat", "wc", "grep", "rg", "ag", "sed", "awk",
    "diff", "open", "view", "file", "stat",
];
/// Commands that modify the files they name (`_SHELL_WRITE`).
const WRITES: [&str; 7] = ["tee", "touch", "rm", "mv", "cp", "truncate", "chmod"];
/// Commands whose first operand is a script or pattern (`_file_operands` reads them).
const SCRIPTED: [&str; 6] = ["grep", "rg", "ag", "sed", "awk", "perl"];
/// Words before the command that are not the command (`sudo`, `env`, …).
const PREFIXES: [&str; 4] = ["sudo", "env", "time", "command"];
/// Options whose value is the next word (`_VALUE_OPTIONS`).
const VALUE_OPTIONS: [&str; 12] = [
    "-e",
    "-f",
    "-A",
    "-B",
    "-C",
    "-m",
    "-g",
    "-t",
    "-M",
    "--regexp",
    "--expression",
    "--file",
];
/// awk's options whose value is the next word (`_AWK_VALUE_OPTIONS`).
const AWK_VALUE_OPTIONS: [&str; 3] = ["-f", "-F", "-v"];
/// Options after which the script or pattern is not the first operand (`_SCRIPT_OPTIONS`).
const SCRIPT_OPTIONS: [&str; 5] = ["-e", "-f", "--regexp", "--expression", "--file"];

/// `(files read, files modified)` by `command` (`_read_shell_files`); `None` when `command`
/// is not ASCII.
pub fn files(command: &str) -> Option<(Vec<String>, Vec<String>)> {
    if !command.is_ascii() {
        return None;
    }
    let mut read: Vec<String> = Vec::new();
    let mut modified: Vec<String> = Vec::new();
    for target in redirect_targets(command) {
        if let Some(path) = clean_path(target) {
            modified.push(path.to_string());
        }
    }
    for words in segments(command) {
        let skip = words
            .iter()
            .take_while(|w| w.contains('=') || PREFIXES.contains(&w.as_str()))
            .count();
        let Some((first, rest)) = words.get(skip..).and_then(<[String]>::split_first) else {
            continue;
        };
        let cmd = command_name(first);
        let writes = WRITES.contains(&cmd);
        if !(writes || READS.contains(&cmd) || cmd == "perl") {
            continue;
        }
        let args: Vec<&str> = rest
            .iter()
            .map(String::as_str)
            .filter(|w| !w.starts_with('>'))
            .collect();
        let operands = if SCRIPTED.contains(&cmd) {
            file_operands(cmd, &args)
        } else {
            args.clone()
        };
        let paths: Vec<&str> = operands.into_iter().filter_map(clean_path).collect();
        let in_place = match cmd {
            "sed" => args
                .iter()
                .any(|a| a.starts_with("-i") || a.starts_with("--in-place")),
            "perl" => args.iter().any(|a| {
                a.starts_with('-') && a.as_bytes().get(1) != Some(&b'-') && a.contains('i')
            }),
            _ => false,
        };
        if writes || in_place {
            let kept = if cmd == "cp" {
                paths
                    .get(paths.len().saturating_sub(1)..)
                    .unwrap_or_default()
            } else {
                &paths[..]
            };
            modified.extend(kept.iter().map(|p| p.to_string()));
        } else if READS.contains(&cmd) {
            read.extend(paths.iter().map(|p| p.to_string()));
        }
    }
    Some((read, modified))
}

/// The targets of the output redirections of `command` (`_REDIRECT`:
/// `(?<![0-9&])>>?\s*([^\s;&|<>]+)`, each match's group, the matches not overlapping).
fn redirect_targets(command: &str) -> Vec<&str> {
    let bytes = command.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'>' || (i > 0 && (bytes[i - 1].is_ascii_digit() || bytes[i - 1] == b'&')) {
            i += 1;
            continue;
        }
        let mut j = i + 1;
        if bytes.get(j) == Some(&b'>') {
            j += 1;
        }
        while bytes.get(j).is_some_and(|&b| is_space(b)) {
            j += 1;
        }
        let start = j;
        while bytes
            .get(j)
            .is_some_and(|&b| !(is_space(b) || matches!(b, b';' | b'&' | b'|' | b'<' | b'>')))
        {
            j += 1;
        }
        if j > start {
            found.push(command.get(start..j).unwrap_or_default());
            i = j;
        } else {
            // with `>>`, giving back the second `>` leaves it to start the target: no match
            i += 1;
        }
    }
    found
}

/// The words of each simple command of `command` (`_shell_segments`): split at `&&`, `||`,
/// `;`, `|` and newlines; each part's [`words`], or on a quoting error its whitespace-split
/// words; the parts without words left out.
fn segments(command: &str) -> Vec<Vec<String>> {
    let bytes = command.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    let mut push = |part: &str| {
        let words = words(part).unwrap_or_else(|| {
            part.split(|c: char| c.is_ascii() && is_space(c as u8))
                .filter(|w| !w.is_empty())
                .map(str::to_string)
                .collect()
        });
        if !words.is_empty() {
            out.push(words);
        }
    };
    while i < bytes.len() {
        let width = match (bytes[i], bytes.get(i + 1)) {
            (b'&', Some(b'&')) | (b'|', Some(b'|')) => 2,
            (b';' | b'|' | b'\n', _) => 1,
            _ => 0,
        };
        if width == 0 {
            i += 1;
            continue;
        }
        push(command.get(start..i).unwrap_or_default());
        i += width;
        start = i;
    }
    push(command.get(start..).unwrap_or_default());
    out
}

/// `shlex.split(part, comments=True)` as `_shell_words` reads it; `None` for an unclosed
/// quote or a trailing backslash (where `shlex` raises).
fn words(part: &str) -> Option<Vec<String>> {
    let bytes = part.as_bytes();
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut i = 0;
    let text = |a: usize, b: usize| part.get(a..b).unwrap_or_default();
    while i < bytes.len() {
        let b = bytes[i];
        let piece: String;
        if matches!(b, b' ' | b'\t' | b'\r' | b'\n') || b == b'#' {
            if let Some(done) = word.take() {
                words.push(done);
            }
            if b == b'#' {
                return Some(words);
            }
            i += 1;
            continue;
        } else if !matches!(b, b'\'' | b'"' | b'\\') {
            let start = i;
            while bytes.get(i).is_some_and(|&c| {
                !matches!(
                    c,
                    b' ' | b'\t' | b'\r' | b'\n' | b'\'' | b'"' | b'\\' | b'#'
                )
            }) {
                i += 1;
            }
            piece = text(start, i).to_string();
        } else if b == b'\\' {
            let next = i + 1;
            if next >= bytes.len() {
                return None;
            }
            piece = text(next, next + 1).to_string();
            i = next + 1;
        } else if b == b'\'' {
            let close = bytes.get(i + 1..)?.iter().position(|&c| c == b'\'')?;
            piece = text(i + 1, i + 1 + close).to_string();
            i += close + 2;
        } else {
            // a double-quoted string: a backslash escapes any next character; within it only
            // `\"` and `\\` lose their backslash
            let mut j = i + 1;
            let mut inner = String::new();
            loop {
                match bytes.get(j) {
                    None => return None,
                    Some(b'"') => break,
                    Some(b'\\') => {
                        let escaped = *bytes.get(j + 1)?;
                        if escaped != b'"' && escaped != b'\\' {
                            inner.push('\\');
                        }
                        inner.push(escaped as char);
                        j += 2;
                    }
                    Some(&c) => {
                        inner.push(c as char);
                        j += 1;
                    }
                }
            }
            piece = inner;
            i = j + 1;
        }
        match word.as_mut() {
            Some(w) => w.push_str(&piece),
            None => word = Some(piece),
        }
    }
    if let Some(done) = word {
        words.push(done);
    }
    Some(words)
}

/// The program a command's first word runs (`command_name`): its last `/`-separated part
/// that is neither empty nor `.`.
fn command_name(word: &str) -> &str {
    word.rsplit('/')
        .find(|part| !part.is_empty() && *part != ".")
        .unwrap_or_default()
}

/// The file operands of a grep/rg/ag/sed/awk/perl command (`_file_operands`): not the
/// script or pattern, not an option's value.
fn file_operands<'a>(cmd: &str, args: &[&'a str]) -> Vec<&'a str> {
    let awk = cmd == "awk";
    let values: &[&str] = if awk {
        &AWK_VALUE_OPTIONS
    } else {
        &VALUE_OPTIONS
    };
    let mut operands = Vec::new();
    let (mut scripted, mut skip) = (false, false);
    for &a in args {
        let name = a.split('=').next().unwrap_or_default();
        if skip {
            skip = false;
        } else if SCRIPT_OPTIONS.contains(&name) || (awk && a == "-f") {
            scripted = true;
            skip = !a.contains('=');
        } else if values.contains(&a) {
            skip = true;
        } else if a.starts_with('-') {
            if a.as_bytes().get(1) != Some(&b'-') && a.len() > 2 && a.ends_with('e') && !awk {
                scripted = true;
                skip = true;
            }
        } else if !a.is_empty() {
            operands.push(a);
        }
    }
    if !scripted && !operands.is_empty() {
        operands.remove(0);
    }
    operands
}

/// The characters `_clean_path` strips after the whitespace.
const STRIPPED: [char; 12] = ['\'', '"', '`', ',', ';', ':', '(', ')', '[', ']', '{', '}'];

/// `token` as a path, or `None` when it is none (`_clean_path`).
fn clean_path(token: &str) -> Option<&str> {
    let token = token
        .trim_matches(|c: char| c.is_ascii() && is_space(c as u8))
        .trim_matches(&STRIPPED[..]);
    if token.is_empty() || token.starts_with('-') || token.contains("://") || token.len() > 300 {
        return None;
    }
    let not_a_path = |b: u8| {
        matches!(
            b,
            b'*' | b'?' | b'$' | b'`' | b'<' | b'>' | b'|' | b'=' | b'&'
        )
    };
    if token.bytes().any(not_a_path) || matches!(token, "/dev/null" | "." | "..") {
        return None;
    }
    (token.contains('/') || has_extension(token)).then_some(token)
}

/// `\.\w{1,8}$` found in `token` (`_EXTENSION`; Python's `$` matches before a final newline
/// too).
fn has_extension(token: &str) -> bool {
    let bytes = token.as_bytes();
    let end = if bytes.last() == Some(&b'\n') {
        bytes.len() - 1
    } else {
        bytes.len()
    };
    let body = bytes.get(..end).unwrap_or_default();
    let run = body.iter().rev().take_while(|&&b| is_word(b)).count();
    // a dot then 1 to 8 word characters ending there: the dot must come right before the
    // last 1 to 8 of them (a run longer than 8 has no dot 8 characters back in it)
    (1..=run.min(8)).any(|n| body.len() > n && body[body.len() - n - 1] == b'.')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(command: &str) -> (Vec<String>, Vec<String>) {
        files(command).unwrap_or_default()
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn reads_and_writes_of_a_pipeline() {
        let (r, m) = read("cat src/a.py | grep -n foo lib/b.rs > out.txt && rm old.log");
        // the words after a lone `>` are operands too, as in Python
        assert_eq!(r, strings(&["src/a.py", "lib/b.rs", "out.txt"]));
        assert_eq!(m, strings(&["out.txt", "old.log"]));
    }

    #[test]
    fn other_text_is_left_to_the_caller() {
        assert_eq!(files("cat café.py"), None);
    }

    #[test]
    fn quotes_and_escapes_join_a_word() {
        assert_eq!(
            words(r#"cat 'a b'"c\"d\n"\ e"#),
            Some(strings(&["cat", "a bc\"d\\n e"]))
        );
        assert_eq!(words("echo 'open"), None);
        assert_eq!(words("echo \\"), None);
        assert_eq!(words("a # b"), Some(strings(&["a"])));
        assert_eq!(words("''"), Some(strings(&[""])));
    }

    #[test]
    fn an_unclosed_quote_splits_at_whitespace() {
        let (r, _) = read("cat 'x.py y.py");
        assert_eq!(r, strings(&["x.py", "y.py"]));
    }

    #[test]
    fn redirections_by_descriptor_are_not_files() {
        assert_eq!(
            redirect_targets("a 2>err.txt >> log.txt &>x 2>&1 >>> y"),
            vec!["log.txt", "y"]
        );
        assert_eq!(redirect_targets("a 2>>b.txt"), vec!["b.txt"]);
    }

    #[test]
    fn scripts_and_option_values_are_not_operands() {
        assert_eq!(file_operands("grep", &["-n", "pat", "a.py"]), vec!["a.py"]);
        assert_eq!(file_operands("grep", &["-e", "pat", "a.py"]), vec!["a.py"]);
        assert_eq!(
            file_operands("perl", &["-pi", "-e", "s/a/b/", "x.pl"]),
            vec!["x.pl"]
        );
        assert_eq!(file_operands("sed", &["-ne", "p", "x.txt"]), vec!["x.txt"]);
        assert_eq!(
            file_operands("awk", &["-F", ":", "{print}", "f.csv"]),
            vec!["f.csv"]
        );
    }

    #[test]
    fn paths_are_cleaned() {
        assert_eq!(clean_path(" 'src/a.py', "), Some("src/a.py"));
        assert_eq!(clean_path("Makefile"), None);
        assert_eq!(clean_path("a.toolongext"), None);
        assert_eq!(clean_path("a.md\n"), Some("a.md"));
        assert_eq!(clean_path("a.md\n)"), Some("a.md\n"));
        assert_eq!(clean_path("-x.py"), None);
        assert_eq!(clean_path("/dev/null"), None);
        assert_eq!(clean_path("http://x/y.py"), None);
        assert_eq!(clean_path("*.py"), None);
    }

    #[test]
    fn command_names_are_the_last_part() {
        assert_eq!(command_name("/usr/bin/cat"), "cat");
        assert_eq!(command_name("./"), "");
        assert_eq!(command_name("."), "");
        assert_eq!(command_name("bin/./"), "bin");
    }
}
