"""The optional built-in Letta agent loop: LLM providers, the loop, the context window, sleep-time.

Nothing heavy is imported here; ``anthropic`` is imported only by ``agent.anthropic_provider``.
"""
