"""Exporters: a neutral transcript as an OpenAI Chat, OpenAI Responses, Anthropic or Gemini body."""
