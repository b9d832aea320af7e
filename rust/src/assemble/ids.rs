//! [`Ids`]: the node ids of an [`Assembly`](super::Assembly)'s slots, shared with its plans.
//!
//! A [`Plan`](super::Plan) names its items by slot, so it keeps the assembly's ids as they were
//! when it was made. One shared `Vec` of every id made each write of the assembly while a plan
//! was alive (a caller holds the last render's, and its report reads the plan) copy every id of
//! the session: a warm render adding two messages to a 1,000-message session spent most of its
//! upsert on that copy. The ids are kept in chunks instead: a plan shares the chunks, and a
//! write copies only the chunk of the slot it writes, when a plan holds it.

use std::ops::Index;
use std::sync::Arc;

/// Ids per chunk: what a write copies at most while a plan holds the chunk.
const CHUNK: usize = 64;

/// Node ids by slot, in chunks of [`CHUNK`] shared on clone (a clone counts one reference per
/// chunk, not per id).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ids {
    chunks: Vec<Arc<Vec<Arc<str>>>>,
    len: usize,
}

impl Ids {
    /// Number of slots.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there is no slot.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The id of slot `i`, if there is such a slot.
    pub fn get(&self, i: usize) -> Option<&Arc<str>> {
        self.chunks.get(i / CHUNK)?.get(i % CHUNK)
    }

    /// Add a slot holding `id` at the end.
    pub fn push(&mut self, id: Arc<str>) {
        if self.len % CHUNK == 0 {
            self.chunks.push(Arc::new(Vec::with_capacity(CHUNK)));
        }
        if let Some(last) = self.chunks.last_mut() {
            Arc::make_mut(last).push(id);
        }
        self.len += 1;
    }

    /// Put `id` in slot `i`; false (nothing changed) when there is no such slot.
    pub fn set(&mut self, i: usize, id: Arc<str>) -> bool {
        let Some(chunk) = self.chunks.get_mut(i / CHUNK) else {
            return false;
        };
        if i % CHUNK >= chunk.len() {
            return false;
        }
        match Arc::make_mut(chunk).get_mut(i % CHUNK) {
            Some(slot) => {
                *slot = id;
                true
            }
            None => false,
        }
    }

    /// Which chunks `self` shares with `other` (one was cloned from the other and neither has
    /// written them since): a slot in a shared chunk holds the same id in both, found without
    /// reading either id.
    pub fn shared_with(&self, other: &Ids) -> Shared {
        Shared(
            self.chunks
                .iter()
                .zip(&other.chunks)
                .map(|(a, b)| Arc::ptr_eq(a, b))
                .collect(),
        )
    }

    /// The ids in slot order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<str>> {
        self.chunks.iter().flat_map(|chunk| chunk.iter())
    }

    /// The ids of the slots `keep` says to keep (slots past its end are dropped), renumbered
    /// from 0 in slot order.
    pub fn kept(&self, keep: &[bool]) -> Self {
        self.iter()
            .zip(keep)
            .filter(|(_, &k)| k)
            .map(|(id, _)| Arc::clone(id))
            .collect()
    }
}

/// The chunks two [`Ids`] share ([`Ids::shared_with`]).
#[derive(Debug)]
pub struct Shared(Vec<bool>);

impl Shared {
    /// Whether slot `i` is in a shared chunk: then it holds the same id in both.
    pub fn slot(&self, i: usize) -> bool {
        self.0.get(i / CHUNK).copied().unwrap_or(false)
    }
}

impl FromIterator<Arc<str>> for Ids {
    fn from_iter<I: IntoIterator<Item = Arc<str>>>(iter: I) -> Self {
        let mut ids = Self::default();
        for id in iter {
            ids.push(id);
        }
        ids
    }
}

impl From<Vec<Arc<str>>> for Ids {
    fn from(ids: Vec<Arc<str>>) -> Self {
        ids.into_iter().collect()
    }
}

impl Index<usize> for Ids {
    type Output = Arc<str>;

    /// The id of slot `i`; panics when there is no such slot, as a `Vec` does.
    fn index(&self, i: usize) -> &Arc<str> {
        &self.chunks[i / CHUNK][i % CHUNK]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Ids {
        (0..n)
            .map(|i| Arc::from(format!("hist.{i}").as_str()))
            .collect()
    }

    #[test]
    fn slots_across_chunks() {
        let a = ids(3 * CHUNK + 5);
        assert_eq!(a.len(), 3 * CHUNK + 5);
        for i in [0, CHUNK - 1, CHUNK, 2 * CHUNK + 7, 3 * CHUNK + 4] {
            assert_eq!(&*a[i], format!("hist.{i}"));
            assert_eq!(a.get(i).map(|s| &**s), Some(format!("hist.{i}").as_str()));
        }
        assert!(a.get(3 * CHUNK + 5).is_none());
        let all: Vec<String> = a.iter().map(|s| s.to_string()).collect();
        assert_eq!(all.len(), a.len());
        assert_eq!(all[CHUNK + 1], format!("hist.{}", CHUNK + 1));
    }

    #[test]
    fn shared_chunks_hold_the_same_ids_in_both() {
        let mut a = ids(2 * CHUNK + 3);
        let held = a.clone();
        let shared = a.shared_with(&held);
        assert!((0..a.len()).all(|i| shared.slot(i)));
        assert!(!shared.slot(a.len() + CHUNK));
        a.push(Arc::from("new")); // writes the last chunk only
        assert!(a.set(1, Arc::from("moved"))); // and the first
        let shared = a.shared_with(&held);
        assert!(!shared.slot(0) && !shared.slot(1) && !shared.slot(2 * CHUNK));
        assert!((CHUNK..2 * CHUNK).all(|i| shared.slot(i) && a[i] == held[i]));
        let fresh = ids(2 * CHUNK + 3); // equal ids, made apart: nothing shared
        assert!((0..fresh.len()).all(|i| !fresh.shared_with(&held).slot(i)));
    }

    #[test]
    fn a_clone_keeps_its_ids_while_the_original_is_written() {
        let mut a = ids(CHUNK + 2);
        let held = a.clone();
        a.push(Arc::from("new"));
        assert!(a.set(1, Arc::from("moved")));
        assert!(a.set(CHUNK + 1, Arc::from("moved too")));
        assert!(!a.set(CHUNK + 3, Arc::from("none")));
        assert_eq!((held.len(), a.len()), (CHUNK + 2, CHUNK + 3));
        assert_eq!((&*held[1], &*a[1]), ("hist.1", "moved"));
        assert_eq!(&*held[CHUNK + 1], format!("hist.{}", CHUNK + 1));
        assert_eq!((&*a[CHUNK + 1], &*a[CHUNK + 2]), ("moved too", "new"));
        // the chunk not written is still the one the clone holds
        assert!(Arc::ptr_eq(&held.chunks[0], &held.clone().chunks[0]));
        assert!(!Arc::ptr_eq(&held.chunks[0], &a.chunks[0]));
    }

    #[test]
    fn kept_renumbers_the_slots_kept() {
        let a = ids(CHUNK + 3);
        let keep: Vec<bool> = (0..CHUNK + 3).map(|i| i % 2 == 1).collect();
        let b = a.kept(&keep);
        assert_eq!(b.len(), (CHUNK + 3) / 2);
        assert_eq!(&*b[0], "hist.1");
        assert_eq!(b, a.iter().skip(1).step_by(2).cloned().collect::<Ids>());
    }
}
