//! What the stages protect: the preamble (everything before the first user message), the
//! protected tail (the turn groups of the last assistant messages) and the latest user turn.

use super::{kind, AssemblyConfig, Columns};
use crate::assemble::role;

/// Where the latest user message, the first user message and the protected tail are.
#[derive(Debug, Default)]
pub(super) struct History {
    pub(super) first_user_seq: Option<u64>,
    pub(super) latest_user_turn: Option<u32>,
    /// Turns of the last `protect_last_assistant` assistant messages, sorted.
    pub(super) tail: Vec<u32>,
}

impl History {
    pub(super) fn scan(cfg: &AssemblyConfig, c: &Columns, order: &[u32]) -> Self {
        let is = |s: u32, r: u8| c.kind[s as usize] == kind::MESSAGE && c.role[s as usize] == r;
        let first_user_seq = order
            .iter()
            .find(|&&s| is(s, role::USER))
            .map(|&s| c.seq[s as usize]);
        let latest_user_turn = order
            .iter()
            .rev()
            .find(|&&s| is(s, role::USER))
            .map(|&s| c.turn[s as usize]);
        let mut tail: Vec<u32> = order
            .iter()
            .rev()
            .filter(|&&s| is(s, role::ASSISTANT))
            .take(cfg.protect_last_assistant)
            .map(|&s| c.turn[s as usize])
            .collect();
        tail.sort_unstable();
        tail.dedup();
        Self {
            first_user_seq,
            latest_user_turn,
            tail,
        }
    }

    /// Before the first user message (everything is, when there is none).
    pub(super) fn is_preamble(&self, seq: u64) -> bool {
        self.first_user_seq.is_none_or(|f| seq < f)
    }

    /// In the turn group of the latest user message or of one of the last assistant messages.
    pub(super) fn in_tail(&self, turn: u32) -> bool {
        self.latest_user_turn == Some(turn) || self.tail.binary_search(&turn).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{assembly, message, session};
    use super::*;

    fn scan(a: &mut crate::assemble::Assembly) -> History {
        a.refresh_orders();
        History::scan(&a.config, &a.cols, &a.orders.history.slots)
    }

    #[test]
    fn finds_the_first_and_latest_user_and_the_tail() {
        let mut a = assembly();
        let mut items = vec![message(0, 0, role::SYSTEM, "preamble")];
        items.extend(session(4, 1)); // seqs 1..=12, turns 0..=3
        a.upsert(items).expect("valid");
        let h = scan(&mut a);
        assert_eq!(h.first_user_seq, Some(1));
        assert_eq!(h.latest_user_turn, Some(3));
        assert_eq!(h.tail, vec![3], "protect_last_assistant = 1");
        assert!(h.is_preamble(0));
        assert!(!h.is_preamble(1));
        assert!(h.in_tail(3));
        assert!(!h.in_tail(2));
    }

    #[test]
    fn the_tail_holds_distinct_turns_of_the_last_assistants() {
        let mut a = assembly();
        a.config.protect_last_assistant = 3;
        let mut items = session(3, 1);
        // a second assistant message in turn 2: the last three assistants cover turns 1 and 2
        items.push(message(100, 2, role::ASSISTANT, "done"));
        a.upsert(items).expect("valid");
        let h = scan(&mut a);
        assert_eq!(h.tail, vec![1, 2]);
        assert!(h.in_tail(1) && !h.in_tail(0));
    }

    #[test]
    fn without_a_user_message_everything_is_preamble() {
        let mut a = assembly();
        a.upsert(vec![message(5, 0, role::ASSISTANT, "hello")])
            .expect("valid");
        let h = scan(&mut a);
        assert_eq!(h.first_user_seq, None);
        assert_eq!(h.latest_user_turn, None);
        assert!(h.is_preamble(u64::MAX));
        assert!(h.in_tail(0), "the assistant's own turn");
        assert!(!h.in_tail(1));
    }
}
