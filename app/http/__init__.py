"""HTTP, both ways: the service's one outbound client (`client.py` on `wire.py`, answers parsed
by llhttp), the connect guard and outbound rules (`netguard.py`, `outbound.py`), the server's
protocol with its head deadline and connection caps (`server.py`), the proxy headers a client
came through (`forwarded.py`) and the process's exit deadline (`exit_deadline.py`)."""
