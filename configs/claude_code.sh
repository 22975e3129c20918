# Claude Code: register tiermem and its hooks for every project of this user (user scope). Written with the absolute
# path of the tiermem that runs it and the data directory spelled out; `tiermem config claude-code` shows it first.
tiermem setup claude-code --agent default
# Only this project (.mcp.json, .claude/settings.json, and your approval in .claude/settings.local.json):
tiermem setup claude-code --agent default --scope project
# Undo (removes exactly what setup added):
tiermem setup claude-code --uninstall
