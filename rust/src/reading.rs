//! What compaction reads of one message's text: its identifiers (URLs, UUIDs, hashes, paths,
//! ticket ids), its decision lines and its first line.
//!
//! The reference is the Python reading (`ctxengine/compaction/facts.py`, `_scanned_identifiers`
//! and `_first_line`; `ctxengine/compaction/extractive.py`, `_scanned_prose`), whose patterns are
//! Python's `re` on `str`: Unicode `\w`, `\d`, `\s` and case folding. On ASCII text those are
//! ASCII classes that the `regex` crate's ASCII mode matches alike, with one exception written
//! out below (Python's whitespace holds `\x1c`-`\x1f`). So a text is read here only when it is
//! ASCII; every function returns `None` for any other text, and the caller reads it the Python
//! way. The parity suite (`tests/compaction/test_reading_parity.py`) compares both readings on every text
//! of the shared transcripts and on generated ASCII.
//!
//! Python's lookarounds, which the `regex` crate lacks, are written as what they amount to
//! here: the one-character lookbehinds of paths and ticket ids as a consumed character or the
//! start (a match always ends in a word character, which the lookbehind refuses, so no match
//! is lost to the consumed character), the hash's two lookaheads as a test of the matched word,
//! and the decision phrases' lookahead on their first letter (a shortcut only) left out.

use std::sync::LazyLock;

use regex::bytes::Regex;

/// Python's whitespace among ASCII (`str.isspace`, `\s`): `\t\n\v\f\r`, `\x1c`-`\x1f`, space.
const SPACE: &str = r"\t\n\x0B\x0C\r\x1C-\x1F ";

/// Python's `str.isspace` of one ASCII byte.
fn is_space(b: u8) -> bool {
    matches!(b, b'\t' | b'\n' | 0x0B | 0x0C | b'\r' | 0x1C..=0x1F | b' ')
}

/// [`is_space`] of a character of an ASCII text (the splitting of `str.split()`).
fn space_char(c: char) -> bool {
    c.is_ascii() && is_space(c as u8)
}

/// The line boundaries of Python's `str.splitlines` among ASCII.
fn is_line_break(b: u8) -> bool {
    matches!(b, b'\n' | b'\r' | 0x0B | 0x0C | 0x1C..=0x1E)
}

fn pattern(source: String) -> Option<Regex> {
    Regex::new(&source).ok()
}

