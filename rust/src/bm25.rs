//! Okapi BM25 full-text index (pure Rust, no `PyO3`).
//!
//! Used by the `knowledge_retriever` built-in plugin and by long-term memory search. Documents
//! are added once and searched many times; the index keeps one posting list per term so a search
//! only touches the documents that contain a query term.
//!
//! Design notes:
//! - Tokens are lowercase Unicode words: maximal runs of alphanumeric characters. How the
//!   scripts written without spaces between words are cut is the index's [`Cjk`] choice:
//!   - [`Cjk::Chars`] (the default, [`tokenize`]): each CJK ideograph or kana is its own token
//!     (unigram); Hangul, Thai and the like stay whole words. Cheap, and enough for recall, but
//!     a query word then matches every document holding its characters anywhere, in any order.
//!   - [`Cjk::Pairs`] ([`pairs`]): a run of CJK ideographs, kana, Hangul, Thai, Lao, Myanmar or
//!     Khmer becomes its overlapping character pairs (bigrams), a run of one character that
//!     character, as Lucene's `CJKBigramFilter` (Elasticsearch's `cjk` analyzer) does; "数据库"
//!     is "数据", "据库", which a text holding 数, 据 and 库 apart does not hold. Documents also
//!     index each ideograph, kana or Hangul syllable on its own (the filter's `outputUnigrams`),
//!     queries do not: a query of one character (a lone run) finds the documents holding it,
//!     a longer one is matched by its pairs only. A Thai letter is no word, so those scripts
//!     index pairs only.
//! - IDF is the non-negative Lucene variant `ln(1 + (N - df + 0.5) / (df + 0.5))`, so a term that
//!   appears in every document still scores a little instead of subtracting.
//! - Query terms are deduplicated: repeating a word in the question does not weigh it more.
//! - Ties are broken by insertion order, so results are deterministic.

use std::collections::HashMap;

/// Default term-frequency saturation parameter.
pub const DEFAULT_K1: f32 = 1.2;
/// Default document-length normalization parameter.
pub const DEFAULT_B: f32 = 0.75;

/// Split `text` into lowercase Unicode word tokens.
///
/// Runs of alphanumeric characters form one token; every CJK ideograph or kana character is a
/// token on its own; everything else separates tokens.
///
/// ```
/// use _core::bm25::tokenize;
/// assert_eq!(tokenize("Hello, World_42!"), vec!["hello", "world", "42"]);
/// assert_eq!(tokenize("上下文 Engine"), vec!["上", "下", "文", "engine"]);
/// ```
#[must_use]
pub fn tokenize(text: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut word = String::new();
    for c in text.chars() {
        if is_cjk(c) {
            flush(&mut word, &mut tokens);
            tokens.push(c.to_lowercase().collect());
        } else if c.is_alphanumeric() {
            word.extend(c.to_lowercase());
        } else {
            flush(&mut word, &mut tokens);
        }
    }
    flush(&mut word, &mut tokens);
    tokens
}

fn flush(word: &mut String, tokens: &mut Vec<String>) {
    if !word.is_empty() {
        tokens.push(std::mem::take(word));
    }
}

/// Whether `c` is written without spaces between words (CJK ideographs, kana).
fn is_cjk(c: char) -> bool {
    matches!(
        u32::from(c),
        0x3040..=0x30FF      // hiragana, katakana
            | 0x3400..=0x4DBF  // CJK extension A
            | 0x4E00..=0x9FFF  // CJK unified ideographs
            | 0xF900..=0xFAFF  // CJK compatibility ideographs
            | 0x20000..=0x2FA1F // CJK extensions B-F, compatibility supplement
    )
}

/// How [`pairs`] treats an alphanumeric character: its kind of script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Script {
    /// Scripts that put spaces between words (Latin, Cyrillic, Greek, digits, ...).
    Spaced,
    /// CJK ideographs, kana and Hangul: a character is a syllable or a morpheme, and a word of
    /// one character is common (库, の, 집).
    Syllabic,
    /// Thai, Lao, Myanmar, Khmer: written without spaces between words, a character is a letter.
    Letters,
}

