"""Importers: real agent logs (Claude Code, pi, aider, SWE-agent, OpenHands V0 and V1) and
provider request shapes (OpenAI Chat, OpenAI Responses, Anthropic, Gemini) read into the
neutral model."""
