"""tiermem: MemGPT/Letta-style tiered memory for every MCP host.

Importing this package is cheap: it loads no storage engine, model or SDK.
"""

__version__ = "0.1.0"
