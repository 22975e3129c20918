"""The MCP surface: the server, its tools, resources, prompts, notifications, and the one
module (sdk.py) that reaches into the MCP SDK's private parts."""
