"""``ctxengine demo`` and ``ctxengine replay``: a recorded session through the engine, call by call.

Both render before every model call of the recording and print a per-call table, the largest
cuts, every compaction and a summary; ``--json`` prints the same data (every call) for scripts.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import anyio
from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.measure import Measurement
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from .assemble.budget import Budget
from .assemble.report import GrainDecision
from .cli import (
    Parser,
    UsageError,
    add_common,
    budget_arg,
    given,
    interrupts_held,
    print_json,
    stderr_console,
    stdout_console,
    writes_files,
)
from .engine import ContextEngine
from .errors import TranscriptError
from .replay import ReplayStep, demo_transcript_path, replay
from .transcript import FORMATS, Transcript, first_session, load, load_all

__all__ = ("CallRow", "Run", "add_to", "middle_ellipsis")

DEMO_BUDGET: Final = 16_000
REPLAY_BUDGET: Final = 32_000
PROVIDERS: Final = ("openai", "openai-responses", "anthropic", "gemini")
SHOWN_CUTS: Final = 8
NODE_WIDTH: Final = 26
#: The standard streams by path, and the folders whose entries are file descriptors by number
#: (Linux's ``/proc/<pid>/fd``, which ``/proc/self/fd``, ``/proc/thread-self/fd`` and
#: ``/dev/fd`` lead to; the BSDs' and macOS's ``/dev/fd``).
_STREAMS: Final = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}
_DESCRIPTORS: Final = re.compile(r"/dev/fd|/proc/(?P<pid>\d+)(?:/task/\d+)?/fd")
_MAX_LINKS: Final = 40  # as Linux's limit of links followed in one path


@dataclass(frozen=True, slots=True)
class CallRow:
    """One model call of the replay: what the render held and what it cost."""

    call: int
    messages: int
    tokens: int
    kept: int
    folded: int
    dropped: int
    windows: dict[str, int]
    compactions: list[dict[str, Any]]
    ms: float
    #: Whether the payload starts with the whole payload of the call before (a provider's prompt
    #: cache can then reuse all of it); the first call extends nothing and counts as kept.
    prefix_kept: bool = True
    #: The first call after the recording emptied its conversation (aider's ``/clear``): the
    #: replay starts a new session there, so a break of the prefix is the recording's.
    after_clear: bool = False
    #: The render's demand passed its high-water mark, so the ladder cut it down to its target:
    #: a low-water-mark trim (the room up to the mark is what the next calls add into).
    past_mark: bool = False
    #: Media parts (images, PDFs) sent as text placeholders for the provider's per-request
    #: limits; they change only by the limit's steps (:mod:`ctxengine.inject.images`).
    media_placeholders: int = 0

    @classmethod
    def of(cls, step: ReplayStep, prefix_kept: bool = True) -> CallRow:
        report = step.rendered.report
        counts = report.counts()
        return cls(
            call=step.call,
            messages=step.messages,
            tokens=step.rendered.tokens,
            kept=counts.get("kept", 0),
            folded=counts.get("folded", 0),
            dropped=counts.get("dropped", 0),
            windows={w["window"]: int(w["used"]) for w in report.windows},
            compactions=[c for c in report.compactions if c.get("ok")],
            ms=1e3 * report.timings.get("total", 0.0),
            prefix_kept=prefix_kept,
            after_clear=step.after_clear,
            past_mark=report.high_water is not None
            and sum(int(w["demand"]) for w in report.windows) > report.high_water,
            media_placeholders=int(report.hygiene.get("counts", {}).get("image_omitted", 0)),
        )

    def break_cause(self, before: CallRow | None) -> str | None:
        """Why this call's payload does not extend the previous one (``before``'s), or None
        when it does: ``"compaction"``, ``"mark"`` (a low-water-mark trim: the render passed
        its high-water mark and was cut down to its target), ``"media_limit"`` (a step of a
        provider's per-request media limit), ``"clear"`` (the recording emptied its
        conversation) or ``"elsewhere"`` (none of these: a break the engine has no reason
        for)."""
        if self.prefix_kept:
            return None
        if self.after_clear:
            return "clear"
        if self.compactions:
            return "compaction"
        if self.past_mark:
            return "mark"
        if before is not None and self.media_placeholders != before.media_placeholders:
            return "media_limit"
        return "elsewhere"

    def to_dict(self, budget: int) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in self.__slots__}
        out["within_budget"] = self.tokens <= budget
        return out


@dataclass(slots=True)
class Run:
    """What a replay produced: a row per call, the largest cut per grain, the last render."""

    name: str
    transcript: Transcript
    model: str
    provider: str
    budget: int
    rows: list[CallRow] = field(default_factory=list)
    cuts: dict[str, tuple[int, GrainDecision]] = field(default_factory=dict)
    last: ReplayStep | None = None
    seconds: float = 0.0
    #: Which session of the file is replayed (1-based) and how many it holds (an aider log
    #: holds one per launch, an OpenHands output one per instance).
    session: int = 1
    sessions: int = 1

    def add(self, step: ReplayStep) -> None:
        before = None if self.last is None else self.last.rendered.payload
        self.rows.append(CallRow.of(step, before is None or extends(step.rendered.payload, before)))
        self.last = step
        for g in step.rendered.report:
            cut = g.tokens_before - g.tokens_after
            if g.decision in ("folded", "dropped") and cut > 0:
                seen = self.cuts.get(g.node_id)
                if seen is None or g.tokens_before - g.tokens_after > _cut(seen[1]):
                    self.cuts[g.node_id] = (step.call, g)

    def largest_cuts(self, n: int = SHOWN_CUTS) -> list[tuple[int, GrainDecision]]:
        """The ``n`` grains that lost the most tokens in one render, largest first."""
        return sorted(self.cuts.values(), key=lambda c: (-_cut(c[1]), c[0]))[:n]

    def break_causes(self) -> list[str | None]:
        """:meth:`CallRow.break_cause` of each call, in order."""
        return [r.break_cause(self.rows[n - 1] if n else None) for n, r in enumerate(self.rows)]

    def compactions(self) -> list[tuple[CallRow, dict[str, Any]]]:
        return [(row, c) for row in self.rows for c in row.compactions]

    def summary(self) -> dict[str, Any]:
        peak = max((r.tokens for r in self.rows), default=0)
        causes = self.break_causes()
        # a break after a clear is the recording's (it emptied the conversation), not the engine's
        breaks = [c for c in causes if c is not None and c != "clear"]
        return {
            "calls": len(self.rows),
            "peak_tokens": peak,
            "compactions": len(self.compactions()),
            "prefix_breaks": len(breaks),
            "prefix_breaks_at_compaction": breaks.count("compaction"),
            "prefix_breaks_at_mark": breaks.count("mark"),
            "prefix_breaks_at_media_limit": breaks.count("media_limit"),
            "prefix_breaks_elsewhere": breaks.count("elsewhere"),
            "prefix_breaks_at_clear": causes.count("clear"),
            "within_budget": all(r.tokens <= self.budget for r in self.rows),
            "seconds": round(self.seconds, 3),
        }

    def to_dict(self) -> dict[str, Any]:
        meta = self.transcript.meta
        return {
            "transcript": {
                "name": self.name,
                "format": self.transcript.source_format,
                "messages": len(self.transcript),
                "path": meta.get("path"),
                "session": self.session,
                "sessions": self.sessions,
            },
            "model": self.model,
            "provider": self.provider,
            "budget": self.budget,
            "summary": self.summary(),
            "calls": [
                {**r.to_dict(self.budget), "prefix_break": cause}
                for r, cause in zip(self.rows, self.break_causes(), strict=True)
            ],
            "largest_cuts": [{"call": c, **g.to_dict()} for c, g in self.largest_cuts()],
            "last_report": None if self.last is None else self.last.rendered.report.to_dict(),
        }


#: Where each provider's payload keeps its turns (everything else must stay equal).
_TURNS: Final = ("messages", "input", "contents")


def extends(payload: dict[str, Any], before: dict[str, Any]) -> bool:
    """Whether ``payload`` is ``before`` with turns added at the end: its system part (and any
    other field) unchanged and its turns starting with all of ``before``'s, the last of them
    possibly grown by blocks at its end (:func:`_grown`). Anything else breaks the provider's
    prompt-cache prefix."""
    key = next((k for k in _TURNS if k in payload), None)
    if key is None or key not in before:
        return payload == before
    if any(payload.get(k) != v for k, v in before.items() if k != key) or len(payload) != len(
        before
    ):
        return False
    turns, old = payload[key], before[key]
    if not old:
        return True
    if len(turns) < len(old):
        return False
    last = len(old) - 1
    return turns[:last] == old[:last] and (
        turns[last] == old[last] or _grown(turns[last], old[last])
    )


def _grown(turn: Any, old: Any) -> bool:
    """Whether ``turn`` is ``old`` with blocks added after its own (Anthropic's ``content``,
    Gemini's ``parts``): a message of the same role sent after ``old`` merged into its turn.
    The providers cache a prompt by its blocks in order, so the prefix through ``old``'s last
    block is kept, as when a turn is added."""
    if not isinstance(turn, dict) or not isinstance(old, dict) or turn.keys() != old.keys():
        return False
    field = next((k for k in ("content", "parts") if k in old), None)
    if field is None:
        return False
    blocks, before = turn[field], old[field]
    return (
        isinstance(blocks, list)
        and isinstance(before, list)
        and blocks[: len(before)] == before
        and all(turn[k] == v for k, v in old.items() if k != field)
    )


def _cut(g: GrainDecision) -> int:
    return g.tokens_before - g.tokens_after


def _break_causes(summary: dict[str, Any]) -> str:
    """Where a replay's prefix breaks fell, for its summary line: at a compaction always, the
    other causes where there were some."""
    parts = [f"{summary['prefix_breaks_at_compaction']} at a compaction"]
    for key, what in (
        ("prefix_breaks_at_mark", "at the high-water mark"),
        ("prefix_breaks_at_media_limit", "at a media limit's step"),
        ("prefix_breaks_elsewhere", "elsewhere"),
    ):
        if summary[key]:
            parts.append(f"{summary[key]} {what}")
    return ", ".join(parts)


def middle_ellipsis(text: str, width: int) -> str:
    """``text`` cut in the middle to ``width`` characters, so that both ends stay visible."""
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return f"{text[:head]}…{text[len(text) - (width - 1 - head) :]}"


# -- tables ------------------------------------------------------------------------------------


#: The calls table's columns, in order.
_CALL_COLUMNS: Final = (
    "call",
    "msgs",
    "tokens",
    "%",
    "kept",
    "fold",
    "drop",
    "hist",
    "tool",
    "cmp",
    "ms",
)
#: The calls table's columns a narrow terminal goes without, the first first (the call, its
#: tokens and share of the budget, and the compactions always stay).
_NARROW_DROPS: Final = ("fold", "drop", "hist", "tool", "kept", "ms", "msgs")


def _calls_table(run: Run, console: Console) -> Table:
    """One row per model call; on a terminal too narrow for every column, the columns of
    :data:`_NARROW_DROPS` go (the caption names them) rather than every number being cut."""
    rows = [_call_cells(run, r) for r in run.rows]
    left_out: list[str] = []
    table = _calls_columns(run, rows, left_out)
    unbounded = console.options.update_width(1_000_000)  # the table's own width, uncut
    for name in _NARROW_DROPS:
        if Measurement.get(console, unbounded, table).maximum <= console.width:
            break
        left_out.append(name)
        table = _calls_columns(run, rows, left_out)
    # the title is wrapped to the table's width, which is often narrower than the terminal
    width = min(console.width, Measurement.get(console, console.options, table).maximum)
    what = [f"{run.name}: {len(run.transcript)} messages"]
    how = [run.model, run.provider, f"budget {run.budget:,}"]
    table.title = _title([what, how], width)
    return table


def _call_cells(run: Run, r: CallRow) -> dict[str, Text | str]:
    compacted = sum(c["messages"] for c in r.compactions)
    cmp: Text | str = Text(f"{compacted:,}", style="bold magenta") if compacted else ""
    if r.after_clear:
        cmp = Text("clear", style="bold cyan")
    return {
        "call": str(r.call),
        "msgs": str(r.messages),
        "tokens": f"{r.tokens:,}",
        "%": f"{100 * r.tokens / run.budget:.0f}",
        "kept": str(r.kept),
        "fold": str(r.folded),
        "drop": str(r.dropped),
        "hist": f"{r.windows.get('history', 0):,}",
        "tool": f"{r.windows.get('tool', 0):,}",
        "cmp": cmp,
        "ms": f"{r.ms:.0f}" if r.ms >= 10 else f"{r.ms:.1f}",
    }


def _calls_columns(run: Run, rows: list[dict[str, Text | str]], left_out: list[str]) -> Table:
    cleared = any(r.after_clear for r in run.rows)
    caption = (
        "kept/fold/drop: grains; hist, tool: tokens of those windows; "
        "cmp: messages compacted into mem.summary"
        + (
            "; clear: the recording emptied its conversation, a new session starts"
            if cleared
            else ""
        )
        + (f"; not shown (terminal too narrow): {', '.join(left_out)}" if left_out else "")
    )
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, caption=caption)
    names = [name for name in _CALL_COLUMNS if name not in left_out]
    for name in names:
        table.add_column(name, justify="right", no_wrap=True)
    for cells in rows:
        table.add_row(*(cells[name] for name in names))
    return table


def _title(groups: list[list[str]], width: int) -> str:
    """The parts of a title joined by `` · ``: one line if it fits ``width``, else a line per
    group (what was replayed, then how), broken between parts where a group is still too wide,
    so that no part (``budget 16,000``) is split between two lines unless it alone is wider."""
    whole = " · ".join(part for group in groups for part in group)
    if cell_len(whole) <= width:
        return whole
    lines: list[str] = []
    for group in groups:
        line = ""
        for part in group:
            joined = f"{line} · {part}" if line else part
            if line and cell_len(joined) > width:
                lines.append(line)
                joined = part
            line = joined
        lines.append(line)
    return "\n".join(lines)


def _cuts_table(run: Run, width: int) -> Table:
    """The largest cuts; on a terminal of ``width`` columns below 80, node ids are cut to a
    quarter of it (at least 12), so that the reasons keep room to be read."""
    node_width = NODE_WIDTH if width >= 80 else max(12, min(NODE_WIDTH, width // 4))
    table = Table(
        title="largest cuts (each grain at the call where it lost the most)",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    table.add_column("call", justify="right", no_wrap=True)
    table.add_column("node", no_wrap=True, max_width=node_width)
    table.add_column("tokens", justify="right", no_wrap=True)
    table.add_column("stage: reason [origin]", ratio=1)
    for call, g in run.largest_cuts():
        reason = Text(f"{g.stage}: " if g.stage else "", style="bold")
        reason.append(g.reason)
        if g.origin:
            reason.append(f" [{g.origin}]", style="dim")
        table.add_row(
            str(call),
            Text(middle_ellipsis(g.node_id, node_width)),
            f"{g.tokens_before:,}→{g.tokens_after:,}",
            reason,
        )
    return table


def _compactions_table(run: Run) -> Table:
    table = Table(
        title="compactions (older history summarized into mem.summary)",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    for col in ("call", "messages", "turns", "summary chars", "tokens after"):
        table.add_column(col, justify="right", no_wrap=True)
    for row, c in run.compactions():
        table.add_row(
            str(row.call),
            f"{c['messages']:,}",
            f"{len(c['turns']):,}",
            f"{c['summary_chars']:,}",
            f"{row.tokens:,}",
        )
    return table


def _summary_line(run: Run) -> Text:
    s = run.summary()
    peak = s["peak_tokens"]
    text = Text(
        f"{s['calls']} calls · peak {peak:,} tokens ({100 * peak / run.budget:.0f}% of "
        f"{run.budget:,}) · {s['compactions']} compactions · {s['seconds']:.1f} s\n"
        f"{s['prefix_breaks']} prefix breaks ({_break_causes(s)})"
        + (
            f"; {s['prefix_breaks_at_clear']} more where the recording cleared its conversation"
            if s["prefix_breaks_at_clear"]
            else ""
        )
        + "\n",
        style="bold",
    )
    if s["within_budget"]:
        text.append("every call within budget", style="bold green")
    else:
        over = sum(r.tokens > run.budget for r in run.rows)
        text.append(f"{over} calls over budget", style="bold red")
    return text


def _print(run: Run, console: Console) -> None:
    if run.sessions > 1:  # said first: the rest of the file is not in the table
        console.print(
            f"replaying session {run.session} of {run.sessions} in the file; "
            "--session N picks another"
        )
    console.print(_calls_table(run, console))
    if run.cuts:
        console.print(_cuts_table(run, console.width))
    if run.compactions():
        console.print(_compactions_table(run))
    console.print(_summary_line(run))


# -- running -----------------------------------------------------------------------------------


def _builtin_plugins() -> list[Any]:
    """The built-in plugins a replay runs with. The environment grain tells the time the replay
    started, on every call: a replay plays in seconds a session that took hours, and a clock
    that moved on between two calls would change the top of the prompt (a prefix break the
    replay would report, with nothing of the session's own in it)."""
    from datetime import datetime

    from .builtins import EnvInfoProvider, ToolResultCompressor

    started = datetime.now().astimezone()
    return [EnvInfoProvider(clock=lambda tz: started.astimezone(tz)), ToolResultCompressor()]


def _progress(console: Console, disable: bool) -> Progress:
    return Progress(
        TextColumn("replaying"),
        BarColumn(bar_width=30),
        MofNCompleteColumn(),
        TextColumn("messages · call {task.fields[call]}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=disable,
    )


async def _run(
    args: argparse.Namespace, name: str, transcript: Transcript, session: tuple[int, int] = (1, 1)
) -> Run:
    engine = ContextEngine(args.model, Budget(total=args.budget), plugins=_builtin_plugins())
    if args.plugins:
        engine.load_plugins(args.plugins)
    run = Run(name, transcript, args.model, args.provider, args.budget)
    run.session, run.sessions = session
    started = time.perf_counter()
    console = stderr_console()
    with _progress(console, disable=args.json or not console.is_terminal) as progress:
        task = progress.add_task("replay", total=len(transcript), call=0)
        async for step in replay(transcript, engine, provider=args.provider):
            run.add(step)
            progress.update(task, completed=step.position, call=step.call)
    run.seconds = time.perf_counter() - started
    return run


def _finish(
    args: argparse.Namespace, name: str, transcript: Transcript, session: tuple[int, int] = (1, 1)
) -> int:
    if not len(transcript):
        raise UsageError(f"{name}: the transcript has no messages; nothing to replay")
    _check_outputs(args)
    run = anyio.run(_run, args, name, transcript, session)
    _write_outputs(args, run)
    if args.json:
        print_json(run.to_dict())
    else:
        _print(run, stdout_console())
    return 0 if run.summary()["within_budget"] else 1


def _outputs(args: argparse.Namespace) -> list[tuple[str, Path]]:
    return [
        (f"--{flag}", Path(value))
        for flag in ("out", "report")
        if (value := getattr(args, flag, None))
    ]


def _check_outputs(args: argparse.Namespace) -> None:
    """Refuse an ``--out``/``--report`` path that cannot be written before the replay runs, so
    a bad one costs no replay and never leaves the other file written alone."""
    for flag in ("--out", "--report"):
        if getattr(args, flag[2:], None) == "":  # e.g. an unset shell variable: not "no --out"
            raise UsageError(f"{flag} '': the path is empty; expected a file path")
    paths = dict(_outputs(args))
    regular: set[str] = set()  # the flags whose path a new file replaces
    for flag, path in paths.items():
        folder = path.parent
        if path.is_dir():
            raise UsageError(f"{flag} {path}: is a folder; expected a file path")
        if not folder.is_dir():
            what = "is not a folder" if folder.exists() else "does not exist"
            raise UsageError(
                f"{flag} {path}: the folder {folder} {what}; expected a path in an existing folder"
            )
        descriptor = _descriptor_path(path)[1]
        if descriptor is not None:
            _check_descriptor(flag, path, descriptor)
        target = _regular_target(path)
        if target is not None:  # it is replaced by a file created beside it: try one now
            _probe(flag, path, target)
            regular.add(flag)
    out, report = paths.get("--out"), paths.get("--report")
    # (a device such as /dev/null, written through, takes both)
    if out and report and "--out" in regular and out.resolve() == report.resolve():
        raise UsageError(  # one would replace the other: the payload asked for would be lost
            f"--out {args.out} and --report {args.report} are the same file; expected two "
            "different paths"
        )


def _temporary(target: Path) -> Path:
    return target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def _probe(flag: str, path: Path, target: Path) -> None:
    """Create (and remove) a file beside ``target``, as the write will: a folder without write
    permission (or immutable, or on a read-only file system) is refused before the replay."""
    tmp = _temporary(target)
    with interrupts_held():  # a Ctrl-C meanwhile comes after the file is gone
        try:
            with open(tmp, "x", encoding="utf-8"):
                pass
        except OSError as exc:
            raise UsageError(
                f"{flag} {path}: no file can be created in {target.parent} "
                f"({exc.strerror or exc}); expected a path in a writable folder"
            ) from None
        tmp.unlink()


def _write_outputs(args: argparse.Namespace, run: Run) -> None:
    """Write ``--out`` and ``--report`` all or nothing: each to a temporary file in its folder
    (fsynced), then both renamed into place, so a failure (a full disk, a folder gone since)
    leaves neither a half-written file nor one of the pair alone."""
    outputs = _outputs(args)
    if run.last is None or not outputs:
        return
    rendered = run.last.rendered
    make = {
        "--out": lambda: json.dumps(rendered.payload, ensure_ascii=False, indent=1),
        "--report": lambda: rendered.report.to_json(indent=1),
    }
    texts = {flag: make[flag]() for flag, _ in outputs}  # only those asked for
    staged: list[tuple[Path, Path]] = []
    through: list[tuple[str, Path]] = []
    # A Ctrl-C while the temporary files are written stops before the renames (nothing
    # written); one during the renames or the cleanup comes after them (both written).
    with interrupts_held() as stop_if_interrupted:
        try:
            for flag, path in outputs:
                target = _regular_target(path)
                if target is None:  # a device, a pipe, a terminal: written through, as given
                    through.append((flag, path))
                    continue
                tmp = _temporary(target)
                staged.append((tmp, target))
                try:
                    with open(tmp, "x", encoding="utf-8") as f:
                        f.write(texts[flag])
                        f.flush()
                        os.fsync(f.fileno())
                except OSError as exc:  # named as the option, not as the temporary file
                    raise UsageError(
                        f"{flag} {path}: cannot write it ({exc.strerror or exc}); nothing written"
                    ) from None
                stop_if_interrupted()
            for tmp, target in staged:
                os.replace(tmp, target)
        finally:
            for tmp, _ in staged:
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()
    for flag, path in through:
        _write_through(path, texts[flag])


def _write_through(path: Path, text: str) -> None:
    """Write ``text`` to an output that is not replaced: one of this process's descriptors
    (``/dev/stdout``...) as the descriptor itself, at its offset, as a shell's ``>&1`` does
    (opening ``/dev/stdout`` anew, when stdout is redirected to a file, would empty that file
    and write over it from its start); anything else (a device, a pipe) opened as given."""
    descriptor = _descriptor_path(path)[1]
    if descriptor is None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return
    for stream in (sys.stdout, sys.stderr):  # what they hold goes first, as it came first
        if stream is not None:
            stream.flush()
    with open(os.dup(descriptor), "w", encoding="utf-8") as f:
        f.write(text)


def _descriptor_path(path: Path) -> tuple[bool, int | None]:
    """Whether ``path``, or a link on the way from it, names a file descriptor: a standard
    stream (``/dev/stdout``), ``/dev/fd/N`` or ``/proc/.../fd/N``, whatever file it leads to;
    and its number when it is one of this process's own (None for another process's)."""
    current = os.path.abspath(path)
    for _ in range(_MAX_LINKS):
        head, name = os.path.split(current)
        folder = os.path.realpath(head)
        hop = os.path.join(folder, name)
        if hop in _STREAMS:
            return True, _STREAMS[hop]
        found = _DESCRIPTORS.fullmatch(folder)
        if found and name.isdigit():
            pid = found.group("pid")
            return True, int(name) if pid is None or int(pid) == os.getpid() else None
        try:
            current = os.path.join(folder, os.readlink(hop))
        except OSError:  # no link (or none that can be read): the path ends here
            return False, None
    return False, None


def _check_descriptor(flag: str, path: Path, descriptor: int) -> None:
    """Refuse, before the replay, an output naming one of this process's descriptors that
    is not open (``/dev/fd/5`` with no descriptor 5, ``/dev/stdout`` with stdout closed)."""
    try:
        os.fstat(descriptor)
    except OSError:
        raise UsageError(
            f"{flag} {path}: file descriptor {descriptor} is not open; expected a path to a "
            "file, or to an open descriptor"
        ) from None


def _regular_target(path: Path) -> Path | None:
    """Where an output file is replaced atomically: ``path`` when nothing is there yet, the
    file a link leads to (the link stays), or None when it is not a regular file (a device
    such as ``/dev/null``, a pipe) or names a file descriptor (``/dev/stdout``, even when
    stdout is redirected to a regular file), which is written through instead of being
    replaced by a new file."""
    if _descriptor_path(path)[0]:
        return None
    if path.is_symlink():
        real = path.resolve()
        return real if real.is_file() else None
    if not path.exists():
        return path
    return path if path.is_file() else None


def _demo(args: argparse.Namespace) -> int:
    path = demo_transcript_path()
    return _finish(args, "demo session (Claude Code, MIT)", load(path))


def _named(file: str, exc: TranscriptError) -> TranscriptError:
    """``exc`` with the file it was read from named first (unless its message names it)."""
    text = str(exc)
    return exc if file in text or Path(file).name in text else TranscriptError(f"{file}: {text}")


def _replay(args: argparse.Namespace) -> int:
    path = Path(args.file)
    if not path.exists():
        raise UsageError(f"{args.file}: no such file; expected a transcript file")
    try:
        if path.is_dir():  # an OpenHands conversation folder, else load() names what it expected
            transcript = load(path, format=args.format)
            _check_session(args, 1)
            return _finish(args, path.name, transcript)
        sessions = load_all(path, format=args.format)
        if not sessions:  # load() says what was expected
            return _finish(args, path.name, load(path, format=args.format))
    except TranscriptError as exc:
        named = _named(args.file, exc)
        if named is exc:
            raise
        raise named from None
    _check_session(args, len(sessions))
    # by default the first session holding messages, as load() gives it (a launch of aider
    # quit before any input logs an empty one), named by its true number in the file
    number = args.session or first_session(sessions) + 1
    name = path.name if len(sessions) == 1 else f"{path.name} [{number}/{len(sessions)}]"
    return _finish(args, name, sessions[number - 1], (number, len(sessions)))


def _check_session(args: argparse.Namespace, sessions: int) -> None:
    if args.session is not None and args.session > sessions:
        raise UsageError(
            f"--session {args.session}: {args.file} holds {sessions} session(s); "
            f"expected 1 to {sessions}"
        )


def _session_arg(text: str) -> int:
    """``--session``: which session of a multi-session file, from 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a session number; expected an int ≥ 1")
    return value


# -- parsers -----------------------------------------------------------------------------------


def _common(p: Parser, budget: int) -> None:
    p.add_argument("--model", default="gpt-4o", help="model name (default: gpt-4o)")
    p.add_argument(
        "--budget",
        type=budget_arg,
        default=budget,
        help=f"input tokens per call (default {budget:,})",
    )
    p.add_argument(
        "--provider",
        default="openai",
        choices=PROVIDERS,
        metavar="P",
        help=f"request shape: {', '.join(PROVIDERS)} (default: openai)",
    )
    p.add_argument(
        "--plugins",
        metavar="DIR",
        type=given("a folder of plugin folders"),
        help="also load the plugin folders in DIR",
    )
    add_common(p, json_help="print every call, the largest cuts and the last report as JSON")


def add_to(commands: Any) -> None:
    """Add ``demo`` and ``replay`` to the command line."""
    demo: Parser = commands.add_parser(
        "demo",
        help="replay a bundled real agent session at a tight budget",
        description="Replay a bundled real Claude Code session (465 messages, 218 model calls) "
        f"through the engine with the built-in plugins at a {DEMO_BUDGET:,}-token budget, "
        "rendering before every model call: per-call composition, the largest cuts, every "
        "compaction and a summary. Exit status 1 if a call went over budget.",
    )
    _common(demo, DEMO_BUDGET)
    demo.set_defaults(run=_demo)
    rep: Parser = commands.add_parser(
        "replay",
        help="replay a recorded session file through the engine",
        description="Replay a recorded agent session (OpenAI, Responses, Anthropic, Gemini, "
        "pi/OpenClaw, Claude Code, SWE-agent, OpenHands or aider) like 'ctxengine demo'.",
    )
    rep.add_argument("file", metavar="FILE", type=given("a file name"), help="the session file")
    _common(rep, REPLAY_BUDGET)
    rep.add_argument(
        "--format",
        default="auto",
        choices=("auto", *FORMATS),
        metavar="FORMAT",
        help=f"file format: auto (the default, from extension and content), {', '.join(FORMATS)}",
    )
    rep.add_argument(
        "--session",
        type=_session_arg,
        default=None,
        metavar="N",
        help="which session of a file holding several (an aider log has one per launch, an "
        "OpenHands output one per instance), from 1 (default: the first holding messages)",
    )
    rep.add_argument("--out", metavar="F", help="write the last payload to F as JSON")
    rep.add_argument("--report", metavar="F", help="write the last report to F as JSON")
    rep.set_defaults(run=_replay)
    writes_files(rep, "--out", "--report")
