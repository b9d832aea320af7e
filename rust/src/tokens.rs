//! Token counting: exact for OpenAI encodings, calibrated estimates elsewhere.
//!
//! # Performance notes
//! - One engine counts, encodes and decodes: `toktok` (toktok-rs 0.3.0, MIT, vendored in
//!   `vendor/toktok-rs` with the changes listed in its NOTICE). Its pre-tokenizers are the
//!   cl100k/o200k regexes compiled by hand into byte-level state machines (no regex engine, so
//!   1 MB of spaces or of one character stays linear), and its BPE is the exact backtracking
//!   encoder of `bpe-openai` on a 2-byte radix trie. Ids equal tiktoken's; the parity tests in
//!   `tests/test_tokens.py` check that on every shared transcript and on generated text.
//! - It replaced `bpe-openai` (counting) plus `tiktoken-rs` (decoding), which compiled both
//!   vocabularies in twice, as expanded Rust tables: the extension shrank from 56.0 MB to
//!   5.4 MB (release build without LTO). Counting 4 MB of transcripts from Python on one thread
//!   went from ~6 to ~28 MB/s on the loaded shared 2-vCPU machine (same process, toktok's own
//!   Python package: ~25-27 MB/s); figures and how they were taken: docs/tokens.md.
//! - The vocabularies are embedded compressed (~4 MB of `.rodata`) and built on first use
//!   ([`Encoding::tokenizer`]): importing the module builds nothing.
//! - toktok memoizes short pre-tokens in a per-thread table (16 MiB each, allocated zeroed, so
//!   resident only as it fills). Upstream caps all tables at 32 MiB per process: the calling
//!   thread's two tables took it all and rayon's workers counted uncached, ~2.7x slower. The
//!   vendored copy sizes the cap for every thread that counts (caller + one worker per core).
//! - Counts of texts of at least [`MIN_CACHED_BYTES`] are cached by a 128-bit content hash
//!   ([`TokenCache`]); hashing runs at memory speed, so a repeated count costs a lookup.
//! - `count_many` spreads texts over rayon's pool (every core); callers release the GIL first.
//!   From Python, `Tokenizer.count_many` streams instead (`py/tokens.rs`): the UTF-8 conversion
//!   of each str needs the GIL, so runs of converted texts go to `cores - 1` workers while the
//!   calling thread converts the rest, then it counts beside them.
//! - Each pretoken cache has a 512 KiB front table (L2-resident) before its 16 MiB main table
//!   (L3): the main table's probe was the encoder's largest stall (vendored change, see NOTICE).
//! - Counting reuses one id buffer per thread ([`SCRATCH`]) instead of allocating ~1.3 bytes per
//!   input byte on every call.

use std::cell::RefCell;
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

/// Build an embedded encoding. The tables are compiled into the binary and checked by the unit
/// tests, so failing here means a corrupt build, not bad input.
fn build(name: &str) -> toktok::Tokenizer {
    toktok::Tokenizer::builtin(name)
        .unwrap_or_else(|e| panic!("the embedded {name} tables do not load: {e}"))
}

static CL100K: LazyLock<toktok::Tokenizer> = LazyLock::new(|| build("cl100k_base"));
static O200K: LazyLock<toktok::Tokenizer> = LazyLock::new(|| build("o200k_base"));

/// Ids buffers above this many entries (16 MiB) are freed after use rather than kept.
const SCRATCH_KEEP: usize = 4 << 20;

