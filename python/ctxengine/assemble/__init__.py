"""Assemble (DESIGN.md §1, step 2): budget, history items, the trim ladder's step 0 (guard),
the typed boundary to the Rust :class:`~ctxengine._core.Assembly` (:mod:`.core`), the turn
pipeline (:mod:`.pipeline`) and the render report (:mod:`.report`)."""