/// `https?://[^\s<>"'`)\]]+` (`_URL`).
static URL: LazyLock<Option<Regex>> =
    LazyLock::new(|| pattern(format!(r#"(?-u)https?://[^{SPACE}<>"'`)\]]+"#)));
/// `\b[0-9a-f]{8}-…-[0-9a-f]{12}\b`, case-insensitive (`_UUID`).
static UUID: LazyLock<Option<Regex>> = LazyLock::new(|| {
    pattern(r"(?i-u)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b".to_string())
});
/// `_HASH` without its lookaheads (a hex letter and a digit), tested on each match.
static HASH: LazyLock<Option<Regex>> =
    LazyLock::new(|| pattern(r"(?-u)\b[0-9a-f]{7,64}\b".to_string()));
/// `_PATHLIKE`, its lookbehind `(?<![\w/.:-])` a consumed character or the start.
static PATH: LazyLock<Option<Regex>> = LazyLock::new(|| {
    pattern(
        r"(?-u)(?:^|[^\w/.:-])((?:~|\.{1,2})?/?(?:[\w.@+-]+/)+[\w.@+-]+\.\w{1,8}\b)".to_string(),
    )
});
/// `_TICKET`, its lookbehind `(?<![\w#])` a consumed character or the start.
static TICKET: LazyLock<Option<Regex>> = LazyLock::new(|| {
    pattern(r"(?-u)(?:^|[^\w#])((?:[A-Z][A-Z0-9]+-[0-9]+|#[0-9]{2,})\b)".to_string())
});
/// The decision phrases (`_DECISION`), each space a run of whitespace (`_MAY_DECIDE`).
static MAY_DECIDE: LazyLock<Option<Regex>> =
    LazyLock::new(|| pattern(decision(&format!("[{SPACE}]+"))));
/// The decision phrases (`_DECISION`) on a line whose whitespace is collapsed.
static DECISION: LazyLock<Option<Regex>> = LazyLock::new(|| pattern(decision(" ")));
/// A list marker at the start of a line (`_LIST_MARKER`).
static LIST_MARKER: LazyLock<Option<Regex>> =
    LazyLock::new(|| pattern(format!(r"(?-u)^(?:[-*+]|[0-9]{{1,3}}[.)])[{SPACE}]+")));

/// `_DECISION`'s phrases, `gap` between their words (its lookahead on the first letter is a
/// shortcut only: every phrase starts with one of those letters).
fn decision(gap: &str) -> String {
    let phrases = [
        "I'll",
        "I will",
        "we'll",
        "we will",
        "let's",
        "let me",
        "decided",
        "decision",
        "going to",
        "instead of",
        "chose",
        "switch(?:ed)? to",
        "the fix is",
        "root cause",
        "plan is",
        "approach",
    ];
    let joined: Vec<String> = phrases.iter().map(|p| p.replace(' ', gap)).collect();
    format!(r"(?i-u)\b(?:{})\b", joined.join("|"))
}

/// A word of each decision phrase, lowercase: a text holding none of them states no decision
/// (`deci` is in both `decided` and `decision`), the shortcut of [`may_decide`].
const PHRASE_WORDS: [&str; 13] = [
    "i'll", "will", "we'll", "let", "deci", "going", "instead", "chose", "switch", "fix", "root",
    "plan", "approach",
];
/// From this length on a text holding a phrase's word is taken as one that may decide
/// (`_WORDS_FROM` in Python): its lines are searched one by one then.
const WORDS_FROM: usize = 256;

/// `text[start..end]` of an ASCII text (every offset is a character boundary).
fn piece(text: &str, start: usize, end: usize) -> &str {
    text.get(start..end).unwrap_or_default()
}

/// The identifiers in `text` (`_read_identifiers`): URLs (trailing `.,;:!?` stripped), then
/// UUIDs, hashes, paths and ticket ids, each kind in text order. `None` when `text` is not
/// ASCII, or a pattern failed to build (the caller reads it the Python way then).
pub fn identifiers(text: &str) -> Option<Vec<&str>> {
    Some(identifier_kinds(text)?.concat())
}

/// [`identifiers`] by kind: URLs, UUIDs, hashes, paths, ticket ids (`_scanned_kinds`).
pub fn identifier_kinds(text: &str) -> Option<[Vec<&str>; 5]> {
    if !text.is_ascii() {
        return None;
    }
    let url = URL.as_ref()?;
    let patterns = Patterns {
        uuid: UUID.as_ref()?,
        hash: HASH.as_ref()?,
        path: PATH.as_ref()?,
        ticket: TICKET.as_ref()?,
    };
    let mut found: Vec<&str> = Vec::new();
    let mut kinds: [Vec<&str>; 4] = Default::default();
    // the text outside its URLs (Python blanks each URL with a space: the words are those of
    // these pieces, none spans a blank)
    if text.contains("://") {
        let mut last = 0;
        for m in url.find_iter(text.as_bytes()) {
            found.push(piece(text, m.start(), m.end()).trim_end_matches(URL_TAIL));
            read_words(piece(text, last, m.start()), &patterns, &mut kinds);
            last = m.end();
        }
        read_words(piece(text, last, text.len()), &patterns, &mut kinds);
    } else {
        read_words(text, &patterns, &mut kinds);
    }
    let [uuids, hashes, paths, tickets] = kinds;
    Some([found, uuids, hashes, paths, tickets])
}

/// The patterns a word is searched with, once its hints say it may hold a match.
struct Patterns<'p> {
    uuid: &'p Regex,
    hash: &'p Regex,
    path: &'p Regex,
    ticket: &'p Regex,
}

/// Byte classes of [`CLASS`]: Python's whitespace (`is_space`), a lowercase hex digit (a
/// hash's), a hex digit of either case (a UUID's), a letter, a digit, an uppercase letter,
/// a hex letter `a`-`f`, and the marks the patterns look for: `/`, `.`, `-`, `#`.
const SPACE_BIT: u16 = 1;
const LOWER_HEX: u16 = 2;
const ANY_HEX: u16 = 4;
const ALPHA: u16 = 8;
const DIGIT: u16 = 16;
const UPPER: u16 = 32;
const HEX_LETTER: u16 = 64;
const SLASH: u16 = 128;
const DOT: u16 = 256;
const DASH: u16 = 512;
const POUND: u16 = 1024;

/// Each byte's classes (an ASCII text's: every byte a character).
static CLASS: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut b = 0usize;
    while b < 256 {
        let c = b as u8;
        let mut bits = 0;
        if matches!(c, b'\t' | b'\n' | 0x0B | 0x0C | b'\r' | 0x1C..=0x1F | b' ') {
            bits |= SPACE_BIT;
        }
        if c.is_ascii_digit() {
            bits |= LOWER_HEX | ANY_HEX | DIGIT;
        }
        if matches!(c, b'a'..=b'f') {
            bits |= LOWER_HEX | HEX_LETTER;
        }
        if c.is_ascii_hexdigit() {
            bits |= ANY_HEX;
        }
        if c.is_ascii_alphabetic() {
            bits |= ALPHA;
        }
        if c.is_ascii_uppercase() {
            bits |= UPPER;
        }
        bits |= match c {
            b'/' => SLASH,
            b'.' => DOT,
            b'-' => DASH,
            b'#' => POUND,
            _ => 0,
        };
        table[b] = bits;
        b += 1;
    }
    table
};

/// Which patterns a word is searched with: those it holds what they need for a match.
#[derive(Debug, Default, PartialEq, Eq)]
struct Searches {
    uuid: bool,
    hash: bool,
    path: bool,
    ticket: bool,
}

/// The end of the word of `bytes` starting at `start` (at the first whitespace byte after it,
/// or the end) and the [`Searches`] it needs.
///
/// One pass gathers the classes its bytes hold (any and all); the runs of hex digits
/// ([`hex_runs`]) and the ticket's three ([`ticket_hint`]) are read again only of a word
/// those classes leave a match possible in: a UUID needs 36 bytes and a dash, a hash a
/// digit and a letter `a`-`f` (the match must hold both), a ticket id a digit and a `-` or
/// `#`. Most words of code and JSON are read once.
fn scan_word(bytes: &[u8], start: usize) -> (usize, Searches) {
    let (mut any, mut all) = (0u16, ALPHA);
    let mut at = start;
    while let Some(&b) = bytes.get(at) {
        let class = CLASS[usize::from(b)];
        if class & SPACE_BIT != 0 {
            break;
        }
        any |= class;
        all &= class;
        at += 1;
    }
    let word = bytes.get(start..at).unwrap_or_default();
    let mut searches = Searches {
        path: any & SLASH != 0 && any & DOT != 0,
        ..Searches::default()
    };
    // `str.isalpha` words are never searched for either (Python's `not word.isalpha()`)
    if word.len() >= 7 && all == 0 {
        let uuid = word.len() >= 36 && any & DASH != 0;
        let hash = any & DIGIT != 0 && any & HEX_LETTER != 0;
        if uuid || hash {
            let (lower, either) = hex_runs(word);
            searches.uuid = uuid && either >= 8;
            searches.hash = hash && lower >= 7;
        }
    }
    if any & DIGIT != 0 && any & (DASH | POUND) != 0 {
        searches.ticket = ticket_hint(word);
    }
    (at, searches)
}

/// The identifiers of the words of `text` (ASCII, no URL) other than URLs, added to `kinds`
/// (UUIDs, hashes, paths, ticket ids), each kind in text order.
///
/// One pass over the bytes finds each word (`str.split()`) and the [`Searches`] it needs, as
/// `_scanned_kinds` does (its hints for the whole text are implied by each word's own: a word
/// with a run of 7 hex digits is a text with one). Most words of code or JSON need none.
fn read_words<'t>(text: &'t str, patterns: &Patterns<'_>, kinds: &mut [Vec<&'t str>; 4]) {
    let bytes = text.as_bytes();
    let mut at = 0;
    loop {
        while bytes
            .get(at)
            .is_some_and(|&b| CLASS[usize::from(b)] & SPACE_BIT != 0)
        {
            at += 1;
        }
        if at >= bytes.len() {
            return;
        }
        let start = at;
        let searches;
        (at, searches) = scan_word(bytes, start);
        let word = piece(text, start, at);
        let raw = word.as_bytes();
        if searches.uuid {
            let uuids = patterns.uuid.find_iter(raw);
            kinds[0].extend(uuids.map(|m| piece(word, m.start(), m.end())));
        }
        if searches.hash {
            kinds[1].extend(
                patterns
                    .hash
                    .find_iter(raw)
                    .map(|m| piece(word, m.start(), m.end()))
                    .filter(|h| {
                        h.bytes().any(|b| b.is_ascii_digit())
                            && h.bytes().any(|b| matches!(b, b'a'..=b'f'))
                    }),
            );
        }
        if searches.path {
            kinds[2].extend(captured(patterns.path, word, path_starts));
        }
        if searches.ticket {
            kinds[3].extend(captured(patterns.ticket, word, ticket_starts));
        }
    }
}

