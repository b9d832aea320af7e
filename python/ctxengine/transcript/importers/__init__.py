"""Importers: real agent logs (Claude Code, pi, aider, SWE-agent/OpenHands) and provider request
shapes (OpenAI Chat, OpenAI Responses, Anthropic, Gemini) read into the neutral model."""
