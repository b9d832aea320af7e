"""Inject (DESIGN.md §1, step 3): the plan becomes a provider request.

:mod:`.compose` (plan → neutral transcript), :mod:`.hygiene` (make it valid for the provider),
:mod:`.cache` (Anthropic prompt-cache breakpoints), :mod:`.adapters` (one exporter per provider
shape), :mod:`.render` (hygiene + breakpoints + adapter), :mod:`.payload` (payload tokens) and
:mod:`.turn` (the inject phase of a render).
"""