/// The longest runs in `word` of lowercase hex digits (what a hash is made of) and of hex
/// digits of either case (a UUID's, read case-insensitively).
fn hex_runs(word: &[u8]) -> (usize, usize) {
    let (mut lower, mut any, mut lower_run, mut any_run) = (0, 0, 0, 0);
    for &b in word {
        lower_run = if matches!(b, b'0'..=b'9' | b'a'..=b'f') {
            lower_run + 1
        } else {
            0
        };
        any_run = if b.is_ascii_hexdigit() {
            any_run + 1
        } else {
            0
        };
        lower = lower.max(lower_run);
        any = any.max(any_run);
    }
    (lower, any)
}

/// Whether `text` holds `[A-Z0-9]-[0-9]` or `#[0-9][0-9]` (`_TICKET_HINT`): what a ticket id
/// needs (in the text, and in its word).
fn ticket_hint(word: &[u8]) -> bool {
    word.windows(3).any(|w| match w {
        [a, b'-', d] => (a.is_ascii_uppercase() || a.is_ascii_digit()) && d.is_ascii_digit(),
        [b'#', d, e] => d.is_ascii_digit() && e.is_ascii_digit(),
        _ => false,
    })
}

/// What Python strips from the end of a URL (`u.rstrip(".,;:!?")`).
const URL_TAIL: [char; 6] = ['.', ',', ';', ':', '!', '?'];