fn script(c: char) -> Script {
    match u32::from(c) {
        0x1100..=0x11FF         // Hangul jamo
        | 0x3005..=0x3007       // 々 〆 〇
        | 0x3021..=0x3029       // Hangzhou numerals
        | 0x3031..=0x3035       // kana repeat marks
        | 0x303B..=0x303C       // 〻 〼
        | 0x3040..=0x30FF       // hiragana, katakana
        | 0x3130..=0x318F       // Hangul compatibility jamo
        | 0x31F0..=0x31FF       // katakana phonetic extensions
        | 0x3400..=0x4DBF       // CJK extension A
        | 0x4E00..=0x9FFF       // CJK unified ideographs
        | 0xA960..=0xA97F       // Hangul jamo extended A
        | 0xAC00..=0xD7FF       // Hangul syllables, jamo extended B
        | 0xF900..=0xFAFF       // CJK compatibility ideographs
        | 0xFF66..=0xFFDC       // half-width katakana and Hangul
        | 0x20000..=0x323AF => Script::Syllabic, // CJK extensions B-H, compatibility supplement
        0x0E00..=0x0EFF         // Thai, Lao
        | 0x1000..=0x109F       // Myanmar
        | 0x1780..=0x17FF => Script::Letters, // Khmer
        _ => Script::Spaced,
    }
}

/// Split `text` into lowercase words: maximal runs of alphanumeric characters of one kind of
/// script, so that a run of CJK ideographs or kana, of Hangul, or of Thai, Lao, Myanmar or Khmer
/// letters is a word of its own, apart from the Latin letters or digits written against it.
///
/// These are the words [`pairs`] cuts; a caller that filters or stems words before indexing
/// them with [`Cjk::Pairs`] reads them here, so that the runs reach the index whole.
///
/// ```
/// use _core::bm25::words;
/// assert_eq!(words("用Redis做缓存"), ["用", "redis", "做缓存"]);
/// assert_eq!(words("FileStoreのfsync"), ["filestore", "の", "fsync"]);
/// ```
#[must_use]
pub fn words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut kind = Script::Spaced;
    for c in text.chars() {
        if !c.is_alphanumeric() {
            flush(&mut word, &mut words);
            continue;
        }
        let this = script(c);
        if this != kind {
            flush(&mut word, &mut words);
            kind = this;
        }
        word.extend(c.to_lowercase());
    }
    flush(&mut word, &mut words);
    words
}

/// The terms of `text` for [`Cjk::Pairs`]: its [`words`], each run of CJK ideographs, kana,
/// Hangul, Thai, Lao, Myanmar or Khmer as its overlapping character pairs (a run of one
/// character as that character), other words whole. With `unigrams` (a document's terms), each
/// ideograph, kana or Hangul syllable of a longer run is also a term of its own, before the pair
/// it starts (Lucene's `CJKBigramFilter` with `outputUnigrams`).
///
/// ```
/// use _core::bm25::pairs;
/// assert_eq!(pairs("数据库迁移", false), ["数据", "据库", "库迁", "迁移"]);
/// assert_eq!(pairs("用Redis做缓存", false), ["用", "redis", "做缓", "缓存"]);
/// assert_eq!(pairs("数据库", true), ["数", "数据", "据", "据库", "库"]);
/// ```
#[must_use]
pub fn pairs(text: &str, unigrams: bool) -> Vec<String> {
    let mut terms = Vec::new();
    for word in words(text) {
        let chars: Vec<char> = word.chars().collect();
        if chars.len() < 2 || script(chars[0]) == Script::Spaced {
            terms.push(word);
            continue;
        }
        for (i, &c) in chars.iter().enumerate() {
            if unigrams && script(c) == Script::Syllabic {
                terms.push(c.to_string());
            }
            if let Some(&next) = chars.get(i + 1) {
                terms.push([c, next].iter().collect());
            }
        }
    }
    terms
}

