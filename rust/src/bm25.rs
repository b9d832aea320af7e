//! Okapi BM25 full-text index (pure Rust, no `PyO3`).
//!
//! Used by the `knowledge_retriever` built-in plugin and by long-term memory search. Documents
//! are added once and searched many times; the index keeps one posting list per term so a search
//! only touches the documents that contain a query term.
//!
//! Design notes:
//! - Tokens are lowercase Unicode words: maximal runs of alphanumeric characters. CJK ideographs
//!   and kana carry no spaces between words, so each one is its own token (unigram). This is
//!   cheap and good enough for recall; precision comes from BM25's length normalization.
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

/// An Okapi BM25 index over documents identified by caller-chosen `usize` ids.
#[derive(Debug, Clone)]
pub struct Bm25Index {
    k1: f32,
    b: f32,
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
            term_ids: HashMap::new(),
            postings: Vec::new(),
            doc_ids: Vec::new(),
            doc_lens: Vec::new(),
            total_len: 0,
        }
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
        for token in tokenize(text) {
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
        let terms = unique_terms(query);
        let matched = terms
            .iter()
            .filter(|t| self.term_ids.contains_key(*t))
            .count();
        (matched, terms.len())
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
        for term in unique_terms(query) {
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

/// Distinct query tokens in first-seen order.
fn unique_terms(query: &str) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    tokenize(query)
        .into_iter()
        .filter(|t| seen.insert(t.clone()))
        .collect()
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
