"""Process plumbing for ``tiermem serve``, apart from the MCP surface (``server/``): the listener for host hooks
(``hookserver.py``), the guard in front of the network transports (``netguard.py``) with its OAuth resource server
(``oauth.py``, settings in ``oauth_settings.py``), and the clean exit on a signal (``shutdown.py``)."""