/// How an index cuts the scripts written without spaces between words into terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Cjk {
    /// [`tokenize`]: each CJK ideograph or kana a term; documents and queries alike.
    #[default]
    Chars,
    /// [`pairs`]: runs as overlapping character pairs; a document's ideographs, kana and
    /// Hangul syllables also one by one, a query's only when a run is one character long.
    Pairs,
}

impl Cjk {
    /// The terms a document's `text` is indexed under.
    #[must_use]
    pub fn document_terms(self, text: &str) -> Vec<String> {
        match self {
            Self::Chars => tokenize(text),
            Self::Pairs => pairs(text, true),
        }
    }

    /// The terms a `query` is searched for (repeats included).
    #[must_use]
    pub fn query_terms(self, query: &str) -> Vec<String> {
        match self {
            Self::Chars => tokenize(query),
            Self::Pairs => pairs(query, false),
        }
    }
}

/// An Okapi BM25 index over documents identified by caller-chosen `usize` ids.
#[derive(Debug, Clone)]
pub struct Bm25Index {
    k1: f32,
    b: f32,
    cjk: Cjk,
    term_ids: HashMap<String, usize>,
    /// For each term id: `(document index, term frequency)`, document indexes ascending.
    postings: Vec<Vec<(u32, u32)>>,
    doc_ids: Vec<usize>,
    doc_lens: Vec<u32>,
    total_len: u64,
}

impl Default for Bm25Index {
    fn default() -> Self {
        Self::new()
    }
}

impl Bm25Index {
    /// An empty index with the standard parameters `k1 = 1.2`, `b = 0.75`.
    #[must_use]
    pub fn new() -> Self {
        Self::with_params(DEFAULT_K1, DEFAULT_B)
    }

    /// An empty index with explicit parameters.
    ///
    /// `k1` controls term-frequency saturation (0 = binary), `b` length normalization
    /// (0 = none, 1 = full). Callers validate the values; this function stores them as given.
    #[must_use]
    pub fn with_params(k1: f32, b: f32) -> Self {
        Self {
            k1,
            b,
            cjk: Cjk::Chars,
            term_ids: HashMap::new(),
            postings: Vec::new(),
            doc_ids: Vec::new(),
            doc_lens: Vec::new(),
            total_len: 0,
        }
    }

    /// This index with `cjk` as its way of cutting CJK and the like into terms (set it before
    /// adding documents: those added before keep the terms they were indexed under).
    #[must_use]
    pub fn with_cjk(mut self, cjk: Cjk) -> Self {
        self.cjk = cjk;
        self
    }

    /// How this index cuts CJK and the like into terms.
    #[must_use]
    pub fn cjk(&self) -> Cjk {
        self.cjk
    }

    /// Number of documents added.
    #[must_use]
    pub fn len(&self) -> usize {
        self.doc_ids.len()
    }