/// Group 1 of each match of `re` in `word`.
///
/// `re` is `(?:^|[^…])(…)`: its group is the match less the one character consumed in place
/// of Python's lookbehind, or the whole match at the start of `word` when `re` took the `^`.
/// So the matches are found (a few times faster than their groups), and the group derived:
/// after a match's first character, unless it starts `word`, when `at_start` of that character
/// says whether the group starts there too (`Some(true)`), after it (`Some(false)`), or cannot
/// tell (`None`, a character both the group and the lookbehind's class may start with: the
/// groups are then asked of the pattern).
fn captured<'w>(re: &Regex, word: &'w str, at_start: fn(u8) -> Option<bool>) -> Vec<&'w str> {
    let bytes = word.as_bytes();
    let mut found = Vec::new();
    for m in re.find_iter(bytes) {
        let from = match m.start() {
            0 => match bytes.first().copied().and_then(at_start) {
                Some(whole) => usize::from(!whole),
                None => {
                    return re
                        .captures_iter(bytes)
                        .filter_map(|c| c.get(1))
                        .map(|g| piece(word, g.start(), g.end()))
                        .collect();
                }
            },
            start => start + 1,
        };
        found.push(piece(word, from, m.end()));
    }
    found
}

/// Where a path match at the start of a word starts its group ([`captured`]): a path starts
/// with `~`, `.`, `/` or `[\w.@+-]`; the lookbehind's class `[^\w/.:-]` holds `~`, `@`, `+`.
fn path_starts(first: u8) -> Option<bool> {
    match first {
        b'~' | b'@' | b'+' => None,
        b'/' | b'.' | b'-' => Some(true),
        b => Some(is_word(b)),
    }
}

/// Where a ticket match at the start of a word starts its group ([`captured`]): a ticket id
/// starts with `[A-Z]` or `#`, neither in the lookbehind's class `[^\w#]`.
fn ticket_starts(first: u8) -> Option<bool> {
    Some(first.is_ascii_uppercase() || first == b'#')
}

