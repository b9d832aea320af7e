"""Example plugin: the team's workspace rules as one grain, loaded by `load_plugins`.

No base class: the engine only needs `name`, `version`, `priority`, `enabled` and an async
`collect`. The manifest beside this file provides name, version and priority; the class may
repeat them (they must agree) or leave them out.
"""

from __future__ import annotations

from pathlib import Path

from ctxengine.events import UserMessage, current_bus
from ctxengine.grain import ContextGrain

RULES_FILE = Path(__file__).with_name("rules.md")


class WorkspaceRules:
    name = "workspace_rules"
    version = "1.0.0"
    priority = 20
    enabled = True

    def __init__(self) -> None:
        self.rules = RULES_FILE.read_text(encoding="utf-8").strip()

    async def collect(self, scene):
        # lifespan "session": the rules stay for the whole session (never leak to another).
        return [
            ContextGrain(
                node_id="sys.workspace_rules",
                content=f"Workspace rules:\n{self.rules}",
                priority=self.priority,
                lifespan="session",
            )
        ]

    async def on_user_msg(self, event: UserMessage):
        # Tell other plugins when the user asks about the rules (custom bus event).
        if "rule" in event.user_message.lower():
            await current_bus().emit("rules.mentioned", event.user_message)
        return None