thread_local! {
    /// This thread's reusable id buffer for counting.
    static SCRATCH: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
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

    /// The engine for this encoding, built on first use (~0.1-1 s, ~15-31 MB).
    pub fn tokenizer(self) -> &'static toktok::Tokenizer {
        match self {
            Self::Cl100kBase => &CL100K,
            Self::O200kBase => &O200K,
        }
    }

    /// Exact token count of `text`, bypassing the cache.
    pub fn count_uncached(self, text: &str) -> usize {
        let tok = self.tokenizer();
        SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut ids) => {
                ids.clear();
                tok.encode_into(text.as_bytes(), &mut ids);
                let n = ids.len();
                if ids.capacity() > SCRATCH_KEEP {
                    *ids = Vec::new();
                }
                n
            }
            Err(_) => tok.count(text.as_bytes()),
        })
    }

    /// Token ids of `text`; special-token text is encoded as ordinary text.
    pub fn encode(self, text: &str) -> Vec<u32> {
        self.tokenizer().encode(text.as_bytes())
    }

    /// Raw bytes of `ids` (may end inside a UTF-8 character); special-token ids decode to
    /// their text.
    pub fn decode_bytes(self, ids: &[u32]) -> CoreResult<Vec<u8>> {
        let tok = self.tokenizer();
        if let Some(&token) = ids.iter().find(|&&id| !tok.known_id(id)) {
            return Err(CoreError::InvalidToken {
                token,
                encoding: self.name(),
            });
        }
        Ok(tok.decode(ids))
    }

    /// Byte length of each of `ids` (ordinary tokens, as [`Encoding::encode`] returns them).
    fn token_lens(self, ids: &[u32]) -> CoreResult<Vec<usize>> {
        let tok = self.tokenizer();
        ids.iter()
            .map(|&id| {
                tok.token_bytes(id)
                    .map(<[u8]>::len)
                    .ok_or(CoreError::InvalidToken {
                        token: id,
                        encoding: self.name(),
                    })
            })
            .collect()
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// A model family without a public tokenizer, estimated from `o200k_base` counts.
///
/// Claude's factor was calibrated on the shared transcripts: the ratio of the `output_tokens`
/// the provider billed for assistant messages to our `o200k_base` count of the same text and
/// tool calls (see `benches/calibrate.py` and docs/tokens.md). Gemini's is not calibrated.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimator {
    /// Family name (`claude`, `gemini`).
    pub family: &'static str,
    /// Multiplier applied to the `o200k_base` count.
    pub factor: f64,
}

/// Calibrated on 530 assistant messages of the shared transcripts (Claude Code: opus-4-6 and
/// haiku-4-5; pi: sonnet-4-5) with final billed `output_tokens` and no hidden reasoning:
/// Σ billed / Σ `o200k_base` = 1.381 (Claude Code 1.391, pi 1.376; per-message median 1.85,
/// quartiles 1.29-2.76). Small tool calls carry fixed framing (a fit gives 1.05 per token + ~40
/// per tool call + ~20 per message), so long plain text is over-estimated (1.11 on messages of
/// 500+ tokens): the safe side for a budget. Reproduce with `python benches/calibrate.py`.
pub const CLAUDE: Estimator = Estimator {
    family: "claude",
    factor: 1.38,
};
/// Not calibrated: the shared transcripts hold no Gemini usage. Google documents ~4 characters
/// per token; `o200k_base` gives 4.13 on the transcripts' assistant prose, a ratio of ~1.03.
/// 1.08 keeps a ~5% safety margin over that rule of thumb.
pub const GEMINI: Estimator = Estimator {
    family: "gemini",
    factor: 1.08,
};

const MODEL_HINT: &str = "known families: gpt-4o, gpt-4.1, gpt-4.5, gpt-5, o1/o3/o4 (o200k_base); \
gpt-4, gpt-3.5-turbo, text-embedding-3, davinci-002 (cl100k_base); claude-* and gemini-* \
(estimated), also as ft: fine-tunes and Bedrock ids. \
Pass encoding=\"cl100k_base\" or encoding=\"o200k_base\" for any other model";

/// How a model's text is counted: an exact encoding, optionally scaled by an estimator.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Counter {
    /// The exact encoding underneath.
    pub encoding: Encoding,
    /// `None` for exact OpenAI counts.
    pub estimator: Option<Estimator>,
}

/// Cloud vendors' prefixes of a model id on Amazon Bedrock (`anthropic.claude-…`, after an
/// optional inference-profile region such as `us.` or `global.`).
const VENDORS: [&str; 3] = ["anthropic.", "openai.", "google."];