/// Python's `\w` of one ASCII byte.
fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// `" ".join(s.split())`: the words of `s`, one space between them.
fn collapsed(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for word in s.split(space_char) {
        if !word.is_empty() {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(word);
        }
    }
    out
}

/// `line` cut to `limit` characters, the last one an ellipsis, when longer (ASCII `line`).
fn clipped(mut line: String, limit: usize) -> String {
    if line.len() > limit {
        line.truncate(limit.saturating_sub(1));
        line.push('…');
    }
    line
}

/// The first non-blank line of ASCII `text`, whitespace collapsed, cut to `limit` characters
/// (`first_line`; `None` when `text` is not ASCII or `limit` is 0).
pub fn first_line(text: &str, limit: usize) -> Option<String> {
    if !text.is_ascii() || limit == 0 {
        return None;
    }
    let bytes = text.as_bytes();
    let Some(start) = bytes.iter().position(|&b| !is_space(b)) else {
        return Some(String::new());
    };
    let end = bytes[start..]
        .iter()
        .position(|&b| is_line_break(b))
        .map_or(bytes.len(), |n| start + n);
    Some(clipped(collapsed(piece(text, start, end)), limit))
}

/// `line` without the list marker it starts with (`unlisted`).
fn unlisted(line: String, marker: &Regex) -> String {
    let starts = line.bytes().next();
    if starts.is_none_or(|b| b"-*+0123456789".contains(&b)) {
        if let Some(m) = marker.find(line.as_bytes()) {
            return piece(&line, m.end(), line.len()).to_string();
        }
    }
    line
}

/// Whether a line of ASCII `text` may state a decision (`_may_decide`, which is the pattern
/// alone: the words are this reading's shortcut, held to it by the parity suite).
fn may_decide(text: &str, phrases: &Regex) -> bool {
    let lowered = text.to_ascii_lowercase();
    if !PHRASE_WORDS.iter().any(|w| lowered.contains(w)) {
        return false;
    }
    text.len() >= WORDS_FROM || phrases.is_match(text.as_bytes())
}

/// `text` with each fenced block (from a ```` ``` ```` to the next or the end) made one space.
fn unfenced(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find("```") {
        out.push_str(piece(rest, 0, open));
        out.push(' ');
        let after = piece(rest, open + 3, rest.len());
        rest = match after.find("```") {
            Some(close) => piece(after, close + 3, after.len()),
            None => "",
        };
    }
    out.push_str(rest);
    out
}

