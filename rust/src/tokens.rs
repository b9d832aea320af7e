//! Token counting: exact for OpenAI encodings, calibrated estimates elsewhere.
//!
//! # Performance notes
//! - Counting goes through `bpe-openai` (linear-time pre-tokenizer on `regex-automata`, and a
//!   backtracking BPE that never materializes the token list). Its counts equal tiktoken's; the
//!   parity tests in `tests/test_tokens.py` check that on every shared transcript.
//! - Encoding and decoding (token ids) go through `tiktoken-rs`, which is tiktoken's own code.
//! - Both vocabularies are compiled into the binary and loaded lazily on first use, so importing
//!   the module costs nothing and no file is ever downloaded.
//! - Counts of texts of at least [`MIN_CACHED_BYTES`] are cached by a 128-bit content hash
//!   ([`TokenCache`]); hashing runs at memory speed, so a repeated count costs a lookup.
//! - `count_many` spreads texts over rayon's pool (every core); callers release the GIL first.

use std::collections::VecDeque;
use std::hash::BuildHasherDefault;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;

use parking_lot::Mutex;
use rayon::prelude::*;

use crate::errors::{CoreError, CoreResult};

/// An exact BPE encoding published by OpenAI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// `cl100k_base`: gpt-4, gpt-3.5, text-embedding-3.
    Cl100kBase,
    /// `o200k_base`: gpt-4o, gpt-4.1, o-series, gpt-5.
    O200kBase,
}

impl Encoding {
    /// All encodings, in a stable order.
    pub const ALL: [Encoding; 2] = [Encoding::Cl100kBase, Encoding::O200kBase];

    /// The encoding's canonical name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Cl100kBase => "cl100k_base",
            Self::O200kBase => "o200k_base",
        }
    }

    /// Parse a canonical encoding name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.name() == name)
    }

    fn counter(self) -> &'static bpe_openai::Tokenizer {
        match self {
            Self::Cl100kBase => bpe_openai::cl100k_base(),
            Self::O200kBase => bpe_openai::o200k_base(),
        }
    }

    fn coder(self) -> &'static tiktoken_rs::CoreBPE {
        match self {
            Self::Cl100kBase => tiktoken_rs::cl100k_base_singleton(),
            Self::O200kBase => tiktoken_rs::o200k_base_singleton(),
        }
    }

    /// Exact token count of `text`, bypassing the cache.
    pub fn count_uncached(self, text: &str) -> usize {
        self.counter().count(text)
    }

    /// Token ids of `text`; special-token text is encoded as ordinary text.
    pub fn encode(self, text: &str) -> Vec<u32> {
        self.coder().encode_ordinary(text)
    }

    /// Raw bytes of `ids` (may end inside a UTF-8 character).
    pub fn decode_bytes(self, ids: &[u32]) -> CoreResult<Vec<u8>> {
        self.coder()
            .decode_bytes(ids)
            .map_err(|e| CoreError::InvalidToken {
                token: e.token,
                encoding: self.name(),
            })
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// A model family without a public tokenizer, estimated from `o200k_base` counts.
///
/// Factors were calibrated on the shared Claude Code transcripts: the ratio of the
/// `output_tokens` the provider billed for each assistant message to our `o200k_base` count of
/// the same text and tool calls (see `benches/calibrate.py` and docs/tokens.md).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimator {
    /// Family name (`claude`, `gemini`).
    pub family: &'static str,
    /// Multiplier applied to the `o200k_base` count.
    pub factor: f64,
}

/// Claude's tokenizer yields more tokens than `o200k_base` on agent transcripts.
pub const CLAUDE: Estimator = Estimator {
    family: "claude",
    factor: 1.20,
};
/// Gemini's SentencePiece vocabulary (256k) is close to `o200k_base`.
pub const GEMINI: Estimator = Estimator {
    family: "gemini",
    factor: 1.08,
};

const MODEL_HINT: &str = "known families: gpt-4o, gpt-4.1, gpt-4.5, gpt-5, o1/o3/o4 (o200k_base); \
gpt-4, gpt-3.5-turbo, text-embedding-3 (cl100k_base); claude-* and gemini-* (estimated). \
Pass encoding=\"cl100k_base\" or encoding=\"o200k_base\" for any other model";

/// How a model's text is counted: an exact encoding, optionally scaled by an estimator.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Counter {
    /// The exact encoding underneath.
    pub encoding: Encoding,
    /// `None` for exact OpenAI counts.
    pub estimator: Option<Estimator>,
}

