"""Search: one room for what every search of recall, archival memory and folders' files shares.

- ``query``: the query's analysis, made once per search (``Query``: its words, the names it mentions and the text
  without them, the periods it names, what it asks, the clock) and passed down;
- ``timeexpr``: time expressions in text resolved to periods;
- ``ranking``: the candidates both legs found, their cheap features, the fitted linear ``Ranker`` and the
  ``Calibration`` of a hit's relevance;
- ``sittings``: a conversation's sittings as BM25 documents (recall's sitting index);
- ``pool``: how deep the legs read and which candidates are ranked;
- ``kinds``: each searchable kind's profile (``Kind``: its ranker, calibration and what it does its own way).

Pure: the reads and the legs are ``domain/archive.py``'s and ``store/search.py``'s.
"""
