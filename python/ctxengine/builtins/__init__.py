"""Built-in plugins. None is registered by default; register the ones you want::

from ctxengine.builtins import EnvInfoProvider, ToolResultCompressor
engine.register(EnvInfoProvider())
engine.register(ToolResultCompressor())
"""

from __future__ import annotations

from typing import Final

from .env_info import EnvInfoProvider
from .knowledge_retriever import KnowledgeRetriever
from .legacy import LegacyPromptProvider, NodeOrderDiff, compare_node_order
from .memory import MemoryProvider
from .redaction import RedactionProvider, Redactor
from .session_archive import SessionArchiveProvider
from .tool_result_compressor import ToolResultCompressor
from .usage_audit import UsageAuditProvider

__all__ = (
    "BUILTINS",
    "EnvInfoProvider",
    "KnowledgeRetriever",
    "LegacyPromptProvider",
    "MemoryProvider",
    "NodeOrderDiff",
    "RedactionProvider",
    "Redactor",
    "SessionArchiveProvider",
    "ToolResultCompressor",
    "UsageAuditProvider",
    "compare_node_order",
)

BUILTINS: Final[dict[str, type]] = {
    "env_info": EnvInfoProvider,
    "knowledge_retriever": KnowledgeRetriever,
    "tool_result_compressor": ToolResultCompressor,
    "redaction": RedactionProvider,
    "usage_audit": UsageAuditProvider,
    "session_archive": SessionArchiveProvider,
    "legacy": LegacyPromptProvider,
    "memory": MemoryProvider,
}
"""Plugin name -> class of every built-in plugin."""