/// Resolve a model name (optionally provider-prefixed, e.g. `openai/gpt-4o`) to a counter.
pub fn counter_for_model(model: &str) -> CoreResult<Counter> {
    let lower = model.trim().to_ascii_lowercase();
    let bare = lower.rsplit('/').next().unwrap_or(&lower);
    let exact = |encoding| {
        Ok(Counter {
            encoding,
            estimator: None,
        })
    };
    let starts = |prefixes: &[&str]| prefixes.iter().any(|p| bare.starts_with(p));
    if let Some(enc) = Encoding::from_name(bare) {
        return exact(enc);
    }
    if starts(&[
        "gpt-4o",
        "gpt-4.1",
        "gpt-4.5",
        "gpt-5",
        "chatgpt-4o",
        "gpt-oss",
        "o1",
        "o3",
        "o4",
    ]) {
        return exact(Encoding::O200kBase);
    }
    if starts(&[
        "gpt-4",
        "gpt-3.5",
        "gpt-35",
        "text-embedding-3",
        "text-embedding-ada-002",
    ]) {
        return exact(Encoding::Cl100kBase);
    }
    let estimated = |estimator| {
        Ok(Counter {
            encoding: Encoding::O200kBase,
            estimator: Some(estimator),
        })
    };
    if starts(&["claude"]) {
        return estimated(CLAUDE);
    }
    if starts(&["gemini", "gemma"]) {
        return estimated(GEMINI);
    }
    Err(CoreError::UnknownModel {
        name: model.to_string(),
        hint: MODEL_HINT.to_string(),
    })
}

/// Resolve an encoding name (`cl100k_base`, `o200k_base`).
pub fn counter_for_encoding(name: &str) -> CoreResult<Counter> {
    Encoding::from_name(name.trim())
        .map(|encoding| Counter {
            encoding,
            estimator: None,
        })
        .ok_or_else(|| CoreError::UnknownModel {
            name: name.to_string(),
            hint: "valid encodings: cl100k_base, o200k_base".to_string(),
        })
}

impl Counter {
    /// Whether counts are exact (an OpenAI encoding) rather than estimated.
    pub fn exact(&self) -> bool {
        self.estimator.is_none()
    }

    /// Display name: the encoding, or `<family>~o200k_base` for estimators.
    pub fn name(&self) -> String {
        match self.estimator {
            None => self.encoding.name().to_string(),
            Some(e) => format!("{}~{}", e.family, self.encoding.name()),
        }
    }

    fn scale(&self, base: usize) -> usize {
        match self.estimator {
            None => base,
            Some(e) => (base as f64 * e.factor).ceil() as usize,
        }
    }

    /// Token count of `text` (estimated for non-OpenAI families), through the cache if `cached`.
    pub fn count(&self, text: &str, cached: bool) -> usize {
        let base = if cached {
            TokenCache::global().count(self.encoding, text)
        } else {
            self.encoding.count_uncached(text)
        };
        self.scale(base)
    }

    /// Counts of many texts in parallel on every core.
    pub fn count_many<S: AsRef<str> + Sync>(&self, texts: &[S], cached: bool) -> Vec<usize> {
        texts
            .par_iter()
            .map(|t| self.count(t.as_ref(), cached))
            .collect()
    }

    /// Longest prefix of `text` whose count is at most `max_tokens`, cut at a token boundary and
    /// never inside a UTF-8 character.
    pub fn truncate<'a>(&self, text: &'a str, max_tokens: usize) -> CoreResult<&'a str> {
        let budget = match self.estimator {
            None => max_tokens,
            Some(e) => (max_tokens as f64 / e.factor).floor() as usize,
        };
        let ids = self.encoding.encode(text);
        if ids.len() <= budget {
            return Ok(text);
        }
        let mut keep = budget;
        loop {
            let bytes = self.encoding.decode_bytes(&ids[..keep])?;
            let cut = match std::str::from_utf8(&bytes) {
                Ok(s) => s.len(),
                Err(e) => e.valid_up_to(),
            };
            let prefix = text.get(..cut).unwrap_or("");
            // Re-tokenizing a prefix can merge differently at the cut; shrink until it fits.
            if keep == 0 || self.count(prefix, false) <= max_tokens {
                return Ok(prefix);
            }
            keep -= 1;
        }
    }
}

/// Texts shorter than this are counted directly: hashing would cost about as much.
pub const MIN_CACHED_BYTES: usize = 256;
/// Default number of cached counts (about 40 bytes each).
pub const DEFAULT_CACHE_CAPACITY: usize = 65_536;

type Key = (u128, u8);
type Map = std::collections::HashMap<Key, u32, BuildHasherDefault<ahash::AHasher>>;

struct CacheInner {
    map: Map,
    order: VecDeque<Key>,
    capacity: usize,
    evictions: u64,
}

/// Bounded map from content hash to token count, with first-in-first-out eviction.
pub struct TokenCache {
    inner: Mutex<CacheInner>,
    hits: AtomicU64,
    misses: AtomicU64,
}

/// A snapshot of the cache counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups answered from the cache.
    pub hits: u64,
    /// Lookups that had to count.
    pub misses: u64,
    /// Entries dropped to stay within capacity.
    pub evictions: u64,
    /// Entries held now.
    pub size: usize,
    /// Maximum entries.
    pub capacity: usize,
}

static GLOBAL_CACHE: LazyLock<TokenCache> =
    LazyLock::new(|| TokenCache::new(DEFAULT_CACHE_CAPACITY));

