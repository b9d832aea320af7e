"""Gemini thought signatures are opaque, like Anthropic's thinking signatures: the payload
counter read them as text (a 4 KB signature ~3,000 tokens) while the plan did not, so the
render's re-plans cut a short agent loop down to its last question, with no summary."""

from __future__ import annotations

import base64
import random

from ctxengine import fit
from ctxengine.inject.payload import payload_tokens


def _loop(signed: bool) -> list[dict[str, object]]:
    rnd = random.Random(1)
    contents: list[dict[str, object]] = [{"role": "user", "parts": [{"text": "fix the build"}]}]
    for i in range(8):
        call: dict[str, object] = {"functionCall": {"id": f"c{i}", "name": "run", "args": {"i": i}}}
        if signed:
            call["thoughtSignature"] = base64.b64encode(rnd.randbytes(3000)).decode()
        response = {"id": f"c{i}", "name": "run", "response": {"output": f"step {i} ok"}}
        contents.append({"role": "model", "parts": [call]})
        contents.append({"role": "user", "parts": [{"functionResponse": response}]})
    contents.append({"role": "user", "parts": [{"text": "status?"}]})
    return contents


def test_a_signed_loop_is_counted_as_the_unsigned_one_and_kept_whole() -> None:
    plain = fit(_loop(False), model="gemini-2.5-pro", budget=4000, provider="gemini")
    signed = fit(_loop(True), model="gemini-2.5-pro", budget=4000, provider="gemini")
    assert signed.tokens == plain.tokens < 1000
    assert len(signed.payload["contents"]) == len(_loop(True)) - 1  # the last two users merged
    assert all(d.decision == "kept" for d in signed.report)
    sigs = [p for c in signed.payload["contents"] for p in c["parts"] if "thoughtSignature" in p]
    assert len(sigs) == 8  # sent as they came


def test_the_payload_counter_skips_both_signature_keys() -> None:
    part = {"functionCall": {"name": "run", "args": {}}}
    base = payload_tokens(
        {"contents": [{"role": "model", "parts": [part]}]}, "gemini", "gemini-2.5-pro"
    )
    for key in ("thoughtSignature", "thought_signature"):
        signed = {**part, key: "QUJD" * 500}
        payload = {"contents": [{"role": "model", "parts": [signed]}]}
        assert payload_tokens(payload, "gemini", "gemini-2.5-pro") == base
