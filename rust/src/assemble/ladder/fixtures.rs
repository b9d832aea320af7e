//! Items and assemblies shared by the tests of the ladder's stages.

use crate::assemble::{flags, kind, role, Assembly, AssemblyConfig, ItemSpec, Plan};
use crate::tokens::counter_for_encoding;

/// Window indices of the design defaults.
pub const SYS: u8 = 0;
pub const MEM: u8 = 1;
pub const HIST: u8 = 2;
pub const TOOL: u8 = 3;

/// Design defaults with small soft-trim sizes and one protected assistant turn.
pub fn assembly() -> Assembly {
    let counter = counter_for_encoding("o200k_base").expect("known encoding");
    let mut config = AssemblyConfig::design_defaults(counter);
    config.soft_trim_chars = 400;
    config.soft_keep_chars = 100;
    config.protect_last_assistant = 1;
    Assembly::new(config).expect("valid config")
}

/// A context grain labelled `label`.
pub fn grain(id: &str, text: &str, window: u8, priority: i64, seq: u64) -> ItemSpec {
    ItemSpec {
        node_id: id.into(),
        text: text.into(),
        window,
        priority,
        seq,
        label: "label".into(),
        ..ItemSpec::default()
    }
}

/// A history message `hist.<seq>` (a tool result when `role` is TOOL).
pub fn message(seq: u64, turn: u32, role: u8, text: &str) -> ItemSpec {
    ItemSpec {
        node_id: format!("hist.{seq}"),
        text: text.into(),
        window: HIST,
        seq,
        kind: if role == role::TOOL {
            kind::TOOL_RESULT
        } else {
            kind::MESSAGE
        },
        role,
        turn,
        overhead: 4,
        label: "tool result: search".into(),
        ..ItemSpec::default()
    }
}

/// `turns` user turns: user, assistant with a tool call, a tool result of `result_lines` lines.
pub fn session(turns: u32, result_lines: usize) -> Vec<ItemSpec> {
    let mut items = vec![];
    for t in 0..turns {
        let seq = u64::from(t) * 3 + 1;
        items.push(message(
            seq,
            t,
            role::USER,
            &format!("question {t} about the code"),
        ));
        let mut call = message(seq + 1, t, role::ASSISTANT, "let me search");
        call.flags = flags::HAS_TOOL_CALL;
        items.push(call);
        let lines: String = (0..result_lines)
            .map(|i| format!("match {t}.{i}: fn x() {{}}\n"))
            .collect();
        items.push(message(seq + 2, t, role::TOOL, &lines));
    }
    items
}

/// An assembly holding `items` and the tokens they need in full.
pub fn loaded(items: Vec<ItemSpec>) -> (Assembly, usize) {
    let mut a = assembly();
    a.upsert(items).expect("valid");
    let full = a.plan(1_000_000).expect("fits").total_before;
    (a, full)
}

/// The slot of live item `id`.
pub fn by_id(plan: &Plan, id: &str) -> u32 {
    plan.live
        .iter()
        .copied()
        .find(|&s| plan.node_id(s) == id)
        .unwrap_or_else(|| panic!("{id} is live"))
}

/// Node ids of `slots`.
pub fn ids<'p>(plan: &'p Plan, slots: &[u32]) -> Vec<&'p str> {
    slots.iter().map(|&s| plan.node_id(s)).collect()
}

/// A session shaped as the engine builds it: each message its own turn (a tool result in its
/// call's), `requests` user requests, each answered by an assistant message and followed by
/// `steps(t)` further tool steps of the agent loop. Request `t` is explicit user input (a long
/// request, flagged FEEDBACK) when `t` is even, a short "yes" otherwise; answers are long
/// plain text or a tool call with its result.
pub fn conversation(requests: u32, steps: impl Fn(u32) -> u32) -> Vec<ItemSpec> {
    let mut items = vec![];
    let (mut seq, mut turn) = (0u64, 0u32);
    let mut push = |items: &mut Vec<ItemSpec>, role: u8, turn: u32, text: &str, flags: u8| {
        let mut m = message(seq, turn, role, text);
        m.flags = flags;
        items.push(m);
        seq += 1;
    };
    for t in 0..requests {
        if t % 2 == 0 {
            let request = format!(
                "request {t}: {}",
                "please look at the parser again ".repeat(3)
            );
            push(&mut items, role::USER, turn, &request, flags::FEEDBACK);
        } else {
            push(&mut items, role::USER, turn, "yes", 0);
        }
        turn += 1;
        if t % 3 == 0 {
            push(
                &mut items,
                role::ASSISTANT,
                turn,
                "let me check",
                flags::HAS_TOOL_CALL,
            );
            let lines = format!("line {t} of the result\n").repeat(12);
            push(&mut items, role::TOOL, turn, &lines, 0);
        } else {
            let answer = format!("answer {t}: {}", "the parser reads the tokens. ".repeat(20));
            push(&mut items, role::ASSISTANT, turn, &answer, 0);
        }
        turn += 1;
        for _ in 0..steps(t) {
            push(
                &mut items,
                role::ASSISTANT,
                turn,
                "next step",
                flags::HAS_TOOL_CALL,
            );
            push(&mut items, role::TOOL, turn, &"step output\n".repeat(8), 0);
            turn += 1;
        }
    }
    items
}
