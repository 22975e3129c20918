"""Plain values and pure helpers: errors, settings, records, names, time expressions, chunking, heap controls,
the background opening of slow things. Imports nothing else of tiermem."""
