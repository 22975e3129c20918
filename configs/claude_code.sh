# Claude Code: register tiermem for every project of this user (prints nothing on success).
claude mcp add tiermem --scope user -e TIERMEM_DATA_DIR=$HOME/.local/share/tiermem -- tiermem serve --agent default
