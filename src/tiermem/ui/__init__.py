"""The memory inspector: a local web page to see, search, fix and undo memory (``tiermem ui``, ``/ui``).

``api`` holds the operations (over ``Memory``), ``app`` the HTTP surface, ``launch`` the wiring used by
the CLI; the page itself is plain HTML, CSS and JavaScript in ``static/``, shipped inside the package.
"""