/// `model` in lower case without what says where it runs rather than what it is: a provider
/// path (`openai/gpt-4o`, `publishers/google/models/gemini-2.0-flash`), a fine-tune's `ft:`
/// prefix (`ft:gpt-4o-mini-2024-07-18:org::id`), a Bedrock vendor prefix and region
/// (`us.anthropic.claude-sonnet-4-20250514-v1:0`). What a family's prefix is looked up in.
pub fn bare_model(model: &str) -> String {
    let lower = model.trim().to_ascii_lowercase();
    let mut bare = lower.rsplit('/').next().unwrap_or(&lower);
    if let Some(rest) = bare.strip_prefix("ft:") {
        bare = rest;
    }
    for vendor in VENDORS {
        if let Some(at) = bare.find(vendor) {
            let region = &bare[..at];
            // nothing before the vendor, or one short label ending in a dot ("us.", "apac.")
            let one_label = region.len() <= 8
                && region.ends_with('.')
                && region[..region.len() - 1]
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b == b'-');
            if region.is_empty() || one_label {
                bare = &bare[at + vendor.len()..];
                break;
            }
        }
    }
    bare.to_string()
}

/// Resolve a model name (optionally provider-prefixed, e.g. `openai/gpt-4o`, see
/// [`bare_model`]) to a counter.
pub fn counter_for_model(model: &str) -> CoreResult<Counter> {
    let bare = bare_model(model);
    let bare = bare.as_str();
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
        "davinci-002",
        "babbage-002",
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

    /// The cached count of `text` (estimated for non-OpenAI families), `None` when the cache
    /// holds none (a text shorter than [`MIN_CACHED_BYTES`] never is held). A hit counts as
    /// one, as in [`Counter::count`]; a miss is counted when the text is.
    pub fn cached(&self, text: &str) -> Option<usize> {
        let base = TokenCache::global().lookup(self.encoding, text)?;
        Some(self.scale(base))
    }

    /// Counts of many texts in parallel on every core.
    pub fn count_many<S: AsRef<str> + Sync>(&self, texts: &[S], cached: bool) -> Vec<usize> {
        let bytes: usize = texts.iter().map(|t| t.as_ref().len()).sum();
        if bytes < PARALLEL_MIN_BYTES {
            // Waking the pool costs more than counting a small batch on this thread.
            return texts
                .iter()
                .map(|t| self.count(t.as_ref(), cached))
                .collect();
        }
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
        let lens = self.encoding.token_lens(&ids[..budget])?;
        let mut end: usize = lens.iter().sum();
        for keep in (0..=budget).rev() {
            if keep < budget {
                end -= lens[keep];
            }
            // A token can end inside a character: back off to the character boundary.
            let mut cut = end;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            let prefix = text.get(..cut).unwrap_or("");
            // Re-tokenizing a prefix can merge differently at the cut; shrink until it fits.
            if keep == 0 || self.count(prefix, false) <= max_tokens {
                return Ok(prefix);
            }
        }
        Ok("")
    }
}

