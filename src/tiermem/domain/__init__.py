"""The domain: block edit rules, briefing, ranking, token budgets, the archive (recall and archival memory) and
Memory, the facade every surface uses; the factory that builds it and the maintenance that inspects it."""
