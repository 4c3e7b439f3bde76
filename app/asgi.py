"""The ASGI entry point for uvicorn: `uvicorn app.asgi:app`."""

from app.main import create_app

app = create_app(tune_gc=True)  # this process serves the app alone (app/kit/heap.py)