    /// Whether no document has been added.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.doc_ids.is_empty()
    }

    /// Number of distinct terms in the index.
    #[must_use]
    pub fn vocabulary_size(&self) -> usize {
        self.term_ids.len()
    }

    /// Add one document. The same `id` may be used for several documents; each is scored
    /// separately and reported under that id.
    pub fn add(&mut self, id: usize, text: &str) {
        let doc = u32::try_from(self.doc_ids.len()).unwrap_or(u32::MAX);
        let mut counts: HashMap<String, u32> = HashMap::new();
        let mut len: u32 = 0;
        for token in self.cjk.document_terms(text) {
            *counts.entry(token).or_insert(0) += 1;
            len = len.saturating_add(1);
        }
        // Sort so posting-list layout does not depend on HashMap iteration order.
        let mut counts: Vec<(String, u32)> = counts.into_iter().collect();
        counts.sort_unstable();
        for (term, tf) in counts {
            let next = self.postings.len();
            let tid = *self.term_ids.entry(term).or_insert(next);
            if tid == next {
                self.postings.push(Vec::new());
            }
            self.postings[tid].push((doc, tf));
        }
        self.doc_ids.push(id);
        self.doc_lens.push(len);
        self.total_len += u64::from(len);
    }

    /// Number of documents containing `term` (already lowercase, one token).
    #[must_use]
    pub fn doc_freq(&self, term: &str) -> usize {
        self.term_ids
            .get(term)
            .map_or(0, |&t| self.postings[t].len())
    }

    /// `(matched, total)`: how many distinct query terms occur in the index, out of how many.
    #[must_use]
    pub fn coverage(&self, query: &str) -> (usize, usize) {
        let terms = self.terms(query);
        let matched = terms
            .iter()
            .filter(|t| self.term_ids.contains_key(*t))
            .count();
        (matched, terms.len())
    }

    /// The distinct terms [`Bm25Index::search`] scores for `query`, in first-seen order.
    #[must_use]
    pub fn terms(&self, query: &str) -> Vec<String> {
        let mut seen = std::collections::HashSet::new();
        self.cjk
            .query_terms(query)
            .into_iter()
            .filter(|t| seen.insert(t.clone()))
            .collect()
    }

    /// The `k` best documents for `query` as `(id, score)`, best first.
    ///
    /// Only documents sharing at least one term with the query are returned (score > 0).
    /// Equal scores keep insertion order.
    #[must_use]
    // Counts become f32 scores by design; precision loss above 2^24 docs/tokens is harmless.
    #[allow(clippy::cast_precision_loss)]
    pub fn search(&self, query: &str, k: usize) -> Vec<(usize, f32)> {
        if k == 0 || self.is_empty() {
            return Vec::new();
        }
        let n = self.doc_ids.len() as f32;
        let avg_len = (self.total_len as f32 / n).max(1.0);
        let mut scores = vec![0.0_f32; self.doc_ids.len()];
        for term in self.terms(query) {
            let Some(&tid) = self.term_ids.get(&term) else {
                continue;
            };
            let postings = &self.postings[tid];
            let df = postings.len() as f32;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            for &(doc, tf) in postings {
                let tf = tf as f32;
                let len = self.doc_lens[doc as usize] as f32;
                let norm = self.k1 * (1.0 - self.b + self.b * len / avg_len);
                scores[doc as usize] += idf * tf * (self.k1 + 1.0) / (tf + norm);
            }
        }
        let mut hits: Vec<(usize, f32)> = scores
            .into_iter()
            .enumerate()
            .filter(|&(_, s)| s > 0.0)
            .collect();
        hits.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        hits.truncate(k);
        hits.into_iter()
            .map(|(doc, s)| (self.doc_ids[doc], s))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corpus() -> Bm25Index {
        let mut index = Bm25Index::new();
        index.add(10, "The quick brown fox jumps over the lazy dog");
        index.add(11, "Token budgets decide which context grains survive");
        index.add(12, "A fox, a fox! Foxes everywhere: the fox den");
        index.add(13, "Rust core counts tokens and releases the GIL");
        index
    }

    #[test]
    fn tokenizer_lowercases_and_splits() {
        assert_eq!(
            tokenize("Ünïcode WORDS, snake_case x2"),
            ["ünïcode", "words", "snake", "case", "x2"]
        );
        assert_eq!(tokenize("  ...  "), Vec::<String>::new());
        assert_eq!(tokenize("插件abc接口"), ["插", "件", "abc", "接", "口"]);
        assert_eq!(tokenize("カタカナ"), ["カ", "タ", "カ", "ナ"]);
    }

    #[test]
    fn search_ranks_by_term_frequency() {
        let hits = corpus().search("fox", 10);
        let ids: Vec<usize> = hits.iter().map(|h| h.0).collect();
        assert_eq!(ids, [12, 10]);
        assert!(hits[0].1 > hits[1].1);
    }

    #[test]
    fn search_respects_k_and_skips_non_matching() {
        let index = corpus();
        assert_eq!(index.search("fox", 1).len(), 1);
        assert!(index.search("fox", 0).is_empty());
        assert!(index.search("zebra", 5).is_empty());
        assert!(Bm25Index::new().search("fox", 5).is_empty());
    }

    #[test]
    fn rare_terms_weigh_more() {
        let mut index = Bm25Index::new();
        index.add(0, "common rare");
        index.add(1, "common");
        index.add(2, "common");
        let hits = index.search("common rare", 3);
        assert_eq!(hits[0].0, 0);
        assert!(hits[0].1 > 2.0 * hits[1].1);
    }

    #[test]
    fn matches_hand_computed_score() {
        let mut index = Bm25Index::new();
        index.add(0, "a b");
        index.add(1, "c");
        // N=2, df(a)=1: idf = ln(1 + 1.5/1.5) = ln 2; tf=1, len=2, avg=1.5.
        let norm = 1.2 * (1.0 - 0.75 + 0.75 * 2.0 / 1.5);
        let expected = 2.0_f32.ln() * 1.0 * 2.2 / (1.0 + norm);
        let hits = index.search("a", 1);
        assert!((hits[0].1 - expected).abs() < 1e-6);
    }

    #[test]
    fn ties_keep_insertion_order_and_duplicates_count_once() {
        let mut index = Bm25Index::new();
        index.add(7, "same text");
        index.add(3, "same text");
        let hits = index.search("same same same", 2);
        assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), [7, 3]);
        assert!((hits[0].1 - index.search("same", 1)[0].1).abs() < 1e-6);
    }

    /// Facts written in Chinese: one holds the word 数据库迁移 (database migration), a shorter
    /// one each of its characters apart, one a part of it (数据, data), one none of it.
    const CHINESE: [&str; 4] = [
        "据说库房的数量会迁到移动仓。",
        "周五不要做数据库迁移，先在测试环境验证。",
        "地图由库房数据生成，迁址后再更新。",
        "部署必须通过发布分支。",
    ];

    fn chinese(cjk: Cjk) -> Bm25Index {
        let mut index = Bm25Index::new().with_cjk(cjk);
        for (i, fact) in CHINESE.iter().enumerate() {
            index.add(i, fact);
        }
        index
    }

    #[test]
    fn pairs_cut_runs_and_keep_other_words_whole() {
        assert_eq!(pairs("数据库迁移", false), ["数据", "据库", "库迁", "迁移"]);
        assert_eq!(pairs("数据库", true), ["数", "数据", "据", "据库", "库"]);
        // a run of one character is that character, whether or not unigrams are asked for
        assert_eq!(pairs("库", false), ["库"]);
        assert_eq!(pairs("库", true), ["库"]);
        // Latin words are whole, and cut off a CJK run written against them
        assert_eq!(
            pairs("用 Redis 做缓存", false),
            ["用", "redis", "做缓", "缓存"]
        );
        assert_eq!(
            pairs("用Redis做缓存", false),
            ["用", "redis", "做缓", "缓存"]
        );
        assert_eq!(
            pairs("FileStore の fsync", false),
            ["filestore", "の", "fsync"]
        );
        // kana and kanji of one run pair across the scripts, as Lucene's CJKBigramFilter does
        assert_eq!(pairs("移行する", false), ["移行", "行す", "する"]);
        // punctuation ends a run (the katakana middle dot too); digits are words of their own
        assert_eq!(
            pairs("データ・ベース2号", false),
            ["デー", "ータ", "ベー", "ース", "2", "号"]
        );
        // Hangul syllables index one by one too, Thai letters do not
        assert_eq!(pairs("집에", true), ["집", "집에", "에"]);
        assert_eq!(pairs("ทดสอบ", true), ["ทด", "ดส", "สอ", "อบ"]);
        assert_eq!(words("db데이터"), ["db", "데이터"]);
    }

    #[test]
    fn latin_text_is_cut_the_same_way_by_both_schemes() {
        for text in [
            "Ünïcode WORDS, snake_case x2",
            "db-staging-02: never migrate",
            "мой ключ",
        ] {
            assert_eq!(pairs(text, true), tokenize(text));
            assert_eq!(pairs(text, false), tokenize(text));
            assert_eq!(words(text), tokenize(text));
        }
    }

    #[test]
    fn latin_scores_do_not_depend_on_the_cjk_scheme() {
        let mut paired = Bm25Index::new().with_cjk(Cjk::Pairs);
        for (i, text) in [
            "The quick brown fox jumps over the lazy dog",
            "Token budgets decide which context grains survive",
            "A fox, a fox! Foxes everywhere: the fox den",
            "Rust core counts tokens and releases the GIL",
        ]
        .iter()
        .enumerate()
        {
            paired.add(10 + i, text);
        }
        let chars = corpus();
        for query in ["fox", "tokens context", "the lazy GIL", "zebra"] {
            assert_eq!(paired.search(query, 10), chars.search(query, 10), "{query}");
            assert_eq!(paired.coverage(query), chars.coverage(query));
        }
    }

    #[test]
    fn a_chinese_word_ranks_the_fact_holding_it_first() {
        // one term per character: the shorter fact holding the characters apart comes first
        let chars = chinese(Cjk::Chars).search("数据库迁移", 4);
        assert_eq!(chars.iter().map(|h| h.0).collect::<Vec<_>>(), [0, 1, 2]);
        // pairs: the fact holding the word, then the one holding a part of it; the characters
        // apart are no match
        let paired = chinese(Cjk::Pairs).search("数据库迁移", 4);
        assert_eq!(paired.iter().map(|h| h.0).collect::<Vec<_>>(), [1, 2]);
        assert!(paired[0].1 > 2.0 * paired[1].1);
        // a word sharing a pair with the others ranks the one holding it whole first
        let partial = chinese(Cjk::Pairs).search("数据库", 4);
        assert_eq!(partial[0].0, 1);
        assert!(partial[0].1 > partial[1].1);
    }

    #[test]
    fn a_query_of_one_character_finds_every_fact_holding_it() {
        let index = chinese(Cjk::Pairs);
        let ids: Vec<usize> = index.search("库", 4).iter().map(|h| h.0).collect();
        assert_eq!(ids.len(), 3);
        assert!(ids.iter().all(|&i| CHINESE[i].contains('库')));
        assert_eq!(index.terms("库"), ["库"]);
        assert_eq!(index.doc_freq("库"), 3);
        // a longer query is searched by its pairs only, not by its characters
        assert_eq!(index.terms("数据库 数据"), ["数据", "据库"]);
    }

    #[test]
    fn japanese_kana_and_kanji_meet_as_pairs() {
        let facts = [
            "本番のデータベースは金曜日に移行しない。",
            "データの移行手順はwikiにある。",
            "ベースイメージは毎週更新する。",
        ];
        let mut index = Bm25Index::new().with_cjk(Cjk::Pairs);
        for (i, fact) in facts.iter().enumerate() {
            index.add(i, fact);
        }
        let hits = index.search("データベースの移行", 3);
        assert_eq!(hits[0].0, 0);
        assert!(hits[0].1 > hits[1].1);
        // a Latin word inside a Japanese sentence stays whole
        assert_eq!(
            index
                .search("wiki", 3)
                .iter()
                .map(|h| h.0)
                .collect::<Vec<_>>(),
            [1]
        );
    }

    #[test]
    fn coverage_and_doc_freq() {
        let index = corpus();
        assert_eq!(index.coverage("fox zebra Fox"), (1, 2));
        assert_eq!(index.doc_freq("fox"), 2);
        assert_eq!(index.doc_freq("zebra"), 0);
        assert_eq!(index.len(), 4);
        assert!(index.vocabulary_size() > 10);
    }
}
