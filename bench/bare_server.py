"""The SDK's floor: a bare one-tool MCPServer over stdio (for cold-start comparison)."""

from mcp.server.mcpserver import MCPServer

server = MCPServer("bare")


@server.tool()
def echo(text: str) -> str:
    """Echo text back."""
    return text


if __name__ == "__main__":
    server.run("stdio")
