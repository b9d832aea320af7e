"""Drop-ins for agent frameworks (optional extras; DESIGN.md §11).

- :mod:`ctxengine.integrations.langchain` (``pip install 'ctxengine[langchain]'``):
  ``trim_messages`` and ``ContextMiddleware`` for LangChain v1 agents.
- :mod:`ctxengine.integrations.openai_agents` (``pip install 'ctxengine[agents]'``): a session
  for the OpenAI Agents SDK and ``fit_model_input`` for ``RunConfig(call_model_input_filter=)``.

Importing this package imports neither framework; each submodule imports its own.
"""

from __future__ import annotations

__all__: tuple[str, ...] = ()