impl TokenCache {
    /// An empty cache holding at most `capacity` counts (0 disables caching).
    pub fn new(capacity: usize) -> Self {
        Self {
            inner: Mutex::new(CacheInner {
                map: Map::default(),
                order: VecDeque::new(),
                capacity,
                evictions: 0,
            }),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// The process-wide cache used by [`Counter::count`].
    pub fn global() -> &'static TokenCache {
        &GLOBAL_CACHE
    }

    /// Count `text` with `encoding`, answering from the cache when the same content was seen.
    pub fn count(&self, encoding: Encoding, text: &str) -> usize {
        if text.len() < MIN_CACHED_BYTES {
            return encoding.count_uncached(text);
        }
        let key = (
            xxhash_rust::xxh3::xxh3_128(text.as_bytes()),
            encoding.index() as u8,
        );
        if let Some(&n) = self.inner.lock().map.get(&key) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return n as usize;
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let n = encoding.count_uncached(text);
        self.insert(key, u32::try_from(n).unwrap_or(u32::MAX));
        n
    }

    fn insert(&self, key: Key, n: u32) {
        let mut inner = self.inner.lock();
        if inner.capacity == 0 || inner.map.insert(key, n).is_some() {
            return;
        }
        inner.order.push_back(key);
        while inner.map.len() > inner.capacity {
            let Some(old) = inner.order.pop_front() else {
                break;
            };
            inner.map.remove(&old);
            inner.evictions += 1;
        }
    }

    /// Change the capacity, evicting the oldest entries if needed.
    pub fn set_capacity(&self, capacity: usize) {
        let mut inner = self.inner.lock();
        inner.capacity = capacity;
        while inner.map.len() > capacity {
            let Some(old) = inner.order.pop_front() else {
                break;
            };
            inner.map.remove(&old);
            inner.evictions += 1;
        }
    }

    /// Drop every entry and reset the counters.
    pub fn clear(&self) {
        let mut inner = self.inner.lock();
        inner.map.clear();
        inner.order.clear();
        inner.evictions = 0;
        self.hits.store(0, Ordering::Relaxed);
        self.misses.store(0, Ordering::Relaxed);
    }

    /// Current counters.
    pub fn stats(&self) -> CacheStats {
        let inner = self.inner.lock();
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            evictions: inner.evictions,
            size: inner.map.len(),
            capacity: inner.capacity,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_models() {
        let o200k = |m: &str| counter_for_model(m).map(|c| (c.encoding, c.exact()));
        assert_eq!(o200k("gpt-4o-mini"), Ok((Encoding::O200kBase, true)));
        assert_eq!(o200k("openai/gpt-5"), Ok((Encoding::O200kBase, true)));
        assert_eq!(o200k("o3-mini"), Ok((Encoding::O200kBase, true)));
        assert_eq!(o200k("gpt-4-turbo"), Ok((Encoding::Cl100kBase, true)));
        assert_eq!(o200k("gpt-3.5-turbo"), Ok((Encoding::Cl100kBase, true)));
        assert_eq!(o200k("claude-sonnet-4-5"), Ok((Encoding::O200kBase, false)));
        assert!(matches!(
            counter_for_model("llama-3"),
            Err(CoreError::UnknownModel { .. })
        ));
    }

    #[test]
    fn counts_known_text() {
        let c = counter_for_encoding("cl100k_base").expect("known encoding");
        assert_eq!(c.count("hello world", true), 2);
        assert_eq!(c.encoding.encode("hello world"), vec![15339, 1917]);
        assert_eq!(
            c.count("<|endoftext|>", true),
            c.encoding.encode("<|endoftext|>").len()
        );
    }

    #[test]
    fn truncate_never_splits_a_character() {
        let c = counter_for_encoding("o200k_base").expect("known encoding");
        let text = "日本語のテキストと😀絵文字".repeat(20);
        for max in 0..40 {
            let cut = c.truncate(&text, max).expect("valid ids");
            assert!(text.starts_with(cut));
            assert!(c.count(cut, false) <= max);
        }
    }

    #[test]
    fn cache_hits_and_evicts() {
        let cache = TokenCache::new(2);
        let texts: Vec<String> = (0..3)
            .map(|i| format!("{i} {}", "word ".repeat(100)))
            .collect();
        let first = cache.count(Encoding::O200kBase, &texts[0]);
        assert_eq!(cache.count(Encoding::O200kBase, &texts[0]), first);
        assert_eq!(cache.stats().hits, 1);
        cache.count(Encoding::O200kBase, &texts[1]);
        cache.count(Encoding::O200kBase, &texts[2]);
        let stats = cache.stats();
        assert_eq!((stats.size, stats.evictions, stats.misses), (2, 1, 3));
    }

    #[test]
    fn pathological_inputs_are_linear_and_do_not_panic() {
        let c = counter_for_encoding("cl100k_base").expect("known encoding");
        for text in [
            " ".repeat(1 << 20),
            "a".repeat(1 << 20),
            "x1-".repeat(350_000),
        ] {
            assert!(c.count(&text, false) > 0);
            assert_eq!(c.count(&text, false), c.encoding.encode(&text).len());
        }
    }
}