/// What an assistant message's text gives the extractive summary (`_prose`): its decision
/// lines (prose lines of 12 to 240 characters, code fences blanked, that state a decision,
/// whitespace collapsed, list markers dropped) and its first line, cut to `max_line`. `None`
/// when `text` is not ASCII or a pattern failed to build.
pub fn prose(text: &str, max_line: usize) -> Option<(Vec<String>, String)> {
    if !text.is_ascii() || max_line == 0 {
        return None;
    }
    let (phrases, decision, marker) = (
        MAY_DECIDE.as_ref()?,
        DECISION.as_ref()?,
        LIST_MARKER.as_ref()?,
    );
    let fenced = text.contains("```");
    let blanked;
    let prose = if fenced {
        blanked = unfenced(text);
        blanked.as_str()
    } else {
        text
    };
    if !may_decide(prose, phrases) {
        if fenced {
            return Some((vec![], unlisted(first_line(text, max_line)?, marker)));
        }
        return Some((
            vec![],
            clipped(unlisted(first_line(text, usize::MAX)?, marker), max_line),
        ));
    }
    let mut first: Option<String> = None;
    let mut found = Vec::new();
    for raw in prose.split(|c: char| c.is_ascii() && is_line_break(c as u8)) {
        let line = collapsed(raw);
        if (12..=240).contains(&line.len())
            && !(raw.starts_with("    ") || raw.starts_with(['\t', '|', '>']))
            && decision.is_match(line.as_bytes())
        {
            found.push(unlisted(line.clone(), marker));
        }
        if first.is_none() && !line.is_empty() {
            first = Some(line);
        }
    }
    match first {
        Some(line) if !fenced => Some((found, clipped(unlisted(line, marker), max_line))),
        _ => Some((found, unlisted(first_line(text, max_line)?, marker))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pattern_builds() {
        for re in [
            &URL,
            &UUID,
            &HASH,
            &PATH,
            &TICKET,
            &MAY_DECIDE,
            &DECISION,
            &LIST_MARKER,
        ] {
            assert!(re.is_some());
        }
    }

    #[test]
    fn the_space_class_and_is_space_agree() {
        // `SPACE` (in the patterns) and `is_space` (in the loops) are one set, written twice
        let class = pattern(format!("(?-u)^[{SPACE}]$"));
        let Some(class) = class else {
            panic!("the space class does not build");
        };
        for b in 0..=255u8 {
            assert_eq!(class.is_match(&[b]), is_space(b), "byte {b:#04x}");
            assert!(
                !is_line_break(b) || is_space(b),
                "a line break is whitespace: {b:#04x}"
            );
        }
    }

    #[test]
    fn identifiers_in_their_kinds_order() {
        let text = "see https://x.io/a. then PROJ-12 at src/app/main.py, commit 3f2a9c1d \
                    and 123e4567-e89b-12d3-a456-426614174000 #45";
        assert_eq!(
            identifiers(text),
            Some(vec![
                "https://x.io/a",
                "123e4567-e89b-12d3-a456-426614174000",
                "3f2a9c1d",
                "123e4567", // a UUID's first group is a hash word of its own, as in Python
                "src/app/main.py",
                "PROJ-12",
                "#45",
            ])
        );
    }

    #[test]
    fn a_hash_needs_a_letter_and_a_digit_and_a_path_its_own_start() {
        assert_eq!(
            identifiers("1234567 abcdefa deadbeef1"),
            Some(vec!["deadbeef1"])
        );
        assert_eq!(identifiers("x:a/b.py ./c/d.rs"), Some(vec!["./c/d.rs"]));
        assert_eq!(identifiers("abc#12 X#34"), Some(vec![]));
    }

    #[test]
    fn the_hints_of_a_word_are_what_its_patterns_need() {
        assert_eq!(hex_runs(b"x3f2a9c1Zdead"), (7, 7));
        assert_eq!(hex_runs(b"ABCDEF12-ab"), (2, 8));
        assert_eq!(hex_runs(b"helloworld"), (1, 1));
        for word in ["PROJ-12", "X1-9", "#45", "(#12)"] {
            assert!(ticket_hint(word.as_bytes()), "{word}");
        }
        for word in ["proj-12", "#4", "A-b", "-1", "#"] {
            assert!(!ticket_hint(word.as_bytes()), "{word}");
        }
        // `_TICKET_HINT` itself, on every text of 1 to 4 bytes of the classes it tells apart
        let Some(hint) = pattern(r"(?-u)[A-Z0-9]-[0-9]|#[0-9][0-9]".to_string()) else {
            panic!("the ticket hint does not build");
        };
        let alphabet = b"Aa0-# ";
        let (mut all, mut texts): (Vec<Vec<u8>>, Vec<Vec<u8>>) = (vec![], vec![vec![]]);
        for _ in 0..4 {
            texts = texts
                .iter()
                .flat_map(|t| alphabet.iter().map(move |&b| [t.as_slice(), &[b]].concat()))
                .collect();
            all.extend(texts.iter().cloned());
        }
        assert_eq!(all.len(), 6 + 36 + 216 + 1296);
        for text in all {
            assert_eq!(ticket_hint(&text), hint.is_match(&text), "{text:?}");
        }
    }

    #[test]
    fn the_byte_classes_are_the_predicates_they_stand_for() {
        for b in 0..=255u8 {
            let class = CLASS[usize::from(b)];
            assert_eq!(class & SPACE_BIT != 0, is_space(b), "{b:#04x}");
            assert_eq!(
                class & LOWER_HEX != 0,
                matches!(b, b'0'..=b'9' | b'a'..=b'f'),
                "{b:#04x}"
            );
            assert_eq!(class & ANY_HEX != 0, b.is_ascii_hexdigit(), "{b:#04x}");
            assert_eq!(class & ALPHA != 0, b.is_ascii_alphabetic(), "{b:#04x}");
            assert_eq!(class & DIGIT != 0, b.is_ascii_digit(), "{b:#04x}");
            assert_eq!(class & UPPER != 0, b.is_ascii_uppercase(), "{b:#04x}");
            assert_eq!(
                class & HEX_LETTER != 0,
                matches!(b, b'a'..=b'f'),
                "{b:#04x}"
            );
            for (bit, mark) in [(SLASH, b'/'), (DOT, b'.'), (DASH, b'-'), (POUND, b'#')] {
                assert_eq!(class & bit != 0, b == mark, "{b:#04x}");
            }
        }
    }

    #[test]
    fn a_word_is_searched_with_the_patterns_it_may_match() {
        // every word of 1 to 5 bytes of the classes the searches tell apart, then a space,
        // and words long enough for a UUID or a hash: its end, and the searches a word read
        // whole asks for (a hash's with a digit and a letter a-f in its run)
        let alphabet = b"Aa0-#/.g F";
        let (mut all, mut words): (Vec<Vec<u8>>, Vec<Vec<u8>>) = (vec![], vec![vec![]]);
        for _ in 0..5 {
            words = words
                .iter()
                .flat_map(|t| alphabet.iter().map(move |&b| [t.as_slice(), &[b]].concat()))
                .collect();
            all.extend(words.iter().cloned());
        }
        for long in [
            "123e4567-e89b-12d3-a456-426614174000",
            "ABCDEF12-ABCD-ABCD-ABCD-ABCDEFABCDEF",
            "abcdefab-abcd-abcd-abcd-abcdefabcdef",
            "deadbeef",
            "deadbee1",
            "1234567",
            "x3f2a9c1Z",
            "PROJ-12/a.b",
            "##12#3",
        ] {
            all.push(long.as_bytes().to_vec());
            all.push([b"z".as_slice(), long.as_bytes()].concat());
        }
        for text in all {
            let text = [text.as_slice(), b" x"].concat();
            let start = text
                .iter()
                .position(|&b| !is_space(b))
                .unwrap_or(text.len());
            if start >= text.len() - 2 {
                continue; // no word before the one added
            }
            let end = start + text[start..].iter().position(|&b| is_space(b)).unwrap_or(0);
            let word = &text[start..end];
            let (lower, any) = hex_runs(word);
            let searched = word.len() >= 7 && !word.iter().all(u8::is_ascii_alphabetic);
            let has = |p: fn(&u8) -> bool| word.iter().any(p);
            let expected = Searches {
                uuid: searched && any >= 8 && word.len() >= 36 && word.contains(&b'-'),
                hash: searched
                    && lower >= 7
                    && has(u8::is_ascii_digit)
                    && has(|b| matches!(b, b'a'..=b'f')),
                path: word.contains(&b'/') && word.contains(&b'.'),
                ticket: ticket_hint(word),
            };
            assert_eq!(scan_word(&text, start), (end, expected), "{text:?}");
        }
    }

    #[test]
    fn a_url_is_no_word_of_the_rest() {
        // the URL's own path is not read again as a path
        assert_eq!(
            identifiers("at http://h/a/b.py ok"),
            Some(vec!["http://h/a/b.py"])
        );
    }

    #[test]
    fn not_ascii_is_left_to_the_caller() {
        assert_eq!(identifiers("é src/a.py"), None);
        assert_eq!(first_line("é", 10), None);
        assert_eq!(prose("é", 10), None);
    }

    #[test]
    fn first_line_collapses_and_clips() {
        assert_eq!(
            first_line("  \n  a \t b\x1fc\nnext", 240).as_deref(),
            Some("a b c")
        );
        assert_eq!(first_line(" \x1c ", 240).as_deref(), Some(""));
        assert_eq!(first_line("abcdef", 4).as_deref(), Some("abc…"));
    }

    #[test]
    fn prose_finds_decisions_outside_fences() {
        let text = "- Plan:\n```\nI will not be read here\n```\n* I decided to use a queue.\n";
        let (found, first) = prose(text, 240).unwrap_or_default();
        assert_eq!(found, vec!["I decided to use a queue."]);
        assert_eq!(first, "Plan:");
        assert_eq!(
            prose("plain words only", 240),
            Some((vec![], "plain words only".into()))
        );
    }
}