/// Texts shorter than this are counted directly: hashing would cost about as much.
pub const MIN_CACHED_BYTES: usize = 64;
/// Batches smaller than this (in bytes) are counted on the calling thread.
pub const PARALLEL_MIN_BYTES: usize = 64 * 1024;
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

    fn key(encoding: Encoding, text: &str) -> Key {
        (
            xxhash_rust::xxh3::xxh3_128(text.as_bytes()),
            encoding.index() as u8,
        )
    }

    /// The count of `text` with `encoding` when the same content was counted and is still
    /// held (a hit, counted as one); `None` otherwise, counting nothing.
    pub fn lookup(&self, encoding: Encoding, text: &str) -> Option<usize> {
        if text.len() < MIN_CACHED_BYTES {
            return None;
        }
        let n = *self.inner.lock().map.get(&Self::key(encoding, text))?;
        self.hits.fetch_add(1, Ordering::Relaxed);
        Some(n as usize)
    }

    /// Count `text` with `encoding`, answering from the cache when the same content was seen.
    pub fn count(&self, encoding: Encoding, text: &str) -> usize {
        if text.len() < MIN_CACHED_BYTES {
            return encoding.count_uncached(text);
        }
        let key = Self::key(encoding, text);
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
    fn fine_tunes_and_bedrock_ids_resolve_to_their_family() {
        let counted = |m: &str| counter_for_model(m).map(|c| (c.encoding, c.exact()));
        let cases = [
            (
                "ft:gpt-4o-mini-2024-07-18:my-org:custom:9abcDEF",
                Encoding::O200kBase,
                true,
            ),
            (
                "ft:gpt-3.5-turbo-0125:org::8xyz",
                Encoding::Cl100kBase,
                true,
            ),
            ("ft:davinci-002:org::1", Encoding::Cl100kBase, true),
            ("babbage-002", Encoding::Cl100kBase, true),
            (
                "anthropic.claude-3-5-sonnet-20240620-v1:0",
                Encoding::O200kBase,
                false,
            ),
            (
                "us.anthropic.claude-sonnet-4-20250514-v1:0",
                Encoding::O200kBase,
                false,
            ),
            (
                "global.anthropic.claude-opus-4-1-20250805-v1:0",
                Encoding::O200kBase,
                false,
            ),
            ("openai.gpt-oss-120b-1:0", Encoding::O200kBase, true),
        ];
        for (model, encoding, exact) in cases {
            assert_eq!(counted(model), Ok((encoding, exact)), "{model}");
        }
        assert_eq!(bare_model(" OpenAI/FT:GPT-4o:x "), "gpt-4o:x");
        // a vendor name further in is part of the model's own name, not a prefix
        assert_eq!(
            bare_model("my.long.anthropic.claude"),
            "my.long.anthropic.claude"
        );
        assert!(counter_for_model("meta.llama3-70b-instruct-v1:0").is_err());
        assert!(counter_for_model("ft:").is_err());
    }

    #[test]
    fn embedded_tables_load_and_threads_agree() {
        let text = "Hello, World! 123456 it's   spaced\n\n  \tdone 日本語 😀 x/y/z \r\n ";
        for enc in Encoding::ALL {
            assert!(
                toktok::Tokenizer::builtin(enc.name()).is_ok(),
                "{}",
                enc.name()
            );
            let serial = enc.count_uncached(text);
            let counts: Vec<usize> = std::thread::scope(|s| {
                let hs: Vec<_> = (0..3)
                    .map(|_| s.spawn(|| enc.count_uncached(text)))
                    .collect();
                hs.into_iter().filter_map(|h| h.join().ok()).collect()
            });
            assert_eq!(counts, vec![serial; 3]);
            assert_eq!(serial, enc.encode(text).len());
            let ids = enc.encode(text);
            assert_eq!(enc.decode_bytes(&ids), Ok(text.as_bytes().to_vec()));
        }
    }

    #[test]
    fn every_token_is_found_by_its_bytes() {
        // The vendored vocabulary's bytes->id table (open addressing over the token bytes,
        // built on a second thread beside the byte trie) names every id by its bytes, and no
        // id for bytes that are no token.
        for enc in Encoding::ALL {
            let tok = enc.tokenizer();
            let n = tok.vocab_size() as u32;
            for id in 0..n {
                let bytes = tok.token_bytes(id).expect("a base id has bytes");
                assert_eq!(tok.token_id(bytes), i64::from(id), "{} id {id}", enc.name());
            }
            let long = vec![b'q'; 300];
            for absent in [&b""[..], &long[..], &b"\xff\xfe\xfd\xfc\xfb"[..]] {
                assert_eq!(tok.token_id(absent), -1, "{} {absent:?}", enc.name());
            }
        }
    }

    #[test]
    fn warm_pretoken_caches_give_the_cold_ids() {
        // More distinct pretokens (60k) than the per-thread front table holds (16k slots), each
        // seen several times, so entries are hit, evicted and refilled between the passes.
        let words: String = (0..60_000u32)
            .map(|i| {
                format!(
                    " w{}x{} {}",
                    i % 977,
                    i / 977,
                    ["the", "of", "and"][i as usize % 3]
                )
            })
            .collect();
        for enc in Encoding::ALL {
            // The first pass on a new thread (whose caches start empty, or a retired thread's):
            // the later passes on this thread hit what it filled, and must give the same ids.
            // tests/test_tokens.py checks the ids themselves against tiktoken.
            let cold = std::thread::scope(|s| s.spawn(|| enc.encode(&words)).join().ok());
            let cold = cold.expect("the cold pass ran");
            for _ in 0..3 {
                assert_eq!(enc.encode(&words), cold, "{}", enc.name());
            }
            assert_eq!(enc.count_uncached(&words), cold.len());
        }
    }

    #[test]
    fn decode_rejects_unknown_ids_and_knows_specials() {
        let enc = Encoding::Cl100kBase;
        assert_eq!(
            enc.decode_bytes(&[15339, 1_000_000]),
            Err(CoreError::InvalidToken {
                token: 1_000_000,
                encoding: "cl100k_base"
            })
        );
        assert_eq!(enc.decode_bytes(&[100_257]), Ok(b"<|endoftext|>".to_vec()));
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
    fn a_lookup_finds_what_was_counted_and_counts_only_its_hits() {
        let cache = TokenCache::new(4);
        let text = "a text long enough to be cached, as every text of 64 bytes or more is";
        assert_eq!(cache.lookup(Encoding::O200kBase, text), None);
        assert_eq!(cache.stats().misses, 0); // a lookup that finds nothing counts nothing
        let n = cache.count(Encoding::O200kBase, text);
        assert_eq!(cache.lookup(Encoding::O200kBase, text), Some(n));
        assert_eq!(cache.lookup(Encoding::Cl100kBase, text), None); // its own encoding's
        assert_eq!(cache.lookup(Encoding::O200kBase, "short"), None); // never held
        let stats = cache.stats();
        assert_eq!((stats.hits, stats.misses), (1, 1));
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
    fn parallel_counts_agree_with_the_cache_on_and_off() {
        // Texts of at least `MIN_CACHED_BYTES`, many repeated, and two shorter ones.
        let texts: Vec<String> = (0..3000)
            .map(|i| format!("{} {}", i % 97, "token counting text ".repeat(4 + i % 5)))
            .chain(["short".to_string(), String::new()])
            .collect();
        let c = counter_for_encoding("cl100k_base").expect("known encoding");
        let exact: Vec<usize> = texts.iter().map(|t| c.encoding.count_uncached(t)).collect();
        assert!(texts.iter().map(String::len).sum::<usize>() > PARALLEL_MIN_BYTES);
        for cached in [false, true, true] {
            assert_eq!(c.count_many(&texts, cached), exact, "cached={cached}");
        }
        // Threads sharing one small cache: every count exact, every cacheable text a hit or a
        // miss, the size bounded.
        let cache = TokenCache::new(16);
        let counts: Vec<Vec<usize>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| s.spawn(|| texts.iter().map(|t| cache.count(c.encoding, t)).collect()))
                .collect();
            hs.into_iter().filter_map(|h| h.join().ok()).collect()
        });
        assert_eq!(counts, vec![exact; 4]);
        let stats = cache.stats();
        assert_eq!(stats.hits + stats.misses, 4 * 3000);
        assert!(stats.size <= 16 && stats.misses >= 97);
        // A miss whose key another thread inserted meanwhile inserts nothing.
        assert!(stats.evictions >= 97 - 16);
        assert!(stats.evictions + stats.size as u64 <= stats.misses);
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
        // tiktoken's fancy-regex pre-tokenizer overflows its stack on this one.
        let spaces = " ".repeat(1 << 20);
        let o200k = counter_for_encoding("o200k_base").expect("known encoding");
        assert_eq!(
            o200k.encoding.encode(&spaces).len(),
            o200k.count(&spaces, false)
        );
        assert_eq!(o200k.truncate(&spaces, 10), Ok(&spaces[..1280]));
    }
}
