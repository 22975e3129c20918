"""The MCP surface: the server, its tools, resources, prompts, notifications, the HTTP guard, and the one
module (sdk.py) that reaches into the MCP SDK's private parts."""
